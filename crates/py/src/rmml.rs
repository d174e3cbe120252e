//! dpuswap: runs of the RMML and its baselines under the paging runtime, and the remote
//! memory node service (`ssdlab rmml node`). Python side: python/ssdlab/studies/dpuswap/.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde_json::json;

use ssdlab_rmml::experiment::RunSpec;
use ssdlab_rmml::Error;

use crate::convert::{config_from_py, from_py, to_py};
use crate::errors::{ConfigError, DeviceError};
use crate::progress::Watch;
use crate::serving::ListenArgs;
use ssdlab_server::{never_if_zero, ListenOptions};

fn rmml_err(e: Error) -> PyErr {
    match e {
        Error::Config(m) => ConfigError::new_err(m),
        Error::Request(m) => PyValueError::new_err(m),
        Error::Device(e) => crate::errors::core_err(e),
        e @ (Error::Node { .. } | Error::Io(_)) => PyOSError::new_err(e.to_string()),
        e => DeviceError::new_err(e.to_string()),
    }
}

/// A spec dict as a RunSpec; the ZNSwap-like baseline's `znswap.device` is a device config
/// dict (preset + tables) completed like any other.
fn spec_from_py(py: Python<'_>, spec: &Bound<'_, PyAny>) -> PyResult<RunSpec> {
    let dict = spec.cast::<pyo3::types::PyDict>().map_err(|_| ConfigError::new_err("dpuswap spec: expected a dict"))?.copy()?;
    let mut device = None;
    if let Some(z) = dict.get_item("znswap")? {
        let z = z.cast::<pyo3::types::PyDict>().map_err(|_| ConfigError::new_err("znswap: expected a table"))?.copy()?;
        if let Some(d) = z.get_item("device")? {
            let cfg = config_from_py(&d, "znswap.device")?;
            z.set_item("device", to_py(py, &cfg)?)?;
            device = Some(cfg);
        }
        dict.set_item("znswap", z)?;
    }
    let mut s: RunSpec = from_py(dict.as_any(), "dpuswap spec")?;
    if let (Some(z), Some(d)) = (s.znswap.as_mut(), device) {
        z.device = d;
    }
    Ok(s)
}

/// Run one spec (see `ssdlab.studies.dpuswap.api.run`). Returns the run's summary.
#[pyfunction]
#[pyo3(signature = (spec, progress=false))]
fn rmml_run<'py>(py: Python<'py>, spec: &Bound<'py, PyAny>, progress: bool) -> PyResult<Bound<'py, PyAny>> {
    let s = spec_from_py(py, spec)?;
    let mut watch = Watch::new(progress);
    let label = format!("{} {:.0}%", s.backend, s.local_fraction * 100.0);
    let res = py.detach(|| ssdlab_rmml::experiment::run(&s, &mut |f| watch.tick(&label, f)));
    watch.done();
    let v = res.map_err(rmml_err)?;
    to_py(py, &v)
}

#[derive(serde::Deserialize)]
struct ServeOpts {
    #[serde(flatten)]
    listen: ListenArgs,
    latency: ssdlab_nbd::Latency,
    max_request: u32,
    metrics_out: Option<std::path::PathBuf>,
    quiet: bool,
}

/// Serve the swap backend of `spec` (its `backend`, `rmml`/`infiniswap`/`znswap` tables and
/// `nodes`; a workload is ignored) with `size_bytes` of room as the NBD export named after
/// the backend, until SIGINT/SIGTERM. Returns the final metrics.
#[pyfunction]
fn rmml_serve<'py>(py: Python<'py>, spec: &Bound<'py, PyAny>, size_bytes: u64, options: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let s = spec_from_py(py, spec)?;
    let o: ServeOpts = from_py(options, "rmml serve options")?;
    if s.backend == "local" {
        return Err(ConfigError::new_err("backend = \"local\" has no swap space to export; use dpuswap, infiniswap or znswap"));
    }
    if size_bytes < ssdlab_rmml::PAGE_BYTES {
        return Err(PyValueError::new_err("--size: expected at least one 4 KiB page"));
    }
    let listen = o.listen.over(ListenOptions::on(ssdlab_nbd::server::DEFAULT_LISTEN, 16))?;
    let m = py.detach(|| -> PyResult<serde_json::Value> {
        let dev = ssdlab_rmml::experiment::backend(&s, size_bytes).map_err(rmml_err)?;
        let disk = ssdlab_serve::SwapDisk::new(dev);
        let size = ssdlab_nbd::Disk::logical_bytes(&disk);
        let kind = disk.kind();
        let export = ssdlab_nbd::Export {
            name: kind.into(),
            offset: 0,
            size,
            placement: None,
            read_only: false,
            description: format!("ssdlab {kind} swap backend ({size} bytes)"),
        };
        let opts = ssdlab_nbd::NbdOptions {
            listen,
            latency: o.latency,
            max_request: o.max_request,
            metrics_out: o.metrics_out,
            quiet: o.quiet,
            name: "ssdlab rmml serve".into(),
            ..ssdlab_nbd::NbdOptions::new(vec![export])
        };
        let srv = ssdlab_nbd::Server::new(disk, opts).map_err(|e| PyValueError::new_err(e.to_string()))?;
        ssdlab_nbd::serve(srv, None).map_err(|e| PyOSError::new_err(e.to_string()))
    })?;
    to_py(py, &m)
}

/// The defaults of every table of a spec.
#[pyfunction]
fn rmml_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(
        py,
        &json!({
            "rmml": ssdlab_rmml::RmmlConfig::default(),
            "paging": ssdlab_rmml::paging::PagingConfig::default(),
            "infiniswap": ssdlab_rmml::infiniswap::InfiniswapConfig::default(),
            "kv": ssdlab_rmml::workload::KvConfig::default(),
            "sort": ssdlab_rmml::workload::SortConfig::default(),
            "fio": ssdlab_rmml::workload::FioConfig::default(),
        }),
    )
}

/// Serve a remote memory node on `listen` lending `capacity_bytes` until SIGINT/SIGTERM;
/// prints the bound address first (a port of 0 picks a free one). At most `max_connections`
/// clients; when full, one idle `evict_idle_after_s` seconds gives its slot to a newcomer (0:
/// never); `idle_timeout_s` (0: never) cuts idle connections. Returns the final stat.
#[pyfunction]
#[pyo3(signature = (listen, capacity_bytes, quiet=false, allow_remote=false, max_connections=64, idle_timeout_s=0.0, evict_idle_after_s=1.0))]
#[allow(clippy::too_many_arguments)]
fn rmml_node_serve<'py>(
    py: Python<'py>,
    listen: &str,
    capacity_bytes: u64,
    quiet: bool,
    allow_remote: bool,
    max_connections: usize,
    idle_timeout_s: f64,
    evict_idle_after_s: f64,
) -> PyResult<Bound<'py, PyAny>> {
    if capacity_bytes == 0 {
        return Err(PyValueError::new_err("--capacity: expected a positive size"));
    }
    let secs = |flag: &str, s: f64| never_if_zero(flag, s).map_err(|e| PyValueError::new_err(e.to_string()));
    let opts = ssdlab_serve::rmml::node::NodeOptions {
        listen: ListenOptions {
            address: listen.to_string(),
            allow_remote,
            max_connections,
            idle_timeout: secs("--idle-timeout", idle_timeout_s)?,
            evict_idle_after: secs("--evict-idle-after", evict_idle_after_s)?,
            ..ssdlab_serve::rmml::node::NodeOptions::default().listen
        },
        capacity_bytes,
        quiet,
    };
    let st = py
        .detach(|| {
            ssdlab_serve::rmml::node::serve_until_signal(&opts, |a| {
                use std::io::Write;
                if !quiet {
                    println!("rmml node listening on {a} ({capacity_bytes} bytes to lend)");
                } else {
                    println!("{a}");
                }
                let _ = std::io::stdout().flush();
            })
        })
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    to_py(py, &st)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rmml_run, m)?)?;
    m.add_function(wrap_pyfunction!(rmml_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(rmml_node_serve, m)?)?;
    m.add_function(wrap_pyfunction!(rmml_serve, m)?)?;
    Ok(())
}
