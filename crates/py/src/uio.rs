//! uio-kv: the reproduction's latency measurements on the UIO and traditional data paths.
//! Python side: python/ssdlab/uio.py.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use ssdlab_uio::device::{DeviceOptions, HostDevice};
use ssdlab_uio::repro::{device_config, LatencyPlan, DEVICES};
use ssdlab_uio::{UtlConfig, UtlError};

use crate::convert::{from_py, to_py};
use crate::errors::{ConfigError, DeviceError};
use crate::lsm::RespOpts;

fn uio_err(e: UtlError) -> PyErr {
    match e {
        UtlError::Config(m) => ConfigError::new_err(m),
        e => DeviceError::new_err(e.to_string()),
    }
}

/// The defaults of a latency plan (every key).
#[pyfunction]
fn uio_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &LatencyPlan::default())
}

/// Check a plan (a dict of `uio_defaults` keys); returns it complete.
#[pyfunction]
fn uio_resolve<'py>(py: Python<'py>, plan: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let p: LatencyPlan = from_py(plan, "uio plan")?;
    p.validate().map_err(uio_err)?;
    to_py(py, &p)
}

/// Run a plan: latency against value size on both paths, a and b fitted, the mixed runs.
/// `progress`: a line on stderr per finished part.
#[pyfunction]
#[pyo3(signature = (plan, progress=false))]
fn uio_latency<'py>(py: Python<'py>, plan: &Bound<'py, PyAny>, progress: bool) -> PyResult<Bound<'py, PyAny>> {
    let p: LatencyPlan = from_py(plan, "uio plan")?;
    let r = py.detach(|| {
        p.run(&mut |line| {
            if progress {
                eprintln!("uio-kv: {line}");
            }
        })
    });
    to_py(py, &r.map_err(uio_err)?)
}

/// Run device `id` of a UIO system until SIGINT/SIGTERM: NET on `net[id]` (every device's
/// address, by id), hosts attaching on `socket`, its UTL on a fresh `device` flash (`quick` or
/// `paper`; NAND timing off unless `timing`). Prints its NET address and socket when ready.
/// Returns its counters.
#[pyfunction]
#[pyo3(signature = (id, net, socket, device="quick", timing=false, quiet=false))]
fn uio_device_serve<'py>(
    py: Python<'py>,
    id: u16,
    net: Vec<String>,
    socket: PathBuf,
    device: &str,
    timing: bool,
    quiet: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let net = net
        .iter()
        .map(|a| a.parse::<SocketAddr>().map_err(|_| PyValueError::new_err(format!("--net: {a:?} is not HOST:PORT"))))
        .collect::<PyResult<Vec<_>>>()?;
    if id as usize >= net.len() {
        return Err(PyValueError::new_err(format!(
            "--id {id}: --net names {} devices (ids 0 to {})",
            net.len(),
            net.len().saturating_sub(1)
        )));
    }
    let mut cfg = device_config(device)
        .ok_or_else(|| ConfigError::new_err(format!("--device {device:?}: expected one of {}", DEVICES.join(", "))))?;
    cfg.timing.enabled = timing;
    let opts = DeviceOptions { id, net, socket, burst: 16, peer_timeout: Duration::from_secs(2) };
    let stats = py
        .detach(|| {
            ssdlab_uio::device::run_until_signal(&opts, &cfg, UtlConfig::default(), |addr, sock| {
                use std::io::Write;
                if !quiet {
                    println!("uio device {id}: NET on {addr}, hosts attach at {}", sock.display());
                }
                let _ = std::io::stdout().flush();
            })
        })
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    to_py(py, &stats)
}

/// Attach to the device process at `attach` as its host and serve RESP clients (SET, GET, ...)
/// through it until SIGINT/SIGTERM (`options`: `ssdlab.serving.resp_options`). Returns the
/// final figures.
#[pyfunction]
fn uio_kv_serve<'py>(py: Python<'py>, attach: PathBuf, options: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let o: RespOpts = from_py(options, "uio kv-serve options")?;
    let dev = HostDevice::attach(Path::new(&attach), Duration::from_secs(10))
        .map_err(|e| PyOSError::new_err(format!("attaching to the device: {e}")))?;
    let m = py.detach(move || o.serve("ssdlab uio kv-serve", Box::new(ssdlab_uio::serve::UioBackend::new(dev))))?;
    to_py(py, &m)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(uio_device_serve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_kv_serve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(uio_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_latency, m)?)?;
    Ok(())
}
