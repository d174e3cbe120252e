//! Behaviour of the conventional FTL that users rely on: data integrity across GC, the analytic
//! WAF models, determinism, timing effects and wear.

use ssdlab_core::analytic::{alpha_from_spare, waf_fifo, waf_greedy};
use ssdlab_core::config::{Config, GcPolicy, Pattern, StorageMode, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::ftl::{BlockDevice, WriteOpts};
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

fn tiny() -> Config {
    preset("tiny").unwrap()
}

/// 32 GiB in 32 dies of 1 GiB (8 channels x 4 dies x 2 planes x 64 blocks of 8 MiB).
fn many_small_dies() -> Config {
    let mut c = preset("default").unwrap();
    c.geometry.channels = 8;
    c.geometry.dies_per_channel = 4;
    c.geometry.blocks_per_plane = 64;
    c
}

fn uniform_writes(device_writes: f64) -> WorkloadConfig {
    WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 1, stop_device_writes: device_writes, ..Default::default() }
}

/// One device with one die and plane, so the few blocks kept erased for GC are a negligible
/// share of the spare space, as in the analytic model.
fn analytic_device(sf: f64, policy: GcPolicy) -> Config {
    let mut c = tiny();
    c.geometry.channels = 1;
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 16384;
    c.geometry.pages_per_block = 64; // 256 sectors per block
    c.timing.enabled = false;
    c.ftl.spare_factor = sf;
    c.ftl.gc_policy = policy;
    c.precondition.sequential_fill = true;
    c.precondition.random_device_writes = 4.0;
    c
}

#[test]
fn fifo_and_greedy_match_desnoyers_models() {
    for sf in [0.07, 0.15, 0.28] {
        let alpha = alpha_from_spare(sf);
        let mut measured = vec![];
        for policy in [GcPolicy::Fifo, GcPolicy::Greedy] {
            let mut dev = Device::new(analytic_device(sf, policy)).unwrap();
            dev.precondition(&mut no_progress).unwrap();
            let rep = dev.run(&uniform_writes(2.0), &mut no_progress).unwrap();
            dev.ftl().check_invariants();
            measured.push(rep.dlwa());
        }
        let (fifo, greedy) = (measured[0], measured[1]);
        let model_fifo = waf_fifo(alpha);
        let model_greedy = waf_greedy(alpha, 256);
        println!("sf={sf}: fifo {fifo:.3} (model {model_fifo:.3}), greedy {greedy:.3} (model {model_greedy:.3})");
        assert!((fifo / model_fifo - 1.0).abs() < 0.03, "sf={sf}: FIFO WAF {fifo} vs model {model_fifo}");
        assert!((greedy / model_greedy - 1.0).abs() < 0.03, "sf={sf}: greedy WAF {greedy} vs model {model_greedy}");
        assert!(greedy < fifo, "sf={sf}: greedy {greedy} should beat FIFO {fifo}");
    }
}

#[test]
fn every_policy_keeps_invariants_and_cost_benefit_beats_fifo_on_hot_cold() {
    let mut wafs = std::collections::BTreeMap::new();
    for policy in [GcPolicy::Greedy, GcPolicy::CostBenefit, GcPolicy::Fifo, GcPolicy::DChoices] {
        let mut c = tiny();
        c.timing.enabled = false;
        c.ftl.spare_factor = 0.15;
        c.ftl.gc_policy = policy;
        let mut dev = Device::new(c).unwrap();
        dev.precondition(&mut no_progress).unwrap();
        let w = WorkloadConfig {
            pattern: Pattern::Hotcold,
            hot_space: 0.1,
            hot_writes: 0.9,
            queue_depth: 1,
            stop_device_writes: 3.0,
            ..Default::default()
        };
        let rep = dev.run(&w, &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        wafs.insert(format!("{policy:?}"), rep.dlwa());
    }
    println!("{wafs:?}");
    assert!(wafs["CostBenefit"] < wafs["Fifo"], "{wafs:?}");
    assert!(wafs["Greedy"] < wafs["Fifo"], "{wafs:?}");
    assert!(wafs["DChoices"] < wafs["Fifo"], "{wafs:?}");
}

#[test]
fn same_seed_same_metrics_bytes() {
    let run = |seed: u64| {
        let mut c = tiny();
        c.seed = seed;
        c.workload = WorkloadConfig {
            pattern: Pattern::Zipf,
            read_fraction: 0.3,
            trim_fraction: 0.05,
            block_bytes: vec![4096, 65536],
            block_weights: vec![3.0, 1.0],
            stop_ops: 30_000,
            stop_device_writes: 0.0,
            ..Default::default()
        };
        c.precondition.random_device_writes = 0.5;
        c.ftl.gc_policy = GcPolicy::DChoices;
        let mut dev = Device::new(c).unwrap();
        let rep = dev.run_configured(&mut no_progress).unwrap();
        (serde_json::to_string(&rep.metrics).unwrap(), rep.series_csv)
    };
    let a = run(7);
    assert_eq!(a, run(7));
    assert_ne!(a.0, run(8).0);
}

#[test]
fn gc_shows_in_write_tail_latency() {
    // The same workload on a fresh device (no GC) and at steady state (GC on every die).
    let measure = |random_device_writes: f64| {
        let mut c = tiny();
        c.precondition.sequential_fill = random_device_writes > 0.0;
        c.precondition.random_device_writes = random_device_writes;
        c.workload = WorkloadConfig { stop_device_writes: 0.5, queue_depth: 8, ..Default::default() };
        let mut dev = Device::new(c).unwrap();
        let rep = dev.run_configured(&mut no_progress).unwrap();
        let m = rep.metrics;
        (
            m["gc_events"].as_u64().unwrap(),
            m["latency_ns"]["write"]["p99"].as_u64().unwrap(),
            m["throughput"]["host_write_bytes_per_s"].as_f64().unwrap(),
        )
    };
    let (gc_fresh, p99_fresh, bw_fresh) = measure(0.0);
    let (gc_steady, p99_steady, bw_steady) = measure(1.5);
    assert_eq!(gc_fresh, 0);
    assert!(gc_steady > 100);
    assert!(p99_steady > 2 * p99_fresh, "p99 {p99_steady} ns at steady state vs {p99_fresh} ns fresh");
    assert!(bw_steady < bw_fresh / 2.0, "{bw_steady} vs {bw_fresh} B/s");
}

#[test]
fn reads_of_programmed_pages_cost_a_page_read_and_buffered_ones_do_not() {
    let mut c = tiny();
    c.storage = StorageMode::Metadata;
    let mut dev = Device::new(c.clone()).unwrap();
    let ftl = dev.ftl_mut();
    let t = ftl.write(0, 1, None, WriteOpts::default(), 0).unwrap();
    let r = ftl.read(0, 1, None, t).unwrap();
    assert_eq!(ftl.counters().nand_page_reads, 0, "sector still in the write buffer");
    assert!(r - t < 20_000);
    let f = ftl.flush(r).unwrap();
    assert!(f >= r + c.timing.page_program_ns, "flush waits for the padded program");
    let r2 = ftl.read(0, 1, None, f).unwrap();
    assert_eq!(ftl.counters().nand_page_reads, 1);
    assert!(r2 - f >= c.timing.page_read_ns);
    assert_eq!(ftl.counters().pad_sectors as u32, c.geometry.page_bytes / c.geometry.sector_bytes - 1);
}

#[test]
fn write_through_pads_and_waits_for_program() {
    let mut c = tiny();
    c.ftl.write_buffer_bytes = 0;
    let mut dev = Device::new(c.clone()).unwrap();
    let ftl = dev.ftl_mut();
    let done = ftl.write(0, 1, None, WriteOpts::default(), 0).unwrap();
    assert!(done >= c.timing.page_program_ns);
    let spp = (c.geometry.page_bytes / c.geometry.sector_bytes) as u64;
    assert_eq!(ftl.counters().pad_sectors, spp - 1);
    assert_eq!(ftl.counters().nand_write_bytes, c.geometry.page_bytes as u64);
}

#[test]
fn mapping_rebuilds_from_media_alone() {
    let mut c = tiny();
    c.timing.enabled = false;
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let w = WorkloadConfig {
        pattern: Pattern::Zipf,
        block_bytes: vec![4096, 32768],
        block_weights: vec![1.0, 1.0],
        stop_device_writes: 2.0,
        ..Default::default()
    };
    dev.run(&w, &mut no_progress).unwrap();
    dev.flush().unwrap();
    let ftl = dev.ftl();
    assert!(ftl.counters().gc_events > 0);
    let rebuilt = ftl.rebuild_l2p_from_media();
    let wrong = rebuilt.iter().zip(ftl.l2p()).filter(|(a, b)| a != b).count();
    assert_eq!(wrong, 0, "{wrong} of {} sectors rebuilt wrong", rebuilt.len());
}

#[test]
fn wear_levelling_narrows_the_erase_spread() {
    let spread = |dynamic: bool, threshold: u32| {
        let mut c = tiny();
        c.timing.enabled = false;
        c.ftl.wl_dynamic = dynamic;
        c.ftl.wl_static_threshold = threshold;
        c.media.pe_limit = 1_000_000;
        let mut dev = Device::new(c).unwrap();
        dev.precondition(&mut no_progress).unwrap();
        // 95% of writes to 5% of the space: the cold blocks never get erased without static WL.
        let w =
            WorkloadConfig { pattern: Pattern::Hotcold, hot_space: 0.05, hot_writes: 1.0, stop_device_writes: 20.0, ..Default::default() };
        let rep = dev.run(&w, &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        let e = &rep.metrics["erase_count"];
        (e["max"].as_u64().unwrap() - e["min"].as_u64().unwrap(), rep.metrics["wl_static_moves"].as_u64().unwrap())
    };
    let (none, _) = spread(false, 0);
    let (stat, moves) = spread(true, 20);
    println!("spread without WL {none}, with static WL {stat} ({moves} moves)");
    assert!(moves > 0);

    assert!(stat < none / 3, "static WL spread {stat} vs {none} without");
}

#[test]
fn worn_out_device_reports_an_error_not_a_panic() {
    let mut c = tiny();
    c.timing.enabled = false;
    c.media.pe_limit = 3;
    let mut dev = Device::new(c).unwrap();
    let err = dev.run(&uniform_writes(50.0), &mut no_progress).unwrap_err();
    assert!(matches!(err, ssdlab_core::Error::WornOut(_)), "{err}");
    assert!(dev.ftl().counters().grown_bad_blocks > 0);
}

#[test]
fn factory_bad_blocks_are_never_used() {
    let mut c = tiny();
    c.timing.enabled = false;
    c.media.factory_bad_fraction = 0.05;
    c.ftl.spare_factor = 0.2;
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    dev.run(&uniform_writes(1.0), &mut no_progress).unwrap();
    let blocks = dev.ftl().blocks();
    let bad: Vec<_> = blocks.iter().filter(|b| b.factory_bad).collect();
    assert!(!bad.is_empty());
    assert!(bad.iter().all(|b| b.erase_count == 0 && b.valid == 0));
    dev.ftl().check_invariants();
}

#[test]
fn out_of_range_commands_are_errors() {
    let mut dev = Device::new(tiny()).unwrap();
    let n = dev.ftl().logical_sectors();
    let ftl = dev.ftl_mut();
    assert!(ftl.write(n, 1, None, WriteOpts::default(), 0).is_err());
    assert!(ftl.read(n - 1, 2, None, 0).is_err());
    assert!(ftl.trim(u64::MAX, 1, 0).is_err());
    assert!(dev.write(1, &[0u8; 4096], false).is_err(), "misaligned");
}

#[test]
fn gc_counters_tell_paced_from_waiting_collections() {
    // Steady state with the default watermarks: GC paced with host writes (background) keeps
    // free space above the foreground watermark, so no host write waits for a collection.
    let mut c = tiny();
    c.timing.enabled = false;
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let rep = dev.run(&uniform_writes(2.0), &mut no_progress).unwrap();
    let (bg, fg) = (rep.metrics["gc_background_events"].as_u64().unwrap(), rep.metrics["gc_foreground_events"].as_u64().unwrap());
    assert!(bg > 0, "paced GC counted as background");
    assert_eq!(fg, 0, "no host write waited in steady state");
    // Many write streams opening blocks at once (FDP, a handle per region) take free blocks
    // faster than paced GC frees them: host writes then wait for whole collections, and
    // those count as foreground.
    let toml = "preset = \"tiny\"\n[timing]\nenabled = false\n[geometry]\nblocks_per_plane = 256\npages_per_block = 16\n[ftl]\nspare_factor = 0.2\n[fdp]\nenabled = true\nhandles = 8";
    let mut dev = Device::new(ssdlab_core::Config::from_toml_str(toml, "t").unwrap()).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let parts: Vec<(WorkloadConfig, f64)> = (0..8)
        .map(|h| {
            (WorkloadConfig { pattern: Pattern::Uniform, offset: h as f64 / 8.0, span: 0.125, placement: h, ..Default::default() }, 1.0)
        })
        .collect();
    let rep = dev.run_mix(&parts, &uniform_writes(2.0), &mut no_progress).unwrap();
    let (bg, fg) = (rep.metrics["gc_background_events"].as_u64().unwrap(), rep.metrics["gc_foreground_events"].as_u64().unwrap());
    assert!(fg > 0 && bg > fg, "foreground {fg}, background {bg}");
}

#[test]
fn steady_stop_reports_the_settled_dlwa_beside_the_whole_run() {
    // From an empty device, DLWA climbs for a few device writes before it settles: a run that
    // stops at steady state reports the settled figure, above the whole run's average.
    let mut c = tiny();
    c.timing.enabled = false;
    let mut dev = Device::new(c.clone()).unwrap();
    let w = WorkloadConfig {
        pattern: Pattern::Uniform,
        stop: ssdlab_core::config::StopRule::Steady,
        stop_device_writes: 40.0,
        steady_window_device_writes: 0.5,
        steady_tolerance: 0.02,
        ..Default::default()
    };
    let rep = dev.run(&w, &mut no_progress).unwrap();
    let s = &rep.metrics["steady"];
    assert_eq!(s["reached"], true, "{s}");
    assert_eq!(rep.ending, ssdlab_core::driver::Ending::Steady);
    let host = rep.metrics["host_write_bytes"].as_u64().unwrap() as f64;
    assert!(host < 40.0 * dev.logical_bytes() as f64, "stopped before the cap");
    let (steady, whole) = (s["dlwa"].as_f64().unwrap(), s["dlwa_whole_run"].as_f64().unwrap());
    assert_eq!(whole, rep.dlwa());
    assert!(steady > whole * 1.05, "steady {steady} vs whole run {whole}");
    // Against a long fixed-volume run, the steady figure is within the tolerance.
    let mut dev = Device::new(c).unwrap();
    dev.run(&WorkloadConfig { stop_device_writes: 20.0, ..w.clone() }.with_volume_stop(), &mut no_progress).unwrap();
    let tail = dev.run(&uniform_writes(4.0), &mut no_progress).unwrap().dlwa();
    assert!((steady / tail - 1.0).abs() < 0.03, "steady {steady} vs steady-state tail {tail}");
    // A rule that cannot be met ends at the cap and says so.
    let mut dev = Device::new(tiny()).unwrap();
    let w = WorkloadConfig { steady_tolerance: 0.0, stop_device_writes: 3.0, ..w };
    let rep = dev.run(&w, &mut no_progress).unwrap();
    assert_eq!(rep.metrics["steady"]["reached"], false);
    assert!(rep.metrics["steady"]["dlwa"].is_null());
}

#[test]
fn effective_spare_predicts_small_many_die_devices() {
    // 32 GiB over 32 dies x 2 planes holds back a large share of its 7% spare (open blocks of
    // every stream on every die, and the GC watermarks): the analytic model at the nominal
    // spare is far off, at the effective spare (reported in metrics.json and by sizing) it is
    // close.
    let mut c = many_small_dies();
    c.timing.enabled = false;
    c.precondition.random_device_writes = 2.0;
    let sizing = ssdlab_core::sizing::sizing(&c).unwrap();
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let rep = dev.run(&uniform_writes(2.0), &mut no_progress).unwrap();
    let spare = &rep.metrics["spare"];
    let predicted = spare["model_waf_greedy"].as_f64().unwrap();
    let measured = spare["model_waf_greedy_measured"].as_f64().unwrap();
    assert_eq!(Some(predicted), sizing.effective.and_then(|e| e.waf_greedy).map(|w| (w * 1e6).round() / 1e6));
    let nominal = waf_greedy(alpha_from_spare(0.07), dev.block_device().layout().sectors_per_block);
    let dlwa = rep.dlwa();
    println!("DLWA {dlwa:.3}; greedy model at the measured spare {measured:.3}, at the estimated one {predicted:.3}, at the nominal 7% {nominal:.3}");
    assert!((dlwa / measured - 1.0).abs() < 0.01, "DLWA {dlwa} vs model at the measured spare {measured}");
    assert!((dlwa / predicted - 1.0).abs() < 0.06, "DLWA {dlwa} vs model at the estimated spare {predicted}");
    assert!(dlwa > 1.5 * nominal);
}

#[test]
fn narrower_write_points_shrink_the_reserve() {
    // Superblocks over 8 of 32 dies: a quarter of the open blocks, a lower foreground
    // watermark, more spare left to data, lower write amplification; every die still used.
    let run = |ways: u32| {
        let mut c = many_small_dies();
        c.timing.enabled = false;
        c.ftl.write_point_dies = ways;
        let sizing = ssdlab_core::sizing::sizing(&c).unwrap();
        let mut dev = Device::new(c).unwrap();
        dev.precondition(&mut no_progress).unwrap();
        let rep = dev.run(&uniform_writes(1.0), &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        let dies_used = (0..32).filter(|&d| dev.block_device().blocks()[d * 128..(d + 1) * 128].iter().any(|b| b.erase_count > 0)).count();
        (sizing.reserve_steady_blocks.unwrap(), rep.dlwa(), dies_used, rep.metrics["spare"]["model_waf_greedy_measured"].as_f64().unwrap())
    };
    let (r_all, d_all, _, _) = run(0);
    let (r8, d8, dies, m8) = run(8);
    println!("reserve {r_all} -> {r8} blocks, DLWA {d_all:.3} -> {d8:.3} (model at the measured spare {m8:.3})");
    assert!(r8 < r_all / 2.0, "reserve {r8} vs {r_all}");
    assert!(d8 < 0.75 * d_all, "DLWA {d8} vs {d_all}");
    assert!((d8 / m8 - 1.0).abs() < 0.02);
    assert_eq!(dies, 32, "streams spread over every die");
}

/// The FTL's reserve against the number of dies at a fixed capacity (32 GiB, 7% spare, uniform
/// overwrites, greedy), with GC collecting one victim per die at a time (the default) and one
/// victim at a time: docs/gc-models.md's "Reserve per die" table. Run with
/// `cargo test --release -p ssdlab-core --test ftl -- --ignored --nocapture reserve_per_die`.
#[test]
#[ignore = "a sweep of 12 runs (about a minute in release): prints docs/gc-models.md's table"]
fn reserve_per_die() {
    println!("| dies | GC victims at once | reserve estimated | reserve measured (blocks) | per die | spare left | DLWA | greedy model at the measured spare |");
    println!("|---|---|---|---|---|---|---|---|");
    for dies in [4u32, 8, 16, 32] {
        for width in [0u32, 1] {
            let mut c = preset("default").unwrap();
            c.geometry.channels = dies.min(8);
            c.geometry.dies_per_channel = dies / dies.min(8);
            c.geometry.blocks_per_plane = 64 * 32 / dies;
            c.timing.enabled = false;
            c.ftl.gc_parallel_victims = width;
            c.precondition.random_device_writes = 2.0;
            let mut dev = Device::new(c).unwrap();
            dev.precondition(&mut no_progress).unwrap();
            let rep = dev.run(&uniform_writes(2.0), &mut no_progress).unwrap();
            let s = &rep.metrics["spare"];
            let f = |k: &str| s[k].as_f64().unwrap();
            let mean = f("reserved_blocks_mean");
            println!(
                "| {dies} | {} | {:.1} | {mean:.1} | {:.2} | {:.2}% | {:.3} | {:.3} |",
                if width == 0 { dies.to_string() } else { "1".into() },
                f("reserve_steady_blocks"),
                mean / dies as f64,
                100.0 * f("spare_factor_measured"),
                rep.dlwa(),
                f("model_waf_greedy_measured")
            );
        }
    }
}
