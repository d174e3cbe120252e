//! `ssdlab._native.NativeDevice`: a device's common host interface (I/O in bytes, runs,
//! snapshots, counters). Personality-specific commands live on its sub-objects `fdp`, `zns`
//! and `ocssd` (fdp.rs, zns.rs, ocssd.rs); ssdlab.Device wraps this class.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_core::config::{Personality, WorkloadConfig};
use ssdlab_core::driver::{Ending, Limits, Loop};
use ssdlab_core::workload::trace::{self, TraceFormat};

use crate::convert::{config_from_py, to_py, workload_from_py};
use crate::errors::core_err;
use crate::fdp::Fdp;
use crate::native::{personality_name, NativeDevice};
use crate::ocssd::Ocssd;
use crate::progress::{run_out, RunOut, Watch};
use crate::zns::Zns;

#[pymethods]
impl NativeDevice {
    /// Format a device from a config dict (a preset plus overrides; the core fills the rest).
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let cfg = config_from_py(config, "<config>")?;
        Ok(NativeDevice { dev: ssdlab_core::Device::new(cfg).map_err(core_err)? })
    }

    /// The complete config in force, as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self.dev.config())
    }

    /// Host-visible capacity in bytes.
    #[getter]
    fn logical_bytes(&self) -> u64 {
        self.dev.logical_bytes()
    }

    /// Simulated time reached so far (ns).
    #[getter]
    fn now_ns(&self) -> u64 {
        self.dev.now_ns()
    }

    /// Erased blocks ready for writing.
    #[getter]
    fn free_blocks(&self) -> u32 {
        self.dev.block_device().free_blocks()
    }

    /// Lifetime counters (host and NAND bytes, erases, GC work), as a dict.
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self.dev.block_device().counters())
    }

    /// The personality: "conventional", "zns" or "ocssd".
    #[getter]
    fn personality(&self) -> String {
        personality_name(self.dev.config().personality)
    }

    /// FDP commands and log pages (conventional devices; with FDP off they fail with the
    /// NVMe status FDP Disabled, as a real device's would).
    #[getter]
    fn fdp(slf: Bound<'_, Self>) -> PyResult<Fdp> {
        slf.borrow().require(Personality::Conventional, "not a conventional device, so no FDP")?;
        Ok(Fdp { dev: slf.unbind() })
    }

    /// Zoned namespace commands (personality "zns").
    #[getter]
    fn zns(slf: Bound<'_, Self>) -> PyResult<Zns> {
        slf.borrow().require(Personality::Zns, "not a ZNS device")?;
        Ok(Zns { dev: slf.unbind() })
    }

    /// Open-channel commands (personality "ocssd").
    #[getter]
    fn ocssd(slf: Bound<'_, Self>) -> PyResult<Ocssd> {
        slf.borrow().require(Personality::Ocssd, "not an open-channel device")?;
        Ok(Ocssd { dev: slf.unbind() })
    }

    /// Run the config's `[precondition]`; returns True if interrupted (Ctrl-C).
    #[pyo3(signature = (progress=false))]
    fn precondition(&mut self, py: Python<'_>, progress: bool) -> PyResult<bool> {
        let mut w = Watch::new(progress);
        let dev = &mut self.dev;
        let r = py.detach(|| dev.precondition(&mut |p, f| w.tick(p, f)));
        w.done();
        Ok(r.map_err(core_err)? == Ending::Interrupted)
    }

    /// Precondition then run the config's `[workload]`; or, given a `[workload]` table (the
    /// keys set, the rest from the core's defaults), run it without preconditioning.
    /// `on_progress(phase, fraction)`, if given, hears how far each phase ("fill",
    /// "precondition", "run") is. Returns (metrics, time-series CSV, interrupted).
    #[pyo3(signature = (workload=None, progress=false, on_progress=None))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        workload: Option<&Bound<'py, PyAny>>,
        progress: bool,
        on_progress: Option<Py<PyAny>>,
    ) -> PyResult<RunOut<'py>> {
        let w = match workload {
            None => None,
            Some(t) => Some(workload_from_py(self.dev.config(), t, "workload")?),
        };
        let mut watch = Watch::with_callback(progress, on_progress);
        let dev = &mut self.dev;
        let r = py.detach(|| match w {
            None => dev.run_configured(&mut |p, f| watch.tick(p, f)),
            Some(w) => dev.run(&w, &mut |p, f| watch.tick(p, f)),
        });
        watch.done();
        run_out(py, r.map_err(core_err)?)
    }

    /// Run weighted workloads interleaved: `parts` = [(workload table, weight), ...]; `stop`
    /// = a workload table whose stop conditions and queue depth (or rate) the run uses.
    #[pyo3(signature = (parts, stop, progress=false))]
    fn run_mix<'py>(
        &mut self,
        py: Python<'py>,
        parts: Vec<(Bound<'py, PyAny>, f64)>,
        stop: &Bound<'py, PyAny>,
        progress: bool,
    ) -> PyResult<RunOut<'py>> {
        let mut mix: Vec<(WorkloadConfig, f64)> = vec![];
        for (i, (w, weight)) in parts.iter().enumerate() {
            mix.push((workload_from_py(self.dev.config(), w, &format!("mix[{i}]"))?, *weight));
        }
        let stop = workload_from_py(self.dev.config(), stop, "mix stop")?;
        let mut watch = Watch::new(progress);
        let dev = &mut self.dev;
        let r = py.detach(|| dev.run_mix(&mix, &stop, &mut |p, f| watch.tick(p, f)));
        watch.done();
        run_out(py, r.map_err(core_err)?)
    }

    /// Replay a trace. `queue_depth` = None honours timestamps (open loop); a number ignores
    /// them and keeps that many commands in flight.
    #[pyo3(signature = (path, format, queue_depth=None, max_ops=0, progress=false, blkparse_action="Q"))]
    #[allow(clippy::too_many_arguments)] // the Python keyword arguments, one each
    fn replay<'py>(
        &mut self,
        py: Python<'py>,
        path: PathBuf,
        format: &str,
        queue_depth: Option<u32>,
        max_ops: u64,
        progress: bool,
        blkparse_action: &str,
    ) -> PyResult<RunOut<'py>> {
        let fmt = TraceFormat::parse(format)
            .ok_or_else(|| PyValueError::new_err(format!("unknown trace format {format:?}; valid: {}", TraceFormat::NAMES.join(", "))))?;
        let sector = self.dev.config().geometry.sector_bytes;
        let logical = self.dev.block_device().logical_sectors();
        let mut src = trace::open(&path, fmt, sector, logical).map_err(core_err)?.with_blkparse_action(blkparse_action);
        if queue_depth.is_none() && !self.dev.config().timing.enabled {
            return Err(PyValueError::new_err(
                "replaying timestamps needs timing.enabled = true; give a queue depth to replay closed-loop",
            ));
        }
        let lp = match queue_depth {
            Some(d) => Loop::Closed { depth: d.max(1) },
            None => Loop::Trace,
        };
        let mut watch = Watch::new(progress);
        let dev = &mut self.dev;
        let limits = Limits { ops: max_ops, ..Default::default() };
        let r = py.detach(|| dev.run_source(&mut src, lp, limits, &mut |p, f| watch.tick(p, f)));
        watch.done();
        let mut rep = r.map_err(core_err)?;
        // What the trace held: the CLI reports skipped lines by number.
        let (skipped, numbers) = src.skipped();
        rep.metrics["trace"] = serde_json::json!({"records": src.records(), "skipped_lines": skipped, "skipped_line_numbers": numbers});
        run_out(py, rep)
    }

    /// Write bytes at a sector-aligned offset; returns the completion time (ns). `placement`
    /// is an FDP placement identifier.
    #[pyo3(signature = (offset, data, fua=false, placement=None))]
    fn write(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> PyResult<u64> {
        self.dev.write_placed(offset, data, fua, placement).map_err(core_err)
    }

    /// Read `length` bytes at a sector-aligned offset.
    fn read<'py>(&mut self, py: Python<'py>, offset: u64, length: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mut buf = vec![0u8; length];
        self.dev.read(offset, &mut buf).map_err(core_err)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Deallocate a sector-aligned range; returns the completion time (ns).
    fn trim(&mut self, offset: u64, length: u64) -> PyResult<u64> {
        self.dev.trim(offset, length).map_err(core_err)
    }

    /// Program everything buffered; returns the completion time (ns).
    fn flush(&mut self) -> PyResult<u64> {
        self.dev.flush().map_err(core_err)
    }

    /// Save the whole device state to `path`.
    fn snapshot(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let dev = &self.dev;
        py.detach(|| dev.snapshot(&path)).map_err(core_err)
    }

    /// Load a device saved by `snapshot`.
    #[staticmethod]
    fn restore(py: Python<'_>, path: PathBuf) -> PyResult<NativeDevice> {
        let dev = py.detach(|| ssdlab_core::Device::restore(&path)).map_err(core_err)?;
        Ok(NativeDevice { dev })
    }

    /// Assert every FTL invariant (slow; for tests).
    fn check_invariants(&self) {
        self.dev.block_device().check_invariants();
    }

    /// True if the mapping rebuilt from the media alone equals the live one (conventional
    /// devices; False on the others, which keep no mapping).
    fn verify_rebuild(&self) -> bool {
        match self.conventional() {
            Ok(f) => f.rebuild_l2p_from_media() == f.l2p(),
            Err(_) => false,
        }
    }
}
