//! The remote memory management layer (RMML) as it runs on the DPU: a virtually contiguous swap
//! device over remote memory nodes.
//!
//! - Coarse blocks: the address space is organised in `block_bytes` blocks (1 MiB) and block
//!   groups: `group_blocks` consecutive blocks share one contiguous remote region (`Group`),
//!   written as a log: a unit written back is appended at the region's write pointer; its
//!   previous copy becomes garbage.
//! - Units: what is compressed, stored, fetched on a miss and cached (`fetch_unit`): a whole
//!   block (`block`: the map holds one entry per MiB, and a miss fetches and decompresses the
//!   whole block), or a run of `page_run` pages (`page`: each compressed alone and packed with
//!   its header among its group's records, the map holding where each unit's record is, so a
//!   miss reads exactly its own compressed bytes with one RDMA read).
//! - Compression and packing: a unit is compressed (lz4 or zstd) and stored as a 32-byte header
//!   (logical unit address, compressed length, codec, CRC) followed by its payload, records
//!   packed back to back at 8-byte alignment.
//! - Reclamation: a unit whose pages were all discarded is dropped from the map at once, and a
//!   group left without live units frees its region. A group whose region is full, or whose
//!   garbage passes `reclaim_garbage_fraction`, is compacted: its region is read, its live
//!   records (found by walking the headers) are packed into a new region sized to them plus
//!   `region_slack`, and the old region is freed.
//! - Load balancing: a new or compacted region goes to the node with the lowest used fraction;
//!   when the nodes' used fractions differ by more than `balance_threshold`, a group moves from
//!   the fullest node.
//! - DPU cache: whole decompressed units, write-back (see cache.rs). A hit crosses PCIe only.
//!
//! Time is modelled (see link.rs): a host request pays PCIe plus, on a cache miss, the RDMA
//! fetch and decompression of the unit on a DPU core. Write-back and compaction run in the
//! background on the same RDMA lane and cores, so they delay later misses through those
//! resources, and through the cache: a write or a miss that takes the slot of a dirty victim
//! lands there only once a core has taken the victim to compress it (the DPU's back-pressure
//! when compression falls behind).

use hdrhistogram::Histogram;
use serde_json::json;

use crate::cache::BlockCache;
use crate::codec::{Codec, Coder};
use crate::config::RmmlConfig;
use crate::device::{check, PageBits, SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::header::{Header, HEADER_BYTES};
use crate::link::{Lane, Lanes};
use crate::node::MemoryNode;
use crate::pool::Pool;
use crate::{latency_histogram, percentiles};

const NONE: u32 = u32::MAX;
/// Write-backs between load-balancing checks.
const BALANCE_EVERY: u64 = 16;

#[derive(Debug, Clone, Copy)]
struct UnitLoc {
    /// Offset of the block's record in its group's region, or NONE.
    off: u32,
    /// Bytes of the record (header + payload + padding).
    rec: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Group {
    node: u16,
    /// Remote region handle; 0 = the group has no region.
    region: u64,
    cap: u32,
    /// End of the last record.
    wp: u32,
    /// Bytes of live records.
    live: u32,
}

#[derive(Debug, Clone, Default)]
struct Stats {
    reads: u64,
    writes: u64,
    discards: u64,
    read_bytes: u64,
    write_bytes: u64,
    read_hits: u64,
    read_misses: u64,
    write_hits: u64,
    write_misses: u64,
    read_modify_writes: u64,
    zero_reads: u64,
    fetches: u64,
    fetch_bytes: u64,
    write_backs: u64,
    write_back_bytes: u64,
    raw_bytes_compressed: u64,
    stored_bytes: u64,
    stored_raw_blocks: u64,
    compactions: u64,
    compaction_bytes: u64,
    migrations: u64,
    regions_reclaimed: u64,
    blocks_dropped: u64,
    node_failures: u64,
    pages_lost: u64,
    /// Time misses spent queued, summed: for the RDMA lane, and for a DPU core or for their
    /// slot's dirty victim to be taken for compression (ns).
    miss_wait_rdma_ns: u64,
    miss_wait_cores_ns: u64,
}

pub struct Rmml {
    cfg: RmmlConfig,
    pool: Pool,
    coder: Coder,
    cache: BlockCache,
    /// Where each unit's record is (units of `unit_bytes`: blocks, or runs of pages).
    units: Vec<UnitLoc>,
    groups: Vec<Group>,
    unit_bytes: u64,
    /// Units per group (a group spans `group_blocks` blocks of the address space).
    group_units: u64,
    valid: PageBits,
    lost: PageBits,
    valid_in_unit: Vec<u16>,
    pcie: Lane,
    rdma: Lane,
    cores: Lanes,
    seq: u64,
    record: Vec<u8>,
    region_buf: Vec<u8>,
    packed: Vec<u8>,
    balance_cursor: usize,
    st: Stats,
    /// Per DPU-cache miss: from the request reaching the DPU to its unit decompressed (ns).
    miss_ns: Histogram<u64>,
    /// ... and the part of it spent queued behind other work on the RDMA lane and the cores.
    miss_wait_ns: Histogram<u64>,
}

impl Rmml {
    pub fn new(cfg: RmmlConfig, nodes: Vec<Box<dyn MemoryNode>>) -> Result<Rmml> {
        cfg.validate()?;
        let pool = Pool::new(nodes)?;
        if pool.len() > u16::MAX as usize {
            return Err(Error::Config("too many nodes".into()));
        }
        let units = cfg.units();
        let unit_bytes = cfg.unit_bytes();
        let group_units = cfg.group_units();
        let pages = cfg.capacity_bytes / PAGE_BYTES;
        Ok(Rmml {
            coder: Coder::new(cfg.codec, cfg.zstd_level, unit_bytes as usize)?,
            cache: BlockCache::new(cfg.cache_slots(), unit_bytes as usize, cfg.cache_policy),
            units: vec![UnitLoc { off: NONE, rec: 0 }; units as usize],
            groups: vec![Group::default(); units.div_ceil(group_units) as usize],
            unit_bytes,
            group_units,
            valid: PageBits::new(pages),
            lost: PageBits::new(pages),
            valid_in_unit: vec![0; units as usize],
            pcie: Lane::default(),
            rdma: Lane::default(),
            cores: Lanes::new(cfg.dpu_cores as usize),
            seq: 0,
            record: Vec::with_capacity(unit_bytes as usize + 2 * HEADER_BYTES),
            region_buf: Vec::new(),
            packed: Vec::new(),
            balance_cursor: 0,
            st: Stats::default(),
            miss_ns: latency_histogram(),
            miss_wait_ns: latency_histogram(),
            pool,
            cfg,
        })
    }

    pub fn config(&self) -> &RmmlConfig {
        &self.cfg
    }

    fn ppu(&self) -> u64 {
        self.cfg.pages_per_unit()
    }

    /// Split `[offset, offset+len)` into (block, byte offset in block, length) pieces.
    fn pieces(&self, offset: u64, len: u64) -> Vec<(u64, usize, usize)> {
        let bb = self.unit_bytes;
        let mut v = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let b = at / bb;
            let n = (bb - at % bb).min(offset + len - at);
            v.push((b, (at % bb) as usize, n as usize));
            at += n;
        }
        v
    }

    // ---- remote operations, with failure handling ----

    /// A node failed (unreachable, or restarted and lost our regions): every block it held that
    /// the DPU does not cache is lost; cached copies survive and are marked dirty so they are
    /// written elsewhere.
    fn node_failed(&mut self, node: usize, err: &Error) {
        self.pool.failed(node, err);
        self.st.node_failures += 1;
        let n = self.group_units;
        let ppu = self.ppu();
        for g in 0..self.groups.len() {
            let gr = self.groups[g];
            if gr.region == 0 || gr.node as usize != node {
                continue;
            }
            for b in g as u64 * n..((g as u64 + 1) * n).min(self.units.len() as u64) {
                if self.units[b as usize].off == NONE {
                    continue;
                }
                self.units[b as usize] = UnitLoc { off: NONE, rec: 0 };
                match self.cache.peek(b) {
                    Some(s) => self.cache.set_dirty(s, true),
                    None => {
                        for p in b * ppu..(b + 1) * ppu {
                            if self.valid.get(p) && !self.lost.set(p, true) {
                                self.st.pages_lost += 1;
                            }
                        }
                    }
                }
            }
            self.groups[g] = Group::default();
        }
    }

    fn remote<T>(&mut self, node: usize, f: impl FnOnce(&mut dyn MemoryNode) -> Result<T>) -> Result<T> {
        let r = f(self.pool.nodes[node].as_mut());
        if let Err(e) = &r {
            if matches!(e, Error::Lost(_) | Error::Node { .. }) {
                self.node_failed(node, e);
            }
        }
        r
    }

    // ---- the DPU cache ----

    /// A cache slot, writing back whatever it held (work starting at `t`); returns the slot
    /// (not installed yet) and when it is free: a dirty victim's data stays in the slot until a
    /// DPU core takes it into its working buffer to compress it, so new data lands there no
    /// earlier (no wait while a core is free; the cores' pace once they fall behind).
    fn free_slot(&mut self, t: u64) -> Result<(usize, u64)> {
        let (s, victim) = self.cache.take_slot();
        let mut free_at = t;
        if let Some((vb, true)) = victim {
            match self.write_back(s, vb, t) {
                Ok(compressed) => free_at = compressed,
                Err(e) => {
                    // The victim's data cannot be placed anywhere: its pages are lost, loudly.
                    let ppu = self.ppu();
                    for p in vb * ppu..(vb + 1) * ppu {
                        if self.valid.get(p) && !self.lost.set(p, true) {
                            self.st.pages_lost += 1;
                        }
                    }
                    self.cache.release(s);
                    return Err(e);
                }
            }
        }
        Ok((s, free_at))
    }

    /// Bring block `b` into the cache from remote memory; returns its slot and when its data is
    /// ready on the DPU.
    fn load(&mut self, b: u64, t: u64) -> Result<(usize, u64)> {
        let rec_len = self.units[b as usize].rec;
        assert!(self.units[b as usize].off != NONE, "unit {b} loaded without a remote copy");
        // Demand fetch first: the DPU issues it before the victim's write-back.
        let rdma_wait = self.rdma.busy_until_ns.saturating_sub(t);
        let fetched = self.rdma.transfer(&self.cfg.rdma, t, rec_len as u64);
        let (s, free_at) = self.free_slot(t)?;
        // The victim's write-back may have compacted this block's group (or lost its node).
        let loc = self.units[b as usize];
        if loc.off == NONE {
            self.cache.release(s);
            return Err(Error::Lost(format!("unit {b}: its remote node failed")));
        }
        let g = self.groups[(b / self.group_units) as usize];
        let mut rec = std::mem::take(&mut self.record);
        rec.resize(loc.rec as usize, 0);
        let r = self.remote(g.node as usize, |n| n.read(g.region, loc.off as u64, &mut rec));
        let res = r.and_then(|_| self.decode_into(b, &rec, s));
        self.record = rec;
        let codec = match res {
            Ok(c) => c,
            Err(e) => {
                self.cache.release(s);
                return Err(self.explain(b, e));
            }
        };
        // Pages discarded since the write-back read as zeros, and compress as nothing.
        let ppu = self.ppu();
        let buf = self.cache.buf(s);
        for i in 0..ppu {
            if !self.valid.get(b * ppu + i) {
                buf[(i * PAGE_BYTES) as usize..((i + 1) * PAGE_BYTES) as usize].fill(0);
            }
        }
        self.cache.install(s, b, false);
        self.st.fetches += 1;
        self.st.fetch_bytes += loc.rec as u64;
        let dec = self.unit_bytes as f64 / self.cfg.codec_speed(codec).1 * 1e9;
        // Decompression needs the fetched record, the slot (its victim compressed) and a core.
        let dec_ns = dec.ceil() as u64;
        let ready = self.cores.reserve(fetched.max(free_at), dec_ns);
        let core_wait = ready - dec_ns - fetched;
        self.miss_ns.saturating_record(ready - t);
        self.miss_wait_ns.saturating_record(rdma_wait + core_wait);
        self.st.miss_wait_rdma_ns += rdma_wait;
        self.st.miss_wait_cores_ns += core_wait;
        Ok((s, ready))
    }

    fn explain(&self, b: u64, e: Error) -> Error {
        match e {
            Error::Lost(m) => Error::Lost(format!("unit {b}: {m}")),
            Error::Corrupt(m) => Error::Corrupt(format!("unit {b}: {m}")),
            e => e,
        }
    }

    /// Check a fetched record and decompress it into cache slot `s`; returns its codec.
    fn decode_into(&mut self, b: u64, rec: &[u8], s: usize) -> Result<Codec> {
        let h = Header::decode(rec)?;
        if h.lba != b {
            return Err(Error::Corrupt(format!("record holds block {}, expected {b}", h.lba)));
        }
        if h.raw_len as u64 != self.unit_bytes || Header::record_bytes(h.stored_len) != rec.len() as u64 {
            return Err(Error::Corrupt(format!("record lengths {} / {} do not match the map", h.stored_len, h.raw_len)));
        }
        let payload = &rec[HEADER_BYTES..HEADER_BYTES + h.stored_len as usize];
        if crc32fast::hash(payload) != h.crc32 {
            return Err(Error::Corrupt("payload checksum mismatch".into()));
        }
        let buf = self.cache.buf(s);
        self.coder.decompress(h.codec, payload, buf)?;
        Ok(h.codec)
    }

    /// Compress unit `b` from cache slot `s` and place it in remote memory (background work
    /// starting at `t`); returns when a core took the slot's data to compress it.
    fn write_back(&mut self, s: usize, b: u64, t: u64) -> Result<u64> {
        if self.valid_in_unit[b as usize] == 0 {
            self.drop_remote(b);
            return Ok(t);
        }
        let bb = self.unit_bytes;
        let buf = self.cache.buf(s);
        let (codec, payload) = self.coder.compress(buf)?;
        self.seq += 1;
        let h = Header {
            codec,
            lba: b,
            stored_len: payload.len() as u32,
            raw_len: bb as u32,
            crc32: crc32fast::hash(payload),
            seq: self.seq as u32,
        };
        let rec_len = Header::record_bytes(h.stored_len) as usize;
        self.record.clear();
        self.record.extend_from_slice(&h.encode());
        self.record.extend_from_slice(payload);
        self.record.resize(rec_len, 0);
        self.st.write_backs += 1;
        self.st.raw_bytes_compressed += bb;
        self.st.stored_bytes += h.stored_len as u64;
        self.st.stored_raw_blocks += (codec == Codec::None) as u64;
        let comp = (bb as f64 / self.cfg.codec_speed(self.cfg.codec).0 * 1e9).ceil() as u64;
        let compressed = self.cores.reserve(t, comp);
        let taken = compressed - comp;
        self.place(b, compressed)?;
        self.st.write_back_bytes += rec_len as u64;
        if self.st.write_backs.is_multiple_of(BALANCE_EVERY) {
            self.balance(compressed)?;
        }
        Ok(taken)
    }

    /// Write the record in `self.record` for block `b`: append to its group's region, or
    /// compact the group into a new region.
    fn place(&mut self, b: u64, t: u64) -> Result<()> {
        let g = (b / self.group_units) as usize;
        let rec = self.record.len() as u32;
        let gr = self.groups[g];
        let old = self.units[b as usize];
        let garbage_after = gr.wp - gr.live + if old.off != NONE { old.rec } else { 0 };
        let fits = gr.region != 0 && gr.wp as u64 + rec as u64 <= gr.cap as u64;
        if fits && garbage_after as f64 <= self.cfg.reclaim_garbage_fraction * gr.cap as f64 {
            let record = std::mem::take(&mut self.record);
            let r = self.remote(gr.node as usize, |n| n.write(gr.region, gr.wp as u64, &record));
            self.record = record;
            if r.is_ok() {
                let gr = &mut self.groups[g];
                if old.off != NONE {
                    gr.live -= old.rec;
                }
                self.units[b as usize] = UnitLoc { off: gr.wp, rec };
                gr.wp += rec;
                gr.live += rec;
                self.rdma.transfer(&self.cfg.rdma, t, rec as u64);
                return Ok(());
            }
            // The node failed: its groups were cleared; pack this one anew elsewhere.
        }
        self.compact(g, Some(b), t)
    }

    /// Rewrite group `g` packed into a new region: its live records (minus `new`'s old copy)
    /// and, with `new`, the record in `self.record`. The region goes to the least used node.
    fn compact(&mut self, g: usize, new: Option<u64>, t: u64) -> Result<()> {
        let n = self.group_units;
        let mut packed = std::mem::take(&mut self.packed);
        packed.clear();
        let mut locs: Vec<(u64, u32, u32)> = Vec::new();
        let gr = self.groups[g];
        let mut t_read = t;
        if gr.region != 0 && gr.live > 0 {
            let mut region = std::mem::take(&mut self.region_buf);
            region.resize(gr.wp as usize, 0);
            let r = self.remote(gr.node as usize, |nd| nd.read(gr.region, 0, &mut region));
            if r.is_ok() {
                t_read = self.rdma.transfer(&self.cfg.rdma, t, gr.wp as u64);
                // Walk the headers: a record is live when the map still points at it.
                let mut off = 0usize;
                while off < gr.wp as usize {
                    let h = match Header::decode(&region[off..]) {
                        Ok(h) => h,
                        Err(e) => {
                            self.region_buf = region;
                            self.packed = packed;
                            return Err(Error::Corrupt(format!("group {g} at {off}: {e}")));
                        }
                    };
                    let len = Header::record_bytes(h.stored_len) as usize;
                    let lba = h.lba;
                    let ours = lba / n == g as u64 && (lba as usize) < self.units.len();
                    if ours && Some(lba) != new && self.units[lba as usize].off == off as u32 {
                        locs.push((lba, packed.len() as u32, len as u32));
                        packed.extend_from_slice(&region[off..off + len]);
                    }
                    off += len;
                }
                let expect = gr.live - new.map(|b| self.units[b as usize]).filter(|l| l.off != NONE).map_or(0, |l| l.rec);
                assert_eq!(packed.len() as u32, expect, "group {g}: live records found by the header walk disagree with the map");
            }
            self.region_buf = region;
        }
        if let Some(b) = new {
            locs.push((b, packed.len() as u32, self.record.len() as u32));
            packed.extend_from_slice(&self.record);
        }
        let old = self.groups[g];
        let res = if packed.is_empty() { Ok(Group::default()) } else { self.allocate_packed(&packed, t_read) };
        self.packed = packed;
        let newg = res?;
        // Free the old region after the new one holds the data.
        if old.region != 0 && self.pool.up[old.node as usize] {
            let _ = self.pool.free_on(old.node as usize, old.region, old.cap as u64);
        }
        self.groups[g] = newg;
        for (b, off, rec) in locs {
            self.units[b as usize] = UnitLoc { off, rec };
        }
        if old.region != 0 {
            self.st.compactions += 1;
            self.st.compaction_bytes += old.wp as u64;
        }
        Ok(())
    }

    /// A new region holding `packed`, on the least used node that takes it with
    /// `region_slack` to spare (or, when none does, without), trying others if a node fails.
    fn allocate_packed(&mut self, packed: &[u8], t: u64) -> Result<Group> {
        let live = packed.len() as u64;
        let roomy = ((live as f64 * (1.0 + self.cfg.region_slack)).ceil() as u64).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let tight = live.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        for _ in 0..=self.pool.len() {
            let (node, cap) = match self.pool.pick(roomy, None) {
                Some(n) => (n, roomy),
                None => match self.pool.pick(tight, None) {
                    Some(n) => (n, tight),
                    None => break,
                },
            };
            let region = match self.remote(node, |n| n.alloc(cap)) {
                Ok(r) => r,
                Err(Error::NoSpace(_)) => {
                    // Others use the node too: learn its real usage before picking again.
                    self.pool.refresh(node);
                    continue;
                }
                Err(_) => continue,
            };
            self.pool.count_alloc(node, cap);
            if self.remote(node, |n| n.write(region, 0, packed)).is_ok() {
                self.rdma.transfer(&self.cfg.rdma, t, live);
                return Ok(Group { node: node as u16, region, cap: cap as u32, wp: live as u32, live: live as u32 });
            }
        }
        Err(Error::NoSpace(format!("no remote memory node that is up has {live} bytes free")))
    }

    /// Drop block `b`'s remote copy (all its pages were discarded); free its group's region
    /// when nothing live is left in it.
    fn drop_remote(&mut self, b: u64) {
        let loc = self.units[b as usize];
        if loc.off == NONE {
            return;
        }
        self.units[b as usize] = UnitLoc { off: NONE, rec: 0 };
        self.st.blocks_dropped += 1;
        let g = (b / self.group_units) as usize;
        let gr = &mut self.groups[g];
        gr.live -= loc.rec;
        if gr.live == 0 {
            let old = *gr;
            *gr = Group::default();
            if self.pool.up[old.node as usize] {
                let _ = self.pool.free_on(old.node as usize, old.region, old.cap as u64);
            }
            self.st.regions_reclaimed += 1;
        }
    }

    /// Move one group off the fullest node when the spread of used fractions is too wide.
    fn balance(&mut self, t: u64) -> Result<()> {
        let up: Vec<usize> = (0..self.pool.len()).filter(|&i| self.pool.up[i]).collect();
        if up.len() < 2 {
            return Ok(());
        }
        let frac = |i: usize| self.pool.used_fraction(i);
        let hi = *up.iter().max_by(|&&a, &&b| frac(a).total_cmp(&frac(b)).then(b.cmp(&a))).expect("up nodes");
        let lo = *up.iter().min_by(|&&a, &&b| frac(a).total_cmp(&frac(b)).then(a.cmp(&b))).expect("up nodes");
        if frac(hi) - frac(lo) <= self.cfg.balance_threshold {
            return Ok(());
        }
        let k = self.groups.len();
        for i in 0..k {
            let g = (self.balance_cursor + i) % k;
            if self.groups[g].region != 0 && self.groups[g].node as usize == hi {
                self.balance_cursor = g + 1;
                self.compact(g, None, t)?;
                if self.groups[g].region != 0 && self.groups[g].node as usize != hi {
                    self.st.migrations += 1;
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// Check the map against itself (tests): live bytes per group, valid counts, where every
    /// valid page can be found.
    pub fn check_invariants(&self) {
        let n = self.group_units;
        let ppu = self.ppu();
        for (g, gr) in self.groups.iter().enumerate() {
            let live: u64 = (g as u64 * n..((g as u64 + 1) * n).min(self.units.len() as u64))
                .map(|b| self.units[b as usize])
                .filter(|l| l.off != NONE)
                .map(|l| l.rec as u64)
                .sum();
            assert_eq!(live, gr.live as u64, "group {g}: live bytes");
            assert!(gr.live <= gr.wp && gr.wp <= gr.cap, "group {g}: live {} wp {} cap {}", gr.live, gr.wp, gr.cap);
            assert_eq!(gr.region == 0, gr.live == 0, "group {g}: a region exactly when something is live");
        }
        for b in 0..self.units.len() as u64 {
            let v = (b * ppu..(b + 1) * ppu).filter(|&p| self.valid.get(p)).count();
            assert_eq!(v, self.valid_in_unit[b as usize] as usize, "unit {b}: valid count");
            let reachable = self.units[b as usize].off != NONE || self.cache.peek(b).is_some();
            for p in b * ppu..(b + 1) * ppu {
                assert!(!self.lost.get(p) || self.valid.get(p), "page {p}: lost but not valid");
                assert!(!self.valid.get(p) || self.lost.get(p) || reachable, "page {p}: valid but nowhere");
            }
            if self.cache.peek(b).is_some() {
                assert!(v > 0, "unit {b}: cached with no valid page");
            }
        }
    }

    /// Bytes of remote memory held (region capacities) and live in records.
    pub fn remote_bytes(&self) -> (u64, u64) {
        self.groups.iter().filter(|g| g.region != 0).fold((0, 0), |(c, l), g| (c + g.cap as u64, l + g.live as u64))
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl SwapDevice for Rmml {
    fn kind(&self) -> &'static str {
        "dpuswap"
    }
    fn capacity_bytes(&self) -> u64 {
        self.cfg.capacity_bytes
    }

    fn read(&mut self, offset: u64, out: &mut [u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, out.len() as u64)?;
        self.st.reads += 1;
        self.st.read_bytes += out.len() as u64;
        let t = now_ns + self.cfg.pcie.latency_ns + self.cfg.dpu_request_ns;
        let mut ready = t;
        let mut at = 0usize;
        for (b, in_off, n) in self.pieces(offset, out.len() as u64) {
            let p0 = (b * self.unit_bytes + in_off as u64) / PAGE_BYTES;
            let p1 = p0 + n as u64 / PAGE_BYTES;
            if let Some(p) = (p0..p1).find(|&p| self.lost.get(p)) {
                return Err(Error::Lost(format!("page {p} (unit {b}) was on a remote node that failed; it cannot be read back")));
            }
            let piece = &mut out[at..at + n];
            at += n;
            if !self.valid.any(p0, p1) {
                piece.fill(0);
                self.st.zero_reads += 1;
                continue;
            }
            let s = match self.cache.lookup(b) {
                Some(s) => {
                    self.st.read_hits += 1;
                    s
                }
                None => {
                    self.st.read_misses += 1;
                    let (s, r) = self.load(b, t)?;
                    ready = ready.max(r);
                    s
                }
            };
            let buf = self.cache.buf(s);
            piece.copy_from_slice(&buf[in_off..in_off + n]);
            // Pages never written (or discarded) read as zeros even if the block holds others.
            for p in p0..p1 {
                if !self.valid.get(p) {
                    let i = ((p - p0) * PAGE_BYTES) as usize;
                    piece[i..i + PAGE_BYTES as usize].fill(0);
                }
            }
        }
        Ok(self.pcie.transfer(&self.cfg.pcie, ready, out.len() as u64))
    }

    fn write(&mut self, offset: u64, data: &[u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, data.len() as u64)?;
        self.st.writes += 1;
        self.st.write_bytes += data.len() as u64;
        let t = self.pcie.transfer(&self.cfg.pcie, now_ns, data.len() as u64) + self.cfg.dpu_request_ns;
        let mut done = t;
        let mut at = 0usize;
        let ppu = self.ppu();
        for (b, in_off, n) in self.pieces(offset, data.len() as u64) {
            let p0 = (b * self.unit_bytes + in_off as u64) / PAGE_BYTES;
            let p1 = p0 + n as u64 / PAGE_BYTES;
            let s = match self.cache.lookup(b) {
                Some(s) => {
                    self.st.write_hits += 1;
                    s
                }
                None => {
                    self.st.write_misses += 1;
                    // Pages of the block outside this write that live remotely must be kept.
                    let others = (b * ppu..p0).chain(p1..(b + 1) * ppu).any(|p| self.valid.get(p) && !self.lost.get(p));
                    if others && self.units[b as usize].off != NONE {
                        self.st.read_modify_writes += 1;
                        let (s, r) = self.load(b, t)?;
                        done = done.max(r);
                        s
                    } else {
                        let (s, free_at) = self.free_slot(t)?;
                        done = done.max(free_at);
                        self.cache.buf(s).fill(0);
                        self.cache.install(s, b, false);
                        s
                    }
                }
            };
            self.cache.buf(s)[in_off..in_off + n].copy_from_slice(&data[at..at + n]);
            self.cache.set_dirty(s, true);
            at += n;
            for p in p0..p1 {
                self.lost.set(p, false);
                if !self.valid.set(p, true) {
                    self.valid_in_unit[b as usize] += 1;
                }
            }
        }
        Ok(done)
    }

    fn discard_zeroes(&self) -> bool {
        true
    }
    fn discard(&mut self, offset: u64, len: u64, now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, len)?;
        self.st.discards += 1;
        for (b, in_off, n) in self.pieces(offset, len) {
            let p0 = (b * self.unit_bytes + in_off as u64) / PAGE_BYTES;
            let p1 = p0 + n as u64 / PAGE_BYTES;
            for p in p0..p1 {
                self.lost.set(p, false);
                if self.valid.set(p, false) {
                    self.valid_in_unit[b as usize] -= 1;
                }
            }
            if self.valid_in_unit[b as usize] == 0 {
                self.cache.remove(b);
                self.drop_remote(b);
            } else if let Some(s) = self.cache.peek(b) {
                self.cache.buf(s)[in_off..in_off + n].fill(0);
            }
        }
        Ok(now_ns + self.cfg.pcie.latency_ns + self.cfg.dpu_request_ns)
    }

    fn flush(&mut self, now_ns: u64) -> Result<u64> {
        let t = now_ns + self.cfg.pcie.latency_ns + self.cfg.dpu_request_ns;
        for b in self.cache.dirty_blocks() {
            let s = self.cache.peek(b).expect("dirty block cached");
            self.write_back(s, b, t)?;
            self.cache.set_dirty(s, false);
        }
        // A flush waits for the write-backs it started.
        Ok(self.rdma.busy_until_ns.max(self.cores.0.iter().map(|l| l.busy_until_ns).max().unwrap_or(t)).max(t))
    }

    fn stats(&mut self) -> serde_json::Value {
        let s = &self.st;
        let (remote_cap, remote_live) = self.remote_bytes();
        let reads = s.read_hits + s.read_misses;
        let valid_bytes = self.valid.count() * PAGE_BYTES;
        json!({
            "kind": "dpuswap",
            "codec": self.cfg.codec.name(),
            "fetch_unit": self.cfg.fetch_unit,
            "unit_bytes": self.unit_bytes,
            "block_bytes": self.cfg.block_bytes,
            "group_blocks": self.cfg.group_blocks,
            "cache_bytes": self.cfg.cache_bytes,
            "reads": s.reads, "writes": s.writes, "discards": s.discards,
            "read_bytes": s.read_bytes, "write_bytes": s.write_bytes,
            "cache_read_hits": s.read_hits, "cache_read_misses": s.read_misses,
            "cache_hit_ratio": if reads > 0 { s.read_hits as f64 / reads as f64 } else { 0.0 },
            "cache_write_hits": s.write_hits, "cache_write_misses": s.write_misses,
            "read_modify_writes": s.read_modify_writes, "zero_reads": s.zero_reads,
            "fetches": s.fetches, "fetch_bytes": s.fetch_bytes,
            "write_backs": s.write_backs, "write_back_bytes": s.write_back_bytes,
            "compression_ratio": if s.stored_bytes > 0 { s.raw_bytes_compressed as f64 / s.stored_bytes as f64 } else { 0.0 },
            "blocks_stored_raw": s.stored_raw_blocks,
            "compactions": s.compactions, "compaction_bytes": s.compaction_bytes,
            "migrations": s.migrations, "regions_reclaimed": s.regions_reclaimed, "blocks_dropped": s.blocks_dropped,
            "node_failures": s.node_failures, "pages_lost": s.pages_lost,
            "valid_bytes": valid_bytes,
            "remote_region_bytes": remote_cap, "remote_live_bytes": remote_live,
            "nodes": self.pool.stats(),
            "pcie_busy_ns": self.pcie.busy_ns, "rdma_busy_ns": self.rdma.busy_ns, "dpu_core_busy_ns": self.cores.busy_ns(),
            "miss_latency_ns": percentiles(&self.miss_ns), "miss_queue_wait_ns": percentiles(&self.miss_wait_ns),
            "miss_wait_rdma_ns": s.miss_wait_rdma_ns, "miss_wait_cores_ns": s.miss_wait_cores_ns,
        })
    }
}
