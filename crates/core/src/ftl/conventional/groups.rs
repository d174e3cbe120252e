//! Reclaim groups (one when FDP is off) partition the dies; each has its own free blocks,
//! victim set, GC watermarks and victims in progress, so GC never moves data across groups.
//! This module holds that state and the pacing arithmetic; `gc.rs` does the collecting.

use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use super::super::victim::Victims;
use crate::config::{FtlConfig, GcStreams};
use crate::error::{Error, Result};
use crate::media::{BlockMeta, BlockState, Layout};

/// A victim being collected: its next page and its latest read completion.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct GcCursor {
    pub victim: u32,
    pub page: u32,
    pub last_read: u64,
}

/// A reclaim group: its dies, free blocks, victims and GC state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Group {
    pub dies: Vec<u32>,
    /// Free (erased, usable) blocks.
    pub free: u32,
    pub fg_free_blocks: u32,
    pub bg_free_blocks: u32,
    /// Pages programmed into the group's open blocks. Paced GC keeps free blocks net of these
    /// above the background watermark: write points open and close a whole stripe of blocks
    /// at a time, and counting free blocks alone would make each stripe change look like a
    /// sudden shortage (and the GC catch-up that follows a burst).
    pub open_written_pages: u64,
    /// Blocks open in the group's write points.
    pub open_blocks: u32,
    pub victims: Victims,
    /// Victims being collected, at most `gc_width`, advanced a page at a time in turn.
    pub gc: Vec<GcCursor>,
    pub gc_width: usize,
    pub gc_turn: usize,
}

impl Group {
    /// A group owning `dies` (in way order), with the watermarks of `ftl`; write streams
    /// stripe over `ways` of its dies.
    pub fn new(dies: Vec<u32>, ways: u32, lay: &Layout, ftl: &FtlConfig) -> Group {
        let n = dies.len() as u32;
        let planes = lay.planes_per_die;
        // GC reads of one victim all queue on its die: collect one victim per die at a time,
        // as controllers that collect whole superblocks do.
        let gc_width = if ftl.gc_parallel_victims == 0 { n as usize } else { ftl.gc_parallel_victims as usize };
        // Foreground: the most a GC round can consume (a new block per plane on every die of
        // the GC stream, of both the young and the old one with `gc_streams = "by-age"`, and a
        // block's worth of relocations per victim in progress), plus margin.
        let gc_heads = if ftl.gc_streams == GcStreams::ByAge { 2 } else { 1 };
        let auto_fg = (ways.clamp(1, n) * planes * gc_heads).max(gc_width as u32) + planes + 2;
        let fg = if ftl.gc_fg_free_blocks == 0 { auto_fg } else { ftl.gc_fg_free_blocks.max(auto_fg) };
        // Paced GC keeps free space between the two watermarks; a narrow band keeps few
        // blocks idle (they are spare space the data cannot use). Free blocks net of open
        // blocks' written pages stay at or above `bg` >= fg + planes, so a host write point
        // always opens without foreground GC.
        let bg = if ftl.gc_bg_free_blocks == 0 { fg + planes + 2 } else { ftl.gc_bg_free_blocks.max(fg + planes) };
        assert!(n > 0, "a reclaim group owns at least one die");
        assert!(fg >= planes + 2 && bg >= fg + planes, "watermarks: fg {fg} >= planes + 2, bg {bg} >= fg + planes");
        Group {
            dies,
            free: 0,
            fg_free_blocks: fg,
            bg_free_blocks: bg,
            open_written_pages: 0,
            open_blocks: 0,
            victims: Victims::new(ftl.gc_policy, lay.sectors_per_block, ftl.gc_d),
            gc: Vec::with_capacity(gc_width),
            gc_width,
            gc_turn: 0,
        }
    }

    /// Pages by which the free blocks, net of the pages written in open blocks, fall short of
    /// the background watermark (<= 0: no GC needed).
    #[inline]
    pub fn shortfall_pages(&self, pages_per_block: u32) -> i64 {
        let ppb = pages_per_block as i64;
        debug_assert!(
            self.open_written_pages <= self.open_blocks as u64 * pages_per_block as u64,
            "open blocks hold more pages than they have"
        );
        self.bg_free_blocks as i64 * ppb - (self.free as i64 * ppb - self.open_written_pages as i64)
    }

    /// Pages that hold no live data yet are not where GC looks for victims: free blocks, the
    /// unwritten pages of open blocks, and the pages of victims in progress that GC has
    /// already cleared (not free until the victim is erased).
    #[inline]
    pub fn reserved_pages(&self, pages_per_block: u32) -> u64 {
        let cleared: u64 = self.gc.iter().map(|c| c.page as u64).sum();
        debug_assert!(self.gc.len() <= self.gc_width.max(1), "more victims in progress than gc_width");
        (self.free as u64 + self.open_blocks as u64) * pages_per_block as u64 - self.open_written_pages + cleared
    }

    /// Blocks the group holds back in steady state, estimated from its settings: the background
    /// watermark, half of every open block (write points fill and close their ways in step),
    /// and half of each victim in progress.
    pub fn reserve_steady_blocks(&self, open_blocks_max: u64) -> f64 {
        self.bg_free_blocks as f64 + open_blocks_max as f64 / 2.0 + self.gc_width as f64 / 2.0
    }

    /// Take the next victim out of the victim set (`clock`: host sectors written so far, the
    /// age of cost-benefit). Greedy picks the emptiest block: if even that one is entirely
    /// valid, nothing can be reclaimed and the device is full; other policies may pick a full
    /// block and move on.
    pub fn pick(&mut self, blocks: &mut [BlockMeta], lay: &Layout, clock: u64, rng: &mut Pcg64Mcg, rg: usize, mapped: u64) -> Result<u32> {
        let spb = lay.sectors_per_block;
        let v = self
            .victims
            .pick(blocks, spb, clock, rng)
            .ok_or_else(|| Error::WornOut(format!("no full block to collect in reclaim group {rg}")))?;
        if blocks[v as usize].valid >= spb && matches!(self.victims, Victims::Greedy { .. }) {
            self.victims.insert(v, blocks);
            return Err(Error::WornOut(format!(
                "the best GC victim (block {v}) is entirely valid: the device is full ({mapped} mapped sectors, {} free blocks in reclaim group {rg})",
                self.free
            )));
        }
        assert_eq!(blocks[v as usize].state, BlockState::Full, "GC victim {v} is not a full block");
        assert_eq!(blocks[v as usize].rg as usize, rg, "GC victim {v} of another reclaim group");
        Ok(v)
    }
}
