//! Errors of the FLAC layer and the library file systems. Bad input and full resources are
//! operating errors (returned); broken invariants are programmer errors (assertions).

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum FlacError {
    /// A system call failed; `what` names the object and the operation.
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    /// An argument is out of range or misaligned.
    #[error("{0}")]
    Invalid(String),
    /// The PM image is held by another process.
    #[error("{0}")]
    Busy(String),
    /// The PM image is not a FLAC image or is damaged beyond what recovery repairs.
    #[error("{0}")]
    Corrupt(String),
    /// Out of PM frames, DRAM frames, FLAC space or metadata space.
    #[error("{0}")]
    NoSpace(String),
    /// A file-system operation failed with this errno (ENOENT, EEXIST, ENOTDIR, ...).
    #[error("{1}")]
    Posix(i32, String),
}

impl FlacError {
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        FlacError::Io { what: what.into(), source }
    }

    pub fn last_os(what: impl Into<String>) -> Self {
        FlacError::Io { what: what.into(), source: io::Error::last_os_error() }
    }

    /// The errno a POSIX front-end (the LD_PRELOAD shim, the C API) reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FlacError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            FlacError::Invalid(_) => libc::EINVAL,
            FlacError::Busy(_) => libc::EBUSY,
            FlacError::Corrupt(_) => libc::EIO,
            FlacError::NoSpace(_) => libc::ENOSPC,
            FlacError::Posix(e, _) => *e,
        }
    }
}

pub type Result<T> = std::result::Result<T, FlacError>;

/// A POSIX error: `errno` with a message naming the path or descriptor.
pub fn posix<T>(errno: i32, what: impl std::fmt::Display) -> Result<T> {
    Err(FlacError::Posix(errno, format!("{what}: {}", std::io::Error::from_raw_os_error(errno))))
}
