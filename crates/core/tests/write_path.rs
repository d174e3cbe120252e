//! The host side of the write path: the host interface link (`timing.host_link_bytes_per_s`)
//! and a write buffer shared with garbage collection (`ftl.gc_uses_write_buffer`).

use ssdlab_core::config::{Config, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::ftl::{BlockDevice, WriteOpts};
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

/// PCIe 4.0 x4, per direction: 16 GT/s x 4 lanes x 128/130 / 8 bits.
const PCIE4_X4: u64 = 7_877_000_000;
const CMD: u64 = 128 << 10;

fn tiny(link: u64) -> Config {
    let mut c = preset("tiny").unwrap();
    c.timing.host_link_bytes_per_s = link;
    c
}

/// ceil(bytes / rate) in ns.
fn link_ns(bytes: u64, rate: u64) -> u64 {
    (bytes as u128 * 1_000_000_000).div_ceil(rate as u128) as u64
}

#[test]
fn a_write_waits_for_its_data_to_cross_the_link() {
    let latency = |link: u64| {
        let mut dev = Device::new(tiny(link)).unwrap();
        dev.ftl_mut().write(0, (CMD / 4096) as u32, None, WriteOpts::default(), 1_000).unwrap() - 1_000
    };
    let (off, on) = (latency(0), latency(PCIE4_X4));
    assert_eq!(on - off, link_ns(CMD, PCIE4_X4), "128 KiB at 7.877 GB/s is 16.64 us");
}

#[test]
fn a_read_waits_for_its_data_to_cross_the_link() {
    let latency = |link: u64| {
        let mut dev = Device::new(tiny(link)).unwrap();
        let ftl = dev.ftl_mut();
        ftl.write(0, (CMD / 4096) as u32, None, WriteOpts::default(), 0).unwrap();
        let f = ftl.flush(0).unwrap();
        let at = f + 1_000_000;
        let done = ftl.read(0, (CMD / 4096) as u32, None, at).unwrap();
        assert_eq!(ftl.counters().nand_page_reads, CMD / 16384, "the data came from the NAND");
        done - at
    };
    let (off, on) = (latency(0), latency(PCIE4_X4));
    assert_eq!(on - off, link_ns(CMD, PCIE4_X4));
}

#[test]
fn commands_share_the_link_one_transfer_at_a_time() {
    let x = link_ns(CMD, PCIE4_X4);
    let mut dev = Device::new(tiny(PCIE4_X4)).unwrap();
    let ftl = dev.ftl_mut();
    let sectors = (CMD / 4096) as u32;
    // Two writes submitted together: the second's data follows the first's.
    let w1 = ftl.write(0, sectors, None, WriteOpts::default(), 0).unwrap();
    let w2 = ftl.write(1024, sectors, None, WriteOpts::default(), 0).unwrap();
    assert_eq!(w2 - w1, x, "the second write's data waits for the first's");
    // Two reads submitted together on different dies: their transfers to the host do not
    // overlap (each is out of the NAND at about the same time).
    let f = ftl.flush(w2).unwrap() + 1_000_000;
    let r1 = ftl.read(0, sectors, None, f).unwrap();
    let r2 = ftl.read(1024, sectors, None, f).unwrap();
    assert!(r1.abs_diff(r2) >= x, "reads done at {r1} and {r2} overlap on a link that takes {x} ns each");
    // A direction does not block the other: a write now is not behind the reads' data.
    let w3 = ftl.write(2048, sectors, None, WriteOpts::default(), f).unwrap();
    assert!(w3 < r1.min(r2), "write done at {w3}, reads at {r1} and {r2}");
}

#[test]
fn the_link_is_off_by_default_and_does_not_move_defaults() {
    let c = preset("default").unwrap();
    assert_eq!(c.timing.host_link_bytes_per_s, 0);
    assert!(!c.ftl.gc_uses_write_buffer);
    // Neither key appears in a config that does not set it (metrics.json embeds the config).
    let json = serde_json::to_string(&c).unwrap();
    assert!(!json.contains("host_link") && !json.contains("gc_uses_write_buffer"), "{json}");
    let set = Config::from_toml_str("[timing]\nhost_link_bytes_per_s = 7877000000\n[ftl]\ngc_uses_write_buffer = true\n", "t").unwrap();
    assert_eq!((set.timing.host_link_bytes_per_s, set.ftl.gc_uses_write_buffer), (PCIE4_X4, true));
    let back = Config::from_toml_str(&set.to_commented_toml(), "show").unwrap();
    assert_eq!(back, set);
    assert!(Config::from_toml_str("[timing]\nhost_link_bytes_per_s = -1\n", "t").is_err());
}

/// A small device (4 dies, 16-page blocks) at 85.5% utilisation, preconditioned with
/// `random_device_writes` (0: fresh, no GC), its write buffer the size the dies need to keep
/// programming (a multi-plane unit per die, double-buffered: 256 KiB).
fn small(random_device_writes: f64, gc_uses_write_buffer: bool) -> Config {
    let mut c = preset("default").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 2;
    c.geometry.blocks_per_plane = 256;
    c.geometry.pages_per_block = 16;
    c.ftl.spare_factor = 0.145;
    let g = &c.geometry;
    c.ftl.write_buffer_bytes = (g.channels * g.dies_per_channel * g.planes_per_die * g.page_bytes * 2) as u64;
    c.ftl.gc_uses_write_buffer = gc_uses_write_buffer;
    c.precondition.sequential_fill = random_device_writes > 0.0;
    c.precondition.random_device_writes = random_device_writes;
    c
}

/// (write p99 in ns, GC events, DLWA) of random 4 KiB writes at `iops` on `c` after its
/// preconditioning.
fn p99_at(c: Config, iops: f64) -> (u64, u64, f64) {
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let w = WorkloadConfig { rate_iops: iops, stop_device_writes: 0.5, ..Default::default() };
    let m = dev.run(&w, &mut no_progress).unwrap().metrics;
    dev.ftl().check_invariants();
    (m["latency_ns"]["write"]["p99"].as_u64().unwrap(), m["gc_events"].as_u64().unwrap(), m["dlwa"].as_f64().unwrap())
}

#[test]
fn gc_in_the_write_buffer_shows_in_write_tails_below_saturation() {
    let full = small(2.0, true);
    let overhead = full.timing.command_overhead_ns;
    // The rate the dies sustain with GC at this utilisation: a closed loop deep enough to keep
    // every die busy. Half of it is offered below.
    let sat = {
        let mut dev = Device::new(full.clone()).unwrap();
        dev.precondition(&mut no_progress).unwrap();
        let w = WorkloadConfig { queue_depth: 64, stop_device_writes: 0.5, ..Default::default() };
        let m = dev.run(&w, &mut no_progress).unwrap().metrics;
        m["throughput"]["host_write_bytes_per_s"].as_f64().unwrap() / 4096.0
    };
    let iops = sat / 2.0;
    let (p99_fresh, gc_fresh, _) = p99_at(small(0.0, true), iops);
    let (p99_full, gc_full, dlwa) = p99_at(full.clone(), iops);
    let (p99_full_off, _, _) = p99_at(small(2.0, false), iops);
    println!("{iops:.0} IOPS: p99 {p99_fresh} ns fresh, {p99_full} ns full ({p99_full_off} ns without GC in the buffer)");
    assert!(gc_fresh == 0 && gc_full > 100, "GC events: fresh {gc_fresh}, full {gc_full}");
    // Without the option the buffer hides GC below saturation: writes are acknowledged after
    // the command overhead.
    assert!(p99_full_off <= overhead + overhead / 100, "p99 {p99_full_off} ns without GC in the buffer");
    // With it, GC's relocations fill the buffer and host writes wait for them...
    assert!(p99_full > p99_fresh && p99_full > 2 * overhead, "p99 {p99_full} ns with GC, {p99_fresh} ns without");
    // ...but the dies keep up, so the wait is bounded by draining the buffer, not by the
    // run's length: a slot frees at the latest when the buffer's units, each with its share
    // of relocations (DLWA), are programmed one after another on a single die.
    let units = full.ftl.write_buffer_bytes / (full.geometry.page_bytes as u64 * full.geometry.planes_per_die as u64);
    let drain = (units as f64 * dlwa * full.timing.page_program_ns as f64) as u64;
    assert!(p99_full < drain, "p99 {p99_full} ns, draining the buffer takes at most {drain} ns");
}

/// Latencies of the writes that triggered a foreground collection, with the option or not.
/// Many write streams opening blocks at once (FDP, a handle per region) take free blocks faster
/// than paced GC frees them, so host writes run into the foreground watermark.
fn foreground_waits(shared: bool) -> Vec<u64> {
    let toml = "preset = \"tiny\"\n[geometry]\nblocks_per_plane = 256\npages_per_block = 16\n[ftl]\nspare_factor = 0.2\n[fdp]\nenabled = true\nhandles = 8";
    let mut c = Config::from_toml_str(toml, "t").unwrap();
    c.ftl.gc_uses_write_buffer = shared;
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let sectors = dev.logical_bytes() / 4096;
    let (mut x, mut now, mut waits) = (0x9E37_79B9_7F4A_7C15u64, dev.now_ns(), vec![]);
    for _ in 0..2 * sectors {
        // xorshift64: a region (placement) and a sector in it.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let h = x % 8;
        let lba = h * (sectors / 8) + (x >> 8) % (sectors / 8);
        now += 1_000_000;
        dev.advance_to(now);
        let fg = dev.ftl().counters().gc_foreground_events;
        let done = dev.write_placed_len(lba * 4096, 4096, false, Some(h as u16)).unwrap();
        if dev.ftl().counters().gc_foreground_events > fg {
            waits.push(done - now);
        }
    }
    waits
}

#[test]
fn a_write_that_triggers_foreground_gc_waits_for_it() {
    let erase = preset("tiny").unwrap().timing.block_erase_ns;
    let (off, on) = (foreground_waits(false), foreground_waits(true));
    println!(
        "writes that triggered foreground GC: {} without, {} with; latencies {:?} / {:?}",
        off.len(),
        on.len(),
        &off[..off.len().min(8)],
        &on[..on.len().min(8)]
    );
    assert!(!off.is_empty() && !on.is_empty(), "no foreground collection: the test needs some");
    // Today a buffered write is acknowledged as if the collection it triggered took no time.
    assert!(off.iter().any(|&l| l < erase), "without the option: {off:?}");
    // With the option it waits at least for the victim's erase.
    assert!(on.iter().all(|&l| l >= erase), "with the option: {on:?}");
}

#[test]
fn a_snapshot_keeps_the_options() {
    let mut c = tiny(PCIE4_X4);
    c.ftl.gc_uses_write_buffer = true;
    let mut dev = Device::new(c.clone()).unwrap();
    dev.write_placed_len(0, CMD, false, None).unwrap();
    let path = std::env::temp_dir().join(format!("ssdlab-write-path-{}.snap", std::process::id()));
    dev.snapshot(&path).unwrap();
    let back = Device::restore(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back.unwrap().config(), &c);
}
