//! Fuzzing entry points, shared by the cargo-fuzz target (fuzz/fuzz_targets/memcached.rs) and
//! the suite's corpus run (tests/fuzz_corpus.rs): a whole client session of untrusted bytes
//! against the real server on a small data-backed cache; no panic, and the cache still serves.

use std::sync::Arc;

use ssdlab_cache::config::{CacheConfig, RegionEviction};
use ssdlab_cache::HybridCache;
use ssdlab_core::config::StorageMode;
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;

use crate::{MemcachedOptions, Server};

/// A small data-backed cache (32 KiB of DRAM, a few SOC buckets and LOC regions on a 2x2-die
/// FDP device) that the tests and the fuzz target serve.
pub fn small_cache() -> HybridCache {
    let mut c = preset("fdp-ssd").expect("fdp-ssd preset");
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 2;
    c.geometry.pages_per_block = 16;
    c.geometry.blocks_per_plane = 256;
    c.fdp.handles = 4;
    c.fdp.ru_superblocks = 1;
    c.storage = StorageMode::Data;
    let cfg = CacheConfig {
        dram_bytes: 32 << 10,
        utilization: 0.01,
        soc_fraction: 0.002,
        region_bytes: 256 << 10,
        loc_write_bytes: 64 << 10,
        region_eviction: RegionEviction::Fifo,
        ..CacheConfig::default()
    };
    HybridCache::data_backed(Device::new(c).expect("device"), cfg).expect("cache")
}

/// A server on [`small_cache`] (values up to 100 000 bytes).
pub fn server() -> Arc<Server> {
    Server::new(small_cache(), MemcachedOptions { max_value_bytes: 100_000, quiet: true, ..MemcachedOptions::default() }).expect("server")
}

/// A whole client session made of `data`; returns what the server sent. Then checks that no
/// command broke the cache (an internal error stops it) and that a new client is still served
/// (after a `flush_all 0`, which also cancels a delayed flush the input may have left pending, so
/// one input's outcome never depends on the one before).
pub fn session(srv: &Server, data: &[u8]) -> Vec<u8> {
    let _ = crate::proto::parse(data.split(|&b| b == b'\n').next().unwrap_or_default(), srv.max_value_bytes());
    let out = ssdlab_server::fuzzing::run_session(data, |s| async move {
        let _ = srv.session_on(s, &ssdlab_server::Pace::none()).await;
    });
    if let Some(f) = ssdlab_server::lock(&srv.failure).as_ref() {
        panic!("the cache stopped on {:?}: {f}", String::from_utf8_lossy(data));
    }
    let check = ssdlab_server::fuzzing::run_session(b"flush_all 0\r\nset fuzz-check 7 0 2\r\nok\r\nget fuzz-check\r\n", |s| async move {
        let _ = srv.session_on(s, &ssdlab_server::Pace::none()).await;
    });
    assert_eq!(
        String::from_utf8_lossy(&check),
        "OK\r\nSTORED\r\nVALUE fuzz-check 7 2\r\nok\r\nEND\r\n",
        "after {:?}",
        String::from_utf8_lossy(data)
    );
    out
}
