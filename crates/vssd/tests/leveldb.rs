//! The LevelDB-like store on a vSSD: leveled compaction with LevelDB's shape, its write
//! amplification, level sizes and write stalls.

use std::collections::HashSet;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_vssd::apps::{KvStore, LevelKv, LevelKvConfig, Value};
use ssdlab_vssd::flashblox::{BlockApi, FlashBlox, VssdIo};
use ssdlab_vssd::{device_config, FlashBloxConfig, Isolation, Placement};

fn fb(timing: bool, chunks_per_die: u32) -> FlashBlox {
    let mut c = device_config("quick").unwrap();
    c.geometry.blocks_per_plane = chunks_per_die;
    c.timing.enabled = timing;
    FlashBlox::new(&c, FlashBloxConfig::default()).unwrap()
}

/// LevelDB's proportions at 1/16: 256 KiB memtable, 128 KiB tables, 640 KiB level 1.
fn small() -> LevelKvConfig {
    LevelKvConfig { memtable_bytes: 256 << 10, table_bytes: 128 << 10, level1_bytes: 640 << 10, ..Default::default() }
}

#[test]
fn leveled_compaction_keeps_levels_near_their_targets_at_leveldb_like_write_amplification() {
    let mut f = fb(false, 256);
    let v = f.alloc_virtual_ssd(Isolation::Die, 1, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let mut io = VssdIo { fb: &mut f, id: v };
    let cfg = small();
    let mut kv = LevelKv::new(&io, cfg.clone()).unwrap();
    let n = 30_000u64;
    let mut rng = Pcg64Mcg::seed_from_u64(3);
    let mut deleted = HashSet::new();
    let mut t = 0;
    for i in 0..(4 * n) {
        let k = if i < n { i } else { rng.gen_range(0..n) };
        t = kv.put(&mut io, k, Value::Len(1000), t).unwrap();
        deleted.remove(&k);
        if i % 50 == 7 {
            let d = rng.gen_range(0..n);
            t = kv.delete(&mut io, d, t).unwrap();
            deleted.insert(d);
        }
    }
    let s = kv.stats();
    assert_eq!(s.records, n - deleted.len() as u64);
    // Leveled compaction with T = 10 over four levels: every byte is rewritten several times,
    // about T/2 per level it passes (plus the log): LevelDB's measured WA is near 10.
    let wa = s.device_write_bytes as f64 / s.app_write_bytes as f64;
    assert!((5.0..25.0).contains(&wa), "write amplification {wa:.2}: {s:?}");
    let lb = kv.level_bytes();
    assert!(lb[3] > 0 && lb[4..].iter().all(|&b| b == 0), "four levels in use: {lb:?}");
    for (i, &b) in lb.iter().enumerate().skip(1).take(2) {
        let target = cfg.level1_bytes * 10u64.pow(i as u32 - 1);
        assert!(b <= target + 2 * cfg.table_bytes, "level {i}: {b} bytes, target {target}");
    }
    for k in 0..n {
        let (found, done) = kv.get(&mut io, k, None, t).unwrap();
        assert_eq!(found, !deleted.contains(&k), "key {k}");
        assert!(done >= t);
    }
    let (got, _) = kv.scan(&mut io, 100, 50, t).unwrap();
    assert_eq!(got, 50);
}

#[test]
fn writers_are_slowed_and_stopped_by_leveldb_s_rules_when_the_device_falls_behind() {
    // One die, writes arriving every microsecond: far faster than the die can flush and
    // compact, so level 0 fills (writes slowed at 8 files, stopped at 12) and writers wait
    // for the previous memtable to be written.
    let mut f = fb(true, 256);
    let v = f.alloc_virtual_ssd(Isolation::Die, 1, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let mut io = VssdIo { fb: &mut f, id: v };
    // Small memtables beside a large level 1: each level-0 compaction rewrites ~30 flushes' worth
    // of level 1.
    let cfg = LevelKvConfig { memtable_bytes: 64 << 10, table_bytes: 64 << 10, level1_bytes: 2 << 20, ..Default::default() };
    let mut kv = LevelKv::new(&io, cfg).unwrap();
    let mut late = 0u64;
    let mut t = 0;
    for i in 0..20_000u64 {
        let now = i * 1_000;
        let done = kv.put(&mut io, i % 5_000, Value::Len(1000), now.max(t)).unwrap();
        if done > now.max(t) {
            late += 1;
        }
        t = done;
    }
    assert!(
        kv.slowdowns > 0 && kv.stops > 0 && kv.memtable_waits > 0,
        "slowdowns {}, stops {}, waits {}",
        kv.slowdowns,
        kv.stops,
        kv.memtable_waits
    );
    // Each held write counts once, whatever held it (a delayed write may then wait as well).
    let stalls = kv.stats().write_stalls;
    assert!(stalls <= kv.slowdowns + kv.stops + kv.memtable_waits && stalls >= kv.slowdowns.max(kv.stops).max(kv.memtable_waits));
    assert!(late > 0);
    // The writer ended up paced by the device: 20 000 puts took far longer than 20 ms.
    assert!(t > 100_000_000, "{t} ns");
}

#[test]
fn a_store_at_half_its_vssd_keeps_running_on_few_large_blocks() {
    // Sixteen soft-planes over two channels: 31 blocks of 8 MiB, so a handful of write streams'
    // head blocks and cleaning's moves are a large share of the space. 45% of it in records
    // (LevelDB's space amplification between levels makes that ~65% live), overwritten five
    // times over: cleaning must keep finding room (a head block opened while cleaning once
    // leaked, and the store ran out of space with a third of its units dead).
    let mut f = fb(false, 128);
    let v = f.alloc_virtual_ssd(Isolation::SoftPlane, 4, 1, &Placement { channels: vec![0, 1], spread: true }).unwrap();
    let mut io = VssdIo { fb: &mut f, id: v };
    assert_eq!(io.blocks(), 31);
    let cap = io.blocks() as u64 * io.block_sectors() as u64 * io.sector_bytes() as u64;
    let n = cap * 9 / 20 / 1064;
    let mut kv = LevelKv::new(&io, LevelKvConfig::default()).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(5);
    let mut t = 0;
    for i in 0..(6 * n) {
        let k = if i < n { i } else { rng.gen_range(0..n) };
        t = kv.put(&mut io, k, Value::Len(1024), t).unwrap();
    }
    assert_eq!(kv.stats().records, n);
    assert!(kv.stats().device_write_bytes > 3 * cap, "{:?}", kv.stats());
}

#[test]
fn a_data_backed_device_and_bad_triggers_are_refused() {
    let f = fb(false, 64);
    let mut f = f;
    let v = f.alloc_virtual_ssd(Isolation::Die, 1, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let io = VssdIo { fb: &mut f, id: v };
    let e = LevelKv::new(&io, LevelKvConfig { l0_slowdown_trigger: 2, ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("compaction <= slowdown <= stop"), "{e}");
    assert!(io.blocks() > 0);
}

mod neighbours {
    use ssdlab_core::config::{Pattern, WorkloadConfig};
    use ssdlab_vssd::apps::{LevelKvConfig, Mix, YcsbSpec};
    use ssdlab_vssd::sim::{run, AppSpec, RunSpec, StoreKind, TenantSpec};
    use ssdlab_vssd::{device_config, Isolation, Placement};

    fn on(channel: u32) -> Placement {
        Placement { channels: vec![channel], spread: true }
    }

    /// A LevelDB-like store under YCSB A (half updates), on half of each die of `channel`.
    fn writer(channel: u32) -> TenantSpec {
        TenantSpec {
            name: "leveldb".into(),
            level: Isolation::SoftPlane,
            tput_level: 3,
            placement: on(channel),
            threads: 8,
            age_writes: 0.2,
            app: AppSpec::Ycsb {
                ycsb: YcsbSpec { mix: Mix::A, records: 20_000, ..Default::default() },
                store: StoreKind::Leveldb,
                kv: Default::default(),
                leveldb: LevelKvConfig { memtable_bytes: 1 << 20, table_bytes: 512 << 10, level1_bytes: 5 << 19, ..Default::default() },
            },
            ..Default::default()
        }
    }

    /// 8 KiB random reads arriving at 1000 a second, on half of each die of `channel`.
    fn reader(channel: u32) -> TenantSpec {
        TenantSpec {
            name: "reader".into(),
            level: Isolation::SoftPlane,
            tput_level: 3,
            placement: on(channel),
            rate_ops: 1000.0,
            app: AppSpec::Disk {
                io: WorkloadConfig {
                    pattern: Pattern::Uniform,
                    read_fraction: 1.0,
                    block_bytes: vec![8192],
                    block_weights: vec![1.0],
                    ..Default::default()
                },
                disk_fraction: 0.5,
            },
            ..Default::default()
        }
    }

    fn reader_p99(tenants: Vec<TenantSpec>) -> (f64, serde_json::Value) {
        let spec = RunSpec { tenants, warmup_ms: 100.0, duration_ms: 1000.0, ..Default::default() };
        let s = run(&device_config("quick").unwrap(), &spec, &mut |_| true).unwrap().summary;
        let r = s["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "reader").unwrap().clone();
        (r["latency"]["read"]["p99_us"].as_f64().unwrap(), s)
    }

    #[test]
    fn compaction_bursts_reach_a_reader_on_the_same_dies_and_not_one_on_its_own_channel() {
        // The reader first everywhere: a tenant's generator's seed is its place in the list.
        let (alone, _) = reader_p99(vec![reader(1)]);
        let (own, _) = reader_p99(vec![reader(1), writer(0)]);
        let (shared, s) = reader_p99(vec![reader(0), writer(0)]);
        let w = &s["tenants"][1]["app"];
        eprintln!("alone {alone} us, own channel {own} us, shared dies {shared} us; writer {w}");
        assert!(w["stats"]["compactions"].as_u64().unwrap() > 10, "{w}");
        // Its own channel: nothing shared, the same tail.
        assert!((own - alone).abs() <= 0.01 * alone, "p99 {alone} us alone, {own} us beside LevelDB on another channel");
        // The same dies: reads queue behind the flushes' and compactions' programs.
        assert!(shared > 3.0 * alone, "p99 {alone} us alone, {shared} us on LevelDB's dies");
    }
}
