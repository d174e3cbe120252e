//! Where GC writes relocated data (`ftl.gc_streams`): separate GC streams (the default), back
//! into the host stream the data came from (shared), or young and old GC streams by relocation
//! count (by-age). What users rely on: host writes are counted the same whichever is chosen,
//! every NAND program is either host data, relocated data or padding, data survives GC, and
//! splitting relocations by age pays off where data has an age to split by.

use ssdlab_core::config::{Config, GcStreams, HandleType, Pattern, StorageMode, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

/// The `tiny` device without time, preconditioned to steady state by the run itself.
fn small(gc_streams: GcStreams) -> Config {
    let mut c = preset("tiny").unwrap();
    c.timing.enabled = false;
    c.ftl.spare_factor = 0.15;
    c.ftl.gc_streams = gc_streams;
    c
}

fn uniform(device_writes: f64) -> WorkloadConfig {
    WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 1, stop_device_writes: device_writes, ..Default::default() }
}

/// 90% of the writes to 10% of the space: data written once to the cold part stays valid for
/// a long time, so most data GC moves has been moved before.
fn hot_cold(device_writes: f64) -> WorkloadConfig {
    WorkloadConfig {
        pattern: Pattern::Hotcold,
        hot_space: 0.1,
        hot_writes: 0.9,
        queue_depth: 1,
        stop_device_writes: device_writes,
        ..Default::default()
    }
}

/// Precondition, run `w`, flush (so every placed sector is programmed) and check the FTL's
/// invariants; returns the device and the run's metrics.
fn run(c: Config, w: &WorkloadConfig) -> (Device, serde_json::Value) {
    let mut dev = Device::new(c).unwrap();
    dev.precondition(&mut no_progress).unwrap();
    let rep = dev.run(w, &mut no_progress).unwrap();
    dev.flush().unwrap();
    dev.ftl().check_invariants();
    (dev, rep.metrics)
}

#[test]
fn separate_is_the_default_and_naming_it_changes_nothing() {
    assert_eq!(preset("tiny").unwrap().ftl.gc_streams, GcStreams::Separate);
    let metrics = |toml: &str| {
        let mut dev = Device::new(Config::from_toml_str(toml, "t").unwrap()).unwrap();
        let rep = dev.run_configured(&mut no_progress).unwrap();
        (serde_json::to_string(&rep.metrics).unwrap(), rep.series_csv)
    };
    let base = "preset = \"tiny\"\n[workload]\npattern = \"hotcold\"\nstop_device_writes = 1.0\n";
    // The same bytes, config echo included: the key is left out of metrics.json at its default.
    assert_eq!(metrics(base), metrics(&format!("{base}[ftl]\ngc_streams = \"separate\"\n")));
}

#[test]
fn unknown_gc_streams_value_is_a_config_error_naming_the_key() {
    let err = Config::from_toml_str("preset = \"tiny\"\n[ftl]\ngc_streams = \"sideways\"\n", "t.toml").unwrap_err().to_string();
    assert!(err.contains("ftl.gc_streams") && err.contains("by-age"), "{err}");
    let ok = Config::from_toml_str("preset = \"tiny\"\n[ftl]\ngc_streams = \"by-age\"\n", "t.toml").unwrap();
    assert_eq!(ok.ftl.gc_streams, GcStreams::ByAge);
}

#[test]
fn shared_stream_counts_host_writes_as_separate_does_and_programs_add_up() {
    let (sep_dev, sep) = run(small(GcStreams::Separate), &uniform(2.0));
    let (dev, shared) = run(small(GcStreams::Shared), &uniform(2.0));
    // The same workload writes the same host data, whichever stream GC writes into.
    assert_eq!(shared["host_write_bytes"], sep["host_write_bytes"]);
    assert_eq!(dev.ftl().counters().host_write_bytes, sep_dev.ftl().counters().host_write_bytes);
    // One write stream, no GC stream: it programmed everything the device programmed.
    let streams = dev.ftl().stream_stats();
    assert_eq!(streams.len(), 1, "shared: the host stream is the only write stream");
    let c = dev.ftl().counters();
    let lay = dev.ftl().media().lay;
    let spp = lay.sectors_per_page as u64;
    assert_eq!(streams[0].units_programmed * lay.planes_per_die as u64, c.nand_page_programs);
    assert!(c.gc_relocated_sectors > 0, "steady-state random writes make GC move data");
    // Over the device's life, after a flush: every programmed sector is a host sector, a
    // relocated sector or padding, so DLWA splits exactly into host and GC programs. Units mix
    // both: relocated pages are the relocated sectors in whole pages, the partial page left at
    // each flush counted whole.
    let host_sectors = c.host_write_bytes / lay.sector_bytes as u64;
    assert_eq!(c.nand_page_programs * spp, host_sectors + c.gc_relocated_sectors + c.pad_sectors);
    assert!(c.gc_relocated_sectors <= c.gc_relocated_pages * spp, "{c:?}");
    assert!(c.gc_relocated_pages <= c.gc_relocated_sectors / spp + c.host_flush_cmds, "{c:?}");
    // Relocation into the host stream is still GC paced with host writes: no host write
    // waited for a whole-block collection in steady state.
    assert_eq!(shared["gc_foreground_events"], 0, "{}", shared["gc_background_events"]);
}

#[test]
fn by_age_moves_data_moved_before_into_a_second_gc_stream() {
    let (dev, _) = run(small(GcStreams::ByAge), &hot_cold(3.0));
    // Host stream, young GC stream, old GC stream.
    let s = dev.ftl().stream_stats();
    assert_eq!(s.len(), 3);
    assert!(s[1].units_programmed > 0 && s[2].units_programmed > 0, "both GC streams take relocations: {s:?}");
    assert!(s[1].relocated_out_sectors > 0, "data moved once gets moved again, into the old stream: {s:?}");
    // Every program is a host unit or one of the GC streams' units.
    let c = dev.ftl().counters();
    let planes = dev.ftl().media().lay.planes_per_die as u64;
    assert_eq!((s[1].units_programmed + s[2].units_programmed) * planes, c.gc_relocated_pages);
    assert_eq!(s.iter().map(|x| x.units_programmed).sum::<u64>() * planes, c.nand_page_programs);
}

/// One die and plane of 4096 blocks: each write stream holds one block open, a negligible
/// share of the spare, so what differs between the modes is where GC puts data, not how much
/// spare their open blocks take (on `tiny`, an extra GC stream's 4 open blocks alone move DLWA).
fn one_big_die(gc_streams: GcStreams) -> Config {
    let mut c = small(gc_streams);
    c.geometry.channels = 1;
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 4096;
    c
}

#[test]
fn by_age_matters_only_where_data_has_an_age() {
    let dlwa = |g: GcStreams, w: &WorkloadConfig| run(one_big_die(g), w).1["dlwa"].as_f64().unwrap();
    // Uniform random overwrites: every sector is as likely to be overwritten whatever GC did to
    // it, so the age of the data says nothing about its future: splitting by it, or mixing
    // relocations with host writes, leaves DLWA where it was (within 1% here).
    let sep = dlwa(GcStreams::Separate, &uniform(4.0));
    for g in [GcStreams::ByAge, GcStreams::Shared] {
        let x = dlwa(g, &uniform(4.0));
        assert!((x / sep - 1.0).abs() < 0.01, "uniform: {g:?} {x} vs separate {sep}");
    }
    // Hot and cold data: data GC has moved before is mostly cold. Keeping it apart from the hot
    // data moved for the first time fills the old stream's blocks with data that stays valid,
    // so by-age is no worse than separate; mixing relocated (mostly cold) data into the host
    // stream's blocks with hot writes makes every block a mixture, and shared is worse.
    let sep = dlwa(GcStreams::Separate, &hot_cold(4.0));
    let age = dlwa(GcStreams::ByAge, &hot_cold(4.0));
    let shared = dlwa(GcStreams::Shared, &hot_cold(4.0));
    assert!(age <= sep * 1.002, "hot/cold: by-age {age} vs separate {sep}");
    assert!(shared > sep * 1.03, "hot/cold: shared {shared} vs separate {sep}");
}

/// Data written through every kind of GC stream reads back as last written.
#[test]
fn data_survives_relocation_in_every_mode() {
    for g in [GcStreams::Separate, GcStreams::Shared, GcStreams::ByAge] {
        let mut c = small(g);
        c.storage = StorageMode::Data;
        let mut dev = Device::new(c).unwrap();
        let sb = 4096u64;
        let sectors = dev.logical_bytes() / sb;
        let mut version = vec![0u32; sectors as usize];
        let sector = |lba: u64, v: u32| -> Vec<u8> { (0..sb).map(|i| (lba as u32 ^ v.wrapping_mul(31) ^ i as u32) as u8).collect() };
        // Fill, then overwrite a skewed random sequence of sectors three times over, so GC
        // moves data, some of it more than once.
        for lba in 0..sectors {
            dev.write(lba * sb, &sector(lba, 0), false).unwrap();
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..3 * sectors {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lba = if x % 10 < 9 { (x >> 8) % (sectors / 10) } else { (x >> 8) % sectors };
            version[lba as usize] += 1;
            dev.write(lba * sb, &sector(lba, version[lba as usize]), false).unwrap();
        }
        dev.flush().unwrap();
        dev.ftl().check_invariants();
        assert!(dev.ftl().counters().gc_relocated_sectors > 0, "{g:?}: GC ran");
        let mut buf = vec![0u8; sb as usize];
        for lba in 0..sectors {
            dev.read(lba * sb, &mut buf).unwrap();
            assert!(buf == sector(lba, version[lba as usize]), "{g:?}: sector {lba} reads back wrong");
        }
    }
}

/// FDP: shared puts each handle's relocations into its own handle's stream (its own reclaim
/// units), by-age doubles the group's and each persistently isolated handle's GC stream.
#[test]
fn fdp_handles_keep_their_data_in_every_mode() {
    let cfg = |g: GcStreams| {
        let mut c = small(g);
        c.geometry.blocks_per_plane = 256;
        c.geometry.pages_per_block = 32;
        c.fdp.enabled = true;
        c.fdp.handles = 2;
        c.fdp.handle_types = vec![HandleType::InitiallyIsolated, HandleType::PersistentlyIsolated];
        c
    };
    let parts: Vec<(WorkloadConfig, f64)> = (0..2)
        .map(|h| (WorkloadConfig { pattern: Pattern::Uniform, offset: h as f64 * 0.5, span: 0.5, placement: h, ..Default::default() }, 1.0))
        .collect();
    for (g, streams) in [(GcStreams::Separate, 4), (GcStreams::Shared, 2), (GcStreams::ByAge, 6)] {
        let mut dev = Device::new(cfg(g)).unwrap();
        dev.precondition(&mut no_progress).unwrap();
        let rep = dev.run_mix(&parts, &uniform(2.0), &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        assert_eq!(dev.ftl().stream_stats().len(), streams, "{g:?}");
        let m = &rep.metrics;
        let handles = m["fdp"]["handles"].as_array().unwrap();
        let media: u64 = handles.iter().map(|h| h["media_write_bytes"].as_u64().unwrap()).sum();
        let host: u64 = handles.iter().map(|h| h["host_write_bytes"].as_u64().unwrap()).sum();
        assert_eq!(host, m["host_write_bytes"].as_u64().unwrap(), "{g:?}: handles' host bytes");
        assert!(handles.iter().all(|h| h["dlwa"].as_f64().unwrap() >= 1.0), "{g:?}: {handles:?}");
        if g == GcStreams::Shared {
            // No GC stream: the handles' streams programmed everything.
            assert_eq!(media, m["nand_write_bytes"].as_u64().unwrap(), "shared: handles' media bytes");
            assert!(m["fdp"]["shared_gc_streams"].as_array().unwrap().is_empty());
        }
    }
}
