//! Device and run configuration: TOML in, validated structs out.
//!
//! Every key is described once, in [`KEYS`]: its unit, default, valid range and meaning. That
//! table drives range validation, the commented output of `ssdlab config show` and
//! docs/CONFIG.md, so the three cannot drift apart.
//!
//! This file holds the schema (the structs and their defaults); its parts build on it:
//! `presets` (the named starting points, the `default` preset among them), `keys` (the key
//! table), `load` (TOML and value trees in, merged over a preset), `validate` (ranges and the
//! relations between keys).

mod keys;
mod load;
pub mod presets;
mod validate;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use keys::{config_markdown, range_text, KeyDoc, Range, KEYS};
pub use load::find_line;

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

impl Config {
    /// The config as a TOML value tree (keys of `keys::OMITTED_WHEN_OFF` left out while off;
    /// `keys::lookup` gives their off value): what range checks, commented configs and
    /// docs/CONFIG.md read.
    pub fn to_tree(&self) -> Result<toml::Value> {
        toml::Value::try_from(self).map_err(|e| Error::config("config", e.to_string()))
    }
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    /// Host interface (PCIe) data rate per direction; 0 = not modelled.
    pub host_link_bytes_per_s: u64,
}

// Timing and FtlConfig serialise by hand for one reason: a key added after metrics were
// pinned (`keys::OMITTED_WHEN_OFF`) is left out of human-readable output (TOML, and the JSON
// of metrics.json, which embeds the config) while it is off, so configs that do not use it
// give byte-identical metrics. Binary formats (snapshots) are positional and get every field.
// The field lists are destructured without `..`: a new field does not compile until it is
// serialised here, in declaration order (the order the derive used).

/// Serialise field `name`, or skip it when `omit` (an off key of `keys::OMITTED_WHEN_OFF` in a
/// human-readable format).
fn field_unless<T: Serialize + ?Sized, St: serde::ser::SerializeStruct>(
    st: &mut St,
    name: &'static str,
    value: &T,
    omit: bool,
) -> std::result::Result<(), St::Error> {
    if omit {
        st.skip_field(name)
    } else {
        st.serialize_field(name, value)
    }
}

impl Serialize for Timing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let Timing {
            enabled,
            page_read_ns,
            page_program_ns,
            block_erase_ns,
            channel_bytes_per_s,
            command_overhead_ns,
            suspend,
            read_priority,
            suspend_ns,
            resume_ns,
            host_link_bytes_per_s,
        } = self;
        let omit_link = s.is_human_readable() && *host_link_bytes_per_s == 0;
        let mut st = s.serialize_struct("Timing", 11 - omit_link as usize)?;
        st.serialize_field("enabled", enabled)?;
        st.serialize_field("page_read_ns", page_read_ns)?;
        st.serialize_field("page_program_ns", page_program_ns)?;
        st.serialize_field("block_erase_ns", block_erase_ns)?;
        st.serialize_field("channel_bytes_per_s", channel_bytes_per_s)?;
        st.serialize_field("command_overhead_ns", command_overhead_ns)?;
        st.serialize_field("suspend", suspend)?;
        st.serialize_field("read_priority", read_priority)?;
        st.serialize_field("suspend_ns", suspend_ns)?;
        st.serialize_field("resume_ns", resume_ns)?;
        field_unless(&mut st, "host_link_bytes_per_s", host_link_bytes_per_s, omit_link)?;
        st.end()
    }
}

impl Serialize for FtlConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let FtlConfig {
            spare_factor,
            gc_policy,
            gc_d,
            gc_fg_free_blocks,
            gc_bg_free_blocks,
            gc_parallel_victims,
            gc_streams,
            write_point_dies,
            write_buffer_bytes,
            gc_uses_write_buffer,
            wl_dynamic,
            wl_static_threshold,
        } = self;
        let omit_gc_buffer = s.is_human_readable() && !*gc_uses_write_buffer;
        let omit_streams = s.is_human_readable() && gc_streams.is_separate();
        let mut st = s.serialize_struct("FtlConfig", 12 - omit_gc_buffer as usize - omit_streams as usize)?;
        st.serialize_field("spare_factor", spare_factor)?;
        st.serialize_field("gc_policy", gc_policy)?;
        st.serialize_field("gc_d", gc_d)?;
        st.serialize_field("gc_fg_free_blocks", gc_fg_free_blocks)?;
        st.serialize_field("gc_bg_free_blocks", gc_bg_free_blocks)?;
        st.serialize_field("gc_parallel_victims", gc_parallel_victims)?;
        field_unless(&mut st, "gc_streams", gc_streams, omit_streams)?;
        st.serialize_field("write_point_dies", write_point_dies)?;
        st.serialize_field("write_buffer_bytes", write_buffer_bytes)?;
        field_unless(&mut st, "gc_uses_write_buffer", gc_uses_write_buffer, omit_gc_buffer)?;
        st.serialize_field("wl_dynamic", wl_dynamic)?;
        st.serialize_field("wl_static_threshold", wl_static_threshold)?;
        st.end()
    }
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

/// Where the conventional FTL's garbage collection writes the data it relocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GcStreams {
    /// Host writes and relocations in separate write streams: one GC stream (per reclaim
    /// group, and per persistently isolated FDP handle).
    #[default]
    Separate,
    /// One write stream: relocated data goes back into the host stream it came from.
    Shared,
    /// Two GC streams where `separate` has one: data relocated for the first time goes to the
    /// first ("young"), data relocated again (found in a GC stream's block) to the second
    /// ("old"), which keeps its own relocations.
    ByAge,
}

impl GcStreams {
    /// Whether this is the default (`separate`): configs leave it out when serialised, so
    /// metrics.json of runs that do not use it stays as it was before the key existed.
    pub fn is_separate(&self) -> bool {
        *self == GcStreams::Separate
    }
}

/// Conventional FTL settings (serialised by hand, see `impl Serialize for Timing`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FtlConfig {
    pub spare_factor: f64,
    pub gc_policy: GcPolicy,
    pub gc_d: u32,
    pub gc_fg_free_blocks: u32,
    pub gc_bg_free_blocks: u32,
    pub gc_parallel_victims: u32,
    /// Left out of human-readable serialisations at its default (`keys::OMITTED_WHEN_OFF`).
    pub gc_streams: GcStreams,
    pub write_point_dies: u32,
    pub write_buffer_bytes: u64,
    /// Relocated units take write-buffer space too.
    pub gc_uses_write_buffer: bool,
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
            gc_streams: GcStreams::Separate,
            write_point_dies: 0,
            write_buffer_bytes: 4 << 20,
            gc_uses_write_buffer: false,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_key_doc() {
        let tree = Config::default().to_tree().unwrap();
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
        // Keys serialised only when set are documented too, and their off value is known.
        for (p, _) in keys::OMITTED_WHEN_OFF.iter() {
            assert!(!paths.iter().any(|q| q == p) && KEYS.iter().any(|kd| kd.path == *p), "{p}");
        }
        assert_eq!(paths.len() + keys::OMITTED_WHEN_OFF.len(), KEYS.len());
    }

    #[test]
    fn gc_streams_is_left_out_of_readable_configs_at_its_default_only() {
        let mut c = Config::default();
        let json = |c: &Config| serde_json::to_value(c).unwrap();
        assert!(json(&c)["ftl"].get("gc_streams").is_none(), "metrics.json's config echo stays as before the key");
        assert_eq!(keys::lookup(&c.to_tree().unwrap(), "ftl.gc_streams").and_then(|v| v.as_str()), Some("separate"));
        c.ftl.gc_streams = GcStreams::ByAge;
        assert_eq!(json(&c)["ftl"]["gc_streams"], "by-age");
        // bincode (snapshots) needs every field, whatever its value, and reads it back.
        for g in [GcStreams::Separate, GcStreams::Shared, GcStreams::ByAge] {
            c.ftl.gc_streams = g;
            let back: Config = bincode::deserialize(&bincode::serialize(&c).unwrap()).unwrap();
            assert_eq!(back, c);
            let back: Config = toml::Value::try_from(&c).unwrap().try_into().unwrap();
            assert_eq!(back, c);
        }
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
