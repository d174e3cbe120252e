//! The closed-form GC models the simulator is checked against.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use ssdlab_core::analytic;

/// FIFO/LRU write amplification under uniform random overwrites (Desnoyers 2012);
/// `alpha` = physical / logical sectors.
#[pyfunction]
fn waf_fifo(alpha: f64) -> PyResult<f64> {
    if !(alpha > 1.0) {
        return Err(PyValueError::new_err(format!("alpha = physical / logical must exceed 1, got {alpha}")));
    }
    Ok(analytic::waf_fifo(alpha))
}

/// Desnoyers' approximation of greedy GC write amplification.
#[pyfunction]
fn waf_greedy(alpha: f64, sectors_per_block: u32) -> PyResult<f64> {
    if !(alpha > 1.0) || sectors_per_block == 0 {
        return Err(PyValueError::new_err("need alpha > 1 and sectors_per_block > 0"));
    }
    Ok(analytic::waf_greedy(alpha, sectors_per_block))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(waf_fifo, m)?)?;
    m.add_function(wrap_pyfunction!(waf_greedy, m)?)?;
    Ok(())
}
