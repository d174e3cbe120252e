//! Errors of the RMML, its remote memory nodes, the baselines and the paging runtime.

/// What can go wrong. Operating errors (bad input, a node gone) are values; broken invariants
/// panic where they are found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value out of range, naming the key.
    #[error("{0}")]
    Config(String),
    /// An I/O request outside the device or not page-aligned.
    #[error("invalid request: {0}")]
    Request(String),
    /// A remote memory node refused a request or could not be reached.
    #[error("node {node} ({addr}): {msg}")]
    Node { node: usize, addr: String, msg: String },
    /// Remote memory is exhausted on every node that is up.
    #[error("remote memory full: {0}")]
    NoSpace(String),
    /// Data that lived on a node which restarted or went away: it cannot be read back.
    #[error("data lost: {0}")]
    Lost(String),
    /// Data read back does not match what was stored (header or checksum mismatch).
    #[error("corrupt remote block: {0}")]
    Corrupt(String),
    /// The emulated ZNS device refused a command.
    #[error("ZNS device: {0}")]
    Device(#[from] ssdlab_core::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
