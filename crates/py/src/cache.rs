//! `ssdlab._native` functions of the fdp-cache case study (crate ssdlab-cache): measured cache
//! runs, workload presets, trace conversion, Theorem 1, and `ssdlab cache serve` (crate
//! ssdlab-memcached). Specs and results cross as dicts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde::Deserialize;

use ssdlab_cache::trace::{self, TraceReader};
use ssdlab_cache::{model, workload, CacheConfig, CacheError, Checkpointing, HybridCache, RunSpec};
use ssdlab_core::config::StorageMode;
use ssdlab_core::Device;

use crate::convert::{config_from_py, from_py, to_py};
use crate::errors::{core_err, ConfigError, TraceError};
use crate::progress::Watch;
use crate::serving::{deny_unknown, ListenArgs};

fn cache_err(e: CacheError) -> PyErr {
    match e {
        CacheError::Config(m) => ConfigError::new_err(m),
        e @ CacheError::Trace { .. } => TraceError::new_err(e.to_string()),
        CacheError::Input(m) => PyValueError::new_err(m),
        CacheError::Device(d) => core_err(d),
        CacheError::Io(io) => PyOSError::new_err(io.to_string()),
    }
}

/// Run the cache described by `spec` (a RunSpec) on the device `device` (a config dict,
/// preset plus overrides), with the spec's workload or the ssdlab cache-trace CSV `trace`;
/// `progress`, if given, is called with the fraction done (0..1) as the run advances, at most
/// once per thousandth. With `checkpoint` (a file; not with `trace`), the run saves its whole
/// state there every `checkpoint_every_s` seconds of wall time and starts from the file when it
/// is there (a killed run goes on from its latest save, with the same results; the file goes
/// when the run ends). Returns (summary, time-series CSV, wall seconds, interrupted, what was
/// done with the checkpoint: "" if nothing).
#[pyfunction]
#[pyo3(signature = (device, spec, trace=None, progress=None, checkpoint=None, checkpoint_every_s=1800.0))]
fn cache_run<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    spec: &Bound<'py, PyAny>,
    trace: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    checkpoint: Option<PathBuf>,
    checkpoint_every_s: f64,
) -> PyResult<(Bound<'py, PyAny>, String, f64, bool, String)> {
    let dev = config_from_py(device, "<device>")?;
    let spec: RunSpec = from_py(spec, "cache run spec")?;
    if !(checkpoint_every_s >= 0.0 && checkpoint_every_s.is_finite()) {
        return Err(PyValueError::new_err(format!("checkpoint_every_s must be >= 0, got {checkpoint_every_s}")));
    }
    let mut watch = Watch::fractions(false, progress);
    let r = if let Some(path) = checkpoint {
        if trace.is_some() {
            return Err(ConfigError::new_err("a checkpointed cache run needs the request generator, not a trace"));
        }
        let ck = Checkpointing { path, every: Duration::from_secs_f64(checkpoint_every_s) };
        py.detach(|| ssdlab_cache::run_checkpointed(dev, &spec, &ck, &mut |f| watch.tick("", f)))
    } else {
        let mut reader = match trace {
            Some(p) => Some(TraceReader::open(&p).map_err(cache_err)?),
            None => None,
        };
        py.detach(|| {
            ssdlab_cache::run(dev, &spec, reader.as_mut().map(|r| r as &mut dyn ssdlab_cache::run::RequestSource), &mut |f| {
                watch.tick("", f)
            })
        })
    };
    let r = r.map_err(cache_err)?;
    Ok((to_py(py, &r.summary)?, r.series_csv, r.wall_seconds, r.interrupted, r.checkpoint))
}

/// Check a cache run (`device` config dict, `spec` RunSpec) as running it would, and estimate
/// its peak memory by part (device, DRAM tier, SOC index, LOC index); raises ConfigError.
#[pyfunction]
fn cache_sizing<'py>(py: Python<'py>, device: &Bound<'py, PyAny>, spec: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let dev = config_from_py(device, "<device>")?;
    let spec: RunSpec = from_py(spec, "cache run spec")?;
    let s = ssdlab_cache::sizing::sizing(&dev, &spec).map_err(cache_err)?;
    to_py(py, &s)
}

/// The default RunSpec (cache, workload, stop, carbon parameters).
#[pyfunction]
fn cache_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &RunSpec::default())
}

/// A cache workload preset.
#[pyfunction]
fn cache_workload<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let w = workload::preset(name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown cache workload {name:?}; presets: {}", workload::PRESETS.join(", "))))?;
    to_py(py, &w)
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
struct ServeOpts {
    #[serde(flatten)]
    listen: ListenArgs,
    /// 0: the default (1 MiB, or what a LOC region holds).
    max_value_bytes: u64,
    quiet: bool,
    /// Keys no field took: refused (a typo would otherwise be ignored).
    #[serde(flatten)]
    unknown: BTreeMap<String, serde_json::Value>,
}

/// `ssdlab cache serve`: the cache `cache` (a CacheConfig dict), data-backed on the device
/// `device` (a config dict, switched to storage = "data"), behind the memcached text protocol
/// until SIGINT/SIGTERM. Returns the final stats.
#[pyfunction]
fn cache_serve<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    cache: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut dev = config_from_py(device, "[device]")?;
    dev.storage = StorageMode::Data;
    let cfg: CacheConfig = from_py(cache, "[cache]")?;
    let o: ServeOpts = from_py::<ServeOpts>(options, "cache serve options").map_err(|e| PyValueError::new_err(e.to_string()))?;
    deny_unknown("cache serve options", &o.unknown).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let defaults = ssdlab_memcached::MemcachedOptions::default();
    let listen = o.listen.over(defaults.listen.clone())?;
    let m = py.detach(move || {
        let dev = Device::new(dev).map_err(core_err)?;
        let cache = HybridCache::data_backed(dev, cfg).map_err(cache_err)?;
        let opts = ssdlab_memcached::MemcachedOptions { listen, max_value_bytes: o.max_value_bytes, quiet: o.quiet, ..defaults };
        let srv = ssdlab_memcached::Server::new(cache, opts).map_err(|e| ConfigError::new_err(e.to_string()))?;
        ssdlab_memcached::serve(srv).map_err(|e| PyOSError::new_err(e.to_string()))
    })?;
    to_py(py, &m)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cache_serve, m)?)?;
    m.add_function(wrap_pyfunction!(cache_run, m)?)?;
    m.add_function(wrap_pyfunction!(cache_sizing, m)?)?;
    m.add_function(wrap_pyfunction!(cache_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(cache_workload, m)?)?;
    m.add_function(wrap_pyfunction!(cache_workloads, m)?)?;
    m.add_function(wrap_pyfunction!(cache_convert_trace, m)?)?;
    m.add_function(wrap_pyfunction!(cache_theorem1, m)?)?;
    Ok(())
}
