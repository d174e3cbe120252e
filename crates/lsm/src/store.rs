//! The LSM store: WAL, memtable, leveled SSTables on the zone file layer, snapshots, the
//! compaction policies, and the hooks of the deletion measurements.
//!
//! Work runs on the caller's thread in simulated time: an operation is issued at the store's
//! clock (`advance_to`), its device commands are timed by the ZNS device, and the flushes and
//! compactions it triggers are issued at the same moment and occupy the device in the
//! background (their completion is not the operation's). Write stalls are not modelled.
//!
//! Beside this file (the store's state, writes, reads, flushes, table placement):
//! `compact.rs` running compactions, `cursor.rs` the cursor scans and compactions read with.

mod compact;
mod cursor;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use self::cursor::Cursor;
use crate::compaction::View;
use crate::config::{LsmConfig, Policy};
use crate::error::{Error, Result};
use crate::format::{open_block, put_entry, Kind, MAX_KEY_BYTES, MAX_SEQ, MAX_VALUE_BYTES};
use crate::memtable::Memtable;
use crate::persist::{Audit, DeleteRecord, Tracker};
use crate::sst::{search_block, FileId, Table, TableBuilder};
use crate::zonefs::{FileKind, FsEvent, Lifetime, Placement, ZoneFs};

/// Counters of the store (bytes are file bytes, before the zone layer's padding).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LsmStats {
    pub puts: u64,
    pub deletes: u64,
    pub gets: u64,
    pub get_hits: u64,
    pub scans: u64,
    pub scanned_keys: u64,
    /// Key and value bytes of puts plus key bytes of deletes: what the application wrote.
    pub app_write_bytes: u64,
    pub wal_write_bytes: u64,
    pub flushes: u64,
    pub flush_write_bytes: u64,
    pub compactions_saturation: u64,
    pub compactions_ttl: u64,
    /// Compactions run to give a full device room back (`Store::make_room`).
    pub compactions_room: u64,
    /// Saturation-started compactions whose input was an expired tombstone file, first in the
    /// zone-aware policy's queue.
    pub compactions_expired_first: u64,
    pub trivial_moves: u64,
    pub compaction_read_bytes: u64,
    pub compaction_write_bytes: u64,
    pub tombstones_written: u64,
    pub tombstones_dropped: u64,
    pub block_reads: u64,
    pub bloom_skips: u64,
}

/// An SST with tombstones that a compaction consumed: when, how old, how many deletes had
/// been issued by then (the seed's tombstone-file lifetime figure).
#[derive(Debug, Clone, Serialize)]
pub struct TombFileLife {
    pub died_ns: u64,
    pub lifetime_ns: u64,
    pub level: u32,
    pub tombstones: u64,
    pub deletes_issued: u64,
}

/// Key-value pairs in key order (what a scan returns).
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A lookup's result and when the device delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub value: Option<Vec<u8>>,
    pub done_ns: u64,
}

/// Observed lifetimes kept per level (for the zone-aware placement's thresholds).
const LIFETIME_WINDOW: usize = 512;

/// A version found by a lookup: its kind and value.
type Found = (Kind, Vec<u8>);

pub struct Store {
    cfg: LsmConfig,
    fs: ZoneFs,
    mem: Memtable,
    wal: FileId,
    /// Level 0 newest first; deeper levels by key.
    levels: Vec<Vec<Arc<Table>>>,
    seq: u64,
    snapshots: BTreeMap<u64, u32>,
    now_ns: u64,
    stats: LsmStats,
    tracker: Option<Tracker>,
    /// Deleted SSTs whose bytes are still on the NAND (only while tracking deletes).
    dead_tables: HashMap<FileId, Arc<Table>>,
    lifetimes: Vec<VecDeque<u64>>,
    tomb_lives: Vec<TombFileLife>,
    dirty: bool,
    next_expiry_ns: Option<u64>,
    /// The sealed bytes of the data block a lookup reads (kept between lookups: no
    /// allocation or zeroing per read; only ever grows).
    block_buf: Vec<u8>,
    /// The bytes of the last table written, reused by the next table built (an SST's
    /// megabytes would otherwise be fresh memory, faulted in and zeroed, every time).
    table_buf: Vec<u8>,
}

impl Store {
    /// A new, empty store on a freshly formatted ZNS device of `device`.
    pub fn new(device: ssdlab_core::Config, cfg: LsmConfig) -> Result<Store> {
        cfg.validate()?;
        let horizon = if cfg.zone_aware.gc_horizon_ns > 0 { cfg.zone_aware.gc_horizon_ns } else { cfg.delete_threshold_ns / 4 };
        let mut fs = ZoneFs::new(device, cfg.zones.clone(), cfg.gc_method(), horizon)?;
        let wal = fs.create(FileKind::Wal, Placement::Lifetime(Lifetime::Short), None);
        let levels = vec![Vec::new(); cfg.max_levels as usize];
        Ok(Store {
            tracker: cfg.track_deletes.then(Tracker::new),
            lifetimes: vec![VecDeque::new(); cfg.max_levels as usize],
            cfg,
            fs,
            mem: Memtable::new(),
            wal,
            levels,
            seq: 0,
            snapshots: BTreeMap::new(),
            now_ns: 0,
            stats: LsmStats::default(),
            dead_tables: HashMap::new(),
            block_buf: Vec::new(),
            table_buf: Vec::new(),
            tomb_lives: vec![],
            dirty: false,
            next_expiry_ns: None,
        })
    }

    pub fn config(&self) -> &LsmConfig {
        &self.cfg
    }
    pub fn fs(&self) -> &ZoneFs {
        &self.fs
    }
    pub fn stats(&self) -> &LsmStats {
        &self.stats
    }
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    /// Move the store's clock forward (never back).
    /// Move the clock to `t_ns`. TTL compactions due on the way run when their file expires,
    /// as a timer-driven background job would, not when the next operation arrives (FADE's
    /// bound would otherwise be late by up to one operation gap).
    /// A compaction that finds no room waits for the next operation that makes some (the clock
    /// moves on regardless: a full device must not stop reads).
    pub fn advance_to(&mut self, t_ns: u64) -> Result<()> {
        while let Some(e) = self.next_expiry_ns.filter(|&e| e > self.now_ns && e <= t_ns) {
            self.now_ns = e;
            match self.compact_until_settled() {
                Err(Error::NoSpace(_)) => self.dirty = true,
                r => r?,
            }
        }
        self.now_ns = self.now_ns.max(t_ns);
        Ok(())
    }
    pub fn tomb_file_lives(&self) -> &[TombFileLife] {
        &self.tomb_lives
    }

    /// Bytes of every live SST.
    pub fn sst_bytes(&self) -> u64 {
        self.levels.iter().flatten().map(|t| t.size_bytes).sum()
    }
    /// (files, bytes) per level.
    pub fn level_shape(&self) -> Vec<(usize, u64)> {
        self.levels.iter().map(|l| (l.len(), l.iter().map(|t| t.size_bytes).sum())).collect()
    }
    /// Tombstones held by live SSTs.
    pub fn sst_tombstones(&self) -> u64 {
        self.levels.iter().flatten().map(|t| t.tombstones).sum()
    }
    pub fn memtable_bytes(&self) -> u64 {
        self.mem.bytes()
    }

    fn check_kv(key: &[u8], value_len: usize) -> Result<()> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(Error::Input(format!("key of {} bytes: keys are 1..{MAX_KEY_BYTES} bytes", key.len())));
        }
        if value_len > MAX_VALUE_BYTES {
            return Err(Error::Input(format!("value of {value_len} bytes: values are at most {MAX_VALUE_BYTES} bytes")));
        }
        Ok(())
    }

    fn next_seq(&mut self) -> Result<u64> {
        if self.seq >= MAX_SEQ {
            return Err(Error::Input("sequence numbers exhausted".into()));
        }
        self.seq += 1;
        Ok(self.seq)
    }

    /// Append a WAL record (`u32 len | u32 crc | entry`); returns the write's completion.
    fn log(&mut self, key: &[u8], seq: u64, kind: Kind, value: &[u8]) -> Result<u64> {
        let mut rec = Vec::with_capacity(8 + key.len() + value.len() + 20);
        rec.extend_from_slice(&[0u8; 8]);
        put_entry(&mut rec, key, seq, kind, value);
        let len = (rec.len() - 8) as u32;
        let crc = crc32fast::hash(&rec[8..]);
        rec[..4].copy_from_slice(&len.to_le_bytes());
        rec[4..8].copy_from_slice(&crc.to_le_bytes());
        self.stats.wal_write_bytes += rec.len() as u64;
        let now = self.now_ns;
        let mut done = self.fs.append(self.wal, &rec, now)?;
        if self.cfg.wal_sync {
            done = done.max(self.fs.sync(self.wal, now)?);
        }
        Ok(done)
    }

    /// Write `key` = `value`; returns when the device acknowledged the WAL record.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        Self::check_kv(key, value.len())?;
        self.background()?;
        let seq = self.next_seq()?;
        let done = self.log(key, seq, Kind::Put, value)?;
        if let Some(tr) = self.tracker.as_mut() {
            tr.on_put(key, value, self.wal);
        }
        self.mem.insert(key, seq, Kind::Put, value);
        self.stats.puts += 1;
        self.stats.app_write_bytes += (key.len() + value.len()) as u64;
        self.background_unless_full()?;
        Ok(done)
    }

    /// Delete `key` (a tombstone stamped with the store's clock, as Lethe stamps them).
    pub fn delete(&mut self, key: &[u8]) -> Result<u64> {
        Self::check_kv(key, 0)?;
        // A delete is taken on a full device (its tombstone needs a few bytes of the log, and
        // it is how room is made).
        self.background_unless_full()?;
        let seq = self.next_seq()?;
        let now = self.now_ns;
        let stamp = now.to_le_bytes();
        if self.tracker.is_some() {
            let holders = self.holders_of(key)?;
            if let Some(tr) = self.tracker.as_mut() {
                tr.on_delete(key, seq, now, &holders);
            }
        }
        let done = self.log(key, seq, Kind::Delete, &stamp)?;
        self.mem.insert(key, seq, Kind::Delete, &stamp);
        self.stats.deletes += 1;
        self.stats.app_write_bytes += key.len() as u64;
        self.background_unless_full()?;
        Ok(done)
    }

    /// Empty zones kept for the work that gives room back (flushes, compactions, zone GC,
    /// deletes): a served store refuses new data once it is down to these
    /// ([`Store::make_room`]). Enough for a memtable flush and a compaction of one file with
    /// its overlap in the next level (`size_ratio` + 1 files) plus the log's zone; at most a
    /// quarter of the device, at least 2 zones.
    pub fn reserve_zones(&self) -> usize {
        let c = &self.cfg;
        let bytes = c.memtable_bytes + (c.size_ratio as u64 + 2) * c.sst_target_bytes;
        let zones = bytes.div_ceil(self.fs.zone_capacity_bytes().max(1)) as usize + 1;
        zones.min(self.fs.usable_zones() / 4).max(2)
    }

    /// Whether new data may be written: more empty zones than [`Store::reserve_zones`]. When
    /// the device is down to its reserve, give room back first: the memtable (deletes
    /// included) is flushed, due compactions run, then compactions that drop deleted and
    /// overwritten versions (the file with the most tombstones, else the one overlapping
    /// least, level by level), then zone GC up to one zone past the reserve. A full device
    /// that holds only live data stays full: the caller refuses the write.
    pub fn make_room(&mut self) -> Result<bool> {
        let reserve = self.reserve_zones();
        if self.fs.free_zones() > reserve {
            return Ok(true);
        }
        let tolerate = |r: Result<()>| match r {
            Err(Error::NoSpace(_)) => Ok(()),
            r => r,
        };
        tolerate(self.flush())?;
        tolerate(self.background())?;
        let mut tried = std::collections::HashSet::new();
        for _ in 0..256 {
            if self.fs.free_zones() > reserve {
                break;
            }
            let now = self.now_ns;
            tolerate(self.fs.gc_to(reserve + 1, now).map(|_| ()))?;
            self.drain_events();
            if self.fs.free_zones() > reserve {
                break;
            }
            let Some(pick) = self.room_pick(&tried) else { break };
            tried.extend(pick.inputs.iter().map(|t| t.id));
            tolerate(self.compact(pick))?;
        }
        Ok(self.fs.free_zones() > reserve)
    }

    /// Register a snapshot: reads at it see the store as it is now, and compactions keep
    /// what it sees. Release it with `release`.
    pub fn snapshot(&mut self) -> u64 {
        *self.snapshots.entry(self.seq).or_insert(0) += 1;
        self.seq
    }
    pub fn release(&mut self, snap: u64) -> Result<()> {
        match self.snapshots.get_mut(&snap) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.snapshots.remove(&snap);
                self.dirty = true;
            }
            None => return Err(Error::Input(format!("no snapshot {snap}"))),
        }
        Ok(())
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Lookup> {
        self.get_at(key, MAX_SEQ)
    }

    /// The value of `key` visible at snapshot `at`.
    pub fn get_at(&mut self, key: &[u8], at: u64) -> Result<Lookup> {
        Self::check_kv(key, 0)?;
        self.background_unless_full()?;
        self.stats.gets += 1;
        let mut t = self.now_ns;
        if let Some(v) = self.mem.get(key, at) {
            let value = (v.kind == Kind::Put).then(|| v.value.to_vec());
            self.stats.get_hits += value.is_some() as u64;
            return Ok(Lookup { value, done_ns: t });
        }
        for i in 0..self.levels.len() {
            // L0 tables newest first, all of them; deeper levels the one table whose range
            // holds the key. One Arc clone per table searched, no list built.
            let (mut k, end) = if i == 0 {
                (0, self.levels[0].len())
            } else {
                let l = &self.levels[i];
                let j = l.partition_point(|x| x.largest.as_slice() < key);
                (j, if l.get(j).is_some_and(|x| x.smallest.as_slice() <= key) { j + 1 } else { j })
            };
            while k < end {
                let table = self.levels[i][k].clone();
                k += 1;
                if let Some((kind, v)) = self.search_table(&table, key, at, &mut t)? {
                    let value = (kind == Kind::Put).then_some(v);
                    self.stats.get_hits += value.is_some() as u64;
                    return Ok(Lookup { value, done_ns: t });
                }
            }
        }
        Ok(Lookup { value: None, done_ns: t })
    }

    /// Look `key` up in data block `b` of `table`, read through the device; `t` is when the
    /// read is issued and becomes its completion. Returns the hit (kind, value) and whether
    /// the key's versions may go on in the next block.
    fn search_block_of(&mut self, table: &Table, b: usize, key: &[u8], at: u64, t: &mut u64) -> Result<(Option<Found>, bool)> {
        let len = table.index[b].len as usize;
        if self.block_buf.len() < len {
            self.block_buf.resize(len, 0);
        }
        let raw = &mut self.block_buf[..len];
        *t = self.fs.read(table.id, table.index[b].offset, raw, *t)?;
        self.stats.block_reads += 1;
        let blk = open_block(raw)?;
        let (hit, more) = search_block(&blk, key, at)?;
        Ok((hit.map(|(kind, r)| (kind, blk[r].to_vec())), more))
    }

    fn search_table(&mut self, table: &Table, key: &[u8], at: u64, t: &mut u64) -> Result<Option<Found>> {
        if key < table.smallest.as_slice() || key > table.largest.as_slice() {
            return Ok(None);
        }
        if !table.may_contain(key) {
            self.stats.bloom_skips += 1;
            return Ok(None);
        }
        let Some(mut b) = table.block_for(key) else { return Ok(None) };
        loop {
            let (hit, more) = self.search_block_of(table, b, key, at, t)?;
            if hit.is_some() {
                return Ok(hit);
            }
            if !more || b + 1 >= table.index.len() {
                return Ok(None);
            }
            b += 1;
        }
    }

    /// Up to `limit` live (key, value) pairs with `start <= key <= end` in key order.
    pub fn scan(&mut self, start: &[u8], end: Option<&[u8]>, limit: usize) -> Result<(Pairs, u64)> {
        self.scan_at(start, end, limit, MAX_SEQ)
    }

    pub fn scan_at(&mut self, start: &[u8], end: Option<&[u8]>, limit: usize, at: u64) -> Result<(Pairs, u64)> {
        self.background_unless_full()?;
        self.stats.scans += 1;
        let mut t = self.now_ns;
        let mut cursors: Vec<Cursor> = vec![];
        for table in self.levels[0].clone() {
            cursors.push(Cursor::new(vec![table], false));
        }
        for i in 1..self.levels.len() {
            let l = &self.levels[i];
            let j = l.partition_point(|x| x.largest.as_slice() < start);
            let tables: Vec<Arc<Table>> = l[j..].iter().take_while(|x| end.is_none_or(|e| x.smallest.as_slice() <= e)).cloned().collect();
            if !tables.is_empty() {
                cursors.push(Cursor::new(tables, false));
            }
        }
        for c in cursors.iter_mut() {
            c.seek(&mut self.fs, &mut self.stats, start, &mut t)?;
        }
        let mut out = vec![];
        let mut mem_pos = self.mem.seek(start);
        let mut mem_key: Option<Vec<u8>> = self.mem.key_at(mem_pos).map(|k| k.to_vec());
        while out.len() < limit {
            // The smallest current key among the memtable and the cursors.
            let mut k: Option<Vec<u8>> = mem_key.clone();
            for c in &cursors {
                if let Some((ck, _, _, _)) = c.entry() {
                    if k.as_deref().is_none_or(|x| ck < x) {
                        k = Some(ck.to_vec());
                    }
                }
            }
            let Some(k) = k else { break };
            if end.is_some_and(|e| k.as_slice() > e) {
                break;
            }
            // Newest version visible at `at` across the sources.
            let mut best: Option<(u64, Kind, Vec<u8>)> = None;
            if mem_key.as_deref() == Some(k.as_slice()) {
                if let Some(v) = self.mem.get(&k, at) {
                    best = Some((v.seq, v.kind, v.value.to_vec()));
                }
                mem_pos += 1;
                mem_key = self.mem.key_at(mem_pos).map(|k| k.to_vec());
            }
            for c in cursors.iter_mut() {
                while let Some((ck, seq, kind, v)) = c.entry() {
                    if ck != k.as_slice() {
                        break;
                    }
                    if seq <= at && best.as_ref().is_none_or(|(s, _, _)| seq > *s) {
                        best = Some((seq, kind, v.to_vec()));
                    }
                    c.advance(&mut self.fs, &mut self.stats, &mut t)?;
                }
            }
            if let Some((_, Kind::Put, v)) = best {
                out.push((k, v));
            }
        }
        self.stats.scanned_keys += out.len() as u64;
        Ok((out, t))
    }

    /// Files holding an older version of `key` right now: (id, live).
    fn holders_of(&self, key: &[u8]) -> Result<Vec<(FileId, bool)>> {
        let tr = self.tracker.as_ref().expect("tracking deletes");
        let mut v: Vec<(FileId, bool)> = tr.wal_holders(key).into_iter().map(|id| (id, id == self.wal)).collect();
        for t in self.tables_holding_range(key, 0) {
            if t.may_contain(key) && self.peek_contains(t, key)? {
                v.push((t.id, true));
            }
        }
        let mut dead: Vec<&Arc<Table>> = self.dead_tables.values().filter(|t| t.may_contain(key)).collect();
        dead.sort_by_key(|t| t.id);
        for t in dead {
            if self.peek_contains(t, key)? {
                v.push((t.id, false));
            }
        }
        Ok(v)
    }

    /// Whether `table` holds any version of `key`, looking at the media without timing.
    fn peek_contains(&self, table: &Table, key: &[u8]) -> Result<bool> {
        let Some(mut b) = table.block_for(key) else { return Ok(false) };
        loop {
            let e = &table.index[b];
            let mut raw = vec![0u8; e.len as usize];
            self.fs.peek(table.id, e.offset, &mut raw)?;
            // A deleted table's block in a zone reset since no longer parses. It is gone only
            // if none of it is left: a block that straddles two zones, one reset and one not,
            // still has bytes (perhaps this key's value) on the NAND, so the table still
            // holds the key until that zone is reset too.
            let Ok(blk) = open_block(&raw) else { return Ok(self.fs.bytes_on_nand(table.id, e.offset, e.len as u64)) };
            let (hit, more) = search_block(&blk, key, MAX_SEQ)?;
            if hit.is_some() {
                return Ok(true);
            }
            if !more || b + 1 >= table.index.len() {
                return Ok(false);
            }
            b += 1;
        }
    }

    /// The live tables of level `from` and deeper whose key range holds `key`: every L0 table
    /// that does, and at most one per deeper level (those are sorted and disjoint).
    fn tables_holding_range(&self, key: &[u8], from: usize) -> impl Iterator<Item = &Arc<Table>> + '_ {
        let key = key.to_vec();
        self.levels.iter().enumerate().skip(from).flat_map(move |(i, l)| {
            let (a, b) = if i == 0 {
                (0, l.len())
            } else {
                let j = l.partition_point(|x| x.largest.as_slice() < key.as_slice());
                (j, (j + 1).min(l.len()))
            };
            let key = key.clone();
            l[a..b].iter().filter(move |t| t.smallest.as_slice() <= key.as_slice() && key.as_slice() <= t.largest.as_slice())
        })
    }

    /// Whether `key` may exist in level `from` or deeper.
    fn may_exist_from(&self, key: &[u8], from: usize) -> bool {
        self.tables_holding_range(key, from).any(|t| t.may_contain(key))
    }

    /// Background work where the caller goes on without it: a read, or a write already in the
    /// log and the memtable. When the device has no room for it, it waits for the next write,
    /// which is refused while that lasts; reads are served from what is there.
    fn background_unless_full(&mut self) -> Result<()> {
        match self.background() {
            Err(Error::NoSpace(_)) => Ok(()),
            r => r,
        }
    }

    /// Flush, compact, collect zones, as the state asks.
    fn background(&mut self) -> Result<()> {
        if self.mem.bytes() >= self.cfg.memtable_bytes {
            self.flush()?;
        }
        if self.dirty || self.next_expiry_ns.is_some_and(|e| self.now_ns >= e) {
            self.compact_until_settled()?;
        }
        Ok(())
    }

    /// Write the memtable to an L0 file and start a new WAL.
    pub fn flush(&mut self) -> Result<()> {
        if self.mem.is_empty() {
            return Ok(());
        }
        let now = self.now_ns;
        // The memtable moves out while its entries are written (the loop needs the store)
        // and comes back emptied, its memory kept for the next one.
        let mut mem = std::mem::take(&mut self.mem);
        let snaps: Vec<u64> = self.snapshots.keys().copied().collect();
        let mut b = self.builder();
        let mut tracked: Vec<(Vec<u8>, u64, Kind)> = vec![];
        // Tombstones this flush drops: (key, seq, shadowed by a newer version). Nothing changes
        // until the table is on the device: a flush that finds no room keeps the memtable.
        let mut dropped: Vec<(Vec<u8>, u64, bool)> = vec![];
        let mut written_tombstones = 0;
        for (key, versions) in mem.sorted_entries() {
            let mut prev_stripe = None;
            for v in versions {
                let stripe = snaps.partition_point(|&s| s < v.seq);
                if prev_stripe == Some(stripe) {
                    // Shadowed: a newer version in the same stripe replaces it. A shadowed
                    // tombstone's work passes to that version.
                    if v.kind == Kind::Delete && self.tracker.is_some() {
                        dropped.push((key.to_vec(), v.seq, true));
                    }
                    continue;
                }
                prev_stripe = Some(stripe);
                if v.kind == Kind::Delete && stripe == 0 && !self.may_exist_from(key, 0) {
                    dropped.push((key.to_vec(), v.seq, false));
                    continue;
                }
                if self.tracker.as_ref().is_some_and(|tr| tr.watches(key)) {
                    tracked.push((key.to_vec(), v.seq, v.kind));
                }
                written_tombstones += (v.kind == Kind::Delete) as u64;
                b.add(key, v.seq, v.kind, v.value);
            }
        }
        let last = self.levels[1..].iter().all(|l| l.is_empty());
        let table = if b.is_empty() {
            None
        } else {
            match self.write_table(b, 0, now) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.mem = mem;
                    return Err(e);
                }
            }
        };
        self.stats.tombstones_dropped += dropped.iter().filter(|d| !d.2).count() as u64;
        self.stats.tombstones_written += written_tombstones;
        if let Some(tr) = self.tracker.as_mut() {
            for (key, seq, shadowed) in &dropped {
                tr.on_tomb_dropped(key, *seq, *shadowed, now);
            }
        }
        mem.clear();
        self.mem = mem;
        self.stats.flushes += 1;
        if let Some(table) = table {
            self.stats.flush_write_bytes += table.size_bytes;
            if let Some(tr) = self.tracker.as_mut() {
                for (k, s, kind) in &tracked {
                    tr.on_output(table.id, k, *s, *kind, last, now);
                }
            }
            self.levels[0].insert(0, table);
        }
        let old = self.wal;
        self.fs.close(old, now)?;
        self.wal = self.fs.create(FileKind::Wal, Placement::Lifetime(Lifetime::Short), None);
        self.fs.delete(old, now)?;
        if let Some(tr) = self.tracker.as_mut() {
            tr.on_file_dead(old, now);
        }
        self.drain_events();
        self.dirty = true;
        Ok(())
    }

    /// Seal `b` as a table of `level`, place it and write it.
    fn write_table(&mut self, b: TableBuilder, level: usize, now: u64) -> Result<Arc<Table>> {
        let (bytes, mut table) = b.finish(0, now);
        let (placement, death) = self.placement_for(&table, level);
        let (id, _) = self.fs.write_file(FileKind::Sst, placement, death, &bytes, now)?;
        self.table_buf = bytes;
        table.id = id;
        Ok(Arc::new(table))
    }

    /// A table builder on the store's settings, writing into the reused table buffer.
    fn builder(&mut self) -> TableBuilder {
        TableBuilder::reusing(self.cfg.block_bytes, self.cfg.compression, self.cfg.bloom_bits_per_key, std::mem::take(&mut self.table_buf))
    }

    fn view_ttl(&self, level: usize) -> Option<u64> {
        let share = |_: &Table| 0.0;
        View { cfg: &self.cfg, levels: &self.levels, now_ns: self.now_ns, zone_share: &share }.ttl_ns(level)
    }

    /// Where a new table goes. The zone-aware policy places tombstone files by the lifetime
    /// its TTLs assign them: until their TTL expires (then they are compacted). Shorter than
    /// the mean observed L1 lifetime: with the low-level SSTs; shorter than the 75th
    /// percentile of their level's: in separate zones; otherwise as any file of the level.
    fn placement_for(&self, t: &Table, level: usize) -> (Placement, Option<u64>) {
        let default = Placement::Lifetime(Lifetime::of_level(level));
        if self.cfg.policy != Policy::ZoneAware || t.tombstones == 0 || !self.cfg.zone_aware.tombstone_placement {
            return (default, None);
        }
        let (Some(oldest), Some(ttl)) = (t.oldest_tombstone_ns, self.view_ttl(level)) else { return (default, None) };
        let now = self.now_ns;
        let predicted = oldest.saturating_add(ttl).saturating_sub(now);
        let death = Some(now.saturating_add(predicted));
        let l1 = &self.lifetimes[1];
        if !l1.is_empty() && (predicted as f64) < l1.iter().sum::<u64>() as f64 / l1.len() as f64 {
            return (Placement::Lifetime(Lifetime::Medium), death);
        }
        let lv = &self.lifetimes[level];
        if !lv.is_empty() {
            let mut v: Vec<u64> = lv.iter().copied().collect();
            v.sort_unstable();
            let k = ((v.len() as f64 * self.cfg.zone_aware.separate_percentile).ceil() as usize).clamp(1, v.len()) - 1;
            if predicted < v[k] {
                return (Placement::Separate, death);
            }
        }
        (default, death)
    }

    fn drain_events(&mut self) {
        for ev in self.fs.take_events() {
            match ev {
                FsEvent::FileErased { id, at_ns } => {
                    self.dead_tables.remove(&id);
                    if let Some(tr) = self.tracker.as_mut() {
                        tr.on_file_erased(id, at_ns);
                    }
                }
            }
        }
    }

    /// Per-delete persistence records (tracking on).
    pub fn delete_records(&self) -> Vec<DeleteRecord> {
        self.tracker.as_ref().map(|t| t.records()).unwrap_or_default()
    }
    pub fn deletes_pending_summary(&self) -> (usize, usize, usize) {
        self.tracker.as_ref().map_or((0, 0, 0), |t| t.pending_summary())
    }
    pub fn deletes_pending_lsm(&self) -> usize {
        self.tracker.as_ref().map_or(0, |t| t.pending_lsm())
    }

    /// Search the NAND for the bytes of deleted values (tracking on).
    pub fn audit(&self) -> Result<Audit> {
        let tr = self.tracker.as_ref().ok_or_else(|| Error::Input("the audit needs lsm.track_deletes = true".into()))?;
        Ok(tr.audit(&self.fs, self.now_ns))
    }

    /// Assert the store's invariants (tests).
    pub fn check_invariants(&self) {
        for (i, l) in self.levels.iter().enumerate().skip(1) {
            for w in l.windows(2) {
                assert!(w[0].largest < w[1].smallest, "level {i}: tables overlap or are out of order");
            }
        }
        for t in self.levels.iter().flatten() {
            assert!(self.fs.is_alive(t.id), "table {} has no live file", t.id);
            assert_eq!(self.fs.file_size(t.id), t.size_bytes.div_ceil(self.fs.sector_bytes()) * self.fs.sector_bytes());
        }
        self.fs.check_invariants();
    }
}
