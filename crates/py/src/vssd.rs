//! `ssdlab._native` functions of the flashblox case study (crate ssdlab-vssd): the vSSD layer
//! as an object (`NativeFlashBlox`), timed multi-tenant runs, lifetime studies and the
//! swap-frequency analysis. Specs and results cross as dicts; block data as bytes.

use std::borrow::Cow;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use ssdlab_vssd::flashblox::{BlockApi, FlashBlox, LayoutTable, VssdIo};
use ssdlab_vssd::{analysis, device_config, lifetime, sim, FlashBloxConfig, Isolation, Placement, VssdError};

use crate::convert::{config_from_py, from_py, to_py};
use crate::errors::{core_err, ConfigError, DeviceError};
use crate::progress::Watch;

fn err(e: VssdError) -> PyErr {
    match e {
        VssdError::Config(m) => ConfigError::new_err(m),
        VssdError::Device(d) => core_err(d),
        VssdError::Io(io) => PyOSError::new_err(io.to_string()),
        VssdError::Api(m) => PyValueError::new_err(m),
        e @ (VssdError::NoResources(_) | VssdError::WornOut(_) | VssdError::Recovery(_)) => DeviceError::new_err(e.to_string()),
    }
}

/// The case study's devices by name (`paper`, `quick`, `lifetime`) as config dicts.
#[pyfunction]
fn vssd_device<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let c = device_config(name).ok_or_else(|| {
        ConfigError::new_err(format!("unknown flashblox device {name:?}; valid: {}", ssdlab_vssd::config::DEVICES.join(", ")))
    })?;
    to_py(py, &c)
}

/// Default layer settings, run spec and lifetime spec.
#[pyfunction]
fn vssd_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let v = serde_json::json!({
        "flashblox": FlashBloxConfig::default(),
        "run": sim::RunSpec::default(),
        "lifetime": lifetime::LifetimeSpec::default(),
    });
    to_py(py, &v)
}

/// A timed multi-tenant run on `device` (a config dict) of `spec` (a RunSpec dict):
/// (summary, wall seconds, interrupted). `on_progress(fraction)` hears how far it is;
/// `progress` shows a bar on stderr.
#[pyfunction]
#[pyo3(signature = (device, spec, on_progress=None, progress=false))]
fn vssd_run<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    spec: &Bound<'py, PyAny>,
    on_progress: Option<Py<PyAny>>,
    progress: bool,
) -> PyResult<(Bound<'py, PyAny>, f64, bool)> {
    let dev = config_from_py(device, "<device>")?;
    let spec: sim::RunSpec = from_py(spec, "flashblox run spec")?;
    let mut watch = Watch::fractions(progress, on_progress);
    let r = py.detach(|| sim::run(&dev, &spec, &mut |f| watch.tick("run", f)));
    watch.done();
    let r = r.map_err(err)?;
    Ok((to_py(py, &r.summary)?, r.wall_seconds, r.interrupted))
}

/// A lifetime study of `spec` (a LifetimeSpec dict) on `device`: (result, wall seconds).
/// `on_progress(fraction)` hears how far it is (of its longest possible run); `progress`
/// shows a bar on stderr.
#[pyfunction]
#[pyo3(signature = (device, spec, on_progress=None, progress=false))]
fn vssd_lifetime<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    spec: &Bound<'py, PyAny>,
    on_progress: Option<Py<PyAny>>,
    progress: bool,
) -> PyResult<(Bound<'py, PyAny>, f64)> {
    let dev = config_from_py(device, "<device>")?;
    let spec: lifetime::LifetimeSpec = from_py(spec, "flashblox lifetime spec")?;
    let mut watch = Watch::fractions(progress, on_progress);
    let r = py.detach(|| lifetime::run(dev, &spec, &mut |f| watch.tick("lifetime", f)));
    watch.done();
    let (v, wall) = r.map_err(err)?;
    Ok((to_py(py, &v)?, wall))
}

/// The swap-frequency analysis for `channels` channels, `years` of service, `a` and `d`.
#[pyfunction]
fn vssd_swap_plan(py: Python<'_>, channels: u32, years: f64, a: f64, d: f64) -> PyResult<Bound<'_, PyAny>> {
    if !(channels >= 2 && years > 0.0 && a > 0.0 && a <= 1.0 && d > 0.0) {
        return Err(PyValueError::new_err("need channels >= 2, years > 0, 0 < a <= 1, d > 0"));
    }
    to_py(py, &analysis::plan(channels, years, a, d))
}

/// The vSSD layer's simulator cost per sector against the raw open-channel device (best of
/// `rounds` interleaved passes; wall clock).
#[pyfunction]
fn vssd_layer_cost<'py>(py: Python<'py>, device: &Bound<'py, PyAny>, rounds: u32) -> PyResult<Bound<'py, PyAny>> {
    let dev = config_from_py(device, "<device>")?;
    let c = py.detach(|| ssdlab_vssd::cost::measure(&dev, rounds)).map_err(err)?;
    to_py(py, &c)
}

/// The vSSD layer on an open-channel device (see ssdlab.studies.flashblox.api.FlashBlox).
#[pyclass(module = "ssdlab._native")]
struct NativeFlashBlox {
    fb: FlashBlox,
    /// The caller's clock: each call starts here and moves it to its completion.
    now: u64,
}

#[pymethods]
impl NativeFlashBlox {
    #[new]
    fn new(device: &Bound<'_, PyAny>, config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let dev = config_from_py(device, "<device>")?;
        let cfg: FlashBloxConfig = from_py(config, "flashblox config")?;
        Ok(NativeFlashBlox { fb: FlashBlox::new(&dev, cfg).map_err(err)?, now: 0 })
    }

    /// Simulated time in ns.
    fn now(&self) -> u64 {
        self.now
    }

    fn alloc_virtual_ssd(&mut self, isolation: &str, tput_level: u32, capacity_bytes: u64, placement: &Bound<'_, PyAny>) -> PyResult<u32> {
        let level = Isolation::parse(isolation)
            .ok_or_else(|| ConfigError::new_err(format!("unknown isolation level {isolation:?}; valid: channel, die, soft-plane, none")))?;
        let p: Placement = from_py(placement, "placement")?;
        self.fb.alloc_virtual_ssd(level, tput_level, capacity_bytes, &p).map_err(err)
    }

    fn dealloc_virtual_ssd(&mut self, id: u32) -> PyResult<()> {
        self.now = self.fb.dealloc_virtual_ssd(id, self.now).map_err(err)?;
        Ok(())
    }

    /// (blocks, free blocks, sectors per block, sectors per write unit, sector bytes).
    fn geometry_of(&mut self, id: u32) -> PyResult<(u32, u32, u32, u32, u32)> {
        self.fb.vssd(id).map_err(err)?;
        let io = VssdIo { fb: &mut self.fb, id };
        Ok((io.blocks(), io.free_blocks(), io.block_sectors(), io.unit_sectors(), io.sector_bytes()))
    }

    fn alloc_block(&mut self, id: u32) -> PyResult<u32> {
        self.fb.alloc_block(id).map_err(err)
    }

    fn write_data(&mut self, id: u32, block: u32, offset: u32, data: &[u8]) -> PyResult<u64> {
        let sb = self.fb.geo().sector_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(sb) {
            return Err(PyValueError::new_err(format!("write of {} bytes: whole sectors of {sb} bytes", data.len())));
        }
        let done = self.fb.write_data(id, block, offset, (data.len() / sb) as u32, Some(data), self.now).map_err(err)?;
        self.now = self.now.max(done);
        Ok(done)
    }

    fn read_data(&mut self, id: u32, block: u32, offset: u32, sectors: u32) -> PyResult<Cow<'static, [u8]>> {
        let mut out = vec![0u8; sectors as usize * self.fb.geo().sector_bytes as usize];
        let done = self.fb.read_data(id, block, offset, sectors, Some(&mut out), self.now).map_err(err)?;
        self.now = self.now.max(done);
        Ok(Cow::Owned(out))
    }

    fn free_block(&mut self, id: u32, block: u32) -> PyResult<()> {
        self.now = self.now.max(self.fb.free_block(id, block, self.now).map_err(err)?);
        Ok(())
    }

    /// Swap two physical channels now and carry the migration out.
    fn swap_channels(&mut self, a: u32, b: u32) -> PyResult<()> {
        self.fb.start_swap(a, b, self.now).map_err(err)?;
        while let Some(t) = self.fb.migration_next_ns() {
            self.now = self.now.max(t);
            self.fb.migration_step(self.now).map_err(err)?;
        }
        Ok(())
    }

    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.fb.summary())
    }

    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.fb.layout())
    }

    /// Lose everything but the device and the layout table `layout` (default: the current
    /// one), then rebuild from the OOB records; returns the recovery report.
    #[pyo3(signature = (layout=None))]
    fn crash_and_recover<'py>(&mut self, py: Python<'py>, layout: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let table: LayoutTable = match layout {
            Some(t) => from_py(t, "layout table")?,
            None => self.fb.layout(),
        };
        let (fb, rep) = FlashBlox::recover(self.fb.device().clone(), &table, self.now).map_err(err)?;
        self.fb = fb;
        self.now += rep.scan_ns;
        to_py(py, &rep)
    }

    fn check_invariants(&self) {
        self.fb.check_invariants();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeFlashBlox>()?;
    m.add_function(wrap_pyfunction!(vssd_device, m)?)?;
    m.add_function(wrap_pyfunction!(vssd_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(vssd_run, m)?)?;
    m.add_function(wrap_pyfunction!(vssd_lifetime, m)?)?;
    m.add_function(wrap_pyfunction!(vssd_swap_plan, m)?)?;
    m.add_function(wrap_pyfunction!(vssd_layer_cost, m)?)?;
    Ok(())
}
