//! The applications on the log-structured API keep their data through their own compaction,
//! on a data-backed device.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_core::config::StorageMode;
use ssdlab_vssd::apps::{KvStore, LogDisk, LogKv, LogKvConfig, Value};
use ssdlab_vssd::flashblox::{BlockApi, FlashBlox, VssdIo};
use ssdlab_vssd::{device_config, FlashBloxConfig, Isolation, Placement};

fn fb(timing: bool, chunks_per_die: u32) -> FlashBlox {
    let mut c = device_config("quick").unwrap();
    c.geometry.blocks_per_plane = chunks_per_die;
    c.geometry.pages_per_block = 4;
    c.storage = StorageMode::Data;
    c.timing.enabled = timing;
    FlashBlox::new(&c, FlashBloxConfig::default()).unwrap()
}

fn value(key: u64, version: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (key as u32).wrapping_mul(31).wrapping_add(version).wrapping_add(i as u32 * 7) as u8).collect()
}

#[test]
fn kv_values_survive_compaction_and_scans_walk_key_order() {
    let mut f = fb(true, 24);
    let v = f.alloc_virtual_ssd(Isolation::Die, 1, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let mut io = VssdIo { fb: &mut f, id: v };
    let mut kv = LogKv::new(&io, LogKvConfig::default()).unwrap();
    let cap = io.blocks() as u64 * io.block_sectors() as u64 * 4096;
    // Keys filling ~60% of the vSSD, then overwritten over and over (several capacities).
    let n = (cap as f64 * 0.6 / 1064.0) as u64;
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    let mut latest: HashMap<u64, u32> = HashMap::new();
    let mut t = 0;
    for round in 0..(n * 6) {
        let k = if round < n { round } else { rng.gen_range(0..n) };
        let ver = latest.get(&k).map_or(0, |x| x + 1);
        t = kv.put(&mut io, k, Value::Bytes(&value(k, ver, 1000)), t).unwrap();
        latest.insert(k, ver);
        if round % 97 == 0 {
            kv.delete(&mut io, k, t).unwrap();
            latest.remove(&k);
        }
    }
    let s = kv.stats();
    assert!(s.compactions > 20, "{s:?}");
    assert!(s.device_write_bytes > 3 * cap, "{s:?}");
    let mut out = Vec::new();
    for k in 0..n {
        let (found, done) = kv.get(&mut io, k, Some(&mut out), t).unwrap();
        assert!(done >= t);
        match latest.get(&k) {
            Some(&ver) => {
                assert!(found, "key {k} lost");
                assert_eq!(out, value(k, ver, 1000), "key {k}");
            }
            None => assert!(!found, "deleted key {k} found"),
        }
    }
    assert_eq!(s.records, latest.len() as u64);
    let (got, _) = kv.scan(&mut io, 0, 50, t).unwrap();
    assert_eq!(got, 50);
    f.check_invariants();
}

#[test]
fn log_disk_reads_back_what_was_written_through_cleaning() {
    let mut f = fb(false, 64);
    let v = f.alloc_virtual_ssd(Isolation::SoftPlane, 3, 1, &Placement { channels: vec![1, 2], spread: true }).unwrap();
    let mut io = VssdIo { fb: &mut f, id: v };
    let cap = io.blocks() as u64 * io.block_sectors() as u64;
    let sectors = cap * 7 / 10;
    let mut disk = LogDisk::new(&io, sectors, 2, 8).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(3);
    let mut shadow: HashMap<u64, u8> = HashMap::new();
    for i in 0..(sectors * 4 / 8) {
        let n = rng.gen_range(1..=8u32);
        let lba = rng.gen_range(0..sectors - n as u64);
        let tag = (i % 251) as u8;
        disk.write(&mut io, lba, n, Some(&vec![tag; n as usize * 4096]), 0).unwrap();
        for k in 0..n as u64 {
            shadow.insert(lba + k, tag);
        }
        if i % 1000 == 0 {
            disk.trim(lba, 1).unwrap();
            shadow.remove(&lba);
        }
    }
    assert!(disk.stats().gc_victims > 10, "{:?}", disk.stats());
    let mut buf = vec![0u8; 4096 * 16];
    let mut lba = 0;
    while lba < sectors {
        let n = 16.min(sectors - lba) as u32;
        disk.read(&mut io, lba, n, Some(&mut buf[..n as usize * 4096]), 0).unwrap();
        for k in 0..n as u64 {
            let want = shadow.get(&(lba + k)).copied().unwrap_or(0);
            assert!(buf[k as usize * 4096..(k as usize + 1) * 4096].iter().all(|&b| b == want), "sector {}", lba + k);
        }
        lba += n as u64;
    }
    f.check_invariants();
}
