//! The hybrid cache: DRAM tier in front of the small- and large-object engines on one device.

use serde::Serialize;
use ssdlab_core::Device;

use crate::admission::Admission;
use crate::config::CacheConfig;
use crate::dram::{Dram, Evicted};
use crate::error::{CacheError, Result};
use crate::flash::Flash;
use crate::loc::Loc;
use crate::placement::PlacementAllocator;
use crate::soc::Soc;

/// Where a GET was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    DramHit,
    NvmHit,
    Miss,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    pub gets: u64,
    pub dram_hits: u64,
    pub nvm_hits: u64,
    pub misses: u64,
    pub sets: u64,
    pub deletes: u64,
    /// Items (and their key + value bytes) the flash engines accepted.
    pub flash_items: u64,
    pub flash_item_bytes: u64,
    pub soc_items: u64,
    pub loc_items: u64,
    pub admission_rejected: u64,
    /// DRAM evictions not written because their flash copy was still current.
    pub clean_evictions: u64,
    pub expired_evictions: u64,
    pub dropped_too_large: u64,
}

pub struct HybridCache {
    pub cfg: CacheConfig,
    pub flash: Flash,
    pub dram: Dram,
    pub soc: Soc,
    pub loc: Loc,
    adm: Admission,
    ev: Vec<Evicted>,
    pub stats: CacheStats,
}

/// Workload seconds for expiry (0 means "never", so time starts at 1).
#[inline]
fn secs(now_ns: u64) -> u32 {
    (now_ns / 1_000_000_000).min(u32::MAX as u64 - 1) as u32 + 1
}

impl HybridCache {
    /// Build the cache on `dev` (FDP placement if the device has it and the config asks).
    pub fn new(dev: Device, cfg: CacheConfig) -> Result<HybridCache> {
        let sector = dev.config().geometry.sector_bytes as u64;
        let logical = dev.logical_bytes();
        cfg.validate(logical, sector)?;
        if dev.config().storage != ssdlab_core::config::StorageMode::Metadata {
            return Err(CacheError::Config("the cache simulation needs a metadata-only device (storage = \"metadata\")".into()));
        }
        let ((soc_start, buckets), (loc_start, regions)) = cfg.layout(logical, sector);
        let mut alloc = PlacementAllocator::new(&dev, cfg.fdp_placement);
        let soc_h = alloc.allocate();
        let loc_h = alloc.allocate();
        let soc = Soc::new(soc_start, buckets, cfg.bucket_bytes, cfg.bucket_slots, cfg.bloom_hashes, cfg.soc_item_overhead_bytes, soc_h);
        let loc = Loc::new(loc_start, regions, cfg.region_bytes, cfg.loc_write_bytes, sector, cfg.loc_item_overhead_bytes, cfg.region_eviction, cfg.reinsert_hits, loc_h);
        Ok(HybridCache {
            dram: Dram::new(cfg.dram_bytes, cfg.dram_item_overhead_bytes, cfg.dram_lru_refresh_s),
            adm: Admission::new(&cfg.admission, cfg.seed),
            flash: Flash::new(dev),
            soc,
            loc,
            ev: Vec::with_capacity(64),
            stats: CacheStats::default(),
            cfg,
        })
    }

    /// GET: DRAM, then the SOC (Bloom filter first), then the LOC. A flash hit is copied into
    /// DRAM marked clean (its flash copy stays current).
    pub fn get(&mut self, key: u64, key_bytes: u32, now_ns: u64) -> Result<Outcome> {
        self.flash.set_time(now_ns);
        self.stats.gets += 1;
        let now_s = secs(now_ns);
        if self.dram.get(key, now_s).is_some() {
            self.stats.dram_hits += 1;
            return Ok(Outcome::DramHit);
        }
        let mut found = self.soc.lookup(key, now_s, &mut self.flash)?;
        if found.is_none() {
            found = self.loc.lookup(key, now_s, &mut self.flash)?;
        }
        match found {
            Some((item_bytes, expiry_s)) => {
                self.stats.nvm_hits += 1;
                let value_bytes = item_bytes.saturating_sub(key_bytes);
                self.dram_insert(Evicted { key, key_bytes, value_bytes, expiry_s, nvm_clean: true }, now_ns)?;
                Ok(Outcome::NvmHit)
            }
            None => {
                self.stats.misses += 1;
                Ok(Outcome::Miss)
            }
        }
    }

    /// SET: the new value goes to DRAM; a stale flash copy is invalidated first.
    pub fn set(&mut self, key: u64, key_bytes: u32, value_bytes: u32, ttl_s: u32, now_ns: u64) -> Result<()> {
        self.flash.set_time(now_ns);
        self.stats.sets += 1;
        if self.cfg.invalidate_on_set {
            self.soc.remove(key, &mut self.flash)?;
            self.loc.remove(key);
        }
        let expiry_s = if ttl_s == 0 { 0 } else { secs(now_ns).saturating_add(ttl_s) };
        self.dram_insert(Evicted { key, key_bytes, value_bytes, expiry_s, nvm_clean: false }, now_ns)
    }

    /// DELETE from every tier; true if some tier held the key.
    pub fn delete(&mut self, key: u64, now_ns: u64) -> Result<bool> {
        self.flash.set_time(now_ns);
        self.stats.deletes += 1;
        let a = self.dram.remove(key);
        let b = self.soc.remove(key, &mut self.flash)?;
        let c = self.loc.remove(key);
        Ok(a || b || c)
    }

    fn dram_insert(&mut self, it: Evicted, now_ns: u64) -> Result<()> {
        let mut ev = std::mem::take(&mut self.ev);
        ev.clear();
        self.dram.insert(it, secs(now_ns), &mut ev);
        let r = ev.iter().try_for_each(|e| self.to_flash(e, now_ns));
        self.ev = ev;
        r
    }

    /// An item leaving DRAM: skip it if flash already holds it or it expired, else ask the
    /// admission policy and route it by size.
    fn to_flash(&mut self, e: &Evicted, now_ns: u64) -> Result<()> {
        if e.nvm_clean {
            self.stats.clean_evictions += 1;
            return Ok(());
        }
        if e.expiry_s != 0 && e.expiry_s <= secs(now_ns) {
            self.stats.expired_evictions += 1;
            return Ok(());
        }
        let item = e.key_bytes as u64 + e.value_bytes as u64;
        if item > u32::MAX as u64 / 2 {
            self.stats.dropped_too_large += 1;
            return Ok(());
        }
        let item = item as u32;
        if !self.adm.admit(item, now_ns) {
            self.stats.admission_rejected += 1;
            return Ok(());
        }
        if item <= self.cfg.small_item_max_bytes && self.soc.buckets > 0 {
            self.soc.insert(e.key, item, e.expiry_s, &mut self.flash)?;
            self.stats.soc_items += 1;
        } else if self.loc.insert(e.key, item, e.expiry_s, &mut self.flash)? {
            self.stats.loc_items += 1;
        } else {
            self.stats.dropped_too_large += 1;
            return Ok(());
        }
        self.stats.flash_items += 1;
        self.stats.flash_item_bytes += item as u64;
        Ok(())
    }
}
