//! Errors a user can cause (bad config, bad trace, device full or worn out).
//! Broken invariants are programmer errors and panic instead.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration problem: where it is and what would be valid.
    #[error("{0}")]
    Config(ConfigError),
    /// A trace line that cannot be parsed (`line` 0: the trace as a whole).
    #[error("{}", trace_text(file, *line, msg))]
    Trace { file: String, line: u64, msg: String },
    /// A host command outside the device or otherwise malformed.
    #[error("invalid command: {0}")]
    Command(String),
    /// A command the device rejects with an NVMe status (FDP, ZNS and open-channel commands).
    #[error("{0}: {1}")]
    Nvme(Status, String),
    /// The device has no free blocks left (every spare block is worn out or bad).
    #[error("device worn out: {0}")]
    WornOut(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("snapshot: {0}")]
    Snapshot(String),
}

fn trace_text(file: &str, line: u64, msg: &str) -> String {
    if line == 0 {
        format!("{file}: {msg}")
    } else {
        format!("{file}:{line}: {msg}")
    }
}

/// NVMe completion statuses the emulated devices return, with their (status code type,
/// status code) values from the NVMe base and command-set specifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Status {
    /// Generic 0x02: a field of the command is invalid (e.g. a placement identifier naming no
    /// reclaim group or handle).
    InvalidField,
    /// Generic 0x80: LBA out of range.
    LbaOutOfRange,
    /// Generic 0x29: an FDP command on a device whose FDP is disabled.
    FdpDisabled,
    /// Generic 0x2A: a Reclaim Unit Handle Update names an invalid placement identifier.
    InvalidPlacementHandleList,
    /// Command specific (ZNS) 0xB8: the write crosses the zone's capacity.
    ZoneBoundaryError,
    /// 0xB9: the zone is full.
    ZoneIsFull,
    /// 0xBA: the zone is read-only.
    ZoneIsReadOnly,
    /// 0xBB: the zone is offline.
    ZoneIsOffline,
    /// 0xBC: the write is not at the zone's write pointer.
    ZoneInvalidWrite,
    /// 0xBD: no active-zone resource left.
    TooManyActiveZones,
    /// 0xBE: no open-zone resource left.
    TooManyOpenZones,
    /// 0xBF: the zone's state does not allow the requested transition.
    InvalidZoneStateTransition,
    /// Open-channel 0xC0 (media error): the chunk is offline.
    OfflineChunk,
    /// Open-channel 0xC1 (media error): the chunk cannot be reset (it is free).
    InvalidReset,
    /// Open-channel 0xF2 (media error): the write is not at the chunk's write pointer.
    OutOfOrderWrite,
}

impl Status {
    /// (status code type, status code).
    pub fn code(self) -> (u8, u8) {
        match self {
            Status::InvalidField => (0, 0x02),
            Status::LbaOutOfRange => (0, 0x80),
            Status::FdpDisabled => (0, 0x29),
            Status::InvalidPlacementHandleList => (0, 0x2A),
            Status::ZoneBoundaryError => (1, 0xB8),
            Status::ZoneIsFull => (1, 0xB9),
            Status::ZoneIsReadOnly => (1, 0xBA),
            Status::ZoneIsOffline => (1, 0xBB),
            Status::ZoneInvalidWrite => (1, 0xBC),
            Status::TooManyActiveZones => (1, 0xBD),
            Status::TooManyOpenZones => (1, 0xBE),
            Status::InvalidZoneStateTransition => (1, 0xBF),
            Status::OfflineChunk => (2, 0xC0),
            Status::InvalidReset => (2, 0xC1),
            Status::OutOfOrderWrite => (2, 0xF2),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Status::InvalidField => "Invalid Field in Command",
            Status::LbaOutOfRange => "LBA Out of Range",
            Status::FdpDisabled => "FDP Disabled",
            Status::InvalidPlacementHandleList => "Invalid Placement Handle List",
            Status::ZoneBoundaryError => "Zone Boundary Error",
            Status::ZoneIsFull => "Zone Is Full",
            Status::ZoneIsReadOnly => "Zone Is Read Only",
            Status::ZoneIsOffline => "Zone Is Offline",
            Status::ZoneInvalidWrite => "Zone Invalid Write",
            Status::TooManyActiveZones => "Too Many Active Zones",
            Status::TooManyOpenZones => "Too Many Open Zones",
            Status::InvalidZoneStateTransition => "Invalid Zone State Transition",
            Status::OfflineChunk => "Offline Chunk",
            Status::InvalidReset => "Invalid Reset",
            Status::OutOfOrderWrite => "Out of Order Write",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (sct, sc) = self.code();
        write!(f, "{} (SCT {sct:#x}, SC {sc:#04x})", self.name())
    }
}

/// A configuration error with enough context to fix it.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: Option<String>,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub msg: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            _ => {}
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        write!(f, "{}", self.msg)
    }
}

impl Error {
    /// A command rejected with an NVMe status.
    pub fn nvme(status: Status, msg: impl Into<String>) -> Self {
        Error::Nvme(status, msg.into())
    }
    pub fn config(key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config(ConfigError { file: None, line: None, key: Some(key.into()), msg: msg.into() })
    }
}

pub type Result<T> = std::result::Result<T, Error>;
