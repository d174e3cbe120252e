//! Configs for Python: validate a TOML text or a dict, show presets and keys, the workload
//! defaults. Configs cross as dicts; the core fills and checks them (the one source of
//! defaults, ranges and error messages).

use pyo3::prelude::*;

use ssdlab_core::config::{self, Config, WorkloadConfig};
use ssdlab_core::media::presets;
use ssdlab_core::workload::trace::TraceFormat;

use crate::convert::{config_from_py, to_py};
use crate::errors::{core_err, ConfigError};

/// Validate a TOML config text; returns the complete config as a dict. `origin` names the
/// file in errors (with the line of the key at fault).
#[pyfunction]
#[pyo3(signature = (text, origin="<config>"))]
fn config_from_toml<'py>(py: Python<'py>, text: &str, origin: &str) -> PyResult<Bound<'py, PyAny>> {
    let c = Config::from_toml_str(text, origin).map_err(core_err)?;
    to_py(py, &c)
}

/// Validate a config given as a dict (a preset plus overrides); returns the complete config.
#[pyfunction]
#[pyo3(signature = (config, origin="<config>"))]
fn config_resolve<'py>(py: Python<'py>, config: &Bound<'py, PyAny>, origin: &str) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, &config_from_py(config, origin)?)
}

/// Check a config (a dict) exactly as building the device would and size it: capacities, the
/// FTL's reserve, the memory estimate, and the memory available on this machine.
#[pyfunction]
fn config_sizing<'py>(py: Python<'py>, config: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let cfg = config_from_py(config, "<config>")?;
    let s = ssdlab_core::sizing::sizing(&cfg).map_err(core_err)?;
    let mut v = serde_json::to_value(&s).expect("sizing serialises");
    v["available_memory_bytes"] = serde_json::json!(ssdlab_core::sizing::available_memory_bytes());
    to_py(py, &v)
}

/// The memory ssdlab takes as available to new allocations (bytes) and where that figure comes
/// from (MemAvailable, the cgroup's limit, SSDLAB_MEMORY_AVAILABLE); None when unknown.
#[pyfunction]
fn available_memory() -> Option<(u64, &'static str)> {
    ssdlab_core::sizing::available_memory()
}

/// A complete, commented TOML config for a preset.
#[pyfunction]
fn config_show(preset: &str) -> PyResult<String> {
    let c = presets::preset(preset)
        .ok_or_else(|| ConfigError::new_err(format!("unknown preset {preset:?}; valid: {}", presets::NAMES.join(", "))))?;
    Ok(c.to_commented_toml())
}

/// The Markdown table of every config key (docs/CONFIG.md).
#[pyfunction]
fn config_markdown() -> String {
    config::config_markdown()
}

/// Names of the device presets.
#[pyfunction]
fn preset_names() -> Vec<&'static str> {
    presets::NAMES.to_vec()
}

/// Trace formats the replayer reads.
#[pyfunction]
fn trace_formats() -> Vec<&'static str> {
    TraceFormat::NAMES.to_vec()
}

/// The core's `[workload]` defaults, the values of every key a Workload leaves unset.
#[pyfunction]
fn workload_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &WorkloadConfig::default())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(config_from_toml, m)?)?;
    m.add_function(wrap_pyfunction!(config_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(config_show, m)?)?;
    m.add_function(wrap_pyfunction!(config_sizing, m)?)?;
    m.add_function(wrap_pyfunction!(available_memory, m)?)?;
    m.add_function(wrap_pyfunction!(config_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(preset_names, m)?)?;
    m.add_function(wrap_pyfunction!(trace_formats, m)?)?;
    m.add_function(wrap_pyfunction!(workload_defaults, m)?)?;
    Ok(())
}
