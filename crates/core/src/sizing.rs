//! What a config will give, known before the device is built: capacities, the blocks the FTL
//! holds back, and the simulator memory it will take. `ssdlab config check` shows it, and the
//! CLI refuses a config whose memory would not fit. It runs exactly the checks that building
//! the device runs (the personalities' constructors call the same code), without allocating
//! the per-sector maps.

use serde::Serialize;

use crate::config::{Config, Personality};
use crate::error::Result;
use crate::ftl::conventional::Conventional;
use crate::ftl::ocssd::Ocssd;
use crate::ftl::zns::Zns;

/// A device's size and cost, from its config alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    /// What the host can address.
    pub logical_bytes: u64,
    /// Raw NAND, bad blocks included.
    pub physical_bytes: u64,
    /// Blocks not bad from the factory.
    pub good_blocks: u64,
    /// Simulator memory the device takes once formatted (maps, block metadata, timelines,
    /// the sector index of a data-backed device).
    pub memory_bytes: u64,
    /// What a data-backed device's contents add once every logical sector holds non-zero data
    /// (0 for metadata-only devices); they grow as the host writes.
    pub data_bytes_max: u64,
    /// Conventional FTL: blocks it keeps free or open (GC watermarks plus one open block per
    /// plane and die of every write stream), which data cannot use.
    pub reserve_blocks: Option<u64>,
    /// Conventional FTL: spare blocks (good blocks beyond the logical capacity), the reserve
    /// included.
    pub spare_blocks: Option<f64>,
    /// Conventional FTL: what it holds back in steady state (the background watermark, half
    /// the open blocks, half the victims in progress), and the spare factor and model WAFs
    /// that leaves to data.
    pub reserve_steady_blocks: Option<f64>,
    /// Conventional FTL: the configured spare factor (`ftl.spare_factor`).
    pub spare_factor: Option<f64>,
    pub effective: Option<crate::analytic::EffectiveSpare>,
}

/// Check `cfg` as building the device would, and size it.
pub fn sizing(cfg: &Config) -> Result<Sizing> {
    cfg.validate()?;
    match cfg.personality {
        Personality::Conventional => Conventional::sizing(cfg),
        Personality::Zns => Zns::sizing(cfg),
        Personality::Ocssd => Ocssd::sizing(cfg),
    }
}

/// Memory available to new allocations on this machine (Linux's MemAvailable), if known.
pub fn available_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// Environment variable that lets a device be built although its estimate exceeds the memory
/// available (`ssdlab ... --force` sets it).
pub const FORCE_ENV: &str = "SSDLAB_IGNORE_MEMORY_ESTIMATE";

/// Refuse a device whose memory at format exceeds what this machine has available, with a
/// message that says how much and what to do, rather than let the allocation abort the
/// process half way (unless [`FORCE_ENV`] is set). A data-backed device's contents grow later
/// and are not counted here; `config check` warns when they could not fit.
pub fn ensure_memory(s: &Sizing) -> Result<()> {
    if std::env::var_os(FORCE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Ok(());
    }
    match available_memory_bytes() {
        Some(avail) if s.memory_bytes > avail => Err(crate::error::Error::config(
            "geometry",
            format!(
                "this device needs about {:.1} GiB of memory and {:.1} GiB are available; use a smaller geometry (blocks_per_plane), storage = \"metadata\", or force it with --force ({FORCE_ENV}=1)",
                gib(s.memory_bytes),
                gib(avail)
            ),
        )),
        _ => Ok(()),
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
