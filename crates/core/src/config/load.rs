//! Loading a config: a TOML text or a value tree merged over its preset, each key checked
//! against the key table, then the relations between keys.

use super::keys::{lookup, range_text, KEYS};
use super::validate::{check_tree, check_unknown_keys};
use super::{apply_stop_rule, presets, Config};
use crate::error::{ConfigError, Error, Result};

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
        let mut tree = base.to_tree().expect("config serialises");
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
        let tree = self.to_tree().expect("config serialises");
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
