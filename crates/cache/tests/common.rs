//! Small devices for the cache tests.
#![allow(dead_code)]

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
