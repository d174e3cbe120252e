//! Isolation: a tenant's garbage collection does not reach a channel-isolated neighbour,
//! while it does reach one sharing its dies; the timed runs are deterministic.

use ssdlab_core::config::{Pattern, WorkloadConfig};
use ssdlab_vssd::apps::{LogKvConfig, Mix, YcsbSpec};
use ssdlab_vssd::sim::{run, AppSpec, RunSpec, StoreKind, TenantSpec};
use ssdlab_vssd::{device_config, Isolation, Placement};

fn victim(level: Isolation, placement: Placement) -> TenantSpec {
    TenantSpec {
        name: "victim".into(),
        level,
        tput_level: if level == Isolation::Channel { 0 } else { 3 },
        placement,
        threads: 8,
        app: AppSpec::Ycsb {
            ycsb: YcsbSpec { mix: Mix::B, records: 30_000, ..Default::default() },
            store: StoreKind::Log,
            kv: LogKvConfig::default(),
            leveldb: Default::default(),
        },
        ..Default::default()
    }
}

/// Random 64 KiB writes on a nearly full log-structured disk: cleaning all the time.
fn aggressor(level: Isolation, placement: Placement) -> TenantSpec {
    TenantSpec {
        name: "aggressor".into(),
        level,
        tput_level: if level == Isolation::Channel { 0 } else { 3 },
        placement,
        threads: 16,
        age_writes: 0.5,
        app: AppSpec::Disk {
            io: WorkloadConfig {
                pattern: Pattern::Uniform,
                read_fraction: 0.0,
                block_bytes: vec![65536],
                block_weights: vec![1.0],
                ..Default::default()
            },
            disk_fraction: 0.85,
        },
        ..Default::default()
    }
}

fn p99_and_rate(spec: &RunSpec) -> (f64, f64, serde_json::Value) {
    let r = run(&device_config("quick").unwrap(), spec, &mut |_| true).unwrap();
    let v = r.summary["tenants"][0].clone();
    assert_eq!(v["name"], "victim");
    (v["latency"]["all"]["p99_us"].as_f64().unwrap(), v["ops_per_s"].as_f64().unwrap(), r.summary)
}

fn spec(tenants: Vec<TenantSpec>) -> RunSpec {
    RunSpec { tenants, warmup_ms: 100.0, duration_ms: 600.0, ..Default::default() }
}

#[test]
fn a_neighbours_gc_does_not_move_a_channel_isolated_tenants_p99() {
    let ch = |c: u32| Placement { channels: vec![c], spread: false };
    let (alone, rate_alone, _) = p99_and_rate(&spec(vec![victim(Isolation::Channel, ch(0))]));
    let (busy, rate_busy, s) = p99_and_rate(&spec(vec![victim(Isolation::Channel, ch(0)), aggressor(Isolation::Channel, ch(1))]));
    // The neighbour really is collecting garbage.
    let agg = &s["tenants"][1]["app"]["stats"];
    assert!(agg["gc_victims"].as_u64().unwrap() > 20, "{agg}");
    // Bound: within 1% (nothing on the victim's channel is shared, so the model gives the same
    // figures exactly).
    assert!((busy - alone).abs() <= 0.01 * alone, "p99 {alone} us alone, {busy} us beside GC");
    assert!((rate_busy - rate_alone).abs() <= 0.01 * rate_alone, "{rate_alone} vs {rate_busy} ops/s");

    // The same pair on shared dies (soft-planes over channels 0 and 1): the neighbour's GC
    // shows in the victim's tail.
    let both = Placement { channels: vec![0, 1], spread: true };
    let (sp_alone, _, _) = p99_and_rate(&spec(vec![victim(Isolation::SoftPlane, both.clone())]));
    let (sp_busy, _, _) = p99_and_rate(&spec(vec![victim(Isolation::SoftPlane, both.clone()), aggressor(Isolation::SoftPlane, both)]));
    assert!(sp_busy > 2.0 * sp_alone, "soft-plane p99 {sp_alone} us alone, {sp_busy} us beside GC");
}

#[test]
fn timed_runs_are_deterministic() {
    let ch = |c: u32| Placement { channels: vec![c], spread: false };
    let mut s = spec(vec![victim(Isolation::Channel, ch(0)), aggressor(Isolation::Die, Placement { channels: vec![1, 2], spread: true })]);
    s.duration_ms = 200.0;
    s.series_ms = 50.0;
    let a = run(&device_config("quick").unwrap(), &s, &mut |_| true).unwrap().summary;
    let b = run(&device_config("quick").unwrap(), &s, &mut |_| true).unwrap().summary;
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

#[test]
fn a_run_reports_progress_through_its_set_up_and_stops_there_on_request() {
    let ch = |c: u32| Placement { channels: vec![c], spread: false };
    let s = spec(vec![victim(Isolation::Channel, ch(0)), aggressor(Isolation::Channel, ch(1))]);
    let dev = device_config("quick").unwrap();
    let mut seen = vec![];
    let r = run(&dev, &s, &mut |f| {
        seen.push(f);
        true
    })
    .unwrap();
    assert!(!r.interrupted);
    // Loading and ageing the tenants is a good part of the run, and is heard as it goes:
    // the fraction only grows, from near 0 to near 1.
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(seen[0] < 0.1 && *seen.last().unwrap() > 0.9 && *seen.last().unwrap() <= 1.0, "{seen:?}");
    let in_setup = seen.iter().filter(|&&f| f < 0.2).count();
    assert!(in_setup >= 3, "{seen:?}");

    // Stopped while setting up (a Ctrl-C): it returns at once, marked interrupted.
    let mut calls = 0;
    let r = run(&dev, &s, &mut |f| {
        calls += 1;
        f < 0.05
    })
    .unwrap();
    assert!(r.interrupted && r.summary["phase"] == "setup", "{}", r.summary);
    // ... at the first report past the point asked for, well before the run's end.
    let first = seen.iter().position(|&f| f >= 0.05).unwrap();
    assert_eq!(calls, first + 1, "{seen:?}");
    assert!(seen[first] < 0.2, "{seen:?}");
}
