//! The DPU cache: whole blocks (decompressed) in DPU memory, write-back, LRU or FIFO.
//!
//! A hit costs only the PCIe crossing. Writes land here and reach remote memory when their
//! block is evicted (or flushed), compressed as a whole; so the cache is also where 4 KiB
//! host writes are gathered into 1 MiB blocks. Buffers are allocated on first use.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// Evict the least recently used block (a hit moves it to the front).
    Lru,
    /// Evict the block cached longest ago (hits do not reorder).
    Fifo,
}

const NIL: usize = usize::MAX;

struct Slot {
    block: u64,
    dirty: bool,
    prev: usize,
    next: usize,
}

pub struct BlockCache {
    policy: CachePolicy,
    block_bytes: usize,
    slots: Vec<Slot>,
    bufs: Vec<Vec<u8>>,
    index: HashMap<u64, usize>,
    /// Most recent first.
    head: usize,
    tail: usize,
    free: Vec<usize>,
}

impl BlockCache {
    pub fn new(slots: usize, block_bytes: usize, policy: CachePolicy) -> BlockCache {
        assert!(slots >= 1, "the DPU needs at least one block of working memory");
        BlockCache {
            policy,
            block_bytes,
            slots: (0..slots).map(|_| Slot { block: u64::MAX, dirty: false, prev: NIL, next: NIL }).collect(),
            bufs: (0..slots).map(|_| Vec::new()).collect(),
            index: HashMap::with_capacity(slots),
            head: NIL,
            tail: NIL,
            free: (0..slots).rev().collect(),
        }
    }

    pub fn capacity_slots(&self) -> usize {
        self.slots.len()
    }
    pub fn len(&self) -> usize {
        self.index.len()
    }
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn unlink(&mut self, s: usize) {
        let (p, n) = (self.slots[s].prev, self.slots[s].next);
        if p == NIL {
            self.head = n;
        } else {
            self.slots[p].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.slots[n].prev = p;
        }
        self.slots[s].prev = NIL;
        self.slots[s].next = NIL;
    }

    fn push_front(&mut self, s: usize) {
        self.slots[s].prev = NIL;
        self.slots[s].next = self.head;
        if self.head != NIL {
            self.slots[self.head].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// The slot holding `block`, counting a use (LRU moves it to the front).
    pub fn lookup(&mut self, block: u64) -> Option<usize> {
        let s = *self.index.get(&block)?;
        if self.policy == CachePolicy::Lru && self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
        Some(s)
    }

    /// Whether `block` is cached, without counting a use.
    pub fn peek(&self, block: u64) -> Option<usize> {
        self.index.get(&block).copied()
    }

    /// A slot to fill: a free one, or the policy's victim, taken out of the cache. Returns the
    /// slot and the victim's (block, dirty); the caller writes a dirty victim back from
    /// [`BlockCache::buf`] before installing anything in the slot.
    pub fn take_slot(&mut self) -> (usize, Option<(u64, bool)>) {
        if let Some(s) = self.free.pop() {
            return (s, None);
        }
        let s = self.tail;
        assert!(s != NIL, "a full cache has a tail");
        self.unlink(s);
        let v = &self.slots[s];
        let (block, dirty) = (v.block, v.dirty);
        self.index.remove(&block);
        (s, Some((block, dirty)))
    }

    /// Put `block` in slot `s` (from [`BlockCache::take_slot`]) as the most recent.
    pub fn install(&mut self, s: usize, block: u64, dirty: bool) {
        assert!(!self.index.contains_key(&block), "block {block} cached twice");
        self.slots[s].block = block;
        self.slots[s].dirty = dirty;
        self.index.insert(block, s);
        self.push_front(s);
    }

    /// Return an unused slot (taken but not installed) to the free list.
    pub fn release(&mut self, s: usize) {
        self.slots[s].block = u64::MAX;
        self.slots[s].dirty = false;
        self.free.push(s);
    }

    /// Drop `block` without writing it back (every page of it was discarded).
    pub fn remove(&mut self, block: u64) -> bool {
        match self.index.remove(&block) {
            Some(s) => {
                self.unlink(s);
                self.release(s);
                true
            }
            None => false,
        }
    }

    pub fn buf(&mut self, s: usize) -> &mut [u8] {
        let b = &mut self.bufs[s];
        if b.is_empty() {
            b.resize(self.block_bytes, 0);
        }
        b
    }
    pub fn dirty(&self, s: usize) -> bool {
        self.slots[s].dirty
    }
    pub fn set_dirty(&mut self, s: usize, dirty: bool) {
        self.slots[s].dirty = dirty;
    }
    /// Cached blocks that are dirty, in block order (for flushes).
    pub fn dirty_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.index.iter().filter(|(_, &s)| self.slots[s].dirty).map(|(&b, _)| b).collect();
        v.sort_unstable();
        v
    }
    /// Every cached block, in block order.
    pub fn blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.index.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(c: &mut BlockCache, b: u64) -> Option<(u64, bool)> {
        let (s, v) = c.take_slot();
        c.install(s, b, b.is_multiple_of(2));
        v
    }

    #[test]
    fn lru_and_fifo_pick_different_victims() {
        for (policy, victim) in [(CachePolicy::Lru, 2), (CachePolicy::Fifo, 1)] {
            let mut c = BlockCache::new(2, 16, policy);
            assert_eq!(fill(&mut c, 1), None);
            assert_eq!(fill(&mut c, 2), None);
            assert!(c.lookup(1).is_some());
            let v = fill(&mut c, 3).unwrap();
            assert_eq!(v, (victim, victim % 2 == 0), "{policy:?}");
            assert!(c.peek(victim).is_none());
            assert_eq!(c.len(), 2);
        }
    }

    #[test]
    fn remove_frees_the_slot() {
        let mut c = BlockCache::new(1, 16, CachePolicy::Lru);
        fill(&mut c, 5);
        assert!(c.remove(5));
        assert_eq!(fill(&mut c, 6), None);
        assert_eq!(c.dirty_blocks(), vec![6]);
    }
}
