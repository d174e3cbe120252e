//! A store whose device fills: writes are refused with "out of space", and every write it
//! acknowledged before stays readable (the memtable is not lost with a flush that found no room).

use std::collections::BTreeMap;

use ssdlab_lsm::{Error, LsmConfig, Policy, Store};

fn device() -> ssdlab_core::Config {
    let mut c = ssdlab_core::media::presets::preset("zns-ssd").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 1;
    c.geometry.blocks_per_plane = 24;
    c.geometry.pages_per_block = 16;
    c.zns.zone_capacity = 1.0;
    c
}

/// Small files and levels: the tree has several levels on the 24 MiB device.
fn store_config() -> LsmConfig {
    LsmConfig {
        memtable_bytes: 64 << 10,
        sst_target_bytes: 64 << 10,
        level1_bytes: 256 << 10,
        size_ratio: 4,
        policy: Policy::Baseline,
        ..Default::default()
    }
}

#[test]
fn acknowledged_writes_stay_readable_when_the_device_fills() {
    let mut s = Store::new(device(), store_config()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut refused = 0;
    'outer: for round in 0..20u32 {
        for i in 0..4800u32 {
            let k = format!("key{i:04}").into_bytes();
            let v = vec![(round as u8).wrapping_add(i as u8); 4000];
            match s.put(&k, &v) {
                Ok(_) => {
                    model.insert(k, v);
                }
                Err(Error::NoSpace(_)) => {
                    refused += 1;
                    if refused > 20 {
                        break 'outer;
                    }
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
    }
    assert!(refused > 0, "the device never filled");
    for (k, v) in &model {
        let got = s.get(k).unwrap_or_else(|e| panic!("GET {} after the device filled: {e}", String::from_utf8_lossy(k)));
        assert!(got.value.as_deref() == Some(v.as_slice()), "{}: not the value last written", String::from_utf8_lossy(k));
    }
}

/// A full store keeps serving: the clock moves on, reads, scans and deletes work, and the room
/// deletes give back takes new writes (a served store must not wedge on its first refusal).
#[test]
fn a_full_store_serves_reads_and_deletes_and_reuses_the_space_they_free() {
    let mut s = Store::new(device(), store_config()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut t = 0u64;
    let mut full = false;
    'outer: for round in 0..20u32 {
        for i in 0..4800u32 {
            t += 10_000;
            s.advance_to(t).unwrap_or_else(|e| panic!("the clock stopped at round {round}: {e}"));
            let k = format!("key{i:04}").into_bytes();
            let v = vec![(round as u8).wrapping_add(i as u8); 4000];
            // What a served store does: new data only while there is room past the reserve.
            if !s.make_room().unwrap() {
                full = true;
                break 'outer;
            }
            s.put(&k, &v).unwrap_or_else(|e| panic!("round {round}: a put with room: {e}"));
            model.insert(k, v);
        }
    }
    assert!(full, "the device never filled");
    // Reads, the clock and scans go on.
    for _ in 0..3 {
        t += 1_000_000;
        s.advance_to(t).unwrap();
    }
    let (pairs, _) = s.scan(b"\0", None, 100_000).unwrap();
    assert_eq!(pairs.len(), model.len(), "a scan of the full store");
    for (k, v) in &model {
        assert_eq!(s.get(k).unwrap().value.as_deref(), Some(v.as_slice()));
    }
    // Deletes are accepted, and what they free takes new writes.
    let doomed: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    for k in &doomed {
        t += 10_000;
        s.advance_to(t).unwrap();
        s.delete(k).unwrap_or_else(|e| panic!("DEL on a full store: {e}"));
        model.remove(k);
    }
    for i in 0..doomed.len() / 2 {
        t += 10_000;
        s.advance_to(t).unwrap();
        let k = format!("new{i:04}").into_bytes();
        let v = vec![7u8; 4000];
        assert!(
            s.make_room().unwrap(),
            "no room after deleting half the keys ({i} new ones written, {} live keys): {} of {} zones empty, {} bytes live, levels {:?}, {} room compactions, {} tombstones in SSTs",
            model.len(),
            s.fs().free_zones(),
            s.fs().zone_count(),
            s.fs().live_bytes(),
            s.level_shape(),
            s.stats().compactions_room,
            s.sst_tombstones()
        );
        s.put(&k, &v).unwrap_or_else(|e| panic!("a write after deleting half the keys ({i} accepted): {e}"));
        model.insert(k, v);
    }
    for (k, v) in &model {
        assert_eq!(s.get(k).unwrap().value.as_deref(), Some(v.as_slice()));
    }
}
