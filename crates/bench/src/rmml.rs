//! dpuswap (crates/rmml): block codecs per core on 1 MiB blocks, the RMML's host-request rate
//! (block map, DPU cache, write-back compression, in-process nodes), and the paging runtime's
//! fault handling in wall-clock time.

use std::time::Instant;

use ssdlab_rmml::codec::{Codec, Coder};
use ssdlab_rmml::config::FetchUnit;
use ssdlab_rmml::experiment::{run, RunSpec, Workload};
use ssdlab_rmml::node::{LocalNode, MemoryNode};
use ssdlab_rmml::workload::{fill_value, KvConfig};
use ssdlab_rmml::{Rmml, RmmlConfig, SwapDevice, PAGE_BYTES};

const BLOCK: usize = 1 << 20;

/// `blocks` distinct 1 MiB blocks of which `compressibility` is text-like.
fn blocks(compressibility: f64, blocks: usize) -> Vec<Vec<u8>> {
    (0..blocks)
        .map(|i| {
            let mut b = vec![0u8; BLOCK];
            fill_value(&mut b, compressibility, i as u64);
            b
        })
        .collect()
}

/// (compress, decompress) bytes/s of raw data and the ratio, over the blocks `src`: the fastest
/// of 8 passes each, as the C tools' own benchmarks report it.
fn codec(c: Codec, src: &[Vec<u8>]) -> (f64, f64, f64) {
    let pass_bytes = (src.len() * BLOCK) as f64;
    let mut coder = Coder::new(c, 1, BLOCK).expect("codec");
    let stored: Vec<(Codec, Vec<u8>)> =
        src.iter().map(|b| coder.compress(b).map(|(k, out)| (k, out.to_vec())).expect("compress")).collect();
    let (mut comp, mut dec) = (0f64, 0f64);
    let mut dst = vec![0u8; BLOCK];
    for _ in 0..8 {
        let t = Instant::now();
        for b in src {
            std::hint::black_box(coder.compress(b).expect("compress").1.len());
        }
        comp = comp.max(pass_bytes / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for (k, s) in &stored {
            coder.decompress(*k, s, &mut dst).expect("decompress");
        }
        dec = dec.max(pass_bytes / t.elapsed().as_secs_f64());
    }
    assert_eq!(dst, src[src.len() - 1], "the last block round-trips");
    let ratio = pass_bytes / stored.iter().map(|s| s.1.len()).sum::<usize>() as f64;
    (comp, dec, ratio)
}

/// The reference implementation's own benchmark on the same blocks, when its command-line tool
/// is installed (Debian's `lz4` and `zstd` packages): `lz4 -b1 -B6` and `zstd -b1 -B1048576`
/// compress and decompress a file of the blocks in 1 MiB blocks at level 1 with the C
/// libraries. Returns (compress, decompress) bytes/s from the last line it prints.
fn reference(c: Codec, src: &[Vec<u8>]) -> Option<(f64, f64)> {
    let (tool, args): (&str, &[&str]) = match c {
        Codec::Lz4 => ("lz4", &["-b1", "-B6", "-i3"]),
        Codec::Zstd => ("zstd", &["-b1", "-B1048576", "-i3"]),
        Codec::None => return None,
    };
    let path = std::env::temp_dir().join(format!("ssdlab-bench-rmml-{}.bin", std::process::id()));
    std::fs::write(&path, src.concat()).ok()?;
    let out = std::process::Command::new(tool).args(args).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = out.ok().filter(|o| o.status.success())?;
    // Progress lines end in carriage returns; the result is the last one, "... X MB/s, Y MB/s".
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let last = text.split(['\r', '\n']).rev().find(|l| l.matches("MB/s").count() == 2)?;
    let mut speeds = last.split("MB/s").filter_map(|part| part.rsplit([' ', ',']).find(|w| !w.is_empty())?.parse::<f64>().ok());
    Some((speeds.next()? * 1e6, speeds.next()? * 1e6))
}

/// Random 4 KiB writes then reads over `span` bytes of an RMML with a cache of 1/8 of it and
/// the given fetch unit: host requests per wall second, the hit ratio and the compression ratio.
fn rmml_requests(span: u64, ops: u64, fetch_unit: FetchUnit) -> (f64, f64, f64) {
    let cfg = RmmlConfig { capacity_bytes: span, cache_bytes: span / 8, fetch_unit, ..RmmlConfig::default() };
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
            let src = blocks(comp, 16);
            let (cb, db, r) = codec(c, &src);
            let goal = if c == Codec::Lz4 { format!("; goal compress >= 1 GB/s -> {:.2}x", cb / 1e9) } else { String::new() };
            println!(
                "rmml codec {name}, 1 MiB blocks {:.0}% text-like: compress {:.2} GB/s, decompress {:.2} GB/s per core, ratio {r:.2}{goal}",
                comp * 100.0,
                cb / 1e9,
                db / 1e9
            );
            match reference(c, &src) {
                Some((rc, rd)) => println!(
                    "  beside the C library's own benchmark on the same blocks ({} -b1): compress {:.2} GB/s, decompress {:.2} GB/s -> ours {:.2}x / {:.2}x",
                    name.split(' ').next().unwrap_or(name),
                    rc / 1e9,
                    rd / 1e9,
                    cb / rc,
                    db / rd
                ),
                None => println!("  (no side-by-side: the {} command-line tool is not installed)", name.split(' ').next().unwrap_or(name)),
            }
        }
    }
    for (unit, what) in [(FetchUnit::Page, "4 KiB"), (FetchUnit::Block, "1 MiB")] {
        let (rate, hit, ratio) = rmml_requests(256 << 20, 10_000, unit);
        println!(
            "rmml host requests, 4 KiB random half writes over 256 MiB, DPU cache 32 MiB, lz4, fetch unit {unit:?}, 2 in-process nodes: {:.1} k requests/s (hit ratio {hit:.3}, compression {ratio:.2}; a miss decompresses and a dirty eviction compresses {what} in software)",
            rate / 1e3
        );
    }
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
