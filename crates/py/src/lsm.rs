//! `ssdlab._native` functions of the lsm-deletion case study (crate ssdlab-lsm): measured
//! runs, their sizing, workload files in the K-V workload generator's format, and `LsmStore`,
//! the store itself for scripts. Specs and results cross as dicts.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_lsm::workload::{write_op, Generator};
use ssdlab_lsm::{Error, LsmConfig, RunSpec, Store};

use crate::convert::{config_from_py, from_py, to_py};
use crate::errors::{core_err, ConfigError, TraceError};
use crate::progress::Watch;
use crate::serving::{deny_unknown, ListenArgs};

fn lsm_err(e: Error) -> PyErr {
    match e {
        Error::Config(m) => ConfigError::new_err(m),
        Error::Device(d) => core_err(d),
        e @ Error::Workload { .. } => TraceError::new_err(e.to_string()),
        Error::Io(io) => PyOSError::new_err(io.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// Run `spec` (a RunSpec) on the ZNS device `device` (a config dict); with `files`, phase i
/// replays files[i]. Returns (summary, time-series CSV, wall seconds, interrupted).
/// `on_progress(fraction)` hears how far it is (operations done of those planned);
/// `progress` shows a bar on stderr.
#[pyfunction]
#[pyo3(signature = (device, spec, files=None, on_progress=None, progress=false))]
fn lsm_run<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    spec: &Bound<'py, PyAny>,
    files: Option<Vec<PathBuf>>,
    on_progress: Option<Py<PyAny>>,
    progress: bool,
) -> PyResult<(Bound<'py, PyAny>, String, f64, bool)> {
    let dev = config_from_py(device, "[device]")?;
    let spec: RunSpec = from_py(spec, "lsm run spec")?;
    let mut watch = Watch::fractions(progress, on_progress);
    let r = py.detach(|| ssdlab_lsm::run(dev, &spec, files.as_deref(), &mut |f| watch.tick("lsm", f)));
    watch.done();
    let r = r.map_err(lsm_err)?;
    Ok((to_py(py, &r.summary)?, r.series_csv, r.wall_seconds, r.interrupted))
}

/// Check a run (`device` config dict, `spec` RunSpec with generated phases) as running it
/// would; returns its estimated peak memory in bytes. Raises ConfigError.
#[pyfunction]
fn lsm_sizing(device: &Bound<'_, PyAny>, spec: &Bound<'_, PyAny>) -> PyResult<u64> {
    let dev = config_from_py(device, "[device]")?;
    let spec: RunSpec = from_py(spec, "lsm run spec")?;
    ssdlab_lsm::sizing(&dev, &spec).map_err(lsm_err)
}

/// The default RunSpec.
#[pyfunction]
fn lsm_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &RunSpec::default())
}

/// Write the phases of `spec` as workload files (`DIR/NAME.txt`, one per phase, the K-V
/// workload generator's format); returns (path, operations) per phase.
#[pyfunction]
fn lsm_generate(py: Python<'_>, spec: &Bound<'_, PyAny>, dir: PathBuf) -> PyResult<Vec<(String, u64)>> {
    let spec: RunSpec = from_py(spec, "lsm run spec")?;
    py.detach(|| {
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
            out.push((path.display().to_string(), n));
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

/// Reads without a snapshot see every sequence number.
const LATEST: u64 = u64::MAX >> 8;

#[pymethods]
impl LsmStore {
    #[new]
    fn new(device: &Bound<'_, PyAny>, lsm: &Bound<'_, PyAny>) -> PyResult<Self> {
        let dev = config_from_py(device, "[device]")?;
        let cfg: LsmConfig = from_py(lsm, "[lsm]")?;
        Ok(LsmStore { s: Store::new(dev, cfg).map_err(lsm_err)? })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> PyResult<u64> {
        let d = self.s.put(key, value).map_err(lsm_err)?;
        self.s.advance_to(d).map_err(lsm_err)?;
        Ok(d)
    }
    fn delete(&mut self, key: &[u8]) -> PyResult<u64> {
        let d = self.s.delete(key).map_err(lsm_err)?;
        self.s.advance_to(d).map_err(lsm_err)?;
        Ok(d)
    }
    #[pyo3(signature = (key, snapshot=None))]
    fn get<'py>(&mut self, py: Python<'py>, key: &[u8], snapshot: Option<u64>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let r = self.s.get_at(key, snapshot.unwrap_or(LATEST)).map_err(lsm_err)?;
        self.s.advance_to(r.done_ns).map_err(lsm_err)?;
        Ok(r.value.map(|v| PyBytes::new(py, &v)))
    }
    #[pyo3(signature = (start, end=None, limit=1000, snapshot=None))]
    fn scan<'py>(
        &mut self,
        py: Python<'py>,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        snapshot: Option<u64>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let (kv, d) = self.s.scan_at(start, end, limit, snapshot.unwrap_or(LATEST)).map_err(lsm_err)?;
        self.s.advance_to(d).map_err(lsm_err)?;
        Ok(kv.into_iter().map(|(k, v)| (PyBytes::new(py, &k), PyBytes::new(py, &v))).collect())
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
    fn advance_to(&mut self, t_ns: u64) -> PyResult<()> {
        self.s.advance_to(t_ns).map_err(lsm_err)
    }
    #[getter]
    fn now_ns(&self) -> u64 {
        self.s.now_ns()
    }
    /// Store, zone-layer and device counters, level shape and deletion persistence records.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = serde_json::json!({
            "lsm": self.s.stats(),
            "zones": self.s.fs().stats,
            "device": self.s.fs().device_counters(),
            "levels": self.s.level_shape(),
            "sst_bytes": self.s.sst_bytes(),
            "free_zones": self.s.fs().free_zones(),
            "deletes": self.s.delete_records(),
        });
        to_py(py, &v)
    }
    /// Search the NAND for deleted values (needs track_deletes).
    fn audit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.s.audit().map_err(lsm_err)?)
    }
    fn check_invariants(&self) {
        self.s.check_invariants()
    }
}

/// The RESP server's options as Python gives them (`ssdlab.serving.resp_options`).
#[derive(serde::Deserialize)]
pub(crate) struct RespOpts {
    #[serde(flatten)]
    listen: ListenArgs,
    pub(crate) quiet: bool,
    /// Keys no field took: refused (a typo would otherwise be ignored).
    #[serde(flatten)]
    unknown: std::collections::BTreeMap<String, serde_json::Value>,
}

impl RespOpts {
    /// Refuse keys of the options dict that no field took.
    pub(crate) fn check(&self, what: &str) -> PyResult<()> {
        deny_unknown(what, &self.unknown)
    }

    /// Serve `backend` with these options until SIGINT/SIGTERM (`name`: who the server is in
    /// its log lines); the final figures.
    pub(crate) fn serve(self, name: &str, backend: Box<dyn ssdlab_resp::Backend>) -> PyResult<serde_json::Value> {
        let defaults = ssdlab_resp::RespOptions::default();
        let opts = ssdlab_resp::RespOptions { name: name.into(), listen: self.listen.over(defaults.listen)?, quiet: self.quiet };
        ssdlab_resp::serve(ssdlab_resp::Server::new(backend, opts)).map_err(|e| PyOSError::new_err(e.to_string()))
    }
}

/// `ssdlab kv serve`: the LSM store (`lsm`, LsmConfig keys) on a fresh ZNS device of `device`
/// behind the RESP (Redis) protocol until SIGINT/SIGTERM. Returns the final figures: the
/// front-end's counters and the store's (write amplification, deletion persistence, audit).
/// `audit`: search the NAND for deleted values at shutdown (needs lsm.track_deletes).
#[pyfunction]
#[pyo3(signature = (device, lsm, options, audit, data=None))]
fn kv_serve<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyAny>,
    lsm: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
    audit: bool,
    data: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let dev = config_from_py(device, "[device]")?;
    let cfg: LsmConfig = from_py(lsm, "[lsm]")?;
    let o: RespOpts = from_py(options, "kv serve options")?;
    o.check("kv serve options")?;
    let backend = py.detach(|| -> ssdlab_lsm::Result<ssdlab_serve::KvBackend> {
        let made_with = serde_json::to_string(&serde_json::json!({ "device": &dev, "lsm": &cfg }))
            .map_err(|e| ssdlab_lsm::Error::Config(e.to_string()))?;
        let store = Store::new(dev, cfg)?;
        let Some(dir) = data else { return ssdlab_serve::KvBackend::new(store, audit) };
        let t0 = std::time::Instant::now();
        let (b, n) = ssdlab_serve::KvBackend::persistent(store, audit, &dir, &made_with)?;
        if !o.quiet {
            eprintln!(
                "ssdlab kv serve: {} commands replayed from {} in {:.1} s",
                n,
                dir.join("journal").display(),
                t0.elapsed().as_secs_f64()
            );
        }
        Ok(b)
    });
    let backend = backend.map_err(lsm_err)?;
    let m = py.detach(move || o.serve("ssdlab kv serve", Box::new(backend)))?;
    to_py(py, &m)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kv_serve, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_run, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_sizing, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(lsm_generate, m)?)?;
    m.add_class::<LsmStore>()?;
    Ok(())
}
