//! The SOC's DRAM index of its buckets, kept compact so paper-scale SOCs fit in memory.
//!
//! Per bucket: a 64-bit Bloom filter, the item count, the bytes used and where its items sit
//! (16 bytes). Per item, oldest first: a 32-bit fingerprint of the key and its stored size
//! (6 bytes), plus a 32-bit expiry once any item has had one (workloads without TTLs never
//! pay for it). A bucket's items live in a chunk of whole granules (4 items) of a paged arena;
//! a bucket that outgrows its chunk moves to one a granule larger, and one that shrinks two
//! granules below its chunk moves to one a granule smaller, so a bucket holds about its
//! current item count (CacheLib's BigHash keeps no per-item DRAM state at all: these arrays
//! stand for the bucket's contents on flash, which a metadata-only simulation does not have).
//!
//! Fingerprints stand for keys: two keys of one bucket with the same fingerprint would be
//! taken for each other, which happens about once per 2^32 / (items per bucket) comparisons
//! of different keys (about once per paper-scale run). A data-backed cache compares the full
//! key on every hit, so there it can only cost a miss.

use serde::{Deserialize, Serialize};

use crate::hash::mix64;

/// Items per granule of the arena (a bucket's chunk is a whole number of granules).
const GRANULE: usize = 4;
/// Granules per arena page. A chunk never straddles pages, so pages never move or grow.
const PAGE_GRANULES: u32 = 1 << 14;

/// The fingerprint that stands for `key` in its bucket (independent of the bits that chose
/// the bucket).
#[inline]
pub fn fingerprint(key: u64) -> u32 {
    (mix64(key ^ 0x51af_d7ed_558c_cd27) >> 32) as u32
}

/// The Bloom filter bits of fingerprint `fp` (a function of the fingerprint, so the filter can
/// be rebuilt from the bucket's fingerprints).
#[inline]
pub fn bloom_mask(fp: u32, hashes: u32) -> u64 {
    let h = mix64(fp as u64 ^ 0x5bd1_e995_7f4a_7c15);
    let mut m = 0u64;
    for i in 0..hashes {
        m |= 1u64 << ((h >> (6 * i)) & 63);
    }
    m
}

/// A bucket's DRAM state, 16 bytes on 16-byte boundaries: one cache line holds all of it, so
/// a look-up misses once here (and once in the arena), and one prefetch covers it.
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
#[repr(C, align(16))]
struct Head {
    bloom: u64,
    /// First granule of the bucket's chunk (global granule number).
    at: u32,
    /// Bytes its items use.
    used: u16,
    count: u8,
    /// Its chunk's size in granules (0: no chunk yet).
    cap: u8,
}

#[derive(Serialize, Deserialize)]
pub struct BucketIndex {
    slots: u32,
    hashes: u32,
    #[serde(deserialize_with = "ssdlab_core::media::mem::presized")]
    heads: Vec<Head>,
    /// Arena pages: fingerprints, sizes, and expiries (no pages until an item has an expiry).
    fp: Vec<Box<[u32]>>,
    size: Vec<Box<[u16]>>,
    exp: Vec<Box<[u32]>>,
    /// Next unused granule at the end of the arena.
    top: u32,
    /// Free chunks by size in granules: their first granules.
    free: Vec<Vec<u32>>,
}

impl BucketIndex {
    /// Start loading bucket `b`'s state (Bloom filter, count, where its items are): a hint.
    #[inline]
    pub fn prefetch(&self, b: usize) {
        if let Some(h) = self.heads.get(b) {
            ssdlab_core::media::mem::prefetch(h);
        }
    }

    /// Start loading bucket `b`'s fingerprints and sizes (a hint; cheap once its state is
    /// cached, see [`prefetch`](Self::prefetch)).
    #[inline]
    pub fn prefetch_items(&self, b: usize) {
        if self.heads.get(b).is_some_and(|h| h.count > 0) {
            let (p, o) = self.place(b);
            ssdlab_core::media::mem::prefetch(&self.fp[p][o]);
            ssdlab_core::media::mem::prefetch(&self.size[p][o]);
        }
    }

    /// `buckets` empty buckets of at most `slots` items, Bloom filters with `hashes` bits per key.
    pub fn new(buckets: u64, slots: u32, hashes: u32) -> BucketIndex {
        assert!((1..=255).contains(&slots) && (1..=10).contains(&hashes));
        let n = buckets as usize;
        let max_chunk = (slots as usize).div_ceil(GRANULE);
        BucketIndex {
            slots,
            hashes,
            heads: vec![Head::default(); n],
            fp: vec![],
            size: vec![],
            exp: vec![],
            top: 0,
            free: vec![Vec::new(); max_chunk + 1],
        }
    }

    /// Bytes of DRAM the index needs for `buckets` buckets holding `items_per_bucket` items on
    /// average (a chunk is about one granule more than its items), with expiries if `ttl`.
    pub fn estimate_bytes(buckets: u64, slots: u32, items_per_bucket: f64, ttl: bool) -> u64 {
        let per_bucket = std::mem::size_of::<Head>() as u64;
        let items = items_per_bucket.min(slots as f64) + GRANULE as f64;
        let per_item = if ttl { 10.0 } else { 6.0 };
        buckets * per_bucket + (buckets as f64 * items * per_item) as u64
    }

    /// Bytes of DRAM the index holds now.
    pub fn memory_bytes(&self) -> u64 {
        let n = self.heads.len() as u64;
        let page = PAGE_GRANULES as u64 * GRANULE as u64;
        let free: u64 = self.free.iter().map(|f| f.capacity() as u64 * 4).sum();
        n * std::mem::size_of::<Head>() as u64 + self.fp.len() as u64 * page * 6 + self.exp.len() as u64 * page * 4 + free
    }

    #[inline]
    pub fn count(&self, b: usize) -> usize {
        self.heads[b].count as usize
    }

    #[inline]
    pub fn used(&self, b: usize) -> u32 {
        self.heads[b].used as u32
    }

    #[inline]
    pub fn full(&self, b: usize) -> bool {
        self.heads[b].count as u32 == self.slots
    }

    /// Whether bucket `b`'s filter admits fingerprint `fp` (false = certainly absent).
    #[inline]
    pub fn may_contain(&self, b: usize, fp: u32) -> bool {
        let m = bloom_mask(fp, self.hashes);
        self.heads[b].bloom & m == m
    }

    /// Arena page and first item of bucket `b`'s chunk.
    #[inline]
    fn place(&self, b: usize) -> (usize, usize) {
        let g = self.heads[b].at;
        ((g / PAGE_GRANULES) as usize, (g % PAGE_GRANULES) as usize * GRANULE)
    }

    /// Position of fingerprint `fp` in bucket `b`, oldest first.
    #[inline]
    pub fn find(&self, b: usize, fp: u32) -> Option<usize> {
        let n = self.heads[b].count as usize;
        if n == 0 {
            return None;
        }
        let (p, o) = self.place(b);
        self.fp[p][o..o + n].iter().position(|&x| x == fp)
    }

    /// Item `i` of bucket `b`: (fingerprint, stored size, expiry).
    #[inline]
    pub fn get(&self, b: usize, i: usize) -> (u32, u32, u32) {
        debug_assert!(i < self.heads[b].count as usize);
        let (p, o) = self.place(b);
        let e = if self.exp.is_empty() { 0 } else { self.exp[p][o + i] };
        (self.fp[p][o + i], self.size[p][o + i] as u32, e)
    }

    /// Fingerprints of bucket `b`, oldest first.
    pub fn fingerprints(&self, b: usize) -> Vec<u32> {
        let n = self.heads[b].count as usize;
        if n == 0 {
            return vec![];
        }
        let (p, o) = self.place(b);
        self.fp[p][o..o + n].to_vec()
    }

    /// Remove item `i` of bucket `b`, keeping the others' order.
    pub fn remove_at(&mut self, b: usize, i: usize) {
        let n = self.heads[b].count as usize;
        assert!(i < n);
        let (p, o) = self.place(b);
        self.heads[b].used -= self.size[p][o + i];
        self.fp[p].copy_within(o + i + 1..o + n, o + i);
        self.size[p].copy_within(o + i + 1..o + n, o + i);
        if !self.exp.is_empty() {
            self.exp[p].copy_within(o + i + 1..o + n, o + i);
        }
        self.heads[b].count -= 1;
    }

    /// Append an item to bucket `b` (which must not be full).
    pub fn push(&mut self, b: usize, fp: u32, size: u32, expiry_s: u32) {
        let n = self.heads[b].count as usize;
        assert!((n as u32) < self.slots && size <= u16::MAX as u32 && self.heads[b].used as u32 + size <= u16::MAX as u32);
        if expiry_s != 0 && self.exp.is_empty() {
            self.exp = (0..self.fp.len()).map(|_| vec![0u32; (PAGE_GRANULES as usize) * GRANULE].into_boxed_slice()).collect();
        }
        if n == self.heads[b].cap as usize * GRANULE {
            self.resize(b, self.heads[b].cap as usize + 1);
        }
        let (p, o) = self.place(b);
        self.fp[p][o + n] = fp;
        self.size[p][o + n] = size as u16;
        if !self.exp.is_empty() {
            self.exp[p][o + n] = expiry_s;
        }
        self.heads[b].count += 1;
        self.heads[b].used += size as u16;
    }

    /// After a change to bucket `b`: rebuild its Bloom filter from its fingerprints, and give
    /// back a granule when two stand empty.
    pub fn settle(&mut self, b: usize) {
        let n = self.heads[b].count as usize;
        let cap = self.heads[b].cap as usize;
        if cap >= 2 && n + 2 * GRANULE <= cap * GRANULE {
            self.resize(b, cap - 1);
        }
        let mut m = 0;
        if n > 0 {
            let (p, o) = self.place(b);
            for &f in &self.fp[p][o..o + n] {
                m |= bloom_mask(f, self.hashes);
            }
        }
        self.heads[b].bloom = m;
    }

    /// Move bucket `b`'s items to a chunk of `granules` granules.
    fn resize(&mut self, b: usize, granules: usize) {
        let n = self.heads[b].count as usize;
        assert!(n <= granules * GRANULE && granules < self.free.len());
        let new = self.alloc(granules);
        let (np, no) = ((new / PAGE_GRANULES) as usize, (new % PAGE_GRANULES) as usize * GRANULE);
        let old_cap = self.heads[b].cap as usize;
        if old_cap > 0 {
            let (p, o) = self.place(b);
            for i in 0..n {
                self.fp[np][no + i] = self.fp[p][o + i];
                self.size[np][no + i] = self.size[p][o + i];
                if !self.exp.is_empty() {
                    self.exp[np][no + i] = self.exp[p][o + i];
                }
            }
            self.free[old_cap].push(self.heads[b].at);
        }
        self.heads[b].at = new;
        self.heads[b].cap = granules as u8;
    }

    /// A chunk of `granules` granules: a freed one of that size, else the arena's end.
    fn alloc(&mut self, granules: usize) -> u32 {
        if let Some(g) = self.free[granules].pop() {
            return g;
        }
        let g = granules as u32;
        let in_page = self.top % PAGE_GRANULES;
        if in_page + g > PAGE_GRANULES {
            // The page's tail is too short: keep it as a free chunk of its size, start a page.
            let rest = (PAGE_GRANULES - in_page) as usize;
            if rest < self.free.len() {
                self.free[rest].push(self.top);
            }
            self.top += PAGE_GRANULES - in_page;
        }
        if self.top / PAGE_GRANULES == self.fp.len() as u32 {
            let items = PAGE_GRANULES as usize * GRANULE;
            self.fp.push(vec![0; items].into_boxed_slice());
            self.size.push(vec![0; items].into_boxed_slice());
            if !self.exp.is_empty() {
                self.exp.push(vec![0; items].into_boxed_slice());
            }
        }
        let at = self.top;
        self.top += g;
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_order_grow_and_shrink_and_reuse_chunks() {
        let mut ix = BucketIndex::new(3, 40, 4);
        for i in 0..30u32 {
            ix.push(1, i, 10 + i, 0);
            ix.settle(1);
        }
        assert_eq!(ix.count(1), 30);
        assert_eq!(ix.fingerprints(1), (0..30).collect::<Vec<_>>());
        assert_eq!(ix.used(1), (0..30).map(|i| 10 + i).sum::<u32>());
        assert_eq!(ix.heads[1].cap, 8);
        assert!(ix.find(1, 7) == Some(7) && ix.find(0, 7).is_none() && ix.find(1, 99).is_none());
        // Shrinking: a granule is given back once two stand empty; order is kept.
        for _ in 0..20 {
            ix.remove_at(1, 0);
            ix.settle(1);
        }
        assert_eq!(ix.fingerprints(1), (20..30).collect::<Vec<_>>());
        assert!(ix.heads[1].cap as usize * GRANULE < 10 + 2 * GRANULE);
        assert_eq!(ix.get(1, 0), (20, 30, 0));
        // Freed chunks are reused by other buckets instead of growing the arena.
        let top = ix.top;
        for i in 0..8 {
            ix.push(2, 100 + i, 1, 0);
            ix.settle(2);
        }
        assert_eq!(ix.top, top);
        // Expiries appear with the first item that has one; earlier items read 0.
        ix.push(0, 5, 1, 77);
        assert_eq!((ix.get(0, 0), ix.get(1, 0).2), ((5, 1, 77), 0));
    }

    #[test]
    fn bloom_filters_follow_the_fingerprints() {
        let mut ix = BucketIndex::new(1, 255, 4);
        let fps: Vec<u32> = (0..50).map(|k| fingerprint(mix64(k))).collect();
        for &f in &fps {
            ix.push(0, f, 8, 0);
        }
        ix.settle(0);
        assert!(fps.iter().all(|&f| ix.may_contain(0, f)));
        ix.remove_at(0, 0);
        ix.settle(0);
        assert!(fps[1..].iter().all(|&f| ix.may_contain(0, f)));
    }
}
