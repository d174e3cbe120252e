//! Hashing: one 64-bit mixer for keys, buckets and Bloom filters, and a map keyed by
//! already-mixed 64-bit keys. Fixed functions (no per-process random state) keep runs
//! deterministic.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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
