//! Deletion persistence, measured rather than assumed.
//!
//! For every delete (key k, sequence s, time t) the tracker follows the files that hold an
//! older version of k: WAL files with a record of k, SSTs with an entry of k, and every copy
//! a flush or compaction makes while the delete is pending. A file stops holding the version
//! at *LSM level* when the store deletes it, and at *erase level* when every zone it ever
//! wrote to has been reset since (the zone layer reports that). The delete is
//!
//! - persisted at LSM level when no live file holds an older version and its tombstone has
//!   reached the last level (or was dropped there, the key existing nowhere below);
//! - persisted at erase level when, in addition, no file that ever held an older version
//!   has bytes left on the NAND.
//!
//! The tracker also keeps fingerprints of the deleted values (first and last 16 bytes) so an
//! audit can search the raw NAND for survivors.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::format::Kind;
use crate::search::Finder;
use crate::sst::FileId;
use crate::zonefs::ZoneFs;

/// What an audit looks for: the value's head and tail (or the whole value when short), held
/// inline (every put makes one; no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    len: u8,
    bytes: [u8; 2 * FP_PART],
}

const FP_PART: usize = 16;
/// Fingerprints kept per key (the newest versions; older overwritten versions still count as
/// holders, only the audit's search list is capped).
const FP_PER_KEY: usize = 4;

impl Fingerprint {
    pub fn of(value: &[u8]) -> Fingerprint {
        let mut bytes = [0u8; 2 * FP_PART];
        if value.len() < 2 * FP_PART {
            bytes[..value.len()].copy_from_slice(value);
            Fingerprint { len: value.len() as u8, bytes }
        } else {
            bytes[..FP_PART].copy_from_slice(&value[..FP_PART]);
            bytes[FP_PART..].copy_from_slice(&value[value.len() - FP_PART..]);
            Fingerprint { len: (2 * FP_PART) as u8, bytes }
        }
    }
    /// The byte strings to search for.
    fn patterns(&self) -> Vec<&[u8]> {
        if (self.len as usize) < 2 * FP_PART {
            vec![&self.bytes[..self.len as usize]]
        } else {
            vec![&self.bytes[..FP_PART], &self.bytes[FP_PART..]]
        }
    }
}

#[derive(Debug, Clone)]
struct Pending {
    seq: u64,
    at_ns: u64,
    /// Live files holding an older version.
    live: u32,
    /// Files (live or deleted) holding an older version whose bytes are still on the NAND.
    unerased: u32,
    tomb_done: bool,
    /// The key was written again before the delete persisted (its tombstone was dropped
    /// under a newer version): older versions then go when that version reaches them, which
    /// no TTL bounds. Lethe's workloads never write a deleted key again.
    superseded: bool,
    lsm_ns: Option<u64>,
    values: Vec<Fingerprint>,
}

/// One delete's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteRecord {
    pub at_ns: u64,
    pub superseded: bool,
    pub lsm_ns: Option<u64>,
    pub erase_ns: Option<u64>,
}

/// Maps keyed by user keys, on every put's path.
type KeyMap<V> = HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

#[derive(Default)]
struct KeyInfo {
    fps: Vec<Fingerprint>,
    wals: Vec<FileId>,
}

#[derive(Default)]
pub struct Tracker {
    pending: KeyMap<Vec<Pending>>,
    /// File -> (key, delete seq) it holds an older version for.
    holders: HashMap<FileId, Vec<(Vec<u8>, u64)>>,
    /// File -> tombstones of pending deletes it holds.
    tombs: HashMap<FileId, Vec<(Vec<u8>, u64)>>,
    /// Per key: its versions' fingerprints since its last delete, and the WAL files that got
    /// its records (erased ones are dropped lazily: see `live_wals`).
    keys: KeyMap<KeyInfo>,
    /// WAL files with records that are not yet erased.
    live_wals: HashSet<FileId>,
    /// Deletes persisted at erase level: (key, record, values) kept for the audit.
    finished: Vec<(Vec<u8>, DeleteRecord, Vec<Fingerprint>)>,
    pub deletes: u64,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Whether a delete of `key` is being followed (the store's flush and compaction loops
    /// ask before reporting an entry).
    #[inline]
    pub fn watches(&self, key: &[u8]) -> bool {
        !self.pending.is_empty() && self.pending.contains_key(key)
    }

    pub fn on_put(&mut self, key: &[u8], value: &[u8], wal: FileId) {
        let fp = Fingerprint::of(value);
        // One lookup; an overwritten key (the common case) allocates nothing.
        let k = match self.keys.get_mut(key) {
            Some(k) => k,
            None => self.keys.entry(key.to_vec()).or_default(),
        };
        if k.fps.len() == FP_PER_KEY {
            k.fps.remove(0);
        }
        k.fps.push(fp);
        if k.wals.last() != Some(&wal) {
            let live = &self.live_wals;
            k.wals.retain(|w| live.contains(w));
            k.wals.push(wal);
            self.live_wals.insert(wal);
        }
    }

    /// The fingerprints of `key`'s versions since its last delete (a new delete takes them); the
    /// key is forgotten when no live WAL holds it either.
    fn take_fingerprints(&mut self, key: &[u8]) -> Vec<Fingerprint> {
        let Some(k) = self.keys.get_mut(key) else { return vec![] };
        let fps = std::mem::take(&mut k.fps);
        let live = &self.live_wals;
        k.wals.retain(|w| live.contains(w));
        if k.wals.is_empty() {
            self.keys.remove(key);
        }
        fps
    }

    /// WAL files the tracker knows hold a record of `key`.
    pub fn wal_holders(&self, key: &[u8]) -> Vec<FileId> {
        let mut v: Vec<FileId> =
            self.keys.get(key).map(|k| k.wals.iter().copied().filter(|w| self.live_wals.contains(w)).collect()).unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// A delete was issued; `holders` are the files (with whether they are live) that hold an
    /// older version of `key` right now. The tombstone itself went to `wal`.
    pub fn on_delete(&mut self, key: &[u8], seq: u64, now: u64, holders: &[(FileId, bool)]) {
        self.deletes += 1;
        let mut p = Pending {
            seq,
            at_ns: now,
            live: 0,
            unerased: 0,
            tomb_done: false,
            superseded: false,
            lsm_ns: None,
            values: self.take_fingerprints(key),
        };
        for &(f, alive) in holders {
            p.live += alive as u32;
            p.unerased += 1;
            self.holders.entry(f).or_default().push((key.to_vec(), seq));
        }
        self.pending.entry(key.to_vec()).or_default().push(p);
    }

    /// A flush or compaction wrote `(key, seq, kind)` into `file` (at the last level when
    /// `last`). `first_in_file` is false for further versions of the same key in the file.
    pub fn on_output(&mut self, file: FileId, key: &[u8], seq: u64, kind: Kind, last: bool, now: u64) {
        let Some(ps) = self.pending.get_mut(key) else { return };
        let mut done_any = false;
        for p in ps.iter_mut() {
            match kind {
                Kind::Put if seq < p.seq && p.lsm_ns.is_none() => {
                    let h = self.holders.entry(file).or_default();
                    if !h.iter().any(|(k, s)| *s == p.seq && k == key) {
                        h.push((key.to_vec(), p.seq));
                        p.live += 1;
                        p.unerased += 1;
                    }
                }
                Kind::Delete if seq == p.seq => {
                    self.tombs.entry(file).or_default().push((key.to_vec(), p.seq));
                    if last && !p.tomb_done {
                        p.tomb_done = true;
                        done_any = true;
                    }
                }
                _ => {}
            }
        }
        if done_any {
            self.settle(key, now);
        }
    }

    /// A tombstone was dropped by a flush or compaction: nothing older can exist below, or
    /// (`superseded`) a newer version of the key replaces it.
    pub fn on_tomb_dropped(&mut self, key: &[u8], seq: u64, superseded: bool, now: u64) {
        if let Some(p) = self.pending.get_mut(key).and_then(|ps| ps.iter_mut().find(|p| p.seq == seq)) {
            p.tomb_done = true;
            p.superseded |= superseded;
            self.settle(key, now);
        }
    }

    /// A file was moved to the last level without being rewritten.
    pub fn on_moved_to_last(&mut self, file: FileId, now: u64) {
        for (key, seq) in self.tombs.get(&file).cloned().unwrap_or_default() {
            self.on_tomb_dropped(&key, seq, false, now);
        }
    }

    /// The store deleted `file`.
    pub fn on_file_dead(&mut self, file: FileId, now: u64) {
        self.tombs.remove(&file);
        let list = self.holders.get(&file).cloned().unwrap_or_default();
        for (key, seq) in list {
            if let Some(p) = self.pending.get_mut(&key).and_then(|ps| ps.iter_mut().find(|p| p.seq == seq)) {
                assert!(p.live > 0, "a delete's live holder count went below zero");
                p.live -= 1;
            }
            self.settle(&key, now);
        }
    }

    /// Every zone `file` wrote to has been reset since its deletion.
    pub fn on_file_erased(&mut self, file: FileId, now: u64) {
        self.live_wals.remove(&file);
        for (key, seq) in self.holders.remove(&file).unwrap_or_default() {
            if let Some(p) = self.pending.get_mut(&key).and_then(|ps| ps.iter_mut().find(|p| p.seq == seq)) {
                assert!(p.unerased > 0, "a delete's unerased holder count went below zero");
                p.unerased -= 1;
            }
            self.settle(&key, now);
        }
    }

    fn settle(&mut self, key: &[u8], now: u64) {
        let Some(ps) = self.pending.get_mut(key) else { return };
        let mut i = 0;
        while i < ps.len() {
            let p = &mut ps[i];
            if p.lsm_ns.is_none() && p.live == 0 && p.tomb_done {
                p.lsm_ns = Some(now);
            }
            if p.lsm_ns.is_some() && p.unerased == 0 {
                let p = ps.remove(i);
                self.finished.push((
                    key.to_vec(),
                    DeleteRecord { at_ns: p.at_ns, superseded: p.superseded, lsm_ns: p.lsm_ns, erase_ns: Some(now) },
                    p.values,
                ));
            } else {
                i += 1;
            }
        }
        if ps.is_empty() {
            self.pending.remove(key);
        }
    }

    /// Every delete so far: finished ones and those still pending (with None where a level
    /// is not reached yet), in no particular order.
    pub fn records(&self) -> Vec<DeleteRecord> {
        let mut v: Vec<DeleteRecord> = self.finished.iter().map(|(_, r, _)| r.clone()).collect();
        for ps in self.pending.values() {
            for p in ps {
                v.push(DeleteRecord { at_ns: p.at_ns, superseded: p.superseded, lsm_ns: p.lsm_ns, erase_ns: None });
            }
        }
        v.sort_by_key(|r| (r.at_ns, r.lsm_ns, r.erase_ns, r.superseded));
        v
    }

    /// Pending deletes: (tombstone not at the last level yet, live holders left, unerased
    /// holders left).
    pub fn pending_summary(&self) -> (usize, usize, usize) {
        let ps = self.pending.values().flatten();
        let (mut a, mut b, mut c) = (0, 0, 0);
        for p in ps {
            a += !p.tomb_done as usize;
            b += (p.live > 0) as usize;
            c += (p.unerased > 0) as usize;
        }
        (a, b, c)
    }

    /// Deletes not yet persisted at LSM level.
    pub fn pending_lsm(&self) -> usize {
        self.pending.values().flatten().filter(|p| p.lsm_ns.is_none()).count()
    }

    /// Search the raw NAND for the deleted values' fingerprints.
    pub fn audit(&self, fs: &ZoneFs, now: u64) -> Audit {
        struct Who<'a> {
            key: &'a [u8],
            at_ns: u64,
            state: &'static str,
        }
        let mut who: Vec<Who> = vec![];
        // Distinct patterns, each with the deletes whose values carry it (values may repeat).
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut patterns: Vec<&[u8]> = vec![];
        let mut owners: Vec<Vec<usize>> = vec![];
        for (key, r, values) in &self.finished {
            who.push(Who { key, at_ns: r.at_ns, state: "erase-persisted" });
            add_patterns(who.len() - 1, values, &mut index, &mut patterns, &mut owners);
        }
        for (key, ps) in &self.pending {
            for p in ps {
                who.push(Who { key, at_ns: p.at_ns, state: if p.lsm_ns.is_some() { "lsm-persisted" } else { "pending" } });
                add_patterns(who.len() - 1, &p.values, &mut index, &mut patterns, &mut owners);
            }
        }
        let mut a = Audit { deletes: who.len() as u64, patterns: patterns.len() as u64, ..Default::default() };
        if patterns.is_empty() {
            return a;
        }
        let n = patterns.len();
        let finder = Finder::new(patterns);
        let mut seen: Vec<Option<u64>> = vec![None; n];
        let mut left = n;
        fs.scan_nand(|page, bytes| {
            a.scanned_bytes += bytes.len() as u64;
            if left == 0 {
                return;
            }
            finder.find(bytes, |i| {
                let s = &mut seen[i];
                if s.is_none() {
                    *s = Some(page);
                    left -= 1;
                }
            });
        });
        let mut found: HashMap<usize, u64> = HashMap::new();
        for (i, s) in seen.iter().enumerate() {
            if let Some(page) = s {
                for &w in &owners[i] {
                    found.entry(w).or_insert(*page);
                }
            }
        }
        // `who` follows hash-map order: sort by what is reported, for deterministic output.
        let mut hits: Vec<(usize, u64)> = found.into_iter().collect();
        // Erase-persisted survivors (a tracker bug if there is any) first, so the cap never hides them.
        let rank = |w: usize| (who[w].state != "erase-persisted", who[w].at_ns, who[w].key);
        hits.sort_unstable_by(|a, b| (rank(a.0), a.1).cmp(&(rank(b.0), b.1)));
        for (w, page) in hits {
            let x = &who[w];
            match x.state {
                "erase-persisted" => a.survivors_erase_persisted += 1,
                "lsm-persisted" => a.survivors_lsm_persisted += 1,
                _ => a.survivors_pending += 1,
            }
            if a.survivors.len() < 1000 {
                a.survivors.push(Survivor {
                    key: crate::workload::key_token(x.key),
                    state: x.state,
                    deleted_at_ns: x.at_ns,
                    age_ns: now.saturating_sub(x.at_ns),
                    physical_page: page,
                });
            }
        }
        a
    }
}

/// Add the patterns of delete `w`'s values, each distinct pattern once.
fn add_patterns<'a>(
    w: usize,
    values: &'a [Fingerprint],
    index: &mut HashMap<&'a [u8], usize>,
    patterns: &mut Vec<&'a [u8]>,
    owners: &mut Vec<Vec<usize>>,
) {
    for fp in values {
        for p in fp.patterns() {
            let i = *index.entry(p).or_insert_with(|| {
                patterns.push(p);
                owners.push(vec![]);
                patterns.len() - 1
            });
            if owners[i].last() != Some(&w) {
                owners[i].push(w);
            }
        }
    }
}

/// A deleted value found on the NAND.
#[derive(Debug, Clone, Serialize)]
pub struct Survivor {
    pub key: String,
    /// pending | lsm-persisted | erase-persisted (the last is a bug if it ever shows up).
    pub state: &'static str,
    pub deleted_at_ns: u64,
    pub age_ns: u64,
    pub physical_page: u64,
}

/// What an audit found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Audit {
    pub deletes: u64,
    pub patterns: u64,
    pub scanned_bytes: u64,
    pub survivors_pending: u64,
    pub survivors_lsm_persisted: u64,
    pub survivors_erase_persisted: u64,
    /// The first 1000 survivors.
    pub survivors: Vec<Survivor>,
}
