//! `dev.zns`: NVMe Zoned Namespace commands (Zone Append, Zone Management Send/Receive) and
//! failure injection.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};

use crate::convert::to_py;
use crate::errors::{core_err, NvmeError};
use crate::native::NativeDevice;

/// Zone layout and resources (Identify Namespace, zoned command set).
#[derive(IntoPyObject)]
struct ZoneInfo {
    zones: u32,
    zone_size: u64,
    zone_capacity: u64,
    max_open: u32,
    max_active: u32,
    conventional_zones: u32,
}

/// Commands of a ZNS device (`dev.zns`).
#[pyclass(module = "ssdlab._native", frozen)]
pub struct Zns {
    pub(crate) dev: Py<NativeDevice>,
}

/// A kebab-case name (`"implicitly-open"`) as the core's enum, or a ValueError listing `valid`.
fn parse_name<T: serde::de::DeserializeOwned>(name: &str, what: &str, valid: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(name.into()))
        .map_err(|_| PyValueError::new_err(format!("unknown {what} {name:?}; valid: {valid}")))
}

const STATES: &str = "empty, implicitly-open, explicitly-open, closed, full, read-only, offline, not-write-pointer";

impl Zns {
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ssdlab_core::ftl::zns::Zns, u64) -> PyResult<R>) -> PyResult<R> {
        let mut d = self.dev.bind(py).try_borrow_mut()?;
        let now = d.dev.now_ns();
        let z = d.dev.zns_mut().ok_or_else(|| NvmeError::new_err("not a ZNS device"))?;
        f(z, now)
    }
}

#[pymethods]
impl Zns {
    /// Zone count, zone size and capacity (logical blocks), the open and active limits, and
    /// the number of conventional zones (the first ones: random writes, no write pointer).
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let i = self.with(py, |z, _| {
            Ok(ZoneInfo {
                zones: z.zone_count(),
                zone_size: z.zone_size(),
                zone_capacity: z.zone_capacity(),
                max_open: z.max_open(),
                max_active: z.max_active(),
                conventional_zones: z.conventional_zones(),
            })
        })?;
        Ok(i.into_pyobject(py)?.into_any())
    }

    /// Zone Append: write `data` (whole sectors) at the write pointer of the zone starting at
    /// LBA `zslba`; returns the LBA written.
    #[pyo3(signature = (zslba, data, fua=false))]
    fn append(&self, py: Python<'_>, zslba: u64, data: &[u8], fua: bool) -> PyResult<u64> {
        let sb = self.dev.bind(py).try_borrow()?.dev.config().geometry.sector_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(sb) {
            return Err(PyValueError::new_err(format!(
                "append of {} bytes: must be a non-zero multiple of the {sb}-byte sector",
                data.len()
            )));
        }
        let sectors = u32::try_from(data.len() / sb).map_err(|_| PyValueError::new_err("append too large"))?;
        self.with(py, |z, now| Ok(z.write_zone(zslba, sectors, Some(data), true, fua, now).map_err(core_err)?.0))
    }

    /// Zone Management Send: `action` open, close, finish, reset or offline, on the zone
    /// starting at `lba` or (`select_all`) on every zone it applies to; returns the
    /// completion time (ns).
    #[pyo3(signature = (lba, action, select_all=false))]
    fn action(&self, py: Python<'_>, lba: u64, action: &str, select_all: bool) -> PyResult<u64> {
        let a: ZoneAction = parse_name(action, "zone action", "open, close, finish, reset, offline")?;
        self.with(py, |z, now| z.zone_action(lba, a, select_all, now).map_err(core_err))
    }

    /// Report Zones from `lba`: descriptors (index, zone_type, state, zslba, zcap, wp,
    /// reset_count) of the zones in `filter` ("all" or a state), at most `max_zones`.
    #[pyo3(signature = (lba=0, filter="all", max_zones=None))]
    fn report<'py>(&self, py: Python<'py>, lba: u64, filter: &str, max_zones: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        let f: Option<ZoneState> = match filter {
            "all" => None,
            other => Some(parse_name(other, "zone filter", &format!("all, {STATES}"))?),
        };
        let r = self.with(py, |z, _| z.report(lba, f, max_zones.unwrap_or(usize::MAX)).map_err(core_err))?;
        to_py(py, &r)
    }

    /// Failure injection: put zone number `zone` in state `state` ("read-only" or "offline").
    fn inject_state(&self, py: Python<'_>, zone: usize, state: &str) -> PyResult<()> {
        let st: ZoneState = parse_name(state, "zone state", STATES)?;
        self.with(py, |z, _| z.inject_zone_state(zone, st).map_err(core_err))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.with(py, |z, _| Ok(format!("<ssdlab ZNS commands: {} zones of {} blocks>", z.zone_count(), z.zone_size())))
            .unwrap_or_else(|_| "<ssdlab ZNS commands>".into())
    }
}
