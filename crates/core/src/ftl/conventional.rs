//! The conventional FTL: page-level (sector-level) mapping, striped write points, garbage
//! collection with pluggable victim policies, TRIM, dynamic and static wear-levelling, and an
//! optional write-back buffer.
//!
//! Memory per sector (metadata-only): 4 B of L2P per logical sector, 4 B of P2L (the OOB
//! logical address, with the valid bit in its top bit) per physical sector, and a 4 B sequence
//! number per physical page. With 4 KiB sectors and 16 KiB pages that is about 9.4 B per
//! logical sector at 7% spare.
//!
//! Write points ("streams"): stream 0 takes host writes, stream 1 GC relocations. A stream has
//! one way per die; a way holds one open block in each plane of its die and programs one
//! multi-plane unit (a page in every plane) at a time; consecutive units go to consecutive
//! ways, channels first, so a burst of writes keeps every die busy.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use super::victim::Victims;
use super::{BlockDevice, Counters, WriteOpts};
use crate::config::{Config, GcPolicy, StorageMode};
use crate::engine::Timelines;
use crate::error::{Error, Result};
use crate::media::store::DataStore;
use crate::media::{BlockMeta, BlockState, Layout, NIL, OOB_ERASED, OOB_PAD, P2L_VALID};

pub const HOST: usize = 0;
pub const GC: usize = 1;
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
struct Stream {
    ways: Vec<Way>,
    cur: usize,
    /// Time at which the data of the unit being filled is available to program.
    ready_ns: u64,
}

/// Free blocks of one die, least-worn first (dynamic wear-levelling) or first-in first-out.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FreePool {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    fg_free_blocks: u32,
    bg_free_blocks: u32,
    buffer_units: usize,
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
    free_count: u32,
    free_order: u64,
    streams: Vec<Stream>,
    victims: Victims,
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
    /// Victim being collected (NIL if none), its next page, and its latest read completion.
    gc_victim: u32,
    gc_page: u32,
    gc_last_read: u64,
    // Per-command timing state.
    now: u64,
    inflight: BinaryHeap<Reverse<u64>>,
    cmd_done: u64,
    stall_until: u64,
    last_host_done: u64,
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
            return Err(Error::config("geometry.blocks_per_plane", format!("{logical} logical sectors exceed the supported 2^31 - 2; use larger sector_bytes")));
        }
        let auto_fg = lay.dies * lay.planes_per_die + lay.planes_per_die + 2;
        let fg = if cfg.ftl.gc_fg_free_blocks == 0 { auto_fg } else { cfg.ftl.gc_fg_free_blocks.max(auto_fg) };
        // Paced GC keeps free space between the two watermarks; a narrow band keeps few
        // blocks idle (they are spare space the data cannot use).
        let bg = if cfg.ftl.gc_bg_free_blocks == 0 { fg + lay.dies * lay.planes_per_die / 2 + 2 } else { cfg.ftl.gc_bg_free_blocks.max(fg) };
        let spare_blocks = good as f64 - logical as f64 / lay.sectors_per_block as f64;
        if (spare_blocks as u32) < fg + lay.dies * lay.planes_per_die + 2 {
            return Err(Error::config(
                "ftl.spare_factor",
                format!(
                    "{:.0} spare blocks cannot hold the {} the FTL keeps free and open (foreground GC watermark {fg} plus one open block per plane and die); raise spare_factor",
                    spare_blocks,
                    fg + lay.dies * lay.planes_per_die + 2
                ),
            ));
        }
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let set = Settings {
            fg_free_blocks: fg,
            bg_free_blocks: bg,
            buffer_units: (cfg.ftl.write_buffer_bytes / unit_bytes) as usize,
            wl_dynamic: cfg.ftl.wl_dynamic,
            wl_static_threshold: cfg.ftl.wl_static_threshold,
            wl_check_every_erases: (lay.blocks / 32).max(16),
            pe_limit: cfg.media.pe_limit,
            grown_bad_probability: cfg.media.grown_bad_probability,
        };
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
            free_count: 0,
            free_order: 0,
            streams: (0..2)
                .map(|_| Stream {
                    ways: lay.way_order().into_iter().map(|die| Way { die, blocks: Vec::with_capacity(planes), page: 0, fill: 0, plane: 0, slot: 0 }).collect(),
                    cur: 0,
                    ready_ns: 0,
                })
                .collect(),
            victims: Victims::new(cfg.ftl.gc_policy, lay.sectors_per_block, cfg.ftl.gc_d),
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
            gc_victim: NIL,
            gc_page: 0,
            gc_last_read: 0,
            now: 0,
            inflight: BinaryHeap::new(),
            cmd_done: 0,
            stall_until: 0,
            last_host_done: 0,
        };
        for b in 0..lay.blocks {
            if ftl.blocks[b as usize].state == BlockState::Free {
                ftl.pool_push(b);
            }
        }
        Ok(ftl)
    }

    pub fn gc_policy_name(&self) -> &'static str {
        match &self.victims {
            Victims::Greedy { .. } => "greedy",
            Victims::Fifo { .. } => "fifo",
            Victims::Dense { policy: GcPolicy::CostBenefit, .. } => "cost-benefit",
            Victims::Dense { .. } => "d-choices",
        }
    }

    /// Foreground and background GC watermarks in use (free blocks).
    pub fn watermarks(&self) -> (u32, u32) {
        (self.set.fg_free_blocks, self.set.bg_free_blocks)
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
        self.blocks[b as usize].state = BlockState::Free;
        self.free_count += 1;
    }

    /// Open one block per plane for `way` of `stream`, from its die if it can.
    fn open_way(&mut self, s: usize, w: usize) -> Result<()> {
        let planes = self.lay.planes_per_die as usize;
        if s == HOST && !self.in_wl {
            let mut rounds = 0u64;
            while self.free_count < self.set.fg_free_blocks + planes as u32 {
                self.gc_one(true)?;
                rounds += 1;
                if rounds > 2 * self.lay.blocks as u64 {
                    return Err(Error::WornOut(format!("garbage collection cannot reclaim space ({} free blocks, {} mapped sectors)", self.free_count, self.mapped)));
                }
            }
        }
        if self.free_count < planes as u32 {
            return Err(Error::WornOut(format!("{} free blocks left, {planes} needed to open a write point", self.free_count)));
        }
        // One block per plane from the way's own die when it has them; otherwise from the dies
        // with the most free blocks (GC frees blocks wherever its victims were, so dies drift
        // apart). A unit whose blocks sit on several dies programs on each of them.
        let pref = self.streams[s].ways[w].die as usize;
        let mut opened = Vec::with_capacity(planes);
        while opened.len() < planes {
            let die = if !self.pools[pref].heap.is_empty() {
                pref
            } else {
                (0..self.pools.len()).max_by_key(|&d| (self.pools[d].heap.len(), Reverse(d))).expect("some die has a free block")
            };
            let Reverse((_, b)) = self.pools[die].heap.pop().expect("pool checked non-empty");
            let m = &mut self.blocks[b as usize];
            assert_eq!(m.state, BlockState::Free);
            assert_eq!(m.valid, 0);
            m.state = BlockState::Open;
            m.stream = s as u8;
            m.programmed_pages = 0;
            opened.push(b);
        }
        self.free_count -= planes as u32;
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
        if s == HOST && !self.in_wl && self.free_count < self.set.bg_free_blocks {
            self.gc_paced()?;
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
        *v = if m.state == BlockState::Open && page_in_block >= m.programmed_pages { OOB_PAD } else { *v & !P2L_VALID };
        if m.state == BlockState::Full {
            self.victims.on_invalidate(b, &mut self.blocks);
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
        for i in 0..planes as usize {
            let b = self.streams[s].ways[cur].blocks[i];
            self.page_seq[(b * self.lay.pages_per_block + page) as usize] = self.next_seq;
            self.blocks[b as usize].programmed_pages = page + 1;
            self.next_seq += 1;
        }
        self.c.nand_page_programs += planes as u64;
        self.c.nand_write_bytes += planes as u64 * self.lay.page_bytes as u64;
        if s != HOST {
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
            if s == HOST {
                self.cmd_done = self.cmd_done.max(done);
                self.last_host_done = self.last_host_done.max(done);
                if self.set.buffer_units > 0 {
                    self.inflight.push(Reverse(done));
                    while self.inflight.len() > self.set.buffer_units {
                        let Reverse(t) = self.inflight.pop().unwrap();
                        self.stall_until = self.stall_until.max(t);
                    }
                }
            }
        }
        self.streams[s].ready_ns = 0;
        let ppb = self.lay.pages_per_block;
        let host_clock = self.host_clock;
        let way = &mut self.streams[s].ways[cur];
        way.fill = 0;
        way.plane = 0;
        way.slot = 0;
        way.page += 1;
        if way.page == ppb {
            let closed = std::mem::take(&mut way.blocks);
            way.page = 0;
            for &b in &closed {
                let m = &mut self.blocks[b as usize];
                m.state = BlockState::Full;
                m.closed_at = host_clock;
                self.victims.insert(b, &mut self.blocks);
            }
            self.streams[s].ways[cur].blocks = closed;
            self.streams[s].ways[cur].blocks.clear();
        }
        let n = self.streams[s].ways.len();
        self.streams[s].cur = if cur + 1 == n { 0 } else { cur + 1 };
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

    /// Take the next victim out of the victim set and make it the block being collected.
    fn gc_pick(&mut self, foreground: bool) -> Result<u32> {
        let v = self
            .victims
            .pick(&mut self.blocks, self.lay.sectors_per_block, self.host_clock, &mut self.rng)
            .ok_or_else(|| Error::WornOut("no full block to collect".into()))?;
        // Greedy picks the emptiest block: if even that one is entirely valid, nothing can be
        // reclaimed. Other policies may pick a full block and move on.
        if self.blocks[v as usize].valid >= self.lay.sectors_per_block && matches!(self.victims, Victims::Greedy { .. }) {
            self.victims.insert(v, &mut self.blocks);
            return Err(Error::WornOut(format!(
                "the best GC victim (block {v}) is entirely valid: the device is full ({} mapped sectors, {} free blocks)",
                self.mapped, self.free_count
            )));
        }
        self.c.gc_events += 1;
        if foreground {
            self.c.gc_foreground_events += 1;
        } else {
            self.c.gc_background_events += 1;
        }
        self.blocks[v as usize].state = BlockState::Collecting;
        self.gc_victim = v;
        self.gc_page = 0;
        self.gc_last_read = self.now;
        Ok(v)
    }

    /// Collect one whole victim: the one in progress, or a new one.
    fn gc_one(&mut self, foreground: bool) -> Result<()> {
        let v = if self.gc_victim != NIL { self.gc_victim } else { self.gc_pick(foreground)? };
        self.gc_advance(v, u64::MAX)?;
        Ok(())
    }

    /// GC paced by host writes: called once per programmed host unit below the background
    /// watermark, it scans victim pages until it has passed over as many stale sectors as the
    /// host unit consumed (twice as many when free space runs low), so GC work interleaves
    /// with host programs on the dies instead of arriving in bursts.
    fn gc_paced(&mut self) -> Result<()> {
        let unit = (self.lay.sectors_per_page * self.lay.planes_per_die) as u64;
        let mid = (self.set.fg_free_blocks + self.set.bg_free_blocks) / 2;
        let mut want = if self.free_count < mid { 2 * unit } else { unit };
        for _ in 0..4 {
            if want == 0 || self.free_count >= self.set.bg_free_blocks {
                break;
            }
            let v = if self.gc_victim != NIL { self.gc_victim } else { self.gc_pick(true)? };
            let got = self.gc_advance(v, want)?;
            want = want.saturating_sub(got);
        }
        Ok(())
    }

    /// Relocate victim pages from the cursor until `want` stale sectors have been passed over
    /// or the block is done; erase it when done. Returns the stale sectors passed over.
    fn gc_advance(&mut self, v: u32, want: u64) -> Result<u64> {
        let spp = self.lay.sectors_per_page as u64;
        let mut reclaimed = 0u64;
        while self.gc_page < self.lay.pages_per_block && reclaimed < want {
            if self.blocks[v as usize].valid == 0 {
                reclaimed += (self.lay.pages_per_block - self.gc_page) as u64 * spp;
                self.gc_page = self.lay.pages_per_block;
                break;
            }
            let page = self.gc_page;
            self.gc_page += 1;
            let live = self.relocate_page(v, page)?;
            reclaimed += spp - live;
        }
        if self.gc_page >= self.lay.pages_per_block || self.blocks[v as usize].valid == 0 {
            assert_eq!(self.blocks[v as usize].valid, 0, "victim {v} still has valid sectors after collection");
            self.gc_victim = NIL;
            let t = self.gc_last_read.max(self.now);
            self.erase(v, t);
        }
        Ok(reclaimed)
    }

    /// Read one page of block `v` and relocate its valid sectors to the GC stream; returns how
    /// many there were.
    fn relocate_page(&mut self, v: u32, page: u32) -> Result<u64> {
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
            return Ok(0);
        }
        self.c.nand_page_reads += 1;
        self.c.nand_read_bytes += self.lay.page_bytes as u64;
        if self.tl.enabled {
            let r = self.tl.read(self.lay.die_of_block(v), live * self.lay.sector_bytes as u64, self.now);
            self.gc_last_read = self.gc_last_read.max(r);
            let st = &mut self.streams[GC];
            st.ready_ns = st.ready_ns.max(r);
        }
        for psa in base..base + spp {
            let e = self.p2l[psa as usize];
            if e & P2L_VALID == 0 {
                continue;
            }
            self.p2l[psa as usize] = e & !P2L_VALID;
            self.blocks[v as usize].valid -= 1;
            let (new, full) = self.place(GC, e & !P2L_VALID)?;
            if let Some(d) = self.data.as_mut() {
                d.relocate(psa, new);
            }
            self.c.gc_relocated_sectors += 1;
            if full {
                self.unit_placed(GC)?;
            }
        }
        Ok(live)
    }

    /// Relocate every valid sector of full block `v` (already out of the victim set) and
    /// erase it (static wear-levelling moves).
    fn collect(&mut self, v: u32) -> Result<()> {
        self.blocks[v as usize].state = BlockState::Collecting;
        let saved = self.gc_last_read;
        self.gc_last_read = self.now;
        for page in 0..self.lay.pages_per_block {
            if self.blocks[v as usize].valid == 0 {
                break;
            }
            self.relocate_page(v, page)?;
        }
        assert_eq!(self.blocks[v as usize].valid, 0, "block {v} still has valid sectors after its move");
        let t = self.gc_last_read;
        self.gc_last_read = saved.max(t);
        self.erase(v, t);
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
        } else {
            self.pool_push(b);
        }
        self.erases_since_wl_check += 1;
        if self.set.wl_static_threshold > 0 && !self.in_wl && self.erases_since_wl_check >= self.set.wl_check_every_erases {
            self.erases_since_wl_check = 0;
            self.static_wear_level();
        }
    }

    /// Move the data of the least-worn full block when the erase-count spread is too wide, so
    /// cold data stops pinning young blocks.
    fn static_wear_level(&mut self) {
        let mut members = self.victims.members(&self.blocks);
        members.sort_unstable_by_key(|&b| (self.blocks[b as usize].erase_count, b));
        self.in_wl = true;
        // A few of the coldest blocks per check, while they lag too far behind.
        for &coldest in members.iter().take(WL_MOVES_PER_CHECK) {
            if self.max_erase - self.blocks[coldest as usize].erase_count <= self.set.wl_static_threshold {
                break;
            }
            if self.free_count <= self.lay.dies * self.lay.planes_per_die + self.lay.planes_per_die {
                break; // keep the GC reserve for foreground GC
            }
            self.victims.remove(coldest, &mut self.blocks);
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
        if sectors == 0 || lba.checked_add(sectors as u64).map_or(true, |end| end > self.logical) {
            return Err(Error::Command(format!("sectors {lba}..{} outside the device (0..{})", lba.saturating_add(sectors as u64), self.logical)));
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
        let t = now + self.tl.command_overhead_ns();
        self.now = now;
        self.cmd_done = t;
        self.stall_until = t;
        if self.tl.enabled {
            let st = &mut self.streams[HOST];
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
            let (psa, full) = self.place(HOST, l)?;
            if let (Some(store), Some(d)) = (self.data.as_mut(), data) {
                let off = i as usize * sb;
                store.put(psa, &d[off..off + sb]);
            }
            if full {
                self.unit_placed(HOST)?;
            }
        }
        self.c.host_write_cmds += 1;
        self.c.host_write_bytes += sectors as u64 * sb as u64;
        // FUA and write-through pad the partial unit whether or not time is modelled, so the
        // media sees the same writes in both modes.
        let sync = opts.fua || self.set.buffer_units == 0;
        if sync {
            self.pad(HOST);
        }
        if !self.tl.enabled {
            return Ok(now);
        }
        Ok(if sync { self.cmd_done } else { self.stall_until.max(t) })
    }

    fn read(&mut self, lba: u64, sectors: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
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
        let t = now + self.tl.command_overhead_ns();
        self.pad(HOST);
        // Relocated data waiting in the GC buffer is programmed too, so a flushed device
        // holds everything on the media.
        self.pad(GC);
        self.c.host_flush_cmds += 1;
        Ok(if self.tl.enabled { t.max(self.last_host_done) } else { now })
    }

    fn idle(&mut self, now: u64) {
        if !self.tl.enabled || self.free_count >= self.set.bg_free_blocks || self.tl.horizon_ns() > now {
            return;
        }
        self.now = now;
        // Background GC never fails the host: if nothing is collectable, foreground GC will say so.
        let _ = self.gc_one(false);
    }

    fn prefetch(&self, lba: u64, stage: u8) {
        self.prefetch_lba(lba, stage)
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
        self.free_count
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
        // Free pools hold exactly the free blocks, which are fully erased.
        let pooled: u32 = self.pools.iter().map(|p| p.heap.len() as u32).sum();
        let free = self.blocks.iter().filter(|m| m.state == BlockState::Free).count() as u32;
        assert_eq!(pooled, self.free_count);
        assert_eq!(free, self.free_count);
        // The victim set holds exactly the full blocks.
        let mut members = self.victims.members(&self.blocks);
        members.sort_unstable();
        let full: Vec<u32> = (0..self.blocks.len() as u32).filter(|&b| self.blocks[b as usize].state == BlockState::Full).collect();
        assert_eq!(members, full, "victim set != full blocks");
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
                BlockState::Full => assert!(pages.iter().all(|&s| s != 0), "full block {b} has erased pages"),
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
