//! Device and run configuration: TOML in, validated structs out.
//!
//! Every key is described once, in [`KEYS`]: its unit, default, valid range and meaning. That
//! table drives range validation, the commented output of `ssdlab config show` and
//! docs/CONFIG.md, so the three cannot drift apart.

mod validate;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, Error, Result};
use crate::media::presets;
use validate::{check_tree, check_unknown_keys};

/// A complete configuration: device, workload and measurement settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Seed of every random choice in the run (workload, bad blocks, d-choices sampling).
    pub seed: u64,
    /// Name of the preset the file starts from; its keys are overridden by the file's.
    pub preset: String,
    /// "metadata" (no user data kept) or "data" (contents kept, reads return the last write).
    pub storage: StorageMode,
    /// What the host sees: "conventional" (an FTL; FDP when [fdp] is enabled), "zns" or "ocssd".
    pub personality: Personality,
    pub geometry: Geometry,
    pub timing: Timing,
    pub media: MediaConfig,
    pub ftl: FtlConfig,
    pub fdp: FdpConfig,
    pub zns: ZnsConfig,
    pub workload: WorkloadConfig,
    pub precondition: PreconditionConfig,
    pub metrics: MetricsConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(Default)]
pub enum StorageMode {
    #[default]
    Metadata,
    Data,
}

/// NAND geometry. Sizes in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Geometry {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_bytes: u32,
    pub oob_bytes: u32,
    pub sector_bytes: u32,
}

/// Media timings in nanoseconds and bytes per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    pub enabled: bool,
    pub page_read_ns: u64,
    pub page_program_ns: u64,
    pub block_erase_ns: u64,
    pub channel_bytes_per_s: u64,
    pub command_overhead_ns: u64,
    pub suspend: bool,
    pub read_priority: bool,
    pub suspend_ns: u64,
    pub resume_ns: u64,
}

/// Per-block endurance and bad blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    pub pe_limit: u32,
    pub factory_bad_fraction: f64,
    pub grown_bad_probability: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPolicy {
    Greedy,
    CostBenefit,
    Fifo,
    DChoices,
}

/// Conventional FTL settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FtlConfig {
    pub spare_factor: f64,
    pub gc_policy: GcPolicy,
    pub gc_d: u32,
    pub gc_fg_free_blocks: u32,
    pub gc_bg_free_blocks: u32,
    pub gc_parallel_victims: u32,
    pub write_point_dies: u32,
    pub write_buffer_bytes: u64,
    pub wl_dynamic: bool,
    pub wl_static_threshold: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Personality {
    #[default]
    Conventional,
    Zns,
    Ocssd,
}

/// Zoned namespace layout and resources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZnsConfig {
    pub zone_blocks: u32,
    pub zone_width: u32,
    pub zone_capacity: f64,
    pub max_open: u32,
    pub max_active: u32,
    pub conventional_zones: u32,
    pub conventional_spare_zones: u32,
}

impl Default for ZnsConfig {
    fn default() -> Self {
        ZnsConfig {
            zone_blocks: 1,
            zone_width: 0,
            zone_capacity: 1.0,
            max_open: 14,
            max_active: 14,
            conventional_zones: 0,
            conventional_spare_zones: 2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandleType {
    /// GC may relocate the handle's data together with other initially isolated handles' data
    /// of the same reclaim group.
    InitiallyIsolated,
    /// GC keeps the handle's data apart from every other handle's, relocations included.
    PersistentlyIsolated,
}

/// NVMe Flexible Data Placement (TP4146) configuration of the device.
///
/// The device offers one or more FDP configurations (as a real endurance group does in its
/// FDP Configurations log page): configuration 0 is given by the flat keys (`reclaim_groups`,
/// `handles`, `handle_types`, `ru_superblocks`), configurations 1.. by `extra_configurations`.
/// `configuration` selects the one in force when the device is formatted, as the host's Set
/// Features (FDP) does before namespaces are created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FdpConfig {
    pub enabled: bool,
    pub configuration: u32,
    pub reclaim_groups: u32,
    pub handles: u32,
    pub handle_types: Vec<HandleType>,
    pub ru_superblocks: u32,
    pub extra_configurations: Vec<FdpConfiguration>,
    pub namespace_handles: Vec<u32>,
    pub max_events: u32,
}

/// One FDP configuration: reclaim groups, handles and their types, reclaim unit size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FdpConfiguration {
    pub reclaim_groups: u32,
    pub handles: u32,
    pub handle_types: Vec<HandleType>,
    pub ru_superblocks: u32,
}

impl Default for FdpConfiguration {
    fn default() -> Self {
        FdpConfiguration { reclaim_groups: 1, handles: 8, handle_types: vec![HandleType::InitiallyIsolated], ru_superblocks: 1 }
    }
}

impl Default for FdpConfig {
    fn default() -> Self {
        let c = FdpConfiguration::default();
        FdpConfig {
            enabled: false,
            configuration: 0,
            reclaim_groups: c.reclaim_groups,
            handles: c.handles,
            handle_types: c.handle_types,
            ru_superblocks: c.ru_superblocks,
            extra_configurations: vec![],
            namespace_handles: vec![],
            max_events: 1024,
        }
    }
}

impl FdpConfiguration {
    /// Type of handle `h` (the last listed type repeats).
    pub fn handle_type(&self, h: u32) -> HandleType {
        let i = (h as usize).min(self.handle_types.len().saturating_sub(1));
        self.handle_types.get(i).copied().unwrap_or(HandleType::InitiallyIsolated)
    }
}

impl FdpConfig {
    /// Every configuration the device offers, in log-page order (0 = the flat keys).
    pub fn configurations(&self) -> Vec<FdpConfiguration> {
        let first = FdpConfiguration {
            reclaim_groups: self.reclaim_groups,
            handles: self.handles,
            handle_types: self.handle_types.clone(),
            ru_superblocks: self.ru_superblocks,
        };
        std::iter::once(first).chain(self.extra_configurations.iter().cloned()).collect()
    }

    /// The configuration selected by `configuration` (validated to exist).
    pub fn active(&self) -> FdpConfiguration {
        let mut all = self.configurations();
        let i = (self.configuration as usize).min(all.len() - 1);
        all.swap_remove(i)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    Sequential,
    Uniform,
    Zipf,
    Hotcold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    Fixed,
    Poisson,
}

/// How a mix picks the part each command comes from: at random by weight, or evenly
/// (smooth weighted round-robin: a part of weight w out of W every W / w commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixOrder {
    Random,
    Even,
}

/// When a run stops: at a fixed volume (the first `stop_*` limit reached), or once the
/// measured DLWA has settled (`steady_*`), the `stop_*` limits then being the most it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    Volume,
    Steady,
}

/// A synthetic workload and when it stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    pub pattern: Pattern,
    pub zipf_theta: f64,
    pub hot_space: f64,
    pub hot_writes: f64,
    pub read_fraction: f64,
    pub trim_fraction: f64,
    pub block_bytes: Vec<u64>,
    pub block_weights: Vec<f64>,
    pub offset: f64,
    pub span: f64,
    pub placement: i64,
    pub queue_depth: u32,
    pub rate_iops: f64,
    pub arrival: Arrival,
    pub stop_ops: u64,
    pub stop_host_write_bytes: u64,
    pub stop_sim_ns: u64,
    pub stop_device_writes: f64,
    pub stop: StopRule,
    pub steady_window_device_writes: f64,
    pub steady_tolerance: f64,
    pub steady_windows: u32,
    /// Several workloads interleaved by weight; see [`WorkloadConfig::mix_parts`].
    pub mix: Vec<toml::Table>,
    pub mix_order: MixOrder,
}

/// Keys of `[workload]` that belong to the whole run, not to one part of a mix.
const RUN_KEYS: &[&str] = &[
    "queue_depth",
    "rate_iops",
    "arrival",
    "stop_ops",
    "stop_host_write_bytes",
    "stop_sim_ns",
    "stop_device_writes",
    "stop",
    "steady_window_device_writes",
    "steady_tolerance",
    "steady_windows",
    "mix",
    "mix_order",
];

/// The `[workload]` limits a run stops at (the first reached). One given by the user replaces
/// the defaults rather than racing them: see [`apply_stop_rule`].
pub const STOP_KEYS: &[&str] = &["stop_ops", "stop_host_write_bytes", "stop_sim_ns", "stop_device_writes"];

/// Stop limits the user gives replace the ones below them (preset or defaults): when `user`
/// (a `[workload]` table) sets any of [`STOP_KEYS`], the others in `base` become 0 (no limit).
/// With none given, the base's limits stand (2 device writes by default).
pub fn apply_stop_rule(base: &mut toml::Table, user: &toml::Table) {
    if STOP_KEYS.iter().any(|k| user.contains_key(*k)) {
        for k in STOP_KEYS {
            let zero = match base.get(*k) {
                Some(toml::Value::Float(_)) => toml::Value::Float(0.0),
                _ => toml::Value::Integer(0),
            };
            base.insert((*k).to_string(), zero);
        }
    }
}

impl WorkloadConfig {
    /// The same workload stopping at its volume limits only.
    pub fn with_volume_stop(self) -> WorkloadConfig {
        WorkloadConfig { stop: StopRule::Volume, ..self }
    }

    /// The parts of `mix` as complete workloads with their weights. Each part starts from this
    /// `[workload]` table's own keys and overrides them with its table's (plus `weight`,
    /// default 1); queue depth, rate and stop conditions belong to the whole run.
    pub fn mix_parts(&self) -> Result<Vec<(WorkloadConfig, f64)>> {
        let mut base = toml::Value::try_from(self).expect("workload serialises");
        let base = base.as_table_mut().expect("table");
        base.remove("mix");
        let mut out = vec![];
        for (i, part) in self.mix.iter().enumerate() {
            let key = |k: &str| format!("workload.mix[{i}].{k}");
            let mut t = base.clone();
            let mut weight = 1.0;
            for (k, v) in part {
                if k == "weight" {
                    weight = v
                        .as_float()
                        .or_else(|| v.as_integer().map(|x| x as f64))
                        .ok_or_else(|| Error::config(key(k), "expected a number"))?;
                    if !(weight > 0.0 && weight.is_finite()) {
                        return Err(Error::config(key(k), format!("{weight} must be a positive number")));
                    }
                } else if RUN_KEYS.contains(&k.as_str()) {
                    return Err(Error::config(key(k), "belongs to the whole run: set it in [workload], not in a mix part"));
                } else if !t.contains_key(k) {
                    return Err(Error::config(key(k), "is not a workload key"));
                } else {
                    // Integers are accepted where the workload key is fractional.
                    let v = match (&t[k], v) {
                        (toml::Value::Float(_), toml::Value::Integer(x)) => toml::Value::Float(*x as f64),
                        _ => v.clone(),
                    };
                    t.insert(k.clone(), v);
                }
            }
            let w: WorkloadConfig =
                toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| Error::config(key("*"), e.message().to_string()))?;
            out.push((w, weight));
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreconditionConfig {
    pub sequential_fill: bool,
    pub random_device_writes: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub series_interval_ns: u64,
    pub series_interval_host_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        presets::preset("default").expect("default preset exists")
    }
}

impl Default for Geometry {
    fn default() -> Self {
        presets::preset("default").unwrap().geometry
    }
}
impl Default for Timing {
    fn default() -> Self {
        presets::preset("default").unwrap().timing
    }
}
impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig { pe_limit: 3000, factory_bad_fraction: 0.0, grown_bad_probability: 0.0 }
    }
}
impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            spare_factor: 0.07,
            gc_policy: GcPolicy::Greedy,
            gc_d: 8,
            gc_fg_free_blocks: 0,
            gc_bg_free_blocks: 0,
            gc_parallel_victims: 0,
            write_point_dies: 0,
            write_buffer_bytes: 4 << 20,
            wl_dynamic: true,
            wl_static_threshold: 0,
        }
    }
}
impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            pattern: Pattern::Uniform,
            zipf_theta: 0.99,
            hot_space: 0.2,
            hot_writes: 0.8,
            read_fraction: 0.0,
            trim_fraction: 0.0,
            block_bytes: vec![4096],
            block_weights: vec![1.0],
            offset: 0.0,
            span: 1.0,
            placement: -1,
            queue_depth: 32,
            rate_iops: 0.0,
            arrival: Arrival::Poisson,
            stop_ops: 0,
            stop_host_write_bytes: 0,
            stop_sim_ns: 0,
            stop_device_writes: 2.0,
            stop: StopRule::Volume,
            steady_window_device_writes: 0.25,
            steady_tolerance: 0.01,
            steady_windows: 4,
            mix: vec![],
            mix_order: MixOrder::Random,
        }
    }
}
impl Default for PreconditionConfig {
    fn default() -> Self {
        PreconditionConfig { sequential_fill: true, random_device_writes: 1.0 }
    }
}
impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { series_interval_ns: 10_000_000, series_interval_host_bytes: 0 }
    }
}

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
    k("media.pe_limit", "cycles", Num(1.0, 1e9), "Program/erase cycles a block endures; a block reaching it is retired (grown bad): the conventional FTL maps around it, a ZNS zone or open-channel chunk holding it goes offline."),
    k("media.factory_bad_fraction", "fraction", Num(0.0, 0.5), "Blocks marked bad at format, chosen with the seed; never used (ZNS zones and open-channel chunks holding one start offline)."),
    k("media.grown_bad_probability", "probability", Num(0.0, 1.0), "Chance that an erase fails and retires its block (on every personality)."),
    k("ftl.spare_factor", "fraction", Num(0.005, 0.9), "Spare factor SF = (physical - logical) / physical sectors; 0.07 = 7%. (ZNS devices expose every zone; no spare.)"),
    k("ftl.gc_policy", "-", OneOf(&["greedy", "cost-benefit", "fifo", "d-choices"]), "Victim selection: fewest valid sectors; (1-u)/2u x age; oldest block; best of gc_d random blocks."),
    k("ftl.gc_d", "count", Num(1.0, 1024.0), "Sample size of d-choices."),
    k("ftl.gc_fg_free_blocks", "blocks", Num(0.0, 1e9), "Foreground GC: host writes wait for whole-block collections below this many free blocks (0 = automatic: dies x planes + planes + 2, the most a GC round can consume; smaller values are raised to it)."),
    k("ftl.gc_bg_free_blocks", "blocks", Num(0.0, 1e9), "Background GC: when free blocks, net of the pages already written in open blocks, fall below this, GC is paced with host writes and runs on idle dies (0 = automatic: foreground + planes + 2; smaller values are raised to foreground + planes)."),
    k("ftl.write_point_dies", "dies", Num(0.0, 1e6), "Superblock width: dies each write stream stripes over (0 = every die of its reclaim group). Fewer dies keep fewer blocks open per stream (a smaller reserve on small many-die devices) at the cost of each stream's parallelism; streams are spread over the group's dies in turn."),
    k("ftl.gc_parallel_victims", "blocks", Num(0.0, 1e6), "Victims collected at once per reclaim group, a page from each in turn, so GC reads spread over their dies (0 = one per die of the group; 1 = one victim at a time)."),
    k("ftl.write_buffer_bytes", "bytes", Num(0.0, 1e12), "Write-back buffer; host writes complete when buffered. 0 = write-through: each command waits for its programs and partial pages are padded."),
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

fn lookup<'a>(v: &'a toml::Value, path: &str) -> Option<&'a toml::Value> {
    let mut cur = v;
    for part in path.split('.') {
        cur = cur.as_table()?.get(part)?;
    }
    Some(cur)
}

/// Overlay `over` onto `base`, table by table.
fn merge(base: &mut toml::Value, over: &toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (key, ov) in o {
                match b.get_mut(key) {
                    Some(bv) if bv.is_table() && ov.is_table() => merge(bv, ov),
                    _ => {
                        b.insert(key.clone(), ov.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Find the 1-based line of `path` in a TOML text (best effort: `[table]` headers then `key =`).
pub fn find_line(text: &str, path: &str) -> Option<usize> {
    let (table, key) = match path.rsplit_once('.') {
        Some((t, k)) => (t, k),
        None => ("", path),
    };
    let mut current = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            continue;
        }
        if current == table {
            if let Some((lhs, _)) = line.split_once('=') {
                if lhs.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
        // dotted keys at top level, e.g. `ftl.gc_policy = ...`
        if current.is_empty() {
            if let Some((lhs, _)) = line.split_once('=') {
                if lhs.trim() == path {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

impl Config {
    /// Parse a TOML text (its `preset` key, if any, is applied first) and validate it.
    /// `origin` names the file in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config> {
        let user: toml::Value = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            Error::Config(ConfigError { file: Some(origin.into()), line, key: None, msg: e.message().to_string() })
        })?;
        Self::from_value(user, Some(text), origin)
    }

    /// Build from a TOML/JSON-like value tree (used by the Python API with a dict).
    pub fn from_value(user: toml::Value, text: Option<&str>, origin: &str) -> Result<Config> {
        let locate = |key: Option<String>, msg: String| {
            let line = match (text, &key) {
                (Some(t), Some(k)) => find_line(t, k),
                _ => None,
            };
            Error::Config(ConfigError { file: Some(origin.into()), line, key, msg })
        };
        let preset = match lookup(&user, "preset") {
            None => "default".to_string(),
            Some(toml::Value::String(s)) => s.clone(),
            Some(_) => return Err(locate(Some("preset".into()), "must be a string".into())),
        };
        let base = presets::preset(&preset)
            .ok_or_else(|| locate(Some("preset".into()), format!("unknown preset {preset:?}; valid: {}", presets::NAMES.join(", "))))?;
        let mut tree = toml::Value::try_from(&base).expect("config serialises");
        check_unknown_keys(&user, "").map_err(|k| {
            let (table, name) = k.rsplit_once('.').unwrap_or(("", &k));
            let valid: Vec<&str> = KEYS
                .iter()
                .filter(|d| d.path.rsplit_once('.').map(|x| x.0).unwrap_or("") == table)
                .map(|d| d.path.rsplit_once('.').map(|x| x.1).unwrap_or(d.path))
                .collect();
            locate(Some(k.clone()), format!("unknown key {name:?}; valid keys here: {}", valid.join(", ")))
        })?;
        if let (Some(base), Some(user_w)) =
            (tree.get_mut("workload").and_then(|w| w.as_table_mut()), lookup(&user, "workload").and_then(|w| w.as_table()))
        {
            apply_stop_rule(base, user_w);
        }
        let defaults = tree.clone();
        merge(&mut tree, &user);
        check_tree(&mut tree, &defaults).map_err(|e| match e {
            Error::Config(c) => locate(c.key, c.msg),
            other => other,
        })?;
        let cfg: Config = tree.try_into().map_err(|e: toml::de::Error| locate(None, e.message().to_string()))?;
        cfg.validate().map_err(|e| match e {
            Error::Config(c) => locate(c.key, c.msg),
            other => other,
        })?;
        Ok(cfg)
    }

    /// Read and parse a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(ConfigError { file: Some(path.display().to_string()), line: None, key: None, msg: e.to_string() })
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// The config as TOML with every key commented (unit, valid range, meaning).
    pub fn to_commented_toml(&self) -> String {
        let tree = toml::Value::try_from(self).expect("config serialises");
        let mut out = String::from("# ssdlab configuration. Every key is optional; missing keys come from `preset`.\n");
        let mut table = "";
        for kd in KEYS {
            let (t, name) = kd.path.rsplit_once('.').unwrap_or(("", kd.path));
            if t != table {
                out.push_str(&format!("\n[{t}]\n"));
                table = t;
            }
            let v = lookup(&tree, kd.path).map(|v| v.to_string()).unwrap_or_default();
            out.push_str(&format!("# {} [{}; {}]\n{name} = {v}\n", kd.doc, kd.unit, range_text(kd.range)));
        }
        out
    }
}

fn fmt_num(x: f64) -> String {
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
    let tree = toml::Value::try_from(&default).expect("config serialises");
    let mut out = String::from(
        "# Configuration keys\n\nGenerated from `crates/core/src/config.rs` (`ssdlab config keys`, written here by `make docs`); a test keeps it current.\nDefaults are those of the `default` preset; `ssdlab config show PRESET` prints any preset as a commented file.\n\n| key | unit | default | valid | meaning |\n|---|---|---|---|---|\n",
    );
    for kd in KEYS {
        let v = lookup(&tree, kd.path).map(|v| v.to_string()).unwrap_or_default();
        out.push_str(&format!("| `{}` | {} | `{}` | {} | {} |\n", kd.path, kd.unit, v, range_text(kd.range), kd.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_key_doc() {
        let tree = toml::Value::try_from(Config::default()).unwrap();
        fn walk(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, sub) in t {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    if sub.is_table() {
                        walk(sub, &p, out)
                    } else {
                        out.push(p)
                    }
                }
            }
        }
        let mut paths = vec![];
        walk(&tree, "", &mut paths);
        for p in &paths {
            assert!(KEYS.iter().any(|kd| kd.path == p), "{p} has no KeyDoc");
        }
        assert_eq!(paths.len(), KEYS.len());
    }

    #[test]
    fn unknown_key_names_line_and_valid_keys() {
        let text = "seed = 1\n[ftl]\ngc_polcy = \"greedy\"\n";
        let e = Config::from_toml_str(text, "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:3: ftl.gc_polcy"), "{e}");
        assert!(e.contains("gc_policy"), "{e}");
    }

    #[test]
    fn out_of_range_names_line_and_range() {
        let text = "[geometry]\nchannels = 0\n";
        let e = Config::from_toml_str(text, "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:2: geometry.channels"), "{e}");
        assert!(e.contains("1 to 256"), "{e}");
    }

    #[test]
    fn malformed_toml_names_line() {
        let e = Config::from_toml_str("seed = 1\n[ftl\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:2"), "{e}");
    }

    #[test]
    fn every_preset_validates_and_round_trips() {
        for name in presets::NAMES {
            let c = presets::preset(name).unwrap();
            c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            let back = Config::from_toml_str(&c.to_commented_toml(), "show").unwrap();
            assert_eq!(back, c, "{name}");
        }
    }
}
