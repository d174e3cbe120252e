//! The data-backed cache (what `ssdlab cache serve` runs): item bytes go through the emulated
//! device, and the index and the bytes on the device agree. A model (the last value set per
//! key) checks that a hit always returns exactly that value, on DRAM, SOC and LOC hits alike,
//! and that every key the index says is present reads back.

mod common;

use std::collections::HashMap;

use proptest::prelude::*;
use ssdlab_cache::config::{CacheConfig, RegionEviction};
use ssdlab_cache::hash::key_of;
use ssdlab_cache::item::Item;
use ssdlab_cache::{HybridCache, Tier};
use ssdlab_core::config::StorageMode;
use ssdlab_core::Device;

fn data_device(fdp: bool) -> Device {
    let mut c = common::device(fdp, false);
    c.storage = StorageMode::Data;
    Device::new(c).unwrap()
}

/// A small cache on the 1 GiB device: 16 KiB of DRAM, ~110 SOC buckets, ~10 LOC regions of
/// 128 KiB, so a few hundred items push data through every tier and out of flash.
fn small_cfg() -> CacheConfig {
    CacheConfig {
        dram_bytes: 16 << 10,
        utilization: 0.0017,
        soc_fraction: 0.0005,
        region_bytes: 128 << 10,
        loc_write_bytes: 32 << 10,
        region_eviction: RegionEviction::Fifo,
        ..CacheConfig::default()
    }
}

fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn item(c: &mut HybridCache, key: &[u8], v: &[u8], flags: u32) -> Item {
    Item { key: key.into(), value: v.into(), flags, expiry_s: 0, cas: c.new_cas() }
}

#[test]
fn metadata_and_data_devices_are_not_mixed_up() {
    let e = HybridCache::new(data_device(true), small_cfg()).err().unwrap().to_string();
    assert!(e.contains("metadata-only"), "{e}");
    let e = HybridCache::data_backed(Device::new(common::device(true, false)).unwrap(), small_cfg()).err().unwrap().to_string();
    assert!(e.contains("storage = \"data\""), "{e}");
    let e = HybridCache::data_backed(data_device(true), CacheConfig { invalidate_on_set: false, ..small_cfg() }).err().unwrap().to_string();
    assert!(e.contains("invalidate_on_set"), "{e}");
    let e =
        HybridCache::data_backed(data_device(true), CacheConfig { small_item_max_bytes: 4060, ..small_cfg() }).err().unwrap().to_string();
    assert!(e.contains("small_item_max_bytes"), "{e}");
}

#[test]
fn values_on_both_sides_of_the_soc_loc_threshold_come_back_exact_from_every_tier() {
    let mut c = HybridCache::data_backed(data_device(true), small_cfg()).unwrap();
    // Sizes around the 2048-byte key + value threshold, and large ones for the LOC.
    let sizes = [10usize, 1024, 2000, 2040, 2100, 9000, 64 << 10, 100 << 10];
    let mut t = 1_000_000u64;
    let mut keys = vec![];
    for (i, &n) in sizes.iter().enumerate() {
        let key = format!("key:{i}:{n}").into_bytes();
        let v = value(i as u64, n);
        let it = item(&mut c, &key, &v, i as u32);
        c.set_item(key_of(&key), it, t).unwrap();
        keys.push((key, v, i as u32));
        t += 1000;
    }
    // Fill DRAM with filler so the items above are evicted to flash.
    for j in 0..200u64 {
        let key = format!("filler:{j}").into_bytes();
        let it = item(&mut c, &key, &value(1000 + j, 300), 0);
        c.set_item(key_of(&key), it, t).unwrap();
    }
    let mut tiers = vec![];
    for (key, v, flags) in &keys {
        tiers.push(c.locate(key_of(key)));
        let got = c.get_item(key_of(key), key, t).unwrap().unwrap_or_else(|| panic!("{} missing", String::from_utf8_lossy(key)));
        assert_eq!((&got.value[..], got.flags), (&v[..], *flags), "{}", String::from_utf8_lossy(key));
    }
    // Small items went to the SOC, the others to the LOC (none is in DRAM any more).
    assert_eq!(&tiers[..3], &[Some(Tier::Soc); 3]);
    assert_eq!(&tiers[4..], &[Some(Tier::Loc); 4]);
    assert!(c.stats.nvm_hits >= 8);
    assert!(c.soc.stats.bucket_writes > 0 && c.loc.stats.regions_flushed > 0);
    let (_, soc, loc) = c.verify_data().unwrap();
    assert!(soc > 0 && loc > 0);
    // The device really holds the bytes: host writes cover the SOC buckets and LOC regions.
    let cn = c.flash.dev.block_device().counters().clone();
    assert!(cn.host_write_bytes >= c.soc.stats.bucket_writes * 4096 + c.loc.stats.regions_flushed * (128 << 10));
}

#[test]
fn colliding_hashes_never_return_another_keys_value() {
    let mut c = HybridCache::data_backed(data_device(false), small_cfg()).unwrap();
    // Only 64 distinct hashes for 512 keys: every tier sees collisions.
    let h = |k: &[u8]| key_of(k) & 63;
    let mut last: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut t = 1u64;
    for round in 0..8u64 {
        for k in 0..512u64 {
            let key = format!("k{k}").into_bytes();
            let n = [5usize, 1500, 3000, 20_000][((k + round) % 4) as usize];
            let v = value(round * 100 + k, n);
            let it = item(&mut c, &key, &v, 0);
            c.set_item(h(&key), it, t).unwrap();
            last.insert(key, v);
            t += 10;
        }
        for k in 0..512u64 {
            let key = format!("k{k}").into_bytes();
            if let Some(got) = c.get_item(h(&key), &key, t).unwrap() {
                assert_eq!(&got.value[..], &last[&key][..], "k{k} got another value");
            }
        }
    }
    assert!(
        c.soc.stats.inserts > 0 && c.loc.stats.regions_evicted > 0 && c.stats.nvm_hits > 0,
        "{:?} {:?} {:?}",
        c.soc.stats,
        c.loc.stats,
        c.stats
    );
    c.verify_data().unwrap();
}

#[test]
fn reinserted_loc_items_keep_their_bytes() {
    let cfg = CacheConfig { reinsert_hits: 1, soc_fraction: 0.0, ..small_cfg() };
    let mut c = HybridCache::data_backed(data_device(true), cfg).unwrap();
    let hot = b"hot-item".to_vec();
    let hv = value(7, 5000);
    let it = item(&mut c, &hot, &hv, 9);
    c.set_item(key_of(&hot), it, 1).unwrap();
    let mut t = 2;
    for j in 0..400u64 {
        let key = format!("cold:{j}").into_bytes();
        let it = item(&mut c, &key, &value(j, 6000), 0);
        c.set_item(key_of(&key), it, t).unwrap();
        t += 1;
        // Read the hot item (from flash: DRAM holds only the last two or three items) so it
        // qualifies for reinsertion.
        if j % 10 == 0 {
            let got = c.get_item(key_of(&hot), &hot, t).unwrap().expect("hot item kept by reinsertion");
            assert_eq!((&got.value[..], got.flags), (&hv[..], 9));
        }
    }
    assert!(c.loc.stats.reinserted > 0 && c.loc.stats.regions_evicted > 0);
    c.verify_data().unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, usize),
    Get(u8),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![0usize..64, 1000usize..2100, 2000usize..2200, 4000usize..70_000];
    prop_oneof![
        4 => (any::<u8>(), size).prop_map(|(k, n)| Op::Set(k, n)),
        4 => any::<u8>().prop_map(Op::Get),
        1 => any::<u8>().prop_map(Op::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// After any sequence of sets, gets and deletes: a hit returns the last value set (never
    /// another or an older one), a deleted key misses, every key the index holds reads back,
    /// and every bucket and region item on the device matches the index.
    #[test]
    fn index_and_device_bytes_agree(ops in prop::collection::vec(op(), 1..400), fdp in any::<bool>()) {
        let mut c = HybridCache::data_backed(data_device(fdp), small_cfg()).unwrap();
        let mut model: HashMap<u8, Option<Vec<u8>>> = HashMap::new();
        let key = |k: u8| format!("key-{k:03}").into_bytes();
        let mut t = 1_000u64;
        for (i, o) in ops.iter().enumerate() {
            t += 1_000;
            match *o {
                Op::Set(k, n) => {
                    let v = value(i as u64, n);
                    let it = item(&mut c, &key(k), &v, k as u32);
                    c.set_item(key_of(&key(k)), it, t).unwrap();
                    model.insert(k, Some(v));
                }
                Op::Get(k) => {
                    let got = c.get_item(key_of(&key(k)), &key(k), t).unwrap();
                    if let Some(got) = got {
                        let want = model.get(&k).cloned().flatten();
                        prop_assert_eq!(Some(&got.value[..]), want.as_deref(), "key {} returned a value that is not its last", k);
                        prop_assert_eq!(got.flags, k as u32);
                    }
                }
                Op::Delete(k) => {
                    let was = c.delete_item(key_of(&key(k)), &key(k), t).unwrap();
                    let present = matches!(model.get(&k), Some(Some(_)));
                    prop_assert!(!was || present, "delete found key {} that was never set or already deleted", k);
                    model.insert(k, None);
                }
            }
        }
        c.verify_data().unwrap();
        for (&k, v) in &model {
            let held = c.locate(key_of(&key(k))).is_some();
            let got = c.get_item(key_of(&key(k)), &key(k), t).unwrap();
            match v {
                None => prop_assert!(got.is_none() && !held, "deleted key {} still there", k),
                Some(v) => {
                    prop_assert!(!held || got.is_some(), "key {} is in the index but does not read back", k);
                    if let Some(g) = got {
                        prop_assert_eq!(&g.value[..], &v[..]);
                    }
                }
            }
        }
        c.verify_data().unwrap();
    }
}
