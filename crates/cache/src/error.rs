//! Errors of the cache layer: bad configuration or input (operating errors, returned), and
//! device errors passed up from ssdlab-core.

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("config: {0}")]
    Config(String),
    #[error("trace {path}:{line}: {msg}")]
    Trace { path: String, line: u64, msg: String },
    #[error("{0}")]
    Input(String),
    #[error("device: {0}")]
    Device(#[from] ssdlab_core::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, CacheError>;
