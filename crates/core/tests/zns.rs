//! ZNS state machine, every legal transition and every error path, plus DLWA and data.

use ssdlab_core::config::{Config, Personality, StorageMode, WorkloadConfig};
use ssdlab_core::device::no_progress;
use ssdlab_core::error::Status;
use ssdlab_core::ftl::zns::{Zns, ZoneAction, ZoneState};
use ssdlab_core::ftl::{BlockDevice, WriteOpts};
use ssdlab_core::media::presets::preset;
use ssdlab_core::{Device, Error};

fn cfg(max_open: u32, max_active: u32) -> Config {
    let mut c = preset("tiny").unwrap();
    c.personality = Personality::Zns;
    c.storage = StorageMode::Data;
    c.timing.enabled = false;
    c.geometry.blocks_per_plane = 16;
    c.geometry.pages_per_block = 8;
    c.zns.zone_width = 2;
    c.zns.zone_blocks = 1;
    c.zns.zone_capacity = 0.75;
    c.zns.max_open = max_open;
    c.zns.max_active = max_active;
    c
}

fn zns(max_open: u32, max_active: u32) -> Zns {
    Zns::new(&cfg(max_open, max_active)).unwrap()
}

fn status(r: Result<impl std::fmt::Debug, Error>) -> Status {
    match r {
        Err(Error::Nvme(s, _)) => s,
        other => panic!("expected an NVMe status, got {other:?}"),
    }
}

fn state(z: &Zns, zone: usize) -> ZoneState {
    z.report(zone as u64 * z.zone_size(), None, 1).unwrap()[0].state
}

fn w(z: &mut Zns, lba: u64, n: u32) -> Result<u64, Error> {
    z.write(lba, n, None, WriteOpts::default(), 0)
}

#[test]
fn geometry() {
    let z = zns(4, 4);
    // 2 x 2 dies -> 2 die groups of width 2; 16 blocks per plane -> 32 zones of 2 blocks of
    // 8 pages x 4 sectors; capacity 75% of 64 sectors.
    assert_eq!(z.zone_count(), 32);
    assert_eq!(z.zone_size(), 64);
    assert_eq!(z.zone_capacity(), 48);
    assert_eq!(z.logical_sectors(), 32 * 64);
}

#[test]
fn writes_follow_the_write_pointer() {
    let mut z = zns(4, 4);
    let zs = z.zone_size();
    assert_eq!(state(&z, 1), ZoneState::Empty);
    assert_eq!(status(w(&mut z, zs + 1, 1)), Status::ZoneInvalidWrite);
    w(&mut z, zs, 4).unwrap();
    assert_eq!(state(&z, 1), ZoneState::ImplicitlyOpen);
    assert_eq!(z.report(zs, None, 1).unwrap()[0].wp, zs + 4);
    assert_eq!(status(w(&mut z, zs, 1)), Status::ZoneInvalidWrite, "rewrite behind the WP");
    assert_eq!(status(w(&mut z, zs + 4, 45)), Status::ZoneBoundaryError);
    w(&mut z, zs + 4, 44).unwrap();
    assert_eq!(state(&z, 1), ZoneState::Full);
    assert_eq!(status(w(&mut z, zs + 48, 1)), Status::ZoneIsFull);
    assert_eq!(status(w(&mut z, 100 * zs, 1)), Status::LbaOutOfRange);
}

#[test]
fn zone_append_returns_the_lba_written() {
    let mut z = zns(4, 4);
    let zs = z.zone_size();
    let (a, _) = z.write_zone(2 * zs, 3, None, true, false, 0).unwrap();
    let (b, _) = z.write_zone(2 * zs, 5, None, true, false, 0).unwrap();
    assert_eq!((a, b), (2 * zs, 2 * zs + 3));
    assert_eq!(status(z.write_zone(2 * zs + 1, 1, None, true, false, 0)), Status::InvalidField);
    assert_eq!(status(z.write_zone(2 * zs, 41, None, true, false, 0)), Status::ZoneBoundaryError);
    z.write_zone(2 * zs, 40, None, true, false, 0).unwrap();
}

#[test]
fn open_close_finish_reset_transitions() {
    use ZoneAction::*;
    use ZoneState::*;
    let mut z = zns(8, 8);
    let zs = z.zone_size();
    let act = |z: &mut Zns, zone: u64, a| z.zone_action(zone * zs, a, false, 0);
    // Empty: open -> EO; close of EO with no data -> Empty.
    act(&mut z, 0, Open).unwrap();
    assert_eq!(state(&z, 0), ExplicitlyOpen);
    act(&mut z, 0, Open).unwrap();
    assert_eq!(state(&z, 0), ExplicitlyOpen, "open of an open zone is a no-op");
    act(&mut z, 0, Close).unwrap();
    assert_eq!(state(&z, 0), Empty);
    assert_eq!(status(act(&mut z, 0, Close)), Status::InvalidZoneStateTransition);
    // IO -> close -> Closed -> open -> EO -> close -> Closed -> write -> IO.
    w(&mut z, zs, 2).unwrap();
    act(&mut z, 1, Close).unwrap();
    assert_eq!(state(&z, 1), Closed);
    act(&mut z, 1, Close).unwrap();
    assert_eq!(state(&z, 1), Closed, "close of a closed zone is a no-op");
    act(&mut z, 1, Open).unwrap();
    assert_eq!(state(&z, 1), ExplicitlyOpen);
    w(&mut z, zs + 2, 1).unwrap();
    assert_eq!(state(&z, 1), ExplicitlyOpen, "writes keep an explicitly open zone open");
    act(&mut z, 1, Close).unwrap();
    w(&mut z, zs + 3, 1).unwrap();
    assert_eq!(state(&z, 1), ImplicitlyOpen);
    act(&mut z, 1, Open).unwrap();
    assert_eq!(state(&z, 1), ExplicitlyOpen, "IO -> EO");
    // Finish from every active state and from empty; full -> finish is a no-op.
    act(&mut z, 1, Finish).unwrap();
    assert_eq!(state(&z, 1), Full);
    act(&mut z, 1, Finish).unwrap();
    act(&mut z, 2, Finish).unwrap();
    assert_eq!(state(&z, 2), Full, "empty -> full");
    assert_eq!(status(act(&mut z, 2, Open)), Status::InvalidZoneStateTransition);
    assert_eq!(status(act(&mut z, 2, Close)), Status::InvalidZoneStateTransition);
    // Reset of full / closed / open zones empties them and erases their blocks.
    let erases = z.counters().nand_erase_count;
    act(&mut z, 1, Reset).unwrap();
    assert_eq!(state(&z, 1), Empty);
    assert!(z.counters().nand_erase_count > erases);
    act(&mut z, 1, Reset).unwrap();
    assert_eq!(z.report(zs, None, 1).unwrap()[0].reset_count, 1, "reset of an empty zone is a no-op");
    w(&mut z, 3 * zs, 1).unwrap();
    act(&mut z, 3, Close).unwrap();
    act(&mut z, 3, Reset).unwrap();
    assert_eq!(state(&z, 3), Empty);
    // Misaligned zone actions.
    assert_eq!(status(z.zone_action(1, Open, false, 0)), Status::InvalidField);
}

#[test]
fn read_only_and_offline_zones() {
    use ZoneAction::*;
    let mut z = zns(8, 8);
    let zs = z.zone_size();
    w(&mut z, 4 * zs, 8).unwrap();
    assert_eq!(status(z.zone_action(4 * zs, Offline, false, 0)), Status::InvalidZoneStateTransition);
    z.inject_zone_state(4, ZoneState::ReadOnly).unwrap();
    assert_eq!(status(w(&mut z, 4 * zs + 8, 1)), Status::ZoneIsReadOnly);
    assert_eq!(status(z.zone_action(4 * zs, Reset, false, 0)), Status::ZoneIsReadOnly);
    assert_eq!(status(z.zone_action(4 * zs, Open, false, 0)), Status::ZoneIsReadOnly);
    z.read(4 * zs, 8, None, 0).unwrap();
    z.zone_action(4 * zs, Offline, false, 0).unwrap();
    assert_eq!(state(&z, 4), ZoneState::Offline);
    assert_eq!(status(z.read(4 * zs, 1, None, 0)), Status::ZoneIsOffline);
    assert_eq!(status(w(&mut z, 4 * zs, 1)), Status::ZoneIsOffline);
    assert_eq!(status(z.zone_action(4 * zs, Finish, false, 0)), Status::ZoneIsOffline);
    assert_eq!(status(z.zone_action(4 * zs, Close, false, 0)), Status::ZoneIsOffline);
    assert_eq!(z.report(0, Some(ZoneState::Offline), 100).unwrap().len(), 1);
}

#[test]
fn open_and_active_limits() {
    use ZoneAction::*;
    let mut z = zns(2, 3);
    let zs = z.zone_size();
    w(&mut z, 0, 1).unwrap();
    w(&mut z, zs, 1).unwrap();
    // A third implicit open closes an implicitly open zone to make room.
    w(&mut z, 2 * zs, 1).unwrap();
    assert_eq!(z.report(0, Some(ZoneState::ImplicitlyOpen), 100).unwrap().len(), 2);
    assert_eq!(z.report(0, Some(ZoneState::Closed), 100).unwrap().len(), 1);
    // Three active zones: a fourth cannot become active.
    assert_eq!(status(w(&mut z, 3 * zs, 1)), Status::TooManyActiveZones);
    assert_eq!(status(z.zone_action(3 * zs, Open, false, 0)), Status::TooManyActiveZones);
    assert_eq!(status(z.zone_action(3 * zs, Finish, false, 0)), Status::TooManyActiveZones);
    // Explicitly open zones are never closed implicitly.
    z.zone_action(0, Reset, true, 0).unwrap();
    z.zone_action(0, Open, false, 0).unwrap();
    z.zone_action(zs, Open, false, 0).unwrap();
    assert_eq!(status(w(&mut z, 2 * zs, 1)), Status::TooManyOpenZones);
    assert_eq!(status(z.zone_action(2 * zs, Open, false, 0)), Status::TooManyOpenZones);
    z.check_invariants();
}

#[test]
fn select_all_actions() {
    use ZoneAction::*;
    let mut z = zns(8, 8);
    let zs = z.zone_size();
    for i in 0..4 {
        w(&mut z, i * zs, 1).unwrap();
    }
    z.zone_action(0, Close, true, 0).unwrap();
    assert_eq!(z.report(0, Some(ZoneState::Closed), 100).unwrap().len(), 4);
    z.zone_action(0, Open, true, 0).unwrap();
    assert_eq!(z.report(0, Some(ZoneState::ExplicitlyOpen), 100).unwrap().len(), 4);
    z.zone_action(0, Finish, true, 0).unwrap();
    assert_eq!(z.report(0, Some(ZoneState::Full), 100).unwrap().len(), 4);
    z.zone_action(0, Reset, true, 0).unwrap();
    assert_eq!(z.report(0, Some(ZoneState::Empty), 100).unwrap().len(), 32);
    // Partial report: at most N descriptors, from the given zone on.
    assert_eq!(z.report(5 * zs, None, 3).unwrap().iter().map(|d| d.index).collect::<Vec<_>>(), vec![5, 6, 7]);
}

#[test]
fn data_round_trips_and_reset_erases() {
    let mut z = zns(8, 8);
    let zs = z.zone_size();
    let data: Vec<u8> = (0..4096 * 20).map(|i| (i % 251) as u8).collect();
    z.write(3 * zs, 20, Some(&data), WriteOpts::default(), 0).unwrap();
    let mut out = vec![0u8; 4096 * 20];
    z.read(3 * zs, 20, Some(&mut out), 0).unwrap();
    assert_eq!(out, data);
    z.zone_action(3 * zs, ZoneAction::Reset, false, 0).unwrap();
    z.read(3 * zs, 20, Some(&mut out), 0).unwrap();
    assert!(out.iter().all(|&b| b == 0));
}

#[test]
fn zoned_log_has_dlwa_one_and_resets_zones() {
    let mut c = cfg(4, 4);
    c.storage = StorageMode::Metadata;
    c.geometry.blocks_per_plane = 64;
    c.zns.zone_capacity = 1.0;
    let mut dev = Device::new(c).unwrap();
    let w = WorkloadConfig { block_bytes: vec![65536], stop_device_writes: 3.0, queue_depth: 4, ..Default::default() };
    let rep = dev.run(&w, &mut no_progress).unwrap();
    let m = &rep.metrics;
    assert_eq!(m["dlwa"].as_f64().unwrap(), 1.0);
    assert!(m["nand_erase_count"].as_u64().unwrap() > 0);
    assert!(m["zns"]["zone_resets_total"].as_u64().unwrap() > 2 * 64);
    assert_eq!(m["gc_events"], 0);
    dev.block_device().check_invariants();
}

#[test]
fn implicit_close_takes_the_oldest_implicitly_open_zone() {
    let mut z = zns(2, 8);
    let zs = z.zone_size();
    w(&mut z, 5 * zs, 1).unwrap();
    w(&mut z, 2 * zs, 1).unwrap();
    w(&mut z, 7 * zs, 1).unwrap();
    assert_eq!(state(&z, 5), ZoneState::Closed, "zone 5 was opened first");
    assert_eq!(state(&z, 2), ZoneState::ImplicitlyOpen);
}

/// Tiny ZNS device with `n` conventional zones (zones of 64 sectors, 32 zones physically).
fn conv_zns(n: u32) -> Zns {
    let mut c = cfg(4, 4);
    c.zns.conventional_zones = n;
    c.zns.conventional_spare_zones = 2;
    Zns::new(&c).unwrap()
}

fn sector(tag: u64) -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (tag.wrapping_mul(2654435761).wrapping_add(i as u64 * 7) >> 3) as u8;
    }
    v
}

#[test]
fn conventional_zones_take_random_overwrites_with_gc_and_keep_data() {
    let mut z = conv_zns(4);
    // 4 conventional + 2 hidden spare zones out of 32: 30 host zones, the first 4 conventional.
    assert_eq!(z.zone_count(), 30);
    assert_eq!(z.conventional_zones(), 4);
    let rep = z.report(0, None, 6).unwrap();
    for d in &rep[..4] {
        assert_eq!((d.zone_type.code(), d.state, d.zcap, d.wp), (0x1, ZoneState::NotWritePointer, 64, u64::MAX));
    }
    assert_eq!((rep[4].zone_type.code(), rep[4].state, rep[4].zslba, rep[4].wp), (0x2, ZoneState::Empty, 256, 256));
    // Random overwrites over the 256 conventional sectors, several times their size.
    let conv = 4 * z.zone_size();
    let mut last = vec![u64::MAX; conv as usize];
    let mut x = 12345u64;
    for i in 0..6 * conv {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let l = (x >> 33) % conv;
        z.write(l, 1, Some(&sector(i)), WriteOpts::default(), 0).unwrap();
        last[l as usize] = i;
        if i % 97 == 0 {
            z.check_invariants();
        }
    }
    z.check_invariants();
    let m = z.personality_metrics(&serde_json::Value::Null);
    let gc = m[0].1["conventional"]["gc_segments_collected"].as_u64().unwrap();
    assert!(gc > 0, "overwrites beyond the pool must collect segments");
    let c = z.counters().clone();
    assert!(c.gc_relocated_sectors > 0 && c.nand_erase_count > 0);
    // The pages the relocations programmed are counted as garbage collection's, a page per
    // sectors_per_page relocated sectors (give or take the page open at either end).
    let spp = 16384 / 4096;
    assert!(c.gc_relocated_pages.abs_diff(c.gc_relocated_sectors / spp) <= gc, "{c:?}");
    assert!(c.nand_write_bytes > c.host_write_bytes, "random overwrites on flash cost relocations");
    // Every sector reads back its last write; never-written ones read zeros.
    let mut buf = vec![0u8; 4096];
    for l in 0..conv {
        z.read(l, 1, Some(&mut buf), 0).unwrap();
        if last[l as usize] == u64::MAX {
            assert!(buf.iter().all(|&b| b == 0));
        } else {
            assert_eq!(buf, sector(last[l as usize]), "conventional LBA {l}");
        }
    }
    // A multi-sector write may cross conventional zone boundaries, not into sequential zones.
    z.write(60, 8, Some(&[7u8; 8 * 4096]), WriteOpts::default(), 0).unwrap();
    assert_eq!(status(z.write(conv - 2, 4, Some(&[1u8; 4 * 4096]), WriteOpts::default(), 0)), Status::ZoneBoundaryError);
    // The first sequential zone is an ordinary one.
    z.write(conv, 4, Some(&[9u8; 4 * 4096]), WriteOpts::default(), 0).unwrap();
    assert_eq!(state(&z, 4), ZoneState::ImplicitlyOpen);
    z.read(conv, 1, Some(&mut buf), 0).unwrap();
    assert_eq!(buf, vec![9u8; 4096]);
    z.check_invariants();
}

#[test]
fn conventional_zones_refuse_zone_management_and_append() {
    let mut z = conv_zns(2);
    for a in [ZoneAction::Open, ZoneAction::Close, ZoneAction::Finish, ZoneAction::Reset, ZoneAction::Offline] {
        assert_eq!(status(z.zone_action(0, a, false, 0)), Status::InvalidField, "{a:?}");
    }
    assert_eq!(status(z.write_zone(0, 1, None, true, false, 0)), Status::InvalidField);
    assert!(matches!(z.inject_zone_state(1, ZoneState::ReadOnly), Err(Error::Command(_))));
    // Select-all actions pass over them.
    z.write(2 * 64, 1, None, WriteOpts::default(), 0).unwrap();
    z.zone_action(0, ZoneAction::Finish, true, 0).unwrap();
    assert_eq!(state(&z, 0), ZoneState::NotWritePointer);
    assert_eq!(state(&z, 2), ZoneState::Full);
    assert_eq!(z.report(0, Some(ZoneState::NotWritePointer), 100).unwrap().len(), 2);
    z.check_invariants();
}

#[test]
fn trimmed_conventional_data_is_not_relocated() {
    let run = |trim: bool| {
        let mut z = conv_zns(4);
        let conv = 4 * z.zone_size();
        // Fill, trim the upper half (or not), then overwrite the lower half many times.
        z.write(0, conv as u32, None, WriteOpts::default(), 0).unwrap();
        if trim {
            z.trim(conv / 2, (conv / 2) as u32, 0).unwrap();
        }
        let mut x = 99u64;
        for _ in 0..8 * conv {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            z.write((x >> 33) % (conv / 2), 1, None, WriteOpts::default(), 0).unwrap();
        }
        z.check_invariants();
        z.counters().gc_relocated_sectors
    };
    let (kept, trimmed) = (run(false), run(true));
    assert!(trimmed * 2 < kept, "trim should spare GC work: {trimmed} vs {kept} relocated sectors");
}

#[test]
fn too_many_conventional_zones_is_a_config_error() {
    let mut c = cfg(4, 4);
    c.zns.conventional_zones = 30;
    let e = Zns::new(&c).unwrap_err().to_string();
    assert!(e.contains("zns.conventional_zones") && e.contains("no sequential zone"), "{e}");
}

#[test]
fn peek_spans_are_the_bytes_a_read_returns() {
    let mut z = Zns::new(&cfg(4, 4)).unwrap();
    let zs = z.zone_size();
    // Zone 0 written in part, zone 1 full to its capacity, zone 2 never written.
    let cap = z.report(zs, None, 1).unwrap()[0].zcap;
    for l in 0..cap {
        z.write(zs + l, 1, Some(&sector(l)), WriteOpts::default(), 0).unwrap();
    }
    for l in 0..5 {
        z.write(l, 1, Some(&sector(100 + l)), WriteOpts::default(), 0).unwrap();
    }
    let sb = 4096usize;
    let lba0 = 2u64;
    let sectors = 2 * zs;
    let mut whole = vec![0u8; sectors as usize * sb];
    z.peek(lba0, &mut whole).unwrap();
    let mut read = vec![0u8; sb];
    for i in 0..sectors {
        let l = lba0 + i;
        let want = &whole[i as usize * sb..(i as usize + 1) * sb];
        if l < 5 || (l >= zs && l < zs + cap) {
            z.read(l, 1, Some(&mut read), 0).unwrap();
            assert_eq!(want, &read[..], "peek of LBA {l} is what a read returns");
        } else {
            assert!(want.iter().all(|&b| b == 0), "LBA {l} was never written");
        }
    }
    let mut x = 7u64;
    for _ in 0..200 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let skip = (x >> 20) as usize % whole.len();
        let len = (x >> 40) as usize % (whole.len() - skip + 1);
        let mut part = vec![0xAAu8; len];
        z.peek_span(lba0, sectors, skip, &mut part).unwrap();
        assert_eq!(part, whole[skip..skip + len], "span {skip}+{len}");
    }
}
