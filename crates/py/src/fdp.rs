//! `dev.fdp`: NVMe Flexible Data Placement (TP4146) commands and log pages of a conventional
//! device. Log pages come back as dicts and lists in the shape docs/personalities.md shows.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::to_py;
use crate::errors::{core_err, NvmeError};
use crate::native::NativeDevice;

/// FDP commands of a conventional device (`dev.fdp`). With FDP off (`fdp.enabled = false`)
/// every command fails with the NVMe status FDP Disabled.
#[pyclass(module = "ssdlab._native", frozen)]
pub struct Fdp {
    pub(crate) dev: Py<NativeDevice>,
}

impl Fdp {
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&NativeDevice) -> PyResult<R>) -> PyResult<R> {
        let d = self.dev.bind(py).try_borrow()?;
        f(&d)
    }
}

#[pymethods]
impl Fdp {
    /// The placement identifier of (reclaim group, placement handle), for `Device.write`'s
    /// `placement`.
    #[pyo3(signature = (reclaim_group=0, handle=0))]
    fn placement_id(&self, py: Python<'_>, reclaim_group: u32, handle: u32) -> PyResult<u16> {
        self.with(py, |d| {
            let f = d.conventional()?.fdp().ok_or_else(|| NvmeError::new_err("FDP Disabled: fdp.enabled = false on this device"))?;
            if reclaim_group >= f.groups || handle >= f.placement_handles() {
                return Err(PyValueError::new_err(format!(
                    "reclaim group {reclaim_group} / placement handle {handle} out of range ({} x {})",
                    f.groups,
                    f.placement_handles()
                )));
            }
            Ok(f.pid(reclaim_group, handle))
        })
    }

    /// FDP Configurations log page: number_of_configurations, configuration_in_use and each
    /// configuration (reclaim groups, handles and their types, reclaim unit size).
    fn configurations<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, |d| d.conventional()?.fdp_configurations().map_err(core_err))?;
        to_py(py, &v)
    }

    /// Reclaim Unit Handle Usage log page: per handle, "host-specified" or "unused".
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, |d| d.conventional()?.ruh_usage().map_err(core_err))?;
        to_py(py, &v)
    }

    /// FDP Statistics log page: hbmw (host bytes with metadata written), mbmw (media bytes
    /// with metadata written), mbe (media bytes erased).
    fn statistics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, |d| d.conventional()?.fdp_statistics().map_err(core_err))?;
        to_py(py, &v)
    }

    /// FDP Events log page, oldest first.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, |d| d.conventional()?.fdp_events().map_err(core_err))?;
        to_py(py, &v)
    }

    /// Reclaim Unit Handle Status: per placement identifier, its handle and the reclaim
    /// unit's available media writes (ruamw, in logical blocks).
    fn ruh_status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, |d| d.conventional()?.ruh_status().map_err(core_err))?;
        to_py(py, &v)
    }

    /// Reclaim Unit Handle Update: move each handle named by a placement identifier to a new,
    /// empty reclaim unit.
    fn ruh_update(&self, py: Python<'_>, placement_ids: Vec<u16>) -> PyResult<()> {
        let mut d = self.dev.bind(py).try_borrow_mut()?;
        d.conventional()?;
        let now = d.dev.now_ns();
        d.dev.ftl_mut().ruh_update(&placement_ids, now).map_err(core_err)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let on = self.with(py, |d| Ok(d.conventional()?.fdp().is_some())).unwrap_or(false);
        format!("<ssdlab FDP commands ({})>", if on { "enabled" } else { "disabled" })
    }
}
