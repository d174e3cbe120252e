//! dpuswap: runs of the RMML and its baselines under the paging runtime, and the remote
//! memory node service (`ssdlab rmml node`). Python side: python/ssdlab/dpuswap.py.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde_json::json;

use ssdlab_rmml::experiment::RunSpec;
use ssdlab_rmml::Error;

use crate::convert::{config_from_py, from_py, to_py};
use crate::errors::{ConfigError, DeviceError};
use crate::progress::Watch;

fn rmml_err(e: Error) -> PyErr {
    match e {
        Error::Config(m) => ConfigError::new_err(m),
        Error::Request(m) => PyValueError::new_err(m),
        Error::Device(e) => crate::errors::core_err(e),
        e @ (Error::Node { .. } | Error::Io(_)) => PyOSError::new_err(e.to_string()),
        e => DeviceError::new_err(e.to_string()),
    }
}

/// Run one spec (see `ssdlab.dpuswap.run`); the ZNSwap-like baseline's `znswap.device` is a
/// device config dict (preset + tables) completed like any other. Returns the run's summary.
#[pyfunction]
#[pyo3(signature = (spec, progress=false))]
fn rmml_run<'py>(py: Python<'py>, spec: &Bound<'py, PyAny>, progress: bool) -> PyResult<Bound<'py, PyAny>> {
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
    let mut watch = Watch::new(progress);
    let label = format!("{} {:.0}%", s.backend, s.local_fraction * 100.0);
    let res = py.detach(|| ssdlab_rmml::experiment::run(&s, &mut |f| watch.tick(&label, f)));
    watch.done();
    let v = res.map_err(rmml_err)?;
    to_py(py, &v)
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
/// prints the bound address first (a port of 0 picks a free one). Returns the final stat.
#[pyfunction]
#[pyo3(signature = (listen, capacity_bytes, quiet=false))]
fn rmml_node_serve<'py>(py: Python<'py>, listen: &str, capacity_bytes: u64, quiet: bool) -> PyResult<Bound<'py, PyAny>> {
    if capacity_bytes == 0 {
        return Err(PyValueError::new_err("--capacity: expected a positive size"));
    }
    let st = py
        .detach(|| {
            ssdlab_rmml::node::server::serve_until_signal(listen, capacity_bytes, |a| {
                use std::io::Write;
                if !quiet {
                    println!("rmml node listening on {a} ({capacity_bytes} bytes to lend)");
                } else {
                    println!("{a}");
                }
                let _ = std::io::stdout().flush();
            })
        })
        .map_err(|e| PyOSError::new_err(format!("{listen}: {e}")))?;
    to_py(py, &st)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rmml_run, m)?)?;
    m.add_function(wrap_pyfunction!(rmml_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(rmml_node_serve, m)?)?;
    Ok(())
}
