//! Hashing: one 64-bit mixer for keys, buckets and Bloom filters, and a map keyed by
//! already-mixed 64-bit keys. Fixed functions (no per-process random state) keep runs
//! deterministic.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};
use ssdlab_core::media::mem::prefetch;

/// SplitMix64's finaliser: a bijection on u64 with good avalanche.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// 64-bit FNV-1a of a byte string, then mixed: how trace and protocol keys become cache keys.
pub fn key_of(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix64(h)
}

/// `x` scaled into `0..n` without a division (Lemire's multiply-shift).
#[inline]
pub fn fast_range(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

/// Hasher for keys that are already well mixed: one multiply spreads them over hashbrown's
/// control bits.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

pub type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

pub fn key_map<V>(capacity: usize) -> KeyMap<V> {
    HashMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default())
}

/// A map from already-mixed 64-bit keys to 32-bit values by open addressing (linear probing,
/// backward-shift deletion, at most 3/4 full), one 16-byte entry per slot. Unlike a general
/// hash map, the slot a key starts at is known before the look-up, so a run can
/// [`prefetch`](IdMap::prefetch) the keys of requests a few ahead.
#[derive(Serialize, Deserialize)]
pub struct IdMap {
    #[serde(deserialize_with = "ssdlab_core::media::mem::presized")]
    slots: Vec<IdEntry>,
    /// log2 of the slot count.
    bits: u32,
    len: usize,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct IdEntry {
    key: u64,
    /// [`IdMap::EMPTY`] in a free slot.
    val: u32,
}

impl IdMap {
    /// The one value a map cannot hold (it marks free slots).
    pub const EMPTY: u32 = u32::MAX;

    pub fn with_capacity(n: usize) -> IdMap {
        let bits = (n.max(8) * 4 / 3).next_power_of_two().trailing_zeros();
        IdMap { slots: vec![IdEntry { key: 0, val: Self::EMPTY }; 1 << bits], bits, len: 0 }
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, or the free slot where it would go.
    #[inline]
    fn probe(&self, key: u64) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            let e = self.slots[i];
            if e.val == Self::EMPTY {
                return (i, false);
            }
            if e.key == key {
                return (i, true);
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        match self.probe(key) {
            (i, true) => Some(self.slots[i].val),
            _ => None,
        }
    }

    pub fn contains_key(&self, key: u64) -> bool {
        self.probe(key).1
    }

    /// Set `key` to `val`; returns the value it replaced.
    pub fn insert(&mut self, key: u64, val: u32) -> Option<u32> {
        debug_assert!(val != Self::EMPTY);
        let (i, found) = self.probe(key);
        if found {
            return Some(std::mem::replace(&mut self.slots[i].val, val));
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
            return self.insert(key, val);
        }
        self.slots[i] = IdEntry { key, val };
        self.len += 1;
        None
    }

    /// Remove `key`; returns its value.
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let (mut hole, found) = self.probe(key);
        if !found {
            return None;
        }
        let val = self.slots[hole].val;
        // Backward shift: move later entries of the run into the hole when their home slot
        // lies at or before it (cyclically), so every key stays reachable from its home.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let e = self.slots[j];
            if e.val == Self::EMPTY {
                break;
            }
            let home = self.home(e.key);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = e;
                hole = j;
            }
        }
        self.slots[hole].val = Self::EMPTY;
        self.len -= 1;
        Some(val)
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits += 1;
        self.slots = vec![IdEntry { key: 0, val: Self::EMPTY }; 1 << self.bits];
        for e in old.into_iter().filter(|e| e.val != Self::EMPTY) {
            let (i, _) = self.probe(e.key);
            self.slots[i] = e;
        }
    }

    /// Start loading the slot `key` starts at (a hint; no effect on the contents).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        prefetch(&self.slots[self.home(key)]);
    }

    /// Bytes per slot (memory estimates).
    pub const SLOT_BYTES: u64 = std::mem::size_of::<IdEntry>() as u64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The map against std's HashMap over random inserts, replacements and removals, with
    /// keys crowded into few home slots so runs wrap and shift.
    #[test]
    fn id_map_matches_a_hash_map() {
        let mut m = IdMap::with_capacity(4);
        let mut r: HashMap<u64, u32> = HashMap::new();
        let mut x = 1u64;
        for step in 0..200_000u32 {
            x = mix64(x);
            let key = x % 5000;
            match x >> 62 {
                0 | 1 => assert_eq!(m.insert(key, step), r.insert(key, step)),
                2 => assert_eq!(m.remove(key), r.remove(&key)),
                _ => assert_eq!(m.get(key), r.get(&key).copied()),
            }
            assert_eq!(m.len(), r.len());
        }
        for (k, v) in &r {
            assert_eq!(m.get(*k), Some(*v));
        }
    }
}
