//! The store's configuration: LSM shape, compaction policy, zone file layer. Every key has a
//! default; `validate` says which key is wrong and what was expected.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which compaction (and, for the zone-aware design, placement and zone GC) policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// RocksDB's default leveled compaction: saturation-triggered, min-overlapping-ratio file
    /// picking, on the plain zone layer.
    Baseline,
    /// Lethe's FADE (Sarkar et al., SIGMOD'20): saturation- and TTL-expiry-triggered
    /// compactions with per-level TTLs derived from the delete persistence threshold.
    Fade,
    /// The zone-aware persistent deletion design of seed 000 (Nie et al., FGCS 164, 2025):
    /// a compaction queue led by expired tombstone files, lifetime-based placement of tombstone
    /// files and placement-aware zone GC.
    ZoneAware,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Baseline => "baseline",
            Policy::Fade => "fade",
            Policy::ZoneAware => "zone-aware",
        }
    }
}

/// Data-block compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    None,
    /// LZ4 block format (lz4_flex); a block that does not shrink by 1/8 is stored raw, as
    /// RocksDB does.
    Lz4,
}

/// How the zone layer chooses the zone to collect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcMethod {
    /// The full zone with the least live data (ZenFS's garbage-ratio choice).
    Greedy,
    /// Greedy over the zones whose live data is not mostly predicted to die within
    /// `gc_horizon_ns` (tombstone files waiting for their TTL): those are left to empty
    /// themselves. Falls back to greedy when every candidate is such a zone.
    LifetimeAware,
}

/// Parameters of the zone-aware policy that the document leaves open (docs/case-studies/
/// lsm-deletion.md says why each default was chosen).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZoneAwareConfig {
    /// Levels 1..=low_levels are "low" (picked by min-overlapping ratio); deeper levels are
    /// "high" (picked by the weight below). Level 0 is always compacted whole.
    pub low_levels: u32,
    /// Weight of the LSM factor: 1 / (1 + overlapping ratio), cheap compactions first.
    pub weight_lsm: f64,
    /// Weight of the ZNS factor: the share of its zone's live bytes the file holds (compacting
    /// the last live files of a zone lets the zone be reset without migration).
    pub weight_zns: f64,
    /// Weight of the tombstone factor: the age of the file's oldest tombstone over its
    /// level's cumulative TTL (capped at 1).
    pub weight_tombstone: f64,
    /// Place tombstone files by the lifetime the policy assigns them (off: the zone layer's
    /// default placement; for ablation).
    pub tombstone_placement: bool,
    /// Placement: a tombstone file whose assigned lifetime is below this percentile of its
    /// level's observed lifetimes goes to a separate tombstone zone (the document's 75th).
    pub separate_percentile: f64,
    /// Zone GC leaves a zone alone while more than half its live bytes belong to files
    /// predicted to die within this horizon (0 = a quarter of the delete threshold).
    pub gc_horizon_ns: u64,
    /// Start a compaction when a tombstone file's TTL expires, as FADE does. Off (the
    /// document's design): compactions start only when a level saturates, and expired files go
    /// to the front of the queue then. On: the ablation "zone-aware + TTL trigger".
    pub ttl_trigger: bool,
}

impl Default for ZoneAwareConfig {
    fn default() -> Self {
        ZoneAwareConfig {
            low_levels: 1,
            weight_lsm: 1.0,
            weight_zns: 1.0,
            weight_tombstone: 1.0,
            tombstone_placement: true,
            separate_percentile: 0.75,
            gc_horizon_ns: 0,
            ttl_trigger: false,
        }
    }
}

/// The zone file layer (ZenFS spirit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZoneLayerConfig {
    /// Zone GC runs while fewer than this share of the data zones are empty.
    pub gc_free_fraction: f64,
    /// A zone with less than this share of its capacity left is finished (its active
    /// resource released).
    pub finish_fraction: f64,
    /// Active zones the layer uses at most (0 = the device's max_active).
    pub max_active: u32,
    /// GC victim choice (the zone-aware policy uses lifetime-aware unless this says greedy).
    pub gc_method: Option<GcMethod>,
}

impl Default for ZoneLayerConfig {
    fn default() -> Self {
        ZoneLayerConfig { gc_free_fraction: 0.15, finish_fraction: 0.02, max_active: 0, gc_method: None }
    }
}

/// The store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LsmConfig {
    /// The memtable is flushed to an L0 file when it holds this many bytes.
    pub memtable_bytes: u64,
    /// Compaction output files are cut at this size (at a user-key boundary).
    pub sst_target_bytes: u64,
    /// Data blocks are cut at this size.
    pub block_bytes: u32,
    pub bloom_bits_per_key: u32,
    /// Size ratio T between consecutive levels.
    pub size_ratio: u32,
    /// Target size of level 1; level i's is level1_bytes x T^(i-1).
    pub level1_bytes: u64,
    /// Levels including L0.
    pub max_levels: u32,
    /// L0 is compacted when it holds this many files.
    pub l0_compaction_trigger: u32,
    pub compression: Compression,
    /// Pad and write the WAL's partial sector on every write (no write is lost on a crash);
    /// off: whole sectors are written as they fill.
    pub wal_sync: bool,
    pub policy: Policy,
    /// Delete persistence threshold D_th in simulated ns (FADE and zone-aware need it).
    pub delete_threshold_ns: u64,
    pub zone_aware: ZoneAwareConfig,
    pub zones: ZoneLayerConfig,
    /// Measure deletion persistence (LSM and erase level) and keep what the audit needs.
    pub track_deletes: bool,
}

impl Default for LsmConfig {
    fn default() -> Self {
        LsmConfig {
            memtable_bytes: 4 << 20,
            sst_target_bytes: 4 << 20,
            block_bytes: 4096,
            bloom_bits_per_key: 10,
            size_ratio: 10,
            level1_bytes: 16 << 20,
            max_levels: 7,
            l0_compaction_trigger: 4,
            compression: Compression::None,
            wal_sync: false,
            policy: Policy::Baseline,
            delete_threshold_ns: 0,
            zone_aware: ZoneAwareConfig::default(),
            zones: ZoneLayerConfig::default(),
            track_deletes: false,
        }
    }
}

fn bad(key: &str, msg: impl Into<String>) -> Error {
    Error::Config(format!("lsm.{key}: {}", msg.into()))
}

impl LsmConfig {
    pub fn validate(&self) -> Result<()> {
        if self.memtable_bytes < 4096 || self.memtable_bytes > 1 << 32 {
            return Err(bad("memtable_bytes", format!("{} is outside 4096..4 GiB", self.memtable_bytes)));
        }
        if self.sst_target_bytes < 4096 || self.sst_target_bytes > 1 << 32 {
            return Err(bad("sst_target_bytes", format!("{} is outside 4096..4 GiB", self.sst_target_bytes)));
        }
        if !(256..=1 << 20).contains(&self.block_bytes) {
            return Err(bad("block_bytes", format!("{} is outside 256..1 MiB", self.block_bytes)));
        }
        if !(1..=64).contains(&self.bloom_bits_per_key) {
            return Err(bad("bloom_bits_per_key", format!("{} is outside 1..64", self.bloom_bits_per_key)));
        }
        if !(2..=100).contains(&self.size_ratio) {
            return Err(bad("size_ratio", format!("{} is outside 2..100", self.size_ratio)));
        }
        if !(2..=12).contains(&self.max_levels) {
            return Err(bad("max_levels", format!("{} is outside 2..12", self.max_levels)));
        }
        if self.level1_bytes < self.sst_target_bytes {
            return Err(bad("level1_bytes", format!("{} is smaller than sst_target_bytes ({})", self.level1_bytes, self.sst_target_bytes)));
        }
        if !(1..=64).contains(&self.l0_compaction_trigger) {
            return Err(bad("l0_compaction_trigger", format!("{} is outside 1..64", self.l0_compaction_trigger)));
        }
        if self.policy != Policy::Baseline && self.delete_threshold_ns == 0 {
            return Err(bad("delete_threshold_ns", format!("policy {} needs a delete persistence threshold > 0", self.policy.name())));
        }
        let z = &self.zone_aware;
        for (k, v) in [("weight_lsm", z.weight_lsm), ("weight_zns", z.weight_zns), ("weight_tombstone", z.weight_tombstone)] {
            if !(0.0..=1e6).contains(&v) {
                return Err(bad(&format!("zone_aware.{k}"), format!("{v} is outside 0..1e6")));
            }
        }
        if !(z.separate_percentile > 0.0 && z.separate_percentile <= 1.0) {
            return Err(bad("zone_aware.separate_percentile", format!("{} is outside (0, 1]", z.separate_percentile)));
        }
        if z.low_levels >= self.max_levels {
            return Err(bad(
                "zone_aware.low_levels",
                format!("{} leaves no high level below max_levels {}", z.low_levels, self.max_levels),
            ));
        }
        let zl = &self.zones;
        if !(zl.gc_free_fraction >= 0.0 && zl.gc_free_fraction < 0.9) {
            return Err(bad("zones.gc_free_fraction", format!("{} is outside 0..0.9", zl.gc_free_fraction)));
        }
        if !(zl.finish_fraction >= 0.0 && zl.finish_fraction < 0.5) {
            return Err(bad("zones.finish_fraction", format!("{} is outside 0..0.5", zl.finish_fraction)));
        }
        Ok(())
    }

    /// Target bytes of level `i` (>= 1).
    pub fn level_target_bytes(&self, i: usize) -> u64 {
        debug_assert!(i >= 1);
        let mut t = self.level1_bytes as f64;
        for _ in 1..i {
            t *= self.size_ratio as f64;
        }
        t.min(u64::MAX as f64 / 2.0) as u64
    }

    /// The GC method in force: the zone-aware policy's placement-aware GC by default, greedy
    /// for the others.
    pub fn gc_method(&self) -> GcMethod {
        self.zones.gc_method.unwrap_or(if self.policy == Policy::ZoneAware { GcMethod::LifetimeAware } else { GcMethod::Greedy })
    }
}

/// FADE's per-level TTLs (Lethe, SIGMOD'20, section 4.1), with levels numbered from 0 (the
/// level flushes go to) to `levels - 1` (the last level, which has no TTL: a tombstone
/// compacted into it is persisted). d_i = D_th (T - 1) / (T^(L-1) - 1) T^i for i in
/// 0..L-1, so the TTLs grow by T per level and sum to D_th. A file of level i expires when
/// its oldest tombstone is older than d_0 + ... + d_i (returned here); None for the last
/// level.
pub fn fade_cumulative_ttl_ns(d_th_ns: u64, size_ratio: u32, levels: usize, level: usize) -> Option<u64> {
    if levels < 2 || level + 1 >= levels {
        return None;
    }
    let t = size_ratio as f64;
    let l = levels as f64;
    let d0 = d_th_ns as f64 * (t - 1.0) / (t.powf(l - 1.0) - 1.0);
    // d_0 + ... + d_i = d0 (T^(i+1) - 1) / (T - 1)
    let cum = d0 * (t.powi(level as i32 + 1) - 1.0) / (t - 1.0);
    Some(cum.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fade_ttls_grow_by_t_and_sum_to_the_threshold() {
        let d = 1_000_000_000u64;
        // L = 4 levels (0..3): TTLs d_0..d_2 = D (9/999) {1, 10, 100}.
        let c: Vec<u64> = (0..4).filter_map(|i| fade_cumulative_ttl_ns(d, 10, 4, i)).collect();
        assert_eq!(c.len(), 3, "the last level has no TTL");
        assert_eq!(c[2], d, "the TTLs sum to D_th");
        let d0 = c[0] as f64;
        assert!((d0 - d as f64 * 9.0 / 999.0).abs() < 2.0);
        assert!(((c[1] - c[0]) as f64 / d0 - 10.0).abs() < 1e-6);
        assert!(((c[2] - c[1]) as f64 / (c[1] - c[0]) as f64 - 10.0).abs() < 1e-6);
        assert_eq!(fade_cumulative_ttl_ns(d, 10, 1, 0), None);
        assert_eq!(fade_cumulative_ttl_ns(d, 10, 2, 0), Some(d), "two levels: level 0 gets all of D_th");
    }

    #[test]
    fn validation_names_the_key() {
        let c = LsmConfig { policy: Policy::Fade, ..Default::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("lsm.delete_threshold_ns"), "{e}");
        let c = LsmConfig { block_bytes: 7, ..Default::default() };
        assert!(c.validate().unwrap_err().to_string().contains("lsm.block_bytes"));
    }
}
