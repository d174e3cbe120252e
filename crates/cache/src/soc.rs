//! Small-object cache (SOC): set-associative over fixed-size buckets, like CacheLib's BigHash.
//!
//! A uniform hash of the key picks the bucket; each bucket has a 64-bit Bloom filter in DRAM
//! (rebuilt from the bucket's keys whenever the bucket is written, so it has no false
//! negatives) and keeps its items in insertion order, evicting the oldest first. Every insert
//! or delete is a read-modify-write of the whole bucket on the device; a lookup reads the
//! bucket unless its Bloom filter rules the key out.
//!
//! The bucket contents live in a compact DRAM index ([`crate::buckets`]: a fingerprint and a
//! size per item, at most `bucket_slots` per bucket): in metadata-only mode it mirrors what
//! the bucket on flash holds. In data-backed mode (see [`Soc::enable_data`]) the bucket on the
//! device really holds the items (format in [`crate::item`]): every read parses it and asserts
//! it agrees with the index, and every change rewrites it; the index and the filter stay the
//! DRAM index, as in metadata mode.

use serde::{Deserialize, Serialize};

use crate::buckets::{fingerprint, BucketIndex};
use crate::error::Result;
use crate::flash::Flash;
use crate::hash::{fast_range, mix64};
use crate::item::{self, Item, BUCKET_HEADER_BYTES, ITEM_HEADER_BYTES};
use crate::placement::PlacementHandle;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocStats {
    pub lookups: u64,
    pub bloom_rejects: u64,
    pub hits: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub removes: u64,
    pub bucket_reads: u64,
    pub bucket_writes: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Soc {
    pub start_byte: u64,
    pub buckets: u64,
    pub bucket_bytes: u32,
    overhead: u32,
    pub handle: PlacementHandle,
    index: BucketIndex,
    pub stats: SocStats,
    /// Bucket buffers of a data-backed SOC (None: metadata-only; not in checkpoints).
    #[serde(skip)]
    data: Option<Box<SocData>>,
}

/// A data-backed SOC's buffers: the bucket as read, the bucket to write, its items' places.
struct SocData {
    rd: Vec<u8>,
    wr: Vec<u8>,
    ents: Vec<(u32, u32)>,
}

impl Soc {
    pub fn new(start_byte: u64, buckets: u64, bucket_bytes: u32, slots: u32, hashes: u32, overhead: u32, handle: PlacementHandle) -> Soc {
        assert!(slots > 0 && slots <= 255 && bucket_bytes <= u16::MAX as u32 + 1);
        Soc {
            start_byte,
            buckets,
            bucket_bytes,
            overhead,
            handle,
            index: BucketIndex::new(buckets, slots, hashes),
            stats: SocStats::default(),
            data: None,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.buckets * self.bucket_bytes as u64
    }

    #[inline]
    pub fn bucket_of(&self, key: u64) -> u64 {
        fast_range(mix64(key ^ 0x2545_f491_4f6c_dd1d), self.buckets)
    }

    #[inline]
    fn offset(&self, b: u64) -> u64 {
        self.start_byte + b * self.bucket_bytes as u64
    }

    /// Start loading `key`'s bucket in the index (a hint): its state, or with `items` (once its
    /// state is cached) its items. Returns the bucket's byte offset on the device, if the SOC
    /// has buckets, so the caller may prefetch the device's map too.
    #[inline]
    pub fn prefetch(&self, key: u64, items: bool) -> Option<u64> {
        if self.buckets == 0 {
            return None;
        }
        let b = self.bucket_of(key);
        if items {
            self.index.prefetch_items(b as usize);
        } else {
            self.index.prefetch(b as usize);
        }
        Some(self.offset(b))
    }

    /// Whether the bucket's Bloom filter admits `key` (false = certainly absent).
    #[inline]
    pub fn may_contain(&self, key: u64) -> bool {
        if self.buckets == 0 {
            return false;
        }
        self.index.may_contain(self.bucket_of(key) as usize, fingerprint(key))
    }

    fn find(&self, b: usize, key: u64) -> Option<usize> {
        self.index.find(b, fingerprint(key))
    }

    /// Look `key` up: Some((item bytes, expiry)) on a hit. Reads the bucket unless the Bloom filter
    /// rules the key out; an expired item is a miss (it stays until pushed out).
    pub fn lookup(&mut self, key: u64, now_s: u32, flash: &mut Flash) -> Result<Option<(u32, u32)>> {
        self.stats.lookups += 1;
        if !self.may_contain(key) {
            self.stats.bloom_rejects += 1;
            return Ok(None);
        }
        let b = self.bucket_of(key);
        flash.read(self.offset(b), self.bucket_bytes as u64)?;
        self.stats.bucket_reads += 1;
        let b = b as usize;
        let Some(i) = self.find(b, key) else { return Ok(None) };
        let (_, size, e) = self.index.get(b, i);
        if e != 0 && e <= now_s {
            return Ok(None);
        }
        self.stats.hits += 1;
        Ok(Some((size - self.overhead, e)))
    }

    /// Insert `key` with `item_bytes` (key + value): read the bucket, drop an older copy and
    /// the oldest items until it fits, append, write the bucket back. Returns the number of
    /// items evicted.
    pub fn insert(&mut self, key: u64, item_bytes: u32, expiry_s: u32, flash: &mut Flash) -> Result<u32> {
        let size = item_bytes + self.overhead;
        assert!(size <= self.bucket_bytes, "SOC item of {item_bytes} bytes exceeds the bucket (the cache routes it to the LOC)");
        let bo = self.bucket_of(key);
        flash.read(self.offset(bo), self.bucket_bytes as u64)?;
        self.stats.bucket_reads += 1;
        let b = bo as usize;
        if let Some(i) = self.find(b, key) {
            self.index.remove_at(b, i);
        }
        let mut evicted = 0;
        while self.index.full(b) || self.index.used(b) + size > self.bucket_bytes {
            self.index.remove_at(b, 0); // FIFO: the oldest item is first
            evicted += 1;
        }
        self.index.push(b, fingerprint(key), size, expiry_s);
        self.index.settle(b);
        flash.write(self.offset(bo), self.bucket_bytes as u64, self.handle)?;
        self.stats.bucket_writes += 1;
        self.stats.inserts += 1;
        self.stats.evictions += evicted as u64;
        Ok(evicted)
    }

    /// Delete `key`: if the Bloom filter admits it, read the bucket; if present, rewrite the
    /// bucket without it. True if an item was removed.
    pub fn remove(&mut self, key: u64, flash: &mut Flash) -> Result<bool> {
        if !self.may_contain(key) {
            return Ok(false);
        }
        let bo = self.bucket_of(key);
        flash.read(self.offset(bo), self.bucket_bytes as u64)?;
        self.stats.bucket_reads += 1;
        let b = bo as usize;
        let Some(i) = self.find(b, key) else { return Ok(false) };
        self.index.remove_at(b, i);
        self.index.settle(b);
        flash.write(self.offset(bo), self.bucket_bytes as u64, self.handle)?;
        self.stats.bucket_writes += 1;
        self.stats.removes += 1;
        Ok(true)
    }

    /// Fingerprints ([`crate::buckets::fingerprint`]) of bucket `b`'s keys, oldest first (tests).
    pub fn bucket_fingerprints(&self, b: u64) -> Vec<u32> {
        self.index.fingerprints(b as usize)
    }

    /// DRAM bytes of the SOC's index (Bloom filters and the bucket index) now.
    pub fn dram_bytes(&self) -> u64 {
        self.index.memory_bytes()
    }

    /// DRAM bytes the index of `buckets` buckets of at most `slots` items will hold when each
    /// holds `items_per_bucket` on average (with expiries if `ttl`).
    pub fn estimate_dram_bytes(buckets: u64, slots: u32, items_per_bucket: f64, ttl: bool) -> u64 {
        BucketIndex::estimate_bytes(buckets, slots, items_per_bucket, ttl)
    }
}

/// Data-backed mode: the same index operations as above, with the bucket's bytes read from
/// and written to the device.
impl Soc {
    /// Keep real items in the buckets from now on (the SOC must be empty): per-item header of
    /// [`ITEM_HEADER_BYTES`], bucket header of [`BUCKET_HEADER_BYTES`].
    pub fn enable_data(&mut self) {
        assert!(self.items() == 0, "enable_data on an SOC holding items");
        assert!(self.bucket_bytes > BUCKET_HEADER_BYTES + ITEM_HEADER_BYTES);
        self.overhead = ITEM_HEADER_BYTES;
        let n = self.bucket_bytes as usize;
        self.data = Some(Box::new(SocData { rd: vec![0; n], wr: vec![0; n], ents: Vec::with_capacity(256) }));
    }

    pub fn data_backed(&self) -> bool {
        self.data.is_some()
    }

    /// Bytes of a bucket that items can use.
    fn item_capacity(&self) -> u32 {
        self.bucket_bytes - if self.data.is_some() { BUCKET_HEADER_BYTES } else { 0 }
    }

    /// Items held (all buckets).
    pub fn items(&self) -> u64 {
        (0..self.buckets as usize).map(|b| self.index.count(b) as u64).sum()
    }

    /// Read bucket `b` into the read buffer and parse it. The device's bytes must agree with
    /// the index (count, bytes used, and each item's key hash, size and expiry, in order).
    fn load_bucket(&mut self, b: u64, flash: &mut Flash) -> Result<()> {
        let off = self.offset(b);
        let d = self.data.as_mut().expect("data-backed SOC");
        flash.read_into(off, &mut d.rd)?;
        self.stats.bucket_reads += 1;
        if let Err(e) = item::parse_bucket(&d.rd, b, &mut d.ents) {
            panic!("SOC bucket {b}: device bytes do not parse: {e}");
        }
        let bi = b as usize;
        assert_eq!(d.ents.len(), self.index.count(bi), "SOC bucket {b}: item count on the device != index");
        let used: u32 = d.ents.iter().map(|e| e.1).sum();
        assert_eq!(used, self.index.used(bi), "SOC bucket {b}: bytes used on the device != index");
        for (i, &(o, len)) in d.ents.iter().enumerate() {
            let v = item::decode(&d.rd[o as usize..]).expect("parsed above");
            let (fp, size, expiry) = self.index.get(bi, i);
            assert!(
                fingerprint(v.hash) == fp && len == size && v.expiry_s == expiry,
                "SOC bucket {b} item {i}: device (hash {:#x}, {} B, expiry {}) != index (fingerprint {fp:#x}, {size} B, expiry {expiry})",
                v.hash,
                len,
                v.expiry_s,
            );
        }
        Ok(())
    }

    /// Build the write buffer from the surviving items of the read buffer (`keep`, in order),
    /// plus `new` at the end, and write it to bucket `b`.
    fn store_bucket(&mut self, b: u64, keep: &[(u32, u32)], new: Option<(u64, &Item)>, flash: &mut Flash) -> Result<()> {
        let off = self.offset(b);
        let bi = b as usize;
        let d = self.data.as_mut().expect("data-backed SOC");
        d.wr.fill(0);
        let mut at = BUCKET_HEADER_BYTES as usize;
        for &(o, len) in keep {
            let (o, len) = (o as usize, len as usize);
            d.wr[at..at + len].copy_from_slice(&d.rd[o..o + len]);
            at += len;
        }
        if let Some((hash, it)) = new {
            let n = it.stored_bytes() as usize;
            item::encode(hash, it, &mut d.wr[at..at + n]);
            at += n;
        }
        let used = (at - BUCKET_HEADER_BYTES as usize) as u32;
        let count = self.index.count(bi);
        assert_eq!((count, used), (keep.len() + new.is_some() as usize, self.index.used(bi)), "SOC bucket {b}: image != index");
        item::seal_bucket(&mut d.wr, b, count as u16, used as u16);
        flash.write_data(off, &d.wr, self.handle)?;
        self.stats.bucket_writes += 1;
        Ok(())
    }

    /// Look `key` (hash `hash`) up: the item if its bucket holds it with this very key and it
    /// has not expired. Reads the bucket unless the Bloom filter rules the hash out.
    pub fn lookup_item(&mut self, hash: u64, key: &[u8], now_s: u32, flash: &mut Flash) -> Result<Option<Item>> {
        self.stats.lookups += 1;
        if !self.may_contain(hash) {
            self.stats.bloom_rejects += 1;
            return Ok(None);
        }
        let b = self.bucket_of(hash);
        self.load_bucket(b, flash)?;
        let Some(i) = self.find(b as usize, hash) else { return Ok(None) };
        let d = self.data.as_ref().expect("data-backed SOC");
        let v = item::decode(&d.rd[d.ents[i].0 as usize..]).expect("parsed by load_bucket");
        if v.key != key || (v.expiry_s != 0 && v.expiry_s <= now_s) {
            return Ok(None); // another key with the same hash, or expired
        }
        self.stats.hits += 1;
        Ok(Some(v.to_item()))
    }

    /// Insert `it` under `hash`: read the bucket, drop an item of the same hash and the oldest
    /// items until it fits, write the bucket back. Returns the number of items evicted.
    pub fn insert_item(&mut self, hash: u64, it: &Item, flash: &mut Flash) -> Result<u32> {
        let size = it.stored_bytes();
        assert!(size <= self.item_capacity() as u64, "SOC item of {size} bytes exceeds the bucket (the cache routes it to the LOC)");
        let size = size as u32;
        let bo = self.bucket_of(hash);
        self.load_bucket(bo, flash)?;
        let b = bo as usize;
        let mut keep = std::mem::take(&mut self.data.as_mut().expect("data-backed SOC").ents);
        if let Some(i) = self.find(b, hash) {
            self.index.remove_at(b, i);
            keep.remove(i);
        }
        let mut evicted = 0;
        while self.index.full(b) || self.index.used(b) + size > self.item_capacity() {
            self.index.remove_at(b, 0);
            keep.remove(0);
            evicted += 1;
        }
        self.index.push(b, fingerprint(hash), size, it.expiry_s);
        self.index.settle(b);
        let r = self.store_bucket(bo, &keep, Some((hash, it)), flash);
        self.data.as_mut().expect("data-backed SOC").ents = keep;
        r?;
        self.stats.inserts += 1;
        self.stats.evictions += evicted as u64;
        Ok(evicted)
    }

    /// Delete the item of `hash` (whatever its key: a set of a colliding key replaces it).
    /// True if an item was removed.
    pub fn remove_item(&mut self, hash: u64, flash: &mut Flash) -> Result<bool> {
        if !self.may_contain(hash) {
            return Ok(false);
        }
        let bo = self.bucket_of(hash);
        self.load_bucket(bo, flash)?;
        let b = bo as usize;
        let Some(i) = self.find(b, hash) else { return Ok(false) };
        let mut keep = std::mem::take(&mut self.data.as_mut().expect("data-backed SOC").ents);
        self.index.remove_at(b, i);
        keep.remove(i);
        self.index.settle(b);
        let r = self.store_bucket(bo, &keep, None, flash);
        self.data.as_mut().expect("data-backed SOC").ents = keep;
        r?;
        self.stats.removes += 1;
        Ok(true)
    }

    /// Whether the index holds `hash` (no I/O, expiry ignored; tests).
    pub fn holds(&self, hash: u64) -> bool {
        self.buckets > 0 && self.find(self.bucket_of(hash) as usize, hash).is_some()
    }

    /// Read every bucket and check it against the index (the checks of every data-backed
    /// read). Returns the items seen.
    pub fn verify_data(&mut self, flash: &mut Flash) -> Result<u64> {
        let mut n = 0;
        for b in 0..self.buckets {
            self.load_bucket(b, flash)?;
            n += self.index.count(b as usize) as u64;
        }
        Ok(n)
    }
}
