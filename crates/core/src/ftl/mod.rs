//! Flash translation layers ("personalities"): what the host sees of the device.
//!
//! Every personality drives the same media model and timelines and reports the same counters,
//! so measurements mean one thing across conventional, FDP, ZNS and open-channel devices.

pub mod conventional;
pub mod fdp;
pub mod ocssd;
pub mod victim;
pub mod zns;

use serde::{Deserialize, Serialize};

use crate::engine::Timelines;
use crate::error::Result;
use crate::media::{BlockMeta, Layout};

/// Per-write options.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOpts {
    /// Force unit access: the command completes only once its data is programmed.
    pub fua: bool,
    /// Placement hint (FDP placement identifier, stream id); personalities without placement
    /// ignore it.
    pub placement: Option<u16>,
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
    pub gc_foreground_events: u64,
    pub gc_background_events: u64,
    pub wl_static_moves: u64,
    /// Padding sectors programmed by flushes, FUA and write-through.
    pub pad_sectors: u64,
    pub grown_bad_blocks: u64,
}

/// The host interface of a block-device personality (conventional, and FDP on top of it).
///
/// Addresses and lengths are in logical sectors (`Layout::sector_bytes`). Every call takes the
/// submission time in simulated ns and returns the completion time (equal to `now` when
/// timing is off).
pub trait BlockDevice {
    fn layout(&self) -> &Layout;
    fn logical_sectors(&self) -> u64;
    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64>;
    fn read(&mut self, lba: u64, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64>;
    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64>;
    fn flush(&mut self, now: u64) -> Result<u64>;
    /// Hint that a command on `lba` is coming (stage 1: soon; stage 2: next few commands), so
    /// the metadata it touches can be prefetched. No effect on results.
    fn prefetch(&self, _lba: u64, _stage: u8) {}
    /// Give the device a chance to work while idle (background GC) at `now`.
    fn idle(&mut self, now: u64);
    fn counters(&self) -> &Counters;
    fn timelines(&self) -> &Timelines;
    fn blocks(&self) -> &[BlockMeta];
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
