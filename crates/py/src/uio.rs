//! uio-kv: the reproduction's latency measurements on the UIO and traditional data paths.
//! Python side: python/ssdlab/studies/uio_kv/.

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
/// `paper`, NAND timing off; `relay`: the traditional path's device, relaying peers' requests to
/// its host's daemon at that address; `data`: keep the flash in `data/flash.img` and recover it
/// at start; `nand_timing`: the flash's time in each command's simulated latency). Prints its NET
/// address and socket when ready. Returns its counters.
#[pyfunction]
#[pyo3(signature = (id, net, socket, device="quick", quiet=false, relay=None, allow_remote=false, data=None, nand_timing=false))]
#[allow(clippy::too_many_arguments)] // the CLI's options, one by one as Python passes them
fn uio_device_serve<'py>(
    py: Python<'py>,
    id: u16,
    net: Vec<String>,
    socket: PathBuf,
    device: &str,
    quiet: bool,
    relay: Option<String>,
    allow_remote: bool,
    data: Option<PathBuf>,
    nand_timing: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let relay = relay
        .map(|a| a.parse::<SocketAddr>().map_err(|_| PyValueError::new_err(format!("--relay: {a:?} is not HOST:PORT"))))
        .transpose()?;
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
    // Device processes run in wall-clock time; beside it each accounts every command's
    // simulated time (the hardware links' legs, and its flash's time with NAND timing on).
    cfg.timing.enabled = nand_timing;
    let opts = DeviceOptions {
        id,
        net,
        socket,
        burst: 16,
        peer_timeout: Duration::from_secs(2),
        relay,
        allow_remote,
        data,
        links: ssdlab_uio::Links::default(),
    };
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

/// A traditional host's daemon (see `ssdlab_uio::device::host_daemon_until_signal`) until
/// SIGINT/SIGTERM: attached to the device at `attach`, serving other hosts on `listen`. Prints
/// its address when ready; returns the commands it forwarded.
#[pyfunction]
#[pyo3(signature = (attach, listen, quiet=false, allow_remote=false))]
fn uio_host_serve(py: Python<'_>, attach: PathBuf, listen: &str, quiet: bool, allow_remote: bool) -> PyResult<u64> {
    let addr: SocketAddr = listen.parse().map_err(|_| PyValueError::new_err(format!("--net: {listen:?} is not HOST:PORT")))?;
    py.detach(|| {
        ssdlab_uio::device::host_daemon_until_signal(&attach, addr, allow_remote, |a| {
            use std::io::Write;
            if !quiet {
                println!("uio host: serving other hosts on {a}");
            }
            let _ = std::io::stdout().flush();
        })
    })
    .map_err(|e| PyOSError::new_err(e.to_string()))
}

/// Wall-clock latency of `plan`'s value sizes from host 0 on both paths, through running
/// processes: `uio_socket` (device 0 of a UIO system of `plan.devices` devices) and
/// `traditional_socket` (device 0 of a traditional one, its hosts' daemons running). Returns
/// rows and the fitted (a, b).
#[pyfunction]
fn uio_wall_latency<'py>(
    py: Python<'py>,
    plan: &Bound<'py, PyAny>,
    uio_socket: PathBuf,
    traditional_socket: PathBuf,
) -> PyResult<Bound<'py, PyAny>> {
    let p: LatencyPlan = from_py(plan, "uio plan")?;
    p.validate().map_err(uio_err)?;
    let t = ssdlab_uio::wall::WallTargets { uio_socket: &uio_socket, traditional_socket: &traditional_socket, devices: p.devices };
    let w = py.detach(|| ssdlab_uio::wall::wall_latency(&p, &t)).map_err(PyOSError::new_err)?;
    let (a, b) = ssdlab_uio::repro::fit(&w.rows);
    to_py(py, &serde_json::json!({"rows": w.rows, "sim_rows": w.sim_rows, "fits": [[false, a, b]]}))
}

/// Attach to the device process at `attach` as its host and serve RESP clients (SET, GET, ...)
/// through it until SIGINT/SIGTERM (`options`: `ssdlab.serving.resp_options`). Returns the
/// final figures.
#[pyfunction]
fn uio_kv_serve<'py>(py: Python<'py>, attach: PathBuf, options: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let o: RespOpts = from_py(options, "uio kv-serve options")?;
    o.check("uio kv-serve options")?;
    let dev = HostDevice::attach(Path::new(&attach), Duration::from_secs(10))
        .map_err(|e| PyOSError::new_err(format!("attaching to the device: {e}")))?;
    let m = py.detach(move || o.serve("ssdlab uio kv-serve", Box::new(ssdlab_serve::UioBackend::new(dev))))?;
    to_py(py, &m)
}

/// A host attached to a UIO device process: put and get through its queues, one at a time
/// (`ssdlab.studies.uio_kv.api.Host`, and the console).
#[pyclass(module = "ssdlab._native", unsendable)]
pub(crate) struct UioHost {
    dev: HostDevice,
}

#[pymethods]
impl UioHost {
    #[new]
    #[pyo3(signature = (attach, timeout_s=10.0))]
    fn new(attach: PathBuf, timeout_s: f64) -> PyResult<UioHost> {
        if !(timeout_s > 0.0 && timeout_s < 1e6) {
            return Err(PyValueError::new_err(format!("timeout_s = {timeout_s}: expected a positive number of seconds")));
        }
        let dev = HostDevice::attach(&attach, Duration::from_secs_f64(timeout_s))
            .map_err(|e| PyOSError::new_err(format!("attaching to the device: {e}")))?;
        Ok(UioHost { dev })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.dev.put(key, value).map_err(DeviceError::new_err)
    }
    fn get<'py>(&mut self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, pyo3::types::PyBytes>>> {
        let v = self.dev.get(key).map_err(DeviceError::new_err)?;
        Ok(v.map(|v| pyo3::types::PyBytes::new(py, &v)))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<UioHost>()?;
    m.add_function(wrap_pyfunction!(uio_device_serve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_kv_serve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_host_serve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_wall_latency, m)?)?;
    m.add_function(wrap_pyfunction!(uio_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(uio_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_latency, m)?)?;
    Ok(())
}
