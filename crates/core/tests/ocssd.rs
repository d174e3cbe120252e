//! Open-channel personality: geometry, chunk rules and their errors, copies, isolation.

use ssdlab_core::config::{Config, StorageMode};
use ssdlab_core::error::Status;
use ssdlab_core::ftl::ocssd::{ChunkState, Ocssd};
use ssdlab_core::media::presets::preset;
use ssdlab_core::Error;

fn cfg() -> Config {
    let mut c = preset("tiny").unwrap();
    c.storage = StorageMode::Data;
    c.geometry.planes_per_die = 2;
    c.geometry.blocks_per_plane = 16;
    c.geometry.pages_per_block = 8;
    c
}

fn status<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Nvme(s, _)) => s,
        other => panic!("expected an NVMe status, got {other:?}"),
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n * 4096).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn geometry_report() {
    let d = Ocssd::new(&cfg()).unwrap();
    let g = d.geometry();
    assert_eq!((g.num_grp, g.num_pu, g.num_chk), (2, 2, 16));
    assert_eq!(g.clba, 2 * 8 * 4); // two planes x 8 pages x 4 sectors
    assert_eq!(g.ws_min, 8);
    assert_eq!(d.lba(1, 1, 3, 5), ((2 + 1) * 16 + 3) * 64 + 5);
    assert_eq!(d.chunk_info(None).len(), 64);
}

#[test]
fn writes_are_sequential_in_ws_min_units_and_read_back() {
    let mut d = Ocssd::new(&cfg()).unwrap();
    let c0 = d.lba(0, 1, 2, 0);
    let lbas: Vec<u64> = (0..16).map(|i| c0 + i).collect();
    let data = bytes(16, 7);
    d.vector_write(&lbas, Some(&data), 0).unwrap();
    let info = &d.chunk_info(Some((0, 1)))[2];
    assert_eq!((info.state, info.wp), (ChunkState::Open, c0 + 16));
    let mut out = vec![0u8; 16 * 4096];
    d.vector_read(&lbas, Some(&mut out), 0).unwrap();
    assert_eq!(out, data);
    // Out of order, short of ws_min, too many addresses, beyond the write pointer.
    assert_eq!(status(d.vector_write(&[c0 + 17], None, 0)), Status::OutOfOrderWrite);
    assert_eq!(status(d.vector_write(&(16..20).map(|i| c0 + i).collect::<Vec<_>>(), None, 0)), Status::InvalidField);
    assert_eq!(status(d.vector_write(&(16..81).map(|i| c0 + i).collect::<Vec<_>>(), None, 0)), Status::InvalidField);
    // Beyond the write pointer: zeros, as QEMU's reference emulator returns.
    let mut one = vec![1u8; 4096];
    d.vector_read(&[c0 + 16], Some(&mut one), 0).unwrap();
    assert!(one.iter().all(|&b| b == 0));
    // One command may span chunks on different PUs, each in order.
    let other = d.lba(1, 0, 0, 0);
    let mixed: Vec<u64> = (16..24).map(|i| c0 + i).chain((0..8).map(|i| other + i)).collect();
    d.vector_write(&mixed, None, 0).unwrap();
    // Fill the chunk: it closes, and further writes are out of order.
    let rest: Vec<u64> = (24..64).map(|i| c0 + i).collect();
    for part in rest.chunks(40) {
        d.vector_write(part, None, 0).unwrap();
    }
    assert_eq!(d.chunk_info(Some((0, 1)))[2].state, ChunkState::Closed);
    assert_eq!(status(d.vector_write(&(0..8).map(|i| c0 + i).collect::<Vec<_>>(), None, 0)), Status::OutOfOrderWrite);
}

#[test]
fn reset_offline_and_copy() {
    let mut d = Ocssd::new(&cfg()).unwrap();
    let a = d.lba(0, 0, 0, 0);
    let b = d.lba(1, 1, 5, 0);
    let lbas: Vec<u64> = (0..24).map(|i| a + i).collect();
    let data = bytes(24, 3);
    d.vector_write(&lbas, Some(&data), 0).unwrap();
    // Copy the chunk to another channel's PU, then reset the source.
    d.copy_chunk(a, b, 0).unwrap();
    let mut out = vec![0u8; 24 * 4096];
    d.vector_read(&(0..24).map(|i| b + i).collect::<Vec<_>>(), Some(&mut out), 0).unwrap();
    assert_eq!(out, data);
    d.vector_reset(&[a], 0).unwrap();
    let info = &d.chunk_info(Some((0, 0)))[0];
    assert_eq!((info.state, info.wp, info.erase_count), (ChunkState::Free, a, 1));
    assert_eq!(status(d.vector_reset(&[a], 0)), Status::InvalidReset);
    assert_eq!(status(d.vector_reset(&[a + 1], 0)), Status::InvalidField);
    // A chunk named twice in one reset is refused before anything is erased.
    d.vector_write(&lbas, Some(&data), 0).unwrap();
    assert_eq!(status(d.vector_reset(&[a, a], 0)), Status::InvalidReset);
    assert_eq!(d.chunk_info(Some((0, 0)))[0].erase_count, 1);
    d.vector_reset(&[a], 0).unwrap();
    let (per_channel, per_die) = d.wear();
    assert_eq!(per_channel, vec![2, 0]);
    assert_eq!(per_die, vec![2, 0, 0, 0]);
    // A fresh free chunk cannot be reset either.
    assert_eq!(status(d.vector_reset(&[d.lba(1, 0, 7, 0)], 0)), Status::InvalidReset);
    // Offline chunks refuse writes and resets; their reads return zeros.
    d.set_offline(b).unwrap();
    d.vector_read(&[b], Some(&mut out[..4096]), 0).unwrap();
    assert!(out[..4096].iter().all(|&x| x == 0));
    assert_eq!(status(d.vector_write(&(24..32).map(|i| b + i).collect::<Vec<_>>(), None, 0)), Status::OutOfOrderWrite);
    assert_eq!(status(d.vector_reset(&[b], 0)), Status::OfflineChunk);
    assert_eq!(status(d.copy_chunk(a, b, 0)), Status::OutOfOrderWrite);
}

#[test]
fn parallel_units_are_isolated_in_time() {
    // Reads on PU (1, 0) take the same time whether or not PU (0, 0) is busy writing.
    let read_latency = |busy: bool, same_pu: bool| {
        let mut c = cfg();
        c.storage = StorageMode::Metadata;
        let mut d = Ocssd::new(&c).unwrap();
        let victim = if same_pu { d.lba(0, 0, 9, 0) } else { d.lba(1, 0, 0, 0) };
        d.vector_write(&(0..8).map(|i| victim + i).collect::<Vec<_>>(), None, 0).unwrap();
        let t0 = 10_000_000;
        if busy {
            for k in 0..4 {
                let base = d.lba(0, 0, k, 0);
                for part in (0..64).map(|i| base + i).collect::<Vec<_>>().chunks(64) {
                    d.vector_write(part, None, t0).unwrap();
                }
            }
        }
        d.vector_read(&[victim], None, t0).unwrap() - t0
    };
    let quiet = read_latency(false, false);
    let loaded = read_latency(true, false);
    assert_eq!(quiet, loaded, "a PU on another channel must not slow this one");
    // ...while reads on the loaded PU itself queue behind its programs.
    assert!(read_latency(true, true) > 10 * read_latency(false, true));
}

#[test]
fn ordinary_workloads_run_through_the_chunk_log() {
    use ssdlab_core::config::{Personality, WorkloadConfig};
    use ssdlab_core::device::no_progress;
    use ssdlab_core::Device;
    let mut c = cfg();
    c.personality = Personality::Ocssd;
    c.storage = StorageMode::Metadata;
    c.timing.enabled = true;
    c.precondition.random_device_writes = 0.5;
    c.workload = WorkloadConfig { stop_device_writes: 3.0, queue_depth: 8, ..Default::default() };
    let mut dev = Device::new(c.clone()).unwrap();
    let rep = dev.run_configured(&mut no_progress).unwrap();
    dev.block_device().check_invariants();
    // No device GC: every flash write is a host write; chunks are reset for reuse, wear counted.
    assert_eq!(rep.metrics["gc_relocated_sectors"], 0);
    assert!((rep.dlwa() - 1.0).abs() < 1e-6, "DLWA {}", rep.dlwa());
    assert!(rep.metrics["nand_erase_count"].as_u64().unwrap() > 64);
    assert!(rep.metrics["latency_ns"]["write"]["count"].as_u64().unwrap() > 0);
    // Every parallel unit took its share of the writes.
    let (_, per_die) = dev.ocssd_mut().unwrap().wear();
    assert!(per_die.iter().all(|&e| e > 0), "{per_die:?}");
    // Same config, same numbers.
    let again = Device::new(c).unwrap().run_configured(&mut no_progress).unwrap();
    assert_eq!(serde_json::to_string(&again.metrics).unwrap(), serde_json::to_string(&rep.metrics).unwrap());
}

#[test]
fn chunk_log_buffers_partial_units_until_flush_and_pads_them() {
    use ssdlab_core::config::Personality;
    use ssdlab_core::Device;
    let mut c = cfg();
    c.personality = Personality::Ocssd;
    c.timing.enabled = false;
    let mut dev = Device::new(c).unwrap();
    // A block-device write goes straight to the chunks (raw) and must obey their rules ...
    assert_eq!(status(dev.write(4096, &bytes(8, 1), false)), Status::OutOfOrderWrite);
    // ... while a workload writes through the chunk log: 3 sectors stay in the host buffer.
    use ssdlab_core::config::{Pattern, WorkloadConfig};
    use ssdlab_core::device::no_progress;
    let w = WorkloadConfig {
        pattern: Pattern::Sequential,
        block_bytes: vec![4096],
        block_weights: vec![1.0],
        stop_ops: 11,
        queue_depth: 1,
        ..Default::default()
    };
    let rep = dev.run(&w, &mut no_progress).unwrap();
    // 11 sectors: the device has seen one 8-sector unit; 3 sectors wait in the host buffer.
    let written = |dev: &mut Device| -> u64 { dev.ocssd_mut().unwrap().chunk_info(None).iter().map(|ci| ci.wp - ci.slba).sum() };
    assert_eq!(rep.metrics["host_write_bytes"], 8 * 4096);
    assert_eq!(written(&mut dev), 8);
    // A flush pads them to a whole unit (the device counts the padding as host data).
    dev.flush().unwrap();
    assert_eq!(written(&mut dev), 16);
    assert_eq!(dev.block_device().counters().host_write_bytes, 16 * 4096);
}

#[test]
fn chunk_oob_record_is_written_with_the_first_unit_and_dropped_by_reset() {
    use ssdlab_core::ftl::ocssd::OOB_BYTES;
    let mut d = Ocssd::new(&cfg()).unwrap();
    let a = d.lba(1, 0, 4, 0);
    assert_eq!(d.chunk_oob(a).unwrap(), None, "a free chunk has no record");
    let rec: [u8; OOB_BYTES] = std::array::from_fn(|i| i as u8 + 1);
    let mut meta = vec![0u8; 16 * OOB_BYTES];
    meta[..OOB_BYTES].copy_from_slice(&rec);
    meta[OOB_BYTES..2 * OOB_BYTES].fill(0xee); // sector 1: accepted, not kept
    d.vector_write_oob(&(0..16).map(|i| a + i).collect::<Vec<_>>(), None, Some(&meta), 0).unwrap();
    assert_eq!(d.chunk_oob(a).unwrap(), Some(rec));
    assert!(d.chunk_oob(a + 1).is_err(), "records are per chunk start");
    // Later units leave the record alone; a metadata buffer of the wrong size is refused whole.
    d.vector_write_oob(&(16..24).map(|i| a + i).collect::<Vec<_>>(), None, Some(&[0xffu8; 8 * OOB_BYTES]), 0).unwrap();
    assert_eq!(d.chunk_oob(a).unwrap(), Some(rec));
    assert!(d.vector_write_oob(&(24..32).map(|i| a + i).collect::<Vec<_>>(), None, Some(&[0u8; 3]), 0).is_err());
    assert_eq!(d.chunk(a as usize / 64).wp, a + 24);
    d.vector_reset(&[a], 0).unwrap();
    assert_eq!(d.chunk_oob(a).unwrap(), None);
}

#[test]
fn reads_transfer_what_they_read_and_queued_reads_wait_their_turn() {
    let mut c = cfg();
    c.storage = StorageMode::Metadata;
    c.timing.read_priority = true;
    let mut d = Ocssd::new(&c).unwrap();
    let a = d.lba(0, 0, 0, 0);
    d.vector_write(&(0..16).map(|i| a + i).collect::<Vec<_>>(), None, 0).unwrap();
    let t0 = 1_000_000_000;
    let one = d.vector_read(&[a], None, t0).unwrap() - t0;
    let t1 = 2 * t0;
    let four = d.vector_read(&(0..4).map(|i| a + i).collect::<Vec<_>>(), None, t1).unwrap() - t1;
    // One sense, four sectors over the channel instead of one.
    let xfer = ssdlab_core::ftl::BlockDevice::media(&d).tl.xfer_ns(4096);
    assert!(four >= one + 3 * xfer - 2 && four <= one + 3 * xfer + 2, "one {one} four {four} xfer {xfer}");
    // Behind a queue of programs, a host read goes first; a queued (background) read does not.
    let t2 = 3 * t0;
    let b = d.lba(0, 0, 1, 0);
    for k in 0..4 {
        d.vector_write(&(0..8).map(|i| b + 8 * k + i).collect::<Vec<_>>(), None, t2).unwrap();
    }
    let host = d.vector_read(&[a], None, t2).unwrap() - t2;
    let queued = d.vector_read_queued(&[a], None, t2).unwrap() - t2;
    assert!(queued > 3 * c.timing.page_program_ns && host < 2 * c.timing.page_program_ns, "host {host} queued {queued}");
}
