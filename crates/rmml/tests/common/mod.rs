//! Test data shared by the RMML's tests and crates/serve's node tests (included there by path):
//! the small RMML configuration they run and the pages they write.

#![allow(dead_code)]

use rand::Rng;
use rand_pcg::Pcg64;
use ssdlab_rmml::codec::Codec;
use ssdlab_rmml::{RmmlConfig, PAGE_BYTES};

pub const P: usize = PAGE_BYTES as usize;

/// 64 MiB of swap in 256 KiB blocks, 4 per group, a cache of `cache_blocks` blocks.
pub fn cfg(codec: Codec, cache_blocks: u64) -> RmmlConfig {
    RmmlConfig {
        capacity_bytes: 64 << 20,
        block_bytes: 256 << 10,
        group_blocks: 4,
        codec,
        cache_bytes: cache_blocks * (256 << 10),
        ..RmmlConfig::default()
    }
}

/// A page of either random bytes or text-like repetitive bytes.
pub fn page(rng: &mut Pcg64, compressible: bool) -> Vec<u8> {
    if compressible {
        let words: [&[u8]; 6] = [b"swap ", b"remote ", b"memory ", b"block ", b"dpu ", b"page "];
        let mut v = Vec::with_capacity(P);
        while v.len() < P {
            v.extend_from_slice(words[rng.gen_range(0..6)]);
        }
        v.truncate(P);
        v
    } else {
        (0..P).map(|_| rng.gen()).collect()
    }
}
