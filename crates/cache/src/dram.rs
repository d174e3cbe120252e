//! DRAM tier: LRU by bytes over items with their key and value sizes.
//!
//! Slab of slots with an intrusive doubly-linked LRU list (u32 links) and a key -> slot map:
//! no allocation per request once the slab has grown to the tier's item count.
//!
//! As in CacheLib's MMLru, a hit moves an item to the head only if it was last moved at least
//! `refresh_s` seconds ago (`lruRefreshTime`, 60 s by default there): popular items are hit
//! far more often than that, and each move costs cache misses on the item's neighbours.

use serde::{Deserialize, Serialize};

use crate::hash::IdMap;

const NIL: u32 = u32::MAX;

/// An item leaving the DRAM tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evicted {
    pub key: u64,
    pub key_bytes: u32,
    pub value_bytes: u32,
    /// Expiry in workload seconds (0 = never).
    pub expiry_s: u32,
    /// The item came from flash and was not modified: its flash copy is still current.
    pub nvm_clean: bool,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Slot {
    key: u64,
    key_bytes: u32,
    value_bytes: u32,
    expiry_s: u32,
    /// When the item last moved to the head (workload seconds).
    moved_s: u32,
    nvm_clean: bool,
    prev: u32,
    next: u32,
}

/// Bytes of a slot and of a key map entry (memory estimates, [`crate::sizing`]).
pub(crate) const SLOT_BYTES: u64 = std::mem::size_of::<Slot>() as u64;
pub(crate) const MAP_SLOT_BYTES: u64 = IdMap::SLOT_BYTES;

#[derive(Serialize, Deserialize)]
pub struct Dram {
    capacity_bytes: u64,
    overhead_bytes: u32,
    refresh_s: u32,
    used_bytes: u64,
    map: IdMap,
    #[serde(deserialize_with = "ssdlab_core::media::mem::presized")]
    slots: Vec<Slot>,
    free: Vec<u32>,
    head: u32, // most recent
    tail: u32, // least recent
}

impl Dram {
    /// A tier of `capacity_bytes` whose items cost `overhead_bytes` each beyond key and value;
    /// hits promote an item at most once per `refresh_s` seconds (0: on every hit).
    pub fn new(capacity_bytes: u64, overhead_bytes: u32, refresh_s: u32) -> Dram {
        Dram {
            capacity_bytes,
            overhead_bytes,
            refresh_s,
            used_bytes: 0,
            map: IdMap::with_capacity(1024),
            slots: vec![],
            free: vec![],
            head: NIL,
            tail: NIL,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }
    pub fn item_bytes(&self, key_bytes: u32, value_bytes: u32) -> u64 {
        key_bytes as u64 + value_bytes as u64 + self.overhead_bytes as u64
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.slots[i as usize].prev, self.slots[i as usize].next);
        if p != NIL {
            self.slots[p as usize].next = n
        } else {
            self.head = n
        }
        if n != NIL {
            self.slots[n as usize].prev = p
        } else {
            self.tail = p
        }
    }

    fn push_front(&mut self, i: u32) {
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    /// Look up `key` at workload second `now_s`: Some(value bytes), and the item becomes most
    /// recent unless it moved there less than the refresh time ago. An item past its expiry is
    /// dropped and reported as a miss.
    pub fn get(&mut self, key: u64, now_s: u32) -> Option<u32> {
        let i = self.map.get(key)?;
        let s = self.slots[i as usize];
        if s.expiry_s != 0 && s.expiry_s <= now_s {
            self.remove(key);
            return None;
        }
        if self.head != i && now_s.wrapping_sub(s.moved_s) >= self.refresh_s {
            self.slots[i as usize].moved_s = now_s;
            self.unlink(i);
            self.push_front(i);
        }
        Some(s.value_bytes)
    }

    /// Start loading what a look-up of `key` reads first (its map slot).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        self.map.prefetch(key);
    }

    /// Start loading what a look-up of `key` reads second (its item's slot), once its map slot
    /// is cached (see [`prefetch`](Self::prefetch)).
    #[inline]
    pub fn prefetch_item(&self, key: u64) {
        if let Some(s) = self.map.get(key).and_then(|i| self.slots.get(i as usize)) {
            ssdlab_core::media::mem::prefetch(s);
        }
    }

    /// The next item an insert would push out (the least recent; its slot is cached, since the
    /// previous eviction's unlink wrote it), its map slot prefetched for the removal, and the
    /// slot of the one after it prefetched: (key, key + value bytes, clean on flash).
    #[inline]
    pub fn next_victim(&self) -> Option<(u64, u32, bool)> {
        let s = self.slots.get(self.tail as usize)?;
        self.map.prefetch(s.key);
        if let Some(p) = self.slots.get(s.prev as usize) {
            ssdlab_core::media::mem::prefetch(p);
        }
        Some((s.key, s.key_bytes.saturating_add(s.value_bytes), s.nvm_clean))
    }

    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(key)
    }

    /// Remove `key`; true if it was present.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(i) = self.map.remove(key) else { return false };
        self.unlink(i);
        let s = self.slots[i as usize];
        self.used_bytes -= self.item_bytes(s.key_bytes, s.value_bytes);
        self.free.push(i);
        true
    }

    /// Insert or replace `key` as the most recent item; items pushed out (least recent first)
    /// are appended to `evicted`. An item larger than the whole tier is not stored and comes
    /// straight back in `evicted`.
    pub fn insert(&mut self, it: Evicted, now_s: u32, evicted: &mut Vec<Evicted>) {
        let bytes = self.item_bytes(it.key_bytes, it.value_bytes);
        if bytes > self.capacity_bytes {
            self.remove(it.key);
            evicted.push(it);
            return;
        }
        let slot = Slot {
            key: it.key,
            key_bytes: it.key_bytes,
            value_bytes: it.value_bytes,
            expiry_s: it.expiry_s,
            moved_s: now_s,
            nvm_clean: it.nvm_clean,
            prev: NIL,
            next: NIL,
        };
        // One map probe for insert-or-replace; the item goes to the head, then the tail is
        // evicted until the bytes fit (never the new item: it fits alone and is most recent).
        match self.map.get(it.key) {
            Some(i) => {
                let old = self.slots[i as usize];
                self.used_bytes -= old.key_bytes as u64 + old.value_bytes as u64 + self.overhead_bytes as u64;
                self.unlink(i);
                self.slots[i as usize] = slot;
                self.push_front(i);
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i as usize] = slot;
                        i
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.map.insert(it.key, i);
                self.push_front(i);
            }
        }
        self.used_bytes += bytes;
        while self.used_bytes > self.capacity_bytes {
            let t = self.tail;
            debug_assert!(t != NIL && t != self.head, "the new item fits alone");
            let s = self.slots[t as usize];
            self.map.remove(s.key);
            self.unlink(t);
            self.used_bytes -= self.item_bytes(s.key_bytes, s.value_bytes);
            self.free.push(t);
            evicted.push(Evicted {
                key: s.key,
                key_bytes: s.key_bytes,
                value_bytes: s.value_bytes,
                expiry_s: s.expiry_s,
                nvm_clean: s.nvm_clean,
            });
        }
    }

    /// Keys from most to least recent (tests and debugging).
    pub fn keys_mru(&self) -> Vec<u64> {
        let mut out = vec![];
        let mut i = self.head;
        while i != NIL {
            out.push(self.slots[i as usize].key);
            i = self.slots[i as usize].next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: u64, value_bytes: u32) -> Evicted {
        Evicted { key, key_bytes: 8, value_bytes, expiry_s: 0, nvm_clean: false }
    }

    #[test]
    fn lru_by_bytes_evicts_least_recent_first() {
        // 3 items of 100 B (8 + 60 + 32 header) fit in 300 B.
        let mut d = Dram::new(300, 32, 0);
        let mut ev = vec![];
        for k in 1..=3 {
            d.insert(item(k, 60), 0, &mut ev);
        }
        assert!(ev.is_empty());
        assert_eq!(d.get(1, 0), Some(60)); // 1 becomes most recent
        d.insert(item(4, 60), 0, &mut ev);
        assert_eq!(ev.iter().map(|e| e.key).collect::<Vec<_>>(), vec![2]);
        assert_eq!(d.keys_mru(), vec![4, 1, 3]);
        // A 200-byte item pushes out the two least recent.
        ev.clear();
        d.insert(item(5, 160), 0, &mut ev);
        assert_eq!(ev.iter().map(|e| e.key).collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!(d.used_bytes(), 300);
        assert_eq!(d.get(2, 0), None);
    }

    #[test]
    fn replace_updates_size_and_expired_items_miss() {
        let mut d = Dram::new(1000, 0, 0);
        let mut ev = vec![];
        d.insert(item(1, 100), 0, &mut ev);
        d.insert(item(1, 200), 0, &mut ev);
        assert_eq!(d.used_bytes(), 208);
        assert_eq!(d.len(), 1);
        d.insert(Evicted { expiry_s: 10, ..item(2, 10) }, 0, &mut ev);
        assert_eq!(d.get(2, 9), Some(10));
        assert_eq!(d.get(2, 10), None);
        assert!(!d.contains(2));
        // Too large for the tier: handed straight back.
        d.insert(item(3, 5000), 0, &mut ev);
        assert_eq!(ev.len(), 1);
        assert!(!d.contains(3));
    }

    #[test]
    fn hits_promote_at_most_once_per_refresh_time() {
        // CacheLib's lruRefreshTime: 3 items of 100 B in 300 B, refresh every 60 s.
        let mut d = Dram::new(300, 32, 60);
        let mut ev = vec![];
        for k in 1..=3 {
            d.insert(item(k, 60), 100, &mut ev);
        }
        assert_eq!(d.get(1, 130), Some(60)); // inserted at 100: too recent to move
        assert_eq!(d.keys_mru(), vec![3, 2, 1]);
        assert_eq!(d.get(1, 160), Some(60)); // 60 s later: moves
        assert_eq!(d.keys_mru(), vec![1, 3, 2]);
        d.insert(item(4, 60), 161, &mut ev);
        assert_eq!(ev.iter().map(|e| e.key).collect::<Vec<_>>(), vec![2]);
    }
}
