//! Errors of the store, its zone layer and its workloads.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// A configuration key is out of range (the message names it).
    #[error("{0}")]
    Config(String),
    /// The device refused a command (worn out, zone errors) or could not be built.
    #[error("device: {0}")]
    Device(#[from] ssdlab_core::Error),
    /// The zone layer has no room left for a write (every zone holds live data).
    #[error("out of space: {0}")]
    NoSpace(String),
    /// Bytes read back from the device do not parse or fail their checksum.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A workload file line that is not in the K-V workload generator's format.
    #[error("{file}:{line}: {msg}")]
    Workload { file: String, line: u64, msg: String },
    /// A request the store cannot serve (key or value too large, bad range).
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
