//! Wear-out and bad blocks behave the same on every personality, because they live in one
//! place (`media::Media`): a block retires at its P/E limit or on a failed erase, the
//! grown-bad counter counts exactly the retired blocks, factory bad blocks are never used, and
//! a worn-out device ends a run with an error, not a panic or a counter past the block count.
//! What the host sees follows each interface: the conventional FTL (and FDP) maps around bad
//! blocks, a ZNS zone goes offline, an open-channel chunk goes offline.

use ssdlab_core::config::{Config, Pattern, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::error::{Error, Status};
use ssdlab_core::ftl::fdp::EventType;
use ssdlab_core::ftl::ocssd::ChunkState;
use ssdlab_core::ftl::zns::ZoneState;
use ssdlab_core::media::BlockState;
use ssdlab_core::Device;

fn config(toml: &str) -> Config {
    Config::from_toml_str(toml, "<wear test>").unwrap()
}

fn writes(device_writes: f64) -> WorkloadConfig {
    WorkloadConfig { pattern: Pattern::Uniform, queue_depth: 4, stop_device_writes: device_writes, ..Default::default() }
}

/// Run until the device says it is worn out (or `max_rounds` runs of 4 device writes end).
fn wear_out(dev: &mut Device, max_rounds: usize) -> Option<Error> {
    for _ in 0..max_rounds {
        if let Err(e) = dev.run(&writes(4.0), &mut no_progress) {
            return Some(e);
        }
        dev.block_device().check_invariants();
    }
    None
}

/// What every personality must agree on after wear: the counter is the retired blocks, no
/// block is worn past the limit, and metrics.json says the same.
fn assert_media_consistent(dev: &mut Device, pe_limit: u32) -> u64 {
    let bd = dev.block_device();
    bd.check_invariants();
    let blocks = bd.blocks();
    let grown = blocks.iter().filter(|b| b.state == BlockState::Bad && !b.factory_bad).count() as u64;
    assert_eq!(bd.counters().grown_bad_blocks, grown, "grown-bad counter != retired blocks");
    assert!(grown <= blocks.len() as u64);
    assert!(blocks.iter().all(|b| b.erase_count <= pe_limit), "a block was erased past its P/E limit");
    // Retired blocks are exactly those at the limit (no erase failures in these configs).
    for b in blocks {
        assert_eq!(b.erase_count >= pe_limit, b.state == BlockState::Bad && !b.factory_bad);
    }
    grown
}

#[test]
fn conventional_retires_blocks_at_the_limit_and_ends_worn_out() {
    let mut dev = Device::new(config("preset = \"tiny\"\n[timing]\nenabled = false\n[media]\npe_limit = 12")).unwrap();
    let err = wear_out(&mut dev, 50).expect("the device wears out");
    assert!(matches!(err, Error::WornOut(_)), "{err}");
    let grown = assert_media_consistent(&mut dev, 12);
    assert!(grown > 0);
}

#[test]
fn fdp_retirements_raise_media_reallocated_events() {
    let toml =
        "preset = \"tiny\"\n[timing]\nenabled = false\n[media]\npe_limit = 12\n[fdp]\nenabled = true\nhandles = 2\nmax_events = 100000";
    let mut dev = Device::new(config(toml)).unwrap();
    let err = wear_out(&mut dev, 50).expect("the device wears out");
    assert!(matches!(err, Error::WornOut(_)), "{err}");
    let grown = assert_media_consistent(&mut dev, 12);
    let events = dev.ftl().fdp_events().unwrap();
    let realloc = events.iter().filter(|e| e.kind == EventType::MediaReallocated).count() as u64;
    assert_eq!(realloc, grown, "one media-reallocated event per retired block");
}

#[test]
fn zns_zone_goes_offline_when_its_block_wears_out() {
    // The case that used to report 520 grown-bad blocks on a 256-block device.
    let mut dev =
        Device::new(config("preset = \"tiny\"\npersonality = \"zns\"\n[timing]\nenabled = false\n[media]\npe_limit = 3")).unwrap();
    let err = wear_out(&mut dev, 200).expect("the device wears out");
    assert!(matches!(err, Error::WornOut(_)), "{err}");
    let grown = assert_media_consistent(&mut dev, 3);
    assert!(grown > 0 && grown <= 256, "grown {grown}");
    let zns = dev.zns().unwrap();
    let report = zns.report(0, None, usize::MAX).unwrap();
    let offline = report.iter().filter(|z| z.state == ZoneState::Offline).count();
    assert!(offline > 0, "worn zones are reported offline");
    // Every zone holding a retired block is offline; an offline zone holds no data.
    assert!(report.iter().filter(|z| z.state == ZoneState::Offline).all(|z| z.wp == u64::MAX));
    let zslba = report.iter().find(|z| z.state == ZoneState::Offline).unwrap().zslba;
    let zns = dev.zns_mut().unwrap();
    assert!(matches!(zns.write_zone(zslba, 1, None, false, false, 0), Err(Error::Nvme(Status::ZoneIsOffline, _))));
    assert!(matches!(zns.write_zone(zslba, 1, None, true, false, 0), Err(Error::Nvme(Status::ZoneIsOffline, _))));
}

#[test]
fn ocssd_chunk_goes_offline_when_its_block_wears_out() {
    let mut dev =
        Device::new(config("preset = \"tiny\"\npersonality = \"ocssd\"\n[timing]\nenabled = false\n[media]\npe_limit = 3")).unwrap();
    let err = wear_out(&mut dev, 200).expect("the device wears out");
    assert!(matches!(err, Error::WornOut(_)), "{err}");
    let grown = assert_media_consistent(&mut dev, 3);
    assert!(grown > 0);
    let oc = dev.ocssd_mut().unwrap();
    let info = oc.chunk_info(None);
    let offline: Vec<_> = info.iter().filter(|c| c.state == ChunkState::Offline).collect();
    assert_eq!(offline.len() as u64, grown, "one plane per chunk on tiny: a retired block per offline chunk");
    let slba = offline[0].slba;
    let ws = oc.geometry().ws_min as u64;
    let lbas: Vec<u64> = (slba..slba + ws).collect();
    assert!(matches!(oc.vector_write(&lbas, None, 0), Err(Error::Nvme(Status::OutOfOrderWrite, _))));
    assert!(matches!(oc.vector_reset(&[slba], 0), Err(Error::Nvme(Status::OfflineChunk, _))));
}

#[test]
fn factory_bad_blocks_are_never_used_on_any_personality() {
    for personality in ["conventional", "zns", "ocssd"] {
        let toml = format!(
            "preset = \"tiny\"\npersonality = \"{personality}\"\nseed = 9\n[timing]\nenabled = false\n[media]\nfactory_bad_fraction = 0.05"
        );
        let mut dev = Device::new(config(&toml)).unwrap();
        let rep = dev.run(&writes(3.0), &mut no_progress).unwrap();
        let bd = dev.block_device();
        bd.check_invariants();
        let factory: Vec<usize> = (0..bd.blocks().len()).filter(|&b| bd.blocks()[b].factory_bad).collect();
        assert!(!factory.is_empty(), "{personality}: the seed draws some factory bad blocks");
        for &b in &factory {
            let m = &bd.blocks()[b];
            assert_eq!(
                (m.state, m.erase_count, m.programmed_pages),
                (BlockState::Bad, 0, 0),
                "{personality}: factory bad block {b} was used"
            );
        }
        assert_eq!(bd.counters().grown_bad_blocks, 0);
        assert_eq!(rep.metrics["blocks"]["bad_factory"].as_u64().unwrap(), factory.len() as u64, "{personality}");
        if let Some(z) = dev.zns() {
            let offline = z.report(0, Some(ZoneState::Offline), usize::MAX).unwrap().len();
            assert!(offline > 0, "zones holding factory bad blocks start offline");
        }
        if let Some(o) = dev.ocssd_mut() {
            assert!(o.chunk_info(None).iter().filter(|c| c.state == ChunkState::Offline).count() >= factory.len());
        }
    }
}

#[test]
fn erase_failures_retire_blocks_on_every_personality() {
    for personality in ["conventional", "zns", "ocssd"] {
        let toml =
            format!("preset = \"tiny\"\npersonality = \"{personality}\"\n[timing]\nenabled = false\n[media]\ngrown_bad_probability = 0.01");
        let mut dev = Device::new(config(&toml)).unwrap();
        // Enough erases for a few failures; the device may or may not wear out on the way.
        let _ = dev.run(&writes(6.0), &mut no_progress);
        let bd = dev.block_device();
        bd.check_invariants();
        let grown = bd.blocks().iter().filter(|b| b.state == BlockState::Bad).count() as u64;
        assert!(grown > 0, "{personality}: no erase failed");
        assert_eq!(bd.counters().grown_bad_blocks, grown, "{personality}");
    }
}
