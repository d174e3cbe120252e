//! `dev.ocssd`: open-channel (OCSSD 2.0-style) geometry, chunk information and vector
//! commands.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::to_py;
use crate::errors::{core_err, NvmeError};
use crate::native::NativeDevice;

/// Erase counts per group (channel) and per parallel unit (die).
#[derive(IntoPyObject)]
struct Wear {
    per_group: Vec<u64>,
    per_pu: Vec<u64>,
}

/// Commands of an open-channel device (`dev.ocssd`).
#[pyclass(module = "ssdlab._native", frozen)]
pub struct Ocssd {
    pub(crate) dev: Py<NativeDevice>,
}

impl Ocssd {
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ssdlab_core::ftl::ocssd::Ocssd, u64) -> PyResult<R>) -> PyResult<R> {
        let mut d = self.dev.bind(py).try_borrow_mut()?;
        let now = d.dev.now_ns();
        let o = d.dev.ocssd_mut().ok_or_else(|| NvmeError::new_err("not an open-channel device"))?;
        f(o, now)
    }
}

#[pymethods]
impl Ocssd {
    /// Geometry report: num_grp, num_pu, num_chk, clba, ws_min, ws_opt, mw_cunits, maxoc,
    /// sector_bytes and typical media times (ns).
    fn geometry<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.with(py, |o, _| Ok(o.geometry().clone()))?;
        to_py(py, &g)
    }

    /// The LBA of (group, parallel unit, chunk, sector).
    #[pyo3(signature = (group, pu, chunk, sector=0))]
    fn lba(&self, py: Python<'_>, group: u32, pu: u32, chunk: u32, sector: u64) -> PyResult<u64> {
        self.with(py, |o, _| {
            let g = o.geometry();
            if group >= g.num_grp || pu >= g.num_pu || chunk >= g.num_chk || sector >= g.clba {
                return Err(PyValueError::new_err(format!(
                    "({group}, {pu}, {chunk}, {sector}) outside the geometry ({} x {} x {} x {})",
                    g.num_grp, g.num_pu, g.num_chk, g.clba
                )));
            }
            Ok(o.lba(group, pu, chunk, sector))
        })
    }

    /// Chunk information log: slba, state, wp, cnlb, erase_count per chunk, of every chunk or
    /// of one parallel unit (give both `group` and `pu`).
    #[pyo3(signature = (group=None, pu=None))]
    fn chunk_info<'py>(&self, py: Python<'py>, group: Option<u32>, pu: Option<u32>) -> PyResult<Bound<'py, PyAny>> {
        let sel = match (group, pu) {
            (Some(g), Some(p)) => Some((g, p)),
            (None, None) => None,
            _ => return Err(PyValueError::new_err("give both group and pu, or neither")),
        };
        let info = self.with(py, |o, _| Ok(o.chunk_info(sel)))?;
        to_py(py, &info)
    }

    /// Vector write: one sector of `data` per LBA (at most 64); returns the completion time (ns).
    fn vector_write(&self, py: Python<'_>, lbas: Vec<u64>, data: &[u8]) -> PyResult<u64> {
        self.with(py, |o, now| o.vector_write(&lbas, Some(data), now).map_err(core_err))
    }

    /// Vector read: one sector per LBA (at most 64).
    fn vector_read<'py>(&self, py: Python<'py>, lbas: Vec<u64>) -> PyResult<Bound<'py, PyBytes>> {
        let buf = self.with(py, |o, now| {
            let mut buf = vec![0u8; lbas.len() * o.geometry().sector_bytes as usize];
            o.vector_read(&lbas, Some(&mut buf), now).map_err(core_err)?;
            Ok(buf)
        })?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Vector reset of chunks by their start LBAs (at most 64); returns the completion time (ns).
    fn vector_reset(&self, py: Python<'_>, chunk_lbas: Vec<u64>) -> PyResult<u64> {
        self.with(py, |o, now| o.vector_reset(&chunk_lbas, now).map_err(core_err))
    }

    /// Copy a chunk's data to a free chunk on any parallel unit (wear-levelling moves);
    /// returns the completion time (ns).
    fn copy_chunk(&self, py: Python<'_>, src_lba: u64, dst_lba: u64) -> PyResult<u64> {
        self.with(py, |o, now| o.copy_chunk(src_lba, dst_lba, now).map_err(core_err))
    }

    /// Erase counts: {"per_group": [...], "per_pu": [...]}.
    fn wear<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (per_group, per_pu) = self.with(py, |o, _| Ok(o.wear()))?;
        Ok(Wear { per_group, per_pu }.into_pyobject(py)?.into_any())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.with(py, |o, _| {
            let g = o.geometry();
            Ok(format!("<ssdlab open-channel commands: {} groups x {} PUs x {} chunks>", g.num_grp, g.num_pu, g.num_chk))
        })
        .unwrap_or_else(|_| "<ssdlab open-channel commands>".into())
    }
}
