//! The store against a model (a BTreeMap), under every policy, with snapshots, scans,
//! flushes, compactions, zone GC and the invariants of every layer.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_lsm::{LsmConfig, Policy, Store};

pub fn tiny_device() -> ssdlab_core::Config {
    let mut c = ssdlab_core::media::presets::preset("zns-ssd").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 1;
    c.geometry.blocks_per_plane = 64;
    c.geometry.pages_per_block = 16;
    c.zns.zone_capacity = 1.0;
    c
}

pub fn tiny_lsm(policy: Policy) -> LsmConfig {
    LsmConfig {
        memtable_bytes: 32 << 10,
        sst_target_bytes: 32 << 10,
        level1_bytes: 128 << 10,
        size_ratio: 4,
        block_bytes: 1024,
        policy,
        delete_threshold_ns: 200_000_000,
        track_deletes: true,
        ..Default::default()
    }
}

/// What the store should hold: key -> value.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn run_model(policy: Policy, seed: u64, ops: usize) {
    let mut s = Store::new(tiny_device(), tiny_lsm(policy)).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut snaps: Vec<(u64, Model)> = vec![];
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut t = 0u64;
    for op in 0..ops {
        t += 50_000;
        s.advance_to(t).unwrap();
        let k = key(rng.gen_range(0..600));
        match rng.gen_range(0..100) {
            0..=44 => {
                let len = rng.gen_range(1..400);
                let v: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                s.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            45..=59 => {
                s.delete(&k).unwrap();
                model.remove(&k);
            }
            60..=94 => {
                let got = s.get(&k).unwrap();
                assert_eq!(got.value.as_ref(), model.get(&k), "op {op}: get {:?}", String::from_utf8_lossy(&k));
                assert!(got.done_ns >= t);
            }
            95..=97 => {
                let lo = key(rng.gen_range(0..600));
                let (got, _) = s.scan(&lo, None, 20).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model.range(lo..).take(20).map(|(a, b)| (a.clone(), b.clone())).collect();
                assert_eq!(got, want, "op {op}: scan");
            }
            _ => {
                if snaps.len() < 3 && rng.gen_bool(0.6) {
                    snaps.push((s.snapshot(), model.clone()));
                } else if !snaps.is_empty() {
                    let (sn, m) = snaps.remove(0);
                    for i in (0..600).step_by(37) {
                        let k = key(i);
                        assert_eq!(s.get_at(&k, sn).unwrap().value.as_ref(), m.get(&k), "op {op}: snapshot read");
                    }
                    s.release(sn).unwrap();
                }
            }
        }
        if op % 2000 == 0 {
            s.check_invariants();
        }
    }
    s.check_invariants();
    let st = s.stats();
    assert!(st.flushes > 10 && st.compactions_saturation > 3, "{st:?}");
    for i in 0..600 {
        let k = key(i);
        assert_eq!(s.get(&k).unwrap().value.as_ref(), model.get(&k));
    }
    let (all, _) = s.scan(b"", None, usize::MAX).unwrap();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

#[test]
fn baseline_matches_the_model() {
    run_model(Policy::Baseline, 1, 12_000);
}

#[test]
fn fade_matches_the_model() {
    run_model(Policy::Fade, 2, 12_000);
}

#[test]
fn zone_aware_matches_the_model() {
    run_model(Policy::ZoneAware, 3, 12_000);
}
