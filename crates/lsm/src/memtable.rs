//! The memtable: every version written since the last flush, by user key, newest first.
//! Versions shadowed within the memtable are kept until the flush, which decides (with the
//! live snapshots) which of them reach L0.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::format::{entry_len, Kind};

#[derive(Debug, Clone)]
pub struct Version {
    pub seq: u64,
    pub kind: Kind,
    pub value: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct Memtable {
    map: BTreeMap<Vec<u8>, Vec<Version>>,
    /// Encoded bytes of every version held (what the flush would write before dropping).
    bytes: u64,
    entries: u64,
    tombstones: u64,
}

impl Memtable {
    pub fn new() -> Memtable {
        Memtable::default()
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn entries(&self) -> u64 {
        self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn insert(&mut self, key: &[u8], seq: u64, kind: Kind, value: Vec<u8>) {
        self.bytes += entry_len(key.len(), value.len()) as u64;
        self.entries += 1;
        self.tombstones += (kind == Kind::Delete) as u64;
        let v = Version { seq, kind, value };
        match self.map.get_mut(key) {
            Some(versions) => {
                debug_assert!(versions[0].seq < seq, "versions arrive in sequence order");
                versions.insert(0, v);
            }
            None => {
                self.map.insert(key.to_vec(), vec![v]);
            }
        }
    }

    /// The newest version of `key` visible at sequence `at`.
    pub fn get(&self, key: &[u8], at: u64) -> Option<&Version> {
        self.map.get(key)?.iter().find(|v| v.seq <= at)
    }

    /// Whether any version of `key` is held.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Every (key, versions newest first), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<Version>)> {
        self.map.iter()
    }

    /// Keys from `start` (inclusive) in order.
    pub fn range_from<'a>(&'a self, start: &[u8]) -> impl Iterator<Item = (&'a Vec<u8>, &'a Vec<Version>)> + 'a {
        self.map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
    }

    /// Smallest and largest key held.
    pub fn key_range(&self) -> Option<(&[u8], &[u8])> {
        Some((self.map.first_key_value()?.0, self.map.last_key_value()?.0))
    }

    /// Empty the memtable (after its flush), returning what it held.
    pub fn take(&mut self) -> BTreeMap<Vec<u8>, Vec<Version>> {
        self.bytes = 0;
        self.entries = 0;
        self.tombstones = 0;
        std::mem::take(&mut self.map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_visible_version_wins() {
        let mut m = Memtable::new();
        m.insert(b"k", 1, Kind::Put, b"a".to_vec());
        m.insert(b"k", 5, Kind::Delete, vec![]);
        m.insert(b"k", 9, Kind::Put, b"c".to_vec());
        assert_eq!(m.get(b"k", 100).unwrap().value, b"c");
        assert_eq!(m.get(b"k", 6).unwrap().kind, Kind::Delete);
        assert_eq!(m.get(b"k", 4).unwrap().value, b"a");
        assert!(m.get(b"k", 0).is_none());
        assert_eq!(m.entries(), 3);
        assert_eq!(m.range_from(b"j").count(), 1);
    }
}
