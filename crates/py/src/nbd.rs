//! `ssdlab serve` and `ssdlab stats`: the NBD server behind the Python CLI.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde::Deserialize;

use crate::convert::{config_from_py, from_py, to_py};

use ssdlab_nbd::{default_exports, Backend, BackendOptions, Export, Latency, NbdOptions, Server};
use ssdlab_server::ListenOptions;

use crate::serving::ListenArgs;

#[derive(Deserialize)]
struct Opts {
    #[serde(flatten)]
    listen: ListenArgs,
    image: Option<std::path::PathBuf>,
    latency: Latency,
    exports: Option<Vec<Export>>,
    per_handle: bool,
    max_request: u32,
    metrics_out: Option<std::path::PathBuf>,
    snapshot_every: u64,
    quiet: bool,
}

/// Serve the device of `config` (a config dict) over NBD until SIGINT/SIGTERM; returns the
/// final metrics. `options` holds the CLI options (see python/ssdlab/nbd.py).
#[pyfunction]
fn nbd_serve<'py>(py: Python<'py>, config: &Bound<'py, PyAny>, options: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let cfg = config_from_py(config, "serve")?;
    let o: Opts = from_py(options, "serve options")?;
    if o.latency == Latency::Emulated && !cfg.timing.enabled {
        return Err(PyValueError::new_err("--latency emulated needs a device with timing (timing.enabled = true)"));
    }
    let listen = o.listen.over(ListenOptions::on(ssdlab_nbd::server::DEFAULT_LISTEN, 16))?;
    py.detach(move || {
        let backend =
            Backend::open(cfg.clone(), &BackendOptions { image: o.image.clone(), snapshot_every: o.snapshot_every, zoned: false })
                .map_err(|e| PyOSError::new_err(e.0))?;
        let exports = match o.exports {
            Some(e) if !e.is_empty() => e,
            _ => default_exports(backend.config(), backend.logical_bytes(), o.per_handle),
        };
        let opts = NbdOptions {
            listen,
            exports,
            latency: o.latency,
            max_request: o.max_request,
            metrics_out: o.metrics_out,
            quiet: o.quiet,
            name: "ssdlab serve".into(),
        };
        let srv = Server::new(backend, opts).map_err(|e| PyValueError::new_err(e.to_string()))?;
        ssdlab_nbd::serve(srv, None).map_err(|e| PyOSError::new_err(e.to_string()))
    })
    .and_then(|m| to_py(py, &m))
}

/// The live metrics of the server at `addr` (HOST:PORT); `tls_ca` = the CA's PEM file for a
/// TLS server.
#[pyfunction]
#[pyo3(signature = (addr, tls_ca=None))]
fn nbd_stats<'py>(py: Python<'py>, addr: &str, tls_ca: Option<std::path::PathBuf>) -> PyResult<Bound<'py, PyAny>> {
    let text =
        py.detach(|| ssdlab_nbd::client::fetch_metrics(addr, tls_ca.as_deref()).map_err(|e| PyOSError::new_err(format!("{addr}: {e}"))))?;
    let m: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| PyOSError::new_err(format!("{addr}: the server's metrics are not JSON: {e}")))?;
    to_py(py, &m)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nbd_serve, m)?)?;
    m.add_function(wrap_pyfunction!(nbd_stats, m)?)?;
    Ok(())
}
