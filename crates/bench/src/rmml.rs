//! dpuswap (crates/rmml): block codecs per core on 1 MiB blocks, the RMML's host-request rate
//! (block map, DPU cache, write-back compression, in-process nodes), and the paging runtime's
//! fault handling in wall-clock time.

use std::time::Instant;

use ssdlab_rmml::codec::{Codec, Coder};
use ssdlab_rmml::experiment::{run, RunSpec, Workload};
use ssdlab_rmml::node::{LocalNode, MemoryNode};
use ssdlab_rmml::workload::{fill_value, KvConfig};
use ssdlab_rmml::{Rmml, RmmlConfig, SwapDevice, PAGE_BYTES};

const BLOCK: usize = 1 << 20;

/// (compress, decompress) bytes/s of raw data and the ratio, over `blocks` distinct blocks.
fn codec(c: Codec, compressibility: f64, blocks: usize) -> (f64, f64, f64) {
    let mut coder = Coder::new(c, 1, BLOCK).expect("codec");
    let src: Vec<Vec<u8>> = (0..blocks)
        .map(|i| {
            let mut b = vec![0u8; BLOCK];
            fill_value(&mut b, compressibility, i as u64);
            b
        })
        .collect();
    let mut stored: Vec<(Codec, Vec<u8>)> = Vec::with_capacity(blocks);
    let rounds = 4;
    let t = Instant::now();
    for r in 0..rounds {
        for b in &src {
            let (k, out) = coder.compress(b).expect("compress");
            if r == 0 {
                stored.push((k, out.to_vec()));
            }
        }
    }
    let comp = (rounds * blocks * BLOCK) as f64 / t.elapsed().as_secs_f64();
    let mut dst = vec![0u8; BLOCK];
    let t = Instant::now();
    for _ in 0..rounds {
        for (k, s) in &stored {
            coder.decompress(*k, s, &mut dst).expect("decompress");
        }
    }
    let dec = (rounds * blocks * BLOCK) as f64 / t.elapsed().as_secs_f64();
    assert_eq!(dst, src[blocks - 1], "the last block round-trips");
    let ratio = (blocks * BLOCK) as f64 / stored.iter().map(|s| s.1.len()).sum::<usize>() as f64;
    (comp, dec, ratio)
}

/// Random 4 KiB writes then reads over `span` bytes of an RMML with a cache of 1/8 of it:
/// host requests per wall second, and the hit ratio.
fn rmml_requests(span: u64, ops: u64) -> (f64, f64, f64) {
    let cfg = RmmlConfig { capacity_bytes: span, cache_bytes: span / 8, ..RmmlConfig::default() };
    let nodes: Vec<Box<dyn MemoryNode>> = (0..2).map(|i| Box::new(LocalNode::new(span, i + 1)) as Box<dyn MemoryNode>).collect();
    let mut dev = Rmml::new(cfg, nodes).expect("rmml");
    let mut page = vec![0u8; PAGE_BYTES as usize];
    let pages = span / PAGE_BYTES;
    let mut t_ns = 0;
    for p in 0..pages {
        fill_value(&mut page, 0.7, p);
        t_ns = dev.write(p * PAGE_BYTES, &page, t_ns).expect("fill");
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let t = Instant::now();
    for i in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % pages) * PAGE_BYTES;
        t_ns = if i % 2 == 0 { dev.write(off, &page, t_ns) } else { dev.read(off, &mut page, t_ns) }.expect("request");
    }
    let rate = ops as f64 / t.elapsed().as_secs_f64();
    let st = dev.stats();
    (rate, st["cache_hit_ratio"].as_f64().unwrap_or(0.0), st["compression_ratio"].as_f64().unwrap_or(0.0))
}

pub fn run_all() {
    for (c, name) in [(Codec::Lz4, "lz4"), (Codec::Zstd, "zstd -1")] {
        for comp in [0.7, 0.0] {
            let (cb, db, r) = codec(c, comp, 64);
            let goal = if c == Codec::Lz4 { format!("; goal compress >= 1 GB/s -> {:.2}x", cb / 1e9) } else { String::new() };
            println!(
                "rmml codec {name}, 1 MiB blocks {:.0}% text-like: compress {:.2} GB/s, decompress {:.2} GB/s per core, ratio {r:.2}{goal}",
                comp * 100.0,
                cb / 1e9,
                db / 1e9
            );
        }
    }
    let (rate, hit, ratio) = rmml_requests(256 << 20, 10_000);
    println!(
        "rmml host requests, 4 KiB random half writes over 256 MiB, DPU cache 32 MiB, lz4, 2 in-process nodes: {:.1} k requests/s (hit ratio {hit:.3}, compression {ratio:.2}; a miss decompresses and a dirty eviction compresses 1 MiB in software)",
        rate / 1e3
    );
    let spec = RunSpec {
        backend: "dpuswap".into(),
        local_fraction: 0.5,
        workload: Some(Workload::Kv(KvConfig { records: 65536, ops: 200_000, ..KvConfig::default() })),
        paging: Default::default(),
        rmml: RmmlConfig { cache_bytes: 8 << 20, ..RmmlConfig::default() },
        infiniswap: Default::default(),
        znswap: None,
        nodes: vec![],
        local_nodes: 2,
        local_node_bytes: 1 << 30,
    };
    let t = Instant::now();
    let r = run(&spec, &mut |_| true).expect("paging run");
    let p = &r["paging"];
    let w = &p["fault_latency_wall_ns"];
    let faults = p["major_faults"].as_u64().unwrap_or(0);
    println!(
        "rmml paging runtime, key-value 64 MiB at 50% local memory, dpuswap with in-process nodes: {faults} faults in {:.1} s, wall per fault p50 {:.1} us p99 {:.1} us (modelled p50 {:.1} us p99 {:.1} us)",
        t.elapsed().as_secs_f64(),
        w["p50"].as_f64().unwrap_or(0.0) / 1e3,
        w["p99"].as_f64().unwrap_or(0.0) / 1e3,
        p["fault_latency_ns"]["p50"].as_f64().unwrap_or(0.0) / 1e3,
        p["fault_latency_ns"]["p99"].as_f64().unwrap_or(0.0) / 1e3
    );
}
