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

#[test]
fn acknowledged_writes_stay_readable_when_the_device_fills() {
    let cfg = LsmConfig {
        memtable_bytes: 64 << 10,
        sst_target_bytes: 64 << 10,
        level1_bytes: 256 << 10,
        size_ratio: 4,
        policy: Policy::Baseline,
        ..Default::default()
    };
    let mut s = Store::new(device(), cfg).unwrap();
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
