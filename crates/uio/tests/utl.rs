//! The UTL on open-channel flash and the data path between devices.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_core::ftl::BlockDevice;
use ssdlab_uio::cluster::{Cluster, Links, Path};
use ssdlab_uio::msgq::MsgqCosts;
use ssdlab_uio::repro::{device_config, letter_key, letter_value, model_ratio};
use ssdlab_uio::utl::{Utl, UtlConfig, UtlError};

/// 2 x 2 dies x 16 blocks of 64 x 4 KiB pages: 16 MiB of flash.
fn small(timing: bool) -> ssdlab_core::Config {
    let mut c = device_config("quick").unwrap();
    c.geometry.blocks_per_plane = 16;
    c.timing.enabled = timing;
    c
}

#[test]
fn gc_keeps_every_live_record_while_the_flash_is_rewritten_many_times() {
    let mut u = Utl::new(&small(false), UtlConfig::default()).unwrap();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = Pcg64Mcg::seed_from_u64(7);
    // ~4000 keys of up to ~9 KiB: about half the usable capacity live, 10x the flash written.
    let mut written = 0u64;
    let mut i = 0u64;
    while written < 10 * 16 * 1024 * 1024 {
        let k = letter_key(rng.gen_range(0..4000), 12);
        let len = if rng.gen_bool(0.1) { rng.gen_range(4096..9000) } else { rng.gen_range(1..1500) };
        let v = letter_value(len, i);
        u.put(&k, &v, 0).unwrap();
        written += v.len() as u64;
        model.insert(k, v);
        i += 1;
    }
    let s = u.stats().clone();
    assert!(s.gc_victims > 100, "GC ran {} times", s.gc_victims);
    assert!(s.gc_kept_records > 0 && s.gc_scanned_records > s.gc_kept_records);
    assert_eq!(u.keys(), model.len());
    for (k, v) in &model {
        let (got, _) = u.get(k, 0).unwrap();
        assert_eq!(got.as_deref(), Some(&v[..]), "key {}", String::from_utf8_lossy(k));
    }
    u.check().unwrap();
    // Every erase on the flash is one of the UTL's victims.
    assert_eq!(u.device().media().c.nand_erase_count, s.blocks_erased);
    // Flash writes = records appended by puts and by GC, plus the padding, in whole pages.
    let appended = s.put_record_bytes + s.gc_kept_bytes + s.pad_bytes;
    assert!(s.flash_write_bytes <= appended && appended - s.flash_write_bytes < 4096, "{s:?}");
    let (live, cap) = u.live_bytes();
    assert!(live <= cap);
}

#[test]
fn records_span_pages_and_read_back_from_the_page_buffer_before_programming() {
    let mut u = Utl::new(&small(true), UtlConfig::default()).unwrap();
    let v = letter_value(10_000, 3);
    let t = u.put(b"span", &v, 0).unwrap();
    // Two full pages programmed, the third page still in the buffer.
    assert_eq!(u.stats().flash_write_bytes, 8192);
    // Filling the second page needs the first page's buffer back (two page buffers): the put
    // waits for one program (200 us), not two.
    assert!((200_000..400_000).contains(&t), "put done at {t}");
    let (got, _) = u.get(b"span", 0).unwrap();
    assert_eq!(got.unwrap(), v);
    let l = u.locate(b"span").unwrap();
    assert_eq!((l.block, l.offset, l.len), (l.block, 0, 10 + 4 + 10_000));
    // A read of programmed pages pays the array read time (40 us).
    let (_, done) = u.get(b"span", 10_000_000).unwrap();
    assert!(done >= 10_000_000 + 40_000, "read done at {done}");
    // Unknown keys cost no flash read.
    assert_eq!(u.get(b"nope", 5).unwrap(), (None, 5));
}

#[test]
fn puts_wait_for_the_previous_program_when_both_page_buffers_are_busy() {
    let mut u = Utl::new(&small(true), UtlConfig::default()).unwrap();
    let page = letter_value(4096 - 10 - 2, 0);
    assert_eq!(u.put(b"p0", &page, 0).unwrap(), 0);
    // The second page fills while the first is programming (200 us): the put waits for it.
    let t = u.put(b"p1", &page, 0).unwrap();
    assert!(t >= 200_000, "second page's put returned at {t}");
}

#[test]
fn refuses_what_does_not_fit_and_keeps_what_is_stored() {
    let mut u = Utl::new(&small(false), UtlConfig::default()).unwrap();
    assert!(matches!(u.put(b"k", &vec![b'x'; 300_000], 0), Err(UtlError::TooLarge(..))));
    let v = letter_value(60_000, 1);
    let mut stored = 0;
    let err = loop {
        match u.put(&letter_key(stored, 8), &v, 0) {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, UtlError::Full(_)), "{err}");
    let (live, cap) = u.live_bytes();
    assert!(live <= cap && cap - live < 60_010, "stops only when full: {live} of {cap}");
    // Overwrites still work when full (GC makes room), and nothing was lost.
    u.put(&letter_key(0, 8), &v, 0).unwrap();
    for i in 0..stored {
        assert_eq!(u.get(&letter_key(i, 8), 0).unwrap().0.unwrap(), v);
    }
    u.check().unwrap();
}

#[test]
fn same_seed_same_numbers() {
    let run = || {
        let mut c = Cluster::new(2, &small(true), UtlConfig::default(), Links::default(), Path::Uio).unwrap();
        let mut out = vec![];
        let mut lat = vec![];
        for i in 0..3000u64 {
            let k = letter_key(i % 700, 10);
            lat.push(c.put((i % 2) as u16, &k, &letter_value((i % 5000) as usize + 1, i), i * 1000).unwrap().latency_ns);
            lat.push(c.get(0, &k, &mut out, i * 1000 + 500).unwrap().1.latency_ns);
        }
        (lat, c.devices().iter().map(|d| d.stats().clone()).collect::<Vec<_>>())
    };
    assert_eq!(run(), run());
}

#[test]
fn both_paths_store_the_same_data_and_uio_is_faster_remotely_slower_locally() {
    let links = Links::default();
    for path in [Path::Uio, Path::Traditional] {
        let mut c = Cluster::new(3, &small(false), UtlConfig::default(), links, path).unwrap();
        let mut out = vec![];
        for i in 0..300u64 {
            let k = letter_key(i, 16);
            let v = letter_value(100 + i as usize, i);
            let d = c.put(0, &k, &v, 0).unwrap();
            assert_eq!(d.remote, c.gme().route(&k) != 0);
            // Read back from another host: the key lives where GME says, whoever asks.
            let (found, g) = c.get(1, &k, &mut out, 0).unwrap();
            assert!(found);
            assert_eq!(out, v);
            assert_eq!(g.target, d.target);
        }
        assert!(!c.get(2, b"missing", &mut out, 0).unwrap().0);
    }
    let lat = |path, remote: bool| {
        let mut c = Cluster::new(2, &small(false), UtlConfig::default(), links, path).unwrap();
        let k = (0..).map(|i| letter_key(i, 16)).find(|k| (c.gme().route(k) != 0) == remote).unwrap();
        let v = letter_value(4096, 0);
        let p = c.put(0, &k, &v, 0).unwrap().latency_ns;
        let g = c.get(0, &k, &mut vec![], 0).unwrap().1.latency_ns;
        (p, g)
    };
    let (up, ug) = lat(Path::Uio, true);
    let (tp, tg) = lat(Path::Traditional, true);
    assert!(up < tp && ug < tg, "remote: uio {up}/{ug} ns vs traditional {tp}/{tg} ns");
    let (up, ug) = lat(Path::Uio, false);
    let (tp, tg) = lat(Path::Traditional, false);
    // Locally UIO pays exactly GME's route on the way in.
    assert_eq!(up - tp, links.gme(16));
    assert_eq!(ug - tg, links.gme(16));
}

#[test]
fn each_profile_adds_exactly_its_listed_legs() {
    // A document-simulator profile from made-up measurements (a 5 us hop), and the hardware one.
    let m = MsgqCosts {
        rounds: 1,
        hop_ns: 5_000,
        packet_hop_ns: 6_000,
        packet_bytes: 4096,
        msgq_bytes_per_s: 4096e9 / 1000.0,
        memcpy_bytes_per_s: 5e9,
        hash_bytes_per_s: 1e9,
    };
    for links in [Links::default(), Links::document_simulator(&m)] {
        let lat = |path, remote: bool| {
            let mut c = Cluster::new(2, &small(false), UtlConfig::default(), links, path).unwrap();
            let k = (0..).map(|i| letter_key(i, 16)).find(|k| (c.gme().route(k) != 0) == remote).unwrap();
            let v = letter_value(4096, 0);
            let p = c.put(0, &k, &v, 0).unwrap().latency_ns;
            let g = c.get(0, &k, &mut vec![], 0).unwrap().1.latency_ns;
            (p, g)
        };
        let (kv, k, v) = (16 + 4096, 16, 4096);
        let (up, ug) = lat(Path::Uio, true);
        let (tp, tg) = lat(Path::Traditional, true);
        // The traditional path's extra legs, as listed in cluster.rs's table, no more, no less.
        let l = links;
        assert_eq!(tp - up, l.host_send_ns + 2 * l.dma(kv) + l.host(kv) + l.host_reply_ns - l.gme(16) - l.hop_ns);
        assert_eq!(tg - ug, l.host_send_ns + 2 * l.dma(k) + l.host(k) + 2 * l.dma(v) + l.host_reply_ns - l.gme(16) - l.hop_ns);
        let (up, ug) = lat(Path::Uio, false);
        let (tp, tg) = lat(Path::Traditional, false);
        assert_eq!((up - tp, ug - tg), (l.gme(16), l.gme(16)));
    }
    let d = Links::document_simulator(&m);
    // Every hop of the document's simulator is the measured one; a 4 KiB packet costs one hop
    // plus its bytes at the queue's copy rate.
    assert_eq!(
        (d.dma_ns, d.gme_ns, d.hop_ns, d.packet_ns, d.host_stack_ns, d.host_reply_ns, d.host_send_ns),
        (5_000, 5_000, 5_000, 5_000, 5_000, 5_000, 0)
    );
    assert_eq!(d.net(0), 5_000 + ((10 + 66) as f64 * 1e9 / d.net_bytes_per_s).round() as u64);
}

#[test]
fn the_overhead_model_is_the_documents_equation() {
    // The document's example: a = 10%, b = 2% gives u' = 0.9 + 0.12 / N.
    for n in [1u16, 2, 4, 8] {
        assert!((model_ratio(n, 0.10, 0.02) - (0.9 + 0.12 / n as f64)).abs() < 1e-12);
    }
}
