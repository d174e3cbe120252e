//! The resource manager's allocation and merge rules, the log-structured API, and crash
//! recovery from the OOB records.

use ssdlab_core::config::StorageMode;
use ssdlab_core::Config;
use ssdlab_vssd::flashblox::FlashBlox;
use ssdlab_vssd::{device_config, FlashBloxConfig, Isolation, Placement, VssdError};

/// The quick device's shape (16 channels x 4 dies, 2 planes, 4 soft-planes per die) with 16
/// chunks of 32 sectors per die, contents kept.
fn small(storage: StorageMode, timing: bool) -> Config {
    let mut c = device_config("quick").unwrap();
    c.geometry.blocks_per_plane = 16;
    c.geometry.pages_per_block = 4;
    c.storage = storage;
    c.timing.enabled = timing;
    c
}

fn fb(storage: StorageMode) -> FlashBlox {
    FlashBlox::new(&small(storage, false), FlashBloxConfig::default()).unwrap()
}

fn spread(channels: &[u32]) -> Placement {
    Placement { channels: channels.to_vec(), spread: true }
}

#[test]
fn units_are_the_larger_of_throughput_and_capacity() {
    let mut f = fb(StorageMode::Metadata);
    let g = *f.geo();
    // 16 chunks per die, 1 kept in reserve: 15 logical blocks of 128 KiB per die.
    assert_eq!((g.reserve, g.ldie_blocks, g.sp_blocks), (1, 15, 3));
    let per_die = f.capacity_per(Isolation::Die);
    assert_eq!(per_die, 15 * 128 * 1024);
    assert_eq!(f.capacity_per(Isolation::Channel), 4 * per_die);
    // tput level 1 -> 2 channels by the default map; a capacity of 2.5 channels -> 3.
    let a = f.alloc_virtual_ssd(Isolation::Channel, 1, 1, &Placement::default()).unwrap();
    assert_eq!(f.vssd(a).unwrap().slots.len(), 8);
    let b = f.alloc_virtual_ssd(Isolation::Channel, 0, 2 * f.capacity_per(Isolation::Channel) + 1, &Placement::default()).unwrap();
    assert_eq!(f.vssd(b).unwrap().slots.len(), 12);
    // Channels were taken in order, packed.
    assert_eq!(f.vssd(a).unwrap().ldies(), (0..8).collect::<Vec<_>>());
    assert_eq!(f.vssd(b).unwrap().ldies(), (8..20).collect::<Vec<_>>());
    assert!(matches!(f.alloc_virtual_ssd(Isolation::Channel, 9, 1, &Placement::default()), Err(VssdError::Config(_))));
    // The vSSD's capacity covers what was asked.
    let v = f.vssd(b).unwrap();
    assert!(v.capacity(&g) > 2 * f.capacity_per(Isolation::Channel));
}

#[test]
fn allocation_takes_split_units_first_and_freeing_merges() {
    let mut f = fb(StorageMode::Metadata);
    let none = Placement::default();
    // A die-isolated vSSD splits channel 0; a second takes the rest of channel 0 before
    // splitting another channel.
    let d1 = f.alloc_virtual_ssd(Isolation::Die, 0, 1, &none).unwrap();
    assert_eq!(f.vssd(d1).unwrap().ldies(), vec![0]);
    assert_eq!(f.resources().free_dies(), vec![1, 2, 3]);
    let d2 = f.alloc_virtual_ssd(Isolation::Die, 2, 1, &none).unwrap(); // 4 dies
    assert_eq!(f.vssd(d2).unwrap().ldies(), vec![1, 2, 3, 4]);
    assert_eq!(f.resources().free_dies(), vec![5, 6, 7]);
    // A channel-isolated vSSD only takes whole free channels.
    let c = f.alloc_virtual_ssd(Isolation::Channel, 0, 1, &none).unwrap();
    assert_eq!(f.vssd(c).unwrap().ldies(), vec![8, 9, 10, 11]);
    // Soft-planes: free soft-planes of split dies first, then free dies of split channels.
    let s1 = f.alloc_virtual_ssd(Isolation::SoftPlane, 0, 1, &none).unwrap();
    assert_eq!(f.vssd(s1).unwrap().slots[0].ldie, 5);
    assert_eq!(f.resources().free_soft_planes(), vec![(5, 1), (5, 2), (5, 3)]);
    let s2 = f.alloc_virtual_ssd(Isolation::SoftPlane, 2, 1, &none).unwrap(); // 4 soft-planes
    let s2_slots: Vec<(u32, u32)> = f.vssd(s2).unwrap().slots.iter().map(|s| (s.ldie, s.first_sp)).collect();
    assert_eq!(s2_slots, vec![(5, 1), (5, 2), (5, 3), (6, 0)]);
    // Freeing merges: die 5's soft-planes back into a die, channel 1's dies into a channel.
    f.dealloc_virtual_ssd(s1, 0).unwrap();
    f.dealloc_virtual_ssd(s2, 0).unwrap();
    assert!(f.resources().free_soft_planes().is_empty());
    assert_eq!(f.resources().free_dies(), vec![5, 6, 7]);
    f.dealloc_virtual_ssd(d2, 0).unwrap();
    assert_eq!(f.resources().free_dies(), vec![1, 2, 3]);
    assert!(f.resources().free_channels().contains(&1) && !f.resources().free_channels().contains(&0));
    f.dealloc_virtual_ssd(d1, 0).unwrap();
    assert!(f.resources().free_channels().contains(&0));
    assert!(f.resources().free_dies().is_empty());
    // Not enough left: a clear error, nothing taken.
    let before = f.resources().free_channels();
    assert!(matches!(
        f.alloc_virtual_ssd(Isolation::Channel, 0, 16 * f.capacity_per(Isolation::Channel), &none),
        Err(VssdError::NoResources(_))
    ));
    assert_eq!(f.resources().free_channels(), before);
}

#[test]
fn spread_deals_dies_and_soft_planes_across_channels() {
    let mut f = fb(StorageMode::Metadata);
    // Die isolation sharing channels 0 and 1: each vSSD gets two dies of each.
    let a = f.alloc_virtual_ssd(Isolation::Die, 2, 1, &spread(&[0, 1])).unwrap();
    let b = f.alloc_virtual_ssd(Isolation::Die, 2, 1, &spread(&[0, 1])).unwrap();
    assert_eq!(f.vssd(a).unwrap().ldies(), vec![0, 1, 4, 5]);
    assert_eq!(f.vssd(b).unwrap().ldies(), vec![2, 3, 6, 7]);
    // Soft-planes over channels 2 and 3: 16 each, two on every one of the 8 dies.
    let s = f.alloc_virtual_ssd(Isolation::SoftPlane, 4, 1, &spread(&[2, 3])).unwrap();
    let t = f.alloc_virtual_ssd(Isolation::SoftPlane, 4, 1, &spread(&[2, 3])).unwrap();
    for v in [s, t] {
        assert_eq!(f.vssd(v).unwrap().ldies(), (8..16).collect::<Vec<_>>());
        assert_eq!(f.vssd(v).unwrap().slots.len(), 16);
    }
    assert!(matches!(f.alloc_virtual_ssd(Isolation::SoftPlane, 0, 1, &spread(&[2, 3])), Err(VssdError::NoResources(_))));
}

#[test]
fn blocks_stripe_over_members_and_read_back() {
    let mut f = fb(StorageMode::Data);
    let v = f.alloc_virtual_ssd(Isolation::Channel, 0, 1, &Placement::default()).unwrap();
    let g = *f.geo();
    let bs = f.vssd(v).unwrap().block_sectors(&g);
    assert_eq!(bs, 4 * 32);
    let b = f.alloc_block(v).unwrap();
    let data: Vec<u8> = (0..bs as usize * 4096).map(|i| (i * 7 % 251) as u8).collect();
    // Writes come in units at the write pointer.
    assert!(matches!(f.write_data(v, b, 8, 8, None, 0), Err(VssdError::Api(_))));
    assert!(matches!(f.write_data(v, b, 0, 4, None, 0), Err(VssdError::Api(_))));
    f.write_data(v, b, 0, 40, Some(&data[..40 * 4096]), 0).unwrap();
    f.write_data(v, b, 40, bs - 40, Some(&data[40 * 4096..]), 0).unwrap();
    f.check_invariants();
    let mut out = vec![0u8; bs as usize * 4096];
    f.read_data(v, b, 0, bs, Some(&mut out), 0).unwrap();
    assert_eq!(out, data);
    let mut part = vec![0u8; 5 * 4096];
    f.read_data(v, b, 37, 5, Some(&mut part), 0).unwrap();
    assert_eq!(part, data[37 * 4096..42 * 4096]);
    // Each of the 4 dies holds a quarter of the block.
    let dies = f.physical_dies(v).unwrap();
    assert_eq!(dies.len(), 4);
    // Reading past the write pointer, or a block that is not allocated, is refused.
    f.free_block(v, b, 0).unwrap();
    assert!(matches!(f.read_data(v, b, 0, 1, None, 0), Err(VssdError::Api(_))));
    let (ch, _) = f.wear();
    assert_eq!(ch[0], 4, "one erase per die of the freed block");
    f.check_invariants();
}

#[test]
fn soft_plane_tenants_never_take_each_others_erased_blocks() {
    let mut f = fb(StorageMode::Metadata);
    let p = spread(&[0]);
    let a = f.alloc_virtual_ssd(Isolation::SoftPlane, 2, 1, &p).unwrap(); // 4 soft-planes, one per die
    let b = f.alloc_virtual_ssd(Isolation::SoftPlane, 2, 1, &p).unwrap();
    let blocks = f.vssd(a).unwrap().blocks;
    assert_eq!(blocks, f.geo().sp_blocks);
    // A takes every block it has; B still gets all of its own.
    for _ in 0..blocks {
        f.alloc_block(a).unwrap();
    }
    assert!(matches!(f.alloc_block(a), Err(VssdError::Api(_))));
    for _ in 0..blocks {
        f.alloc_block(b).unwrap();
    }
    f.check_invariants();
}

#[test]
fn blocks_rotate_among_a_dies_soft_planes() {
    // One tenant rewrites its soft-plane over and over, its neighbour holds cold data: the
    // die's least-worn erased chunk goes to whoever writes, so the hot tenant's erases spread
    // over all the die's spare chunks, not just its quarter.
    let mut f = fb(StorageMode::Metadata);
    let hot = f.alloc_virtual_ssd(Isolation::SoftPlane, 0, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let cold = f.alloc_virtual_ssd(Isolation::SoftPlane, 0, 1, &Placement { channels: vec![0], spread: false }).unwrap();
    let cb = f.alloc_block(cold).unwrap();
    f.write_data(cold, cb, 0, 32, None, 0).unwrap();
    for _ in 0..300 {
        let b = f.alloc_block(hot).unwrap();
        f.write_data(hot, b, 0, 32, None, 0).unwrap();
        f.free_block(hot, b, 0).unwrap();
    }
    let die = f.physical_dies(hot).unwrap()[0];
    let counts: Vec<u32> = (die * 16..(die + 1) * 16).map(|c| f.device().chunk(c as usize).erase_count).collect();
    let used = counts.iter().filter(|&&e| e > 0).count();
    assert!(used >= 14, "erases spread over {used} chunks: {counts:?}");
    let max = *counts.iter().max().unwrap();
    assert!(max <= 300 / 14 + 2, "{counts:?}");
    f.check_invariants();
}

#[test]
fn recovery_rebuilds_every_map_from_oob_records() {
    let mut f = fb(StorageMode::Data);
    let v = f.alloc_virtual_ssd(Isolation::Die, 2, 1, &spread(&[3, 4])).unwrap();
    let w = f.alloc_virtual_ssd(Isolation::SoftPlane, 2, 1, &spread(&[5])).unwrap();
    let mut expect = vec![];
    for (id, blocks) in [(v, 6u32), (w, 2)] {
        let bs = f.vssd(id).unwrap().block_sectors(f.geo());
        for k in 0..blocks {
            let b = f.alloc_block(id).unwrap();
            // Some blocks full, some part-written (a prefix of the stripe).
            let n = if k % 2 == 0 { bs } else { 8 * (k + 1) };
            let data: Vec<u8> =
                (0..n as usize * 4096).map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(k + 13 * id) as u8).collect();
            f.write_data(id, b, 0, n, Some(&data), 0).unwrap();
            expect.push((id, b, data));
        }
    }
    // A block freed before the crash stays free; an allocated but unwritten one is free again.
    let gone = f.alloc_block(v).unwrap();
    f.write_data(v, gone, 0, 8, None, 0).unwrap();
    f.free_block(v, gone, 0).unwrap();
    let _empty = f.alloc_block(v).unwrap();
    let table = f.layout();
    let before = f.wear();
    // Crash: keep the device and the persisted table, lose everything else.
    let dev = f.device().clone();
    let (mut r, rep) = FlashBlox::recover(dev, &table, 0).unwrap();
    r.check_invariants();
    assert_eq!(rep.blocks_recovered, 8);
    assert_eq!((rep.duplicates, rep.chunks_erased), (0, 0));
    assert_eq!(r.wear(), before, "erase counts come back from the device");
    for (id, b, data) in &expect {
        let n = (data.len() / 4096) as u32;
        assert_eq!(r.block_written(*id, *b).unwrap(), n);
        let mut out = vec![0u8; data.len()];
        r.read_data(*id, *b, 0, n, Some(&mut out), 0).unwrap();
        assert_eq!(&out, data, "vSSD {id} block {b}");
    }
    // The rebuilt layer goes on working: partial blocks take appends at their write pointer.
    let (id, b, data) = &expect[1];
    let n = (data.len() / 4096) as u32;
    r.write_data(*id, *b, n, 8, Some(&vec![9u8; 8 * 4096]), 0).unwrap();
    assert_eq!(r.vssd(v).unwrap().free_blocks(), r.vssd(v).unwrap().blocks - 6);
    r.check_invariants();
}

#[test]
fn recovery_picks_the_complete_copy_after_a_crash_mid_migration() {
    // A swap moves blocks between channels by copying into a new chunk stamped later, then
    // erasing the old one. Crash at every point of a swap; recovery must always find each
    // block whole, in one place.
    let mut cfg = small(StorageMode::Data, true);
    cfg.timing.enabled = true;
    let mut f = FlashBlox::new(&cfg, FlashBloxConfig::default()).unwrap();
    let v = f.alloc_virtual_ssd(Isolation::Channel, 0, 1, &Placement { channels: vec![2], spread: false }).unwrap();
    let bs = f.vssd(v).unwrap().block_sectors(f.geo());
    let mut expect = vec![];
    for k in 0..5u32 {
        let b = f.alloc_block(v).unwrap();
        let data: Vec<u8> = (0..bs as usize * 4096).map(|i| (i as u32 ^ k.wrapping_mul(0x9e37)) as u8).collect();
        f.write_data(v, b, 0, bs, Some(&data), 0).unwrap();
        expect.push((b, data));
    }
    f.start_swap(2, 9, 1_000_000).unwrap();
    let mut now = 1_000_000;
    let mut crashes = 0;
    let mut dups = 0;
    while let Some(next) = f.migration_next_ns() {
        // Crash here.
        let (mut r, rep) = FlashBlox::recover(f.device().clone(), &f.layout(), now).unwrap();
        dups += rep.duplicates;
        while r.migration_next_ns().is_some() {
            let t = r.migration_next_ns().unwrap().max(now);
            r.migration_step(t).unwrap();
        }
        r.check_invariants();
        for (b, data) in &expect {
            let mut out = vec![0u8; data.len()];
            r.read_data(v, *b, 0, bs, Some(&mut out), now).unwrap();
            assert_eq!(&out, data, "block {b} after a crash at {now}");
        }
        assert_eq!(r.physical_dies(v).unwrap(), (36..40).collect::<Vec<_>>(), "the swap finished after recovery");
        crashes += 1;
        now = next.max(now);
        f.migration_step(now).unwrap();
    }
    assert!(crashes > 20, "{crashes} crash points");
    assert!(dups > 0, "some crash left two copies of a block");
    f.check_invariants();
    assert_eq!(f.physical_dies(v).unwrap(), (36..40).collect::<Vec<_>>());
}
