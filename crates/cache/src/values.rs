//! The DRAM tier's item bytes in a data-backed cache.
//!
//! [`crate::dram::Dram`] keeps the LRU order and the byte accounting by key hash and sizes
//! only (the simulation's hot path). A served cache also needs the bytes: they live here,
//! keyed by the same hash, and [`crate::cache::HybridCache`] keeps the two in step (every
//! insert, removal, expiry drop and eviction of the DRAM tier is mirrored), so an item pushed
//! out of DRAM takes its bytes down to the SOC or LOC.

use std::sync::Arc;

use crate::hash::{key_map, KeyMap};
use crate::item::Item;

pub struct Values {
    map: KeyMap<Arc<Item>>,
    item_bytes: u64,
}

impl Default for Values {
    fn default() -> Self {
        Values { map: key_map(1024), item_bytes: 0 }
    }
}

impl Values {
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Key + value bytes held.
    pub fn item_bytes(&self) -> u64 {
        self.item_bytes
    }
    pub fn get(&self, hash: u64) -> Option<&Arc<Item>> {
        self.map.get(&hash)
    }
    pub fn insert(&mut self, hash: u64, it: Arc<Item>) {
        self.item_bytes += it.item_bytes();
        if let Some(old) = self.map.insert(hash, it) {
            self.item_bytes -= old.item_bytes();
        }
    }
    pub fn remove(&mut self, hash: u64) -> Option<Arc<Item>> {
        let old = self.map.remove(&hash)?;
        self.item_bytes -= old.item_bytes();
        Some(old)
    }
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.map.keys().copied()
    }
}
