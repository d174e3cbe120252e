//! A LevelDB-like key-value store on a vSSD, for the isolation experiments: what makes one
//! tenant hurt another on a shared die is the time-varying load of LevelDB's compactions
//! (multi-megabyte bursts of reads and writes, write amplification near 10, writers stalled
//! when level 0 fills), which a log store compacting one block at a time ([`super::LogKv`])
//! does not have. A test on shared dies shows its flushes and compactions raising a
//! neighbour's read tail, and nothing of it on another channel (tests/leveldb.rs).
//!
//! Metadata only: a record is its key and value length, so a table is a list of (key, length)
//! and its bytes are timed on the device, not stored. The shape is LevelDB's (db/dbformat.h,
//! db/version_set.cc): a 4 MiB memtable and its write-ahead log; tables of 2 MiB; level 0
//! compacted at 4 files, writes slowed by 1 ms each at 8 and stopped at 12; level i > 0 holding
//! 10 MiB x 10^(i-1), one table at a time compacted into the next level (round robin over the
//! key space, the compaction pointer), a table moved down without rewriting when nothing
//! overlaps it. Two background lanes, as LevelDB's one thread behaves: a memtable flush goes
//! first (LevelDB's compaction loop stops to write an immutable memtable), compactions run one
//! after another. A writer that fills the memtable while the previous one is still being
//! written waits for it, as LevelDB's `MakeRoomForWrite` does.
//!
//! Time: background work runs on its lanes in time order with the foreground. Before every
//! operation at time t, each lane issues its steps due by t (a flush writes its table, a
//! compaction reads its inputs and writes its outputs interleaved, in pieces of 256 KiB, as
//! LevelDB's compaction thread reads and writes as it goes), so a foreground read at t queues
//! behind at most the piece in progress on its die, and a flush interleaves with a running
//! compaction. A job's tables take their places when its last step completes (until then
//! reads see its inputs, or the immutable memtable); the compaction lane then decides its next
//! job from the levels as they are. A writer held by a rule (level 0 at 12 files, the previous
//! memtable still being written) is held: [`KvStore::try_put`] answers "held, ask again at t"
//! (the lanes' next event, or the end of the 1 ms slowdown), and an event loop of several
//! tenants polls every store's lanes ([`KvStore::next_background`] /
//! [`KvStore::run_background`]) as its clock moves, so every I/O reaches the device in time
//! order. [`KvStore::put`] waits itself, for a caller alone on its device.
//!
//! On the flash, each file (log or table) is a list of extents in blocks; the log and the tables
//! each have a head block (two write streams: a stream per level would leave a partly written
//! head block per level, which on a vSSD striped over sixteen soft-planes, 8 MiB blocks, is a
//! fifth of the space), a block is freed when no live file has units in it, and when free
//! blocks run low the block with the fewest live units has its live extents moved to their
//! stream's head (a file system's cleaning on raw flash).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::kv::{KvStats, KvStore, Put, Value, WriteTicket};
use crate::error::{Result, VssdError};
use crate::flashblox::BlockApi;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LevelKvConfig {
    /// Key text per record (YCSB's "user..." keys).
    pub key_bytes: u32,
    pub memtable_bytes: u64,
    pub table_bytes: u64,
    pub level1_bytes: u64,
    pub size_ratio: u32,
    pub levels: u32,
    pub l0_compaction_trigger: u32,
    pub l0_slowdown_trigger: u32,
    pub l0_stop_trigger: u32,
    /// The delay of each write while level 0 is at the slowdown trigger (LevelDB: 1 ms).
    pub slowdown_ns: u64,
    /// Cleaning runs when the vSSD has this many free blocks or fewer.
    pub reserve_blocks: u32,
}

impl Default for LevelKvConfig {
    fn default() -> Self {
        LevelKvConfig {
            key_bytes: 24,
            memtable_bytes: 4 << 20,
            table_bytes: 2 << 20,
            level1_bytes: 10 << 20,
            size_ratio: 10,
            levels: 7,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            slowdown_ns: 1_000_000,
            reserve_blocks: 2,
        }
    }
}

impl LevelKvConfig {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VssdError::Config(format!("leveldb.{m}")));
        if self.memtable_bytes < 4096 || self.table_bytes < 4096 || self.level1_bytes < self.table_bytes {
            return bad(format!(
                "memtable_bytes {}, table_bytes {}, level1_bytes {}: at least 4096, and level 1 at least one table",
                self.memtable_bytes, self.table_bytes, self.level1_bytes
            ));
        }
        if !(2..=100).contains(&self.size_ratio) || !(2..=12).contains(&self.levels) {
            return bad(format!("size_ratio {} (2..100), levels {} (2..12)", self.size_ratio, self.levels));
        }
        if !(1 <= self.l0_compaction_trigger
            && self.l0_compaction_trigger <= self.l0_slowdown_trigger
            && self.l0_slowdown_trigger <= self.l0_stop_trigger)
        {
            return bad(format!(
                "l0 triggers {} / {} / {}: compaction <= slowdown <= stop, from 1",
                self.l0_compaction_trigger, self.l0_slowdown_trigger, self.l0_stop_trigger
            ));
        }
        if self.reserve_blocks == 0 {
            return bad("reserve_blocks: 1 or more".into());
        }
        Ok(())
    }
}

/// Where a record is: (level, table, record).
type RecordAt = (usize, usize, usize);

/// A record's value length in a table; a tombstone has none.
const TOMBSTONE: u32 = u32::MAX;
/// Per-record framing (lengths, sequence number and type; LevelDB's varints and 8-byte tag).
const RECORD_OVERHEAD: u32 = 16;
/// Write streams: the log's, and the tables'.
const LOG_STREAM: usize = 0;
const TABLE_STREAM: usize = 1;
/// A background job reads and writes in pieces of about this size.
const STEP_BYTES: u64 = 256 << 10;

#[derive(Debug, Clone, Copy)]
struct Extent {
    block: u32,
    unit: u32,
    units: u32,
}

#[derive(Debug, Clone, Default)]
struct File {
    extents: Vec<Extent>,
    units: u32,
    stream: usize,
}

#[derive(Debug, Clone)]
struct Table {
    file: u64,
    /// (key, value length or TOMBSTONE), sorted by key.
    recs: Vec<(u64, u32)>,
    /// Each record's end, in bytes from the table's start.
    ends: Vec<u64>,
}

/// One I/O of a background job.
#[derive(Debug, Clone, Copy)]
enum Step {
    Read { file: u64, from: u32, units: u32 },
    Write { file: u64, units: u32 },
}

#[derive(Debug, Clone)]
enum JobKind {
    Flush { table: Table, old_log: u64 },
    Compaction { level: usize, inputs: Vec<u64>, outputs: Vec<Table> },
}

/// A flush or compaction under way: its remaining steps, the next one's start.
#[derive(Debug, Clone)]
struct Job {
    at: u64,
    steps: VecDeque<Step>,
    kind: JobKind,
}

impl Table {
    fn smallest(&self) -> u64 {
        self.recs[0].0
    }
    fn largest(&self) -> u64 {
        self.recs[self.recs.len() - 1].0
    }
    fn bytes(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }
    fn overlaps(&self, lo: u64, hi: u64) -> bool {
        self.smallest() <= hi && lo <= self.largest()
    }
    fn find(&self, key: u64) -> Option<usize> {
        self.recs.binary_search_by_key(&key, |r| r.0).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockUse {
    Free,
    Head(usize),
    Full(usize),
}

/// The store. See the module docs.
#[derive(Debug, Clone)]
pub struct LevelKv {
    cfg: LevelKvConfig,
    unit_sectors: u32,
    unit_bytes: u64,
    units_per_block: u32,
    // The flash: files, blocks, write streams.
    files: HashMap<u64, File>,
    next_file: u64,
    block_use: Vec<BlockUse>,
    block_live: Vec<u32>,
    /// Files with units in each block (some may be gone).
    block_files: Vec<Vec<u64>>,
    heads: Vec<Option<(u32, u32)>>,
    cleaning: bool,
    // The tree.
    mem: BTreeMap<u64, u32>,
    mem_bytes: u64,
    log: u64,
    log_fill: u64,
    levels: Vec<Vec<Table>>,
    /// The compaction pointer of each level (LevelDB's round robin over the key space).
    pointer: Vec<u64>,
    /// The memtable being written as a level-0 table (reads see it until that table is in).
    imm: Option<BTreeMap<u64, u32>>,
    flush_job: Option<Job>,
    compaction_job: Option<Job>,
    /// The keys whose newest version is a value, not a deletion: what `stats.records` counts.
    /// Kept so a write learns whether its key was live without searching every level's tables
    /// (that search took a fifth of a flashblox kv point's CPU time: 0.48 -> 0.39 s).
    live: HashSet<u64>,
    stats: KvStats,
    /// Writes delayed by level 0's slowdown rule, stopped by its stop rule, and made to wait
    /// because the memtable was full while its predecessor was still being written.
    pub slowdowns: u64,
    pub stops: u64,
    pub memtable_waits: u64,
}

impl LevelKv {
    pub fn new(io: &dyn BlockApi, cfg: LevelKvConfig) -> Result<LevelKv> {
        cfg.validate()?;
        if io.data_backed() {
            return Err(VssdError::Config("the LevelDB-like store is metadata only: run it on a metadata device".into()));
        }
        if cfg.reserve_blocks + 3 > io.blocks() {
            return Err(VssdError::Config(format!(
                "leveldb: a vSSD of {} blocks is too small (a head block for the log and one for the tables, one to clean into, {} in reserve)",
                io.blocks(),
                cfg.reserve_blocks
            )));
        }
        let blocks = io.blocks() as usize;
        let mut s = LevelKv {
            unit_sectors: io.unit_sectors(),
            unit_bytes: io.unit_sectors() as u64 * io.sector_bytes() as u64,
            units_per_block: io.block_sectors() / io.unit_sectors(),
            files: HashMap::new(),
            next_file: 1,
            block_use: vec![BlockUse::Free; blocks],
            block_live: vec![0; blocks],
            block_files: vec![vec![]; blocks],
            heads: vec![None; 2],
            cleaning: false,
            mem: BTreeMap::new(),
            mem_bytes: 0,
            log: 0,
            log_fill: 0,
            levels: vec![vec![]; cfg.levels as usize],
            pointer: vec![0; cfg.levels as usize],
            imm: None,
            live: HashSet::new(),
            flush_job: None,
            compaction_job: None,
            stats: KvStats::default(),
            slowdowns: 0,
            stops: 0,
            memtable_waits: 0,
            cfg,
        };
        s.log = s.new_file(LOG_STREAM);
        Ok(s)
    }

    fn record_bytes(&self, len: u32) -> u64 {
        (RECORD_OVERHEAD + self.cfg.key_bytes + if len == TOMBSTONE { 0 } else { len }) as u64
    }

    fn level_target(&self, level: usize) -> u64 {
        self.cfg.level1_bytes.saturating_mul((self.cfg.size_ratio as u64).saturating_pow(level as u32 - 1))
    }

    /// Bytes of every table, per level.
    pub fn level_bytes(&self) -> Vec<u64> {
        self.levels.iter().map(|l| l.iter().map(Table::bytes).sum()).collect()
    }

    // ---------------------------------------------------------------------------------------
    // The flash.

    fn new_file(&mut self, stream: usize) -> u64 {
        let id = self.next_file;
        self.next_file += 1;
        self.files.insert(id, File { stream, ..Default::default() });
        id
    }

    /// A head block for `stream`, cleaning first when free blocks are low.
    fn head(&mut self, io: &mut dyn BlockApi, stream: usize, now: u64) -> Result<(u32, u32)> {
        if let Some(h) = self.heads[stream] {
            return Ok(h);
        }
        if !self.cleaning {
            let mut rounds = 0;
            while io.free_blocks() <= self.cfg.reserve_blocks {
                self.clean(io, now)?;
                rounds += 1;
                if rounds > io.blocks() {
                    let live: u64 = self.block_live.iter().map(|&u| u as u64).sum();
                    return Err(VssdError::Api(format!(
                        "leveldb: cleaning frees nothing (the store is full: {live} of {} units live, {} blocks free, levels {:?} bytes)",
                        io.blocks() as u64 * self.units_per_block as u64,
                        io.free_blocks(),
                        self.level_bytes()
                    )));
                }
            }
            // Cleaning may have opened a head for this stream (moving its files' extents).
            if let Some(h) = self.heads[stream] {
                return Ok(h);
            }
        }
        let b = io.alloc_block().map_err(|e| match e {
            VssdError::Api(m) => VssdError::Api(format!("leveldb: out of space ({m}); keep the data below the vSSD's capacity")),
            other => other,
        })?;
        self.block_use[b as usize] = BlockUse::Head(stream);
        self.heads[stream] = Some((b, 0));
        Ok((b, 0))
    }

    /// Append `units` units to `file`; returns their completion.
    fn append(&mut self, io: &mut dyn BlockApi, file: u64, mut units: u32, now: u64) -> Result<u64> {
        let stream = self.files[&file].stream;
        let mut done = now;
        while units > 0 {
            let (b, u) = self.head(io, stream, now)?;
            let n = units.min(self.units_per_block - u);
            done = done.max(io.write_data(b, u * self.unit_sectors, n * self.unit_sectors, None, now)?);
            self.stats.device_write_bytes += n as u64 * self.unit_bytes;
            self.block_live[b as usize] += n;
            let bf = &mut self.block_files[b as usize];
            if bf.last() != Some(&file) {
                bf.push(file);
            }
            let f = self.files.get_mut(&file).expect("live file");
            match f.extents.last_mut() {
                Some(e) if e.block == b && e.unit + e.units == u => e.units += n,
                _ => f.extents.push(Extent { block: b, unit: u, units: n }),
            }
            f.units += n;
            units -= n;
            if u + n == self.units_per_block {
                self.block_use[b as usize] = BlockUse::Full(stream);
                self.heads[stream] = None;
            } else {
                self.heads[stream] = Some((b, u + n));
            }
        }
        Ok(done)
    }

    /// Read `units` units of `file` from its unit `from` (wherever cleaning has put them now);
    /// returns the completion.
    fn read_units(&mut self, io: &mut dyn BlockApi, file: u64, from: u32, units: u32, now: u64) -> Result<u64> {
        let mut done = now;
        let mut base = 0u32;
        for e in self.files[&file].extents.clone() {
            let (a, b) = (from.max(base), (from + units).min(base + e.units));
            if a < b {
                done = done.max(io.read_data(e.block, (e.unit + a - base) * self.unit_sectors, (b - a) * self.unit_sectors, None, now)?);
            }
            base += e.units;
        }
        Ok(done)
    }

    /// Read the sectors holding bytes [from, to) of `file`.
    fn read_range(&mut self, io: &mut dyn BlockApi, file: u64, from: u64, to: u64, now: u64) -> Result<u64> {
        let sb = self.unit_bytes / self.unit_sectors as u64;
        let (mut s0, s1) = (from / sb, to.div_ceil(sb));
        let mut done = now;
        let mut base = 0u64; // the extent's first sector in the file
        for e in self.files[&file].extents.clone() {
            let len = e.units as u64 * self.unit_sectors as u64;
            if s0 < base + len && base < s1 {
                let a = s0.max(base);
                let b = s1.min(base + len);
                let first = e.unit * self.unit_sectors + (a - base) as u32;
                done = done.max(io.read_data(e.block, first, (b - a) as u32, None, now)?);
                s0 = b;
            }
            base += len;
        }
        Ok(done)
    }

    fn delete_file(&mut self, io: &mut dyn BlockApi, file: u64, at: u64) -> Result<()> {
        let f = self.files.remove(&file).expect("live file");
        for e in f.extents {
            let b = e.block as usize;
            self.block_live[b] -= e.units;
            if self.block_live[b] == 0 && matches!(self.block_use[b], BlockUse::Full(_)) {
                io.free_block(e.block, at)?;
                self.block_use[b] = BlockUse::Free;
                self.block_files[b].clear();
            }
        }
        Ok(())
    }

    /// Move the live extents of the full block with the fewest live units to their streams'
    /// heads, and free it.
    fn clean(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<()> {
        let victim = (0..self.block_use.len())
            .filter(|&b| matches!(self.block_use[b], BlockUse::Full(_)))
            .min_by_key(|&b| (self.block_live[b], b))
            .ok_or_else(|| VssdError::Api("leveldb: no full block to clean (the store is full)".into()))?;
        self.cleaning = true;
        let owners = std::mem::take(&mut self.block_files[victim]);
        for id in owners {
            let Some(f) = self.files.get(&id) else { continue };
            let moved: Vec<Extent> = f.extents.iter().filter(|e| e.block as usize == victim).copied().collect();
            for e in moved {
                let rd = io.read_data(e.block, e.unit * self.unit_sectors, e.units * self.unit_sectors, None, now)?;
                // The copy goes to the file's stream head; its extent list is rebuilt in order.
                let before = self.files[&id].extents.clone();
                self.files.get_mut(&id).expect("live").extents.clear();
                self.files.get_mut(&id).expect("live").units = 0;
                for x in before {
                    if x.block as usize == victim && x.unit == e.unit {
                        self.append(io, id, x.units, rd)?;
                    } else {
                        let f = self.files.get_mut(&id).expect("live");
                        f.extents.push(x);
                        f.units += x.units;
                    }
                }
                self.block_live[victim] -= e.units;
                self.stats.compaction_bytes += e.units as u64 * self.unit_bytes;
            }
        }
        debug_assert_eq!(self.block_live[victim], 0);
        io.free_block(victim as u32, now)?;
        self.block_use[victim] = BlockUse::Free;
        self.cleaning = false;
        Ok(())
    }

    /// The length of `key`'s newest version (memtable, the immutable memtable, then the
    /// tables), TOMBSTONE for a deletion; None if the store never had it.
    fn newest(&self, key: u64) -> Option<u32> {
        self.in_memory(key).or_else(|| self.locate(key).map(|(l, j, r)| self.levels[l][j].recs[r].1))
    }

    /// `key`'s version in the memtable or the immutable memtable.
    fn in_memory(&self, key: u64) -> Option<u32> {
        self.mem.get(&key).or_else(|| self.imm.as_ref().and_then(|m| m.get(&key))).copied()
    }

    /// Count `key` in or out of the live records as a write of `len` makes it.
    fn mark(&mut self, key: u64, len: u32) {
        debug_assert_eq!(
            self.live.contains(&key),
            self.newest(key).is_some_and(|l| l != TOMBSTONE),
            "key {key}: live set disagrees with the tree"
        );
        let was = if len == TOMBSTONE { self.live.remove(&key) } else { !self.live.insert(key) };
        match (was, len != TOMBSTONE) {
            (false, true) => self.stats.records += 1,
            (true, false) => self.stats.records -= 1,
            _ => {}
        }
        debug_assert_eq!(self.live.len() as u64, self.stats.records);
    }

    // ---------------------------------------------------------------------------------------
    // Background work: two lanes, advanced in time order with the foreground.

    /// Issue every background step due by `now` (in the order of their start times), and what
    /// follows from them: a job's outputs installed when its last step completes, the next
    /// compaction decided when the lane frees.
    fn advance(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<()> {
        loop {
            let f = self.flush_job.as_ref().map(|j| j.at);
            let c = self.compaction_job.as_ref().map(|j| j.at);
            let (lane, at) = match (f, c) {
                (Some(f), Some(c)) if f <= c => (0, f),
                (_, Some(c)) => (1, c),
                (Some(f), None) => (0, f),
                (None, None) => return Ok(()),
            };
            if at > now {
                return Ok(());
            }
            self.step(io, lane)?;
        }
    }

    /// The time of the next background event, if any.
    fn next_event(&self) -> Option<u64> {
        [self.flush_job.as_ref(), self.compaction_job.as_ref()].into_iter().flatten().map(|j| j.at).min()
    }

    /// Run the next step of lane 0 (flush) or 1 (compaction).
    fn step(&mut self, io: &mut dyn BlockApi, lane: usize) -> Result<()> {
        let job = if lane == 0 { self.flush_job.as_mut() } else { self.compaction_job.as_mut() }.expect("an active lane");
        let at = job.at;
        match job.steps.pop_front() {
            Some(Step::Read { file, from, units }) => {
                let done = self.read_units(io, file, from, units, at)?;
                let job = if lane == 0 { self.flush_job.as_mut() } else { self.compaction_job.as_mut() }.expect("active");
                job.at = done;
            }
            Some(Step::Write { file, units }) => {
                let done = self.append(io, file, units, at)?;
                let job = if lane == 0 { self.flush_job.as_mut() } else { self.compaction_job.as_mut() }.expect("active");
                job.at = done;
            }
            None => {
                let job = if lane == 0 { self.flush_job.take() } else { self.compaction_job.take() }.expect("active");
                self.install(io, job.kind, at)?;
                if self.compaction_job.is_none() {
                    self.start_compaction(at);
                }
            }
        }
        Ok(())
    }

    /// The steps that read `inputs` and write `outputs` (a compaction's merge), interleaved in
    /// pieces of about STEP_BYTES, as a compaction thread reading and writing as it goes.
    fn steps(&self, inputs: &[u64], outputs: &[(u64, u32)]) -> VecDeque<Step> {
        let per = (STEP_BYTES / self.unit_bytes).max(1) as u32;
        let mut reads: VecDeque<Step> = VecDeque::new();
        for &file in inputs {
            let total = self.files[&file].units;
            let mut u = 0;
            while u < total {
                let n = per.min(total - u);
                reads.push_back(Step::Read { file, from: u, units: n });
                u += n;
            }
        }
        let mut writes: VecDeque<Step> = VecDeque::new();
        for &(file, units) in outputs {
            let mut u = 0;
            while u < units {
                let n = per.min(units - u);
                writes.push_back(Step::Write { file, units: n });
                u += n;
            }
        }
        // Spread the writes evenly among the reads.
        let (r, w) = (reads.len().max(1), writes.len());
        let mut out = VecDeque::with_capacity(reads.len() + w);
        let mut written = 0;
        for (i, &read) in reads.iter().enumerate() {
            out.push_back(read);
            let due = (i + 1) * w / r;
            while written < due {
                out.push_back(writes[written]);
                written += 1;
            }
        }
        out.extend(writes.into_iter().skip(written));
        out
    }

    /// A new table's file and record layout (its units are written by a job's steps).
    fn table(&mut self, recs: Vec<(u64, u32)>) -> (Table, u32) {
        let file = self.new_file(TABLE_STREAM);
        let mut end = 0;
        let ends: Vec<u64> = recs
            .iter()
            .map(|&(_, len)| {
                end += self.record_bytes(len);
                end
            })
            .collect();
        let units = end.div_ceil(self.unit_bytes) as u32;
        (Table { file, recs, ends }, units)
    }

    /// Set the memtable aside and start writing it as a level-0 table (the flush lane must be
    /// free), with a new log.
    fn start_flush(&mut self, now: u64) {
        debug_assert!(self.flush_job.is_none() && self.imm.is_none());
        let mem = std::mem::take(&mut self.mem);
        self.mem_bytes = 0;
        let recs: Vec<(u64, u32)> = mem.iter().map(|(&k, &l)| (k, l)).collect();
        self.imm = Some(mem);
        let (table, units) = self.table(recs);
        let steps = self.steps(&[], &[(table.file, units)]);
        let old_log = std::mem::replace(&mut self.log, 0);
        self.log = self.new_file(LOG_STREAM);
        self.log_fill = 0;
        self.flush_job = Some(Job { at: now, steps, kind: JobKind::Flush { table, old_log } });
    }

    fn score(&self, level: usize) -> f64 {
        if level == 0 {
            self.levels[0].len() as f64 / self.cfg.l0_compaction_trigger as f64
        } else {
            self.levels[level].iter().map(Table::bytes).sum::<u64>() as f64 / self.level_target(level) as f64
        }
    }

    /// Whether a level deeper than `level` has a table whose range holds `key` (LevelDB's
    /// `IsBaseLevelForKey`: a tombstone is dropped only where no deeper table may hold the key).
    fn below(&self, key: u64, level: usize) -> bool {
        self.levels[level + 1..].iter().any(|l| {
            let j = l.partition_point(|t| t.largest() < key);
            l.get(j).is_some_and(|t| t.smallest() <= key)
        })
    }

    /// Decide the next compaction, if a level needs one, and start it on the compaction lane.
    /// Trivial moves (a table nothing overlaps, moved down) take no time and are made here.
    fn start_compaction(&mut self, now: u64) {
        let last = self.levels.len() - 1;
        loop {
            let Some((level, score)) = (0..last).map(|l| (l, self.score(l))).max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0))) else {
                return;
            };
            if score < 1.0 {
                return;
            }
            // Inputs: level 0 whole (its files overlap); deeper, the table after the pointer.
            let inputs: Vec<usize> = if level == 0 {
                (0..self.levels[0].len()).collect()
            } else {
                let l = &self.levels[level];
                vec![l.iter().position(|t| t.smallest() > self.pointer[level]).unwrap_or(0)]
            };
            let lo = inputs.iter().map(|&i| self.levels[level][i].smallest()).min().expect("inputs");
            let hi = inputs.iter().map(|&i| self.levels[level][i].largest()).max().expect("inputs");
            self.pointer[level] = hi;
            let out = level + 1;
            let over: Vec<usize> = (0..self.levels[out].len()).filter(|&j| self.levels[out][j].overlaps(lo, hi)).collect();
            if level > 0 && over.is_empty() {
                let t = self.levels[level].remove(inputs[0]);
                let pos = self.levels[out].partition_point(|x| x.smallest() < t.smallest());
                self.levels[out].insert(pos, t);
                continue;
            }
            // Merge: newest first (level 0 newest first, then the deeper level), one version
            // per key; a tombstone goes where no deeper table may hold its key.
            let mut merged: BTreeMap<u64, u32> = BTreeMap::new();
            for t in inputs.iter().map(|&i| &self.levels[level][i]).chain(over.iter().map(|&j| &self.levels[out][j])) {
                for &(k, len) in &t.recs {
                    merged.entry(k).or_insert(len);
                }
            }
            let mut outputs: Vec<(Table, u32)> = vec![];
            let mut cur: Vec<(u64, u32)> = vec![];
            let mut cur_bytes = 0;
            for (k, len) in merged {
                if len == TOMBSTONE && !self.below(k, out) {
                    continue;
                }
                cur_bytes += self.record_bytes(len);
                cur.push((k, len));
                if cur_bytes >= self.cfg.table_bytes {
                    let t = self.table(std::mem::take(&mut cur));
                    outputs.push(t);
                    cur_bytes = 0;
                }
            }
            if !cur.is_empty() {
                let t = self.table(cur);
                outputs.push(t);
            }
            let input_files: Vec<u64> =
                inputs.iter().map(|&i| self.levels[level][i].file).chain(over.iter().map(|&j| self.levels[out][j].file)).collect();
            let units: Vec<(u64, u32)> = outputs.iter().map(|(t, u)| (t.file, *u)).collect();
            let steps = self.steps(&input_files, &units);
            self.stats.compactions += 1;
            self.compaction_job = Some(Job {
                at: now,
                steps,
                kind: JobKind::Compaction { level, inputs: input_files, outputs: outputs.into_iter().map(|(t, _)| t).collect() },
            });
            return;
        }
    }

    /// A job's last step has completed at `at`: its tables take their places.
    fn install(&mut self, io: &mut dyn BlockApi, kind: JobKind, at: u64) -> Result<()> {
        match kind {
            JobKind::Flush { table, old_log } => {
                self.levels[0].insert(0, table);
                self.imm = None;
                self.delete_file(io, old_log, at)?;
            }
            JobKind::Compaction { level, inputs, outputs } => {
                let out = level + 1;
                for l in [level, out] {
                    self.levels[l].retain(|t| !inputs.contains(&t.file));
                }
                for f in inputs {
                    self.delete_file(io, f, at)?;
                }
                self.stats.compaction_bytes += outputs.iter().map(Table::bytes).sum::<u64>();
                for t in outputs {
                    let pos = self.levels[out].partition_point(|x| x.smallest() < t.smallest());
                    self.levels[out].insert(pos, t);
                }
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Writes.

    /// LevelDB's `MakeRoomForWrite` at `now` (the lanes advanced to `now` first): None, the
    /// write may go ahead; or the time to ask again.
    fn admit(&mut self, io: &mut dyn BlockApi, now: u64, ticket: &mut WriteTicket) -> Result<Option<u64>> {
        const WAIT_FLUSH: u8 = 1;
        const WAIT_L0: u8 = 2;
        self.advance(io, now)?;
        loop {
            let l0 = self.levels[0].len();
            if !ticket.delayed && l0 >= self.cfg.l0_slowdown_trigger as usize {
                ticket.delayed = true;
                self.slowdowns += 1;
                self.held(ticket);
                return Ok(Some(now + self.cfg.slowdown_ns));
            }
            if self.mem_bytes < self.cfg.memtable_bytes {
                return Ok(None);
            }
            let reason = if self.flush_job.is_some() {
                WAIT_FLUSH
            } else if l0 >= self.cfg.l0_stop_trigger as usize {
                WAIT_L0
            } else {
                self.start_flush(now);
                self.advance(io, now)?;
                continue;
            };
            if ticket.reasons & reason == 0 {
                ticket.reasons |= reason;
                if reason == WAIT_FLUSH {
                    self.memtable_waits += 1;
                } else {
                    self.stops += 1;
                }
            }
            self.held(ticket);
            let next =
                self.next_event().ok_or_else(|| VssdError::Api("leveldb: a write is held with no background work to release it".into()))?;
            return Ok(Some(next.max(now)));
        }
    }

    fn held(&mut self, ticket: &mut WriteTicket) {
        if !ticket.held {
            ticket.held = true;
            self.stats.write_stalls += 1;
        }
    }

    /// A write admitted at `now`: the log (whole units programmed as they fill, LevelDB without
    /// sync) and the memtable; the writer goes on at once.
    fn write(&mut self, io: &mut dyn BlockApi, key: u64, len: u32, now: u64, ticket: &mut WriteTicket) -> Result<Put> {
        if let Some(at) = self.admit(io, now, ticket)? {
            return Ok(Put::Held(at));
        }
        self.mark(key, len);
        let size = self.record_bytes(len);
        self.log_fill += size;
        let full = self.log_fill / self.unit_bytes;
        if full > 0 {
            self.log_fill %= self.unit_bytes;
            let log = self.log;
            self.append(io, log, full as u32, now)?;
        }
        if let Some(old) = self.mem.insert(key, len) {
            self.mem_bytes -= self.record_bytes(old);
        }
        self.mem_bytes += size;
        Ok(Put::Done(now))
    }

    /// A write that waits for admission itself.
    fn write_waiting(&mut self, io: &mut dyn BlockApi, key: u64, len: u32, mut now: u64) -> Result<u64> {
        let mut ticket = WriteTicket::default();
        loop {
            match self.write(io, key, len, now, &mut ticket)? {
                Put::Done(t) => return Ok(t),
                Put::Held(t) => now = t,
            }
        }
    }

    /// Where `key`'s newest version is in the tables (the memtable is looked at first).
    fn locate(&self, key: u64) -> Option<RecordAt> {
        for (i, l) in self.levels.iter().enumerate() {
            if i == 0 {
                for (j, t) in l.iter().enumerate() {
                    if let Some(r) = t.find(key) {
                        return Some((0, j, r));
                    }
                }
            } else {
                let j = l.partition_point(|t| t.largest() < key);
                if let Some(r) = l.get(j).and_then(|t| t.find(key)) {
                    return Some((i, j, r));
                }
            }
        }
        None
    }
}

impl KvStore for LevelKv {
    fn put(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64) -> Result<u64> {
        if value.len() == TOMBSTONE {
            return Err(VssdError::Api("value too large".into()));
        }
        let t = self.write_waiting(io, key, value.len(), now)?;
        self.stats.puts += 1;
        self.stats.app_write_bytes += (self.cfg.key_bytes + value.len()) as u64;
        Ok(t)
    }

    fn try_put(&mut self, io: &mut dyn BlockApi, key: u64, value: Value<'_>, now: u64, ticket: &mut WriteTicket) -> Result<Put> {
        if value.len() == TOMBSTONE {
            return Err(VssdError::Api("value too large".into()));
        }
        let r = self.write(io, key, value.len(), now, ticket)?;
        if matches!(r, Put::Done(_)) {
            self.stats.puts += 1;
            self.stats.app_write_bytes += (self.cfg.key_bytes + value.len()) as u64;
        }
        Ok(r)
    }

    fn next_background(&self) -> Option<u64> {
        self.next_event()
    }

    fn run_background(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<()> {
        self.advance(io, now)
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "level_bytes": self.level_bytes(),
            "level_files": self.levels.iter().map(Vec::len).collect::<Vec<_>>(),
            "slowdowns": self.slowdowns,
            "stops": self.stops,
            "memtable_waits": self.memtable_waits,
        })
    }

    fn get(&mut self, io: &mut dyn BlockApi, key: u64, _out: Option<&mut Vec<u8>>, now: u64) -> Result<(bool, u64)> {
        self.advance(io, now)?;
        self.stats.gets += 1;
        if let Some(len) = self.in_memory(key) {
            return Ok((len != TOMBSTONE, now));
        }
        let Some((l, j, r)) = self.locate(key) else { return Ok((false, now)) };
        let t = &self.levels[l][j];
        let (len, file) = (t.recs[r].1, t.file);
        let (from, to) = (if r == 0 { 0 } else { t.ends[r - 1] }, t.ends[r]);
        let done = self.read_range(io, file, from, to, now)?;
        Ok((len != TOMBSTONE, done))
    }

    fn delete(&mut self, io: &mut dyn BlockApi, key: u64, now: u64) -> Result<u64> {
        self.write_waiting(io, key, TOMBSTONE, now)
    }

    fn scan(&mut self, io: &mut dyn BlockApi, start: u64, count: u32, now: u64) -> Result<(u32, u64)> {
        // The newest version of every key from `start` on, until `count` live ones: each level's
        // tables in the range are read where their records lie.
        self.advance(io, now)?;
        let mut newest: BTreeMap<u64, (u32, Option<RecordAt>)> = BTreeMap::new();
        for m in [Some(&self.mem), self.imm.as_ref()].into_iter().flatten() {
            for (&k, &len) in m.range(start..).take(count as usize) {
                newest.entry(k).or_insert((len, None));
            }
        }
        for (i, l) in self.levels.iter().enumerate() {
            for (j, t) in l.iter().enumerate() {
                if t.largest() < start {
                    continue;
                }
                let r0 = t.recs.partition_point(|r| r.0 < start);
                for (r, &(k, len)) in t.recs.iter().enumerate().skip(r0).take(count as usize) {
                    newest.entry(k).or_insert((len, Some((i, j, r))));
                }
            }
        }
        let mut found = 0;
        let mut done = now;
        // Per table, the byte span of the records returned.
        let mut spans: BTreeMap<(usize, usize), (u64, u64)> = BTreeMap::new();
        for (_, (len, at)) in newest {
            if found == count {
                break;
            }
            if len == TOMBSTONE {
                continue;
            }
            found += 1;
            if let Some((i, j, r)) = at {
                let t = &self.levels[i][j];
                let (a, b) = (if r == 0 { 0 } else { t.ends[r - 1] }, t.ends[r]);
                let s = spans.entry((i, j)).or_insert((a, b));
                s.0 = s.0.min(a);
                s.1 = s.1.max(b);
            }
        }
        for ((i, j), (a, b)) in spans {
            let file = self.levels[i][j].file;
            done = done.max(self.read_range(io, file, a, b, now)?);
        }
        Ok((found, done))
    }

    fn stats(&self) -> KvStats {
        self.stats
    }
}
