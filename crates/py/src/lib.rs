//! `ssdlab._native`: a thin PyO3 layer over ssdlab-core. The Python package (python/ssdlab)
//! wraps it in the user-facing API; configs cross the boundary as JSON, metrics come back as
//! JSON and CSV text.

// pyo3 0.22's #[pymethods] expansion converts PyErr into itself.
#![allow(clippy::useless_conversion)]

mod cache;
mod lsm;

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_core::config::{self, Config, WorkloadConfig};
use ssdlab_core::engine::driver::{Ending, Limits, Loop};
use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};
use ssdlab_core::media::presets;
use ssdlab_core::workload::trace::{self, TraceFormat};
use ssdlab_core::{analytic, Error};

mod nbd;
mod spi;

create_exception!(_native, SsdlabError, PyException, "Base class of ssdlab errors.");
create_exception!(_native, ConfigError, SsdlabError, "A configuration key is unknown, malformed or out of range.");
create_exception!(_native, TraceError, SsdlabError, "A trace line cannot be parsed.");
create_exception!(_native, DeviceError, SsdlabError, "The device cannot serve the request (worn out, full, bad command).");
create_exception!(_native, SnapshotError, SsdlabError, "A snapshot file cannot be read.");
create_exception!(_native, NvmeError, DeviceError, "The device rejected a command with an NVMe status (named in the message).");

fn to_py(e: Error) -> PyErr {
    match e {
        Error::Config(c) => ConfigError::new_err(c.to_string()),
        e @ Error::Trace { .. } => TraceError::new_err(e.to_string()),
        Error::Command(m) => PyValueError::new_err(m),
        e @ Error::Nvme(..) => NvmeError::new_err(e.to_string()),
        e @ Error::WornOut(_) => DeviceError::new_err(e.to_string()),
        Error::Io(io) => PyOSError::new_err(io.to_string()),
        e @ Error::Snapshot(_) => SnapshotError::new_err(e.to_string()),
    }
}

pub(crate) fn config_from_json(json: &str, origin: &str) -> PyResult<Config> {
    let v: toml::Value = serde_json::from_str(json).map_err(|e| ConfigError::new_err(format!("{origin}: {e}")))?;
    Config::from_value(v, None, origin).map_err(to_py)
}

/// Validate a TOML config text; returns the complete config as JSON.
#[pyfunction]
#[pyo3(signature = (text, origin="<config>"))]
fn config_from_toml(text: &str, origin: &str) -> PyResult<String> {
    let c = Config::from_toml_str(text, origin).map_err(to_py)?;
    Ok(serde_json::to_string(&c).unwrap())
}

/// Validate a config given as JSON (a preset plus overrides); returns the complete config.
#[pyfunction]
#[pyo3(signature = (json, origin="<config>"))]
fn config_resolve(json: &str, origin: &str) -> PyResult<String> {
    Ok(serde_json::to_string(&config_from_json(json, origin)?).unwrap())
}

/// Check a config (JSON) exactly as building the device would and size it: capacities, the
/// FTL's reserve, the memory estimate, and the memory available; returns JSON.
#[pyfunction]
fn config_sizing(json: &str) -> PyResult<String> {
    let cfg = config_from_json(json, "<config>")?;
    let s = ssdlab_core::sizing::sizing(&cfg).map_err(to_py)?;
    let mut v = serde_json::to_value(&s).unwrap();
    v["available_memory_bytes"] = serde_json::json!(ssdlab_core::sizing::available_memory_bytes());
    Ok(v.to_string())
}

/// A complete, commented TOML config for a preset.
#[pyfunction]
fn config_show(preset: &str) -> PyResult<String> {
    let c = presets::preset(preset)
        .ok_or_else(|| ConfigError::new_err(format!("unknown preset {preset:?}; valid: {}", presets::NAMES.join(", "))))?;
    Ok(c.to_commented_toml())
}

/// The Markdown table of every config key (docs/CONFIG.md).
#[pyfunction]
fn config_markdown() -> String {
    config::config_markdown()
}

#[pyfunction]
fn preset_names() -> Vec<&'static str> {
    presets::NAMES.to_vec()
}

#[pyfunction]
fn trace_formats() -> Vec<&'static str> {
    TraceFormat::NAMES.to_vec()
}

#[pyfunction]
fn waf_fifo(alpha: f64) -> PyResult<f64> {
    if !(alpha > 1.0) {
        return Err(PyValueError::new_err(format!("alpha = physical / logical must exceed 1, got {alpha}")));
    }
    Ok(analytic::waf_fifo(alpha))
}

#[pyfunction]
fn waf_greedy(alpha: f64, sectors_per_block: u32) -> PyResult<f64> {
    if !(alpha > 1.0) || sectors_per_block == 0 {
        return Err(PyValueError::new_err("need alpha > 1 and sectors_per_block > 0"));
    }
    Ok(analytic::waf_greedy(alpha, sectors_per_block))
}

/// Progress reporting and Ctrl-C while the GIL is released.
struct Watch {
    bar: Option<ProgressBar>,
    phase: String,
    interrupted: bool,
}

impl Watch {
    fn new(show: bool) -> Watch {
        Watch { bar: if show { Some(ProgressBar::hidden()) } else { None }, phase: String::new(), interrupted: false }
    }
    fn tick(&mut self, phase: &str, frac: f64) -> bool {
        if let Some(bar) = &self.bar {
            if phase != self.phase {
                bar.finish_and_clear();
                let b = ProgressBar::new(1000);
                b.set_style(
                    ProgressStyle::with_template("{prefix:>12} [{bar:40}] {percent:>3}% {elapsed_precise} eta {eta}")
                        .unwrap()
                        .progress_chars("=> "),
                );
                b.set_prefix(phase.to_string());
                b.enable_steady_tick(Duration::from_millis(250));
                self.bar = Some(b);
                self.phase = phase.to_string();
            }
            self.bar.as_ref().unwrap().set_position((frac * 1000.0) as u64);
        }
        // A pending Ctrl-C (Python's handler only sets a flag while we run) stops the run.
        if Python::with_gil(|py| py.check_signals()).is_err() {
            self.interrupted = true;
            return false;
        }
        true
    }
    fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// An emulated device (see ssdlab.Device for the documented API).
#[pyclass(module = "ssdlab._native")]
struct NativeDevice {
    dev: ssdlab_core::Device,
}

type RunOut = (String, String, bool);

fn finish(rep: ssdlab_core::RunReport) -> RunOut {
    (serde_json::to_string(&rep.metrics).unwrap(), rep.series_csv, rep.ending == Ending::Interrupted)
}

impl NativeDevice {
    fn conventional(&self) -> PyResult<&ssdlab_core::ftl::conventional::Conventional> {
        match self.dev.zns().map(|_| ()) {
            None if self.dev.config().personality == ssdlab_core::config::Personality::Conventional => Ok(self.dev.ftl()),
            _ => Err(NvmeError::new_err("FDP and FTL commands need personality = \"conventional\"")),
        }
    }
    fn oc(&mut self) -> PyResult<&mut ssdlab_core::ftl::ocssd::Ocssd> {
        self.dev.ocssd_mut().ok_or_else(|| NvmeError::new_err("not an open-channel device (personality = \"ocssd\" in the config)"))
    }
    fn zns(&mut self) -> PyResult<&mut ssdlab_core::ftl::zns::Zns> {
        self.dev.zns_mut().ok_or_else(|| NvmeError::new_err("not a ZNS device (personality = \"zns\" in the config)"))
    }
}

#[pymethods]
impl NativeDevice {
    #[new]
    fn new(config_json: &str) -> PyResult<Self> {
        let cfg = config_from_json(config_json, "<config>")?;
        Ok(NativeDevice { dev: ssdlab_core::Device::new(cfg).map_err(to_py)? })
    }

    /// The complete config as JSON.
    fn config_json(&self) -> String {
        serde_json::to_string(self.dev.config()).unwrap()
    }

    #[getter]
    fn logical_bytes(&self) -> u64 {
        self.dev.logical_bytes()
    }
    #[getter]
    fn now_ns(&self) -> u64 {
        self.dev.now_ns()
    }
    #[getter]
    fn free_blocks(&self) -> u32 {
        self.dev.block_device().free_blocks()
    }

    /// Lifetime counters as JSON.
    fn counters_json(&self) -> String {
        serde_json::to_string(self.dev.block_device().counters()).unwrap()
    }

    /// Run [precondition]; returns True if interrupted.
    #[pyo3(signature = (progress=false))]
    fn precondition(&mut self, py: Python<'_>, progress: bool) -> PyResult<bool> {
        let mut w = Watch::new(progress);
        let dev = &mut self.dev;
        let r = py.allow_threads(|| dev.precondition(&mut |p, f| w.tick(p, f)));
        w.done();
        Ok(r.map_err(to_py)? == Ending::Interrupted)
    }

    /// Precondition then run the config's [workload]; or run `workload_json` (a [workload]
    /// table) without preconditioning. Returns (metrics JSON, time-series CSV, interrupted).
    #[pyo3(signature = (workload_json=None, progress=false))]
    fn run(&mut self, py: Python<'_>, workload_json: Option<&str>, progress: bool) -> PyResult<RunOut> {
        let w = match workload_json {
            None => None,
            Some(j) => {
                let mut base = toml::Value::try_from(self.dev.config()).unwrap();
                let user: toml::Value = serde_json::from_str(j).map_err(|e| ConfigError::new_err(format!("workload: {e}")))?;
                base.as_table_mut().unwrap().insert("workload".into(), user);
                let c = Config::from_value(base, None, "<workload>").map_err(to_py)?;
                Some(c.workload)
            }
        };
        let mut watch = Watch::new(progress);
        let dev = &mut self.dev;
        let r = py.allow_threads(|| match w {
            None => dev.run_configured(&mut |p, f| watch.tick(p, f)),
            Some(w) => dev.run(&w, &mut |p, f| watch.tick(p, f)),
        });
        watch.done();
        Ok(finish(r.map_err(to_py)?))
    }

    /// Replay a trace. `queue_depth` = None honours timestamps (open loop); a number ignores
    /// them and keeps that many commands in flight.
    #[pyo3(signature = (path, format, queue_depth=None, max_ops=0, progress=false, blkparse_action="Q"))]
    #[allow(clippy::too_many_arguments)] // the Python keyword arguments, one each
    fn replay(
        &mut self,
        py: Python<'_>,
        path: PathBuf,
        format: &str,
        queue_depth: Option<u32>,
        max_ops: u64,
        progress: bool,
        blkparse_action: &str,
    ) -> PyResult<RunOut> {
        let fmt = TraceFormat::parse(format)
            .ok_or_else(|| PyValueError::new_err(format!("unknown trace format {format:?}; valid: {}", TraceFormat::NAMES.join(", "))))?;
        let sector = self.dev.config().geometry.sector_bytes;
        let logical = self.dev.block_device().logical_sectors();
        let mut src = trace::open(&path, fmt, sector, logical).map_err(to_py)?.with_blkparse_action(blkparse_action);
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
        let r = py.allow_threads(|| dev.run_source(&mut src, lp, limits, &mut |p, f| watch.tick(p, f)));
        watch.done();
        Ok(finish(r.map_err(to_py)?))
    }

    /// Write bytes at a sector-aligned offset; returns the completion time (ns).
    #[pyo3(signature = (offset, data, fua=false, placement=None))]
    fn write(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> PyResult<u64> {
        self.dev.write_placed(offset, data, fua, placement).map_err(to_py)
    }

    /// Run weighted workloads interleaved: `parts_json` = [[workload, weight], ...],
    /// `stop_json` = a workload table giving stop conditions and queue depth.
    #[pyo3(signature = (parts_json, stop_json, progress=false))]
    fn run_mix(&mut self, py: Python<'_>, parts_json: &str, stop_json: &str, progress: bool) -> PyResult<RunOut> {
        let parse = |j: &str, what: &str| -> PyResult<WorkloadConfig> {
            let mut base = toml::Value::try_from(self.dev.config()).unwrap();
            let user: toml::Value = serde_json::from_str(j).map_err(|e| ConfigError::new_err(format!("{what}: {e}")))?;
            base.as_table_mut().unwrap().insert("workload".into(), user);
            Ok(Config::from_value(base, None, what).map_err(to_py)?.workload)
        };
        let raw: Vec<(serde_json::Value, f64)> = serde_json::from_str(parts_json).map_err(|e| ConfigError::new_err(format!("mix: {e}")))?;
        let mut parts = vec![];
        for (i, (w, weight)) in raw.into_iter().enumerate() {
            parts.push((parse(&w.to_string(), &format!("mix[{i}]"))?, weight));
        }
        let stop = parse(stop_json, "mix stop")?;
        let mut watch = Watch::new(progress);
        let dev = &mut self.dev;
        let r = py.allow_threads(|| dev.run_mix(&parts, &stop, &mut |p, f| watch.tick(p, f)));
        watch.done();
        Ok(finish(r.map_err(to_py)?))
    }

    /// FDP log pages and commands, as JSON: "configurations", "usage", "statistics",
    /// "events", "ruh_status".
    fn fdp_log(&self, which: &str) -> PyResult<String> {
        let f = self.conventional()?;
        let v = match which {
            "configurations" => f.fdp_configurations().map_err(to_py)?,
            "usage" => serde_json::to_value(f.ruh_usage().map_err(to_py)?).unwrap(),
            "statistics" => serde_json::to_value(f.fdp_statistics().map_err(to_py)?).unwrap(),
            "events" => serde_json::to_value(f.fdp_events().map_err(to_py)?).unwrap(),
            "ruh_status" => serde_json::to_value(f.ruh_status().map_err(to_py)?).unwrap(),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown FDP log {other:?}; valid: configurations, usage, statistics, events, ruh_status"
                )))
            }
        };
        Ok(v.to_string())
    }

    /// Reclaim Unit Handle Update for the given placement identifiers.
    fn ruh_update(&mut self, pids: Vec<u16>) -> PyResult<()> {
        let now = self.dev.now_ns();
        self.conventional()?;
        self.dev.ftl_mut().ruh_update(&pids, now).map_err(to_py)
    }

    /// Placement identifier of (reclaim group, handle).
    fn placement_id(&self, reclaim_group: u32, handle: u32) -> PyResult<u16> {
        let f = self.conventional()?.fdp().ok_or_else(|| NvmeError::new_err("FDP is not enabled on this device (fdp.enabled = false)"))?;
        if reclaim_group >= f.groups || handle >= f.placement_handles() {
            return Err(PyValueError::new_err(format!(
                "reclaim group {reclaim_group} / placement handle {handle} out of range ({} x {})",
                f.groups,
                f.placement_handles()
            )));
        }
        Ok(f.pid(reclaim_group, handle))
    }

    fn read<'py>(&mut self, py: Python<'py>, offset: u64, length: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mut buf = vec![0u8; length];
        self.dev.read(offset, &mut buf).map_err(to_py)?;
        Ok(PyBytes::new_bound(py, &buf))
    }

    fn trim(&mut self, offset: u64, length: u64) -> PyResult<u64> {
        self.dev.trim(offset, length).map_err(to_py)
    }

    fn flush(&mut self) -> PyResult<u64> {
        self.dev.flush().map_err(to_py)
    }

    fn snapshot(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let dev = &self.dev;
        py.allow_threads(|| dev.snapshot(&path)).map_err(to_py)
    }

    #[staticmethod]
    fn restore(py: Python<'_>, path: PathBuf) -> PyResult<NativeDevice> {
        let dev = py.allow_threads(|| ssdlab_core::Device::restore(&path)).map_err(to_py)?;
        Ok(NativeDevice { dev })
    }

    /// Assert every FTL invariant (slow).
    fn check_invariants(&self) {
        self.dev.block_device().check_invariants();
    }

    /// True if the mapping rebuilt from the media alone equals the live one.
    fn verify_rebuild(&self) -> bool {
        match self.conventional() {
            Ok(f) => f.rebuild_l2p_from_media() == f.l2p(),
            Err(_) => false,
        }
    }

    /// Zone Management Send: action open | close | finish | reset | offline, on the zone
    /// starting at `lba` or on all zones it applies to.
    #[pyo3(signature = (lba, action, select_all=false))]
    fn zone_action(&mut self, lba: u64, action: &str, select_all: bool) -> PyResult<u64> {
        let a: ZoneAction = serde_json::from_value(serde_json::Value::String(action.into()))
            .map_err(|_| PyValueError::new_err(format!("unknown zone action {action:?}; valid: open, close, finish, reset, offline")))?;
        let now = self.dev.now_ns();
        self.zns()?.zone_action(lba, a, select_all, now).map_err(to_py)
    }

    /// Report Zones from `lba` with a filter (all, empty, implicitly-open, explicitly-open,
    /// closed, full, read-only, offline), at most `max_zones` descriptors, as JSON.
    #[pyo3(signature = (lba=0, filter="all", max_zones=u32::MAX))]
    fn zone_report(&mut self, lba: u64, filter: &str, max_zones: u32) -> PyResult<String> {
        let f: Option<ZoneState> = match filter {
            "all" => None,
            other => Some(
                serde_json::from_value(serde_json::Value::String(other.into()))
                    .map_err(|_| PyValueError::new_err(format!("unknown zone filter {other:?}; valid: all or a zone state")))?,
            ),
        };
        let r = self.zns()?.report(lba, f, max_zones as usize).map_err(to_py)?;
        Ok(serde_json::to_string(&r).unwrap())
    }

    /// Zone Append: write at the write pointer of the zone starting at `zslba`; returns the
    /// LBA written and the completion time.
    #[pyo3(signature = (zslba, data, fua=false))]
    fn zone_append(&mut self, zslba: u64, data: &[u8], fua: bool) -> PyResult<(u64, u64)> {
        let sb = self.dev.config().geometry.sector_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(sb) {
            return Err(PyValueError::new_err(format!(
                "append of {} bytes: must be a non-zero multiple of the {sb}-byte sector",
                data.len()
            )));
        }
        let now = self.dev.now_ns();
        self.zns()?.write_zone(zslba, (data.len() / sb) as u32, Some(data), true, fua, now).map_err(to_py)
    }

    /// (zone count, zone size, zone capacity) in logical blocks, max open, max active,
    /// conventional zones (the first ones).
    fn zone_info(&mut self) -> PyResult<(u32, u64, u64, u32, u32, u32)> {
        let z = self.zns()?;
        Ok((z.zone_count(), z.zone_size(), z.zone_capacity(), z.max_open(), z.max_active(), z.conventional_zones()))
    }

    /// Open-channel geometry report, as JSON.
    fn oc_geometry(&mut self) -> PyResult<String> {
        Ok(serde_json::to_string(self.oc()?.geometry()).unwrap())
    }

    /// LBA of (group, parallel unit, chunk, sector).
    fn oc_lba(&mut self, group: u32, pu: u32, chunk: u32, sector: u64) -> PyResult<u64> {
        let o = self.oc()?;
        let g = o.geometry();
        if group >= g.num_grp || pu >= g.num_pu || chunk >= g.num_chk || sector >= g.clba {
            return Err(PyValueError::new_err(format!(
                "({group}, {pu}, {chunk}, {sector}) outside the geometry ({} x {} x {} x {})",
                g.num_grp, g.num_pu, g.num_chk, g.clba
            )));
        }
        Ok(o.lba(group, pu, chunk, sector))
    }

    /// Chunk information log (all chunks, or those of one parallel unit), as JSON.
    #[pyo3(signature = (group=None, pu=None))]
    fn oc_chunk_info(&mut self, group: Option<u32>, pu: Option<u32>) -> PyResult<String> {
        let sel = match (group, pu) {
            (Some(g), Some(p)) => Some((g, p)),
            (None, None) => None,
            _ => return Err(PyValueError::new_err("give both group and pu, or neither")),
        };
        Ok(serde_json::to_string(&self.oc()?.chunk_info(sel)).unwrap())
    }

    /// Vector write of one sector per LBA (at most 64); returns the completion time.
    fn oc_vector_write(&mut self, lbas: Vec<u64>, data: &[u8]) -> PyResult<u64> {
        let now = self.dev.now_ns();
        self.oc()?.vector_write(&lbas, Some(data), now).map_err(to_py)
    }

    /// Vector read of one sector per LBA (at most 64).
    fn oc_vector_read<'py>(&mut self, py: Python<'py>, lbas: Vec<u64>) -> PyResult<Bound<'py, PyBytes>> {
        let now = self.dev.now_ns();
        let o = self.oc()?;
        let mut buf = vec![0u8; lbas.len() * o.geometry().sector_bytes as usize];
        o.vector_read(&lbas, Some(&mut buf), now).map_err(to_py)?;
        Ok(PyBytes::new_bound(py, &buf))
    }

    /// Vector reset of chunks by their start LBAs (at most 64).
    fn oc_vector_reset(&mut self, chunk_lbas: Vec<u64>) -> PyResult<u64> {
        let now = self.dev.now_ns();
        self.oc()?.vector_reset(&chunk_lbas, now).map_err(to_py)
    }

    /// Copy a chunk's data to a free chunk (on any parallel unit).
    fn oc_copy_chunk(&mut self, src_lba: u64, dst_lba: u64) -> PyResult<u64> {
        let now = self.dev.now_ns();
        self.oc()?.copy_chunk(src_lba, dst_lba, now).map_err(to_py)
    }

    /// Erase counts per group (channel) and per parallel unit (die).
    fn oc_wear(&mut self) -> PyResult<(Vec<u64>, Vec<u64>)> {
        Ok(self.oc()?.wear())
    }

    /// Mark a zone read-only or offline (failure injection).
    fn inject_zone_state(&mut self, zone: usize, state: &str) -> PyResult<()> {
        let st: ZoneState = serde_json::from_value(serde_json::Value::String(state.into()))
            .map_err(|_| PyValueError::new_err(format!("unknown zone state {state:?}")))?;
        self.zns()?.inject_zone_state(zone, st).map_err(to_py)
    }
}

/// Workload defaults as JSON (for ssdlab.Workload).
#[pyfunction]
fn workload_defaults() -> String {
    serde_json::to_string(&WorkloadConfig::default()).unwrap()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SsdlabError", py.get_type_bound::<SsdlabError>())?;
    m.add("ConfigError", py.get_type_bound::<ConfigError>())?;
    m.add("TraceError", py.get_type_bound::<TraceError>())?;
    m.add("DeviceError", py.get_type_bound::<DeviceError>())?;
    m.add("SnapshotError", py.get_type_bound::<SnapshotError>())?;
    m.add("NvmeError", py.get_type_bound::<NvmeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<NativeDevice>()?;
    m.add_function(wrap_pyfunction!(config_from_toml, m)?)?;
    m.add_function(wrap_pyfunction!(config_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(config_show, m)?)?;
    m.add_function(wrap_pyfunction!(config_sizing, m)?)?;
    m.add_function(wrap_pyfunction!(config_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(preset_names, m)?)?;
    m.add_function(wrap_pyfunction!(trace_formats, m)?)?;
    m.add_function(wrap_pyfunction!(waf_fifo, m)?)?;
    m.add_function(wrap_pyfunction!(waf_greedy, m)?)?;
    m.add_function(wrap_pyfunction!(workload_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(nbd::nbd_serve, m)?)?;
    m.add_function(wrap_pyfunction!(nbd::nbd_stats, m)?)?;
    spi::register(m)?;
    cache::register(m)?;
    lsm::register(m)?;
    Ok(())
}
