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
//!
//! This file holds the types, setup, the resource manager's calls, reports and checks;
//! `api.rs` the log-structured API (block maps, reads, writes, erases), `wear.rs` channel/die
//! swaps and their paced migration.

mod api;
mod wear;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::ftl::ocssd::{ChunkState, Ocssd, MAX_VECTOR, OOB_BYTES};
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::Config;

use crate::config::FlashBloxConfig;
use crate::error::{Result, VssdError};
use crate::oob::OobRecord;
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
