//! [`Sizing`]: what a personality's config gives and costs, which each personality's
//! `sizing` fills from its config alone (crate::sizing picks the personality and checks the
//! memory it needs against the machine's).

use serde::Serialize;

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
