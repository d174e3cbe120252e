//! Cache configuration (sizes, engines, admission, placement) with validation.
//!
//! Defaults follow CacheLib's Navy engines (docs/case-studies/fdp-cache.md lists the source of
//! each): 4 KiB buckets with an 8-byte Bloom filter each and FIFO inside a bucket, a 2048-byte
//! small-item cutoff, 16 MiB regions with LRU region eviction.

use serde::{Deserialize, Serialize};

use crate::error::{CacheError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegionEviction {
    Fifo,
    Lru,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionKind {
    /// Every item evicted from DRAM goes to flash.
    AcceptAll,
    /// Each item goes to flash with probability `admission.probability`.
    Random,
    /// A token bucket of `admission.rate_bytes_per_s` item bytes per second of workload time
    /// (burst: one second's worth): items beyond the budget are dropped.
    Rate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    pub kind: AdmissionKind,
    pub probability: f64,
    pub rate_bytes_per_s: f64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig { kind: AdmissionKind::AcceptAll, probability: 1.0, rate_bytes_per_s: 0.0 }
    }
}

/// The hybrid cache: DRAM tier, small-object cache (SOC), large-object cache (LOC).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// DRAM tier capacity (item bytes, headers included).
    pub dram_bytes: u64,
    /// A DRAM hit moves the item to the LRU head at most once per this many seconds of
    /// workload time (CacheLib's `lruRefreshTime`, default 60; 0 = on every hit).
    pub dram_lru_refresh_s: u32,
    /// Fraction of the device's logical space the flash cache may use (host utilisation);
    /// the rest is never written.
    pub utilization: f64,
    /// SOC size as a fraction of the device's logical space (the paper's "4% of the SSD").
    pub soc_fraction: f64,
    /// Items of at most this many bytes (key + value) go to the SOC, larger ones to the LOC.
    pub small_item_max_bytes: u32,
    pub bucket_bytes: u32,
    /// Most items a bucket can hold (an index-size bound; bytes usually bind first).
    pub bucket_slots: u32,
    /// Hash functions of each bucket's 64-bit Bloom filter.
    pub bloom_hashes: u32,
    pub region_bytes: u64,
    pub region_eviction: RegionEviction,
    /// Reinsert an evicted LOC item into the open region if it was hit at least this many
    /// times while on flash (0 = no reinsertion).
    pub reinsert_hits: u32,
    /// A region flush is issued as writes of this size.
    pub loc_write_bytes: u64,
    /// Per-item header bytes in DRAM, in an SOC bucket, in a LOC region.
    pub dram_item_overhead_bytes: u32,
    pub soc_item_overhead_bytes: u32,
    pub loc_item_overhead_bytes: u32,
    pub admission: AdmissionConfig,
    /// Give the SOC and LOC their own placement handles when the device has FDP enabled.
    pub fdp_placement: bool,
    /// Remove a key's flash copy when it is set again (CacheLib invalidates stale copies).
    pub invalidate_on_set: bool,
    /// Seed of the random admission policy.
    pub seed: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            dram_bytes: 64 << 20,
            dram_lru_refresh_s: 60,
            utilization: 0.5,
            soc_fraction: 0.04,
            small_item_max_bytes: 2048,
            bucket_bytes: 4096,
            bucket_slots: 32,
            bloom_hashes: 4,
            region_bytes: 16 << 20,
            region_eviction: RegionEviction::Lru,
            reinsert_hits: 0,
            loc_write_bytes: 1 << 20,
            dram_item_overhead_bytes: 32,
            soc_item_overhead_bytes: 8,
            loc_item_overhead_bytes: 24,
            admission: AdmissionConfig::default(),
            fdp_placement: true,
            invalidate_on_set: true,
            seed: 1,
        }
    }
}

fn bad(key: &str, msg: String) -> CacheError {
    CacheError::Config(format!("cache.{key}: {msg}"))
}

impl CacheConfig {
    /// Check the config against a device of `logical_bytes` with `sector_bytes` sectors.
    pub fn validate(&self, logical_bytes: u64, sector_bytes: u64) -> Result<()> {
        if !(self.utilization > 0.0 && self.utilization <= 1.0) {
            return Err(bad("utilization", format!("{} is not in (0, 1]", self.utilization)));
        }
        if !(self.soc_fraction >= 0.0 && self.soc_fraction <= self.utilization) {
            return Err(bad("soc_fraction", format!("{} must be in [0, utilization = {}]", self.soc_fraction, self.utilization)));
        }
        // Bucket sizes are kept in 16-bit fields.
        if self.bucket_bytes == 0 || !(self.bucket_bytes as u64).is_multiple_of(sector_bytes) || self.bucket_bytes > 32768 {
            return Err(bad(
                "bucket_bytes",
                format!("{} must be a non-zero multiple of the {sector_bytes}-byte sector, at most 32768", self.bucket_bytes),
            ));
        }
        if self.bucket_slots == 0 || self.bucket_slots > 255 {
            return Err(bad("bucket_slots", format!("{} is not in 1..=255", self.bucket_slots)));
        }
        if self.bloom_hashes == 0 || self.bloom_hashes > 10 {
            return Err(bad("bloom_hashes", format!("{} is not in 1..=10", self.bloom_hashes)));
        }
        if self.small_item_max_bytes as u64 + self.soc_item_overhead_bytes as u64 > self.bucket_bytes as u64 {
            return Err(bad(
                "small_item_max_bytes",
                format!(
                    "{} plus the {}-byte header does not fit a {}-byte bucket",
                    self.small_item_max_bytes, self.soc_item_overhead_bytes, self.bucket_bytes
                ),
            ));
        }
        if self.region_bytes == 0 || !self.region_bytes.is_multiple_of(sector_bytes) || self.region_bytes > u32::MAX as u64 {
            return Err(bad(
                "region_bytes",
                format!("{} must be a non-zero multiple of the {sector_bytes}-byte sector below 4 GiB", self.region_bytes),
            ));
        }
        if self.loc_write_bytes == 0
            || !self.loc_write_bytes.is_multiple_of(sector_bytes)
            || !self.region_bytes.is_multiple_of(self.loc_write_bytes)
        {
            return Err(bad(
                "loc_write_bytes",
                format!("{} must be a multiple of the sector that divides region_bytes {}", self.loc_write_bytes, self.region_bytes),
            ));
        }
        if self.dram_bytes == 0 {
            return Err(bad("dram_bytes", "must be positive".into()));
        }
        match self.admission.kind {
            AdmissionKind::Random if !(self.admission.probability >= 0.0 && self.admission.probability <= 1.0) => {
                return Err(bad("admission.probability", format!("{} is not in [0, 1]", self.admission.probability)));
            }
            AdmissionKind::Rate if !(self.admission.rate_bytes_per_s > 0.0 && self.admission.rate_bytes_per_s.is_finite()) => {
                return Err(bad("admission.rate_bytes_per_s", format!("{} must be positive", self.admission.rate_bytes_per_s)));
            }
            _ => {}
        }
        let (soc, loc) = self.layout(logical_bytes, sector_bytes);
        if soc.1 == 0 && self.soc_fraction > 0.0 {
            return Err(bad("soc_fraction", format!("{} of {logical_bytes} bytes is less than one bucket", self.soc_fraction)));
        }
        if loc.1 < 2 && self.utilization > self.soc_fraction {
            return Err(bad(
                "region_bytes",
                format!("the LOC gets fewer than 2 regions of {} bytes; lower region_bytes or raise utilization", self.region_bytes),
            ));
        }
        Ok(())
    }

    /// ((SOC start byte, buckets), (LOC start byte, regions)) on a device of `logical_bytes`.
    pub fn layout(&self, logical_bytes: u64, _sector_bytes: u64) -> ((u64, u64), (u64, u64)) {
        let soc_bytes = (self.soc_fraction * logical_bytes as f64) as u64;
        let buckets = soc_bytes / self.bucket_bytes as u64;
        let soc_end = buckets * self.bucket_bytes as u64;
        let cache_bytes = ((self.utilization * logical_bytes as f64) as u64).min(logical_bytes);
        let regions = cache_bytes.saturating_sub(soc_end) / self.region_bytes;
        ((0, buckets), (soc_end, regions))
    }
}
