//! Errors a user of the vSSD layer can cause. Broken invariants panic instead.

#[derive(Debug, thiserror::Error)]
pub enum VssdError {
    /// A configuration or spec value out of range (names the key and what is valid).
    #[error("{0}")]
    Config(String),
    /// `alloc_virtual_ssd` cannot be satisfied with the free channels, dies or soft-planes.
    #[error("cannot allocate: {0}")]
    NoResources(String),
    /// A call the log-structured API does not allow (unknown vSSD or block, a write not at the
    /// block's write pointer, a read past it, a length not in write units).
    #[error("{0}")]
    Api(String),
    /// A die has no free erase block left for a vSSD that is entitled to one: bad blocks have
    /// used up the die's reserve.
    #[error("worn out: {0}")]
    WornOut(String),
    /// Rebuilding the maps from OOB records found something a crash cannot explain.
    #[error("recovery: {0}")]
    Recovery(String),
    /// The open-channel device refused a command.
    #[error("device: {0}")]
    Device(#[from] ssdlab_core::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, VssdError>;
