//! The hybrid cache: DRAM tier in front of the small- and large-object engines on one device.
//!
//! Two modes, chosen when the cache is built: metadata-only ([`HybridCache::new`]: items are
//! key hashes and sizes; `get`/`set`/`delete`; the simulation runs) and data-backed
//! ([`HybridCache::data_backed`]: items carry their bytes through the device;
//! `get_item`/`set_item`/`delete_item`; the memcached front-end). Both use the same tiers,
//! index structures and placement; the data path is separate code, so simulations pay nothing
//! for it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use ssdlab_core::config::{Personality, StorageMode};
use ssdlab_core::Device;

use crate::admission::Admission;
use crate::config::CacheConfig;
use crate::dram::{Dram, Evicted};
use crate::error::{CacheError, Result};
use crate::flash::Flash;
use crate::item::{Item, BUCKET_HEADER_BYTES, ITEM_HEADER_BYTES};
use crate::loc::Loc;
use crate::placement::PlacementAllocator;
use crate::soc::Soc;
use crate::values::Values;

/// Where a GET was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    DramHit,
    NvmHit,
    Miss,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Serialize, Deserialize)]
pub struct HybridCache {
    pub cfg: CacheConfig,
    pub flash: Flash,
    pub dram: Dram,
    pub soc: Soc,
    pub loc: Loc,
    adm: Admission,
    ev: Vec<Evicted>,
    pub stats: CacheStats,
    /// A data-backed cache's DRAM item bytes and CAS counter (None: metadata-only; checkpoints
    /// are of metadata-only runs and leave it out).
    #[serde(skip)]
    data: Option<Box<DataState>>,
}

struct DataState {
    values: Values,
    next_cas: u64,
    /// Items with a CAS unique below this were flushed (memcached's `flush_all`): they are
    /// misses wherever they still lie, and are dropped rather than written to flash.
    flushed_below_cas: u64,
}

/// Where the index says an item is (metadata only, no I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Dram,
    Soc,
    Loc,
}

/// Workload seconds for expiry (0 means "never", so time starts at 1).
#[inline]
fn secs(now_ns: u64) -> u32 {
    (now_ns / 1_000_000_000).min(u32::MAX as u64 - 1) as u32 + 1
}

/// The cache's clock in seconds at `now_ns` (expiry times are in these units; 0 = never).
pub fn cache_seconds(now_ns: u64) -> u32 {
    secs(now_ns)
}

impl HybridCache {
    /// Build the cache on a metadata-only `dev` (FDP placement if the device has it and the
    /// config asks): the simulation.
    pub fn new(dev: Device, cfg: CacheConfig) -> Result<HybridCache> {
        if dev.config().storage != StorageMode::Metadata {
            return Err(CacheError::Config("the cache simulation needs a metadata-only device (storage = \"metadata\"); a data-backed device is for `ssdlab cache serve`".into()));
        }
        Self::build(dev, cfg)
    }

    /// Build a data-backed cache on `dev` (storage = "data"): items keep their bytes, which go
    /// through the device. The per-item header sizes are the real ones
    /// ([`ITEM_HEADER_BYTES`], [`BUCKET_HEADER_BYTES`]) in place of the config's
    /// `*_item_overhead_bytes`; stale flash copies are always invalidated on a set (a reader
    /// must never see an older value), and the LOC is never prefilled.
    pub fn data_backed(dev: Device, mut cfg: CacheConfig) -> Result<HybridCache> {
        if dev.config().storage != StorageMode::Data {
            return Err(CacheError::Config("a data-backed cache needs a device with storage = \"data\"".into()));
        }
        if dev.config().personality != Personality::Conventional {
            return Err(CacheError::Config(format!(
                "the cache runs on a conventional or FDP device, not personality {:?}",
                dev.config().personality
            )));
        }
        if !cfg.invalidate_on_set {
            return Err(CacheError::Config(
                "cache.invalidate_on_set = false would let a reader see an older value; a data-backed cache needs it on".into(),
            ));
        }
        cfg.soc_item_overhead_bytes = ITEM_HEADER_BYTES;
        cfg.loc_item_overhead_bytes = ITEM_HEADER_BYTES;
        if cfg.soc_fraction > 0.0
            && cfg.small_item_max_bytes as u64 + (ITEM_HEADER_BYTES + BUCKET_HEADER_BYTES) as u64 > cfg.bucket_bytes as u64
        {
            return Err(CacheError::Config(format!(
                "cache.small_item_max_bytes: {} plus the {ITEM_HEADER_BYTES}-byte item header and the {BUCKET_HEADER_BYTES}-byte bucket header does not fit a {}-byte bucket",
                cfg.small_item_max_bytes, cfg.bucket_bytes
            )));
        }
        if cfg.utilization <= cfg.soc_fraction {
            return Err(CacheError::Config(
                "a data-backed cache needs a LOC for large items: cache.utilization must exceed cache.soc_fraction".into(),
            ));
        }
        let mut c = Self::build(dev, cfg)?;
        c.soc.enable_data();
        c.loc.enable_data();
        c.data = Some(Box::new(DataState { values: Values::default(), next_cas: 1, flushed_below_cas: 0 }));
        Ok(c)
    }

    fn build(dev: Device, cfg: CacheConfig) -> Result<HybridCache> {
        let sector = dev.config().geometry.sector_bytes as u64;
        let logical = dev.logical_bytes();
        cfg.validate(logical, sector)?;
        let ((soc_start, buckets), (loc_start, regions)) = cfg.layout(logical, sector);
        let mut alloc = PlacementAllocator::new(&dev, cfg.fdp_placement);
        let soc_h = alloc.allocate();
        let loc_h = alloc.allocate();
        let soc = Soc::new(soc_start, buckets, cfg.bucket_bytes, cfg.bucket_slots, cfg.bloom_hashes, cfg.soc_item_overhead_bytes, soc_h);
        let loc = Loc::new(
            loc_start,
            regions,
            cfg.region_bytes,
            cfg.loc_write_bytes,
            sector,
            cfg.loc_item_overhead_bytes,
            cfg.region_eviction,
            cfg.reinsert_hits,
            loc_h,
        );
        Ok(HybridCache {
            dram: Dram::new(cfg.dram_bytes, cfg.dram_item_overhead_bytes, cfg.dram_lru_refresh_s),
            adm: Admission::new(&cfg.admission, cfg.seed),
            flash: Flash::new(dev),
            soc,
            loc,
            ev: Vec::with_capacity(64),
            stats: CacheStats::default(),
            cfg,
            data: None,
        })
    }

    /// Start loading what a request for `key` touches first: its DRAM-tier map slot and its
    /// SOC bucket's state (hints only). Issue it a few requests before
    /// [`prefetch_second`](Self::prefetch_second).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        self.dram.prefetch(key);
        if let Some(off) = self.soc.prefetch(key, false) {
            self.flash.dev.prefetch(off, 1);
        }
    }

    /// Start loading what a request for `key` touches next, found through what
    /// [`prefetch`](Self::prefetch) loaded: its DRAM item, its SOC bucket's items and where
    /// the device holds the bucket (hints).
    #[inline]
    pub fn prefetch_second(&self, key: u64) {
        self.dram.prefetch_item(key);
        if let Some(off) = self.soc.prefetch(key, true) {
            self.flash.dev.prefetch(off, 3);
        }
    }

    /// Start loading what pushing the next DRAM victim out will touch: its map slot, and if it
    /// goes to the SOC, its bucket's state and the device's map entry (hints; the victims are
    /// known only one at a time, so these have the current request's time to arrive).
    #[inline]
    pub fn prefetch_victim(&self) {
        if let Some((key, item, clean)) = self.dram.next_victim() {
            if !clean && item <= self.cfg.small_item_max_bytes {
                if let Some(off) = self.soc.prefetch(key, false) {
                    self.flash.dev.prefetch(off, 1);
                }
            }
        }
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
        let r = ev.iter().try_for_each(|e| self.evict_to_flash(e, None, now_ns));
        self.ev = ev;
        r
    }

    /// An item leaving DRAM: skip it if flash already holds it or it expired, else ask the
    /// admission policy and route it by size. `data`: the item's bytes (a data-backed cache).
    fn evict_to_flash(&mut self, e: &Evicted, data: Option<&Item>, now_ns: u64) -> Result<()> {
        if e.nvm_clean {
            self.stats.clean_evictions += 1;
            return Ok(());
        }
        if data.is_some_and(|it| !self.live(it)) {
            return Ok(()); // flushed: nothing to keep
        }
        if e.expiry_s != 0 && e.expiry_s <= secs(now_ns) {
            self.stats.expired_evictions += 1;
            return Ok(());
        }
        let item = data.map_or(e.key_bytes as u64 + e.value_bytes as u64, |it| it.item_bytes());
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
            match data {
                Some(it) => self.soc.insert_item(e.key, it, &mut self.flash)?,
                None => self.soc.insert(e.key, item, e.expiry_s, &mut self.flash)?,
            };
            self.stats.soc_items += 1;
        } else if match data {
            Some(it) => self.loc.insert_item(e.key, it, &mut self.flash)?,
            None => self.loc.insert(e.key, item, e.expiry_s, &mut self.flash)?,
        } {
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

/// Data-backed operations (a cache built with [`HybridCache::data_backed`]). Keys arrive as
/// their bytes and their 64-bit hash (`hash::key_of` for the memcached front-end); the tiers
/// index by the hash and compare the full key on every hit, so two keys with the same hash
/// never see each other's value (the later one replaces the earlier, as in a bucket slot).
impl HybridCache {
    pub fn is_data_backed(&self) -> bool {
        self.data.is_some()
    }

    fn ds(&mut self) -> &mut DataState {
        self.data.as_mut().expect("a data-backed cache (HybridCache::data_backed)")
    }

    /// A fresh CAS unique (every store gets one; a touch keeps the item's).
    pub fn new_cas(&mut self) -> u64 {
        let d = self.ds();
        d.next_cas += 1;
        d.next_cas - 1
    }

    /// memcached's `flush_all`: every item stored so far becomes a miss at once. Nothing is
    /// rewritten: stale DRAM items are dropped as they are met or leave DRAM, stale flash
    /// items are skipped on lookup and overwritten as the flash tiers wrap.
    pub fn flush_all(&mut self) {
        let d = self.ds();
        d.flushed_below_cas = d.next_cas;
    }

    fn live(&self, it: &Item) -> bool {
        self.data.as_ref().is_none_or(|d| it.cas >= d.flushed_below_cas)
    }

    /// The lookup of GET without its effects: DRAM (no LRU update), then SOC, then LOC.
    fn find_item(&mut self, hash: u64, key: &[u8], now_s: u32) -> Result<Option<(Arc<Item>, Tier)>> {
        let d = self.data.as_ref().expect("a data-backed cache");
        if let Some(it) = d.values.get(hash) {
            // DRAM holds this hash: the flash tiers cannot hold another copy of it (a set
            // invalidates them), so a different key or an expired item is a miss.
            return Ok((it.key[..] == *key && !it.expired(now_s) && self.live(it)).then(|| (it.clone(), Tier::Dram)));
        }
        if let Some(it) = self.soc.lookup_item(hash, key, now_s, &mut self.flash)? {
            return Ok(self.live(&it).then(|| (Arc::new(it), Tier::Soc)));
        }
        Ok(self.loc.lookup_item(hash, key, now_s, &mut self.flash)?.filter(|it| self.live(it)).map(|it| (Arc::new(it), Tier::Loc)))
    }

    /// GET: DRAM, then the SOC, then the LOC; a flash hit is copied into DRAM marked clean.
    pub fn get_item(&mut self, hash: u64, key: &[u8], now_ns: u64) -> Result<Option<Arc<Item>>> {
        self.flash.set_time(now_ns);
        self.stats.gets += 1;
        let now_s = secs(now_ns);
        if self.dram.get(hash, now_s).is_some() {
            let it = self.ds().values.get(hash).expect("a DRAM item without its bytes").clone();
            debug_assert!(!it.expired(now_s), "the DRAM tier and its bytes disagree on expiry");
            if it.key[..] == *key && self.live(&it) {
                self.stats.dram_hits += 1;
                return Ok(Some(it));
            }
            self.stats.misses += 1;
            return Ok(None);
        }
        self.ds().values.remove(hash); // absent, or dropped by the DRAM tier as expired
        match self.find_item(hash, key, now_s)? {
            Some((it, _)) => {
                self.stats.nvm_hits += 1;
                self.dram_insert_item(hash, it.clone(), true, now_ns)?;
                Ok(Some(it))
            }
            None => {
                self.stats.misses += 1;
                Ok(None)
            }
        }
    }

    /// Look `key` up without counting a GET or promoting a flash hit (the checks of add,
    /// replace, cas and touch). Expired items are misses.
    pub fn peek_item(&mut self, hash: u64, key: &[u8], now_ns: u64) -> Result<Option<Arc<Item>>> {
        self.flash.set_time(now_ns);
        Ok(self.find_item(hash, key, secs(now_ns))?.map(|(it, _)| it))
    }

    /// SET: `it` goes to DRAM under `hash`; stale flash copies of the hash are invalidated.
    /// The caller picks its CAS unique ([`HybridCache::new_cas`], or the old one to keep it).
    pub fn set_item(&mut self, hash: u64, it: Item, now_ns: u64) -> Result<()> {
        assert!(!it.key.is_empty() && it.key.len() <= crate::item::KEY_BYTES_MAX);
        self.flash.set_time(now_ns);
        self.stats.sets += 1;
        self.soc.remove_item(hash, &mut self.flash)?;
        self.loc.remove(hash);
        self.dram_insert_item(hash, Arc::new(it), false, now_ns)
    }

    /// DELETE `key`: true if it was present (and not expired). Whatever the tiers hold under
    /// its hash is removed.
    pub fn delete_item(&mut self, hash: u64, key: &[u8], now_ns: u64) -> Result<bool> {
        self.flash.set_time(now_ns);
        self.stats.deletes += 1;
        let found = self.find_item(hash, key, secs(now_ns))?.is_some();
        self.dram.remove(hash);
        self.ds().values.remove(hash);
        self.soc.remove_item(hash, &mut self.flash)?;
        self.loc.remove(hash);
        Ok(found)
    }

    fn dram_insert_item(&mut self, hash: u64, it: Arc<Item>, nvm_clean: bool, now_ns: u64) -> Result<()> {
        let e = Evicted { key: hash, key_bytes: it.key.len() as u32, value_bytes: it.value.len() as u32, expiry_s: it.expiry_s, nvm_clean };
        self.ds().values.insert(hash, it);
        let mut ev = std::mem::take(&mut self.ev);
        ev.clear();
        self.dram.insert(e, secs(now_ns), &mut ev);
        let mut r = Ok(());
        for e in &ev {
            // Every item leaving DRAM (the new one too, if larger than the whole tier) takes
            // its bytes with it.
            let it = self.ds().values.remove(e.key).expect("an evicted DRAM item without its bytes");
            if r.is_ok() {
                r = self.evict_to_flash(e, Some(&it), now_ns);
            }
        }
        self.ev = ev;
        r
    }

    /// Where the index holds `hash` (DRAM first; no I/O, expiry ignored).
    pub fn locate(&self, hash: u64) -> Option<Tier> {
        if self.dram.contains(hash) {
            Some(Tier::Dram)
        } else if self.soc.holds(hash) {
            Some(Tier::Soc)
        } else if self.loc.holds(hash) {
            Some(Tier::Loc)
        } else {
            None
        }
    }

    /// Items in DRAM (with their bytes), in SOC buckets, in the LOC index. A flash hit copied
    /// into DRAM is counted in both.
    pub fn item_counts(&self) -> (u64, u64, u64) {
        (self.dram.len() as u64, self.soc.items(), self.loc.items() as u64)
    }

    /// Check that the index and the bytes agree everywhere: every DRAM entry has its bytes
    /// (and no bytes lack an entry), every SOC bucket and every LOC item on the device parses
    /// and matches the index. Reads the whole flash cache: for tests and small caches.
    pub fn verify_data(&mut self) -> Result<(u64, u64, u64)> {
        let d = self.data.as_ref().expect("a data-backed cache");
        assert_eq!(d.values.len(), self.dram.len(), "DRAM entries != DRAM item bytes");
        for h in d.values.hashes() {
            assert!(self.dram.contains(h), "bytes of {h:#x} kept without a DRAM entry");
        }
        let soc = self.soc.verify_data(&mut self.flash)?;
        let loc = self.loc.verify_data(&mut self.flash)?;
        Ok((self.dram.len() as u64, soc, loc))
    }
}
