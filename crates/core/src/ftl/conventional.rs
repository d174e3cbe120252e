//! The conventional FTL: page-level (sector-level) mapping, striped write points, garbage
//! collection with pluggable victim policies, TRIM, dynamic and static wear-levelling, and an
//! optional write-back buffer.
//!
//! Memory per sector (metadata-only): 4 B of L2P per logical sector, 4 B of P2L (the OOB
//! logical address, with the valid bit in its top bit) per physical sector, and a 4 B sequence
//! number per physical page. With 4 KiB sectors and 16 KiB pages that is about 9.4 B per
//! logical sector at 7% spare.
//!
//! Write points ("streams"): host streams take host writes, GC streams relocations. Without FDP
//! there is one of each; with FDP (see `fdp.rs`) every placement handle of every reclaim group
//! has a host stream, and GC streams follow the handles' isolation types. A stream has one way
//! per die of its reclaim group; a way holds one open block in each plane of its die and
//! programs one multi-plane unit (a page in every plane) at a time; consecutive units go to
//! consecutive ways, channels first, so a burst of writes keeps every die busy.
//!
//! Reclaim groups (one when FDP is off) partition the dies; each has its own free blocks,
//! victim set, watermarks and GC cursor, so GC never moves data across groups.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use super::fdp::{Fdp, StreamStats, SHARED};
use super::victim::Victims;
use super::{BlockDevice, Counters, WriteOpts};
use crate::config::{Config, HandleType, StorageMode};
use crate::engine::{Timelines, WriteBuffer};
use crate::error::{Error, Result, Status};
use crate::media::store::DataStore;
use crate::media::{BlockMeta, BlockState, Layout, NIL, OOB_ERASED, OOB_PAD, P2L_VALID};

/// The default host stream (reclaim group 0, placement handle 0).
pub const HOST: usize = 0;
const UNMAPPED: u32 = u32::MAX;
/// Static wear-levelling moves at most this many blocks per check.
const WL_MOVES_PER_CHECK: usize = 4;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Way {
    /// Preferred die of this way.
    die: u32,
    /// Open blocks, one per plane (empty when the way has no open blocks).
    blocks: Vec<u32>,
    /// Next page to program in each of `blocks`.
    page: u32,
    /// Sectors placed in the current unit (0 ..= planes * sectors_per_page), and the same
    /// position as (plane, slot) so the hot path needs no division.
    fill: u32,
    plane: u32,
    slot: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stream {
    ways: Vec<Way>,
    cur: usize,
    /// Time at which the data of the unit being filled is available to program.
    ready_ns: u64,
    /// Takes host writes (true) or GC relocations (false).
    pub(crate) host: bool,
    /// Reclaim group.
    pub(crate) rg: u8,
    /// Placement handle whose data this stream holds, or SHARED (GC of initially isolated
    /// handles, or the only streams of a device without FDP).
    pub(crate) handle: u16,
    /// Where GC relocates data found in this stream's blocks.
    gc_dest: usize,
    /// Host sectors written into the current reclaim unit.
    pub(crate) ru_written: u64,
    /// Serial number of the current reclaim unit (blocks opened now belong to it).
    pub(crate) ru_serial: u32,
}

/// A reclaim group: its dies, free blocks, victims and GC state.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Group {
    dies: Vec<u32>,
    free: u32,
    fg_free_blocks: u32,
    bg_free_blocks: u32,
    /// Pages programmed into the group's open blocks. Paced GC keeps free blocks net of these
    /// above the background watermark: write points open and close a whole stripe of blocks
    /// at a time, and counting free blocks alone would make each stripe change look like a
    /// sudden shortage (and the GC catch-up that follows a burst).
    open_written_pages: u64,
    victims: Victims,
    /// Victims being collected, at most `gc_width`, advanced a page at a time in turn.
    gc: Vec<GcCursor>,
    gc_width: usize,
    gc_turn: usize,
}

/// A victim being collected: its next page and its latest read completion.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct GcCursor {
    victim: u32,
    page: u32,
    last_read: u64,
}

/// Free blocks of one die, least-worn first (dynamic wear-levelling) or first-in first-out.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FreePool {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    wl_dynamic: bool,
    wl_static_threshold: u32,
    wl_check_every_erases: u32,
    pe_limit: u32,
    grown_bad_probability: f64,
}

/// The conventional page-mapped FTL. See the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conventional {
    lay: Layout,
    set: Settings,
    logical: u64,
    l2p: Vec<u32>,
    /// Per physical sector: OOB logical address (or OOB_PAD / OOB_ERASED) | P2L_VALID.
    p2l: Vec<u32>,
    /// Per physical page: program sequence number (0 = erased).
    page_seq: Vec<u32>,
    next_seq: u32,
    blocks: Vec<BlockMeta>,
    pools: Vec<FreePool>,
    free_order: u64,
    pub(crate) streams: Vec<Stream>,
    /// Host stream of each (reclaim group, placement handle): `rg * handles + handle`.
    pub(crate) host_streams: Vec<usize>,
    groups: Vec<Group>,
    /// Per-stream accounting (FDP per-handle figures are derived from it).
    pub(crate) sstats: Vec<StreamStats>,
    pub(crate) fdp: Option<Fdp>,
    tl: Timelines,
    data: Option<DataStore>,
    c: Counters,
    rng: Pcg64Mcg,
    /// Host sectors written so far (the clock of block ages).
    host_clock: u64,
    mapped: u64,
    max_erase: u32,
    erases_since_wl_check: u32,
    in_wl: bool,
    // Per-command timing state.
    now: u64,
    buffer: WriteBuffer,
}

impl Conventional {
    /// Format a new device from a validated config.
    pub fn new(cfg: &Config) -> Result<Conventional> {
        let lay = Layout::new(&cfg.geometry);
        let mut rng = Pcg64Mcg::seed_from_u64(cfg.seed ^ 0x5eed_f7a1);
        let mut blocks = vec![BlockMeta::new(); lay.blocks as usize];
        let planes = lay.planes_per_die as usize;
        if cfg.media.factory_bad_fraction > 0.0 {
            for b in blocks.iter_mut() {
                if rng.gen::<f64>() < cfg.media.factory_bad_fraction {
                    b.state = BlockState::Bad;
                    b.factory_bad = true;
                }
            }
        }
        let good = blocks.iter().filter(|b| b.state != BlockState::Bad).count() as u64;
        let physical = good * lay.sectors_per_block as u64;
        let logical = (physical as f64 * (1.0 - cfg.ftl.spare_factor)).floor() as u64;
        if logical >= OOB_PAD as u64 - 1 {
            return Err(Error::config(
                "geometry.blocks_per_plane",
                format!("{logical} logical sectors exceed the supported 2^31 - 2; use larger sector_bytes"),
            ));
        }
        let planes_u = lay.planes_per_die;
        let fdp_on = cfg.fdp.enabled;
        let fdp_cfg = cfg.fdp.active();
        let ngroups = if fdp_on { fdp_cfg.reclaim_groups } else { 1 };
        let nhandles = if fdp_on { fdp_cfg.handles } else { 1 };
        let rg_of_die = super::fdp::reclaim_group_of_dies(&lay, ngroups);
        for (b, m) in blocks.iter_mut().enumerate() {
            m.rg = rg_of_die[lay.die_of_block(b as u32) as usize];
        }
        let mut groups = Vec::new();
        for g in 0..ngroups {
            let dies: Vec<u32> = lay.way_order().into_iter().filter(|&d| rg_of_die[d as usize] as u32 == g).collect();
            let n = dies.len() as u32;
            let auto_fg = n * planes_u + planes_u + 2;
            let fg = if cfg.ftl.gc_fg_free_blocks == 0 { auto_fg } else { cfg.ftl.gc_fg_free_blocks.max(auto_fg) };
            // Paced GC keeps free space between the two watermarks; a narrow band keeps few
            // blocks idle (they are spare space the data cannot use).
            // Free blocks net of open blocks' written pages stay at or above `bg` >= fg + planes,
            // so a host write point always opens without foreground GC.
            let bg = if cfg.ftl.gc_bg_free_blocks == 0 { fg + planes_u + 2 } else { cfg.ftl.gc_bg_free_blocks.max(fg + planes_u) };
            // GC reads of one victim all queue on its die: collect one victim per die at a
            // time, as controllers that collect whole superblocks do.
            let gc_width = if cfg.ftl.gc_parallel_victims == 0 { n as usize } else { cfg.ftl.gc_parallel_victims as usize };
            groups.push(Group {
                dies,
                free: 0,
                fg_free_blocks: fg,
                bg_free_blocks: bg,
                open_written_pages: 0,
                victims: Victims::new(cfg.ftl.gc_policy, lay.sectors_per_block, cfg.ftl.gc_d),
                gc: Vec::with_capacity(gc_width),
                gc_width,
                gc_turn: 0,
            });
        }
        // Streams: host streams (group-major), then per group a shared GC stream and one GC
        // stream per persistently isolated handle.
        let mk = |dies: &[u32], host: bool, rg: u32, handle: u16| Stream {
            ways: dies.iter().map(|&die| Way { die, blocks: Vec::with_capacity(planes), page: 0, fill: 0, plane: 0, slot: 0 }).collect(),
            cur: 0,
            ready_ns: 0,
            host,
            rg: rg as u8,
            handle,
            gc_dest: usize::MAX,
            ru_written: 0,
            ru_serial: 0,
        };
        let mut streams = Vec::new();
        let mut host_streams = Vec::new();
        for g in 0..ngroups {
            for h in 0..nhandles {
                host_streams.push(streams.len());
                streams.push(mk(&groups[g as usize].dies, true, g, if fdp_on { h as u16 } else { SHARED }));
            }
        }
        for g in 0..ngroups {
            let shared = streams.len();
            streams.push(mk(&groups[g as usize].dies, false, g, SHARED));
            streams[shared].gc_dest = shared;
            for h in 0..nhandles {
                let hs = host_streams[(g * nhandles + h) as usize];
                if fdp_on && fdp_cfg.handle_type(h) == HandleType::PersistentlyIsolated {
                    let own = streams.len();
                    streams.push(mk(&groups[g as usize].dies, false, g, h as u16));
                    streams[own].gc_dest = own;
                    streams[hs].gc_dest = own;
                } else {
                    streams[hs].gc_dest = shared;
                }
            }
        }
        // Every stream may hold one block per plane of its group's dies open, and a GC round
        // may need a fresh block per plane and die on top of the foreground watermark.
        let open_max: u64 = streams.iter().map(|st| st.ways.len() as u64 * planes_u as u64).sum();
        let reserve: u64 = groups.iter().map(|g| g.fg_free_blocks as u64).sum::<u64>() + open_max;
        let spare_blocks = good as f64 - logical as f64 / lay.sectors_per_block as f64;
        if (spare_blocks as u64) < reserve {
            return Err(Error::config(
                "ftl.spare_factor",
                format!(
                    "{spare_blocks:.0} spare blocks cannot hold the {reserve} the FTL keeps free and open ({} write streams with one open block per plane and die of their group, plus the GC watermarks); raise spare_factor or blocks_per_plane{}",
                    streams.len(),
                    if fdp_on { ", or use fewer FDP handles" } else { "" }
                ),
            ));
        }
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let set = Settings {
            wl_dynamic: cfg.ftl.wl_dynamic,
            wl_static_threshold: cfg.ftl.wl_static_threshold,
            wl_check_every_erases: (lay.blocks / 32).max(16),
            pe_limit: cfg.media.pe_limit,
            grown_bad_probability: cfg.media.grown_bad_probability,
        };
        let fdp = if fdp_on { Some(Fdp::new(&cfg.fdp, &lay)) } else { None };
        let nstreams = streams.len();
        let mut ftl = Conventional {
            lay,
            set,
            logical,
            l2p: vec![UNMAPPED; logical as usize],
            p2l: vec![OOB_ERASED; lay.physical_sectors as usize],
            page_seq: vec![0; (lay.blocks as u64 * lay.pages_per_block as u64) as usize],
            next_seq: 1,
            blocks,
            pools: (0..lay.dies).map(|_| FreePool { heap: BinaryHeap::new() }).collect(),
            free_order: 0,
            streams,
            host_streams,
            groups,
            sstats: vec![StreamStats::default(); nstreams],
            fdp,
            tl: Timelines::new(&cfg.timing, &lay),
            data: match cfg.storage {
                StorageMode::Data => Some(DataStore::new(lay.physical_sectors, lay.sector_bytes)),
                StorageMode::Metadata => None,
            },
            c: Counters::default(),
            rng,
            host_clock: 0,
            mapped: 0,
            max_erase: 0,
            erases_since_wl_check: 0,
            in_wl: false,
            now: 0,
            buffer: WriteBuffer::new((cfg.ftl.write_buffer_bytes / unit_bytes) as usize),
        };
        for b in 0..lay.blocks {
            if ftl.blocks[b as usize].state == BlockState::Free {
                ftl.pool_push(b);
            }
        }
        Ok(ftl)
    }

    pub fn gc_policy_name(&self) -> &'static str {
        match &self.groups[0].victims {
            Victims::Greedy { .. } => "greedy",
            Victims::Fifo { .. } => "fifo",
            Victims::CostBenefit { .. } => "cost-benefit",
            Victims::Dense { .. } => "d-choices",
        }
    }

    /// Foreground and background GC watermarks in use (free blocks) of reclaim group 0.
    pub fn watermarks(&self) -> (u32, u32) {
        (self.groups[0].fg_free_blocks, self.groups[0].bg_free_blocks)
    }

    /// Number of reclaim groups (1 without FDP).
    pub fn reclaim_groups(&self) -> usize {
        self.groups.len()
    }

    /// Bytes of simulator memory per logical sector in metadata-only mode (maps and OOB).
    pub fn metadata_bytes(&self) -> u64 {
        (self.l2p.len() * 4 + self.p2l.len() * 4 + self.page_seq.len() * 4 + self.blocks.len() * std::mem::size_of::<BlockMeta>()) as u64
    }

    fn pool_push(&mut self, b: u32) {
        let key = if self.set.wl_dynamic {
            ((self.blocks[b as usize].erase_count as u64) << 32) | (self.free_order & 0xFFFF_FFFF)
        } else {
            self.free_order
        };
        self.free_order += 1;
        let die = self.lay.die_of_block(b);
        self.pools[die as usize].heap.push(Reverse((key, b)));
        let m = &mut self.blocks[b as usize];
        m.state = BlockState::Free;
        self.groups[m.rg as usize].free += 1;
    }

    /// Open one block per plane for `way` of `stream`, from its die if it can.
    fn open_way(&mut self, s: usize, w: usize) -> Result<()> {
        let planes = self.lay.planes_per_die as usize;
        let rg = self.streams[s].rg as usize;
        if self.streams[s].host && !self.in_wl {
            let mut rounds = 0u64;
            while self.groups[rg].free < self.groups[rg].fg_free_blocks + planes as u32 {
                self.gc_one(rg, true)?;
                rounds += 1;
                if rounds > 2 * self.lay.blocks as u64 {
                    return Err(Error::WornOut(format!(
                        "garbage collection cannot reclaim space in reclaim group {rg} ({} free blocks, {} mapped sectors)",
                        self.groups[rg].free, self.mapped
                    )));
                }
            }
        }
        if self.groups[rg].free < planes as u32 {
            return Err(Error::WornOut(format!(
                "{} free blocks left in reclaim group {rg}, {planes} needed to open a write point",
                self.groups[rg].free
            )));
        }
        // One block per plane from the way's own die when it has them; otherwise from the dies
        // of the group with the most free blocks (GC frees blocks wherever its victims were, so
        // dies drift apart). A unit whose blocks sit on several dies programs on each of them.
        let pref = self.streams[s].ways[w].die as usize;
        let mut opened = Vec::with_capacity(planes);
        while opened.len() < planes {
            let die = if !self.pools[pref].heap.is_empty() {
                pref
            } else {
                let g = &self.groups[rg];
                g.dies.iter().map(|&d| d as usize).max_by_key(|&d| (self.pools[d].heap.len(), Reverse(d))).expect("group has dies")
            };
            let Reverse((_, b)) = self.pools[die].heap.pop().expect("the group has free blocks");
            let m = &mut self.blocks[b as usize];
            assert_eq!(m.state, BlockState::Free);
            assert_eq!(m.valid, 0);
            m.state = BlockState::Open;
            m.stream = s as u16;
            m.ru = self.streams[s].ru_serial;
            m.programmed_pages = 0;
            opened.push(b);
        }
        self.groups[rg].free -= planes as u32;
        let way = &mut self.streams[s].ways[w];
        way.blocks = opened;
        way.page = 0;
        way.fill = 0;
        way.plane = 0;
        way.slot = 0;
        Ok(())
    }

    /// Place one sector of `lba` on stream `s` and map it; returns its new PSA and whether it
    /// completed the unit. The caller stores the sector's data (if any) and then calls
    /// [`Self::unit_placed`] when the unit is complete, so data is in place before the unit is
    /// programmed and before GC (which may pick this very block) runs.
    #[inline]
    fn place(&mut self, s: usize, lba: u32) -> Result<(u32, bool)> {
        let cur = self.streams[s].cur;
        if self.streams[s].ways[cur].blocks.is_empty() {
            self.open_way(s, cur)?;
        }
        let spp = self.lay.sectors_per_page;
        let way = &mut self.streams[s].ways[cur];
        let b = way.blocks[way.plane as usize];
        let psa = b * self.lay.sectors_per_block + way.page * spp + way.slot;
        way.fill += 1;
        way.slot += 1;
        if way.slot == spp {
            way.slot = 0;
            way.plane += 1;
        }
        let full = way.plane == self.lay.planes_per_die;
        let old = std::mem::replace(&mut self.p2l[psa as usize], lba | P2L_VALID);
        assert_eq!(old, OOB_ERASED, "program of a non-erased sector {psa}");
        self.l2p[lba as usize] = psa;
        self.blocks[b as usize].valid += 1;
        Ok((psa, full))
    }

    /// Program stream `s`'s completed unit; for host streams, pace GC.
    fn unit_placed(&mut self, s: usize) -> Result<()> {
        self.program_unit(s);
        // Pace GC with host writes: below the background watermark, every programmed host
        // unit pays for some collection, so free space rarely falls to the foreground
        // watermark (where a host write waits for whole-block collections).
        let rg = self.streams[s].rg as usize;
        if self.streams[s].host && !self.in_wl && self.gc_short(rg) {
            self.gc_paced(rg)?;
        }
        Ok(())
    }

    /// Software prefetch of the metadata a write of `lba` will touch: stage 1 fetches its L2P
    /// entry, stage 2 (issued later, when that entry is cached) the P2L entry and block of the
    /// copy it will invalidate. Random-write throughput is bound by these cache misses.
    #[inline]
    fn prefetch_lba(&self, lba: u64, stage: u8) {
        if lba >= self.logical {
            return;
        }
        if stage == 1 {
            prefetch(&self.l2p[lba as usize]);
        } else {
            let psa = self.l2p[lba as usize];
            if psa != UNMAPPED {
                prefetch(&self.p2l[psa as usize]);
                prefetch(&self.blocks[(psa / self.lay.sectors_per_block) as usize]);
            }
        }
    }

    /// A stale sector still in the write buffer (its page not yet programmed) is dropped from
    /// the buffer: its slot is programmed as padding, so the media never holds a stale copy
    /// newer than the live one (the mapping rebuilds from OOB alone).
    #[inline]
    fn invalidate(&mut self, psa: u32) {
        let b = psa / self.lay.sectors_per_block;
        let m = &mut self.blocks[b as usize];
        m.valid -= 1;
        let v = &mut self.p2l[psa as usize];
        debug_assert!(*v & P2L_VALID != 0);
        let page_in_block = (psa - b * self.lay.sectors_per_block) / self.lay.sectors_per_page;
        *v = if m.state == BlockState::Open && page_in_block >= m.programmed_pages as u32 { OOB_PAD } else { *v & !P2L_VALID };
        if m.state == BlockState::Full {
            let rg = m.rg as usize;
            self.groups[rg].victims.on_invalidate(b, &mut self.blocks);
        }
        if let Some(d) = self.data.as_mut() {
            d.discard(psa);
        }
    }

    /// Program the current (full) unit of stream `s` and advance the stream.
    fn program_unit(&mut self, s: usize) {
        let planes = self.lay.planes_per_die;
        let cur = self.streams[s].cur;
        let page = self.streams[s].ways[cur].page;
        if self.next_seq > u32::MAX - planes - 1 {
            self.renumber_sequences();
        }
        let rg = self.streams[s].rg as usize;
        self.groups[rg].open_written_pages += planes as u64;
        for i in 0..planes as usize {
            let b = self.streams[s].ways[cur].blocks[i];
            self.page_seq[(b * self.lay.pages_per_block + page) as usize] = self.next_seq;
            self.blocks[b as usize].programmed_pages = (page + 1) as u16;
            self.next_seq += 1;
        }
        self.c.nand_page_programs += planes as u64;
        self.c.nand_write_bytes += planes as u64 * self.lay.page_bytes as u64;
        self.sstats[s].units_programmed += 1;
        let host = self.streams[s].host;
        if !host {
            self.c.gc_relocated_pages += planes as u64;
        }
        if self.tl.enabled {
            let way = &self.streams[s].ways[cur];
            let mut earliest = self.streams[s].ready_ns;
            for &b in &way.blocks {
                earliest = earliest.max(self.blocks[b as usize].ready_ns);
            }
            // One multi-plane program per die the unit spans (normally exactly one).
            let mut done = earliest;
            let mut i = 0;
            while i < way.blocks.len() {
                let die = self.lay.die_of_block(way.blocks[i]);
                let mut j = i + 1;
                while j < way.blocks.len() && self.lay.die_of_block(way.blocks[j]) == die {
                    j += 1;
                }
                done = done.max(self.tl.program(die, (j - i) as u64 * self.lay.page_bytes as u64, earliest));
                i = j;
            }
            if host {
                self.buffer.programmed(done);
            }
        }
        // The next unit waits for its own data: a GC stream's is read later; a host command's
        // later units are as ready as its first (its arrival plus the command overhead).
        self.streams[s].ready_ns = if host && self.tl.enabled { self.now + self.tl.command_overhead_ns() } else { 0 };
        let ppb = self.lay.pages_per_block;
        let host_clock = self.host_clock;
        let way = &mut self.streams[s].ways[cur];
        way.fill = 0;
        way.plane = 0;
        way.slot = 0;
        way.page += 1;
        if way.page == ppb {
            self.close_way(s, cur, host_clock);
        }
        let n = self.streams[s].ways.len();
        self.streams[s].cur = if cur + 1 == n { 0 } else { cur + 1 };
    }

    /// The blocks of way `w` of stream `s` become full (all pages programmed, or fewer when a
    /// reclaim unit handle update closes them early) and join their group's victim set.
    fn close_way(&mut self, s: usize, w: usize, host_clock: u64) {
        let way = &mut self.streams[s].ways[w];
        let closed = std::mem::take(&mut way.blocks);
        way.page = 0;
        for &b in &closed {
            let m = &mut self.blocks[b as usize];
            m.state = BlockState::Full;
            m.closed_at = host_clock;
            let rg = m.rg as usize;
            self.groups[rg].open_written_pages -= m.programmed_pages as u64;
            self.groups[rg].victims.insert(b, &mut self.blocks);
        }
        let mut closed = closed;
        closed.clear();
        self.streams[s].ways[w].blocks = closed;
    }

    /// End stream `s`'s current reclaim unit: program its partial unit with padding and close
    /// its open blocks, so the next write starts a new reclaim unit (FDP reclaim unit handle
    /// update). Returns whether the reclaim unit held any host data.
    pub(crate) fn end_reclaim_unit(&mut self, s: usize) -> bool {
        self.pad(s);
        for w in 0..self.streams[s].ways.len() {
            if !self.streams[s].ways[w].blocks.is_empty() {
                self.close_way(s, w, self.host_clock);
            }
        }
        self.streams[s].cur = 0;
        self.streams[s].ru_serial += 1;
        std::mem::take(&mut self.streams[s].ru_written) > 0
    }

    /// Fill the rest of stream `s`'s partial unit with padding and program it.
    fn pad(&mut self, s: usize) {
        let cur = self.streams[s].cur;
        let fill = self.streams[s].ways[cur].fill;
        if fill == 0 {
            return;
        }
        let spp = self.lay.sectors_per_page;
        let unit = spp * self.lay.planes_per_die;
        for f in fill..unit {
            let way = &self.streams[s].ways[cur];
            let plane = f / spp;
            let psa = way.blocks[plane as usize] * self.lay.sectors_per_block + way.page * spp + (f - plane * spp);
            let old = std::mem::replace(&mut self.p2l[psa as usize], OOB_PAD);
            assert_eq!(old, OOB_ERASED);
        }
        self.c.pad_sectors += (unit - fill) as u64;
        self.streams[s].ways[cur].fill = unit;
        self.program_unit(s);
    }

    /// Take the next victim of group `rg` out of its victim set and start collecting it.
    fn gc_pick(&mut self, rg: usize, foreground: bool) -> Result<u32> {
        let g = &mut self.groups[rg];
        let v = g
            .victims
            .pick(&mut self.blocks, self.lay.sectors_per_block, self.host_clock, &mut self.rng)
            .ok_or_else(|| Error::WornOut(format!("no full block to collect in reclaim group {rg}")))?;
        // Greedy picks the emptiest block: if even that one is entirely valid, nothing can be
        // reclaimed. Other policies may pick a full block and move on.
        if self.blocks[v as usize].valid >= self.lay.sectors_per_block && matches!(g.victims, Victims::Greedy { .. }) {
            g.victims.insert(v, &mut self.blocks);
            return Err(Error::WornOut(format!(
                "the best GC victim (block {v}) is entirely valid: the device is full ({} mapped sectors, {} free blocks in reclaim group {rg})",
                self.mapped, g.free
            )));
        }
        self.c.gc_events += 1;
        if foreground {
            self.c.gc_foreground_events += 1;
        } else {
            self.c.gc_background_events += 1;
        }
        self.blocks[v as usize].state = BlockState::Collecting;
        let now = self.now;
        self.groups[rg].gc.push(GcCursor { victim: v, page: 0, last_read: now });
        Ok(v)
    }

    /// Collect one whole victim of group `rg`: the oldest in progress, or a new one.
    fn gc_one(&mut self, rg: usize, foreground: bool) -> Result<()> {
        if self.groups[rg].gc.is_empty() {
            self.gc_pick(rg, foreground)?;
        }
        self.gc_advance(rg, 0, u32::MAX, u64::MAX)?;
        Ok(())
    }

    /// Pages by which group `rg`'s free blocks, net of the pages written in its open blocks,
    /// fall short of the background watermark (<= 0: no GC needed).
    #[inline]
    fn gc_shortfall_pages(&self, rg: usize) -> i64 {
        let g = &self.groups[rg];
        let ppb = self.lay.pages_per_block as i64;
        g.bg_free_blocks as i64 * ppb - (g.free as i64 * ppb - g.open_written_pages as i64)
    }

    #[inline]
    fn gc_short(&self, rg: usize) -> bool {
        self.gc_shortfall_pages(rg) > 0
    }

    /// GC paced by host writes: called once per programmed host unit below the background
    /// watermark, it scans victim pages until it has passed over as many stale sectors as the
    /// host unit consumed (twice as many when free space runs low), so GC work interleaves
    /// with host programs on the dies instead of arriving in bursts.
    fn gc_paced(&mut self, rg: usize) -> Result<()> {
        let unit = (self.lay.sectors_per_page * self.lay.planes_per_die) as u64;
        // Twice the pace when more than half a stripe short.
        let half_stripe = (self.groups[rg].dies.len() as u32 * self.lay.planes_per_die / 2) as i64 * self.lay.pages_per_block as i64;
        let mut want = if self.gc_shortfall_pages(rg) > half_stripe { 2 * unit } else { unit };
        // Each host unit's share goes to the next victim in turn (consecutive pages of one
        // block: its reads and map updates stay local), so successive units spread GC reads
        // over the victims' dies; at most four blocks' worth of pages per host unit.
        let mut budget = 4 * self.lay.pages_per_block;
        {
            let g = &mut self.groups[rg];
            g.gc_turn = g.gc_turn.wrapping_add(1);
        }
        let mut can_pick = true;
        while want > 0 && budget > 0 && self.gc_short(rg) {
            if can_pick && self.groups[rg].gc.len() < self.groups[rg].gc_width {
                match self.gc_pick(rg, true) {
                    Ok(_) => {}
                    // Nothing reclaimable yet: the data still fits above the foreground
                    // watermark, which is where a host write would have to fail.
                    Err(Error::WornOut(_)) if self.groups[rg].gc.is_empty() => return Ok(()),
                    // Work on the victims in progress; no new pick this call.
                    Err(Error::WornOut(_)) => can_pick = false,
                    Err(e) => return Err(e),
                }
            }
            let g = &self.groups[rg];
            let i = g.gc_turn % g.gc.len();
            let page0 = g.gc[i].page;
            let (n, v) = (g.gc.len(), g.gc[i].victim);
            let got = self.gc_advance(rg, i, budget, want)?;
            want = want.saturating_sub(got);
            // Pages scanned (a finished victim left the list: count the rest of its block).
            let g = &self.groups[rg];
            let now_page = if g.gc.len() < n || g.gc.get(i).map(|c| c.victim) != Some(v) { self.lay.pages_per_block } else { g.gc[i].page };
            budget = budget.saturating_sub((now_page - page0).max(1));
        }
        Ok(())
    }

    /// Relocate up to `pages` pages of group `rg`'s victim in progress number `i`, stopping
    /// once `want` stale sectors have been passed over or the block is done; erase it when
    /// done (the cursor leaves the list). Returns the stale sectors passed over.
    fn gc_advance(&mut self, rg: usize, i: usize, pages: u32, want: u64) -> Result<u64> {
        let spp = self.lay.sectors_per_page as u64;
        let ppb = self.lay.pages_per_block;
        let v = self.groups[rg].gc[i].victim;
        let mut reclaimed = 0u64;
        let mut done = 0u32;
        while self.groups[rg].gc[i].page < ppb && reclaimed < want && done < pages {
            done += 1;
            let g = &mut self.groups[rg];
            if self.blocks[v as usize].valid == 0 {
                let rest = ppb - g.gc[i].page;
                reclaimed += rest as u64 * spp;
                g.gc[i].page = ppb;
                break;
            }
            let page = g.gc[i].page;
            g.gc[i].page += 1;
            let (live, read_done) = self.relocate_page(v, page)?;
            // Relocation may have run paced GC of its own (GC streams do not, but stay safe):
            // find the cursor again by its victim.
            let g = &mut self.groups[rg];
            debug_assert_eq!(g.gc[i].victim, v);
            g.gc[i].last_read = g.gc[i].last_read.max(read_done);
            reclaimed += spp - live;
        }
        if self.groups[rg].gc[i].page >= ppb || self.blocks[v as usize].valid == 0 {
            assert_eq!(self.blocks[v as usize].valid, 0, "victim {v} still has valid sectors after collection");
            let g = &mut self.groups[rg];
            let c = g.gc.remove(i);
            let t = c.last_read.max(self.now);
            self.erase(v, t);
        }
        Ok(reclaimed)
    }

    /// Read one page of block `v` and relocate its valid sectors to the GC stream its data
    /// belongs to; returns how many there were and when the read completed.
    fn relocate_page(&mut self, v: u32, page: u32) -> Result<(u64, u64)> {
        let spp = self.lay.sectors_per_page;
        let base = v * self.lay.sectors_per_block + page * spp;
        // The L2P updates of a victim's sectors are independent cache misses: start the next
        // page's while this one is relocated.
        if page + 1 < self.lay.pages_per_block {
            for &e in &self.p2l[(base + spp) as usize..(base + 2 * spp) as usize] {
                if e & P2L_VALID != 0 {
                    prefetch(&self.l2p[(e & !P2L_VALID) as usize]);
                }
            }
        }
        let live = (base..base + spp).filter(|&p| self.p2l[p as usize] & P2L_VALID != 0).count() as u64;
        if live == 0 {
            return Ok((0, self.now));
        }
        self.c.nand_page_reads += 1;
        self.c.nand_read_bytes += self.lay.page_bytes as u64;
        let src = self.blocks[v as usize].stream as usize;
        let dest = self.streams[src].gc_dest;
        self.sstats[src].relocated_out_sectors += live;
        let mut read_done = self.now;
        if self.tl.enabled {
            read_done = self.tl.read_queued(self.lay.die_of_block(v), live * self.lay.sector_bytes as u64, self.now);
            let st = &mut self.streams[dest];
            st.ready_ns = st.ready_ns.max(read_done);
        }
        for psa in base..base + spp {
            let e = self.p2l[psa as usize];
            if e & P2L_VALID == 0 {
                continue;
            }
            self.p2l[psa as usize] = e & !P2L_VALID;
            self.blocks[v as usize].valid -= 1;
            let (new, full) = self.place(dest, e & !P2L_VALID)?;
            if let Some(d) = self.data.as_mut() {
                d.relocate(psa, new);
            }
            self.c.gc_relocated_sectors += 1;
            if full {
                self.unit_placed(dest)?;
            }
        }
        Ok((live, read_done))
    }

    /// Relocate every valid sector of full block `v` (already out of the victim set) and
    /// erase it (static wear-levelling moves).
    fn collect(&mut self, v: u32) -> Result<()> {
        self.blocks[v as usize].state = BlockState::Collecting;
        let mut last_read = self.now;
        for page in 0..self.lay.pages_per_block {
            if self.blocks[v as usize].valid == 0 {
                break;
            }
            last_read = last_read.max(self.relocate_page(v, page)?.1);
        }
        assert_eq!(self.blocks[v as usize].valid, 0, "block {v} still has valid sectors after its move");
        self.erase(v, last_read);
        Ok(())
    }

    fn erase(&mut self, b: u32, earliest: u64) {
        let spb = self.lay.sectors_per_block as usize;
        let first = b as usize * spb;
        if let Some(d) = self.data.as_mut() {
            for psa in first..first + spb {
                d.discard(psa as u32);
            }
        }
        self.p2l[first..first + spb].fill(OOB_ERASED);
        let ppb = self.lay.pages_per_block as usize;
        self.page_seq[b as usize * ppb..(b as usize + 1) * ppb].fill(0);
        self.c.nand_erase_count += 1;
        let m = &mut self.blocks[b as usize];
        m.erase_count += 1;
        let ec = m.erase_count;
        self.max_erase = self.max_erase.max(ec);
        if self.tl.enabled {
            let done = self.tl.erase(self.lay.die_of_block(b), earliest);
            self.blocks[b as usize].ready_ns = done;
        }
        let failed = self.set.grown_bad_probability > 0.0 && self.rng.gen::<f64>() < self.set.grown_bad_probability;
        if ec >= self.set.pe_limit || failed {
            self.blocks[b as usize].state = BlockState::Bad;
            self.c.grown_bad_blocks += 1;
            let (rg, now) = (self.blocks[b as usize].rg as u16, self.now);
            if let Some(f) = self.fdp.as_mut() {
                f.push_event(super::fdp::EventType::MediaReallocated, None, rg, now);
            }
        } else {
            self.pool_push(b);
        }
        self.erases_since_wl_check += 1;
        if self.set.wl_static_threshold > 0 && !self.in_wl && self.erases_since_wl_check >= self.set.wl_check_every_erases {
            self.erases_since_wl_check = 0;
            let rg = self.blocks[b as usize].rg as usize;
            self.static_wear_level(rg);
        }
    }

    /// Move the data of the least-worn full block when the erase-count spread is too wide, so
    /// cold data stops pinning young blocks.
    fn static_wear_level(&mut self, rg: usize) {
        let mut members = self.groups[rg].victims.members(&self.blocks);
        members.sort_unstable_by_key(|&b| (self.blocks[b as usize].erase_count, b));
        self.in_wl = true;
        // A few of the coldest blocks per check, while they lag too far behind.
        for &coldest in members.iter().take(WL_MOVES_PER_CHECK) {
            if self.max_erase - self.blocks[coldest as usize].erase_count <= self.set.wl_static_threshold {
                break;
            }
            let g = &self.groups[rg];
            if g.free <= g.dies.len() as u32 * self.lay.planes_per_die + self.lay.planes_per_die {
                break; // keep the GC reserve for foreground GC
            }
            self.groups[rg].victims.remove(coldest, &mut self.blocks);
            self.c.wl_static_moves += 1;
            self.c.gc_events += 1;
            self.collect(coldest).expect("static wear-levelling move within the GC reserve");
        }
        self.in_wl = false;
    }

    /// Renumber page sequence numbers densely (keeping their order) when the counter nears
    /// its 32-bit limit. Rare: once per 4 G page programs.
    fn renumber_sequences(&mut self) {
        let mut live: Vec<(u32, u32)> = self.page_seq.iter().enumerate().filter(|(_, &s)| s != 0).map(|(i, &s)| (s, i as u32)).collect();
        live.sort_unstable();
        for (rank, &(_, page)) in live.iter().enumerate() {
            self.page_seq[page as usize] = rank as u32 + 1;
        }
        self.next_seq = live.len() as u32 + 1;
    }

    fn check_range(&self, lba: u64, sectors: u32) -> Result<()> {
        if sectors == 0 || lba.checked_add(sectors as u64).is_none_or(|end| end > self.logical) {
            return Err(Error::Command(format!(
                "sectors {lba}..{} outside the device (0..{})",
                lba.saturating_add(sectors as u64),
                self.logical
            )));
        }
        Ok(())
    }

    /// Rebuild the logical-to-physical map from the media alone (per-sector OOB logical
    /// addresses and per-page sequence numbers): the newest copy of each address wins.
    /// Trims are not recorded on the media; a host that needs them across a rebuild journals
    /// them (the NBD server does).
    pub fn rebuild_l2p_from_media(&self) -> Vec<u32> {
        let mut l2p = vec![UNMAPPED; self.logical as usize];
        let spp = self.lay.sectors_per_page;
        for page in 0..self.page_seq.len() as u32 {
            let seq = self.page_seq[page as usize];
            if seq == 0 {
                continue;
            }
            for slot in 0..spp {
                let psa = page * spp + slot;
                let lba = self.p2l[psa as usize] & !P2L_VALID;
                if lba == OOB_PAD || lba == OOB_ERASED {
                    continue;
                }
                let cur = l2p[lba as usize];
                let newer = cur == UNMAPPED || {
                    let cs = self.page_seq[(cur / spp) as usize];
                    (seq, slot) > (cs, cur % spp)
                };
                if newer {
                    l2p[lba as usize] = psa;
                }
            }
        }
        l2p
    }

    /// The live logical-to-physical map (for tests and recovery checks).
    pub fn l2p(&self) -> &[u32] {
        &self.l2p
    }
}

#[inline(always)]
fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(r as *const T as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

impl BlockDevice for Conventional {
    fn layout(&self) -> &Layout {
        &self.lay
    }
    fn logical_sectors(&self) -> u64 {
        self.logical
    }

    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        let sb = self.lay.sector_bytes as usize;
        if let (Some(d), true) = (data, self.data.is_some()) {
            if d.len() != sectors as usize * sb {
                return Err(Error::Command(format!("write of {sectors} sectors carries {} bytes", d.len())));
            }
        }
        let s = match (&self.fdp, opts.placement) {
            (Some(f), Some(pid)) => {
                let (rg, h) = f.decode(pid).ok_or_else(|| Error::Nvme(Status::InvalidField, format!("placement identifier {pid:#06x} names no reclaim group and placement handle of this namespace ({} groups x {} placement handles)", f.groups, f.placement_handles())))?;
                self.host_streams[rg * f.handles as usize + h]
            }
            // No identifier: placement handle 0 of reclaim group 0.
            (Some(f), None) => self.host_streams[f.phndl[0] as usize],
            _ => HOST,
        };
        let t = now + self.tl.command_overhead_ns();
        self.now = now;
        self.tl.set_now(now);
        self.buffer.begin(t);
        if self.tl.enabled {
            let st = &mut self.streams[s];
            st.ready_ns = st.ready_ns.max(t);
        }
        for i in 0..sectors as u64 {
            let l = (lba + i) as u32;
            let old = self.l2p[l as usize];
            if old != UNMAPPED {
                self.invalidate(old);
            } else {
                self.mapped += 1;
            }
            self.host_clock += 1;
            let (psa, full) = self.place(s, l)?;
            if let (Some(store), Some(d)) = (self.data.as_mut(), data) {
                let off = i as usize * sb;
                store.put(psa, &d[off..off + sb]);
            }
            if full {
                self.unit_placed(s)?;
            }
        }
        self.sstats[s].host_sectors += sectors as u64;
        if let Some(f) = self.fdp.as_mut() {
            f.host_wrote(&mut self.streams[s], sectors as u64, now);
        }
        self.c.host_write_cmds += 1;
        self.c.host_write_bytes += sectors as u64 * sb as u64;
        // FUA and write-through pad the partial unit whether or not time is modelled, so the
        // media sees the same writes in both modes.
        let sync = opts.fua || self.buffer.write_through();
        if sync {
            self.pad(s);
        }
        if !self.tl.enabled {
            return Ok(now);
        }
        Ok(self.buffer.completion(sync, t))
    }

    fn read(&mut self, lba: u64, sectors: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        self.tl.set_now(now);
        let sb = self.lay.sector_bytes as usize;
        if let Some(o) = out.as_deref() {
            if o.len() != sectors as usize * sb {
                return Err(Error::Command(format!("read of {sectors} sectors into {} bytes", o.len())));
            }
        }
        let spp = self.lay.sectors_per_page;
        let t = now + self.tl.command_overhead_ns();
        let mut done = t;
        let mut group: (u32, u64) = (NIL, 0); // (page, sectors) of the current media read
        for i in 0..=sectors as u64 {
            let psa = if i < sectors as u64 { self.l2p[(lba + i) as usize] } else { UNMAPPED };
            let page = if psa == UNMAPPED { NIL } else { psa / spp };
            if page != group.0 && group.0 != NIL {
                // Issue the previous group's read, unless its page is still in the buffer.
                if self.page_seq[group.0 as usize] != 0 {
                    self.c.nand_page_reads += 1;
                    self.c.nand_read_bytes += self.lay.page_bytes as u64;
                    if self.tl.enabled {
                        let die = self.lay.die_of_block(group.0 / self.lay.pages_per_block);
                        done = done.max(self.tl.read(die, group.1 * sb as u64, t));
                    }
                }
                group = (NIL, 0);
            }
            if page != NIL {
                if group.0 == NIL {
                    group = (page, 0);
                }
                group.1 += 1;
            }
            if i < sectors as u64 {
                if let Some(o) = out.as_deref_mut() {
                    let dst = &mut o[i as usize * sb..(i as usize + 1) * sb];
                    match (&self.data, psa) {
                        (Some(store), p) if p != UNMAPPED => store.get(p, dst),
                        _ => dst.fill(0),
                    }
                }
            }
        }
        self.c.host_read_cmds += 1;
        self.c.host_read_bytes += sectors as u64 * sb as u64;
        Ok(if self.tl.enabled { done } else { now })
    }

    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        for l in lba..lba + sectors as u64 {
            let old = std::mem::replace(&mut self.l2p[l as usize], UNMAPPED);
            if old != UNMAPPED {
                self.invalidate(old);
                self.mapped -= 1;
            }
        }
        self.c.host_trim_cmds += 1;
        self.c.host_trim_bytes += sectors as u64 * self.lay.sector_bytes as u64;
        Ok(if self.tl.enabled { now + self.tl.command_overhead_ns() } else { now })
    }

    fn flush(&mut self, now: u64) -> Result<u64> {
        self.now = now;
        self.tl.set_now(now);
        let t = now + self.tl.command_overhead_ns();
        // Every stream's partial unit, relocated data in GC buffers included, so a flushed
        // device holds everything on the media.
        for s in 0..self.streams.len() {
            self.pad(s);
        }
        self.c.host_flush_cmds += 1;
        Ok(if self.tl.enabled { t.max(self.buffer.drained_at()) } else { now })
    }

    fn idle(&mut self, now: u64) {
        if !self.tl.enabled || (0..self.groups.len()).all(|rg| !self.gc_short(rg)) || self.tl.horizon_ns() > now {
            return;
        }
        self.now = now;
        self.tl.set_now(now);
        for rg in 0..self.groups.len() {
            if self.gc_short(rg) {
                // Background GC never fails the host: if nothing is collectable, foreground GC
                // will say so.
                let _ = self.gc_one(rg, false);
            }
        }
    }

    fn prefetch(&self, lba: u64, stage: u8) {
        self.prefetch_lba(lba, stage)
    }

    fn personality_baseline(&self) -> serde_json::Value {
        serde_json::to_value(&self.sstats).expect("stream stats serialise")
    }

    fn personality_metrics(&self, base: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
        let base: Vec<super::fdp::StreamStats> = serde_json::from_value(base.clone()).unwrap_or_default();
        self.fdp_metrics(&base).map(|v| vec![("fdp", v)]).unwrap_or_default()
    }

    fn counters(&self) -> &Counters {
        &self.c
    }
    fn timelines(&self) -> &Timelines {
        &self.tl
    }
    fn blocks(&self) -> &[BlockMeta] {
        &self.blocks
    }
    fn free_blocks(&self) -> u32 {
        self.groups.iter().map(|g| g.free).sum()
    }
    fn mapped_sectors(&self) -> u64 {
        self.mapped
    }

    fn check_invariants(&self) {
        let spb = self.lay.sectors_per_block;
        let spp = self.lay.sectors_per_page;
        // Valid-sector count of each block == sectors mapped to it.
        let mut valid = vec![0u32; self.blocks.len()];
        let mut mapped = 0u64;
        for (lba, &psa) in self.l2p.iter().enumerate() {
            if psa != UNMAPPED {
                assert_eq!(self.p2l[psa as usize], lba as u32 | P2L_VALID, "L2P/P2L disagree for sector {lba}");
                valid[(psa / spb) as usize] += 1;
                mapped += 1;
            }
        }
        assert_eq!(mapped, self.mapped, "mapped-sector count drifted");
        let valid_bits = self.p2l.iter().filter(|&&e| e & P2L_VALID != 0).count() as u64;
        assert_eq!(valid_bits, mapped, "valid bits != mapped sectors");
        for (b, m) in self.blocks.iter().enumerate() {
            assert_eq!(m.valid, valid[b], "block {b}: valid count {} but {} sectors map to it", m.valid, valid[b]);
        }
        for (rg, g) in self.groups.iter().enumerate() {
            // Free pools hold exactly the group's free blocks, which are fully erased.
            let pooled: u32 = g.dies.iter().map(|&d| self.pools[d as usize].heap.len() as u32).sum();
            let free = self.blocks.iter().filter(|m| m.state == BlockState::Free && m.rg as usize == rg).count() as u32;
            assert_eq!(pooled, g.free, "group {rg}: pooled free blocks");
            assert_eq!(free, g.free, "group {rg}: free blocks");
            // The victim set holds exactly the group's full blocks.
            let mut members = g.victims.members(&self.blocks);
            members.sort_unstable();
            let full: Vec<u32> = (0..self.blocks.len() as u32)
                .filter(|&b| self.blocks[b as usize].state == BlockState::Full && self.blocks[b as usize].rg as usize == rg)
                .collect();
            assert_eq!(members, full, "group {rg}: victim set != full blocks");
            let open_pages: u64 =
                self.blocks.iter().filter(|m| m.state == BlockState::Open && m.rg as usize == rg).map(|m| m.programmed_pages as u64).sum();
            assert_eq!(open_pages, g.open_written_pages, "group {rg}: pages written in open blocks");
            // The victims in progress are exactly the group's blocks being collected.
            let mut collecting: Vec<u32> = g.gc.iter().map(|c| c.victim).collect();
            collecting.sort_unstable();
            let want: Vec<u32> = (0..self.blocks.len() as u32)
                .filter(|&b| self.blocks[b as usize].state == BlockState::Collecting && self.blocks[b as usize].rg as usize == rg)
                .collect();
            assert_eq!(collecting, want, "group {rg}: victims in progress");
            assert!(g.gc.len() <= g.gc_width.max(1), "group {rg}: more victims in progress than gc_width");
        }
        // Blocks only ever hold data of their own group's streams.
        for (b, m) in self.blocks.iter().enumerate() {
            if matches!(m.state, BlockState::Open | BlockState::Full | BlockState::Collecting) {
                assert_eq!(self.streams[m.stream as usize].rg, m.rg, "block {b} written by a stream of another reclaim group");
            }
        }
        // Pages are programmed in order: within an open block, pages before the write point are
        // programmed and those after it erased; full blocks are programmed throughout.
        for st in &self.streams {
            for way in &st.ways {
                for &b in &way.blocks {
                    for page in 0..self.lay.pages_per_block {
                        let seq = self.page_seq[(b * self.lay.pages_per_block + page) as usize];
                        assert_eq!(seq != 0, page < way.page, "block {b} page {page}: out-of-order program");
                    }
                }
            }
        }
        for (b, m) in self.blocks.iter().enumerate() {
            let pages = &self.page_seq[b * self.lay.pages_per_block as usize..(b + 1) * self.lay.pages_per_block as usize];
            match m.state {
                // Programmed pages form a prefix (all of the block unless a reclaim unit handle
                // update closed it early).
                BlockState::Full => {
                    let n = m.programmed_pages as usize;
                    assert!(
                        n > 0 && pages[..n].iter().all(|&s| s != 0) && pages[n..].iter().all(|&s| s == 0),
                        "full block {b}: programmed pages not a prefix of {n}"
                    );
                }
                BlockState::Free => {
                    assert!(pages.iter().all(|&s| s == 0));
                    let first = b * spb as usize;
                    assert!(self.p2l[first..first + spb as usize].iter().all(|&e| e == OOB_ERASED), "free block {b} not erased");
                }
                _ => {}
            }
        }
        let _ = spp;
    }
}
