//! The memtable: every version written since the last flush, by user key, newest first.
//! Versions shadowed within the memtable are kept until the flush, which decides (with the
//! live snapshots) which of them reach L0.
//!
//! Keys live in a hash map, not an ordered tree: puts and gets, the hot path, cost one hash
//! instead of a tree descent of key comparisons (long shared prefixes such as
//! "key:000000012345" make each comparison a memcmp). Order is needed only by the flush, which
//! sorts the keys once, and by range scans, which use a sorted copy of the keys made by the
//! first scan after a new key arrived (scans between writes share it).

use std::collections::HashMap;

use crate::format::{entry_len, Kind};

#[derive(Debug, Clone)]
pub struct Version {
    pub seq: u64,
    pub kind: Kind,
    pub value: Vec<u8>,
}

type Map = HashMap<Box<[u8]>, Vec<Version>, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
pub struct Memtable {
    map: Map,
    /// The keys in order, for scans; None when a key arrived since it was made.
    sorted: Option<Vec<Box<[u8]>>>,
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
                self.map.insert(key.into(), vec![v]);
                self.sorted = None;
            }
        }
    }

    /// The newest version of `key` visible at sequence `at`.
    pub fn get(&self, key: &[u8], at: u64) -> Option<&Version> {
        self.map.get(key)?.iter().find(|v| v.seq <= at)
    }

    /// Every (key, versions newest first), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Vec<Version>)> {
        let mut v: Vec<(&[u8], &Vec<Version>)> = self.map.iter().map(|(k, v)| (&**k, v)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.into_iter()
    }

    fn sorted_keys(&mut self) -> &[Box<[u8]>] {
        let map = &self.map;
        self.sorted.get_or_insert_with(|| {
            let mut keys: Vec<Box<[u8]>> = map.keys().cloned().collect();
            keys.sort_unstable();
            keys
        })
    }

    /// The position in key order of the first key at or after `start` (for [`Memtable::key_at`]).
    pub fn seek(&mut self, start: &[u8]) -> usize {
        self.sorted_keys().partition_point(|k| &**k < start)
    }

    /// The key at position `i` in key order. Positions hold until a new key is inserted.
    pub fn key_at(&mut self, i: usize) -> Option<&[u8]> {
        self.sorted_keys().get(i).map(|k| &**k)
    }

    /// Empty the memtable (after its flush), returning what it held in key order.
    pub fn take(&mut self) -> Vec<(Box<[u8]>, Vec<Version>)> {
        self.bytes = 0;
        self.entries = 0;
        self.tombstones = 0;
        self.sorted = None;
        let mut v: Vec<(Box<[u8]>, Vec<Version>)> = std::mem::take(&mut self.map).into_iter().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        v
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
        assert_eq!(m.seek(b"j"), 0);
        assert_eq!(m.key_at(0), Some(&b"k"[..]));
        m.insert(b"a", 10, Kind::Put, vec![]);
        m.insert(b"z", 11, Kind::Put, vec![]);
        let keys: Vec<&[u8]> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [&b"a"[..], b"k", b"z"]);
        // A new key made the order anew.
        let i = m.seek(b"b");
        assert_eq!(i, 1);
        assert_eq!(m.key_at(i), Some(&b"k"[..]));
        assert_eq!(m.key_at(i + 1), Some(&b"z"[..]));
        assert_eq!(m.key_at(i + 2), None);
        let taken: Vec<Box<[u8]>> = m.take().into_iter().map(|(k, _)| k).collect();
        assert_eq!(taken, [b"a".to_vec().into_boxed_slice(), b"k".to_vec().into(), b"z".to_vec().into()]);
        assert!(m.is_empty());
    }
}
