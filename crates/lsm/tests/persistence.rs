//! Deletion persistence measured end to end on a small device: FADE persists every delete
//! at LSM level within D_th, the baseline does not, and once a delete is reported persisted at
//! erase level the NAND holds no byte of its value.

use ssdlab_lsm::workload::PhaseSpec;
use ssdlab_lsm::{run, LsmConfig, Policy, RunSpec};

fn device() -> ssdlab_core::Config {
    let mut c = ssdlab_core::media::presets::preset("zns-ssd").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 1;
    c.geometry.blocks_per_plane = 64;
    c.geometry.pages_per_block = 32;
    c.zns.zone_capacity = 1.0;
    c
}

fn spec(policy: Policy) -> RunSpec {
    RunSpec {
        lsm: LsmConfig {
            memtable_bytes: 64 << 10,
            sst_target_bytes: 64 << 10,
            level1_bytes: 256 << 10,
            size_ratio: 4,
            policy,
            track_deletes: true,
            ..Default::default()
        },
        phases: vec![
            PhaseSpec { name: "load".into(), inserts: 6000, entry_bytes: 256, ..Default::default() },
            PhaseSpec {
                name: "deletes".into(),
                inserts: 9000,
                updates: 7000,
                point_deletes: 2000,
                point_lookups: 2000,
                entry_bytes: 256,
                ..Default::default()
            },
            PhaseSpec { name: "lookups".into(), point_lookups: 4000, entry_bytes: 256, ..Default::default() },
        ],
        seed: 11,
        ops_per_s: 20_000.0,
        delete_threshold_fraction: 0.16,
        series_points: 20,
        audit: true,
    }
}

#[test]
fn fade_persists_every_delete_within_the_threshold_and_erased_values_are_gone() {
    let r = run(device(), &spec(Policy::Fade), None, &mut |_| true).unwrap();
    let p = &r.summary["deletion_persistence"];
    let lsm = &p["lsm_level"];
    assert!(lsm["eligible"].as_u64().unwrap() > 1000, "{p}");
    assert_eq!(p["superseded"], 0, "Lethe-format workloads never write a deleted key again");
    assert_eq!(lsm["within_threshold"], lsm["eligible"], "FADE: every delete persisted at LSM level within D_th: {lsm}");
    let erased = p["erase_level"]["persisted"].as_u64().unwrap();
    assert!(erased > 500, "erase-level persistence reported for {erased} deletes: {p}");
    let a = &r.summary["audit"];
    assert_eq!(a["survivors_erase_persisted"], 0, "deleted values on the NAND after their erase was reported: {a}");
    assert!(a["patterns"].as_u64().unwrap() > 1000 && a["scanned_bytes"].as_u64().unwrap() > 1 << 20, "{a}");
    // The audit does find what is not erased yet: values of deletes still pending.
    let pending_erase = p["deletes"].as_u64().unwrap() - erased;
    if pending_erase > 50 {
        assert!(a["survivors_pending"].as_u64().unwrap() + a["survivors_lsm_persisted"].as_u64().unwrap() > 0, "{a}");
    }
}

#[test]
fn the_baseline_leaves_deletes_unpersisted_past_the_threshold() {
    let r = run(device(), &spec(Policy::Baseline), None, &mut |_| true).unwrap();
    let lsm = &r.summary["deletion_persistence"]["lsm_level"];
    let f = lsm["fraction_within_threshold"].as_f64().unwrap();
    assert!(f < 0.9, "baseline persisted {f} of its deletes within D_th: {lsm}");
    assert_eq!(r.summary["audit"]["survivors_erase_persisted"], 0);
}

#[test]
fn runs_are_deterministic() {
    let a = run(device(), &spec(Policy::ZoneAware), None, &mut |_| true).unwrap();
    let b = run(device(), &spec(Policy::ZoneAware), None, &mut |_| true).unwrap();
    assert!(a.summary == b.summary, "summaries differ");
    assert!(a.series_csv == b.series_csv, "time series differ");
}

/// The zone-aware design starts compactions only when a level saturates: expired tombstone
/// files go first in its queue, they never start a compaction by themselves. The ablation with
/// FADE's TTL trigger does start them, as FADE does.
#[test]
fn the_zone_aware_policy_starts_no_compaction_for_an_expired_ttl_alone() {
    let za = run(device(), &spec(Policy::ZoneAware), None, &mut |_| true).unwrap();
    let lsm = &za.summary["lsm"];
    assert_eq!(lsm["compactions_ttl"], 0, "{lsm}");
    assert!(lsm["compactions_expired_first"].as_u64().unwrap() > 0, "expired files taken first: {lsm}");
    assert_eq!(za.summary["audit"]["survivors_erase_persisted"], 0);

    let mut ablation = spec(Policy::ZoneAware);
    ablation.lsm.zone_aware.ttl_trigger = true;
    let zt = run(device(), &ablation, None, &mut |_| true).unwrap();
    assert!(zt.summary["lsm"]["compactions_ttl"].as_u64().unwrap() > 0, "{}", zt.summary["lsm"]);
    let fade = run(device(), &spec(Policy::Fade), None, &mut |_| true).unwrap();
    assert!(fade.summary["lsm"]["compactions_ttl"].as_u64().unwrap() > 0, "{}", fade.summary["lsm"]);
}
