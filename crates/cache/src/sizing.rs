//! What a cache run will cost in memory, known before anything is built: the device's share
//! from the core ([`ssdlab_core::sizing`]), the cache's own structures from the run spec (the
//! DRAM tier's slab and map, the SOC's bucket index, the LOC's index and region member lists),
//! at the sizes a warm cache reaches. Schedulers use it to start only the runs that fit
//! (`ssdlab reproduce`, `ssdlab sweep`); it checks the spec as a run would.

use serde::Serialize;
use ssdlab_core::config::{Config, StorageMode};
use ssdlab_core::sizing::Sizing;

use crate::error::{CacheError, Result};
use crate::run::RunSpec;
use crate::soc::Soc;
use crate::workload::WorkloadSpec;

/// Peak memory of a cache run, by part (bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheSizing {
    pub device: Sizing,
    /// Items the DRAM tier holds when full, and its slab and key map.
    pub dram_items: u64,
    pub dram_tier_bytes: u64,
    /// Items an SOC bucket holds when full, and the SOC's index (filters, fingerprints, sizes).
    pub soc_items_per_bucket: f64,
    pub soc_index_bytes: u64,
    /// Items the LOC's regions hold when full, and its index and region member lists.
    pub loc_items: u64,
    pub loc_index_bytes: u64,
    /// Latency histograms, the Zipf table, buffers.
    pub other_bytes: u64,
    /// All of the above.
    pub memory_bytes: u64,
}

/// Bytes of a hashbrown map holding `n` entries of `entry` bytes, counting the old table that
/// is alive while the map doubles into its last size.
fn map_bytes(n: u64, entry: u64) -> u64 {
    let buckets = (n.max(1) * 8).div_ceil(7).next_power_of_two();
    buckets * (entry + 1) * 3 / 2
}

/// Share of items and mean item bytes (key + value) on each side of `small_max` bytes:
/// ((share, mean) of items <= small_max, (share, mean) of larger ones), values log-uniform in
/// their bins, keys at their mean size.
fn split_sizes(w: &WorkloadSpec, small_max: u32) -> ((f64, f64), (f64, f64)) {
    let key = (w.key_bytes_min + w.key_bytes_max) as f64 / 2.0;
    let t = small_max as f64 - key; // largest value that stays small
    let total: f64 = w.value_bins.iter().map(|b| b.weight).sum();
    let (mut ps, mut ms, mut pl, mut ml) = (0.0, 0.0, 0.0, 0.0);
    for b in &w.value_bins {
        let (lo, hi, wt) = (b.min as f64, b.max as f64, b.weight / total);
        // P(v <= x) and E[v; v <= x] for v log-uniform on [lo, hi].
        let (p_small, sum_small, mean_all) = if hi > lo {
            let l = (hi / lo).ln();
            let x = t.clamp(lo, hi);
            ((x / lo).ln() / l, (x - lo) / l, (hi - lo) / l)
        } else {
            let small = lo <= t;
            (small as u8 as f64, if small { lo } else { 0.0 }, lo)
        };
        ps += wt * p_small;
        ms += wt * sum_small;
        pl += wt * (1.0 - p_small);
        ml += wt * (mean_all - sum_small);
    }
    let mean = |p: f64, m: f64| if p > 0.0 { key + m / p } else { 0.0 };
    ((ps, mean(ps, ms)), (pl, mean(pl, ml)))
}

/// Check `device` and `spec` as a run would, and estimate its peak memory.
pub fn sizing(device: &Config, spec: &RunSpec) -> Result<CacheSizing> {
    let dev = ssdlab_core::sizing::sizing(device)?;
    if device.storage != StorageMode::Metadata {
        return Err(CacheError::Config("the cache simulation needs a metadata-only device (storage = \"metadata\")".into()));
    }
    spec.validate()?;
    spec.workload.validate()?;
    let c = &spec.cache;
    let sector = device.geometry.sector_bytes as u64;
    c.validate(dev.logical_bytes, sector)?;
    let ((_, buckets), (_, regions)) = c.layout(dev.logical_bytes, sector);
    let w = &spec.workload;
    let ((p_small, small), (p_large, large)) = split_sizes(w, c.small_item_max_bytes);

    // DRAM tier: full of items of the population's mean size.
    let mean_item = p_small * small + p_large * large + c.dram_item_overhead_bytes as f64;
    let dram_items = (c.dram_bytes as f64 / mean_item.max(1.0)) as u64;
    // The DRAM tier's map is open addressing, between 3/8 and 3/4 full: 16 B slots, a power of
    // two at least 4/3 of the items, and a grown table's old one freed (counted at its peak).
    let dram_map_bytes = (dram_items.max(8) * 4).div_ceil(3).next_power_of_two() * crate::dram::MAP_SLOT_BYTES * 3 / 2;
    let dram_tier_bytes = dram_items * crate::dram::SLOT_BYTES + dram_map_bytes;

    // SOC: byte-full buckets of small items (every item is small when there is no LOC).
    let soc_item = if p_small > 0.0 { small } else { large } + c.soc_item_overhead_bytes as f64;
    let soc_items_per_bucket = c.bucket_bytes as f64 / soc_item.max(1.0);
    let ttl = w.ttl_s > 0;
    let soc_index_bytes = Soc::estimate_dram_bytes(buckets, c.bucket_slots, soc_items_per_bucket, ttl);

    // LOC: full regions of large items (small ones too when there is no SOC); each item in the
    // index and in its region's member list (lists keep their largest length).
    let loc_item =
        if buckets == 0 || p_large == 0.0 { p_small * small + p_large * large } else { large } + c.loc_item_overhead_bytes as f64;
    let loc_items = (regions as f64 * c.region_bytes as f64 / loc_item.max(1.0)) as u64;
    let loc_index_bytes = map_bytes(loc_items, crate::loc::INDEX_ENTRY_BYTES) + loc_items * 8 * 3 / 2 + regions * 48;

    // Histograms (~256 KiB each: the flash pair, the series' pair, window snapshots), the Zipf
    // table (~32 B per knot, about 1024 per e-fold of keys), region buffers.
    let hist = 256 << 10;
    // With key lifecycles instead of the Zipf table: the later requests owed, 16 B each (rate x
    // share of later requests x mean delay of them), in a heap that may have doubled.
    let keys_bytes = match &w.lifecycle {
        None => 32.0 * 1024.0 * (1.0 + (w.keys as f64 / 1024.0).max(1.0).ln()),
        Some(l) => 2.0 * 16.0 * w.rate_rps * (1.0 - 1.0 / l.requests_per_key) * l.reaccess_mean_s,
    };
    let other_bytes = hist * (8 + 2 * spec.steady_windows as u64) + keys_bytes as u64 + 2 * c.bucket_bytes as u64;

    let memory_bytes = dev.memory_bytes + dram_tier_bytes + soc_index_bytes + loc_index_bytes + other_bytes;
    Ok(CacheSizing {
        device: dev,
        dram_items,
        dram_tier_bytes,
        soc_items_per_bucket,
        soc_index_bytes,
        loc_items,
        loc_index_bytes,
        other_bytes,
        memory_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{preset, SizeBin};

    #[test]
    fn sizes_split_at_the_small_item_threshold() {
        let w = WorkloadSpec {
            key_bytes_min: 10,
            key_bytes_max: 10,
            value_bins: vec![SizeBin { min: 90, max: 90, weight: 1.0 }],
            ..preset("kvcache").unwrap()
        };
        assert_eq!(split_sizes(&w, 100), ((1.0, 100.0), (0.0, 0.0)));
        assert_eq!(split_sizes(&w, 99), ((0.0, 0.0), (1.0, 100.0)));
        // kvcache: 95% small with a mean value of ~335 B, the 2-64 KiB tail large.
        let kv = preset("kvcache").unwrap();
        let ((ps, ms), (pl, ml)) = split_sizes(&kv, 2048);
        assert!((ps - 0.95).abs() < 1e-9 && (pl - 0.05).abs() < 1e-9, "{ps} {pl}");
        assert!((ms - 32.0 - 338.0).abs() < 10.0, "{ms}");
        assert!((ml - 32.0 - (65536.0 - 2049.0) / (65536.0f64 / 2049.0).ln()).abs() < 1e-6, "{ml}");
    }
}
