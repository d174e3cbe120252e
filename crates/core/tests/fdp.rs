//! FDP (NVMe TP4146) behaviour: segregation by placement handle, handle types, logs, errors.

use std::collections::HashSet;

use ssdlab_core::config::{Config, HandleType, Pattern, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::error::Status;
use ssdlab_core::ftl::{BlockDevice, WriteOpts};
use ssdlab_core::media::presets::preset;
use ssdlab_core::{Device, Error};

/// A small device with room for several open write streams.
fn device(fdp: bool, types: &[HandleType]) -> Config {
    let mut c = preset("tiny").unwrap();
    c.geometry.blocks_per_plane = 256;
    c.geometry.pages_per_block = 32;
    c.timing.enabled = false;
    c.ftl.spare_factor = 0.12;
    c.fdp.enabled = fdp;
    c.fdp.handles = 4;
    c.fdp.handle_types = types.to_vec();
    c.precondition.sequential_fill = false;
    c.precondition.random_device_writes = 0.0;
    c
}

fn stream(pattern: Pattern, offset: f64, span: f64, bytes: u64, placement: i64) -> WorkloadConfig {
    WorkloadConfig { pattern, offset, span, block_bytes: vec![bytes], block_weights: vec![1.0], placement, ..Default::default() }
}

fn stop(device_writes: f64) -> WorkloadConfig {
    WorkloadConfig { queue_depth: 1, stop_device_writes: device_writes, ..Default::default() }
}

fn handle(m: &serde_json::Value, h: u64) -> &serde_json::Value {
    m["fdp"]["handles"].as_array().unwrap().iter().find(|x| x["handle"] == h).unwrap()
}

#[test]
fn sequential_handle_stays_at_dlwa_one_and_fdp_beats_mixing() {
    // Handle 0: sequential 128 KiB writes over half the space; handle 1: uniform random 4 KiB
    // overwrites over 40%. Equal bytes from each.
    let parts = [(stream(Pattern::Sequential, 0.0, 0.5, 131072, 0), 1.0), (stream(Pattern::Uniform, 0.5, 0.4, 4096, 1), 32.0)];
    let run = |fdp: bool| {
        let mut dev = Device::new(device(fdp, &[HandleType::InitiallyIsolated])).unwrap();
        // Fill both regions once, then measure at steady state.
        dev.run_mix(&parts, &stop(1.5), &mut no_progress).unwrap();
        let rep = dev.run_mix(&parts, &stop(4.0), &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        rep.metrics
    };
    let on = run(true);
    let off = run(false);
    let seq = handle(&on, 0)["dlwa"].as_f64().unwrap();
    let rnd_on = on["dlwa"].as_f64().unwrap();
    let mixed = off["dlwa"].as_f64().unwrap();
    println!("FDP on: handle 0 DLWA {seq}, overall {rnd_on}; FDP off: overall {mixed}");
    assert!(seq < 1.1, "sequential handle DLWA {seq}");
    // Reclaim units: the sequential handle's completed RUs are whole (all valid), the random
    // handle's are spread over many fill levels.
    let ru = |h: u64| -> Vec<u64> {
        handle(&on, h)["ru_valid_fraction_histogram"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
    };
    let (ru0, ru1) = (ru(0), ru(1));
    println!("RU valid-fraction histograms: handle 0 {ru0:?}, handle 1 {ru1:?}");
    assert!(ru0.iter().sum::<u64>() > 0 && ru0[9] * 10 >= ru0.iter().sum::<u64>() * 9, "{ru0:?}");
    assert!(ru1.iter().filter(|&&c| c > 0).count() >= 3, "{ru1:?}");
    assert!(mixed > rnd_on * 1.1, "FDP off should mix streams: {mixed} vs {rnd_on}");
    assert!(off.get("fdp").is_none());
}

/// Which LBA regions each block's valid data comes from (0 = hot, 1 = cold).
fn regions_per_block(dev: &Device, split: u32) -> Vec<HashSet<u8>> {
    let ftl = dev.ftl();
    let spb = ftl.layout().sectors_per_block;
    let mut out = vec![HashSet::new(); ftl.blocks().len()];
    for (lba, &psa) in ftl.l2p().iter().enumerate() {
        if psa != u32::MAX {
            out[(psa / spb) as usize].insert(if (lba as u32) < split { 0 } else { 1 });
        }
    }
    out
}

#[test]
fn persistent_isolation_keeps_relocated_data_apart_and_initial_isolation_mixes_it() {
    // Hot handle 0 over 5% of the space, cold handle 1 over 80%, equal write rates: relocated
    // cold data is long-lived, relocated hot data is not, so mixing them in GC blocks costs.
    let parts = [(stream(Pattern::Uniform, 0.0, 0.05, 4096, 0), 1.0), (stream(Pattern::Uniform, 0.05, 0.8, 4096, 1), 1.0)];
    let run = |t: HandleType| {
        let mut c = device(true, &[t]);
        c.ftl.spare_factor = 0.08;
        let mut dev = Device::new(c).unwrap();
        dev.run_mix(&parts, &stop(1.0), &mut no_progress).unwrap();
        let rep = dev.run_mix(&parts, &stop(4.0), &mut no_progress).unwrap();
        dev.ftl().check_invariants();
        let split = (dev.ftl().logical_sectors() as f64 * 0.05).floor() as u32;
        let mixed_blocks = regions_per_block(&dev, split).iter().filter(|r| r.len() > 1).count();
        (rep.metrics["dlwa"].as_f64().unwrap(), mixed_blocks)
    };
    let (dlwa_ii, mixed_ii) = run(HandleType::InitiallyIsolated);
    let (dlwa_pi, mixed_pi) = run(HandleType::PersistentlyIsolated);
    println!("initially isolated: DLWA {dlwa_ii}, {mixed_ii} mixed blocks; persistently isolated: DLWA {dlwa_pi}, {mixed_pi} mixed blocks");
    assert_eq!(mixed_pi, 0, "persistently isolated handles must never share a block");
    assert!(mixed_ii > 0, "initially isolated handles' relocated data should mix in the shared GC stream");
    assert!(dlwa_pi < dlwa_ii * 0.98, "keeping hot and cold apart through GC should pay: {dlwa_pi} vs {dlwa_ii}");
}

#[test]
fn ruh_status_update_events_and_statistics() {
    let mut c = device(true, &[HandleType::InitiallyIsolated]);
    c.storage = ssdlab_core::config::StorageMode::Data;
    let mut dev = Device::new(c).unwrap();
    let ftl = dev.ftl_mut();
    let ru = ftl.fdp().unwrap().ru_sectors[0];
    let before = ftl.ruh_status().unwrap();
    assert_eq!(before.len(), 4);
    assert!(before.iter().all(|r| r.ruamw == ru));
    ftl.write(0, 10, None, WriteOpts { fua: false, placement: Some(2) }, 0).unwrap();
    let st = ftl.ruh_status().unwrap();
    assert_eq!(st[2].ruamw, ru - 10);
    assert_eq!(st[1].ruamw, ru);
    assert_eq!(ftl.ruh_usage().unwrap(), vec!["unused", "unused", "host-specified", "unused"]);
    // Update: handle 2 moves to a new RU; the old one was not fully written.
    ftl.ruh_update(&[2], 1000).unwrap();
    assert_eq!(ftl.ruh_status().unwrap()[2].ruamw, ru);
    let ev = ftl.fdp_events().unwrap();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].code, 0x00);
    assert_eq!(ev[0].pid, Some(2));
    // An update of an untouched RU raises nothing.
    ftl.ruh_update(&[1], 2000).unwrap();
    assert_eq!(ftl.fdp_events().unwrap().len(), 1);
    ftl.check_invariants();
    let s = ftl.fdp_statistics().unwrap();
    assert_eq!(s.hbmw, 10 * 4096);
    assert_eq!(s.mbmw, ftl.counters().nand_write_bytes);
    assert!(s.mbmw >= s.hbmw, "the padded unit is on the media");
    let cfg = ftl.fdp_configurations().unwrap();
    assert_eq!(cfg["configurations"][0]["nruh"], 4);
    assert_eq!(cfg["configurations"][0]["ruh_descriptors"][0]["ruht"], 1);
    // Data written before the update reads back.
    let mut buf = vec![0u8; 4096];
    dev.write_placed(4096 * 100, &[7u8; 4096], false, Some(3)).unwrap();
    dev.read(4096 * 100, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
}

#[test]
fn bad_placement_identifiers_get_invalid_field() {
    let mut dev = Device::new(device(true, &[HandleType::InitiallyIsolated])).unwrap();
    let ftl = dev.ftl_mut();
    match ftl.write(0, 1, None, WriteOpts { fua: false, placement: Some(9) }, 0) {
        Err(Error::Nvme(Status::InvalidField, msg)) => assert!(msg.contains("0x0009"), "{msg}"),
        other => panic!("expected Invalid Field in Command, got {other:?}"),
    }
    assert!(matches!(ftl.ruh_update(&[4], 0), Err(Error::Nvme(Status::InvalidPlacementHandleList, _))));
    // Without FDP, placement is ignored and the logs say FDP is off.
    let mut plain = Device::new(device(false, &[HandleType::InitiallyIsolated])).unwrap();
    plain.ftl_mut().write(0, 1, None, WriteOpts { fua: false, placement: Some(9) }, 0).unwrap();
    assert!(matches!(plain.ftl().ruh_status(), Err(Error::Nvme(Status::FdpDisabled, _))));
}

#[test]
fn reclaim_groups_keep_their_data_on_their_own_dies() {
    let mut c = device(true, &[HandleType::PersistentlyIsolated, HandleType::InitiallyIsolated]);
    c.fdp.reclaim_groups = 2;
    c.fdp.handles = 2;
    let mut dev = Device::new(c).unwrap();
    let pid_rg1_h0 = dev.ftl().fdp().unwrap().pid(1, 0);
    assert_eq!(dev.ftl().fdp().unwrap().decode(pid_rg1_h0), Some((1, 0)));
    // Group 1 holds half the media, so the host puts less than half the logical space there.
    let parts = [(stream(Pattern::Uniform, 0.0, 0.4, 4096, pid_rg1_h0 as i64), 1.0)];
    dev.run_mix(&parts, &stop(3.0), &mut no_progress).unwrap();
    dev.ftl().check_invariants();
    let ftl = dev.ftl();
    let lay = *ftl.layout();
    for (b, m) in ftl.blocks().iter().enumerate() {
        let die = lay.die_of_block(b as u32);
        if m.erase_count > 0 || m.valid > 0 {
            assert!(die >= lay.dies / 2, "block {b} on die {die} of group 0 was used by group 1's writes");
        }
    }
    assert!(ftl.counters().gc_events > 0);
}

#[test]
fn configurations_are_offered_in_the_log_and_chosen_at_format_time() {
    use ssdlab_core::config::FdpConfiguration;
    let mut c = device(true, &[HandleType::InitiallyIsolated]);
    c.fdp.extra_configurations = vec![
        FdpConfiguration { reclaim_groups: 1, handles: 2, handle_types: vec![HandleType::PersistentlyIsolated], ru_superblocks: 2 },
        FdpConfiguration {
            reclaim_groups: 2,
            handles: 3,
            handle_types: vec![HandleType::InitiallyIsolated, HandleType::PersistentlyIsolated],
            ru_superblocks: 1,
        },
    ];
    for (index, (groups, handles, ruht)) in [(1u64, 4u64, 1u64), (1, 2, 2), (2, 3, 1)].into_iter().enumerate() {
        let mut c = c.clone();
        c.fdp.configuration = index as u32;
        let dev = Device::new(c).unwrap();
        let log = dev.ftl().fdp_configurations().unwrap();
        // Every configuration is listed whichever is in force.
        assert_eq!(log["number_of_configurations"], 3);
        assert_eq!(log["configuration_in_use"], index as u64);
        let d = &log["configurations"][index];
        assert_eq!((d["nrg"].as_u64().unwrap(), d["nruh"].as_u64().unwrap()), (groups, handles));
        assert_eq!(d["ruh_descriptors"][0]["ruht"], ruht);
        // The device runs with the chosen one: its handles, groups and RU size.
        let f = dev.ftl().fdp().unwrap();
        assert_eq!((f.groups as u64, f.handles as u64), (groups, handles));
        assert_eq!(f.ru_bytes[0], d["runs"].as_u64().unwrap());
        let st = dev.ftl().ruh_status().unwrap();
        assert_eq!(st.len() as u64, groups * handles);
        assert_eq!(dev.ftl().reclaim_groups() as u64, groups);
    }
    // Configuration 1 has 2 handles: placement handle 3 no longer exists.
    let mut c1 = c.clone();
    c1.fdp.configuration = 1;
    let mut dev = Device::new(c1).unwrap();
    let e = dev.write_placed(0, &[0u8; 4096], false, Some(3)).unwrap_err();
    assert!(matches!(e, Error::Nvme(Status::InvalidField, _)), "{e}");
    // Choosing a configuration the device does not offer is a config error naming the key.
    let mut bad = c.clone();
    bad.fdp.configuration = 3;
    let e = bad.validate().unwrap_err().to_string();
    assert!(e.contains("fdp.configuration") && e.contains("offers 3"), "{e}");
    let mut bad = c.clone();
    bad.fdp.extra_configurations[1].handles = 0;
    let e = bad.validate().unwrap_err().to_string();
    assert!(e.contains("fdp.extra_configurations[1].handles"), "{e}");
}

#[test]
fn extra_configurations_parse_from_toml_with_defaults_for_missing_fields() {
    let text = "preset = \"fdp-ssd\"\n[fdp]\nconfiguration = 1\nextra_configurations = [{ handles = 4, handle_types = [\"persistently-isolated\"] }]\n";
    let c = Config::from_toml_str(text, "x.toml").unwrap();
    let a = c.fdp.active();
    assert_eq!((a.handles, a.reclaim_groups, a.handle_type(3)), (4, 1, HandleType::PersistentlyIsolated));
    let e = Config::from_toml_str("[fdp]\nextra_configurations = [{ handels = 4 }]\n", "x.toml").unwrap_err().to_string();
    assert!(e.contains("handels"), "{e}");
}

#[test]
fn a_toml_mix_runs_the_same_as_the_api_mix() {
    let parts = [(stream(Pattern::Sequential, 0.0, 0.5, 131072, 0), 1.0), (stream(Pattern::Uniform, 0.5, 0.4, 4096, 1), 32.0)];
    let mut c = device(true, &[HandleType::InitiallyIsolated]);
    let mut api = Device::new(c.clone()).unwrap();
    let want = api.run_mix(&parts, &stop(1.0), &mut no_progress).unwrap().metrics;
    let text = r#"
[workload]
queue_depth = 1
stop_device_writes = 1.0
mix = [
  { weight = 1, pattern = "sequential", span = 0.5, block_bytes = [131072], placement = 0 },
  { weight = 32, pattern = "uniform", offset = 0.5, span = 0.4, placement = 1 },
]
"#;
    let from_toml = Config::from_toml_str(text, "mix.toml").unwrap();
    c.workload = from_toml.workload;
    let mut dev = Device::new(c.clone()).unwrap();
    let w = c.workload.clone();
    let mut got = dev.run_mix(&w.mix_parts().unwrap(), &w, &mut no_progress).unwrap().metrics;
    // Everything but the echoed config (which records how the run was written) is identical.
    let mut want = want;
    want.as_object_mut().unwrap().remove("config");
    got.as_object_mut().unwrap().remove("config");
    assert_eq!(serde_json::to_string(&got).unwrap(), serde_json::to_string(&want).unwrap());
    assert!(handle(&got, 0)["host_write_bytes"].as_u64().unwrap() > 0 && handle(&got, 1)["host_write_bytes"].as_u64().unwrap() > 0);

    // Bad parts name the part and the key.
    for (part, needle) in [
        ("{ weight = 0 }", "workload.mix[0].weight"),
        ("{ stop_ops = 5 }", "workload.mix[0].stop_ops"),
        ("{ patern = \"uniform\" }", "workload.mix[0].patern"),
        ("{ pattern = \"zigzag\" }", "workload.mix[0]"),
        ("{ offset = 0.8, span = 0.5 }", "workload.mix[0].span"),
    ] {
        let text = format!("[workload]\nmix = [{part}]\n");
        let e = Config::from_toml_str(&text, "mix.toml").unwrap_err().to_string();
        assert!(e.contains(needle), "{part}: {e}");
    }
}

#[test]
fn the_namespace_placement_handle_list_maps_to_reclaim_unit_handles() {
    let mut c = device(true, &[HandleType::InitiallyIsolated]);
    c.fdp.namespace_handles = vec![2, 0];
    let mut dev = Device::new(c.clone()).unwrap();
    let sector = vec![0u8; 4096];
    dev.write_placed(0, &sector, false, Some(0)).unwrap(); // placement handle 0 -> RUH 2
    dev.write_placed(4096, &sector, false, Some(1)).unwrap(); // placement handle 1 -> RUH 0
    dev.write_placed(8192, &sector, false, None).unwrap(); // default: placement handle 0
    let e = dev.write_placed(0, &sector, false, Some(2)).unwrap_err();
    assert!(matches!(e, Error::Nvme(Status::InvalidField, _)), "{e}");
    let st = dev.ftl().ruh_status().unwrap();
    assert_eq!(st.iter().map(|s| (s.handle, s.ruhid)).collect::<Vec<_>>(), vec![(0, 2), (1, 0)]);
    let ru = dev.ftl().fdp().unwrap().ru_sectors[0];
    assert_eq!(st.iter().map(|s| ru - s.ruamw).collect::<Vec<_>>(), vec![2, 1]);
    assert_eq!(dev.ftl().ruh_usage().unwrap(), vec!["host-specified", "unused", "host-specified", "unused"]);
    // A list naming a handle the configuration lacks, or twice, is a config error.
    for bad in [vec![4], vec![1, 1]] {
        c.fdp.namespace_handles = bad;
        assert!(c.validate().unwrap_err().to_string().contains("fdp.namespace_handles"));
    }
}
