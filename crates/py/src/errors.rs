//! The exception classes of `ssdlab._native` and how core errors map onto them.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;

use ssdlab_core::Error;

create_exception!(_native, SsdlabError, PyException, "Base class of ssdlab errors.");
create_exception!(_native, ConfigError, SsdlabError, "A configuration key is unknown, malformed or out of range.");
create_exception!(_native, TraceError, SsdlabError, "A trace line cannot be parsed.");
create_exception!(_native, DeviceError, SsdlabError, "The device cannot serve the request (worn out, full, bad command).");
create_exception!(_native, SnapshotError, SsdlabError, "A snapshot file cannot be read.");
create_exception!(
    _native,
    NvmeError,
    DeviceError,
    "The device rejected a command with an NVMe status (named in the message), or the command belongs to another personality."
);

/// A core error as the Python exception users catch.
pub(crate) fn core_err(e: Error) -> PyErr {
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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SsdlabError", py.get_type::<SsdlabError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("SnapshotError", py.get_type::<SnapshotError>())?;
    m.add("NvmeError", py.get_type::<NvmeError>())?;
    Ok(())
}
