//! NAND media: geometry arithmetic, per-block state (wear, bad blocks), per-page OOB, the data
//! store of data-backed devices, and [`Media`], the one owner of a device's NAND state that
//! every personality holds.
//!
//! Addresses: a physical sector address (PSA) is `block * sectors_per_block + page *
//! sectors_per_page + slot`. Blocks are numbered die-major: `block = die * blocks_per_die +
//! plane * blocks_per_plane + index`, and dies channel-major: `die = channel *
//! dies_per_channel + d`.

pub mod mem;
mod nand;
/// The presets live with the config they build ([`crate::config::presets`]); this path stays
/// for the crates that name it.
pub use crate::config::presets;
pub mod store;

use serde::{Deserialize, Serialize};

use crate::config::Geometry;
pub use nand::{Erased, Media};

/// Geometry with every derived quantity precomputed (the hot path divides by these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_bytes: u32,
    pub sector_bytes: u32,
    pub sectors_per_page: u32,
    pub sectors_per_block: u32,
    pub dies: u32,
    pub blocks_per_die: u32,
    pub blocks: u32,
    pub physical_sectors: u64,
}

impl Layout {
    pub fn new(g: &Geometry) -> Layout {
        let spp = g.page_bytes / g.sector_bytes;
        let dies = g.channels * g.dies_per_channel;
        let blocks_per_die = g.planes_per_die * g.blocks_per_plane;
        let blocks = dies * blocks_per_die;
        Layout {
            channels: g.channels,
            dies_per_channel: g.dies_per_channel,
            planes_per_die: g.planes_per_die,
            blocks_per_plane: g.blocks_per_plane,
            pages_per_block: g.pages_per_block,
            page_bytes: g.page_bytes,
            sector_bytes: g.sector_bytes,
            sectors_per_page: spp,
            sectors_per_block: spp * g.pages_per_block,
            dies,
            blocks_per_die,
            blocks,
            physical_sectors: blocks as u64 * (spp * g.pages_per_block) as u64,
        }
    }
    #[inline(always)]
    pub fn block_of(&self, psa: u32) -> u32 {
        psa / self.sectors_per_block
    }
    #[inline(always)]
    pub fn die_of_block(&self, block: u32) -> u32 {
        block / self.blocks_per_die
    }
    #[inline(always)]
    pub fn plane_of_block(&self, block: u32) -> u32 {
        (block % self.blocks_per_die) / self.blocks_per_plane
    }
    #[inline(always)]
    pub fn channel_of_die(&self, die: u32) -> u32 {
        die / self.dies_per_channel
    }
    #[inline(always)]
    pub fn first_psa(&self, block: u32) -> u32 {
        block * self.sectors_per_block
    }
    /// Global page number of a PSA (index into the OOB sequence array).
    #[inline(always)]
    pub fn page_of(&self, psa: u32) -> u32 {
        psa / self.sectors_per_page
    }
    /// Die visiting order for striping: consecutive ways alternate channels first.
    pub fn way_order(&self) -> Vec<u32> {
        (0..self.dies).map(|w| (w % self.channels) * self.dies_per_channel + w / self.channels).collect()
    }
}

/// Life-cycle of an erase block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum BlockState {
    Free = 0,
    Open = 1,
    Full = 2,
    Bad = 3,
    /// Being garbage-collected (out of the victim set, still holding valid sectors).
    Collecting = 4,
}

/// Per-block state. Kept small: a 2 TiB device with 4 MiB blocks has 512 Ki of them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct BlockMeta {
    /// Valid (live) sectors in the block.
    pub valid: u32,
    pub erase_count: u32,
    pub state: BlockState,
    /// Whether the block was bad from the factory (as opposed to grown bad).
    pub factory_bad: bool,
    /// Which write stream filled it (index into the personality's streams).
    pub stream: u16,
    /// Reclaim group (FDP) the block belongs to; 0 without FDP.
    pub rg: u8,
    /// Serial number of the reclaim unit (of its stream) the block was opened for (FDP).
    pub ru: u32,
    /// Intrusive doubly-linked list links (greedy victim buckets); u32::MAX = none.
    pub prev: u32,
    pub next: u32,
    /// Pages programmed so far (a prefix of the block).
    pub programmed_pages: u16,
    /// Host-write counter value when the block was closed (age for cost-benefit, order for FIFO).
    pub closed_at: u64,
    /// Simulated time at which the block's erase completes (timing mode).
    pub ready_ns: u64,
}

pub const NIL: u32 = u32::MAX;

impl BlockMeta {
    pub fn new() -> BlockMeta {
        BlockMeta {
            valid: 0,
            erase_count: 0,
            state: BlockState::Free,
            factory_bad: false,
            stream: 0,
            rg: 0,
            ru: 0,
            prev: NIL,
            next: NIL,
            programmed_pages: 0,
            closed_at: 0,
            ready_ns: 0,
        }
    }
}

impl Default for BlockMeta {
    fn default() -> Self {
        BlockMeta::new()
    }
}

/// Lifetime counters of a device; every personality fills the same fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub host_read_cmds: u64,
    pub host_write_cmds: u64,
    pub host_trim_cmds: u64,
    pub host_flush_cmds: u64,
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    pub host_trim_bytes: u64,
    /// Bytes sensed from the array (whole pages).
    pub nand_read_bytes: u64,
    /// Bytes programmed (whole pages, padding included).
    pub nand_write_bytes: u64,
    pub nand_erase_count: u64,
    pub nand_page_reads: u64,
    pub nand_page_programs: u64,
    /// Pages programmed by garbage collection (and wear-levelling moves).
    pub gc_relocated_pages: u64,
    pub gc_relocated_sectors: u64,
    /// Victim blocks collected (GC plus static wear-levelling).
    pub gc_events: u64,
    /// Victims whose collection finished while a host write waited for a free block.
    pub gc_foreground_events: u64,
    /// Victims collected in the background: paced with host writes between the watermarks,
    /// or on idle dies.
    pub gc_background_events: u64,
    pub wl_static_moves: u64,
    /// Padding sectors programmed by flushes, FUA and write-through.
    pub pad_sectors: u64,
    pub grown_bad_blocks: u64,
}

impl Counters {
    /// Whether the counters agree with each other: NAND bytes are whole pages of
    /// `page_bytes`, GC programs and finished collections are among all programs and
    /// collections started.
    pub fn consistent(&self, page_bytes: u32) -> bool {
        let pb = page_bytes as u64;
        self.nand_write_bytes == self.nand_page_programs * pb
            && self.nand_read_bytes == self.nand_page_reads * pb
            && self.gc_relocated_pages <= self.nand_page_programs
            && self.gc_foreground_events + self.gc_background_events + self.wl_static_moves <= self.gc_events
    }
}

/// Marker in the OOB logical-address field of a padding sector.
pub const OOB_PAD: u32 = 0x7FFF_FFFF;
/// Valid bit kept beside the OOB logical address in the P2L array.
pub const P2L_VALID: u32 = 0x8000_0000;
/// OOB of an unprogrammed (erased) sector.
pub const OOB_ERASED: u32 = 0x7FFF_FFFE;

#[cfg(test)]
mod tests {
    #[test]
    fn block_meta_stays_small() {
        // docs/PERFORMANCE.md quotes this size; a 2 TiB device has 256 Ki blocks.
        assert_eq!(std::mem::size_of::<super::BlockMeta>(), 48);
    }
}
