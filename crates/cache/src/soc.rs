//! Small-object cache (SOC): set-associative over fixed-size buckets, like CacheLib's BigHash.
//!
//! A uniform hash of the key picks the bucket; each bucket has a 64-bit Bloom filter in DRAM
//! (rebuilt from the bucket's keys whenever the bucket is written, so it has no false
//! negatives) and keeps its items in insertion order, evicting the oldest first. Every insert
//! or delete is a read-modify-write of the whole bucket on the device; a lookup reads the
//! bucket unless its Bloom filter rules the key out.
//!
//! The bucket contents live in flat arrays (`bucket_slots` per bucket): in metadata-only mode
//! these mirror what the bucket on flash holds.

use crate::error::Result;
use crate::flash::Flash;
use crate::hash::{fast_range, mix64};
use crate::placement::PlacementHandle;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
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

pub struct Soc {
    pub start_byte: u64,
    pub buckets: u64,
    pub bucket_bytes: u32,
    slots: u32,
    hashes: u32,
    overhead: u32,
    pub handle: PlacementHandle,
    bloom: Vec<u64>,
    /// Per bucket: item count and bytes used.
    count: Vec<u8>,
    used: Vec<u16>,
    keys: Vec<u64>,
    sizes: Vec<u16>,
    expiry: Vec<u32>,
    pub stats: SocStats,
}

#[inline]
fn bloom_mask(key: u64, hashes: u32) -> u64 {
    let h = mix64(key ^ 0x5bd1_e995_7f4a_7c15);
    let mut m = 0u64;
    for i in 0..hashes {
        m |= 1u64 << ((h >> (6 * i)) & 63);
    }
    m
}

impl Soc {
    pub fn new(start_byte: u64, buckets: u64, bucket_bytes: u32, slots: u32, hashes: u32, overhead: u32, handle: PlacementHandle) -> Soc {
        assert!(slots > 0 && slots <= 255 && bucket_bytes <= u16::MAX as u32 + 1);
        let n = buckets as usize;
        let s = n * slots as usize;
        Soc {
            start_byte,
            buckets,
            bucket_bytes,
            slots,
            hashes,
            overhead,
            handle,
            bloom: vec![0; n],
            count: vec![0; n],
            used: vec![0; n],
            keys: vec![0; s],
            sizes: vec![0; s],
            expiry: vec![0; s],
            stats: SocStats::default(),
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

    /// Whether the bucket's Bloom filter admits `key` (false = certainly absent).
    #[inline]
    pub fn may_contain(&self, key: u64) -> bool {
        if self.buckets == 0 {
            return false;
        }
        let m = bloom_mask(key, self.hashes);
        self.bloom[self.bucket_of(key) as usize] & m == m
    }

    fn find(&self, b: usize, key: u64) -> Option<usize> {
        let base = b * self.slots as usize;
        (0..self.count[b] as usize).find(|&i| self.keys[base + i] == key)
    }

    fn remove_at(&mut self, b: usize, i: usize) {
        let base = b * self.slots as usize;
        let n = self.count[b] as usize;
        self.used[b] -= self.sizes[base + i];
        self.keys.copy_within(base + i + 1..base + n, base + i);
        self.sizes.copy_within(base + i + 1..base + n, base + i);
        self.expiry.copy_within(base + i + 1..base + n, base + i);
        self.count[b] -= 1;
    }

    fn rebuild_bloom(&mut self, b: usize) {
        let base = b * self.slots as usize;
        let mut m = 0;
        for i in 0..self.count[b] as usize {
            m |= bloom_mask(self.keys[base + i], self.hashes);
        }
        self.bloom[b] = m;
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
        let j = b * self.slots as usize + i;
        let e = self.expiry[j];
        if e != 0 && e <= now_s {
            return Ok(None);
        }
        self.stats.hits += 1;
        Ok(Some((self.sizes[j] as u32 - self.overhead, e)))
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
            self.remove_at(b, i);
        }
        let mut evicted = 0;
        while self.count[b] as u32 == self.slots || self.used[b] as u32 + size > self.bucket_bytes {
            self.remove_at(b, 0); // FIFO: the oldest item is first
            evicted += 1;
        }
        let j = b * self.slots as usize + self.count[b] as usize;
        self.keys[j] = key;
        self.sizes[j] = size as u16;
        self.expiry[j] = expiry_s;
        self.count[b] += 1;
        self.used[b] += size as u16;
        self.rebuild_bloom(b);
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
        self.remove_at(b, i);
        self.rebuild_bloom(b);
        flash.write(self.offset(bo), self.bucket_bytes as u64, self.handle)?;
        self.stats.bucket_writes += 1;
        self.stats.removes += 1;
        Ok(true)
    }

    /// Keys of bucket `b`, oldest first (tests).
    pub fn bucket_keys(&self, b: u64) -> Vec<u64> {
        let base = b as usize * self.slots as usize;
        self.keys[base..base + self.count[b as usize] as usize].to_vec()
    }

    /// DRAM bytes of the SOC's index (Bloom filters and bucket mirrors).
    pub fn dram_bytes(&self) -> u64 {
        self.buckets * (8 + 3) + self.keys.len() as u64 * (8 + 2 + 4)
    }
}
