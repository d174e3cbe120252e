//! The key table: every configuration key once, with its unit, valid range and meaning, and
//! what is rendered from it (commented configs, docs/CONFIG.md).

use super::presets;
use super::Config;

/// How a key is checked.
#[derive(Debug, Clone, Copy)]
pub enum Range {
    /// Inclusive numeric range.
    Num(f64, f64),
    /// One of a set of strings.
    OneOf(&'static [&'static str]),
    /// Any boolean.
    Bool,
    /// Checked by hand in [`Config::validate`].
    Other,
}

/// One documented configuration key.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    pub path: &'static str,
    pub unit: &'static str,
    pub range: Range,
    pub doc: &'static str,
}

const fn k(path: &'static str, unit: &'static str, range: Range, doc: &'static str) -> KeyDoc {
    KeyDoc { path, unit, range, doc }
}

use Range::*;
/// Every configuration key, in the order `ssdlab config show` prints them.
pub const KEYS: &[KeyDoc] = &[
    k("seed", "-", Num(0.0, 9.223372036854775e18), "Seed of every random choice: the same config and seed give byte-identical metrics."),
    k("preset", "-", OneOf(presets::NAMES), "Preset the file starts from; keys in the file override it."),
    k("storage", "-", OneOf(&["metadata", "data"]), "metadata: no user data kept (TB-scale studies); data: sparse contents kept, reads return the last write and zeros for unwritten or trimmed sectors."),
    k("personality", "-", OneOf(&["conventional", "zns", "ocssd"]), "What the host sees: conventional (a page-mapped FTL; NVMe FDP when fdp.enabled), zns (NVMe zoned namespace: sequential zones, host-managed resets, no device GC) or ocssd (open-channel 2.0: groups, parallel units and chunks, driven by a host FTL through vector commands)."),
    k("geometry.channels", "count", Num(1.0, 256.0), "Flash channels (independent buses)."),
    k("geometry.dies_per_channel", "count", Num(1.0, 64.0), "Dies (LUNs) per channel; each die runs one operation at a time."),
    k("geometry.planes_per_die", "count", Num(1.0, 16.0), "Planes per die; a program covers one page in every plane (multi-plane)."),
    k("geometry.blocks_per_plane", "count", Num(1.0, 1048576.0), "Erase blocks per plane."),
    k("geometry.pages_per_block", "count", Num(1.0, 32768.0), "Pages per erase block."),
    k("geometry.page_bytes", "bytes", Num(512.0, 65536.0), "Page size; a multiple of sector_bytes."),
    k("geometry.oob_bytes", "bytes", Num(0.0, 8192.0), "Spare (out-of-band) bytes per page; holds each sector's logical address and the page's sequence number. Needs at least 4 bytes per sector plus 8."),
    k("geometry.sector_bytes", "bytes", Num(512.0, 65536.0), "Mapping unit (logical sector); a power of two, at most page_bytes."),
    k("timing.enabled", "-", Bool, "Model time: per-die and per-channel timelines, latencies, throughput. Off = counters only (fastest)."),
    k("timing.page_read_ns", "ns", Num(0.0, 1e9), "Array read time of one page (tR)."),
    k("timing.page_program_ns", "ns", Num(0.0, 1e10), "Program time of one (multi-plane) page (tPROG)."),
    k("timing.block_erase_ns", "ns", Num(0.0, 1e11), "Erase time of one block (tBERS)."),
    k("timing.channel_bytes_per_s", "bytes/s", Num(1e6, 1e11), "Channel transfer rate between controller and dies."),
    k("timing.command_overhead_ns", "ns", Num(0.0, 1e9), "Controller time added to every host command (queueing, DMA, firmware)."),
    k("timing.suspend", "-", Bool, "Let host reads suspend an ongoing program or erase on their die; implies read_priority."),
    k("timing.read_priority", "-", Bool, "Host reads go ahead of the programs, erases and GC work queued on their die, waiting only for the operation in progress (taken as the rest of the queue, at most one program or erase time). Off: strict issue order."),
    k("timing.suspend_ns", "ns", Num(0.0, 1e9), "Time to suspend a program or erase."),
    k("timing.resume_ns", "ns", Num(0.0, 1e9), "Time to resume it after the read."),
    k("timing.host_link_bytes_per_s", "bytes/s", Num(0.0, 1e12), "Host interface (PCIe) data rate per direction, shared by all commands: a write's data crosses it before it is buffered, a read's after it leaves the NAND (0 = not modelled). PCIe 4.0 x4: 7877000000 (16 GT/s x 4 lanes x 128/130, no TLP overhead). Conventional and FDP devices."),
    k("media.pe_limit", "cycles", Num(1.0, 1e9), "Program/erase cycles a block endures; a block reaching it is retired (grown bad): the conventional FTL maps around it, a ZNS zone or open-channel chunk holding it goes offline."),
    k("media.factory_bad_fraction", "fraction", Num(0.0, 0.5), "Blocks marked bad at format, chosen with the seed; never used (ZNS zones and open-channel chunks holding one start offline)."),
    k("media.grown_bad_probability", "probability", Num(0.0, 1.0), "Chance that an erase fails and retires its block (on every personality)."),
    k("ftl.spare_factor", "fraction", Num(0.005, 0.9), "Spare factor SF = (physical - logical) / physical sectors; 0.07 = 7%. (ZNS devices expose every zone; no spare.)"),
    k("ftl.gc_policy", "-", OneOf(&["greedy", "cost-benefit", "fifo", "d-choices"]), "Victim selection: fewest valid sectors; (1-u)/2u x age; oldest block; best of gc_d random blocks."),
    k("ftl.gc_d", "count", Num(1.0, 1024.0), "Sample size of d-choices."),
    k("ftl.gc_fg_free_blocks", "blocks", Num(0.0, 1e9), "Foreground GC: host writes wait for whole-block collections below this many free blocks (0 = automatic: dies x planes + planes + 2, the most a GC round can consume, with dies x planes twice for gc_streams = by-age; smaller values are raised to it)."),
    k("ftl.gc_bg_free_blocks", "blocks", Num(0.0, 1e9), "Background GC: when free blocks, net of the pages already written in open blocks, fall below this, GC is paced with host writes and runs on idle dies (0 = automatic: foreground + planes + 2; smaller values are raised to foreground + planes)."),
    k("ftl.write_point_dies", "dies", Num(0.0, 1e6), "Superblock width: dies each write stream stripes over (0 = every die of its reclaim group). Fewer dies keep fewer blocks open per stream (a smaller reserve on small many-die devices) at the cost of each stream's parallelism; streams are spread over the group's dies in turn."),
    k("ftl.gc_parallel_victims", "blocks", Num(0.0, 1e6), "Victims collected at once per reclaim group, a page from each in turn, so GC reads spread over their dies (0 = one per die of the group; 1 = one victim at a time)."),
    k("ftl.gc_streams", "-", OneOf(&["separate", "shared", "by-age"]), "Where GC writes relocated data (conventional FTL): separate (GC streams apart from host streams: one per reclaim group, plus one per persistently isolated FDP handle), shared (back into the host stream the data came from: one write stream per handle), by-age (two GC streams where separate has one: data moved for the first time to the first, data moved again to the second)."),
    k("ftl.write_buffer_bytes", "bytes", Num(0.0, 1e12), "Write-back buffer; host writes complete when buffered. 0 = write-through: each command waits for its programs and partial pages are padded."),
    k("ftl.gc_uses_write_buffer", "-", Bool, "GC relocations take write-buffer slots like host data (from when their reads are issued until their programs complete), so host writes wait when GC fills the buffer; a host write that triggers foreground GC also waits for the collection (timing on; conventional and FDP devices)."),
    k("ftl.wl_dynamic", "-", Bool, "Dynamic wear-levelling: open the least-worn free block of a die."),
    k("ftl.wl_static_threshold", "cycles", Num(0.0, 1e9), "Static wear-levelling: when max - min erase count exceeds this, move the coldest block's data (0 = off)."),
    k("fdp.enabled", "-", Bool, "NVMe Flexible Data Placement: writes carry a placement identifier (reclaim group, handle) and land in that handle's reclaim units. Off = the same device without FDP (placement ignored)."),
    k("fdp.configuration", "index", Num(0.0, 255.0), "FDP configuration in force, chosen at format time: 0 = the keys below, 1.. = extra_configurations. All offered configurations appear in the FDP Configurations log page."),
    k("fdp.reclaim_groups", "count", Num(1.0, 64.0), "Configuration 0: reclaim groups; each owns an equal share of the dies (whole channels when it divides them)."),
    k("fdp.handles", "count", Num(1.0, 128.0), "Configuration 0: reclaim unit handles per reclaim group (placement handles 0..handles-1; 0 is the default)."),
    k("fdp.handle_types", "-", Other, "Configuration 0: type of each handle, initially-isolated or persistently-isolated; the last entry repeats for the remaining handles."),
    k("fdp.ru_superblocks", "superblocks", Num(1.0, 4096.0), "Configuration 0: reclaim unit size, this many superblocks (one block per plane of every die of the group)."),
    k("fdp.extra_configurations", "-", Other, "More FDP configurations the device offers (configurations 1, 2, ...; 0 is given by the keys above), each a table with reclaim_groups, handles, handle_types and ru_superblocks, e.g. [{ handles = 8, handle_types = [\"persistently-isolated\"] }] (missing fields take the defaults of the default preset)."),
    k("fdp.namespace_handles", "-", Other, "The namespace's placement handle list: placement handle i of a write uses reclaim unit handle namespace_handles[i] (in every reclaim group); empty = every handle of the configuration, in order. Handles not listed are not writable by the namespace."),
    k("fdp.max_events", "events", Num(0.0, 1e6), "FDP events kept for the events log (oldest dropped first)."),
    k("zns.zone_blocks", "blocks", Num(1.0, 65536.0), "Blocks per plane of each die in one zone (zone size = zone_width x planes x zone_blocks blocks)."),
    k("zns.zone_width", "dies", Num(0.0, 16384.0), "Dies a zone is striped over (0 = all dies); must divide the die count."),
    k("zns.zone_capacity", "fraction", Num(0.01, 1.0), "Writable part of each zone (zone capacity / zone size), rounded down to whole multi-plane units."),
    k("zns.max_open", "zones", Num(0.0, 1e6), "Max open resources (implicitly + explicitly open zones; 0 = no limit)."),
    k("zns.max_active", "zones", Num(0.0, 1e6), "Max active resources (open + closed zones; 0 = no limit)."),
    k("zns.conventional_zones", "zones", Num(0.0, 1e6), "Conventional zones at the start of the LBA space (random writes, no write pointer, as Linux's zoned block model and null_blk allow; NVMe ZNS itself has none). The device maps them log-structured onto zones of its own, with GC."),
    k("zns.conventional_spare_zones", "zones", Num(2.0, 1e6), "Zones' worth of flash kept hidden as over-provisioning for the conventional zones (their GC needs at least 2)."),
    k("workload.pattern", "-", OneOf(&["sequential", "uniform", "zipf", "hotcold"]), "Address pattern of the synthetic workload."),
    k("workload.zipf_theta", "-", Num(0.0, 10.0), "Zipf exponent (pattern = zipf); ranks are scattered over the span."),
    k("workload.hot_space", "fraction", Num(0.0, 1.0), "Hot fraction of the span (pattern = hotcold)."),
    k("workload.hot_writes", "fraction", Num(0.0, 1.0), "Fraction of operations aimed at the hot space (pattern = hotcold)."),
    k("workload.read_fraction", "fraction", Num(0.0, 1.0), "Fraction of operations that are reads."),
    k("workload.trim_fraction", "fraction", Num(0.0, 1.0), "Fraction of operations that are trims (deallocate)."),
    k("workload.block_bytes", "bytes", Other, "Request sizes (multiples of sector_bytes); requests are aligned to their size."),
    k("workload.block_weights", "-", Other, "Relative weight of each request size (same length as block_bytes)."),
    k("workload.offset", "fraction", Num(0.0, 1.0), "Start of the workload's address range, as a fraction of the logical space."),
    k("workload.span", "fraction", Num(1e-9, 1.0), "Fraction of the logical space the workload touches (from offset)."),
    k("workload.placement", "-", Num(-1.0, 65535.0), "Placement identifier carried by the workload's writes (FDP); -1 = none (default handle)."),
    k("workload.queue_depth", "commands", Num(1.0, 65536.0), "Closed loop: commands kept in flight."),
    k("workload.rate_iops", "commands/s", Num(0.0, 1e9), "Open loop when > 0: commands arrive at this rate regardless of completions."),
    k("workload.arrival", "-", OneOf(&["fixed", "poisson"]), "Open-loop inter-arrival times: fixed or exponential."),
    k("workload.stop_ops", "commands", Num(0.0, 1.8e19), "Stop after this many commands (0 = no limit)."),
    k("workload.stop_host_write_bytes", "bytes", Num(0.0, 1.8e19), "Stop after this many host bytes written (0 = no limit)."),
    k("workload.stop_sim_ns", "ns", Num(0.0, 1.8e19), "Stop at this simulated time (0 = no limit; needs timing)."),
    k("workload.stop_device_writes", "device writes", Num(0.0, 1e6), "Stop after host writes of this many times the logical capacity (0 = no limit). The stop_* limits end a run at the first reached; giving any of them replaces the default 2 device writes."),
    k("workload.stop", "-", OneOf(&["volume", "steady"]), "volume: stop at the stop_* limits; steady: stop once DLWA has settled (steady_*), the stop_* limits capping the run; metrics.json then reports the steady window's DLWA beside the whole run's."),
    k("workload.steady_window_device_writes", "device writes", Num(1e-6, 1e6), "Steady stop: DLWA is measured over windows of this many logical capacities of host writes."),
    k("workload.steady_tolerance", "fraction", Num(0.0, 1.0), "Steady stop: settled when the last steady_windows windows' DLWA all lie within this fraction of their mean."),
    k("workload.steady_windows", "windows", Num(2.0, 1000.0), "Steady stop: consecutive windows that must agree."),
    k("workload.mix", "-", Other, "Several workloads interleaved by weight, one command at a time, e.g. [{ weight = 1, pattern = \"sequential\", span = 0.5, block_bytes = [131072], placement = 0 }, { weight = 32, pattern = \"uniform\", offset = 0.5, span = 0.4, placement = 1 }]. Each part starts from the keys of [workload] and overrides them; queue depth, rate and stop conditions stay those of [workload]. Empty = the single workload above."),
    k("workload.mix_order", "-", OneOf(&["random", "even"]), "How a mix interleaves its parts: random (each command from part i with probability weight_i / total) or even (smooth weighted round-robin: part i exactly every total / weight_i commands, e.g. a cache's region flushes between its bucket writes)."),
    k("precondition.sequential_fill", "-", Bool, "Before measuring, write the whole logical space once, sequentially."),
    k("precondition.random_device_writes", "device writes", Num(0.0, 1e6), "Then this many logical capacities of uniform random sector overwrites (steady state)."),
    k("metrics.series_interval_ns", "ns", Num(0.0, 1.8e19), "Time-series sample interval in simulated time (timing on; 0 = off)."),
    k("metrics.series_interval_host_bytes", "bytes", Num(0.0, 1.8e19), "Time-series sample interval in host bytes written (0 = automatic: 1/50 of the run's planned writes when timing is off)."),
];

/// Keys a config serialises only when they are set (so metrics.json of a config without them,
/// which embeds the config, stays byte-identical), with their off value.
pub(super) static OMITTED_WHEN_OFF: std::sync::LazyLock<[(&str, toml::Value); 3]> = std::sync::LazyLock::new(|| {
    [
        ("timing.host_link_bytes_per_s", toml::Value::Integer(0)),
        ("ftl.gc_uses_write_buffer", toml::Value::Boolean(false)),
        ("ftl.gc_streams", toml::Value::String("separate".into())),
    ]
});

/// The value at `path` in `v`; a key of [`OMITTED_WHEN_OFF`] missing from a config's table has
/// its off value.
pub(super) fn lookup<'a>(v: &'a toml::Value, path: &str) -> Option<&'a toml::Value> {
    let mut cur = v;
    for (i, part) in path.split('.').enumerate() {
        match cur.as_table()?.get(part) {
            Some(next) => cur = next,
            // Only inside a table the config has (a user's partial tree keeps its gaps).
            None if i > 0 => return OMITTED_WHEN_OFF.iter().find(|(p, _)| *p == path).map(|(_, off)| off),
            None => return None,
        }
    }
    Some(cur)
}

pub(super) fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Human-readable valid range of a key (used in docs and commented configs).
pub fn range_text(r: Range) -> String {
    match r {
        Num(lo, hi) => format!("{} to {}", fmt_num(lo), fmt_num(hi)),
        OneOf(set) => set.join(" | "),
        Bool => "true | false".into(),
        Other => "see docs".into(),
    }
}

/// Markdown table of every key (docs/CONFIG.md is this output; a test keeps it current).
pub fn config_markdown() -> String {
    let default = Config::default();
    let tree = default.to_tree().expect("config serialises");
    let mut out = String::from(
        "# Configuration keys\n\nGenerated from `crates/core/src/config/keys.rs` (`ssdlab config keys`, written here by `make docs`); a test keeps it current.\nDefaults are those of the `default` preset; `ssdlab config show PRESET` prints any preset as a commented file.\n\n| key | unit | default | valid | meaning |\n|---|---|---|---|---|\n",
    );
    for kd in KEYS {
        let v = lookup(&tree, kd.path).map(|v| v.to_string()).unwrap_or_default();
        out.push_str(&format!("| `{}` | {} | `{}` | {} | {} |\n", kd.path, kd.unit, v, range_text(kd.range), kd.doc));
    }
    out
}
