//! `make bench`: simulator speed and memory, printed as figures and ratios to the goals.
//!
//! Usage: ssdlab-bench [--gib N] [--device-writes X] [--only NAME[,NAME...]]
//!   NAME: notiming | timing | desnoyers | personalities | memory | spi | spi-instant | cache | vssd | lsm | rmml
//!
//! `desnoyers` runs Desnoyers' C simulator (pjd-nu/sssl-ftlsim's greedy engine, built outside
//! the repo as /work/shared/bench/README.md shows) beside ssdlab on the same device, when the
//! environment variable SSSL_GREEDY gives the path of its binary; without it, that line is
//! skipped.

#![forbid(unsafe_code)]

use std::time::Instant;

mod lsm;
mod rmml;
mod spi;
mod uio;

use ssdlab_core::config::{GcPolicy, Pattern, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

/// The allocator the Python module uses (large allocations on huge pages), so the figures are
/// those users get.
#[global_allocator]
static ALLOC: ssdlab_core::media::mem::HugeAlloc = ssdlab_core::media::mem::HugeAlloc;

struct Args {
    gib: u64,
    device_writes: f64,
    only: Option<String>,
    memory_tib: f64,
    /// Raw size of the cache bench's device (a multiple of 16 GiB keeps its shape).
    cache_gib: u64,
    /// The cache bench's timing model: "on", "off" or both (None).
    cache_timing: Option<bool>,
}

fn parse_args() -> Args {
    let mut a = Args { gib: 256, device_writes: 1.0, only: None, memory_tib: 2.0, cache_gib: 16, cache_timing: None };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let val = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--gib" => a.gib = val.parse().expect("--gib N"),
            "--device-writes" => a.device_writes = val.parse().expect("--device-writes X"),
            "--only" => a.only = Some(val),
            "--memory-tib" => a.memory_tib = val.parse().expect("--memory-tib X"),
            "--cache-gib" => {
                a.cache_gib = val.parse().expect("--cache-gib N");
                assert!(a.cache_gib >= 16 && a.cache_gib.is_power_of_two(), "--cache-gib: a power of two, at least 16");
            }
            "--cache-timing" => {
                a.cache_timing = Some(match val.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => panic!("--cache-timing on|off"),
                })
            }
            "-h" | "--help" => {
                println!("ssdlab-bench [--gib N (device size, default 256)] [--device-writes X (measured, default 1)] [--only NAME[,NAME...] of notiming|timing|desnoyers|personalities|memory|spi|spi-instant|cache|vssd|lsm|rmml|uio] [--memory-tib T (default 2)] [--cache-gib N (cache bench device, default 16)] [--cache-timing on|off (default both)]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()))
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The device of a speed run, or a clear word on why `--gib` does not make one (a small
/// device cannot hold the FTL's reserve at the bench's spare).
fn device(c: ssdlab_core::Config, gib: u64) -> Device {
    Device::new(c).unwrap_or_else(|e| {
        eprintln!("ssdlab-bench: --gib {gib}: {e}");
        std::process::exit(2)
    })
}

/// Steady-state 4 KiB uniform random overwrites with greedy GC at 7% spare; returns
/// (flash sector writes/s, host writes/s, WAF).
fn steady_state(gib: u64, timing: bool, device_writes: f64) -> (f64, f64, f64) {
    let mut c = preset("bench-256g").unwrap();
    // 8 channels x 4 dies x 2 planes x 8 MiB blocks = 512 MiB per block-per-plane step.
    c.geometry.blocks_per_plane = ((gib << 30) / (64 * (8 << 20))) as u32;
    c.timing.enabled = timing;
    c.ftl.gc_policy = GcPolicy::Greedy;
    c.ftl.spare_factor = 0.07;
    c.precondition.sequential_fill = true;
    c.precondition.random_device_writes = 1.0;
    let mut dev = device(c, gib);
    let t = Instant::now();
    dev.precondition(&mut no_progress).unwrap();
    eprintln!("  preconditioned {gib} GiB in {:.1} s", t.elapsed().as_secs_f64());
    let sector = dev.config().geometry.sector_bytes as u64;
    let before = dev.ftl().counters().clone();
    let w = WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 64, stop_device_writes: device_writes, ..Default::default() };
    let t = Instant::now();
    let rep = dev.run(&w, &mut no_progress).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let c = dev.ftl().counters();
    let host = (c.host_write_bytes - before.host_write_bytes) / sector;
    let flash = host + (c.gc_relocated_sectors - before.gc_relocated_sectors);
    (flash as f64 / secs, host as f64 / secs, rep.dlwa())
}

/// ssdlab on the device Desnoyers' simulator models: 4 KiB mapping units, erase blocks of 256
/// of them (1 MiB: 64 pages of 16 KiB, four sectors a page), one die of two planes (so the
/// FTL's reserve is a negligible share of the spare, as the model assumes), `gib` GiB raw,
/// greedy, 7% spare; sequential fill, one device write of random overwrites, then
/// `device_writes` measured. Returns (flash writes/s, host writes/s, WAF).
fn single_die(gib: u64, device_writes: f64) -> (f64, f64, f64) {
    let mut c = preset("bench-256g").unwrap();
    c.geometry.channels = 1;
    c.geometry.dies_per_channel = 1;
    c.geometry.planes_per_die = 2;
    c.geometry.page_bytes = 16384;
    c.geometry.sector_bytes = 4096;
    c.geometry.pages_per_block = 64;
    c.geometry.blocks_per_plane = (gib << 30 >> 20) as u32 / 2;
    c.timing.enabled = false;
    c.ftl.gc_policy = GcPolicy::Greedy;
    c.ftl.spare_factor = 0.07;
    c.precondition.sequential_fill = true;
    c.precondition.random_device_writes = 1.0;
    let mut dev = device(c, gib);
    dev.precondition(&mut no_progress).unwrap();
    let before = dev.block_device().counters().clone();
    let w = WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 64, stop_device_writes: device_writes, ..Default::default() };
    let t = Instant::now();
    let rep = dev.run(&w, &mut no_progress).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let c = dev.block_device().counters();
    let host = (c.host_write_bytes - before.host_write_bytes) / 4096;
    let flash = host + (c.gc_relocated_sectors - before.gc_relocated_sectors);
    (flash as f64 / secs, host as f64 / secs, rep.dlwa())
}

/// Desnoyers' C simulator on the same device: (flash writes/s, host writes/s, WAF).
fn sssl(path: &str, gib: u64, device_writes: f64) -> Option<(f64, f64, f64)> {
    let blocks = gib << 30 >> 20;
    let logical = (blocks as f64 * 0.93).floor() as u64;
    let out = std::process::Command::new(path)
        .args([logical.to_string(), blocks.to_string(), "256".into(), "1".into(), device_writes.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| text.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse::<f64>().ok());
    Some((field("flash_writes_per_s=")?, field("host_writes_per_s=")?, field("WAF=")?))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Flash sector writes per second (host + GC relocations) of the personalities on comparable
/// work: 4 KiB random overwrites on the conventional FTL, the same split over 8 FDP handles by
/// address region, the same bytes appended through the zoned log on ZNS, and a host log of
/// whole-chunk vector writes and resets on the open-channel device.
/// Returns (name, flash writes/s, host writes/s, WAF).
fn personalities(gib: u64) -> Vec<(&'static str, f64, f64, f64)> {
    use ssdlab_core::config::{HandleType, Personality};
    let base = || {
        let mut c = preset("bench-256g").unwrap();
        c.geometry.blocks_per_plane = ((gib << 30) / (64 * (8 << 20))) as u32;
        c.timing.enabled = false;
        // 12% spare leaves room for the 9 write streams of the FDP run (one open block per
        // plane and die each); every personality runs at the same spare.
        c.ftl.spare_factor = 0.12;
        c.precondition.sequential_fill = true;
        c.precondition.random_device_writes = 1.0;
        c
    };
    let w = WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 64, stop_device_writes: 1.0, ..Default::default() };
    let mut out = vec![];
    let time = |dev: &mut Device, f: &mut dyn FnMut(&mut Device) -> f64| {
        dev.precondition(&mut no_progress).unwrap();
        let c0 = dev.block_device().counters().clone();
        let t = Instant::now();
        let waf = f(dev);
        let secs = t.elapsed().as_secs_f64();
        let c1 = dev.block_device().counters();
        let host = (c1.host_write_bytes - c0.host_write_bytes) / 4096;
        let flash = host + (c1.gc_relocated_sectors - c0.gc_relocated_sectors);
        (flash as f64 / secs, host as f64 / secs, waf)
    };
    let mut conv = Device::new(base()).unwrap();
    let (r, h, waf) = time(&mut conv, &mut |d| d.run(&w, &mut no_progress).unwrap().dlwa());
    out.push(("conventional", r, h, waf));
    let mut c = base();
    c.fdp.enabled = true;
    c.fdp.handles = 8;
    c.fdp.handle_types = vec![HandleType::InitiallyIsolated];
    let parts: Vec<(WorkloadConfig, f64)> = (0..8)
        .map(|h| {
            (WorkloadConfig { pattern: Pattern::Uniform, offset: h as f64 / 8.0, span: 1.0 / 8.0, placement: h, ..Default::default() }, 1.0)
        })
        .collect();
    let mut fdp = Device::new(c).unwrap();
    let (r, h, waf) = time(&mut fdp, &mut |d| d.run_mix(&parts, &w, &mut no_progress).unwrap().dlwa());
    out.push(("fdp (8 handles)", r, h, waf));
    let mut c = base();
    c.personality = Personality::Zns;
    let mut zns = Device::new(c).unwrap();
    let (r, h, waf) = time(&mut zns, &mut |d| d.run(&w, &mut no_progress).unwrap().dlwa());
    out.push(("zns (zoned log)", r, h, waf));
    let mut c = base();
    c.personality = Personality::Ocssd;
    let mut oc = Device::new(c).unwrap();
    let (r, h) = ocssd_rate(&mut oc);
    out.push(("ocssd (host log)", r, h, 1.0));
    out
}

/// A host log on the open-channel device: every chunk written whole in 64-address vector
/// writes, chunks taken round-robin over the parallel units, then every chunk reset; one
/// warm-up pass, one timed pass. Returns (flash writes/s, host writes/s); there is no device
/// GC, so they are equal.
fn ocssd_rate(dev: &mut Device) -> (f64, f64) {
    use ssdlab_core::ftl::ocssd::MAX_VECTOR;
    let oc = dev.ocssd_mut().expect("open-channel device");
    let g = oc.geometry().clone();
    let mut lbas = Vec::with_capacity(MAX_VECTOR);
    let mut pass = |oc: &mut ssdlab_core::ftl::ocssd::Ocssd| {
        let mut sectors = 0u64;
        for chk in 0..g.num_chk {
            for grp in 0..g.num_grp {
                for pu in 0..g.num_pu {
                    let start = oc.lba(grp, pu, chk, 0);
                    let mut s = 0;
                    while s < g.clba {
                        lbas.clear();
                        lbas.extend(start + s..start + (s + MAX_VECTOR as u64).min(g.clba));
                        oc.vector_write(&lbas, None, 0).expect("vector write");
                        s += lbas.len() as u64;
                    }
                    sectors += g.clba;
                }
            }
        }
        let chunks: Vec<u64> = (0..g.num_grp * g.num_pu * g.num_chk).map(|i| i as u64 * g.clba).collect();
        for batch in chunks.chunks(MAX_VECTOR) {
            oc.vector_reset(batch, 0).expect("vector reset");
        }
        sectors
    };
    pass(oc);
    let t = Instant::now();
    let sectors = pass(oc);
    let r = sectors as f64 / t.elapsed().as_secs_f64();
    (r, r)
}

/// Simulated cache requests per wall second: the kvcache workload on a CacheLib-style hybrid
/// cache (ssdlab-cache) over a 16 GiB raw FDP device at 50% utilisation, SOC and LOC on their
/// own handles, LOC prefilled, two logical capacities of device writes. Returns (requests/s,
/// requests, DLWA, wall seconds).
fn cache_requests(timing: bool, gib: u64) -> (f64, u64, f64, f64) {
    let mut c = preset("fdp-ssd").unwrap();
    c.geometry.pages_per_block = 16;
    c.geometry.blocks_per_plane = (1024 * gib / 16) as u32;
    c.fdp.ru_superblocks = 1;
    c.ftl.spare_factor = 0.145;
    c.timing.enabled = timing;
    let logical = gib as f64 * (1u64 << 30) as f64 * 0.855;
    let mut spec = ssdlab_cache::RunSpec::default();
    spec.cache.utilization = 0.5;
    spec.cache.region_bytes = 512 << 10;
    spec.cache.loc_write_bytes = 128 << 10;
    spec.cache.region_eviction = ssdlab_cache::config::RegionEviction::Fifo;
    spec.cache.dram_bytes = (0.045 * 0.5 * logical) as u64;
    spec.workload = ssdlab_cache::workload::preset("kvcache").unwrap();
    spec.workload.keys = (2.0 * 0.5 * logical / (spec.workload.mean_value_bytes() + 32.0)) as u64;
    spec.workload.rate_rps = 8000.0;
    spec.stop_device_writes = 2.0;
    let r = ssdlab_cache::run(c, &spec, None, &mut |_| true).expect("cache bench run");
    let reqs = r.summary["requests"].as_u64().unwrap_or(0);
    (reqs as f64 / r.wall_seconds, reqs, r.summary["dlwa_cumulative"].as_f64().unwrap_or(0.0), r.wall_seconds)
}

fn main() {
    let a = parse_args();
    let want = |n: &str| a.only.as_deref().is_none_or(|o| o.split(',').any(|x| x == n));
    println!("ssdlab bench (one core; goals from issue 'Device core')");
    let mut untimed = None;
    if want("notiming") {
        let (f, h, waf) = steady_state(a.gib, false, a.device_writes);
        untimed = Some(f);
        println!(
            "metadata-only, no timing, {} GiB, greedy, 7% spare: {:.2} M flash writes/s ({:.2} M host writes/s, WAF {:.3}); goal 20 M/s -> {:.2}x",
            a.gib, f / 1e6, h / 1e6, waf, f / 20e6
        );
    }
    if want("timing") {
        let (f, h, waf) = steady_state(a.gib, true, a.device_writes);
        println!("metadata-only, timing on, {} GiB, greedy, 7% spare, QD 64: {:.2} M flash writes/s ({:.2} M host writes/s, WAF {:.3}); goal 5 M/s -> {:.2}x", a.gib, f / 1e6, h / 1e6, waf, f / 5e6);
        if let Some(off) = untimed {
            println!("timing on / timing off, the two runs above: {:.2}x; goal >= 0.7x", f / off);
        }
    }
    if want("desnoyers") {
        bench_desnoyers(&a);
    }
    if want("personalities") {
        bench_personalities(&a);
    }
    if want("cache") {
        bench_cache(&a);
    }
    if want("memory") {
        bench_memory(&a);
    }
    if want("vssd") {
        bench_vssd();
    }
    if want("spi") {
        spi::run();
    }
    if a.only.as_deref() == Some("spi-instant") {
        spi::instant_only();
    }
    if want("lsm") {
        lsm::run();
    }
    if want("rmml") {
        rmml::run_all();
    }
    if want("uio") {
        uio::run();
    }
}

/// Beside Desnoyers' C simulator (SSSL_GREEDY names its greedy binary): host and flash writes
/// per second on one die, medians of 3 interleaved rounds; ssdlab alone without it.
fn bench_desnoyers(a: &Args) {
    let gib = a.gib.min(64);
    match std::env::var("SSSL_GREEDY") {
        Err(_) => {
            let (f, h, w) = single_die(gib, a.device_writes);
            println!(
                "{gib} GiB raw, 4 KiB mapping units, 1 MiB blocks, one die, greedy, 7% spare: ssdlab {:.2} M host writes/s ({:.2} M flash, WAF {w:.3}); beside Desnoyers' C simulator: skipped (set SSSL_GREEDY to its greedy binary; /work/shared/bench/README.md)",
                h / 1e6,
                f / 1e6
            );
        }
        Ok(path) => {
            // Three interleaved rounds; medians.
            let (mut ours, mut theirs) = (vec![], vec![]);
            let mut wafs = (0.0, 0.0);
            for _ in 0..3 {
                let (f, h, w) = sssl(&path, gib, a.device_writes).expect("the C simulator runs and prints its figures");
                theirs.push((f, h));
                wafs.1 = w;
                let (f, h, w) = single_die(gib, a.device_writes);
                ours.push((f, h));
                wafs.0 = w;
            }
            let m = |v: &[(f64, f64)], i: usize| median(v.iter().map(|x| if i == 0 { x.0 } else { x.1 }).collect());
            let (of, oh, tf, th) = (m(&ours, 0), m(&ours, 1), m(&theirs, 0), m(&theirs, 1));
            println!(
                "side by side, {gib} GiB raw, 4 KiB mapping units, 1 MiB blocks, one die, greedy, 7% spare (medians of 3 interleaved rounds): ssdlab {:.2} M host writes/s ({:.2} M flash, WAF {:.3}), Desnoyers' C simulator {:.2} M host writes/s ({:.2} M flash, WAF {:.3}): {:.2}x per host write, {:.2}x per flash write; goal 2x per host write",
                oh / 1e6, of / 1e6, wafs.0, th / 1e6, tf / 1e6, wafs.1, oh / th, of / tf
            );
        }
    }
}

/// Each personality against the conventional one: flash and host writes per second.
fn bench_personalities(a: &Args) {
    let res = personalities(a.gib.min(64));
    let (conv_f, conv_h) = (res[0].1, res[0].2);
    for (name, f, h, waf) in &res {
        println!(
            "personality {name:<16} {:.2} M flash writes/s ({:.2}x conventional), {:.2} M host writes/s ({:.2}x), WAF {:.3}",
            f / 1e6,
            f / conv_f,
            h / 1e6,
            h / conv_h,
            waf
        );
    }
    println!("goals: FDP within 10% of conventional per flash write (>= 0.90x); ZNS faster than conventional on the same host writes (> 1.0x host writes/s)");
}

/// fdp-cache: simulated cache requests per second, timing off and on.
fn bench_cache(a: &Args) {
    for timing in [false, true].into_iter().filter(|t| a.cache_timing.is_none_or(|w| w == *t)) {
        let (rps, reqs, dlwa, secs) = cache_requests(timing, a.cache_gib);
        println!(
            "fdp-cache, kvcache preset, {} GiB raw FDP device at 50% utilisation, metadata-only, timing {}: {:.2} M simulated cache requests/s ({} requests in {:.1} s, DLWA {:.3}); goal 2 M/s -> {:.2}x",
            a.cache_gib,
            if timing { "on" } else { "off" },
            rps / 1e6,
            reqs,
            secs,
            dlwa,
            rps / 2e6
        );
    }
}

/// Peak memory per logical sector of a large device, filled and overwritten.
fn bench_memory(a: &Args) {
    let tib = a.memory_tib;
    let mut c = preset("bench-256g").unwrap();
    c.geometry.blocks_per_plane = ((tib * (1u64 << 40) as f64) as u64 / (64 * (8 << 20))) as u32;
    c.timing.enabled = false;
    c.ftl.spare_factor = 0.07;
    c.precondition.sequential_fill = true;
    c.precondition.random_device_writes = 0.0;
    let t = Instant::now();
    let mut dev = Device::new(c).expect("memory config");
    dev.precondition(&mut no_progress).unwrap();
    let w = WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 1, stop_device_writes: 0.05, ..Default::default() };
    let rep = dev.run(&w, &mut no_progress).unwrap();
    let logical = dev.ftl().logical_sectors();
    let rss = rss_bytes();
    let meta = dev.ftl().metadata_bytes();
    println!(
        "memory, {tib} TiB raw device ({} logical sectors), filled + 5% random overwrites in {:.0} s (WAF {:.2}): peak RSS {:.2} GiB = {:.2} B per logical sector (maps + OOB {:.2} B); goal <= 10 B -> {:.2}x headroom",
        logical,
        t.elapsed().as_secs_f64(),
        rep.dlwa(),
        rss as f64 / (1u64 << 30) as f64,
        rss as f64 / logical as f64,
        meta as f64 / logical as f64,
        10.0 / (rss as f64 / logical as f64)
    );
}

/// The vssd layer's cost per sector against the raw device.
fn bench_vssd() {
    // The flashblox case study's 1 TiB open-channel device (16 channels x 4 dies, 8 MiB
    // chunks): the same whole-chunk writes and resets, raw and through 16 channel vSSDs.
    let dev = ssdlab_vssd::device_config("paper").expect("paper device");
    let c = ssdlab_vssd::cost::measure(&dev, 3).expect("vssd cost");
    println!(
        "vssd layer, 1 TiB open-channel device, whole blocks written and freed: {:.1} ns per sector vs {:.1} ns on the raw device ({} sectors a pass, best of 3): {:+.1}%; goal <= +10%",
        c.vssd_ns_per_sector,
        c.raw_ns_per_sector,
        c.sectors,
        (c.ratio - 1.0) * 100.0
    );
}
