//! Config validation: each key's type and range from [`KEYS`] (`check_tree`), unknown keys,
//! and [`Config::validate`]'s relations between keys, one helper per section.

use super::keys::Range::{Num, OneOf};
use super::keys::{fmt_num, lookup, KEYS};
use super::{Config, Personality, WorkloadConfig};
use crate::error::{Error, Result};

impl Config {
    /// Check ranges (from [`KEYS`]) and the relations between keys.
    pub fn validate(&self) -> Result<()> {
        if self.seed > i64::MAX as u64 {
            return Err(Error::config(
                "seed",
                format!("{} is out of range; valid: 0 to {} (TOML integers are signed 64-bit)", self.seed, i64::MAX),
            ));
        }
        let mut tree = self.to_tree()?;
        let defaults = tree.clone();
        check_tree(&mut tree, &defaults)?;
        self.validate_geometry()?;
        self.validate_spare()?;
        self.validate_fdp()?;
        self.validate_workload()
    }

    /// Geometry: sector and page sizes, room in the OOB, the 32-bit physical sector space.
    fn validate_geometry(&self) -> Result<()> {
        let g = &self.geometry;
        if !g.sector_bytes.is_power_of_two() {
            return Err(Error::config("geometry.sector_bytes", format!("{} is not a power of two", g.sector_bytes)));
        }
        if !g.page_bytes.is_multiple_of(g.sector_bytes) {
            return Err(Error::config(
                "geometry.page_bytes",
                format!("{} is not a multiple of sector_bytes ({})", g.page_bytes, g.sector_bytes),
            ));
        }
        let spp = g.page_bytes / g.sector_bytes;
        if (g.oob_bytes as u64) < 4 * spp as u64 + 8 {
            return Err(Error::config(
                "geometry.oob_bytes",
                format!("{} bytes cannot hold {} logical addresses and a sequence number (need >= {})", g.oob_bytes, spp, 4 * spp + 8),
            ));
        }
        let phys_sectors = g.channels as u64
            * g.dies_per_channel as u64
            * g.planes_per_die as u64
            * g.blocks_per_plane as u64
            * g.pages_per_block as u64
            * spp as u64;
        if phys_sectors >= (u32::MAX - 1) as u64 {
            return Err(Error::config(
                "geometry.blocks_per_plane",
                format!("device has {phys_sectors} physical sectors; at most {} are supported (use larger sector_bytes)", u32::MAX - 2),
            ));
        }
        Ok(())
    }

    /// The conventional FTL's spare blocks: enough for its open blocks and a margin.
    fn validate_spare(&self) -> Result<()> {
        let g = &self.geometry;
        let dies = g.channels * g.dies_per_channel;
        let open_blocks = 2 * dies * g.planes_per_die; // host + GC write points
        let blocks = dies * g.planes_per_die * g.blocks_per_plane;
        let spare_blocks = (blocks as f64 * self.ftl.spare_factor) as u32;
        if self.personality == Personality::Conventional && spare_blocks < open_blocks + 4 {
            return Err(Error::config(
                "ftl.spare_factor",
                format!(
                    "{} leaves {spare_blocks} spare blocks, fewer than the {} the FTL needs (two open blocks per plane and die, plus 4); raise spare_factor or blocks_per_plane",
                    self.ftl.spare_factor,
                    open_blocks + 4
                ),
            ));
        }
        Ok(())
    }

    /// FDP: the configuration in force exists, each offered configuration is sound, the
    /// namespace's handles are distinct and exist.
    fn validate_fdp(&self) -> Result<()> {
        let g = &self.geometry;
        let dies = g.channels * g.dies_per_channel;
        let f = &self.fdp;
        let offered = f.configurations();
        if f.configuration as usize >= offered.len() {
            return Err(Error::config(
                "fdp.configuration",
                format!(
                    "{} names no configuration: the device offers {} (0 = the flat keys, 1.. = extra_configurations)",
                    f.configuration,
                    offered.len()
                ),
            ));
        }
        for (i, fc) in offered.iter().enumerate() {
            let key = |name: &str| if i == 0 { format!("fdp.{name}") } else { format!("fdp.extra_configurations[{}].{name}", i - 1) };
            if fc.handle_types.is_empty() {
                return Err(Error::config(key("handle_types"), "needs at least one type (initially-isolated or persistently-isolated)"));
            }
            if i > 0 {
                for (name, v, lo, hi) in [
                    ("reclaim_groups", fc.reclaim_groups, 1, 64),
                    ("handles", fc.handles, 1, 128),
                    ("ru_superblocks", fc.ru_superblocks, 1, 4096),
                ] {
                    if !(lo..=hi).contains(&v) {
                        return Err(Error::config(key(name), format!("{v} is out of range; valid: {lo} to {hi}")));
                    }
                }
            }
            if fc.reclaim_groups > dies {
                return Err(Error::config(
                    key("reclaim_groups"),
                    format!("{} reclaim groups need at least as many dies ({dies} here)", fc.reclaim_groups),
                ));
            }
        }
        let active = f.active();
        let mut seen = std::collections::HashSet::new();
        for &h in &f.namespace_handles {
            if h >= active.handles || !seen.insert(h) {
                return Err(Error::config(
                    "fdp.namespace_handles",
                    format!(
                        "{:?} must list distinct reclaim unit handles below {} (the configuration in force has {})",
                        f.namespace_handles, active.handles, active.handles
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The workload: each part of a mix on its own, then span, block sizes and weights,
    /// fractions, stop conditions and what needs timing.
    fn validate_workload(&self) -> Result<()> {
        let g = &self.geometry;
        let w = &self.workload;
        if !w.mix.is_empty() {
            for (i, (part, _)) in w.mix_parts()?.into_iter().enumerate() {
                let mut c = self.clone();
                c.workload = WorkloadConfig { mix: vec![], ..part };
                c.validate().map_err(|e| match e {
                    Error::Config(mut ce) => {
                        ce.key = Some(format!("workload.mix[{i}].{}", ce.key.unwrap_or_default().trim_start_matches("workload.")));
                        Error::Config(ce)
                    }
                    other => other,
                })?;
            }
        }
        if w.offset + w.span > 1.0 + 1e-9 {
            return Err(Error::config(
                "workload.span",
                format!("offset {} + span {} exceeds the logical space (must be <= 1)", w.offset, w.span),
            ));
        }
        if w.block_bytes.is_empty() || w.block_bytes.len() != w.block_weights.len() {
            return Err(Error::config(
                "workload.block_weights",
                format!("needs one weight per block_bytes entry ({} sizes, {} weights)", w.block_bytes.len(), w.block_weights.len()),
            ));
        }
        for &b in &w.block_bytes {
            if b == 0 || b % g.sector_bytes as u64 != 0 || b > (32 << 20) {
                return Err(Error::config(
                    "workload.block_bytes",
                    format!("{b} must be a positive multiple of sector_bytes ({}) up to 32 MiB", g.sector_bytes),
                ));
            }
        }
        if w.block_weights.iter().any(|&x| !(x >= 0.0 && x.is_finite())) || w.block_weights.iter().sum::<f64>() <= 0.0 {
            return Err(Error::config("workload.block_weights", "weights must be >= 0 with a positive sum"));
        }
        if w.read_fraction + w.trim_fraction > 1.0 {
            return Err(Error::config("workload.trim_fraction", "read_fraction + trim_fraction must be <= 1"));
        }
        if w.stop_ops == 0 && w.stop_host_write_bytes == 0 && w.stop_sim_ns == 0 && w.stop_device_writes == 0.0 {
            return Err(Error::config(
                "workload.stop_ops",
                "no stop condition: set stop_ops, stop_host_write_bytes, stop_sim_ns or stop_device_writes",
            ));
        }
        if w.stop_sim_ns > 0 && !self.timing.enabled {
            return Err(Error::config("workload.stop_sim_ns", "needs timing.enabled = true"));
        }
        if w.rate_iops > 0.0 && !self.timing.enabled {
            return Err(Error::config("workload.rate_iops", "open-loop arrivals need timing.enabled = true"));
        }
        Ok(())
    }
}

/// Check each key's type (against the default's) and range; integers given for
/// fractional keys are converted.
pub(super) fn check_tree(tree: &mut toml::Value, defaults: &toml::Value) -> Result<()> {
    use toml::Value as V;
    for kd in KEYS {
        let Some(def) = lookup(defaults, kd.path) else { continue };
        let (table, name) = kd.path.rsplit_once('.').unwrap_or(("", kd.path));
        let parent = if table.is_empty() {
            Some(&mut *tree)
        } else {
            table.split('.').try_fold(&mut *tree, |cur, part| cur.as_table_mut()?.get_mut(part))
        };
        let Some(v) = parent.and_then(|p| p.as_table_mut()).and_then(|t| t.get_mut(name)) else { continue };
        let kind = |v: &V| match v {
            V::Integer(_) => "an integer",
            V::Float(_) => "a number",
            V::String(_) => "a string",
            V::Boolean(_) => "true or false",
            V::Array(_) => "a list",
            _ => "a table",
        };
        match (def, &*v) {
            (V::Float(_), V::Integer(i)) => *v = V::Float(*i as f64),
            (V::Array(_), V::Array(_)) => {}
            (d, u) if std::mem::discriminant(d) != std::mem::discriminant(u) => {
                return Err(Error::config(kd.path, format!("expected {}, got {}", kind(d), kind(u))));
            }
            _ => {}
        }
        match kd.range {
            Num(lo, hi) => {
                let x = match v {
                    V::Integer(i) => *i as f64,
                    V::Float(f) => *f,
                    _ => continue,
                };
                if !(x >= lo && x <= hi) {
                    return Err(Error::config(
                        kd.path,
                        format!("{} is out of range; valid: {} to {} ({})", v, fmt_num(lo), fmt_num(hi), kd.unit),
                    ));
                }
            }
            OneOf(set) => {
                if let V::String(s) = v {
                    if !set.contains(&s.as_str()) {
                        return Err(Error::config(kd.path, format!("{s:?} is not one of {}", set.join(" | "))));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn check_unknown_keys(v: &toml::Value, prefix: &str) -> std::result::Result<(), String> {
    if let toml::Value::Table(t) = v {
        for (key, sub) in t {
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            let is_table = KEYS.iter().any(|kd| kd.path.starts_with(&format!("{path}.")));
            if is_table {
                check_unknown_keys(sub, &path)?;
            } else if !KEYS.iter().any(|kd| kd.path == path) {
                return Err(path);
            }
        }
    }
    Ok(())
}
