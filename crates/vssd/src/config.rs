//! The vSSD layer's settings and the devices of the case study.
//!
//! Device: the document's prototype is a CNEX open-channel SSD of 1 TB, 16 channels of 4 dies
//! (64 GB per channel, 16 GB per die), each die split into four 4 GB soft-planes. ssdlab builds
//! it on the project's MLC part (the `default` preset's page, block and timings: 16 KiB pages,
//! tR 115 us, tPROG 1.6 ms, tBERS 3 ms, 166 MB/s channels) with two planes per die. `quick` has
//! the same shape (16 x 4 dies, 2 planes, 4 soft-planes per die) at 4 GiB; `lifetime` is the
//! same shape again with small chunks, for block-level wear studies that run a device to death.

use serde::{Deserialize, Serialize};
use ssdlab_core::config::{Personality, StorageMode};
use ssdlab_core::media::presets::preset;
use ssdlab_core::Config;

use crate::error::{Result, VssdError};

/// Names accepted by [`device_config`].
pub const DEVICES: &[&str] = &["paper", "quick", "lifetime"];

/// An open-channel device of the case study: `paper` (1 TiB), `quick` (4 GiB) or `lifetime`
/// (512 MiB, 128 KiB chunks).
pub fn device_config(name: &str) -> Option<Config> {
    let mut c = preset("default").expect("default preset");
    c.personality = Personality::Ocssd;
    c.storage = StorageMode::Metadata;
    c.geometry.channels = 16;
    c.geometry.dies_per_channel = 4;
    c.geometry.planes_per_die = 2;
    // Each die serves its queue in order, as the document's modified CNEX firmware queues
    // requests to each die. (Migration keeps out of the tenants' way by pacing itself: one
    // unit at a time.)
    c.timing.read_priority = false;
    match name {
        // 2 planes x 2048 blocks x 256 pages x 16 KiB = 16 GiB per die, 8 MiB chunks.
        "paper" => {
            c.geometry.blocks_per_plane = 2048;
            c.geometry.pages_per_block = 256;
        }
        // 128 chunks of 512 KiB per die: 64 MiB dies, 256 MiB channels.
        "quick" => {
            c.geometry.blocks_per_plane = 128;
            c.geometry.pages_per_block = 16;
        }
        // 32 chunks of 128 KiB per die, timing off: wear only.
        "lifetime" => {
            c.geometry.blocks_per_plane = 32;
            c.geometry.pages_per_block = 4;
            c.timing.enabled = false;
        }
        _ => return None,
    }
    // Built on the default preset (the name a config file would give).
    c.preset = "default".into();
    Some(c)
}

/// How the channel-level wear-levelling decides to swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SwapPolicy {
    /// Never swap (channels age at their tenants' write rates).
    #[default]
    None,
    /// FlashBlox's adaptive trigger: swap when a channel has erased `threshold_bytes`
    /// (g = M / f) since the last swap.
    Adaptive,
    /// Swap every `period_ns`.
    Fixed,
}

/// Which two channels a swap exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SwapPair {
    /// The document's rule: the channel with the most wear so far and the channel with the
    /// lowest wear rate since the last swap (the most-worn channel gets the coolest workload).
    #[default]
    MaxWearMinRate,
    /// The analysis's rotation: the channel with the highest wear rate since the last swap
    /// (where the writes are) and the least-worn channel (the writes move to the channel that
    /// can take them longest).
    MaxRateMinWear,
}

/// Channel/die swap settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WearConfig {
    pub policy: SwapPolicy,
    pub pair: SwapPair,
    /// Adaptive: erased bytes of one channel since the last swap that trigger a swap (g).
    pub threshold_bytes: u64,
    /// Fixed and round-robin: time between swaps.
    pub period_ns: u64,
    /// During a channel swap, pair the most-worn die of the migrating channel with the die of
    /// the partner whose tenant writes least (die-level wear-levelling riding on channel
    /// swaps); otherwise dies pair in order.
    pub die_swaps: bool,
    /// Units (one multi-plane page each) a migration stream copies per step; pacing leaves
    /// the dies to tenants' I/O between steps.
    pub migration_units_per_step: u32,
}

impl Default for WearConfig {
    fn default() -> Self {
        WearConfig {
            policy: SwapPolicy::None,
            pair: SwapPair::MaxWearMinRate,
            threshold_bytes: 0,
            period_ns: 0,
            die_swaps: true,
            migration_units_per_step: 1,
        }
    }
}

/// Settings of the vSSD layer (the resource manager, the device-level mapping, wear-levelling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlashBloxConfig {
    /// Share of each die's erase blocks kept back for blocks that fail (the document: 1%).
    pub reserve_fraction: f64,
    /// Soft-planes per die (the document: 4).
    pub soft_planes_per_die: u32,
    /// Commands in flight per die before the next one waits (the document: 256).
    pub die_queue_depth: u32,
    /// The administrator's maps from throughput level (the index) to channels, dies and
    /// soft-planes (tputToChannel, tputToDie, tputToSoftPlane).
    pub tput_to_channels: Vec<u32>,
    pub tput_to_dies: Vec<u32>,
    pub tput_to_soft_planes: Vec<u32>,
    pub wear: WearConfig,
}

impl Default for FlashBloxConfig {
    fn default() -> Self {
        FlashBloxConfig {
            reserve_fraction: 0.01,
            soft_planes_per_die: 4,
            die_queue_depth: 256,
            tput_to_channels: vec![1, 2, 4, 8, 16],
            tput_to_dies: vec![1, 2, 4, 8, 16],
            tput_to_soft_planes: vec![1, 2, 4, 8, 16],
            wear: WearConfig::default(),
        }
    }
}

impl FlashBloxConfig {
    pub fn validate(&self, dev: &Config) -> Result<()> {
        let bad = |k: &str, m: String| Err(VssdError::Config(format!("flashblox.{k}: {m}")));
        if dev.personality != Personality::Ocssd {
            return Err(VssdError::Config("the device must be open-channel (personality = \"ocssd\")".into()));
        }
        if !(0.0..0.5).contains(&self.reserve_fraction) {
            return bad("reserve_fraction", format!("{} is out of range; valid: 0 to 0.5", self.reserve_fraction));
        }
        let blocks = dev.geometry.blocks_per_plane;
        if self.soft_planes_per_die == 0 || self.soft_planes_per_die > 64 || blocks < 2 * self.soft_planes_per_die {
            return bad(
                "soft_planes_per_die",
                format!("{} is out of range; valid: 1 to 64, and at most half the {blocks} chunks of a die", self.soft_planes_per_die),
            );
        }
        if self.die_queue_depth == 0 || self.die_queue_depth > 65536 {
            return bad("die_queue_depth", format!("{} is out of range; valid: 1 to 65536", self.die_queue_depth));
        }
        for (k, m) in [
            ("tput_to_channels", &self.tput_to_channels),
            ("tput_to_dies", &self.tput_to_dies),
            ("tput_to_soft_planes", &self.tput_to_soft_planes),
        ] {
            if m.is_empty() || m.contains(&0) {
                return bad(k, "needs at least one level, each naming one unit or more".into());
            }
        }
        let w = &self.wear;
        match w.policy {
            SwapPolicy::Adaptive if w.threshold_bytes == 0 => return bad("wear.threshold_bytes", "the adaptive policy needs g > 0".into()),
            SwapPolicy::Fixed if w.period_ns == 0 => return bad("wear.period_ns", "fixed swaps need a period > 0".into()),
            _ => {}
        }
        if w.migration_units_per_step == 0 || w.migration_units_per_step > 1024 {
            return bad("wear.migration_units_per_step", format!("{} is out of range; valid: 1 to 1024", w.migration_units_per_step));
        }
        Ok(())
    }
}
