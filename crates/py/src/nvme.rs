//! `ssdlab nvme serve`: the NVMe/TCP target behind the Python CLI.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use serde::Deserialize;

use crate::convert::{config_from_py, from_py, to_py};

use ssdlab_nbd::BackendOptions;
use ssdlab_nvmet::{Latency, NvmetOptions};

use crate::serving::ListenArgs;

#[derive(Deserialize)]
struct Opts {
    #[serde(flatten)]
    listen: ListenArgs,
    image: Option<std::path::PathBuf>,
    latency: Latency,
    nqn: String,
    metrics_out: Option<std::path::PathBuf>,
    snapshot_every: u64,
    quiet: bool,
}

/// Serve the device of `config` as an NVMe/TCP subsystem until SIGINT/SIGTERM; returns the
/// final metrics. `options`: see python/ssdlab/nvme.py.
#[pyfunction]
fn nvme_serve<'py>(py: Python<'py>, config: &Bound<'py, PyAny>, options: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let cfg = config_from_py(config, "nvme serve")?;
    let o: Opts = from_py(options, "nvme serve options")?;
    if o.latency == Latency::Emulated && !cfg.timing.enabled {
        return Err(PyValueError::new_err("--latency emulated needs a device with timing (timing.enabled = true)"));
    }
    use ssdlab_nvmet::server::{DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS};
    let listen = o.listen.over(ssdlab_server::ListenOptions::on(DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS))?;
    py.detach(move || {
        let opts = NvmetOptions {
            listen,
            latency: o.latency,
            metrics_out: o.metrics_out,
            quiet: o.quiet,
            nqn: o.nqn,
            name: "ssdlab nvme serve".into(),
        };
        let t = ssdlab_nvmet::open(cfg, &BackendOptions { image: o.image, snapshot_every: o.snapshot_every, zoned: true }, opts)
            .map_err(PyOSError::new_err)?;
        ssdlab_nvmet::serve(t, None).map_err(|e| PyOSError::new_err(e.to_string()))
    })
    .and_then(|m| to_py(py, &m))
}

/// The live metrics of the target at `addr` (HOST:PORT), read as an NVMe host would, from the
/// controller's vendor log page C0h.
#[pyfunction]
#[pyo3(signature = (addr, nqn=ssdlab_nvmet::DEFAULT_NQN))]
fn nvme_stats<'py>(py: Python<'py>, addr: &str, nqn: &str) -> PyResult<Bound<'py, PyAny>> {
    let text = py.detach(|| ssdlab_nvmet::client::fetch_metrics(addr, nqn).map_err(|e| PyOSError::new_err(format!("{addr}: {e}"))))?;
    let m: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| PyOSError::new_err(format!("{addr}: the target's metrics are not JSON: {e}")))?;
    to_py(py, &m)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nvme_serve, m)?)?;
    m.add_function(wrap_pyfunction!(nvme_stats, m)?)?;
    Ok(())
}
