//! [`FlashBlox`]: virtual SSDs on an open-channel device.
//!
//! Three layers of addresses:
//! - a vSSD's **block** (what `alloc_block` returns) is a superblock: one erase block (an
//!   open-channel chunk) on each of the vSSD's stripe members ([`Slot`]s: whole logical dies,
//!   or soft-planes), written unit by unit (one multi-plane page, `ws_min` sectors) round-robin
//!   over the members;
//! - each member's piece of block `b` is block `base + b` of its **logical die**; the logical
//!   die's private block-granular map says which physical chunk holds it (the device-level map
//!   of the document, one per die, 4 bytes per erase block here) and each chunk's OOB record
//!   names it (`oob.rs`), so the map rebuilds after a crash;
//! - a logical die lives on a **physical die** (`home`); channel/die swaps move logical dies
//!   between physical dies block by block, so vSSDs never see wear-levelling.
//!
//! Each physical die keeps its free (erased) chunks in a heap, least worn first. A logical die
//! has `L` logical blocks, 1% fewer than the die's chunks (the reserve for blocks that fail),
//! and a soft-plane a quarter of them, so a vSSD can only ever hold as many erased blocks as
//! its soft-planes are entitled to (tenants never share pre-erased blocks), while the blocks
//! themselves rotate among the die's soft-planes through the shared heap (intra-die wear
//! levelling).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::ftl::ocssd::{ChunkState, Ocssd, MAX_VECTOR, OOB_BYTES};
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::Config;

use crate::config::{FlashBloxConfig, SwapPair, SwapPolicy};
use crate::error::{Result, VssdError};
use crate::oob::{OobRecord, TIMESTAMP_MAX};
use crate::resources::{Isolation, Placement, Resources, Slot};

pub(crate) const NIL: u32 = u32::MAX;
const NIL64: u64 = u64::MAX;
/// `Vssd::wp` of a logical block that is not allocated.
const UNALLOCATED: u32 = u32::MAX;

/// Geometry as the vSSD layer sees it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Geo {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub dies: u32,
    /// Chunks (multi-plane erase blocks) per die.
    pub chunks_per_die: u32,
    /// Sectors per chunk.
    pub clba: u32,
    /// Sectors per write unit (one multi-plane page).
    pub ws_min: u32,
    pub sector_bytes: u32,
    pub chunk_bytes: u64,
    /// Chunks per die kept back for failing blocks.
    pub reserve: u32,
    /// Logical blocks per logical die (`chunks_per_die - reserve`).
    pub ldie_blocks: u32,
    pub sps_per_die: u32,
    /// Logical blocks per soft-plane.
    pub sp_blocks: u32,
}

/// A logical die: its home and its private map.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Ldie {
    pub home: u32,
    /// Logical block -> chunk (NIL: unmapped).
    pub map: Vec<u32>,
    pub mapped: u32,
    /// Chunks erased since the last swap (its tenants' write rate).
    pub epoch_erases: u64,
}

/// A physical die: its erased chunks and wear.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pdie {
    /// Free chunks, least worn first: (erase count, chunk).
    pub free: BinaryHeap<Reverse<(u32, u32)>>,
    /// Chunks not offline.
    pub good: u32,
    /// Chunk erases so far (wear).
    pub erases: u64,
    /// The logical die living here.
    pub ldie: u32,
    /// Completion times of commands in flight (timing mode), for the per-die queue depth.
    #[serde(skip)]
    pub inflight: BinaryHeap<Reverse<u64>>,
}

/// One vSSD.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Vssd {
    pub id: u32,
    pub level: Isolation,
    pub tput_level: u32,
    pub capacity_bytes: u64,
    pub slots: Vec<Slot>,
    /// First logical block of each slot in its logical die.
    pub(crate) bases: Vec<u32>,
    /// Logical blocks.
    pub blocks: u32,
    /// Free logical blocks (popped from the end: lowest first at the start).
    pub(crate) free: Vec<u32>,
    /// Sectors written in each block (UNALLOCATED if free).
    pub(crate) wp: Vec<u32>,
    pub stats: VssdStats,
}

/// What a vSSD's tenant did through the API (device bytes, not application bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VssdStats {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub blocks_allocated: u64,
    pub blocks_freed: u64,
    pub chunk_erases: u64,
    /// I/Os that waited for a block being migrated.
    pub stalls: u64,
    pub stall_ns: u64,
}

impl Vssd {
    pub fn block_sectors(&self, g: &Geo) -> u32 {
        self.slots.len() as u32 * g.clba
    }
    pub fn free_blocks(&self) -> u32 {
        self.free.len() as u32
    }
    pub fn capacity(&self, g: &Geo) -> u64 {
        self.blocks as u64 * self.slots.len() as u64 * g.chunk_bytes
    }
    /// Logical dies this vSSD stripes over (each once).
    pub fn ldies(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.slots.iter().map(|s| s.ldie).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Wear-levelling state: per physical channel, the erases since the last swap; the clock of
/// the last swap; what swaps cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct WearState {
    /// Erased bytes per physical channel since the last swap (tenants' erases only).
    pub epoch_bytes: Vec<u64>,
    pub epoch_start_ns: u64,
    /// Fixed and round-robin: when the next swap is due.
    pub next_due_ns: u64,
}

/// Swap and migration totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationStats {
    pub swaps: u64,
    pub swaps_done: u64,
    pub blocks_moved: u64,
    pub bytes_moved: u64,
    /// Chunk erases of migration (source chunks after their copy).
    pub erases: u64,
    /// Simulated time spent in swaps (start to last copy), summed.
    pub busy_ns: u64,
    /// Expedited moves (an I/O hit the block being moved).
    pub expedited: u64,
}

/// A block being moved by a mover.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Move {
    pub lblock: u32,
    pub src: u32,
    pub dst: u32,
    pub copied: u32,
    pub total: u32,
}

/// Moves one logical die's blocks from one physical die to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Mover {
    pub ldie: u32,
    pub from: u32,
    pub to: u32,
    pub pending: Vec<u32>,
    pub cur: Option<Move>,
    pub next_ns: u64,
}

/// A channel swap in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Swap {
    pub channels: (u32, u32),
    pub movers: Vec<Mover>,
    pub started_ns: u64,
    pub last_ns: u64,
}

/// What the host persists beside the device (the resource manager's allocations and where
/// each logical die lives); with the OOB records it is enough to rebuild everything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutTable {
    pub vssds: Vec<VssdRecord>,
    /// Logical die -> physical die.
    pub homes: Vec<u32>,
    /// A swap in progress: its channels and moves (logical die, from, to).
    pub swap: Option<SwapRecord>,
    pub config: FlashBloxConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdRecord {
    pub id: u32,
    pub level: Isolation,
    pub tput_level: u32,
    pub capacity_bytes: u64,
    pub slots: Vec<Slot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwapRecord {
    pub channels: (u32, u32),
    pub moves: Vec<(u32, u32, u32)>,
    pub started_ns: u64,
}

/// Why chunks are erased (what the erase counts towards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EraseKind {
    Tenant,
    Migration,
    Recovery,
}

/// Scratch buffers of the I/O path (no allocation per command).
#[derive(Debug, Clone, Default)]
struct Scratch {
    lbas: Vec<u64>,
    /// (index in `lbas`, record) of chunk starts in the command being built.
    marks: Vec<(usize, [u8; OOB_BYTES])>,
    oob: Vec<u8>,
    dies: Vec<u32>,
    buf: Vec<u8>,
}

/// Virtual SSDs on an open-channel device. See the module docs.
#[derive(Debug, Clone)]
pub struct FlashBlox {
    pub(crate) dev: Ocssd,
    pub(crate) cfg: FlashBloxConfig,
    pub(crate) geo: Geo,
    pub(crate) res: Resources,
    pub(crate) ldies: Vec<Ldie>,
    pub(crate) pdies: Vec<Pdie>,
    /// Chunk -> (logical die << 32 | logical block), NIL64 if free.
    pub(crate) owner: Vec<u64>,
    pub(crate) vssds: Vec<Option<Vssd>>,
    /// The OOB timestamp clock.
    pub(crate) clock: u64,
    pub(crate) wear: WearState,
    pub(crate) swap: Option<Swap>,
    pub(crate) mig: MigrationStats,
    /// Every swap: (start ns, end ns, channel a, channel b, bytes moved).
    pub(crate) swap_log: Vec<(u64, u64, u32, u32, u64)>,
    pub(crate) timing: bool,
    data_backed: bool,
    pub(crate) layout_version: u64,
    scratch: Scratch,
}

impl FlashBlox {
    /// Format an open-channel device of `dev_cfg` and put the vSSD layer on it.
    pub fn new(dev_cfg: &Config, cfg: FlashBloxConfig) -> Result<FlashBlox> {
        cfg.validate(dev_cfg)?;
        let dev = Ocssd::new(dev_cfg)?;
        let mut fb = Self::empty(dev, cfg);
        let geo = fb.geo;
        for c in 0..fb.dev.chunks() {
            let info = fb.dev.chunk(c);
            let die = c as u32 / geo.chunks_per_die;
            if info.state != ChunkState::Offline {
                fb.pdies[die as usize].good += 1;
                fb.pdies[die as usize].free.push(Reverse((info.erase_count, c as u32)));
            }
        }
        Ok(fb)
    }

    /// The layer's state around a device, with no chunk accounted yet (`new` and recovery fill
    /// it in).
    pub(crate) fn empty(dev: Ocssd, cfg: FlashBloxConfig) -> FlashBlox {
        let g = dev.geometry().clone();
        let reserve = ((g.num_chk as f64 * cfg.reserve_fraction).ceil() as u32).max(1).min(g.num_chk - 1);
        let ldie_blocks = g.num_chk - reserve;
        let sps = cfg.soft_planes_per_die;
        let geo = Geo {
            channels: g.num_grp,
            dies_per_channel: g.num_pu,
            dies: g.num_grp * g.num_pu,
            chunks_per_die: g.num_chk,
            clba: g.clba as u32,
            ws_min: g.ws_min,
            sector_bytes: g.sector_bytes,
            chunk_bytes: g.clba * g.sector_bytes as u64,
            reserve,
            ldie_blocks,
            sps_per_die: sps,
            sp_blocks: ldie_blocks / sps,
        };
        assert!(geo.clba.is_multiple_of(geo.ws_min) && geo.ws_min as usize <= MAX_VECTOR);
        let dies = geo.dies as usize;
        let timing = dev.media().timing();
        let data_backed = dev.media().data.is_some();
        FlashBlox {
            res: Resources::new(geo.channels, geo.dies_per_channel, sps),
            ldies: (0..dies as u32).map(|d| Ldie { home: d, map: vec![NIL; ldie_blocks as usize], mapped: 0, epoch_erases: 0 }).collect(),
            pdies: (0..dies as u32)
                .map(|d| Pdie { free: BinaryHeap::new(), good: 0, erases: 0, ldie: d, inflight: BinaryHeap::new() })
                .collect(),
            owner: vec![NIL64; dev.chunks()],
            vssds: vec![],
            clock: 1,
            wear: WearState {
                epoch_bytes: vec![0; geo.channels as usize],
                epoch_start_ns: 0,
                next_due_ns: if cfg.wear.period_ns > 0 { cfg.wear.period_ns } else { u64::MAX },
            },
            swap: None,
            mig: MigrationStats::default(),
            swap_log: vec![],
            timing,
            data_backed,
            layout_version: 0,
            scratch: Scratch::default(),
            dev,
            cfg,
            geo,
        }
    }

    pub fn geo(&self) -> &Geo {
        &self.geo
    }
    pub fn config(&self) -> &FlashBloxConfig {
        &self.cfg
    }
    pub fn device(&self) -> &Ocssd {
        &self.dev
    }
    /// The device itself (tests inject failures; a crash is "keep the device, lose the rest").
    pub fn device_mut(&mut self) -> &mut Ocssd {
        &mut self.dev
    }
    pub fn data_backed(&self) -> bool {
        self.data_backed
    }
    pub fn timing(&self) -> bool {
        self.timing
    }
    pub fn resources(&self) -> &Resources {
        &self.res
    }
    pub fn migration(&self) -> MigrationStats {
        self.mig
    }
    pub fn swapping(&self) -> bool {
        self.swap.is_some()
    }
    /// Bumped whenever the layout table changes (allocation, free, swap start and end): the
    /// host persists the table then.
    pub fn layout_version(&self) -> u64 {
        self.layout_version
    }

    /// Capacity of one unit of each isolation level (bytes of logical blocks).
    pub fn capacity_per(&self, level: Isolation) -> u64 {
        let g = &self.geo;
        let die = g.ldie_blocks as u64 * g.chunk_bytes;
        match level {
            Isolation::Channel => die * g.dies_per_channel as u64,
            Isolation::Die => die,
            Isolation::SoftPlane | Isolation::None => g.sp_blocks as u64 * g.chunk_bytes,
        }
    }

    // ---------------------------------------------------------------- resource manager

    /// `AllocVirtualSSD(isolationLevel, tputLevel, capacity)`: a vSSD of
    /// max(tputToX(tput_level), ceil(capacity / capacityPerX)) units of its level.
    pub fn alloc_virtual_ssd(&mut self, level: Isolation, tput_level: u32, capacity_bytes: u64, placement: &Placement) -> Result<u32> {
        let map = match level {
            Isolation::Channel => &self.cfg.tput_to_channels,
            Isolation::Die => &self.cfg.tput_to_dies,
            Isolation::SoftPlane | Isolation::None => &self.cfg.tput_to_soft_planes,
        };
        let by_tput = *map.get(tput_level as usize).ok_or_else(|| {
            VssdError::Config(format!("throughput level {tput_level} is not in the {} map (levels 0 to {})", level.name(), map.len() - 1))
        })?;
        let per = self.capacity_per(level);
        let units = by_tput.max(capacity_bytes.div_ceil(per) as u32).max(1);
        let id = self.vssds.len() as u32;
        let slots = self.res.alloc(id, level, units, placement)?;
        self.install(id, level, tput_level, capacity_bytes, slots);
        self.layout_version += 1;
        Ok(id)
    }

    pub(crate) fn install(&mut self, id: u32, level: Isolation, tput_level: u32, capacity_bytes: u64, slots: Vec<Slot>) {
        let g = self.geo;
        let full = g.sps_per_die;
        let bases: Vec<u32> = slots.iter().map(|s| if s.sps == full { 0 } else { s.first_sp * g.sp_blocks }).collect();
        let blocks = slots.iter().map(|s| if s.sps == full { g.ldie_blocks } else { s.sps * g.sp_blocks }).min().expect("a slot");
        assert!(blocks > 0, "a vSSD with no blocks");
        while self.vssds.len() <= id as usize {
            self.vssds.push(None);
        }
        self.vssds[id as usize] = Some(Vssd {
            id,
            level,
            tput_level,
            capacity_bytes,
            slots,
            bases,
            blocks,
            free: (0..blocks).rev().collect(),
            wp: vec![UNALLOCATED; blocks as usize],
            stats: VssdStats::default(),
        });
    }

    /// `DeallocVirtualSSD`: free every block of the vSSD (erasing what was written) and give its
    /// channels, dies or soft-planes back (merged into dies and channels where whole).
    pub fn dealloc_virtual_ssd(&mut self, id: u32, now: u64) -> Result<u64> {
        let blocks: Vec<u32> = {
            let v = self.vssd(id)?;
            (0..v.blocks).filter(|&b| v.wp[b as usize] != UNALLOCATED).collect()
        };
        let mut done = now;
        for b in blocks {
            done = done.max(self.free_block(id, b, now)?);
        }
        self.res.free(id);
        self.vssds[id as usize] = None;
        self.layout_version += 1;
        Ok(done)
    }

    pub fn vssd(&self, id: u32) -> Result<&Vssd> {
        self.vssds.get(id as usize).and_then(|v| v.as_ref()).ok_or_else(|| VssdError::Api(format!("no vSSD {id}")))
    }

    pub fn vssd_ids(&self) -> Vec<u32> {
        self.vssds.iter().flatten().map(|v| v.id).collect()
    }

    /// Physical dies a vSSD's logical dies live on now.
    pub fn physical_dies(&self, id: u32) -> Result<Vec<u32>> {
        Ok(self.vssd(id)?.ldies().iter().map(|&l| self.ldies[l as usize].home).collect())
    }

    /// The table the host persists (see [`LayoutTable`]).
    pub fn layout(&self) -> LayoutTable {
        LayoutTable {
            vssds: self
                .vssds
                .iter()
                .flatten()
                .map(|v| VssdRecord {
                    id: v.id,
                    level: v.level,
                    tput_level: v.tput_level,
                    capacity_bytes: v.capacity_bytes,
                    slots: v.slots.clone(),
                })
                .collect(),
            homes: self.ldies.iter().map(|l| l.home).collect(),
            swap: self.swap.as_ref().map(|s| SwapRecord {
                channels: s.channels,
                moves: s.movers.iter().map(|m| (m.ldie, m.from, m.to)).collect(),
                started_ns: s.started_ns,
            }),
            config: self.cfg.clone(),
        }
    }

    // ---------------------------------------------------------------- the log-structured API

    /// `AllocBlock`: a free block of the vSSD, with an erased chunk on each stripe member.
    pub fn alloc_block(&mut self, id: u32) -> Result<u32> {
        let v = self.vssd(id)?;
        let b =
            *v.free.last().ok_or_else(|| VssdError::Api(format!("vSSD {id} has no free block ({} blocks, all allocated)", v.blocks)))?;
        let members: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
        let mut taken: Vec<(u32, u32, u32)> = Vec::with_capacity(members.len());
        for &(ld, lb) in &members {
            let home = self.ldies[ld as usize].home;
            let mut got = self.pdies[home as usize].free.pop();
            if got.is_none() {
                // Mid-swap the new home may be briefly full of blocks still to move out: take a
                // chunk on the old home and let the swap move this block too.
                if let Some(m) = self.swap.as_mut().and_then(|s| s.movers.iter_mut().find(|m| m.ldie == ld && m.to == home)) {
                    got = self.pdies[m.from as usize].free.pop();
                    if got.is_some() {
                        m.pending.push(lb);
                    }
                }
            }
            match got {
                Some(Reverse((_, c))) => taken.push((ld, lb, c)),
                None => {
                    for &(_, _, c) in &taken {
                        let die = c / self.geo.chunks_per_die;
                        let e = self.dev.chunk(c as usize).erase_count;
                        self.pdies[die as usize].free.push(Reverse((e, c)));
                    }
                    let p = &self.pdies[home as usize];
                    return Err(VssdError::WornOut(format!(
                        "physical die {home} has no erased block left ({} of {} chunks bad, reserve {})",
                        self.geo.chunks_per_die - p.good,
                        self.geo.chunks_per_die,
                        self.geo.reserve
                    )));
                }
            }
        }
        for (ld, lb, c) in taken {
            self.map_piece(ld, lb, c);
        }
        let v = self.vssds[id as usize].as_mut().expect("checked");
        v.free.pop();
        v.wp[b as usize] = 0;
        v.stats.blocks_allocated += 1;
        Ok(b)
    }

    pub(crate) fn map_piece(&mut self, ld: u32, lb: u32, c: u32) {
        let l = &mut self.ldies[ld as usize];
        assert_eq!(l.map[lb as usize], NIL, "logical block {lb} of die {ld} mapped twice");
        l.map[lb as usize] = c;
        l.mapped += 1;
        assert_eq!(self.owner[c as usize], NIL64, "chunk {c} owned twice");
        self.owner[c as usize] = (ld as u64) << 32 | lb as u64;
    }

    fn unmap_piece(&mut self, ld: u32, lb: u32) -> u32 {
        let l = &mut self.ldies[ld as usize];
        let c = l.map[lb as usize];
        assert_ne!(c, NIL);
        l.map[lb as usize] = NIL;
        l.mapped -= 1;
        self.owner[c as usize] = NIL64;
        c
    }

    fn check_block(&self, id: u32, b: u32) -> Result<&Vssd> {
        let v = self.vssd(id)?;
        if b >= v.blocks || v.wp[b as usize] == UNALLOCATED {
            return Err(VssdError::Api(format!("block {b} of vSSD {id} is not allocated")));
        }
        Ok(v)
    }

    /// Sectors written so far in block `b`.
    pub fn block_written(&self, id: u32, b: u32) -> Result<u32> {
        Ok(self.check_block(id, b)?.wp[b as usize])
    }

    /// `WriteData`: append `sectors` (a multiple of the write unit) at `offset`, which must be
    /// the block's write pointer. Returns the completion time.
    pub fn write_data(&mut self, id: u32, b: u32, offset: u32, sectors: u32, data: Option<&[u8]>, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let v = self.check_block(id, b)?;
        let wp = v.wp[b as usize];
        let bs = v.block_sectors(&g);
        if offset != wp {
            return Err(VssdError::Api(format!(
                "write at sector {offset} of block {b}: its write pointer is at {wp} (blocks are written in order)"
            )));
        }
        if sectors == 0 || !sectors.is_multiple_of(g.ws_min) || offset + sectors > bs {
            return Err(VssdError::Api(format!(
                "write of {sectors} sectors at {offset}: whole units of {} sectors, within the block's {bs}",
                g.ws_min
            )));
        }
        if let (Some(d), true) = (data, self.data_backed) {
            if d.len() != sectors as usize * g.sector_bytes as usize {
                return Err(VssdError::Api(format!("{sectors} sectors but {} bytes of data", d.len())));
            }
        }
        let t = if self.swap.is_some() { self.stall(id, b, offset / g.ws_min, (offset + sectors) / g.ws_min, now)? } else { now };
        let mut v = self.vssds[id as usize].take().expect("checked");
        let r = self.write_units(&v, b, offset, sectors, data, t);
        if r.is_ok() {
            v.wp[b as usize] += sectors;
            v.stats.write_bytes += sectors as u64 * g.sector_bytes as u64;
        }
        self.vssds[id as usize] = Some(v);
        r
    }

    fn write_units(&mut self, v: &Vssd, b: u32, offset: u32, sectors: u32, data: Option<&[u8]>, t: u64) -> Result<u64> {
        let g = self.geo;
        let n = v.slots.len() as u32;
        let mut sc = std::mem::take(&mut self.scratch);
        sc.lbas.clear();
        sc.marks.clear();
        sc.dies.clear();
        let mut done = t;
        let mut first_sector = offset; // first sector of the command being built
        let last = (offset + sectors) / g.ws_min;
        for u in offset / g.ws_min..last {
            let i = (u % n) as usize;
            let cu = u / n;
            let (ld, lb) = (v.slots[i].ldie, v.bases[i] + b);
            let c = self.ldies[ld as usize].map[lb as usize];
            debug_assert_ne!(c, NIL);
            if cu == 0 {
                let rec =
                    OobRecord { ldie: ld, block: lb, erase_count: self.dev.chunk(c as usize).erase_count as u16, timestamp: self.clock };
                self.clock += 1;
                assert!(self.clock <= TIMESTAMP_MAX);
                sc.marks.push((sc.lbas.len(), rec.encode()));
            }
            let lba0 = c as u64 * g.clba as u64 + (cu * g.ws_min) as u64;
            sc.lbas.extend(lba0..lba0 + g.ws_min as u64);
            if self.timing && !sc.dies.contains(&(c / g.chunks_per_die)) {
                sc.dies.push(c / g.chunks_per_die);
            }
            if sc.lbas.len() + g.ws_min as usize > MAX_VECTOR || u + 1 == last {
                let k = (first_sector - offset) as usize * g.sector_bytes as usize;
                let part = data.map(|d| &d[k..k + sc.lbas.len() * g.sector_bytes as usize]);
                let r = self.issue_write(&mut sc, part, t);
                let d = match r {
                    Ok(d) => d,
                    Err(e) => {
                        self.scratch = sc;
                        return Err(e);
                    }
                };
                done = done.max(d);
                first_sector += sc.lbas.len() as u32;
                sc.lbas.clear();
                sc.marks.clear();
                sc.dies.clear();
            }
        }
        self.scratch = sc;
        Ok(done)
    }

    fn issue_write(&mut self, sc: &mut Scratch, data: Option<&[u8]>, t: u64) -> Result<u64> {
        let at = self.admit(&sc.dies, t);
        let oob = if sc.marks.is_empty() {
            None
        } else {
            sc.oob.clear();
            sc.oob.resize(sc.lbas.len() * OOB_BYTES, 0);
            for &(i, rec) in &sc.marks {
                sc.oob[i * OOB_BYTES..(i + 1) * OOB_BYTES].copy_from_slice(&rec);
            }
            Some(&sc.oob[..])
        };
        let done = self.dev.vector_write_oob(&sc.lbas, data, oob, at)?;
        self.complete(&sc.dies, done);
        Ok(done)
    }

    /// The per-die queues: a command waits until each die it touches has fewer than
    /// `die_queue_depth` commands in flight.
    fn admit(&mut self, dies: &[u32], t: u64) -> u64 {
        if !self.timing {
            return t;
        }
        let depth = self.cfg.die_queue_depth as usize;
        let mut at = t;
        for &d in dies {
            let q = &mut self.pdies[d as usize].inflight;
            while q.peek().is_some_and(|r| r.0 <= at) {
                q.pop();
            }
            while q.len() >= depth {
                at = at.max(q.pop().expect("non-empty").0);
            }
        }
        at
    }

    fn complete(&mut self, dies: &[u32], done: u64) {
        if self.timing {
            for &d in dies {
                self.pdies[d as usize].inflight.push(Reverse(done));
            }
        }
    }

    /// `ReadData`: read `sectors` at `offset` of block `b` (written sectors only). Returns the
    /// completion time.
    pub fn read_data(&mut self, id: u32, b: u32, offset: u32, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let v = self.check_block(id, b)?;
        let wp = v.wp[b as usize];
        if sectors == 0 || offset as u64 + sectors as u64 > wp as u64 {
            return Err(VssdError::Api(format!("read of {sectors} sectors at {offset} of block {b}: {wp} sectors are written")));
        }
        if let Some(o) = out.as_deref() {
            if o.len() != sectors as usize * g.sector_bytes as usize {
                return Err(VssdError::Api(format!("{sectors} sectors but a buffer of {} bytes", o.len())));
            }
        }
        let t = if self.swap.is_some() { self.stall(id, b, offset / g.ws_min, (offset + sectors).div_ceil(g.ws_min), now)? } else { now };
        let mut v = self.vssds[id as usize].take().expect("checked");
        let r = self.read_sectors(&v, b, offset, sectors, out, t);
        if r.is_ok() {
            v.stats.read_bytes += sectors as u64 * g.sector_bytes as u64;
        }
        self.vssds[id as usize] = Some(v);
        r
    }

    fn read_sectors(&mut self, v: &Vssd, b: u32, offset: u32, sectors: u32, mut out: Option<&mut [u8]>, t: u64) -> Result<u64> {
        let g = self.geo;
        let n = v.slots.len() as u32;
        let mut sc = std::mem::take(&mut self.scratch);
        sc.lbas.clear();
        sc.dies.clear();
        let mut done = t;
        let mut first = offset;
        let sb = g.sector_bytes as usize;
        let mut s = offset;
        let end = offset + sectors;
        while s < end {
            let u = s / g.ws_min;
            let i = (u % n) as usize;
            let c = self.ldies[v.slots[i].ldie as usize].map[(v.bases[i] + b) as usize];
            let in_unit = s % g.ws_min;
            let run = (g.ws_min - in_unit).min(end - s).min((MAX_VECTOR - sc.lbas.len()) as u32);
            let lba0 = c as u64 * g.clba as u64 + ((u / n) * g.ws_min + in_unit) as u64;
            sc.lbas.extend(lba0..lba0 + run as u64);
            if self.timing && !sc.dies.contains(&(c / g.chunks_per_die)) {
                sc.dies.push(c / g.chunks_per_die);
            }
            s += run;
            if sc.lbas.len() == MAX_VECTOR || s == end {
                let at = self.admit(&sc.dies, t);
                let k = (first - offset) as usize * sb;
                let part = out.as_deref_mut().map(|o| &mut o[k..k + sc.lbas.len() * sb]);
                let d = match self.dev.vector_read(&sc.lbas, part, at) {
                    Ok(d) => d,
                    Err(e) => {
                        self.scratch = sc;
                        return Err(e.into());
                    }
                };
                self.complete(&sc.dies, d);
                done = done.max(d);
                first += sc.lbas.len() as u32;
                sc.lbas.clear();
                sc.dies.clear();
            }
        }
        self.scratch = sc;
        Ok(done)
    }

    /// `FreeBlock`: erase the block's chunks (those written) and return them to their dies'
    /// free heaps; the block is free for `alloc_block` again. Returns the completion time.
    pub fn free_block(&mut self, id: u32, b: u32, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let units = self.check_block(id, b)?.block_sectors(&g) / g.ws_min;
        let t = if self.swap.is_some() { self.stall(id, b, 0, units, now)? } else { now };
        let v = self.vssds[id as usize].as_ref().expect("checked");
        let pieces: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
        let mut resets: Vec<(u32, u32)> = Vec::with_capacity(pieces.len()); // (chunk, ldie)
        for (ld, lb) in pieces {
            let c = self.unmap_piece(ld, lb);
            if self.dev.chunk(c as usize).wp > c as u64 * g.clba as u64 {
                resets.push((c, ld));
            } else {
                let die = c / g.chunks_per_die;
                self.pdies[die as usize].free.push(Reverse((self.dev.chunk(c as usize).erase_count, c)));
            }
        }
        let done = self.erase_chunks(&resets, t, EraseKind::Tenant)?;
        let v = self.vssds[id as usize].as_mut().expect("checked");
        v.wp[b as usize] = UNALLOCATED;
        v.free.push(b);
        v.stats.blocks_freed += 1;
        v.stats.chunk_erases += resets.len() as u64;
        self.wear_tick(done.max(now))?;
        Ok(done)
    }

    /// Reset `chunks` (each with the logical die it belonged to) and put them back on their
    /// dies' free heaps; a chunk whose erase retired a block goes offline and is lost to its
    /// die. Erases of a swap or of recovery count as wear but not in the tenants' wear rate.
    pub(crate) fn erase_chunks(&mut self, chunks: &[(u32, u32)], t: u64, kind: EraseKind) -> Result<u64> {
        let g = self.geo;
        let mut done = t;
        for part in chunks.chunks(MAX_VECTOR) {
            let mut lbas = [0u64; MAX_VECTOR];
            let mut dies = [0u32; MAX_VECTOR];
            for (k, &(c, _)) in part.iter().enumerate() {
                lbas[k] = c as u64 * g.clba as u64;
                dies[k] = c / g.chunks_per_die;
            }
            let at = self.admit(&dies[..part.len()], t);
            let d = self.dev.vector_reset(&lbas[..part.len()], at)?;
            self.complete(&dies[..part.len()], d);
            done = done.max(d);
        }
        for &(c, ld) in chunks {
            let die = c / g.chunks_per_die;
            let info = self.dev.chunk(c as usize);
            let p = &mut self.pdies[die as usize];
            p.erases += 1;
            if info.state == ChunkState::Offline {
                p.good -= 1;
            } else {
                p.free.push(Reverse((info.erase_count, c)));
            }
            match kind {
                EraseKind::Migration => self.mig.erases += 1,
                EraseKind::Recovery => {}
                EraseKind::Tenant => {
                    self.wear.epoch_bytes[(die / g.dies_per_channel) as usize] += g.chunk_bytes;
                    self.ldies[ld as usize].epoch_erases += 1;
                }
            }
        }
        Ok(done)
    }

    // ---------------------------------------------------------------- wear

    /// Erase counts per physical channel and per physical die (chunk erases).
    pub fn wear(&self) -> (Vec<u64>, Vec<u64>) {
        let per_die: Vec<u64> = self.pdies.iter().map(|p| p.erases).collect();
        let per_ch = per_die.chunks(self.geo.dies_per_channel as usize).map(|c| c.iter().sum()).collect();
        (per_ch, per_die)
    }

    /// Start a swap when the policy says so (see [`SwapPolicy`]).
    pub(crate) fn wear_tick(&mut self, now: u64) -> Result<()> {
        if self.swap.is_some() {
            return Ok(());
        }
        let w = &self.cfg.wear;
        let due = match w.policy {
            SwapPolicy::None => false,
            SwapPolicy::Adaptive => self.wear.epoch_bytes.iter().any(|&b| b >= w.threshold_bytes),
            SwapPolicy::Fixed => {
                let due = now >= self.wear.next_due_ns;
                while self.wear.next_due_ns <= now {
                    self.wear.next_due_ns += w.period_ns;
                }
                due
            }
        };
        let pick = due.then(|| match w.pair {
            SwapPair::MaxWearMinRate => self.pick_max_wear_min_rate(),
            SwapPair::MaxRateMinWear => self.pick_max_rate_min_wear(),
        });
        match pick {
            Some((a, b)) => self.start_swap(a, b, now),
            None => Ok(()),
        }
    }

    /// The document's pair: the channel with the most wear (ties: the one wearing faster, then
    /// the lower index) and the channel with the lowest wear rate since the last swap (ties:
    /// less wear, then lower index).
    fn pick_max_wear_min_rate(&self) -> (u32, u32) {
        let (s, _) = self.wear();
        let e = &self.wear.epoch_bytes;
        let p = (0..s.len()).max_by_key(|&i| (s[i], e[i], Reverse(i))).expect("channels") as u32;
        let q = (0..s.len()).filter(|&i| i as u32 != p).min_by_key(|&i| (e[i], s[i], i)).expect("two channels") as u32;
        (p, q)
    }

    /// The analysis's rotation: the channel with the highest wear rate moves to the least-worn
    /// channel.
    fn pick_max_rate_min_wear(&self) -> (u32, u32) {
        let (s, _) = self.wear();
        let e = &self.wear.epoch_bytes;
        let p = (0..s.len()).max_by_key(|&i| (e[i], Reverse(i))).expect("channels") as u32;
        let q = (0..s.len()).filter(|&i| i as u32 != p).min_by_key(|&i| (s[i], i)).expect("two channels") as u32;
        (p, q)
    }

    /// Swap physical channels `a` (the migrating one) and `b`: every logical die on `a` moves
    /// to a die of `b` and back. With `wear.die_swaps`, the most-worn die of `a` receives the
    /// logical die of `b` that writes least; the other dies pair in order. Without timing the
    /// whole swap is carried out at once; with timing, `migration_step` carries it out paced.
    pub fn start_swap(&mut self, a: u32, b: u32, now: u64) -> Result<()> {
        let g = self.geo;
        if a == b || a >= g.channels || b >= g.channels {
            return Err(VssdError::Api(format!("swap of channels {a} and {b}: two different channels below {}", g.channels)));
        }
        if self.swap.is_some() {
            return Err(VssdError::Api("a swap is already in progress".into()));
        }
        let dpc = g.dies_per_channel;
        let mut pa: Vec<u32> = (a * dpc..(a + 1) * dpc).collect();
        let mut pb: Vec<u32> = (b * dpc..(b + 1) * dpc).collect();
        if self.cfg.wear.die_swaps {
            let worn = *pa.iter().max_by_key(|&&d| (self.pdies[d as usize].erases, Reverse(d))).expect("dies");
            let cool = *pb.iter().min_by_key(|&&d| (self.ldies[self.pdies[d as usize].ldie as usize].epoch_erases, d)).expect("dies");
            pa.retain(|&d| d != worn);
            pb.retain(|&d| d != cool);
            pa.insert(0, worn);
            pb.insert(0, cool);
        }
        let mut movers = vec![];
        for (&p, &q) in pa.iter().zip(&pb) {
            let (la, lb) = (self.pdies[p as usize].ldie, self.pdies[q as usize].ldie);
            for (ld, from, to) in [(la, p, q), (lb, q, p)] {
                let pending: Vec<u32> = (from * g.chunks_per_die..(from + 1) * g.chunks_per_die)
                    .filter(|&c| self.owner[c as usize] != NIL64 && (self.owner[c as usize] >> 32) as u32 == ld)
                    .map(|c| self.owner[c as usize] as u32)
                    .rev()
                    .collect();
                movers.push(Mover { ldie: ld, from, to, pending, cur: None, next_ns: now });
            }
            self.ldies[la as usize].home = q;
            self.ldies[lb as usize].home = p;
            self.pdies[q as usize].ldie = la;
            self.pdies[p as usize].ldie = lb;
        }
        self.swap = Some(Swap { channels: (a, b), movers, started_ns: now, last_ns: now });
        self.mig.swaps += 1;
        self.wear.epoch_bytes.iter_mut().for_each(|x| *x = 0);
        self.wear.epoch_start_ns = now;
        self.ldies.iter_mut().for_each(|l| l.epoch_erases = 0);
        self.layout_version += 1;
        if !self.timing {
            while self.swap.is_some() {
                self.migration_step(now)?;
            }
        }
        Ok(())
    }

    /// When the migration next wants to run (None: no swap in progress).
    pub fn migration_next_ns(&self) -> Option<u64> {
        self.swap
            .as_ref()
            .map(|s| s.movers.iter().filter(|m| m.cur.is_some() || !m.pending.is_empty()).map(|m| m.next_ns).min().unwrap_or(0))
    }

    /// Run every mover that is due at `now`: each copies `migration_units_per_step` units of
    /// its current block (reading into memory, writing to the new place) and asks to run again
    /// when its last program is about to finish, so the dies' other work goes in between.
    /// Returns when the migration next wants to run (None: the swap is done).
    pub fn migration_step(&mut self, now: u64) -> Result<Option<u64>> {
        let Some(mut sw) = self.swap.take() else { return Ok(None) };
        let units = if self.timing { self.cfg.wear.migration_units_per_step } else { u32::MAX };
        let mut progress = true;
        while progress {
            progress = false;
            for m in sw.movers.iter_mut() {
                if m.next_ns > now || (m.cur.is_none() && m.pending.is_empty()) {
                    continue;
                }
                let before = (m.pending.len(), m.cur.as_ref().map(|c| c.copied));
                let next = self.mover_run(m, now, units)?;
                m.next_ns = next;
                sw.last_ns = sw.last_ns.max(next);
                progress |= (m.pending.len(), m.cur.as_ref().map(|c| c.copied)) != before;
            }
            if self.timing {
                break;
            }
        }
        let left = sw.movers.iter().any(|m| m.cur.is_some() || !m.pending.is_empty());
        if !left {
            self.mig.swaps_done += 1;
            let end = sw.last_ns.max(now);
            self.mig.busy_ns += end - sw.started_ns;
            let bytes = self.mig.bytes_moved - self.swap_log.iter().map(|s| s.4).sum::<u64>();
            self.swap_log.push((sw.started_ns, end, sw.channels.0, sw.channels.1, bytes));
            self.layout_version += 1;
            return Ok(None);
        }
        if !progress && !self.timing {
            return Err(VssdError::WornOut(format!(
                "swap of channels {} and {} cannot go on: no erased block on either side",
                sw.channels.0, sw.channels.1
            )));
        }
        let next = sw.movers.iter().filter(|m| m.cur.is_some() || !m.pending.is_empty()).map(|m| m.next_ns).min();
        self.swap = Some(sw);
        Ok(next)
    }

    /// Copy up to `units` of the mover's current block (starting one if needed); returns when
    /// it wants to run next.
    fn mover_run(&mut self, m: &mut Mover, now: u64, units: u32) -> Result<u64> {
        let g = self.geo;
        let mut left = units;
        let mut next = now;
        while left > 0 {
            if m.cur.is_none() {
                let Some(lb) = m.pending.pop() else { return Ok(next) };
                let src = self.ldies[m.ldie as usize].map[lb as usize];
                if src == NIL || src / g.chunks_per_die != m.from {
                    continue; // freed (or freed and reallocated at the new home) meanwhile
                }
                let Some(Reverse((_, dst))) = self.pdies[m.to as usize].free.pop() else {
                    m.pending.push(lb);
                    // Wait for the opposite mover to free a chunk here.
                    return Ok(if self.timing { now + self.dev.geometry().tprt_ns } else { now });
                };
                let total = (self.dev.chunk(src as usize).wp - src as u64 * g.clba as u64) as u32;
                m.cur = Some(Move { lblock: lb, src, dst, copied: 0, total });
            }
            let mv = m.cur.as_mut().expect("current move");
            if mv.copied < mv.total {
                let (r, w) = self.copy_unit(m.ldie, mv, now)?;
                mv.copied += g.ws_min;
                left -= 1;
                // Run again so the next unit's data is in memory as this program finishes.
                let read_ns = self.dev.geometry().trdt_ns + self.dev.media().tl.xfer_ns(g.ws_min as u64 * g.sector_bytes as u64);
                next = r.max(w.saturating_sub(read_ns));
            }
            if mv.copied >= mv.total {
                let mv = m.cur.take().expect("current move");
                next = next.max(self.finish_move(m, mv, next)?);
                if self.timing {
                    return Ok(next);
                }
            }
        }
        Ok(next)
    }

    /// Copy one unit of `mv` through a memory buffer; returns (read done, program done).
    fn copy_unit(&mut self, ld: u32, mv: &Move, now: u64) -> Result<(u64, u64)> {
        let g = self.geo;
        let n = g.ws_min as usize;
        let src0 = mv.src as u64 * g.clba as u64 + mv.copied as u64;
        let dst0 = mv.dst as u64 * g.clba as u64 + mv.copied as u64;
        let mut lbas = [0u64; MAX_VECTOR];
        let mut sc = std::mem::take(&mut self.scratch);
        if self.data_backed {
            sc.buf.resize(n * g.sector_bytes as usize, 0);
        }
        for (k, l) in lbas[..n].iter_mut().enumerate() {
            *l = src0 + k as u64;
        }
        let from = [mv.src / g.chunks_per_die];
        let to = [mv.dst / g.chunks_per_die];
        let at = self.admit(&from, now);
        let buf = if self.data_backed { Some(&mut sc.buf[..]) } else { None };
        let r = self.dev.vector_read_queued(&lbas[..n], buf, at)?;
        self.complete(&from, r);
        for (k, l) in lbas[..n].iter_mut().enumerate() {
            *l = dst0 + k as u64;
        }
        let oob = (mv.copied == 0).then(|| {
            let rec = OobRecord {
                ldie: ld,
                block: mv.lblock,
                erase_count: self.dev.chunk(mv.dst as usize).erase_count as u16,
                timestamp: self.clock,
            };
            self.clock += 1;
            let mut o = vec![0u8; n * OOB_BYTES];
            o[..OOB_BYTES].copy_from_slice(&rec.encode());
            o
        });
        let at = self.admit(&to, r);
        let data = if self.data_backed { Some(&sc.buf[..]) } else { None };
        let w = self.dev.vector_write_oob(&lbas[..n], data, oob.as_deref(), at)?;
        self.complete(&to, w);
        self.scratch = sc;
        self.mig.bytes_moved += n as u64 * g.sector_bytes as u64;
        Ok((r, w))
    }

    /// The copy is complete: point the map at the new chunk, erase the old one.
    fn finish_move(&mut self, m: &Mover, mv: Move, t: u64) -> Result<u64> {
        let old = self.unmap_piece(m.ldie, mv.lblock);
        assert_eq!(old, mv.src);
        self.map_piece(m.ldie, mv.lblock, mv.dst);
        self.mig.blocks_moved += 1;
        if mv.total == 0 {
            let e = self.dev.chunk(mv.src as usize).erase_count;
            self.pdies[m.from as usize].free.push(Reverse((e, mv.src)));
            return Ok(t);
        }
        self.erase_chunks(&[(mv.src, m.ldie)], t, EraseKind::Migration)
    }

    /// I/O to block `b` (units `u0..u1`) of vSSD `id` during a swap: a piece being moved is
    /// finished at once and the I/O waits for it (only those blocks stall; the rest of the
    /// migration keeps its pace). Returns when the I/O may start.
    fn stall(&mut self, id: u32, b: u32, u0: u32, u1: u32, now: u64) -> Result<u64> {
        let v = self.vssds[id as usize].as_ref().expect("checked");
        let n = v.slots.len() as u32;
        let touched: Vec<(u32, u32)> = (0..n.min(u1.saturating_sub(u0)))
            .map(|k| {
                let i = ((u0 + k) % n) as usize;
                (v.slots[i].ldie, v.bases[i] + b)
            })
            .collect();
        let mut sw = self.swap.take().expect("swap in progress");
        let mut t = now;
        for m in sw.movers.iter_mut() {
            let Some(cur) = m.cur.as_ref() else { continue };
            if !touched.contains(&(m.ldie, cur.lblock)) {
                continue;
            }
            let mut done = now;
            while m.cur.as_ref().is_some_and(|c| c.copied < c.total) {
                let (_, w) = self.copy_unit(m.ldie, m.cur.as_ref().expect("move"), now)?;
                m.cur.as_mut().expect("move").copied += self.geo.ws_min;
                done = done.max(w);
            }
            let mv = m.cur.take().expect("move");
            done = done.max(self.finish_move(m, mv, done)?);
            m.next_ns = m.next_ns.max(now);
            sw.last_ns = sw.last_ns.max(done);
            self.mig.expedited += 1;
            t = t.max(done);
        }
        self.swap = Some(sw);
        if t > now {
            let v = self.vssds[id as usize].as_mut().expect("checked");
            v.stats.stalls += 1;
            v.stats.stall_ns += t - now;
        }
        Ok(t)
    }

    // ---------------------------------------------------------------- reports and checks

    /// Bytes of host memory the device-level map takes: 4 bytes per logical block of every
    /// logical die, 8 bytes of owner per chunk.
    pub fn map_bytes(&self) -> u64 {
        self.ldies.iter().map(|l| l.map.len() as u64 * 4).sum::<u64>() + self.owner.len() as u64 * 8
    }

    /// A JSON summary: geometry, vSSDs, wear, migration.
    pub fn summary(&self) -> Value {
        let (ch, die) = self.wear();
        json!({
            "geometry": self.geo,
            "vssds": self.vssds.iter().flatten().map(|v| json!({
                "id": v.id, "level": v.level, "tput_level": v.tput_level, "slots": v.slots.len(),
                "ldies": v.ldies(), "blocks": v.blocks, "free_blocks": v.free_blocks(),
                "block_bytes": v.block_sectors(&self.geo) as u64 * self.geo.sector_bytes as u64,
                "capacity_bytes": v.capacity(&self.geo), "stats": v.stats,
            })).collect::<Vec<_>>(),
            "wear": {"channel_erases": ch, "die_erases": die, "homes": self.ldies.iter().map(|l| l.home).collect::<Vec<_>>()},
            "migration": self.mig,
            "swaps": self.swap_log.iter().map(|s| json!({"start_ns": s.0, "end_ns": s.1, "channels": [s.2, s.3], "bytes": s.4})).collect::<Vec<_>>(),
            "map_bytes": self.map_bytes(),
        })
    }

    /// Assert every invariant of the layer (slow; tests).
    pub fn check_invariants(&self) {
        let g = self.geo;
        self.dev.check_invariants();
        let mut free_seen = vec![false; self.owner.len()];
        for (d, p) in self.pdies.iter().enumerate() {
            let mut good = 0;
            for c in d as u32 * g.chunks_per_die..(d as u32 + 1) * g.chunks_per_die {
                if self.dev.chunk(c as usize).state != ChunkState::Offline {
                    good += 1;
                }
            }
            assert_eq!(good, p.good, "die {d}: good chunk count");
            for &Reverse((e, c)) in p.free.iter() {
                assert_eq!(c / g.chunks_per_die, d as u32, "chunk {c} on the wrong die's heap");
                assert_eq!(self.owner[c as usize], NIL64, "free chunk {c} is owned");
                assert_eq!(e, self.dev.chunk(c as usize).erase_count, "chunk {c}: heap key");
                assert_eq!(self.dev.chunk(c as usize).state, ChunkState::Free, "chunk {c} on a free heap is not free");
                assert!(!free_seen[c as usize], "chunk {c} twice on the heaps");
                free_seen[c as usize] = true;
            }
            let erases: u64 = (d as u32 * g.chunks_per_die..(d as u32 + 1) * g.chunks_per_die)
                .map(|c| self.dev.chunk(c as usize).erase_count as u64)
                .sum();
            assert_eq!(erases, p.erases, "die {d}: erase count");
            assert_eq!(self.ldies[p.ldie as usize].home, d as u32, "die {d}: home and hosted logical die disagree");
        }
        for (ld, l) in self.ldies.iter().enumerate() {
            let mut mapped = 0;
            for (lb, &c) in l.map.iter().enumerate() {
                if c == NIL {
                    continue;
                }
                mapped += 1;
                assert_eq!(self.owner[c as usize], (ld as u64) << 32 | lb as u64, "chunk {c}: owner");
                assert!(!free_seen[c as usize], "mapped chunk {c} is on a free heap");
                if let Some(rec) = self.dev.chunk_oob(c as u64 * g.clba as u64).expect("chunk start") {
                    let r = OobRecord::decode(&rec);
                    assert_eq!((r.ldie, r.block), (ld as u32, lb as u32), "chunk {c}: OOB names another block");
                }
                let on = c / g.chunks_per_die;
                let moving_from = self.swap.as_ref().is_some_and(|s| s.movers.iter().any(|m| m.ldie == ld as u32 && m.from == on));
                assert!(on == l.home || moving_from, "logical die {ld}: block {lb} on die {on}, home {}", l.home);
            }
            assert_eq!(mapped, l.mapped, "logical die {ld}: mapped count");
        }
        for v in self.vssds.iter().flatten() {
            let n = v.slots.len() as u32;
            assert_eq!(v.free.len() + v.wp.iter().filter(|&&w| w != UNALLOCATED).count(), v.blocks as usize);
            for b in 0..v.blocks {
                let wp = v.wp[b as usize];
                for (i, (s, &base)) in v.slots.iter().zip(&v.bases).enumerate() {
                    let c = self.ldies[s.ldie as usize].map[(base + b) as usize];
                    if wp == UNALLOCATED {
                        assert_eq!(c, NIL, "free block {b} of vSSD {} mapped", v.id);
                        continue;
                    }
                    // Units go round-robin over the slots: slot i holds units i, i + n, ...
                    let units = wp / g.ws_min;
                    let mine = units / n + u32::from(i as u32 % n < units % n);
                    let written = self.dev.chunk(c as usize).wp - c as u64 * g.clba as u64;
                    assert_eq!(written, (mine * g.ws_min) as u64, "vSSD {} block {b} slot {i}: chunk holds {written} sectors", v.id);
                }
            }
        }
    }
}

/// The log-structured API of one vSSD, as applications use it.
pub trait BlockApi {
    fn block_sectors(&self) -> u32;
    fn unit_sectors(&self) -> u32;
    fn sector_bytes(&self) -> u32;
    fn blocks(&self) -> u32;
    fn free_blocks(&self) -> u32;
    fn data_backed(&self) -> bool;
    fn alloc_block(&mut self) -> Result<u32>;
    fn write_data(&mut self, block: u32, offset: u32, sectors: u32, data: Option<&[u8]>, now: u64) -> Result<u64>;
    fn read_data(&mut self, block: u32, offset: u32, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64>;
    fn free_block(&mut self, block: u32, now: u64) -> Result<u64>;
}

/// A vSSD of a [`FlashBlox`], as a [`BlockApi`].
pub struct VssdIo<'a> {
    pub fb: &'a mut FlashBlox,
    pub id: u32,
}

impl BlockApi for VssdIo<'_> {
    fn block_sectors(&self) -> u32 {
        self.fb.vssd(self.id).expect("live vSSD").block_sectors(&self.fb.geo)
    }
    fn unit_sectors(&self) -> u32 {
        self.fb.geo.ws_min
    }
    fn sector_bytes(&self) -> u32 {
        self.fb.geo.sector_bytes
    }
    fn blocks(&self) -> u32 {
        self.fb.vssd(self.id).expect("live vSSD").blocks
    }
    fn free_blocks(&self) -> u32 {
        self.fb.vssd(self.id).expect("live vSSD").free_blocks()
    }
    fn data_backed(&self) -> bool {
        self.fb.data_backed
    }
    fn alloc_block(&mut self) -> Result<u32> {
        self.fb.alloc_block(self.id)
    }
    fn write_data(&mut self, block: u32, offset: u32, sectors: u32, data: Option<&[u8]>, now: u64) -> Result<u64> {
        self.fb.write_data(self.id, block, offset, sectors, data, now)
    }
    fn read_data(&mut self, block: u32, offset: u32, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.fb.read_data(self.id, block, offset, sectors, out, now)
    }
    fn free_block(&mut self, block: u32, now: u64) -> Result<u64> {
        self.fb.free_block(self.id, block, now)
    }
}
