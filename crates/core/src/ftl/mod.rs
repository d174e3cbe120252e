//! Flash translation layers ("personalities"): what the host sees of the device.
//!
//! Every personality holds one [`Media`] (blocks, timelines, contents, counters, wear-out),
//! so measurements mean one thing across conventional, FDP, ZNS and open-channel devices.
//! `hostlog.rs` is the host side that runs ordinary workloads on the append-only ones.

pub mod conventional;
pub mod fdp;
pub mod hostlog;
pub mod ocssd;
pub mod sizing;
pub mod victim;
pub mod zns;

use crate::engine::Timelines;
use crate::error::Result;
pub use crate::media::Counters;
use crate::media::{BlockMeta, Layout, Media};

/// Per-write options.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOpts {
    /// Force unit access: the command completes only once its data is programmed.
    pub fua: bool,
    /// Placement hint (FDP placement identifier, stream id); personalities without placement
    /// ignore it.
    pub placement: Option<u16>,
}

/// The host interface of a block-device personality (and of the host logs that run block
/// workloads on zoned and open-channel devices).
///
/// Addresses and lengths are in logical sectors (`Layout::sector_bytes`). Every call takes the
/// submission time in simulated ns and returns the completion time (equal to `now` when
/// timing is off).
pub trait BlockDevice {
    /// The device's NAND: everything below is read from it.
    fn media(&self) -> &Media;
    fn layout(&self) -> &Layout {
        &self.media().lay
    }
    fn counters(&self) -> &Counters {
        &self.media().c
    }
    fn timelines(&self) -> &Timelines {
        &self.media().tl
    }
    fn blocks(&self) -> &[BlockMeta] {
        &self.media().blocks
    }
    fn logical_sectors(&self) -> u64;
    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64>;
    fn read(&mut self, lba: u64, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64>;
    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64>;
    fn flush(&mut self, now: u64) -> Result<u64>;
    /// Hint that a command on `lba` is coming (stage 1: soon; stage 2: next few commands, a
    /// write; stage 3: the same for a read), so the metadata it touches can be prefetched.
    /// Stages 2 and 3 read what stage 1 loaded. No effect on results.
    fn prefetch(&self, _lba: u64, _stage: u8) {}
    /// Give the device a chance to work while idle (background GC) at `now`.
    fn idle(&mut self, _now: u64) {}
    /// Free (erased, usable) blocks right now.
    fn free_blocks(&self) -> u32;
    /// Sectors currently mapped (written and not trimmed or overwritten since).
    fn mapped_sectors(&self) -> u64;
    /// Assert every internal invariant (slow; for tests and debugging).
    fn check_invariants(&self);
    /// Personality-specific counters at the start of a measured run.
    fn personality_baseline(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Personality-specific sections of metrics.json (e.g. "fdp"), measured since `base`.
    fn personality_metrics(&self, _base: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
        vec![]
    }
}
