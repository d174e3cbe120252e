//! Swap backends as NBD disks: byte-granular reads, writes, trims and zero-writes on the RMML
//! (small DPU cache, so most blocks live compressed on the nodes) and on the Infiniswap-like
//! baseline agree with a plain byte array.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use ssdlab_nbd::Disk;
use ssdlab_rmml::infiniswap::{Infiniswap, InfiniswapConfig};
use ssdlab_rmml::node::{LocalNode, MemoryNode};
use ssdlab_rmml::{Rmml, RmmlConfig, SwapDevice};
use ssdlab_serve::SwapDisk;

const CAP: u64 = 16 << 20;

fn nodes() -> Vec<Box<dyn MemoryNode>> {
    (0..2).map(|i| Box::new(LocalNode::new(64 << 20, i + 1)) as Box<dyn MemoryNode>).collect()
}

fn rmml() -> Box<dyn SwapDevice> {
    let c = RmmlConfig { capacity_bytes: CAP, block_bytes: 256 << 10, group_blocks: 4, cache_bytes: 512 << 10, ..RmmlConfig::default() };
    Box::new(Rmml::new(c, nodes()).unwrap())
}

fn infiniswap() -> Box<dyn SwapDevice> {
    let c = InfiniswapConfig { capacity_bytes: CAP, slab_bytes: 4 << 20, ..InfiniswapConfig::default() };
    Box::new(Infiniswap::new(c, nodes()).unwrap())
}

/// Random commands at random byte offsets and lengths, checked against a shadow copy.
fn churn(dev: Box<dyn SwapDevice>, seed: u64) -> SwapDisk {
    let zeroes = dev.discard_zeroes();
    let mut d = SwapDisk::new(dev);
    assert_eq!(d.logical_bytes(), CAP);
    let mut shadow = vec![0u8; CAP as usize];
    let mut rng = Pcg64::seed_from_u64(seed);
    for i in 0..1500 {
        let len = if rng.gen_bool(0.3) { rng.gen_range(1..3 * 4096) } else { rng.gen_range(1..9) * 4096 };
        let off = rng.gen_range(0..CAP - len as u64);
        let (o, l) = (off as usize, len);
        match rng.gen_range(0..10) {
            0..=4 => {
                let text = rng.gen_bool(0.5);
                let data: Vec<u8> = (0..len).map(|j| if text { b"dpu swap "[j % 9] } else { rng.gen() }).collect();
                d.write(off, &data, rng.gen_bool(0.05), None).unwrap();
                shadow[o..o + l].copy_from_slice(&data);
            }
            5..=7 => {
                let mut out = vec![0xAA; len];
                d.read(off, &mut out).unwrap();
                assert!(out == shadow[o..o + l], "command {i}: read of {len} bytes at {off} differs");
            }
            8 => {
                let no_hole = rng.gen_bool(0.5);
                d.write_zeroes(off, len as u64, no_hole, false, None).unwrap();
                shadow[o..o + l].fill(0);
            }
            _ => {
                // Trim: edges are unchanged; whole pages inside read as zeros afterwards where
                // the backend says so, and keep their contents otherwise (NBD allows both).
                d.trim(off, len as u64, false).unwrap();
                let a = off.div_ceil(4096) * 4096;
                let b = (off + len as u64) / 4096 * 4096;
                if b > a && zeroes {
                    shadow[a as usize..b as usize].fill(0);
                }
            }
        }
    }
    d.flush().unwrap();
    let mut all = vec![0u8; CAP as usize];
    d.read(0, &mut all).unwrap();
    assert!(all == shadow, "the whole disk differs from the shadow copy after the churn");
    d
}

#[test]
fn rmml_as_a_disk_matches_a_byte_array() {
    let mut d = churn(rmml(), 7);
    let m = d.metrics();
    assert_eq!(m["backend"], "dpuswap");
    assert!(m["partial_page_requests"].as_u64().unwrap() > 100, "{m}");
    assert!(m["device"]["fetches"].as_u64().unwrap() > 0, "blocks were read back from the nodes: {m}");
    assert!(m["latency_ns"]["read"]["count"].as_u64().unwrap() > 300);
    assert_eq!(m["backend_errors"], 0);
}

#[test]
fn infiniswap_as_a_disk_matches_a_byte_array() {
    let m = churn(infiniswap(), 11).metrics();
    assert_eq!(m["backend"], "infiniswap");
}

#[test]
fn modelled_completions_follow_the_clock() {
    let mut d = SwapDisk::new(rmml());
    let t0 = d.write(0, &[1u8; 4096], false, None).unwrap();
    let t1 = d.read(0, &mut [0u8; 4096]).unwrap();
    assert!(t1 > 0 && t0 > 0);
    // wall_of maps modelled time onto the server's wall clock, monotonically.
    assert!(d.wall_of(t1 + 1_000) > d.wall_of(t1));
}
