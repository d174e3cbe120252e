//! `ssdlab._native.SpiFlash`: the SPI NOR emulator (crates/spi) for Python; ssdlab.spi wraps it.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_serve::serprog::{self, SerprogOptions, Server};
use ssdlab_spi::parts::{self, TimingMode};
use ssdlab_spi::{CutAt, Flash, Options, StuckBit, WearOut};

use crate::convert::{from_py, to_py};

fn spi_err(e: ssdlab_spi::Error) -> PyErr {
    match e {
        ssdlab_spi::Error::Invalid(m) => PyValueError::new_err(m),
        ssdlab_spi::Error::Io(m) => PyOSError::new_err(m),
    }
}

fn serprog_err(e: serprog::Error) -> PyErr {
    match e {
        serprog::Error::Chip(e) => spi_err(e),
        serprog::Error::Serve(e) => PyOSError::new_err(e.to_string()),
        serprog::Error::Io(m) => PyOSError::new_err(m),
    }
}

#[pyclass(module = "ssdlab._native")]
struct SpiFlash {
    flash: Flash,
}

#[pymethods]
impl SpiFlash {
    #[new]
    #[pyo3(signature = (chip, image=None, timing="typical", clock_hz=8_000_000, stuck_bits=Vec::new(), erase_fail_after=None, unique_id=None, trace=None, power_seed=0, wear_out="counted", endurance_cycles=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        chip: &str,
        image: Option<PathBuf>,
        timing: &str,
        clock_hz: u32,
        stuck_bits: Vec<(u32, u8, bool)>,
        erase_fail_after: Option<u32>,
        unique_id: Option<[u8; 8]>,
        trace: Option<PathBuf>,
        power_seed: u64,
        wear_out: &str,
        endurance_cycles: Option<u32>,
    ) -> PyResult<SpiFlash> {
        let part =
            parts::part(chip).ok_or_else(|| PyValueError::new_err(format!("unknown chip {chip:?}; valid: {}", parts::NAMES.join(", "))))?;
        let timing = TimingMode::parse(timing).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let stuck_bits = stuck_bits.into_iter().map(|(addr, bit, value)| StuckBit { addr, bit, value }).collect();
        let wear_out = WearOut::parse(wear_out).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let opts = Options { timing, clock_hz, stuck_bits, erase_fail_after, unique_id, power_seed, wear_out, endurance_cycles };
        let mut flash = Flash::new(part, image.as_deref(), opts).map_err(spi_err)?;
        if let Some(t) = trace {
            flash.trace_to(&t).map_err(spi_err)?;
        }
        flash.set_source("python");
        Ok(SpiFlash { flash })
    }

    fn transfer<'py>(&mut self, py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.flash.transfer(data))
    }

    fn power_cut(&mut self) {
        self.flash.power_cut();
    }

    /// Plan a cut at the `frame`-th frame from now or at simulated time `at_ns` (one of them).
    #[pyo3(signature = (frame=None, at_ns=None))]
    fn schedule_power_cut(&mut self, frame: Option<u64>, at_ns: Option<u64>) -> PyResult<()> {
        let at = match (frame, at_ns) {
            (Some(n), None) if n >= 1 => CutAt::Frame(n),
            (None, Some(t)) => CutAt::TimeNs(t),
            _ => return Err(PyValueError::new_err("give frame (>= 1) or at_ns, not both")),
        };
        self.flash.schedule_power_cut(at);
        Ok(())
    }

    fn cancel_power_cut(&mut self) {
        self.flash.cancel_power_cut();
    }

    fn power_up(&mut self) {
        self.flash.power_up();
    }

    #[getter]
    fn powered(&self) -> bool {
        self.flash.powered()
    }

    #[getter]
    fn frames_begun(&self) -> u64 {
        self.flash.frames_begun()
    }

    fn last_power_cut<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.flash.last_power_cut())
    }

    fn advance(&mut self, ns: u64) {
        self.flash.advance(ns);
    }

    #[getter]
    fn now_ns(&self) -> u64 {
        self.flash.now_ns()
    }
    #[getter]
    fn busy(&self) -> bool {
        self.flash.busy()
    }
    #[getter]
    fn busy_until_ns(&self) -> u64 {
        self.flash.busy_until_ns()
    }
    #[getter]
    fn clock_hz(&self) -> u32 {
        self.flash.clock_hz()
    }
    #[setter]
    fn set_clock_hz(&mut self, hz: u32) -> PyResult<()> {
        self.flash.set_clock_hz(hz).map_err(spi_err)
    }
    fn set_wp(&mut self, high: bool) {
        self.flash.set_wp(high);
    }
    fn erase_counts(&self) -> Vec<u32> {
        self.flash.erase_counts().to_vec()
    }
    fn sectors_beyond_endurance(&self) -> usize {
        self.flash.sectors_beyond_endurance()
    }
    /// Command, byte and busy-time counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self.flash.stats())
    }
    fn registers(&self) -> (u8, u8, u8) {
        let r = self.flash.registers();
        (r[0], r[1], r[2])
    }
    fn protected_range(&self) -> (u32, u32) {
        let r = self.flash.protected_range();
        (r.start, r.end)
    }
    fn contents<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.flash.contents())
    }
    fn flush(&mut self) -> PyResult<()> {
        self.flash.flush().map_err(spi_err)
    }

    /// Serve flashrom's serprog on `listen` until a signal handler raises (Ctrl-C, or SIGTERM
    /// when the caller installed a handler). `on_listening(addr)` is called once bound. The GIL is
    /// released while serving; signals are checked every 100 ms. Returns a summary.
    #[pyo3(signature = (listen, on_listening=None, allow_remote=false, evict_idle_after_s=5.0, idle_timeout_s=0.0, quiet=false))]
    #[allow(clippy::too_many_arguments)] // the Python keyword arguments, one each
    fn serve<'py>(
        &mut self,
        py: Python<'py>,
        listen: &str,
        on_listening: Option<Bound<'py, PyAny>>,
        allow_remote: bool,
        evict_idle_after_s: f64,
        idle_timeout_s: f64,
        quiet: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let secs = |flag: &str, s: f64| ssdlab_server::never_if_zero(flag, s).map_err(|e| PyValueError::new_err(e.to_string()));
        let defaults = SerprogOptions::new(listen);
        let opts = SerprogOptions {
            listen: ssdlab_server::ListenOptions {
                allow_remote,
                evict_idle_after: secs("--evict-idle-after", evict_idle_after_s)?,
                idle_timeout: secs("--idle-timeout", idle_timeout_s)?,
                ..defaults.listen
            },
            quiet,
            ..defaults
        };
        let server = Server::bind_with(opts).map_err(serprog_err)?;
        let addr = server.local_addr().map_err(serprog_err)?.to_string();
        if let Some(cb) = on_listening {
            cb.call1((addr,))?;
        }
        let pending: Mutex<Option<PyErr>> = Mutex::new(None);
        let flash = &mut self.flash;
        let res = py.detach(|| {
            let stop = || {
                Python::attach(|py| match py.check_signals() {
                    Ok(()) => false,
                    Err(e) => {
                        if let Ok(mut p) = pending.lock() {
                            *p = Some(e);
                        }
                        true
                    }
                })
            };
            server.run(flash, &stop)
        });
        let sum = res.map_err(serprog_err)?;
        // Ctrl-C (or SIGTERM turned into KeyboardInterrupt) is a clean stop; other errors a
        // signal handler raised go to the caller.
        if let Some(e) = pending.into_inner().ok().flatten() {
            if !e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                return Err(e);
            }
        }
        to_py(py, &sum)
    }
}

/// The presets: name, vendor, size, IDs, timings, datasheet.
#[pyfunction]
fn spi_chips(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let list: Vec<serde_json::Value> = parts::NAMES
        .iter()
        .filter_map(|n| parts::part(n))
        .map(|p| {
            serde_json::json!({
                "name": p.name, "vendor": p.vendor, "size_bytes": p.size_bytes, "page_bytes": p.page_bytes,
                "jedec_id": format!("{:02X} {:02X} {:02X}", p.jedec_id[0], p.jedec_id[1], p.jedec_id[2]),
                "device_id": format!("{:02X}", p.device_id),
                "page_program_us": [p.typ.page_program_ns / 1000, p.max.page_program_ns / 1000],
                "sector_erase_ms": [p.typ.sector_erase_ns / 1_000_000, p.max.sector_erase_ns / 1_000_000],
                "block64_erase_ms": [p.typ.block64_erase_ns / 1_000_000, p.max.block64_erase_ns / 1_000_000],
                "chip_erase_s": [p.typ.chip_erase_ns as f64 / 1e9, p.max.chip_erase_ns as f64 / 1e9],
                "unique_id": p.has_unique_id, "dual_output": p.dual_output, "quad_output": p.quad_output,
                "datasheet": p.datasheet,
            })
        })
        .collect();
    to_py(py, &list)
}

/// A littlefs power-cut campaign (crates/spi-fw) with the settings in `config` (a dict, keys as
/// in experiments/spi-nor/campaign.toml); `progress(done, total)` is called now and then.
/// Returns the report.
#[pyfunction]
#[pyo3(signature = (config, progress=None))]
fn spi_campaign<'py>(py: Python<'py>, config: &Bound<'py, PyAny>, progress: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let c: ssdlab_spi_fw::Config = from_py(config, "spi campaign")?;
    let mut err: Option<PyErr> = None;
    let r = ssdlab_spi_fw::run(&c, &mut |done, total| {
        if let (Some(p), None) = (&progress, &err) {
            if let Err(e) = p.call1((done, total)) {
                err = Some(e);
            }
        }
    })
    .map_err(PyValueError::new_err)?;
    if let Some(e) = err {
        return Err(e);
    }
    to_py(py, &r)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SpiFlash>()?;
    m.add_function(wrap_pyfunction!(spi_campaign, m)?)?;
    m.add_function(wrap_pyfunction!(spi_chips, m)?)?;
    Ok(())
}
