//! uio-kv: the reproduction's latency measurements on the UIO and traditional data paths.
//! Python side: python/ssdlab/uio.py.

use pyo3::prelude::*;

use ssdlab_uio::repro::LatencyPlan;
use ssdlab_uio::UtlError;

use crate::convert::{from_py, to_py};
use crate::errors::{ConfigError, DeviceError};

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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(uio_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(uio_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(uio_latency, m)?)?;
    Ok(())
}
