//! The memtable: every version written since the last flush, by user key, newest first.
//! Versions shadowed within the memtable are kept until the flush, which decides (with the
//! live snapshots) which of them reach L0.
//!
//! Keys live in a hash table, not an ordered tree: puts and gets, the hot path, cost one hash
//! instead of a tree descent of key comparisons (long shared prefixes such as
//! "key:000000012345" make each comparison a memcmp). Order is needed only by the flush, which
//! sorts the keys once, and by range scans, which use a sorted copy of the keys made by the
//! first scan after a new key arrived (scans between writes share it).
//!
//! Keys and values are appended to one arena and versions to one array (each linking to the
//! key's previous version), so a put allocates nothing once the memtable has been through a
//! flush (`clear` keeps the memory) and a flush frees nothing entry by entry.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::format::{entry_len, Kind};

const NONE: u32 = u32::MAX;

/// One version as stored: its value's place in the arena and the key's next older version.
#[derive(Debug, Clone, Copy)]
struct Ver {
    seq: u64,
    value: (usize, usize),
    older: u32,
    kind: Kind,
}

/// One key: its bytes in the arena and its newest version.
#[derive(Debug, Clone, Copy)]
struct KeyRec {
    key: (usize, usize),
    newest: u32,
}

/// A version as read from the memtable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version<'a> {
    pub seq: u64,
    pub kind: Kind,
    pub value: &'a [u8],
}

#[derive(Default)]
pub struct Memtable {
    arena: Vec<u8>,
    versions: Vec<Ver>,
    keys: Vec<KeyRec>,
    /// Indices into `keys`, by the key's hash.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// Indices into `keys` in key order, for scans and the flush; None when a key arrived
    /// since it was made.
    sorted: Option<Vec<u32>>,
    /// Encoded bytes of every version held (what the flush would write before dropping).
    bytes: u64,
}

impl std::fmt::Debug for Memtable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memtable")
            .field("keys", &self.keys.len())
            .field("entries", &self.versions.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Memtable {
    pub fn new() -> Memtable {
        Memtable::default()
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn entries(&self) -> u64 {
        self.versions.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    fn key_of(&self, k: &KeyRec) -> &[u8] {
        &self.arena[k.key.0..k.key.1]
    }

    fn find(&self, key: &[u8], hash: u64) -> Option<u32> {
        self.index.find(hash, |&i| self.key_of(&self.keys[i as usize]) == key).copied()
    }

    fn append(&mut self, bytes: &[u8]) -> (usize, usize) {
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        (start, self.arena.len())
    }

    pub fn insert(&mut self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        assert!(self.versions.len() < NONE as usize, "memtable of 2^32 versions");
        self.bytes += entry_len(key.len(), value.len()) as u64;
        let hash = self.hasher.hash_one(key);
        let value = self.append(value);
        let v = self.versions.len() as u32;
        match self.find(key, hash) {
            Some(i) => {
                let k = &mut self.keys[i as usize];
                debug_assert!(self.versions[k.newest as usize].seq < seq, "versions arrive in sequence order");
                self.versions.push(Ver { seq, value, older: k.newest, kind });
                k.newest = v;
            }
            None => {
                let key = self.append(key);
                let i = self.keys.len() as u32;
                self.keys.push(KeyRec { key, newest: v });
                self.versions.push(Ver { seq, value, older: NONE, kind });
                let (arena, keys, hasher) = (&self.arena, &self.keys, &self.hasher);
                self.index.insert_unique(hash, i, |&j| {
                    let k = keys[j as usize].key;
                    hasher.hash_one(&arena[k.0..k.1])
                });
                self.sorted = None;
            }
        }
    }

    /// Every version of key record `i`, newest first.
    fn chain(&self, i: u32) -> impl Iterator<Item = Version<'_>> {
        let mut v = self.keys[i as usize].newest;
        std::iter::from_fn(move || {
            if v == NONE {
                return None;
            }
            let r = &self.versions[v as usize];
            v = r.older;
            Some(Version { seq: r.seq, kind: r.kind, value: &self.arena[r.value.0..r.value.1] })
        })
    }

    /// The newest version of `key` visible at sequence `at`.
    pub fn get(&self, key: &[u8], at: u64) -> Option<Version<'_>> {
        let i = self.find(key, self.hasher.hash_one(key))?;
        self.chain(i).find(|v| v.seq <= at)
    }

    fn sorted_keys(&mut self) -> &[u32] {
        if self.sorted.is_none() {
            let mut order: Vec<u32> = (0..self.keys.len() as u32).collect();
            order.sort_unstable_by(|&a, &b| self.key_of(&self.keys[a as usize]).cmp(self.key_of(&self.keys[b as usize])));
            self.sorted = Some(order);
        }
        self.sorted.as_deref().unwrap()
    }

    /// The position in key order of the first key at or after `start` (for [`Memtable::key_at`]).
    pub fn seek(&mut self, start: &[u8]) -> usize {
        self.sorted_keys();
        let order = self.sorted.as_deref().unwrap();
        order.partition_point(|&i| self.key_of(&self.keys[i as usize]) < start)
    }

    /// The key at position `i` in key order. Positions hold until a new key is inserted.
    pub fn key_at(&mut self, i: usize) -> Option<&[u8]> {
        self.sorted_keys();
        let k = *self.sorted.as_deref().unwrap().get(i)?;
        Some(self.key_of(&self.keys[k as usize]))
    }

    /// Every (key, versions newest first), in key order (the flush's input).
    pub fn sorted_entries(&mut self) -> impl Iterator<Item = (&[u8], impl Iterator<Item = Version<'_>>)> {
        self.sorted_keys();
        let this = &*self;
        this.sorted.as_deref().unwrap().iter().map(move |&i| (this.key_of(&this.keys[i as usize]), this.chain(i)))
    }

    /// Empty the memtable (after its flush), keeping its memory for the next one.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.versions.clear();
        self.keys.clear();
        self.index.clear();
        self.sorted = None;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_visible_version_wins() {
        let mut m = Memtable::new();
        m.insert(b"k", 1, Kind::Put, b"a");
        m.insert(b"k", 5, Kind::Delete, b"");
        m.insert(b"k", 9, Kind::Put, b"c");
        assert_eq!(m.get(b"k", 100).unwrap().value, b"c");
        assert_eq!(m.get(b"k", 6).unwrap().kind, Kind::Delete);
        assert_eq!(m.get(b"k", 4).unwrap().value, b"a");
        assert!(m.get(b"k", 0).is_none());
        assert_eq!(m.entries(), 3);
        assert_eq!(m.seek(b"j"), 0);
        assert_eq!(m.key_at(0), Some(&b"k"[..]));
        m.insert(b"a", 10, Kind::Put, b"");
        m.insert(b"z", 11, Kind::Put, b"");
        let keys: Vec<Vec<u8>> = m.sorted_entries().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, [b"a".to_vec(), b"k".to_vec(), b"z".to_vec()]);
        // A new key made the order anew.
        let i = m.seek(b"b");
        assert_eq!(i, 1);
        assert_eq!(m.key_at(i), Some(&b"k"[..]));
        assert_eq!(m.key_at(i + 1), Some(&b"z"[..]));
        assert_eq!(m.key_at(i + 2), None);
        let seqs: Vec<(Vec<u8>, Vec<u64>)> = m.sorted_entries().map(|(k, vs)| (k.to_vec(), vs.map(|v| v.seq).collect())).collect();
        assert_eq!(seqs, [(b"a".to_vec(), vec![10]), (b"k".to_vec(), vec![9, 5, 1]), (b"z".to_vec(), vec![11])]);
        m.clear();
        assert!(m.is_empty());
        assert!(m.get(b"k", 100).is_none());
        m.insert(b"k", 12, Kind::Put, b"d");
        assert_eq!(m.get(b"k", 100).unwrap().value, b"d");
        assert_eq!(m.key_at(0), Some(&b"k"[..]));
    }

    /// A version as the reference model keeps it: (seq, kind, value).
    type Owned = (u64, Kind, Vec<u8>);

    proptest::proptest! {
        /// Against a plain ordered map of version lists: gets at any sequence, key order,
        /// through clears.
        #[test]
        fn matches_an_ordered_map(ops in proptest::collection::vec((0u8..12, proptest::prelude::any::<bool>(), 0usize..40, 0u8..8), 1..300)) {
            let mut m = Memtable::new();
            let mut want: std::collections::BTreeMap<Vec<u8>, Vec<Owned>> = Default::default();
            for (seq, &(k, del, vlen, op)) in ops.iter().enumerate() {
                let seq = seq as u64 + 1;
                if op == 0 {
                    m.clear();
                    want.clear();
                    continue;
                }
                let key = vec![b'k'; k as usize];
                let kind = if del { Kind::Delete } else { Kind::Put };
                let value = vec![k ^ seq as u8; vlen];
                m.insert(&key, seq, kind, &value);
                want.entry(key).or_default().insert(0, (seq, kind, value));
                for (key, vs) in &want {
                    for at in [0, seq / 2, seq] {
                        let got = m.get(key, at).map(|v| (v.seq, v.kind, v.value.to_vec()));
                        proptest::prop_assert_eq!(got, vs.iter().find(|v| v.0 <= at).cloned());
                    }
                }
            }
            let got: Vec<(Vec<u8>, Vec<u64>)> = m.sorted_entries().map(|(k, vs)| (k.to_vec(), vs.map(|v| v.seq).collect())).collect();
            let exp: Vec<(Vec<u8>, Vec<u64>)> = want.iter().map(|(k, vs)| (k.clone(), vs.iter().map(|v| v.0).collect())).collect();
            proptest::prop_assert_eq!(got, exp);
        }
    }
}
