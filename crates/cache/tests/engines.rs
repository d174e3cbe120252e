//! Semantics of the tiers and engines: hits, evictions, FIFO order in buckets, region
//! eviction order, Bloom filters without false negatives, and the device I/O each op issues.

mod common;

use ssdlab_cache::config::{CacheConfig, RegionEviction};
use ssdlab_cache::flash::Flash;
use ssdlab_cache::loc::Loc;
use ssdlab_cache::placement::PlacementHandle;
use ssdlab_cache::soc::Soc;
use ssdlab_cache::{HybridCache, Outcome};
use ssdlab_core::Device;

fn flash(fdp: bool) -> Flash {
    Flash::new(Device::new(common::device(fdp, false)).unwrap())
}

/// The fingerprints that stand for `keys` in their buckets.
fn fps(keys: &[u64]) -> Vec<u32> {
    keys.iter().map(|&k| ssdlab_cache::buckets::fingerprint(k)).collect()
}

/// `n` distinct keys that hash to bucket `b` of `soc`.
fn keys_in_bucket(soc: &Soc, b: u64, n: usize) -> Vec<u64> {
    (0u64..).map(ssdlab_cache::hash::mix64).filter(|&k| soc.bucket_of(k) == b).take(n).collect()
}

#[test]
fn soc_bucket_is_fifo_and_every_change_is_a_bucket_read_modify_write() {
    let mut f = flash(true);
    let mut soc = Soc::new(0, 64, 4096, 32, 4, 8, PlacementHandle::DEFAULT);
    let ks = keys_in_bucket(&soc, 5, 6);
    // 1000-byte items (+8 header): four fit in a 4096-byte bucket.
    for &k in &ks[..4] {
        assert_eq!(soc.insert(k, 1000, 0, &mut f).unwrap(), 0);
    }
    assert_eq!(soc.bucket_fingerprints(5), fps(&ks[..4]));
    let c = f.dev.block_device().counters().clone();
    assert_eq!((c.host_read_cmds, c.host_write_cmds), (4, 4), "one bucket read and one bucket write per insert");
    assert_eq!(c.host_write_bytes, 4 * 4096);
    // The fifth evicts the oldest; re-inserting an existing key moves it to the back.
    assert_eq!(soc.insert(ks[4], 1000, 0, &mut f).unwrap(), 1);
    assert_eq!(soc.bucket_fingerprints(5), fps(&[ks[1], ks[2], ks[3], ks[4]]));
    assert_eq!(soc.insert(ks[1], 1000, 0, &mut f).unwrap(), 0);
    assert_eq!(soc.bucket_fingerprints(5), fps(&[ks[2], ks[3], ks[4], ks[1]]));
    assert_eq!(soc.lookup(ks[0], 1, &mut f).unwrap(), None);
    assert_eq!(soc.lookup(ks[3], 1, &mut f).unwrap(), Some((1000, 0)));
    // A delete rewrites the bucket only if the key is there.
    let w0 = f.dev.block_device().counters().host_write_cmds;
    assert!(soc.remove(ks[3], &mut f).unwrap());
    assert!(!soc.remove(ks[3], &mut f).unwrap());
    assert_eq!(f.dev.block_device().counters().host_write_cmds, w0 + 1);
    assert_eq!(soc.bucket_fingerprints(5), fps(&[ks[2], ks[4], ks[1]]));
}

#[test]
fn soc_bloom_filters_have_no_false_negatives_and_save_reads() {
    let mut f = flash(false);
    let mut soc = Soc::new(0, 256, 4096, 32, 4, 8, PlacementHandle::DEFAULT);
    let mut present = std::collections::HashSet::new();
    let key_of: std::collections::HashMap<u32, u64> = (0..5000u64).map(|k| (ssdlab_cache::buckets::fingerprint(k), k)).collect();
    assert_eq!(key_of.len(), 5000, "the test's keys have distinct fingerprints");
    let mut rng = 12345u64;
    for i in 0..20_000u64 {
        rng = ssdlab_cache::hash::mix64(rng + i);
        let k = rng % 5000;
        if rng.is_multiple_of(3) {
            soc.remove(k, &mut f).unwrap();
        } else {
            soc.insert(k, 100 + (rng % 900) as u32, 0, &mut f).unwrap();
        }
        if i % 1000 == 999 {
            present.clear();
            for b in 0..256 {
                present.extend(soc.bucket_fingerprints(b).iter().map(|f| key_of[f]));
            }
            for &k in &present {
                assert!(soc.may_contain(k), "Bloom filter lost key {k}");
            }
        }
    }
    // Lookups of absent keys mostly stop at the filter.
    let before = soc.stats;
    for k in 1_000_000..1_010_000u64 {
        assert_eq!(soc.lookup(k, 1, &mut f).unwrap(), None);
    }
    let rejected = soc.stats.bloom_rejects - before.bloom_rejects;
    assert!(rejected > 5_000, "only {rejected} of 10000 absent keys rejected by the filters");
    assert_eq!(soc.stats.bucket_reads - before.bucket_reads, 10_000 - rejected);
}

#[test]
fn loc_regions_flush_when_full_and_evict_in_fifo_or_lru_order() {
    for policy in [RegionEviction::Fifo, RegionEviction::Lru] {
        let mut f = flash(true);
        // 4 regions of 64 KiB; items of 16 KiB - 24 header: 4 per region.
        let mut loc = Loc::new(1 << 20, 4, 65536, 16384, 4096, 24, policy, 0, PlacementHandle { pid: Some(2) });
        let item = 16384 - 24;
        for k in 0..12u64 {
            assert!(loc.insert(k, item, 0, &mut f).unwrap());
        }
        // Regions 0, 1 sealed; region 2 open and full; nothing evicted yet.
        assert_eq!(loc.eviction_order(), vec![0, 1]);
        assert_eq!(loc.stats.regions_flushed, 2);
        assert_eq!(f.dev.block_device().counters().host_write_bytes, 2 * 65536);
        // A hit on region 0 from flash is one read of the item's sectors; in the open buffer, none.
        let r0 = f.dev.block_device().counters().host_read_bytes;
        assert_eq!(loc.lookup(1, 1, &mut f).unwrap(), Some((item, 0)));
        assert_eq!(f.dev.block_device().counters().host_read_bytes, r0 + 16384);
        assert_eq!(loc.lookup(9, 1, &mut f).unwrap(), Some((item, 0)));
        assert_eq!(loc.stats.buffer_hits, 1);
        assert_eq!(f.dev.block_device().counters().host_read_bytes, r0 + 16384);
        // Fill region 3, then one more item forces an eviction.
        for k in 12..17u64 {
            loc.insert(k, item, 0, &mut f).unwrap();
        }
        let victim = if policy == RegionEviction::Fifo { 0 } else { 1 };
        assert_eq!(loc.stats.regions_evicted, 1);
        assert_eq!(loc.open_region(), Some(victim));
        let gone: Vec<u64> = (0..8).filter(|&k| loc.lookup(k, 1, &mut f).unwrap().is_none()).collect();
        let expect: Vec<u64> = if policy == RegionEviction::Fifo { vec![0, 1, 2, 3] } else { vec![4, 5, 6, 7] };
        assert_eq!(gone, expect, "{policy:?}");
        // LOC writes carry the LOC's placement identifier.
        let m = f.dev.ftl().fdp_metrics(&[]).unwrap();
        let h2 = m["handles"].as_array().unwrap().iter().find(|h| h["handle"] == 2).unwrap().clone();
        assert_eq!(h2["host_write_bytes"].as_u64().unwrap(), f.dev.block_device().counters().host_write_bytes);
    }
}

#[test]
fn loc_reinserts_popular_items_of_an_evicted_region() {
    let mut f = flash(false);
    let mut loc = Loc::new(0, 3, 65536, 65536, 4096, 0, RegionEviction::Fifo, 1, PlacementHandle::DEFAULT);
    for k in 0..8u64 {
        loc.insert(k, 16384, 0, &mut f).unwrap(); // regions 0 and 1 full, 1 open
    }
    loc.insert(8, 16384, 0, &mut f).unwrap(); // seals 1, opens 2
    assert!(loc.lookup(2, 1, &mut f).unwrap().is_some()); // key 2 (region 0) hit once on flash
    for k in 9..12u64 {
        loc.insert(k, 16384, 0, &mut f).unwrap();
    }
    loc.insert(12, 16384, 0, &mut f).unwrap(); // evicts region 0, reinserting key 2
    assert_eq!(loc.stats.reinserted, 1);
    assert!(loc.lookup(2, 1, &mut f).unwrap().is_some());
    assert!(loc.lookup(0, 1, &mut f).unwrap().is_none());
}

#[test]
fn hybrid_cache_serves_from_dram_then_flash_and_honours_ttl() {
    let dev = Device::new(common::device(true, false)).unwrap();
    let cfg = CacheConfig { dram_bytes: 4096, region_bytes: 131072, loc_write_bytes: 131072, utilization: 0.5, ..Default::default() };
    let mut c = HybridCache::new(dev, cfg).unwrap();
    assert_eq!(c.soc.handle.pid, Some(1));
    assert_eq!(c.loc.handle.pid, Some(2));
    c.set(1, 10, 500, 0, 0).unwrap();
    assert_eq!(c.get(1, 10, 1).unwrap(), Outcome::DramHit);
    // Push key 1 out of the 4 KiB DRAM tier: it goes to the SOC.
    for k in 100..120u64 {
        c.set(k, 10, 500, 0, 2).unwrap();
    }
    assert!(c.stats.soc_items > 0);
    assert_eq!(c.get(1, 10, 3).unwrap(), Outcome::NvmHit);
    assert_eq!(c.get(1, 10, 4).unwrap(), Outcome::DramHit); // promoted
                                                            // A large item goes to the LOC; an item with a TTL expires.
    c.set(7, 10, 60_000, 0, 5).unwrap();
    c.set(8, 10, 100, 5, 5).unwrap();
    assert_eq!(c.get(8, 10, 4_000_000_000).unwrap(), Outcome::DramHit);
    assert_eq!(c.get(8, 10, 6_000_000_000).unwrap(), Outcome::Miss);
    assert!(c.stats.loc_items >= 1 || c.dram.contains(7));
    assert!(c.delete(1, 7_000_000_000).unwrap());
    assert_eq!(c.get(1, 10, 7_000_000_001).unwrap(), Outcome::Miss);
    // Without FDP on the device every engine gets the default handle.
    let dev = Device::new(common::device(false, false)).unwrap();
    let c = HybridCache::new(dev, CacheConfig { region_bytes: 131072, loc_write_bytes: 131072, ..Default::default() }).unwrap();
    assert_eq!((c.soc.handle.pid, c.loc.handle.pid), (None, None));
}

#[test]
fn bad_configs_are_errors_not_panics() {
    let dev = || Device::new(common::device(true, false)).unwrap();
    for (cfg, key) in [
        (CacheConfig { utilization: 1.5, ..Default::default() }, "utilization"),
        (CacheConfig { soc_fraction: 0.9, utilization: 0.5, ..Default::default() }, "soc_fraction"),
        (CacheConfig { bucket_bytes: 1000, ..Default::default() }, "bucket_bytes"),
        (CacheConfig { bucket_bytes: 1 << 17, ..Default::default() }, "bucket_bytes"),
        (CacheConfig { bucket_slots: 0, ..Default::default() }, "bucket_slots"),
        (CacheConfig { utilization: f64::NAN, ..Default::default() }, "utilization"),
        (CacheConfig { loc_write_bytes: 3 << 20, ..Default::default() }, "loc_write_bytes"),
        (CacheConfig { region_bytes: 1 << 30, ..Default::default() }, "region_bytes"),
        (CacheConfig { small_item_max_bytes: 4095, ..Default::default() }, "small_item_max_bytes"),
    ] {
        let e = HybridCache::new(dev(), cfg).err().expect("must fail").to_string();
        assert!(e.contains(key), "{e} should name {key}");
    }
    let mut data = common::device(true, false);
    data.storage = ssdlab_core::config::StorageMode::Data;
    let e = HybridCache::new(Device::new(data).unwrap(), CacheConfig::default()).err().unwrap().to_string();
    assert!(e.contains("metadata"), "{e}");
}
