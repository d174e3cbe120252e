//! The RMML against a reference copy of what was written: round trips of random and
//! compressible data through the map, compression and packing, with whole blocks or runs of
//! pages as the unit; reclamation under overwrite churn; what a miss costs (a node restart: crates/serve's
//! tests/rmml_node.rs).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use ssdlab_rmml::codec::Codec;
use ssdlab_rmml::config::FetchUnit;
use ssdlab_rmml::header::HEADER_BYTES;
use ssdlab_rmml::infiniswap::{Infiniswap, InfiniswapConfig};
use ssdlab_rmml::node::{LocalNode, MemoryNode};
use ssdlab_rmml::{Rmml, RmmlConfig, SwapDevice, PAGE_BYTES};

mod common;

use common::{cfg, page, P};

fn local_nodes(k: usize, cap: u64) -> Vec<Box<dyn MemoryNode>> {
    (0..k).map(|i| Box::new(LocalNode::new(cap, i as u32 + 1)) as Box<dyn MemoryNode>).collect()
}

/// Random page writes, overwrites, discards and reads, checked against a model.
fn churn(dev: &mut Rmml, rng: &mut Pcg64, ops: usize, pages: u64, compressible: f64) {
    let mut model: Vec<Option<Vec<u8>>> = vec![None; pages as usize];
    let mut now = 0u64;
    for i in 0..ops {
        let p = rng.gen_range(0..pages);
        let r: f64 = rng.gen();
        if r < 0.5 {
            // Runs of up to 8 pages, like a swap-out batch.
            let n = rng.gen_range(1..=8u64).min(pages - p);
            let mut data = Vec::new();
            for _ in 0..n {
                let c = rng.gen_bool(compressible);
                data.extend(page(rng, c));
            }
            now = dev.write(p * PAGE_BYTES, &data, now).unwrap();
            for k in 0..n {
                model[(p + k) as usize] = Some(data[k as usize * P..(k as usize + 1) * P].to_vec());
            }
        } else if r < 0.65 {
            now = dev.discard(p * PAGE_BYTES, PAGE_BYTES, now).unwrap();
            model[p as usize] = None;
        } else {
            let mut out = vec![0xEEu8; P];
            now = dev.read(p * PAGE_BYTES, &mut out, now).unwrap();
            match &model[p as usize] {
                Some(d) => assert!(out == *d, "op {i}: page {p} differs"),
                None => assert!(out.iter().all(|&b| b == 0), "op {i}: discarded page {p} not zero"),
            }
        }
        if i % 500 == 0 {
            dev.check_invariants();
        }
    }
    dev.flush(now).unwrap();
    dev.check_invariants();
    for p in 0..pages {
        let mut out = vec![0u8; P];
        now = dev.read(p * PAGE_BYTES, &mut out, now).unwrap();
        assert_eq!(out, model[p as usize].clone().unwrap_or_else(|| vec![0; P]), "final read of page {p}");
    }
}

#[test]
fn round_trips_random_and_compressible_with_every_codec() {
    for (fetch_unit, text_ratio) in [(FetchUnit::Block, 3.0), (FetchUnit::Page, 2.0)] {
        for codec in [Codec::None, Codec::Lz4, Codec::Zstd] {
            for compressible in [0.0, 1.0, 0.5] {
                let mut rng = Pcg64::seed_from_u64(11);
                // A cache of 4 blocks over 64: most reads miss, so data goes through remote memory.
                let mut dev = Rmml::new(RmmlConfig { fetch_unit, ..cfg(codec, 4) }, local_nodes(2, 256 << 20)).unwrap();
                churn(&mut dev, &mut rng, 4000, 16 * 64, compressible);
                let st = dev.stats();
                assert!(st["fetches"].as_u64().unwrap() > 100, "{codec:?}: data must come back from remote memory");
                let ratio = st["compression_ratio"].as_f64().unwrap();
                if codec != Codec::None && compressible == 1.0 {
                    // A page alone compresses less than a block of them (less history to match).
                    assert!(ratio > text_ratio, "{fetch_unit:?}, {codec:?} on text-like pages: ratio {ratio}");
                }
                if compressible == 0.0 {
                    // Only the never-written and discarded pages of a block compress.
                    assert!(ratio < 1.5, "{fetch_unit:?}, {codec:?} on random pages: ratio {ratio}");
                }
            }
        }
    }
}

/// `cfg` with runs of `run` pages as the unit, the cache the same bytes.
fn paged(codec: Codec, cache_blocks: u64, run: u32) -> RmmlConfig {
    RmmlConfig { fetch_unit: FetchUnit::Page, page_run: run, ..cfg(codec, cache_blocks) }
}

#[test]
fn pages_compressed_one_by_one_round_trip_through_pack_fetch_and_reclaim() {
    for run in [1, 4] {
        for codec in [Codec::Lz4, Codec::Zstd] {
            let mut rng = Pcg64::seed_from_u64(13);
            let mut dev = Rmml::new(paged(codec, 4, run), local_nodes(2, 256 << 20)).unwrap();
            churn(&mut dev, &mut rng, 6000, 16 * 64, 0.5);
            let st = dev.stats();
            assert_eq!(st["unit_bytes"].as_u64().unwrap(), run as u64 * PAGE_BYTES, "{st}");
            assert!(st["fetches"].as_u64().unwrap() > 100, "run {run}, {codec:?}: data must come back from remote memory");
            assert!(st["compactions"].as_u64().unwrap() > 0, "run {run}, {codec:?}: overwrites reclaimed: {st}");
            // A miss reads one unit's record: its compressed bytes and header, no more.
            let per_fetch = st["fetch_bytes"].as_f64().unwrap() / st["fetches"].as_f64().unwrap();
            assert!(per_fetch <= (run as u64 * PAGE_BYTES + 64) as f64, "run {run}: {per_fetch} bytes a fetch");
        }
    }
}

#[test]
fn a_page_miss_costs_about_an_infiniswap_read_and_a_block_miss_far_more() {
    // One page read that misses the DPU cache, on the default links and DPU, against the same
    // page read from an Infiniswap-like device (host RDMA, no cache, no codec).
    let miss = |fetch_unit: FetchUnit| {
        let c = RmmlConfig { capacity_bytes: 64 << 20, cache_bytes: 1 << 20, fetch_unit, ..RmmlConfig::default() };
        let mut dev = Rmml::new(c, local_nodes(1, 256 << 20)).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let data: Vec<u8> = (0..(8 << 20) / P).flat_map(|_| page(&mut rng, true)).collect();
        let mut now = dev.write(0, &data, 0).unwrap();
        now = dev.flush(now).unwrap() + 1_000_000;
        // The cache holds at most 1 MiB: page 5 (first block) has been written back and evicted.
        let mut out = vec![0u8; P];
        let done = dev.read(5 * PAGE_BYTES, &mut out, now).unwrap();
        assert_eq!(out, data[5 * P..6 * P]);
        let st = dev.stats();
        assert_eq!(st["cache_read_misses"].as_u64().unwrap(), 1);
        // The miss is recorded: its time on the DPU (fetch and decompression) within the read's.
        let miss = &st["miss_latency_ns"];
        assert_eq!(miss["count"].as_u64().unwrap(), 1, "{miss}");
        let on_dpu = miss["max"].as_u64().unwrap();
        assert!(on_dpu > 3_000 && on_dpu < done - now, "{miss}: at least the RDMA latency, within the read's {}", done - now);
        done - now
    };
    let mut inf = Infiniswap::new(InfiniswapConfig { capacity_bytes: 64 << 20, ..Default::default() }, local_nodes(1, 256 << 20)).unwrap();
    inf.write(5 * PAGE_BYTES, &vec![7u8; P], 0).unwrap();
    let mut out = vec![0u8; P];
    let t0 = 10_000_000;
    let base = inf.read(5 * PAGE_BYTES, &mut out, t0).unwrap() - t0;
    let (page, block) = (miss(FetchUnit::Page), miss(FetchUnit::Block));
    assert!(page as f64 <= 2.0 * base as f64, "page miss {page} ns, Infiniswap-like read {base} ns");
    assert!(block as f64 > 10.0 * base as f64, "block miss {block} ns: a whole block fetched and decompressed");
}

#[test]
fn reclamation_keeps_remote_memory_bounded_under_churn() {
    for fetch_unit in [FetchUnit::Block, FetchUnit::Page] {
        reclamation_bounds_remote_memory(fetch_unit);
    }
}

fn reclamation_bounds_remote_memory(fetch_unit: FetchUnit) {
    let mut rng = Pcg64::seed_from_u64(5);
    let c = RmmlConfig { fetch_unit, ..cfg(Codec::Lz4, 2) };
    let mut dev = Rmml::new(c.clone(), local_nodes(2, 256 << 20)).unwrap();
    // Overwrite the same 8 MiB again and again: without reclamation remote use would grow
    // with every write-back.
    let pages = (8 << 20) / PAGE_BYTES;
    let mut now = 0;
    for round in 0..30 {
        for p in (0..pages).step_by(16) {
            let mut data = Vec::new();
            for _ in 0..16 {
                data.extend(page(&mut rng, round % 2 == 0));
            }
            now = dev.write(p * PAGE_BYTES, &data, now).unwrap();
        }
    }
    dev.flush(now).unwrap();
    dev.check_invariants();
    let st = dev.stats();
    let (region, live) = dev.remote_bytes();
    assert!(st["compactions"].as_u64().unwrap() > 10, "{st}");
    // Random pages do not compress: live ~ 8 MiB plus a header per unit; regions stay within
    // slack and the garbage allowance of it.
    assert!(live <= (8 << 20) + (8 << 20) / c.unit_bytes() * HEADER_BYTES as u64, "{fetch_unit:?}: live {live}");
    assert!(
        (region as f64) <= live as f64 * (1.0 + c.region_slack) * (1.0 + c.reclaim_garbage_fraction) + 65536.0,
        "{fetch_unit:?}: region {region} live {live}"
    );
    // Discard everything: every region goes back to the nodes.
    now = dev.discard(0, pages * PAGE_BYTES, now).unwrap();
    let _ = now;
    dev.check_invariants();
    assert_eq!(dev.remote_bytes(), (0, 0));
    let st = dev.stats();
    for n in st["nodes"].as_array().unwrap() {
        assert_eq!(n["used_bytes"].as_u64().unwrap(), 0, "{st}");
    }
    assert!(st["regions_reclaimed"].as_u64().unwrap() > 0);
}

#[test]
fn load_is_balanced_over_nodes() {
    let mut rng = Pcg64::seed_from_u64(9);
    let mut dev = Rmml::new(cfg(Codec::Lz4, 2), local_nodes(3, 64 << 20)).unwrap();
    let mut now = 0;
    for p in (0..(48 << 20) / PAGE_BYTES).step_by(8) {
        let mut data = Vec::new();
        for _ in 0..8 {
            data.extend(page(&mut rng, false));
        }
        now = dev.write(p * PAGE_BYTES, &data, now).unwrap();
    }
    dev.flush(now).unwrap();
    let used: Vec<f64> = (0..3).map(|i| dev.pool().used_fraction(i)).collect();
    let spread = used.iter().cloned().fold(f64::MIN, f64::max) - used.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread <= 0.15, "used fractions {used:?}");
}

/// fio-style random 4 KiB writes over a filled span: every write whose block is not cached
/// reads the block back first (its other pages live remotely), with write-backs and
/// compaction in between; nothing is lost, and every page reads back as last written.
#[test]
fn random_small_writes_over_a_filled_span() {
    use ssdlab_rmml::workload::{run_fio, FioConfig};
    for rw in ["randwrite", "randread"] {
        let c = RmmlConfig { capacity_bytes: 16 << 20, cache_bytes: 2 << 20, ..RmmlConfig::default() };
        let mut dev = Rmml::new(c, local_nodes(2, 64 << 20)).unwrap();
        let f = FioConfig { span_bytes: 16 << 20, ops: 1000, rw: rw.into(), ..FioConfig::default() };
        let r = run_fio(&mut dev, &f).unwrap_or_else(|e| panic!("{rw}: {e}"));
        assert!(r["iops"].as_f64().unwrap() > 0.0);
        dev.check_invariants();
    }
}

#[test]
fn writes_into_a_full_dirty_cache_go_at_the_pace_of_the_compressing_cores() {
    // A 1 MiB DPU cache of pages, filled with dirty pages, then as many new pages again, all
    // issued at time 0: every new page takes a dirty victim's slot, which is free once a core
    // has taken the victim to compress it, so the writes go at the cores' pace (the
    // back-pressure of a write-back cache).
    let c = RmmlConfig { capacity_bytes: 64 << 20, cache_bytes: 1 << 20, ..RmmlConfig::default() };
    let slots = c.cache_slots() as u64;
    let compress_ns = (PAGE_BYTES as f64 / c.lz4_compress_bytes_per_s * 1e9) as u64;
    let mut dev = Rmml::new(c.clone(), local_nodes(1, 256 << 20)).unwrap();
    let mut rng = Pcg64::seed_from_u64(9);
    let mut last = 0;
    for p in 0..2 * slots {
        last = last.max(dev.write(p * PAGE_BYTES, &page(&mut rng, true), 0).unwrap());
    }
    let floor = (slots - c.dpu_cores as u64) * compress_ns / c.dpu_cores as u64;
    assert!(last >= floor, "the last write done at {last} ns, before {floor} ns of compression on {} cores", c.dpu_cores);
    // Once the cores have caught up, a write into the (still full, dirty) cache waits for no
    // compression: a core takes its victim at once.
    let now = last + 10_000_000;
    let done = dev.write(2 * slots * PAGE_BYTES, &page(&mut rng, true), now).unwrap();
    assert!(done - now < 2_000, "{} ns", done - now);
}
