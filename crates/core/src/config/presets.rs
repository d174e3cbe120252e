//! Device presets. Each cites where its numbers come from; only facts are taken (constants
//! published in other open projects' configs, or datasheet values), never code.

use super::*;

/// Names accepted by `preset = "..."` and `ssdlab config show`.
pub const NAMES: &[&str] =
    &["default", "tiny", "micron-mlc-16k", "femu-bbssd", "mqsim-default", "samsung-970pro", "fdp-ssd", "zns-ssd", "bench-256g"];

fn base() -> Config {
    Config {
        seed: 42,
        preset: "default".into(),
        storage: StorageMode::Metadata,
        personality: Personality::Conventional,
        // The page, block and timings of Micron's MT29F128G08CBECB MLC part (ONFI 3.2 datasheet,
        // "Features" page): 16384 + 1872 B pages, 512 pages per block, tR 115 us (max), tPROG
        // 1600 us (typ), tBERS 3 ms (typ), NV-DDR2 166 MT/s x 8 bits, 3000 P/E cycles. Arranged
        // as 8 channels x 4 dies x 2 planes x 64 blocks = 32 GiB raw (the `default` preset
        // arranges the same 32 GiB in fewer, larger dies).
        geometry: Geometry {
            channels: 8,
            dies_per_channel: 4,
            planes_per_die: 2,
            blocks_per_plane: 64,
            pages_per_block: 512,
            page_bytes: 16384,
            oob_bytes: 1872,
            sector_bytes: 4096,
        },
        timing: Timing {
            enabled: true,
            page_read_ns: 115_000,
            page_program_ns: 1_600_000,
            block_erase_ns: 3_000_000,
            channel_bytes_per_s: 166_000_000,
            command_overhead_ns: 5_000,
            suspend: false,
            read_priority: false,
            suspend_ns: 20_000,
            resume_ns: 20_000,
            host_link_bytes_per_s: 0,
        },
        media: MediaConfig::default(),
        ftl: FtlConfig::default(),
        fdp: FdpConfig::default(),
        zns: ZnsConfig::default(),
        workload: WorkloadConfig::default(),
        precondition: PreconditionConfig::default(),
        metrics: MetricsConfig::default(),
    }
}

/// The named preset, or None.
pub fn preset(name: &str) -> Option<Config> {
    let mut c = base();
    c.preset = name.to_string();
    match name {
        "default" => default_preset(&mut c),
        "micron-mlc-16k" => micron_mlc_16k(&mut c),
        "tiny" => tiny(&mut c),
        "femu-bbssd" => femu_bbssd(&mut c),
        "mqsim-default" => mqsim_default(&mut c),
        "samsung-970pro" => samsung_970pro(&mut c),
        "fdp-ssd" => fdp_ssd(&mut c),
        "zns-ssd" => zns_ssd(&mut c),
        "bench-256g" => bench_256g(&mut c),
        _ => return None,
    }
    Some(c)
}

/// 32 GiB as a drive of that size is built: 8 dies (4 channels x 2) of 4 GiB. Spread
/// over 32 small dies instead, the FTL's open blocks and GC watermarks (a block per plane
/// and die of every write stream) would hold back half of the 7% spare and double the
/// write amplification (docs/gc-models.md, "Effective spare").
fn default_preset(c: &mut Config) {
    c.geometry.channels = 4;
    c.geometry.dies_per_channel = 2;
    c.geometry.blocks_per_plane = 256;
}

/// The same Micron part at its datasheet size: 2 planes x 1048 blocks per die, 32 dies
/// (8 channels x 4), 524 GiB raw.
fn micron_mlc_16k(c: &mut Config) {
    c.geometry.blocks_per_plane = 1048;
}

/// Small enough for unit tests and property tests: 2 x 2 dies, 256 blocks of 64 pages.
fn tiny(c: &mut Config) {
    c.geometry = Geometry {
        channels: 2,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 64,
        pages_per_block: 64,
        page_bytes: 16384,
        oob_bytes: 1872,
        sector_bytes: 4096,
    };
    c.ftl.spare_factor = 0.15;
    c.ftl.write_buffer_bytes = 256 << 10;
    c.workload.queue_depth = 8;
}

/// FEMU's black-box SSD defaults (femu.c property defaults, bbssd/ftl.h): 8 channels x
/// 8 LUNs, 1 plane, 256 blocks of 256 x 4 KiB pages (16 GiB), read 40 us, program 200 us,
/// erase 2 ms, channel transfer not charged (ch_xfer_lat = 0; we use a very fast bus).
fn femu_bbssd(c: &mut Config) {
    c.geometry = Geometry {
        channels: 8,
        dies_per_channel: 8,
        planes_per_die: 1,
        blocks_per_plane: 256,
        pages_per_block: 256,
        page_bytes: 4096,
        oob_bytes: 128,
        sector_bytes: 4096,
    };
    c.timing.page_read_ns = 40_000;
    c.timing.page_program_ns = 200_000;
    c.timing.block_erase_ns = 2_000_000;
    c.timing.channel_bytes_per_s = 100_000_000_000;
    c.timing.command_overhead_ns = 0;
}

/// MQSim's shipped ssdconfig.xml: 8 channels x 4 chips x 2 dies, 2 planes, 2048 blocks of
/// 256 x 8 KiB pages (256 GiB raw), read 75 us, program 750 us, erase 3.8 ms, 333 MT/s x
/// 1-byte channels, suspend program 100 us / erase 700 us, 7% over-provisioning,
/// P/E limit 10000.
fn mqsim_default(c: &mut Config) {
    c.geometry = Geometry {
        channels: 8,
        dies_per_channel: 8,
        planes_per_die: 2,
        blocks_per_plane: 2048,
        pages_per_block: 256,
        page_bytes: 8192,
        oob_bytes: 448,
        sector_bytes: 4096,
    };
    c.timing.page_read_ns = 75_000;
    c.timing.page_program_ns = 750_000;
    c.timing.block_erase_ns = 3_800_000;
    c.timing.channel_bytes_per_s = 333_000_000;
    c.timing.suspend = true;
    c.timing.suspend_ns = 100_000;
    c.timing.resume_ns = 0;
    c.media.pe_limit = 10_000;
    c.ftl.spare_factor = 0.07;
}

/// NVMeVirt's SAMSUNG_970PRO model (ssd_config.h): 8 channels x 2 LUNs, 1 plane, 32 KiB
/// pages, full-page read 36 us (LSB/MSB average), program 185 us, 800 MB/s channels,
/// 7% over-provisioning; NVMeVirt charges no erase, we use the 3 ms of the MLC datasheet
/// above. 128 GiB raw.
fn samsung_970pro(c: &mut Config) {
    c.geometry = Geometry {
        channels: 8,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 2048,
        pages_per_block: 128,
        page_bytes: 32768,
        oob_bytes: 2048,
        sector_bytes: 4096,
    };
    c.timing.page_read_ns = 36_013;
    c.timing.page_program_ns = 185_000;
    c.timing.block_erase_ns = 3_000_000;
    c.timing.channel_bytes_per_s = 800_000_000;
    c.timing.command_overhead_ns = 21_500;
}

/// An FDP SSD modelled on the one in "Towards Efficient Flash Caches with Emerging NVMe
/// FDP SSDs" (seed 001): configuration 0 has one reclaim group, 8 initially isolated
/// reclaim unit handles and reclaim units of about 6 GB (12 superblocks of 512 MiB here);
/// capacity scaled from 1.88 TB to 128 GiB raw, media as the default preset. Like real
/// FDP drives it offers more configurations to choose from at format time: 1 = the same
/// with persistently isolated handles, 2 = four reclaim groups (two channels each) of 8
/// initially isolated handles with 1.5 GiB reclaim units.
fn fdp_ssd(c: &mut Config) {
    c.geometry.blocks_per_plane = 256;
    c.fdp.enabled = true;
    c.fdp.reclaim_groups = 1;
    c.fdp.handles = 8;
    c.fdp.handle_types = vec![HandleType::InitiallyIsolated];
    c.fdp.ru_superblocks = 12;
    c.fdp.extra_configurations = vec![
        FdpConfiguration { reclaim_groups: 1, handles: 8, handle_types: vec![HandleType::PersistentlyIsolated], ru_superblocks: 12 },
        FdpConfiguration { reclaim_groups: 4, handles: 8, handle_types: vec![HandleType::InitiallyIsolated], ru_superblocks: 12 },
    ];
}

/// A ZNS SSD shaped like NVMeVirt's WD ZN540 model (ssd_config.h): 8 channels x 4 dies,
/// TLC timings (page read 58 us, program 561 us per 96 KiB one-shot, here per 32 KiB
/// page pair), 450 MB/s channels, zones striped over all dies, 14 open/active zones
/// (the ZN540's published limit); zone capacity about half the zone size, as on ZN540
/// (1077 MiB of 2 GiB). 64 GiB raw.
fn zns_ssd(c: &mut Config) {
    c.personality = Personality::Zns;
    c.geometry = Geometry {
        channels: 8,
        dies_per_channel: 4,
        planes_per_die: 2,
        blocks_per_plane: 128,
        pages_per_block: 256,
        page_bytes: 16384,
        oob_bytes: 1872,
        sector_bytes: 4096,
    };
    c.timing.page_read_ns = 58_000;
    c.timing.page_program_ns = 561_000;
    c.timing.block_erase_ns = 3_000_000;
    c.timing.channel_bytes_per_s = 450_000_000;
    c.zns = ZnsConfig { zone_blocks: 1, zone_width: 0, zone_capacity: 0.526, max_open: 14, max_active: 14, ..Default::default() };
}

/// The benchmark device of docs/PERFORMANCE.md: 256 GiB raw, 7% spare, counters only.
fn bench_256g(c: &mut Config) {
    c.geometry.blocks_per_plane = 512;
    c.timing.enabled = false;
    c.ftl.spare_factor = 0.07;
}

/// A config's defaults are the `default` preset's.
impl Default for Config {
    fn default() -> Self {
        preset("default").expect("default preset exists")
    }
}

impl Default for Geometry {
    fn default() -> Self {
        preset("default").unwrap().geometry
    }
}
impl Default for Timing {
    fn default() -> Self {
        preset("default").unwrap().timing
    }
}
