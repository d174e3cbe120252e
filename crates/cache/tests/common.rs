//! Small devices for the cache tests.
#![allow(dead_code)]

use ssdlab_cache::config::RegionEviction;
use ssdlab_cache::RunSpec;
use ssdlab_core::config::Config;
use ssdlab_core::media::presets::preset;

/// 1 GiB raw FDP-capable device: 2 channels x 2 dies x 2 planes, 256 KiB blocks, 14.5% spare
/// (the paper's 1.88 TB of 2 TiB), 4 initially isolated handles, no timing unless asked.
pub fn device(fdp: bool, timing: bool) -> Config {
    let mut c = preset("fdp-ssd").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 2;
    c.geometry.pages_per_block = 16;
    c.geometry.blocks_per_plane = 512;
    c.ftl.spare_factor = 0.145;
    c.timing.enabled = timing;
    c.fdp.enabled = fdp;
    c.fdp.handles = 4;
    c.fdp.ru_superblocks = 1;
    c.precondition.sequential_fill = false;
    c.precondition.random_device_writes = 0.0;
    c
}

/// kvcache on the 1 GiB test device at utilisation `util` with an SOC of `soc` of the space.
pub fn spec(util: f64, soc: f64, device_writes: f64) -> RunSpec {
    let mut s = RunSpec::default();
    let logical = 0.855 * (1u64 << 30) as f64;
    s.cache.utilization = util;
    s.cache.soc_fraction = soc;
    s.cache.region_bytes = 128 << 10;
    s.cache.loc_write_bytes = 128 << 10;
    s.cache.region_eviction = RegionEviction::Fifo;
    s.cache.dram_bytes = (0.045 * util * logical) as u64;
    s.workload = ssdlab_cache::workload::preset("kvcache").unwrap();
    s.workload.value_bins[3].weight = 0.08;
    s.workload.keys = (2.0 * util * logical / (s.workload.mean_value_bytes() + 40.0)) as u64;
    s.stop_device_writes = device_writes;
    s.warmup_fraction = 0.5;
    s.series_points = 10;
    s
}
