//! Wear-levelling: the swap trigger (adaptive threshold and fixed period), which channels and
//! dies a swap pairs, and a device run to death with and without swaps.

use ssdlab_core::config::StorageMode;
use ssdlab_vssd::flashblox::FlashBlox;
use ssdlab_vssd::{device_config, FlashBloxConfig, Isolation, Placement, SwapPair, SwapPolicy, WearConfig};

fn fb(wear: WearConfig) -> FlashBlox {
    let mut c = device_config("lifetime").unwrap();
    c.storage = StorageMode::Metadata;
    FlashBlox::new(&c, FlashBloxConfig { wear, ..Default::default() }).unwrap()
}

fn channel(f: &mut FlashBlox, ch: u32) -> u32 {
    f.alloc_virtual_ssd(Isolation::Channel, 0, 1, &Placement { channels: vec![ch], spread: false }).unwrap()
}

/// Write and free one whole block of vSSD `v` (one erase on each of its 4 dies).
fn cycle(f: &mut FlashBlox, v: u32, now: u64) {
    let b = f.alloc_block(v).unwrap();
    let n = f.vssd(v).unwrap().block_sectors(f.geo());
    f.write_data(v, b, 0, n, None, now).unwrap();
    f.free_block(v, b, now).unwrap();
}

#[test]
fn adaptive_trigger_fires_when_a_channel_has_erased_g() {
    let chunk = device_config("lifetime").unwrap();
    let chunk_bytes = 2 * 4 * 16384u64; // 2 planes x 4 pages x 16 KiB
    assert_eq!(chunk.geometry.pages_per_block, 4);
    // g = 10 blocks of a channel vSSD: 40 chunk erases on its channel.
    let g = 40 * chunk_bytes;
    let mut f = fb(WearConfig { policy: SwapPolicy::Adaptive, threshold_bytes: g, ..Default::default() });
    let hot = channel(&mut f, 3);
    let _cold = channel(&mut f, 7);
    for i in 0..9 {
        cycle(&mut f, hot, i);
        assert_eq!(f.migration().swaps, 0, "after {} blocks", i + 1);
    }
    // Some cold data on channel 7 (it moves with its channel).
    let (wear_before, _) = f.wear();
    cycle(&mut f, hot, 9);
    assert_eq!(f.migration().swaps, 1, "the 10th block crosses g");
    // The most-worn channel (3) swapped with the lowest-rate one (all others 0: the least worn,
    // lowest index: channel 0).
    assert_eq!(wear_before.iter().enumerate().max_by_key(|x| x.1).unwrap().0, 3);
    assert_eq!(f.physical_dies(hot).unwrap().iter().map(|d| d / 4).collect::<Vec<_>>(), vec![0; 4]);
    // Without timing the swap is carried out at once; counters start over.
    assert!(!f.swapping());
    for i in 0..9 {
        cycle(&mut f, hot, 10 + i);
    }
    assert_eq!(f.migration().swaps, 1);
    f.check_invariants();
}

#[test]
fn fixed_period_swaps_and_the_rotation_pair() {
    let week = 7 * 24 * 3600 * 1_000_000_000u64;
    let mut f = fb(WearConfig { policy: SwapPolicy::Fixed, pair: SwapPair::MaxRateMinWear, period_ns: week, ..Default::default() });
    let hot = channel(&mut f, 0);
    let mut t = 0;
    let mut homes = vec![];
    for _ in 0..4 {
        for _ in 0..5 {
            cycle(&mut f, hot, t);
            t += week / 10;
        }
        homes.push(f.physical_dies(hot).unwrap()[0] / 4);
        t += week / 2;
    }
    // Rotation: the writes move each week to the least-worn channel (ties: lowest index).
    assert_eq!(f.migration().swaps, 3);
    assert_eq!(homes, vec![0, 1, 2, 3]);
}

#[test]
fn die_swaps_put_the_coolest_tenant_on_the_most_worn_die() {
    let mut f = fb(WearConfig { die_swaps: true, ..Default::default() });
    let none = Placement { channels: vec![0], spread: false };
    // Channel 0: four die-isolated tenants, die 2's the busiest.
    let on0: Vec<u32> = (0..4).map(|_| f.alloc_virtual_ssd(Isolation::Die, 0, 1, &none).unwrap()).collect();
    let on1: Vec<u32> =
        (0..4).map(|_| f.alloc_virtual_ssd(Isolation::Die, 0, 1, &Placement { channels: vec![1], spread: false }).unwrap()).collect();
    for (i, &v) in on0.iter().enumerate() {
        for _ in 0..[1, 2, 9, 3][i] {
            cycle(&mut f, v, 0);
        }
    }
    // Channel 1: die 7's tenant writes least (not at all).
    for (i, &v) in on1.iter().enumerate() {
        for _ in 0..[4, 5, 6, 0][i] {
            cycle(&mut f, v, 0);
        }
    }
    f.start_swap(0, 1, 0).unwrap();
    // The most-worn die of channel 0 (die 2) now holds the tenant that was on die 7.
    assert_eq!(f.physical_dies(on1[3]).unwrap(), vec![2]);
    // The others pair in order: 0 <-> 4, 1 <-> 5, 3 <-> 6.
    assert_eq!(f.physical_dies(on1[0]).unwrap(), vec![0]);
    assert_eq!(f.physical_dies(on1[1]).unwrap(), vec![1]);
    assert_eq!(f.physical_dies(on1[2]).unwrap(), vec![3]);
    assert_eq!(f.physical_dies(on0[2]).unwrap(), vec![7]);
    f.check_invariants();
}

#[test]
fn a_hammered_channel_dies_early_without_swaps_and_lives_with_them() {
    use ssdlab_vssd::lifetime::{run, LifetimeSpec, LifetimeTenant, WEEK_NS};
    let mut dev = device_config("lifetime").unwrap();
    // A short-lived part so the test runs the device to death in a moment (long enough that
    // the swaps' own erases stay a few percent of the wear).
    dev.media.pe_limit = 1500;
    let tenants: Vec<LifetimeTenant> = (0..16)
        .map(|c| LifetimeTenant {
            name: format!("t{c}"),
            placement: Placement { channels: vec![c], spread: false },
            write_share: if c == 0 { 1.0 } else { 0.0 },
            fill: 0.9,
            ..Default::default()
        })
        .collect();
    let study = |wear: WearConfig| {
        let spec = LifetimeSpec {
            flashblox: FlashBloxConfig { wear, ..Default::default() },
            tenants: tenants.clone(),
            max_weeks: 400.0,
            ..Default::default()
        };
        run(dev.clone(), &spec, &mut |_| true).unwrap().0["summary"].clone()
    };
    let none = study(WearConfig::default());
    let frac = |s: &serde_json::Value| s["lifetime_fraction"].as_f64().unwrap();
    // One channel of sixteen takes all the writes: a sixteenth of the ideal life, minus the
    // reserve.
    assert!(none["dead"].as_bool().unwrap());
    assert!((frac(&none) - 1.0 / 16.0).abs() < 0.01, "{}", frac(&none));
    let rot = study(WearConfig { policy: SwapPolicy::Fixed, pair: SwapPair::MaxRateMinWear, period_ns: WEEK_NS, ..Default::default() });
    assert!(frac(&rot) > 0.9, "{}", frac(&rot));
    assert!(rot["swaps"].as_u64().unwrap() > 200);
}
