//! A compact log-structured key-value store on a vSSD, in the way the document's modified
//! LevelDB uses FlashBlox: records are appended to the head block one write unit at a time,
//! an index in memory points at each key's newest record, and the store does its own
//! compaction at erase-block granularity: when free blocks run low it picks the block with the
//! least live data, reads its live records, appends them at the head and frees the block
//! (`AllocBlock`, `ReadData`, `WriteData`, `FreeBlock`, as the document's five steps say).
//!
//! Record: a 16-byte header (key, length, and a check word), `key_bytes` of key text (YCSB's
//! keys are ~24 characters) and the value, packed into units without straddling them.
//! Timing: a put completes once its record is in the unit buffer, unless more than
//! `max_inflight_units` unit programs are in flight (its own and compaction's), when it waits
//! for the oldest: compaction that cannot keep up stalls writes, as LevelDB's does. A get of a
//! record still in the buffer is served from memory; otherwise it reads the sectors holding
//! it. The index is not persisted (the store is a workload, not a database; crash recovery in
//! this case study is the vSSD layer's).
//!
//! [`KvStore`] is the interface the experiments drive, so another store (an LSM tree) can run
//! the same mixes on the same vSSDs.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use ssdlab_core::ftl::victim::greedy;

use crate::error::{Result, VssdError};
use crate::flashblox::BlockApi;

/// A value to put: its length only (metadata-only runs) or its bytes.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Len(u32),
    Bytes(&'a [u8]),
}

impl Value<'_> {
    pub fn len(&self) -> u32 {
        match self {
            Value::Len(n) => *n,
            Value::Bytes(b) => b.len() as u32,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A put that may not wait: done (its completion), or held until the store's background work
/// has moved on (ask again at the time given, with the same [`WriteTicket`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    Done(u64),
    Held(u64),
}

/// A write's way through a store's admission rules, kept across its retries: LevelDB delays a
/// write at most once (`allow_delay` in `MakeRoomForWrite`), and a held write is counted once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteTicket {
    pub delayed: bool,
    pub held: bool,
    /// The rules that have held it (a bit each, the store's own).
    pub reasons: u8,
}

/// What a key-value store on a vSSD offers the experiments. Times are simulated ns: each call
/// starts at `now` and returns its completion.
///
/// A store with background work (flushes, compactions) also runs it in time order with
/// everything else on the device: [`KvStore::next_background`] says when its next step is due
/// and [`KvStore::run_background`] issues the steps due by then; [`KvStore::try_put`] answers
/// [`Put::Held`] instead of running the background work ahead of the caller's clock. `put`
/// waits itself (for callers alone on their device).
pub trait KvStore {
    fn put(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64) -> Result<u64>;
    /// A put that does not wait for the store's background work.
    fn try_put(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64, _ticket: &mut WriteTicket) -> Result<Put> {
        self.put(io, key, value, now).map(Put::Done)
    }
    /// When the next background step is due, if any.
    fn next_background(&self) -> Option<u64> {
        None
    }
    /// Issue the background steps due by `now`.
    fn run_background(&mut self, _io: &mut dyn BlockApi, _now: u64) -> Result<()> {
        Ok(())
    }
    /// The store's own figures beyond [`KvStats`] (level sizes, stall reasons), for reports.
    fn details(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// (found, completion); with `out`, the value's bytes (data-backed devices).
    fn get(&mut self, io: &mut dyn BlockApi, key: u64, out: Option<&mut Vec<u8>>, now: u64) -> Result<(bool, u64)>;
    fn delete(&mut self, io: &mut dyn BlockApi, key: u64, now: u64) -> Result<u64>;
    /// Read up to `count` records from the first key >= `start` in key order; (records, completion).
    fn scan(&mut self, io: &mut dyn BlockApi, start: u64, count: u32, now: u64) -> Result<(u32, u64)>;
    fn stats(&self) -> KvStats;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStats {
    pub records: u64,
    pub puts: u64,
    pub gets: u64,
    /// Key and value bytes the application put.
    pub app_write_bytes: u64,
    /// Bytes of units written (puts and compaction).
    pub device_write_bytes: u64,
    pub compactions: u64,
    /// Record bytes compaction moved.
    pub compaction_bytes: u64,
    /// Puts that waited for unit programs in flight.
    pub write_stalls: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogKvConfig {
    /// Key text per record (YCSB's "user..." keys).
    pub key_bytes: u32,
    /// Compaction runs when the vSSD has this many free blocks or fewer.
    pub reserve_blocks: u32,
    /// Unit programs in flight before a put waits.
    pub max_inflight_units: u32,
}

impl Default for LogKvConfig {
    fn default() -> Self {
        LogKvConfig { key_bytes: 24, reserve_blocks: 2, max_inflight_units: 8 }
    }
}

const HEADER: u32 = 16;
const CHECK: u32 = 0x4b56_5245; // "KVRE"

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    block: u32,
    unit: u32,
    off: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Free,
    Head,
    Full,
}

/// The store. See the module docs.
#[derive(Debug, Clone)]
pub struct LogKv {
    cfg: LogKvConfig,
    unit_bytes: u32,
    unit_sectors: u32,
    sector_bytes: u32,
    units_per_block: u32,
    index: BTreeMap<u64, Loc>,
    live: Vec<u64>,
    /// Records appended to each block (key, unit, offset): compaction's scan list.
    recs: Vec<Vec<(u64, u32, u32)>>,
    state: Vec<BlockState>,
    head: Option<(u32, u32)>,
    fill: u32,
    /// The unit being filled (data-backed devices).
    buf: Vec<u8>,
    inflight: VecDeque<u64>,
    compacting: bool,
    stats: KvStats,
}

impl LogKv {
    pub fn new(io: &dyn BlockApi, cfg: LogKvConfig) -> Result<LogKv> {
        let unit_sectors = io.unit_sectors();
        let sector_bytes = io.sector_bytes();
        let unit_bytes = unit_sectors * sector_bytes;
        let blocks = io.blocks() as usize;
        if cfg.reserve_blocks == 0 || cfg.reserve_blocks + 2 > io.blocks() {
            return Err(VssdError::Config(format!(
                "kv.reserve_blocks = {}: 1 or more, and at most the vSSD's {} blocks - 2",
                cfg.reserve_blocks,
                io.blocks()
            )));
        }
        if cfg.max_inflight_units == 0 {
            return Err(VssdError::Config("kv.max_inflight_units must be at least 1".into()));
        }
        Ok(LogKv {
            unit_sectors,
            sector_bytes,
            unit_bytes,
            units_per_block: io.block_sectors() / unit_sectors,
            index: BTreeMap::new(),
            live: vec![0; blocks],
            recs: vec![vec![]; blocks],
            state: vec![BlockState::Free; blocks],
            head: None,
            fill: 0,
            buf: if io.data_backed() { vec![0; unit_bytes as usize] } else { vec![] },
            inflight: VecDeque::new(),
            compacting: false,
            stats: KvStats::default(),
            cfg,
        })
    }

    fn record_bytes(&self, value_len: u32) -> u32 {
        HEADER + self.cfg.key_bytes + value_len
    }

    /// Largest value a record can hold (one unit).
    pub fn max_value_bytes(&self) -> u32 {
        self.unit_bytes - HEADER - self.cfg.key_bytes
    }

    /// Live record bytes over the vSSD's capacity.
    pub fn utilization(&self, io: &dyn BlockApi) -> f64 {
        self.live.iter().sum::<u64>() as f64 / (io.blocks() as f64 * io.block_sectors() as f64 * self.sector_bytes as f64)
    }

    /// Program the unit being filled; returns when the caller may go on (now, or when the
    /// oldest program in flight completes if too many are).
    fn flush(&mut self, io: &mut dyn BlockApi, now: u64, earliest: u64) -> Result<u64> {
        let (b, u) = self.head.expect("a head block to flush");
        if self.fill == 0 {
            return Ok(now);
        }
        let data = if io.data_backed() {
            self.buf[self.fill as usize..].fill(0);
            Some(&self.buf[..])
        } else {
            None
        };
        let done = io.write_data(b, u * self.unit_sectors, self.unit_sectors, data, earliest.max(now))?;
        self.stats.device_write_bytes += self.unit_bytes as u64;
        self.inflight.push_back(done);
        let mut t = now;
        while self.inflight.len() > self.cfg.max_inflight_units as usize {
            let oldest = self.inflight.pop_front().expect("non-empty");
            if oldest > t {
                t = oldest;
            }
        }
        if t > now {
            self.stats.write_stalls += 1;
        }
        self.fill = 0;
        if u + 1 == self.units_per_block {
            self.state[b as usize] = BlockState::Full;
            self.head = None;
        } else {
            self.head = Some((b, u + 1));
        }
        Ok(t)
    }

    /// A head block to append to; compacts first when free blocks are low.
    fn ensure_head(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<u64> {
        if self.head.is_some() {
            return Ok(now);
        }
        let mut t = now;
        if !self.compacting {
            let mut rounds = 0;
            while io.free_blocks() <= self.cfg.reserve_blocks {
                t = t.max(self.compact(io, now)?);
                rounds += 1;
                if rounds > io.blocks() {
                    return Err(VssdError::Api("kv: compaction frees nothing (the store is full)".into()));
                }
            }
        }
        if self.head.is_none() {
            let b = io.alloc_block().map_err(|e| match e {
                VssdError::Api(m) => VssdError::Api(format!("kv: out of space ({m}); keep the data below the vSSD's capacity")),
                other => other,
            })?;
            self.state[b as usize] = BlockState::Head;
            self.head = Some((b, 0));
            self.fill = 0;
        }
        Ok(t)
    }

    /// Append one record; its data (if any) is ready at `earliest`. Returns when the caller may
    /// go on.
    fn append(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64, earliest: u64) -> Result<u64> {
        let size = self.record_bytes(value.len());
        if value.len() > self.max_value_bytes() {
            return Err(VssdError::Api(format!("value of {} bytes: at most {} fit a record", value.len(), self.max_value_bytes())));
        }
        let mut t = now;
        // Compaction while finding a head may leave a partly filled unit: check again after.
        loop {
            if self.head.is_some() && self.fill + size > self.unit_bytes {
                t = t.max(self.flush(io, now, earliest)?);
            }
            t = t.max(self.ensure_head(io, now)?);
            if self.fill + size <= self.unit_bytes {
                break;
            }
        }
        let (b, u) = self.head.expect("head");
        assert!(self.fill + size <= self.unit_bytes, "a record straddling units");
        let off = self.fill;
        if !self.buf.is_empty() {
            let r = &mut self.buf[off as usize..(off + size) as usize];
            r[..8].copy_from_slice(&key.to_le_bytes());
            r[8..12].copy_from_slice(&value.len().to_le_bytes());
            r[12..16].copy_from_slice(&CHECK.to_le_bytes());
            r[16..16 + self.cfg.key_bytes as usize].fill(b'k');
            match value {
                Value::Bytes(v) => r[(HEADER + self.cfg.key_bytes) as usize..].copy_from_slice(v),
                Value::Len(_) => r[(HEADER + self.cfg.key_bytes) as usize..].fill(0),
            }
        }
        self.fill += size;
        self.recs[b as usize].push((key, u, off));
        self.live[b as usize] += size as u64;
        if let Some(old) = self.index.insert(key, Loc { block: b, unit: u, off, len: size }) {
            self.live[old.block as usize] -= old.len as u64;
        }
        if self.fill + HEADER + self.cfg.key_bytes > self.unit_bytes {
            t = t.max(self.flush(io, now, earliest)?);
        }
        Ok(t)
    }

    /// Collect the full block with the least live data. Returns when the caller may go on.
    fn compact(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<u64> {
        let victim = greedy((0..self.state.len()).filter(|&b| self.state[b] == BlockState::Full), |b| self.live[b])
            .ok_or_else(|| VssdError::Api("kv: no full block to compact (the store is full)".into()))? as u32;
        self.compacting = true;
        self.stats.compactions += 1;
        let recs = std::mem::take(&mut self.recs[victim as usize]);
        let live: Vec<(u64, Loc)> = recs
            .iter()
            .filter_map(|&(k, u, off)| self.index.get(&k).filter(|l| l.block == victim && l.unit == u && l.off == off).map(|&l| (k, l)))
            .collect();
        // Read every unit holding live records, whole.
        let mut t = now;
        let mut read_done = now;
        let mut unit_data: Vec<(u32, Vec<u8>)> = vec![];
        let mut last_unit = u32::MAX;
        for &(_, l) in &live {
            if l.unit == last_unit {
                continue;
            }
            last_unit = l.unit;
            let mut data = if io.data_backed() { vec![0u8; self.unit_bytes as usize] } else { vec![] };
            let out = if io.data_backed() { Some(&mut data[..]) } else { None };
            read_done = read_done.max(io.read_data(victim, l.unit * self.unit_sectors, self.unit_sectors, out, now)?);
            unit_data.push((l.unit, data));
        }
        for &(k, l) in &live {
            let vlen = l.len - HEADER - self.cfg.key_bytes;
            let bytes;
            let value = if io.data_backed() {
                let d = &unit_data.iter().find(|x| x.0 == l.unit).expect("unit read").1;
                bytes = d[(l.off + HEADER + self.cfg.key_bytes) as usize..(l.off + l.len) as usize].to_vec();
                Value::Bytes(&bytes)
            } else {
                Value::Len(vlen)
            };
            t = t.max(self.append(io, k, value, now, read_done)?);
            self.stats.compaction_bytes += l.len as u64;
        }
        debug_assert_eq!(self.live[victim as usize], 0, "live records left behind in the victim");
        io.free_block(victim, read_done)?;
        self.live[victim as usize] = 0;
        self.state[victim as usize] = BlockState::Free;
        self.compacting = false;
        Ok(t)
    }

    /// The sectors of a record: (first sector in the block, sectors, byte offset in the first).
    fn sectors_of(&self, l: &Loc) -> (u32, u32, usize) {
        let sb = self.sector_bytes;
        let s0 = l.unit * self.unit_sectors + l.off / sb;
        let s1 = l.unit * self.unit_sectors + (l.off + l.len).div_ceil(sb);
        (s0, s1 - s0, (l.off % sb) as usize)
    }

    fn in_buffer(&self, l: &Loc) -> bool {
        self.head == Some((l.block, l.unit))
    }
}

impl KvStore for LogKv {
    fn put(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64) -> Result<u64> {
        if !self.index.contains_key(&key) {
            self.stats.records += 1;
        }
        self.stats.puts += 1;
        self.stats.app_write_bytes += (self.cfg.key_bytes + value.len()) as u64;
        self.append(io, key, value, now, now)
    }

    fn get(&mut self, io: &mut dyn BlockApi, key: u64, out: Option<&mut Vec<u8>>, now: u64) -> Result<(bool, u64)> {
        self.stats.gets += 1;
        let Some(l) = self.index.get(&key).copied() else { return Ok((false, now)) };
        let vstart = (HEADER + self.cfg.key_bytes) as usize;
        if self.in_buffer(&l) {
            if let Some(o) = out {
                o.clear();
                if !self.buf.is_empty() {
                    o.extend_from_slice(&self.buf[l.off as usize + vstart..(l.off + l.len) as usize]);
                }
            }
            return Ok((true, now));
        }
        let (s0, n, skip) = self.sectors_of(&l);
        if io.data_backed() {
            let mut raw = vec![0u8; (n * self.sector_bytes) as usize];
            let done = io.read_data(l.block, s0, n, Some(&mut raw), now)?;
            let r = &raw[skip..skip + l.len as usize];
            assert_eq!(u64::from_le_bytes(r[..8].try_into().expect("8")), key, "record at {l:?} holds another key");
            assert_eq!(u32::from_le_bytes(r[12..16].try_into().expect("4")), CHECK, "record at {l:?}: bad check word");
            if let Some(o) = out {
                o.clear();
                o.extend_from_slice(&r[vstart..]);
            }
            Ok((true, done))
        } else {
            Ok((true, io.read_data(l.block, s0, n, None, now)?))
        }
    }

    fn delete(&mut self, _io: &mut dyn BlockApi, key: u64, now: u64) -> Result<u64> {
        if let Some(old) = self.index.remove(&key) {
            self.live[old.block as usize] -= old.len as u64;
            self.stats.records -= 1;
        }
        Ok(now)
    }

    fn scan(&mut self, io: &mut dyn BlockApi, start: u64, count: u32, now: u64) -> Result<(u32, u64)> {
        let locs: Vec<Loc> = self.index.range(start..).take(count as usize).map(|(_, &l)| l).collect();
        let mut done = now;
        // Records next to each other in one unit come in one read.
        let mut i = 0;
        while i < locs.len() {
            let l = locs[i];
            if self.in_buffer(&l) {
                i += 1;
                continue;
            }
            let (mut s0, mut n, _) = self.sectors_of(&l);
            let mut j = i + 1;
            while j < locs.len() && locs[j].block == l.block && locs[j].unit == l.unit && !self.in_buffer(&locs[j]) {
                let (a, m, _) = self.sectors_of(&locs[j]);
                let end = (s0 + n).max(a + m);
                s0 = s0.min(a);
                n = end - s0;
                j += 1;
            }
            let mut raw = if io.data_backed() { vec![0u8; (n * self.sector_bytes) as usize] } else { vec![] };
            let out = if io.data_backed() { Some(&mut raw[..]) } else { None };
            done = done.max(io.read_data(l.block, s0, n, out, now)?);
            i = j;
        }
        Ok((locs.len() as u32, done))
    }

    fn stats(&self) -> KvStats {
        self.stats
    }
}
