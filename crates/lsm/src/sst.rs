//! SSTables: sorted runs of entries in data blocks, with an index and a Bloom filter.
//!
//! File layout: `data blocks | filter | index | properties | footer`. The filter is a
//! fastbloom bit vector over the file's user keys (`u32 hashes | u64 words`); the index has
//! the last key, offset and length of every block; the properties hold counts, the oldest
//! tombstone's time (FADE's per-file age) and the key range; the footer (36 bytes) locates
//! them: `u64 filter | u64 index | u64 properties | u64 magic | u32 crc32`.
//! An open table keeps its index, filter and properties in memory; data blocks are read
//! from the device.

use fastbloom::BloomFilter;

use crate::config::Compression;
use crate::error::{Error, Result};
use crate::format::{cmp_internal, decode_entry, get_varint, open_block, put_entry, put_varint, seal_block, seal_tail, Kind};

pub type FileId = u64;

const MAGIC: u64 = 0x7373_646c_6162_4c53; // "SLbalds s"
const FOOTER: usize = 36;
const BLOOM_SEED: u128 = 0x5eed_b100_f11e_0000_0000_0000_0000_0017;

#[derive(Debug, Clone)]
pub struct IndexEntry {
    pub last_key: Vec<u8>,
    pub offset: u64,
    pub len: u32,
}

/// An SSTable's in-memory handle.
#[derive(Debug)]
pub struct Table {
    pub id: FileId,
    /// Bytes of the file on flash (data, filter, index, properties, footer).
    pub size_bytes: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub entries: u64,
    pub tombstones: u64,
    /// Sum of key and value bytes of the puts (for compensated sizes).
    pub put_bytes: u64,
    /// Time of the oldest tombstone held (FADE's file age), if any.
    pub oldest_tombstone_ns: Option<u64>,
    pub created_ns: u64,
    pub index: Vec<IndexEntry>,
    /// `index`'s last keys as probes (see `KeyProbes`): what a lookup's binary search reads.
    probes: KeyProbes,
    filter: BloomFilter,
}

/// The index's last keys for a cache-friendly binary search: every key of a table shares the
/// common prefix of its smallest and largest key (`cp` bytes), and the next 8 bytes of each
/// last key, big-endian and zero-padded, sit in one array. Padding keeps the byte order (a
/// smaller probe means a smaller key); equal probes fall back to the whole keys.
#[derive(Debug, Default)]
struct KeyProbes {
    cp: usize,
    probe: Vec<u64>,
}

impl KeyProbes {
    fn new(index: &[IndexEntry], smallest: &[u8], largest: &[u8]) -> KeyProbes {
        let cp = smallest.iter().zip(largest).take_while(|(a, b)| a == b).count();
        KeyProbes { cp, probe: index.iter().map(|e| probe_of(&e.last_key, cp)).collect() }
    }
}

#[inline]
fn probe_of(key: &[u8], cp: usize) -> u64 {
    let tail = key.get(cp..).unwrap_or(&[]);
    let mut b = [0u8; 8];
    let n = tail.len().min(8);
    b[..n].copy_from_slice(&tail[..n]);
    u64::from_be_bytes(b)
}

fn template_filter() -> BloomFilter {
    BloomFilter::with_num_bits(64).seed(&BLOOM_SEED).hashes(1)
}

impl Table {
    /// A table's metadata without contents, for the compaction policies' tests: `entries`
    /// entries of which `tombstones` are deletes, the oldest written at `oldest_tombstone_ns`.
    #[cfg(test)]
    pub(crate) fn metadata_only(
        id: FileId,
        range: (&[u8], &[u8]),
        size_bytes: u64,
        entries: u64,
        tombstones: u64,
        oldest_tombstone_ns: Option<u64>,
    ) -> Table {
        Table {
            id,
            size_bytes,
            smallest: range.0.to_vec(),
            largest: range.1.to_vec(),
            entries,
            tombstones,
            put_bytes: (entries - tombstones) * 100,
            oldest_tombstone_ns,
            created_ns: 0,
            index: Vec::new(),
            probes: KeyProbes::default(),
            filter: template_filter(),
        }
    }

    /// Whether `key` may be in the table (key range, then the Bloom filter).
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        key >= self.smallest.as_slice() && key <= self.largest.as_slice() && self.filter.contains(key)
    }

    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest.as_slice() <= hi && self.largest.as_slice() >= lo
    }

    /// The first block that may hold `key`.
    pub fn block_for(&self, key: &[u8]) -> Option<usize> {
        let cp = self.probes.cp;
        let i = if key.len() >= cp && key[..cp] == self.smallest[..cp] {
            // The key shares the table's prefix: search the probes, then the whole keys
            // only among blocks whose probe equals the key's.
            let q = probe_of(key, cp);
            let mut i = self.probes.probe.partition_point(|&p| p < q);
            while i < self.index.len() && self.probes.probe[i] == q && self.index[i].last_key.as_slice() < key {
                i += 1;
            }
            i
        } else {
            self.index.partition_point(|e| e.last_key.as_slice() < key)
        };
        (i < self.index.len()).then_some(i)
    }

    /// Bytes of the data blocks (the prefix of the file compactions read).
    pub fn data_bytes(&self) -> u64 {
        self.index.last().map_or(0, |e| e.offset + e.len as u64)
    }

    /// Parse a whole file read back from flash (recovery, tests).
    pub fn open(id: FileId, bytes: &[u8], created_ns: u64) -> Result<Table> {
        if bytes.len() < FOOTER {
            return Err(Error::Corrupt(format!("table {id}: {} bytes, shorter than a footer", bytes.len())));
        }
        let f = &bytes[bytes.len() - FOOTER..];
        let crc = u32::from_le_bytes(f[32..36].try_into().unwrap());
        if crc32fast::hash(&f[..32]) != crc || u64::from_le_bytes(f[24..32].try_into().unwrap()) != MAGIC {
            return Err(Error::Corrupt(format!("table {id}: bad footer")));
        }
        let rd = |o: usize| u64::from_le_bytes(f[o..o + 8].try_into().unwrap()) as usize;
        let (filter_off, index_off, props_off) = (rd(0), rd(8), rd(16));
        let end = bytes.len() - FOOTER;
        if !(filter_off <= index_off && index_off <= props_off && props_off <= end) {
            return Err(Error::Corrupt(format!("table {id}: footer offsets out of order")));
        }
        let filter = decode_filter(open_block(&bytes[filter_off..index_off])?.as_ref())?;
        let ib = open_block(&bytes[index_off..props_off])?;
        let mut index = vec![];
        let mut p = 0;
        while p < ib.len() {
            let kl = get_varint(&ib, &mut p)? as usize;
            let key = ib.get(p..p + kl).ok_or_else(|| Error::Corrupt("index key".into()))?.to_vec();
            p += kl;
            let offset = get_varint(&ib, &mut p)?;
            let len = get_varint(&ib, &mut p)? as u32;
            index.push(IndexEntry { last_key: key, offset, len });
        }
        let pb = open_block(&bytes[props_off..end])?;
        let mut p = 0;
        let mut next = || get_varint(&pb, &mut p);
        let (entries, tombstones, put_bytes, oldest) = (next()?, next()?, next()?, next()?);
        let sl = get_varint(&pb, &mut p)? as usize;
        let smallest = pb.get(p..p + sl).ok_or_else(|| Error::Corrupt("smallest key".into()))?.to_vec();
        p += sl;
        let ll = get_varint(&pb, &mut p)? as usize;
        let largest = pb.get(p..p + ll).ok_or_else(|| Error::Corrupt("largest key".into()))?.to_vec();
        Ok(Table {
            id,
            size_bytes: bytes.len() as u64,
            probes: KeyProbes::new(&index, &smallest, &largest),
            smallest,
            largest,
            entries,
            tombstones,
            put_bytes,
            oldest_tombstone_ns: (oldest != 0).then(|| oldest - 1),
            created_ns,
            index,
            filter,
        })
    }
}

fn decode_filter(b: &[u8]) -> Result<BloomFilter> {
    if b.len() < 4 + 8 || !(b.len() - 4).is_multiple_of(8) {
        return Err(Error::Corrupt(format!("filter of {} bytes", b.len())));
    }
    let hashes = u32::from_le_bytes(b[..4].try_into().unwrap());
    let words = b[4..].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    Ok(BloomFilter::from_vec(words).seed(&BLOOM_SEED).hashes(hashes))
}

/// Builds one SSTable in memory; the store writes the bytes to a zone file.
pub struct TableBuilder {
    block_bytes: usize,
    compression: Compression,
    bits_per_key: u32,
    out: Vec<u8>,
    /// Where the block being filled starts in `out` (its entries are written there).
    block_start: usize,
    last_key: Vec<u8>,
    last_seq: u64,
    index: Vec<IndexEntry>,
    key_hashes: Vec<u64>,
    hasher: BloomFilter,
    entries: u64,
    tombstones: u64,
    put_bytes: u64,
    oldest_tombstone_ns: Option<u64>,
    smallest: Vec<u8>,
}

impl TableBuilder {
    pub fn new(block_bytes: u32, compression: Compression, bits_per_key: u32) -> TableBuilder {
        Self::reusing(block_bytes, compression, bits_per_key, Vec::new())
    }

    /// A builder writing into `out` (emptied first): the bytes of a table written before,
    /// so that a store building table after table reuses one buffer's memory.
    pub fn reusing(block_bytes: u32, compression: Compression, bits_per_key: u32, mut out: Vec<u8>) -> TableBuilder {
        out.clear();
        TableBuilder {
            block_bytes: block_bytes as usize,
            compression,
            bits_per_key,
            out,
            block_start: 0,
            last_key: Vec::new(),
            last_seq: 0,
            index: Vec::new(),
            key_hashes: Vec::new(),
            hasher: template_filter(),
            entries: 0,
            tombstones: 0,
            put_bytes: 0,
            oldest_tombstone_ns: None,
            smallest: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
    /// Bytes written so far (sealed blocks plus the open one).
    pub fn estimated_bytes(&self) -> u64 {
        self.out.len() as u64
    }
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Add an entry; entries must come in internal-key order.
    pub fn add(&mut self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        if self.entries == 0 {
            self.smallest = key.to_vec();
            self.key_hashes.push(self.hasher.source_hash(key));
        } else {
            assert!(cmp_internal(&self.last_key, self.last_seq, key, seq).is_lt(), "table entries out of order");
            if key != self.last_key.as_slice() {
                self.key_hashes.push(self.hasher.source_hash(key));
            }
        }
        put_entry(&mut self.out, key, seq, kind, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_seq = seq;
        self.entries += 1;
        match kind {
            Kind::Delete => {
                self.tombstones += 1;
                let t = value.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                self.oldest_tombstone_ns = Some(self.oldest_tombstone_ns.map_or(t, |o| o.min(t)));
            }
            Kind::Put => self.put_bytes += (key.len() + value.len()) as u64,
        }
        if self.out.len() - self.block_start >= self.block_bytes {
            self.seal();
        }
    }

    fn seal(&mut self) {
        if self.out.len() == self.block_start {
            return;
        }
        let offset = self.block_start as u64;
        seal_tail(&mut self.out, self.block_start, self.compression);
        self.index.push(IndexEntry { last_key: self.last_key.clone(), offset, len: (self.out.len() as u64 - offset) as u32 });
        self.block_start = self.out.len();
    }

    /// Seal the table: returns its bytes and its handle (`id`, created at `now_ns`).
    pub fn finish(mut self, id: FileId, now_ns: u64) -> (Vec<u8>, Table) {
        assert!(self.entries > 0, "an empty table");
        self.seal();
        let nkeys = self.key_hashes.len();
        let bits = ((nkeys as u64 * self.bits_per_key as u64).max(64)).div_ceil(64) * 64;
        let hashes = ((self.bits_per_key as f64 * std::f64::consts::LN_2).round() as u32).clamp(1, 30);
        let mut filter = BloomFilter::with_num_bits(bits as usize).seed(&BLOOM_SEED).hashes(hashes);
        for &h in &self.key_hashes {
            filter.insert_hash(h);
        }
        let filter_off = self.out.len() as u64;
        let mut fb = Vec::with_capacity(4 + filter.as_slice().len() * 8);
        fb.extend_from_slice(&hashes.to_le_bytes());
        for w in filter.as_slice() {
            fb.extend_from_slice(&w.to_le_bytes());
        }
        seal_block(&fb, Compression::None, &mut self.out);
        let index_off = self.out.len() as u64;
        let mut ib = vec![];
        for e in &self.index {
            put_varint(&mut ib, e.last_key.len() as u64);
            ib.extend_from_slice(&e.last_key);
            put_varint(&mut ib, e.offset);
            put_varint(&mut ib, e.len as u64);
        }
        seal_block(&ib, Compression::None, &mut self.out);
        let props_off = self.out.len() as u64;
        let mut pb = vec![];
        put_varint(&mut pb, self.entries);
        put_varint(&mut pb, self.tombstones);
        put_varint(&mut pb, self.put_bytes);
        put_varint(&mut pb, self.oldest_tombstone_ns.map_or(0, |t| t + 1));
        put_varint(&mut pb, self.smallest.len() as u64);
        pb.extend_from_slice(&self.smallest);
        put_varint(&mut pb, self.last_key.len() as u64);
        pb.extend_from_slice(&self.last_key);
        seal_block(&pb, Compression::None, &mut self.out);
        let mut footer = Vec::with_capacity(FOOTER);
        for v in [filter_off, index_off, props_off, MAGIC] {
            footer.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&footer);
        footer.extend_from_slice(&crc.to_le_bytes());
        self.out.extend_from_slice(&footer);
        let table = Table {
            id,
            size_bytes: self.out.len() as u64,
            probes: KeyProbes::new(&self.index, &self.smallest, &self.last_key),
            smallest: self.smallest,
            largest: self.last_key,
            entries: self.entries,
            tombstones: self.tombstones,
            put_bytes: self.put_bytes,
            oldest_tombstone_ns: self.oldest_tombstone_ns,
            created_ns: now_ns,
            index: self.index,
            filter,
        };
        (self.out, table)
    }
}

/// Look `key` up in an opened block: the newest version visible at `at`. Returns the entry
/// (if found) and whether the block ended while still on `key` (older versions may continue
/// in the next block).
/// A found entry: its kind and where its value lies in the block.
pub type Hit = (Kind, std::ops::Range<usize>);

pub fn search_block(buf: &[u8], key: &[u8], at: u64) -> Result<(Option<Hit>, bool)> {
    let mut p = 0;
    while p < buf.len() {
        // Entries before the key are skipped on their lengths and key alone; only an entry
        // with the key is decoded whole (every lookup's inner loop).
        let mut q = p;
        let kl = get_varint(buf, &mut q)? as usize;
        let vl = get_varint(buf, &mut q)? as usize;
        let k = buf.get(q..q + kl).ok_or_else(|| Error::Corrupt(format!("entry at {p} runs past its block")))?;
        match k.cmp(key) {
            std::cmp::Ordering::Less => {
                p = q + kl + 8 + vl;
                if p > buf.len() {
                    return Err(Error::Corrupt(format!("entry ending at {p} runs past its block ({})", buf.len())));
                }
                continue;
            }
            std::cmp::Ordering::Greater => return Ok((None, false)),
            std::cmp::Ordering::Equal => {}
        }
        let e = decode_entry(buf, p)?;
        if e.seq <= at {
            return Ok((Some((e.kind, e.value.0 as usize..e.value.1 as usize)), false));
        }
        p = e.next as usize;
    }
    Ok((None, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(n: u32, comp: Compression) -> (Vec<u8>, Table) {
        let mut b = TableBuilder::new(512, comp, 10);
        for i in 0..n {
            let k = format!("key{i:06}");
            b.add(k.as_bytes(), 1000 + i as u64, Kind::Put, &[(i % 251) as u8; 100]);
            if i % 10 == 0 {
                b.add(k.as_bytes(), 10 + i as u64, Kind::Delete, &(77u64 + i as u64).to_le_bytes());
            }
        }
        b.finish(9, 123)
    }

    #[test]
    fn table_round_trips_and_finds_every_key() {
        for comp in [Compression::None, Compression::Lz4] {
            let (bytes, t) = build(500, comp);
            assert_eq!(t.size_bytes, bytes.len() as u64);
            assert_eq!((t.entries, t.tombstones, t.oldest_tombstone_ns), (550, 50, Some(77)));
            let t2 = Table::open(9, &bytes, 123).unwrap();
            assert_eq!((t2.entries, t2.tombstones, t2.oldest_tombstone_ns), (t.entries, t.tombstones, t.oldest_tombstone_ns));
            assert_eq!((&t2.smallest, &t2.largest), (&t.smallest, &t.largest));
            assert_eq!(t2.index.len(), t.index.len());
            for i in 0..500u32 {
                let k = format!("key{i:06}");
                assert!(t2.may_contain(k.as_bytes()));
                let mut b = t2.block_for(k.as_bytes()).unwrap();
                let found = loop {
                    let e = &t2.index[b];
                    let blk = open_block(&bytes[e.offset as usize..e.offset as usize + e.len as usize]).unwrap();
                    let (hit, more) = search_block(&blk, k.as_bytes(), u64::MAX >> 8).unwrap();
                    if let Some((kind, r)) = hit {
                        break Some((kind, blk[r].to_vec()));
                    }
                    if !more {
                        break None;
                    }
                    b += 1;
                };
                assert_eq!(found, Some((Kind::Put, vec![(i % 251) as u8; 100])));
            }
            // The Bloom filter turns most absent keys away.
            let fp = (0..2000).filter(|i| t2.may_contain(format!("key{:06}x", i).as_bytes())).count();
            assert!(fp < 100, "{fp} false positives of 2000 at 10 bits per key");
        }
    }

    proptest::proptest! {
        /// The probe search picks the block a plain search over the whole last keys picks,
        /// for keys of any length inside, around and outside the table's range (shared
        /// prefixes, zero bytes, keys that are prefixes of others).
        #[test]
        fn block_for_matches_a_plain_search(
            keys in proptest::collection::btree_set(proptest::collection::vec(proptest::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..14), 1..200),
            prefix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            queries in proptest::collection::vec(proptest::collection::vec(proptest::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..24), 1..60),
        ) {
            let mut b = TableBuilder::new(64, Compression::None, 10);
            for (i, k) in keys.iter().enumerate() {
                b.add(&[prefix.as_slice(), k].concat(), 10 + i as u64, Kind::Put, b"vv");
            }
            let (bytes, t) = b.finish(1, 0);
            let t2 = Table::open(1, &bytes, 0).unwrap();
            for q in queries.iter().map(|q| [prefix.as_slice(), q].concat()).chain(queries.iter().cloned()) {
                let plain = t.index.partition_point(|e| e.last_key.as_slice() < q.as_slice());
                let want = (plain < t.index.len()).then_some(plain);
                proptest::prop_assert_eq!(t.block_for(&q), want);
                proptest::prop_assert_eq!(t2.block_for(&q), want);
            }
        }
    }
}
