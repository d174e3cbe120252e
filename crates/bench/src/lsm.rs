//! lsm-deletion store speed: a 50/50 put/get mix of 1 KiB values through the Rust API, on a
//! data-backed ZNS device with the timing model on (docs/PERFORMANCE.md).

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_lsm::{LsmConfig, Store};

pub fn run() {
    let mut c = ssdlab_core::media::presets::preset("zns-ssd").unwrap();
    c.geometry.channels = 4;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 2;
    c.geometry.pages_per_block = 64;
    c.geometry.blocks_per_plane = 64;
    c.zns.zone_capacity = 1.0;
    c.timing.read_priority = true;
    assert!(c.timing.enabled);
    let cfg = LsmConfig { memtable_bytes: 2 << 20, sst_target_bytes: 2 << 20, level1_bytes: 8 << 20, ..Default::default() };
    let mut s = Store::new(c, cfg).expect("bench store");
    let keys = 200_000u64;
    let value = vec![b'v'; 1024];
    let gap_ns = 10_000u64; // 100 K operations per simulated second
    let mut t = 0u64;
    for k in 0..keys {
        t += gap_ns;
        s.advance_to(t).unwrap();
        s.put(&k.to_be_bytes(), &value).unwrap();
    }
    let ops = 1_000_000u64;
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    let mut hits = 0u64;
    let w = Instant::now();
    for i in 0..ops {
        t += gap_ns;
        s.advance_to(t).unwrap();
        let k: u64 = rng.gen_range(0..keys);
        if i % 2 == 0 {
            s.put(&k.to_be_bytes(), &value).unwrap();
        } else {
            hits += s.get(&k.to_be_bytes()).unwrap().value.is_some() as u64;
        }
    }
    let secs = w.elapsed().as_secs_f64();
    assert_eq!(hits, ops / 2, "every get finds its key");
    let st = s.stats();
    println!(
        "lsm store, 50/50 put/get, 1 KiB values, {keys} keys, ZNS device data-backed with timing: {:.0} K ops/s ({ops} ops in {secs:.2} s; LSM WA {:.1}, {} compactions); goal 300 K ops/s -> {:.2}x",
        ops as f64 / secs / 1e3,
        (st.wal_write_bytes + st.flush_write_bytes + st.compaction_write_bytes) as f64 / st.app_write_bytes as f64,
        st.compactions_saturation,
        ops as f64 / secs / 300e3
    );
}
