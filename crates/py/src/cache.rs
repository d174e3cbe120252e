//! `ssdlab._native` functions of the fdp-cache case study (crate ssdlab-cache): measured cache
//! runs, workload presets, trace conversion, Theorem 1, and `ssdlab cache serve` (crate
//! ssdlab-memcached). Specs cross as JSON.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde::Deserialize;

use ssdlab_cache::trace::{self, TraceReader};
use ssdlab_cache::{model, workload, CacheConfig, CacheError, HybridCache, RunSpec};
use ssdlab_core::config::StorageMode;
use ssdlab_core::Device;

use crate::{config_from_json, to_py, ConfigError, TraceError};

fn cache_err(e: CacheError) -> PyErr {
    match e {
        CacheError::Config(m) => ConfigError::new_err(m),
        e @ CacheError::Trace { .. } => TraceError::new_err(e.to_string()),
        CacheError::Input(m) => PyValueError::new_err(m),
        CacheError::Device(d) => to_py(d),
        CacheError::Io(io) => PyOSError::new_err(io.to_string()),
    }
}

/// Run the cache described by `spec_json` (a RunSpec) on the device `device_json` (a config,
/// preset plus overrides), with the spec's workload or the ssdlab cache-trace CSV `trace`.
/// Returns (summary JSON, time-series CSV, wall seconds, interrupted).
#[pyfunction]
#[pyo3(signature = (device_json, spec_json, trace=None))]
fn cache_run(py: Python<'_>, device_json: &str, spec_json: &str, trace: Option<PathBuf>) -> PyResult<(String, String, f64, bool)> {
    let dev = config_from_json(device_json, "<device>")?;
    let spec: RunSpec = serde_json::from_str(spec_json).map_err(|e| ConfigError::new_err(format!("cache run spec: {e}")))?;
    let mut reader = match trace {
        Some(p) => Some(TraceReader::open(&p).map_err(cache_err)?),
        None => None,
    };
    let r = py.allow_threads(|| {
        let mut stop = |_: f64| Python::with_gil(|py| py.check_signals()).is_ok();
        ssdlab_cache::run(dev, &spec, reader.as_mut().map(|r| r as &mut dyn ssdlab_cache::run::RequestSource), &mut stop)
    });
    let r = r.map_err(cache_err)?;
    Ok((serde_json::to_string(&r.summary).unwrap(), r.series_csv, r.wall_seconds, r.interrupted))
}

/// The default RunSpec (cache, workload, stop, carbon parameters) as JSON.
#[pyfunction]
fn cache_defaults() -> String {
    serde_json::to_string(&RunSpec::default()).unwrap()
}

/// A workload preset as JSON.
#[pyfunction]
fn cache_workload(name: &str) -> PyResult<String> {
    let w = workload::preset(name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown cache workload {name:?}; presets: {}", workload::PRESETS.join(", "))))?;
    Ok(serde_json::to_string(&w).unwrap())
}

#[pyfunction]
fn cache_workloads() -> Vec<&'static str> {
    workload::PRESETS.to_vec()
}

/// Convert a `cachelib-kvcache` or `twitter` trace to the ssdlab cache-trace CSV; returns
/// (lines, requests, skipped).
#[pyfunction]
fn cache_convert_trace(src: PathBuf, format: &str, dst: PathBuf) -> PyResult<(u64, u64, u64)> {
    let s = trace::convert(&src, format, &dst).map_err(cache_err)?;
    Ok((s.lines, s.requests, s.skipped))
}

/// Theorem 1: SOC DLWA for an SOC of `soc_bytes` with `soc_physical_bytes` of flash (None if
/// the SOC has no spare room).
#[pyfunction]
fn cache_theorem1(soc_bytes: f64, soc_physical_bytes: f64) -> Option<f64> {
    model::theorem1_dlwa(soc_bytes, soc_physical_bytes)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeOpts {
    listen: String,
    max_connections: usize,
    /// 0: the default (1 MiB, or what a LOC region holds).
    max_value_bytes: u64,
    quiet: bool,
}

/// `ssdlab cache serve`: the cache `cache_json` (a CacheConfig), data-backed on the device
/// `device_json` (switched to storage = "data"), behind the memcached text protocol until
/// SIGINT/SIGTERM. Returns the final stats as JSON.
#[pyfunction]
fn cache_serve(py: Python<'_>, device_json: &str, cache_json: &str, options_json: &str) -> PyResult<String> {
    let mut dev = config_from_json(device_json, "[device]")?;
    dev.storage = StorageMode::Data;
    let cfg: CacheConfig = serde_json::from_str(cache_json).map_err(|e| {
        // The table crossed as JSON: its line and column would point nowhere in the user's file.
        let m = e.to_string();
        ConfigError::new_err(format!("[cache]: {}", m.rsplit_once(" at line ").map_or(m.as_str(), |(a, _)| a)))
    })?;
    let o: ServeOpts = serde_json::from_str(options_json).map_err(|e| PyValueError::new_err(format!("cache serve options: {e}")))?;
    py.allow_threads(move || {
        let dev = Device::new(dev).map_err(to_py)?;
        let cache = HybridCache::data_backed(dev, cfg).map_err(cache_err)?;
        let opts = ssdlab_memcached::ServeOptions {
            listen: o.listen,
            max_connections: o.max_connections,
            max_value_bytes: o.max_value_bytes,
            quiet: o.quiet,
            ..Default::default()
        };
        let srv = ssdlab_memcached::Server::new(cache, opts).map_err(ConfigError::new_err)?;
        let m = ssdlab_memcached::serve(srv).map_err(PyOSError::new_err)?;
        Ok(serde_json::to_string(&m).unwrap_or_default())
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cache_serve, m)?)?;
    m.add_function(wrap_pyfunction!(cache_run, m)?)?;
    m.add_function(wrap_pyfunction!(cache_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(cache_workload, m)?)?;
    m.add_function(wrap_pyfunction!(cache_workloads, m)?)?;
    m.add_function(wrap_pyfunction!(cache_convert_trace, m)?)?;
    m.add_function(wrap_pyfunction!(cache_theorem1, m)?)?;
    Ok(())
}
