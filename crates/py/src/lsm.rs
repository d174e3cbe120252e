//! `ssdlab._native` functions of the lsm-deletion case study (crate ssdlab-lsm): measured
//! runs, workload files in the K-V workload generator's format, and `LsmStore`, the store
//! itself for scripts. Specs cross as JSON.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_lsm::workload::{write_op, Generator};
use ssdlab_lsm::{Error, LsmConfig, RunSpec, Store};

use crate::{config_from_json, to_py, ConfigError, TraceError};

fn lsm_err(e: Error) -> PyErr {
    match e {
        Error::Config(m) => ConfigError::new_err(m),
        Error::Device(d) => to_py(d),
        e @ Error::Workload { .. } => TraceError::new_err(e.to_string()),
        Error::Io(io) => PyOSError::new_err(io.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

fn from_json<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> PyResult<T> {
    serde_json::from_str(json).map_err(|e| {
        // Line and column would point into JSON the user never wrote.
        let m = e.to_string();
        ConfigError::new_err(format!("{what}: {}", m.rsplit_once(" at line ").map_or(m.as_str(), |(a, _)| a)))
    })
}

/// Run `spec_json` (a RunSpec) on the ZNS device `device_json`; with `files`, phase i replays
/// files[i]. Returns (summary JSON, time-series CSV, wall seconds, interrupted).
#[pyfunction]
#[pyo3(signature = (device_json, spec_json, files=None))]
fn lsm_run(py: Python<'_>, device_json: &str, spec_json: &str, files: Option<Vec<PathBuf>>) -> PyResult<(String, String, f64, bool)> {
    let dev = config_from_json(device_json, "[device]")?;
    let spec: RunSpec = from_json(spec_json, "lsm run spec")?;
    let r = py.allow_threads(|| {
        let mut stop = |_: f64| Python::with_gil(|py| py.check_signals()).is_ok();
        ssdlab_lsm::run(dev, &spec, files.as_deref(), &mut stop)
    });
    let r = r.map_err(lsm_err)?;
    Ok((serde_json::to_string(&r.summary).unwrap(), r.series_csv, r.wall_seconds, r.interrupted))
}

/// The default RunSpec as JSON.
#[pyfunction]
fn lsm_defaults() -> String {
    serde_json::to_string(&RunSpec::default()).unwrap()
}

/// Write the phases of `spec_json` as workload files (`DIR/NAME.txt`, one per phase, the K-V
/// workload generator's format); returns (path, operations) per phase.
#[pyfunction]
fn lsm_generate(py: Python<'_>, spec_json: &str, dir: PathBuf) -> PyResult<Vec<(PathBuf, u64)>> {
    let spec: RunSpec = from_json(spec_json, "lsm run spec")?;
    py.allow_threads(|| {
        std::fs::create_dir_all(&dir).map_err(|e| PyOSError::new_err(format!("{}: {e}", dir.display())))?;
        let mut g = Generator::new(spec.seed);
        let mut out = vec![];
        for (i, p) in spec.phases.iter().enumerate() {
            p.validate(i).map_err(lsm_err)?;
            let name = if p.name.is_empty() { format!("phase{}", i + 1) } else { p.name.clone() };
            let path = dir.join(format!("{name}.txt"));
            let f = std::fs::File::create(&path).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            let mut n = 0u64;
            g.phase(p, |op| {
                n += 1;
                write_op(&mut w, &op).map_err(Error::Io)
            })
            .map_err(lsm_err)?;
            std::io::Write::flush(&mut w).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
            out.push((path, n));
        }
        Ok(out)
    })
}

/// The store, for scripts: every call is timed on the device; the clock advances to each
/// operation's completion unless the caller moves it (`advance_to`).
#[pyclass(module = "ssdlab._native")]
struct LsmStore {
    s: Store,
}

#[pymethods]
impl LsmStore {
    #[new]
    fn new(device_json: &str, lsm_json: &str) -> PyResult<Self> {
        let dev = config_from_json(device_json, "[device]")?;
        let cfg: LsmConfig = from_json(lsm_json, "[lsm]")?;
        Ok(LsmStore { s: Store::new(dev, cfg).map_err(lsm_err)? })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> PyResult<u64> {
        let d = self.s.put(key, value).map_err(lsm_err)?;
        self.s.advance_to(d);
        Ok(d)
    }
    fn delete(&mut self, key: &[u8]) -> PyResult<u64> {
        let d = self.s.delete(key).map_err(lsm_err)?;
        self.s.advance_to(d);
        Ok(d)
    }
    #[pyo3(signature = (key, snapshot=None))]
    fn get<'py>(&mut self, py: Python<'py>, key: &[u8], snapshot: Option<u64>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let r = self.s.get_at(key, snapshot.unwrap_or(u64::MAX >> 8)).map_err(lsm_err)?;
        self.s.advance_to(r.done_ns);
        Ok(r.value.map(|v| PyBytes::new_bound(py, &v)))
    }
    #[pyo3(signature = (start, end=None, limit=1000, snapshot=None))]
    fn scan<'py>(&mut self, py: Python<'py>, start: &[u8], end: Option<&[u8]>, limit: usize, snapshot: Option<u64>) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let (kv, d) = self.s.scan_at(start, end, limit, snapshot.unwrap_or(u64::MAX >> 8)).map_err(lsm_err)?;
        self.s.advance_to(d);
        Ok(kv.into_iter().map(|(k, v)| (PyBytes::new_bound(py, &k), PyBytes::new_bound(py, &v))).collect())
    }
    fn snapshot(&mut self) -> u64 {
        self.s.snapshot()
    }
    fn release(&mut self, snapshot: u64) -> PyResult<()> {
        self.s.release(snapshot).map_err(lsm_err)
    }
    fn flush(&mut self) -> PyResult<()> {
        self.s.flush().map_err(lsm_err)
    }
    fn advance_to(&mut self, t_ns: u64) {
        self.s.advance_to(t_ns)
    }
    #[getter]
    fn now_ns(&self) -> u64 {
        self.s.now_ns()
    }
    /// Store, zone-layer and device counters, level shape and deletion persistence as JSON.
    fn stats_json(&self) -> String {
        let recs = self.s.delete_records();
        serde_json::json!({
            "lsm": self.s.stats(),
            "zones": self.s.fs().stats,
            "device": self.s.fs().device_counters(),
            "levels": self.s.level_shape(),
            "sst_bytes": self.s.sst_bytes(),
            "free_zones": self.s.fs().free_zones(),
            "deletes": recs,
        })
        .to_string()
    }
    /// Search the NAND for deleted values (needs track_deletes); JSON.
    fn audit_json(&self) -> PyResult<String> {
        Ok(serde_json::to_string(&self.s.audit().map_err(lsm_err)?).unwrap())
    }
    fn check_invariants(&self) {
        self.s.check_invariants()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lsm_run, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_generate, m)?)?;
    m.add_class::<LsmStore>()?;
    Ok(())
}
