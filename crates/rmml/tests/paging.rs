//! The paging runtime: with every backend, under budgets that force swapping, every page read
//! back equals what was written (the key-value workload checks each read against the value last
//! written; the sort checks its result is the sorted input), and runs are deterministic.

use ssdlab_core::config::Geometry;
use ssdlab_rmml::device::{SwapDevice, PAGE_BYTES};
use ssdlab_rmml::experiment::{run, RunSpec, Workload};
use ssdlab_rmml::link::Link;
use ssdlab_rmml::paging::{Paged, PagingConfig};
use ssdlab_rmml::workload::{KvConfig, SortConfig};
use ssdlab_rmml::znswap::ZnswapConfig;
use ssdlab_rmml::{Rmml, RmmlConfig};

fn zns() -> ZnswapConfig {
    let mut d = ssdlab_core::media::presets::preset("zns-ssd").unwrap();
    d.geometry = Geometry {
        channels: 2,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 64,
        pages_per_block: 64,
        page_bytes: 16384,
        oob_bytes: 1872,
        sector_bytes: 4096,
    };
    d.zns.zone_capacity = 1.0;
    ZnswapConfig { capacity_bytes: 0, device: d, reserve_zones: 2, host_request_ns: 1000, pcie: Link::PCIE }
}

fn spec(backend: &str, fraction: f64, workload: Workload) -> RunSpec {
    RunSpec {
        backend: backend.into(),
        local_fraction: fraction,
        workload: Some(workload),
        paging: PagingConfig::default(),
        rmml: RmmlConfig { block_bytes: 1 << 20, group_blocks: 4, cache_bytes: 2 << 20, ..RmmlConfig::default() },
        infiniswap: Default::default(),
        znswap: Some(zns()),
        nodes: vec![],
        local_nodes: 2,
        local_node_bytes: 256 << 20,
    }
}

fn kv() -> Workload {
    Workload::Kv(KvConfig { records: 8192, ops: 30_000, verify: true, ..KvConfig::default() })
}

#[test]
fn every_backend_returns_what_was_written() {
    for backend in ["dpuswap", "infiniswap", "znswap"] {
        for fraction in [0.75, 0.5] {
            let r = run(&spec(backend, fraction, kv()), &mut |_| true).unwrap_or_else(|e| panic!("{backend} {fraction}: {e}"));
            let p = &r["paging"];
            assert!(p["major_faults"].as_u64().unwrap() > 1000, "{backend} {fraction}: {p}");
            assert!(p["evicted_pages"].as_u64().unwrap() > 1000);
            assert_eq!(r["backend"], backend);
            let s = run(&spec(backend, fraction, Workload::Sort(SortConfig { elements: 1 << 19, ..SortConfig::default() })), &mut |_| true)
                .unwrap_or_else(|e| panic!("{backend} sort {fraction}: {e}"));
            assert!(s["paging"]["major_faults"].as_u64().unwrap() > 100, "{backend}: {s}");
        }
    }
}

#[test]
fn runs_are_deterministic_and_all_local_never_faults_to_swap() {
    let a = run(&spec("dpuswap", 0.5, kv()), &mut |_| true).unwrap();
    let b = run(&spec("dpuswap", 0.5, kv()), &mut |_| true).unwrap();
    assert_eq!(a["workload"], b["workload"]);
    assert_eq!(a["paging"]["fault_latency_ns"], b["paging"]["fault_latency_ns"]);
    assert_eq!(a["paging"]["backend"]["cache_read_hits"], b["paging"]["backend"]["cache_read_hits"]);
    let l = run(&spec("dpuswap", 1.0, kv()), &mut |_| true).unwrap();
    assert_eq!(l["backend"], "local");
    assert_eq!(l["paging"]["major_faults"], 0);
    // Swapping costs time: the local run is the fastest.
    let t = |r: &serde_json::Value| r["workload"]["completion_ns"].as_u64().unwrap();
    assert!(t(&l) < t(&a));
}

#[test]
fn pages_survive_eviction_with_a_tiny_budget() {
    for readahead_pages in [1, 8] {
        let cfg =
            RmmlConfig { capacity_bytes: 16 << 20, block_bytes: 1 << 20, group_blocks: 2, cache_bytes: 1 << 20, ..RmmlConfig::default() };
        let nodes: Vec<Box<dyn ssdlab_rmml::node::MemoryNode>> = vec![Box::new(ssdlab_rmml::node::LocalNode::new(64 << 20, 1))];
        let dev: Box<dyn SwapDevice> = Box::new(Rmml::new(cfg, nodes).unwrap());
        let pages = 2048u64;
        let paging = PagingConfig { budget_pages: 100, evict_batch: 8, readahead_pages, ..PagingConfig::default() };
        let mut m = Paged::new(pages * PAGE_BYTES, paging, dev).unwrap();
        for round in 0..3u64 {
            for p in 0..pages {
                let at = (p * PAGE_BYTES) as usize;
                m.mem()[at..at + 8].copy_from_slice(&(p * 1000 + round).to_le_bytes());
                m.mem()[at + 4000] = (p % 251) as u8;
            }
            for p in (0..pages).rev() {
                let at = (p * PAGE_BYTES) as usize;
                assert_eq!(u64::from_le_bytes(m.mem()[at..at + 8].try_into().unwrap()), p * 1000 + round, "page {p} round {round}");
                assert_eq!(m.mem()[at + 4000], (p % 251) as u8);
            }
        }
        assert!(m.failed().is_none());
        let st = m.stats();
        let n = |k: &str| st[k].as_u64().unwrap();
        assert!(n("resident_pages") <= 100);
        // Every page came back from swap: read on its fault, or read ahead and found in the cache.
        assert!(n("major_faults") + n("minor_faults") > 4000, "{st}");
        if readahead_pages == 1 {
            assert_eq!((n("minor_faults"), n("readahead_pages")), (0, 0), "{st}");
        } else {
            // The sweeps walk the slots in order: readahead serves most faults.
            assert!(n("minor_faults") > 4 * n("major_faults"), "{st}");
            assert_eq!(n("readahead_pages"), n("minor_faults") + n("readahead_unused") + n("swap_cache_pages"), "{st}");
        }
    }
}
