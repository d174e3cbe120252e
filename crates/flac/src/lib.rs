//! ssdlab-flac: the flac case study. FLAC (FAST'24, "Optimizing File Systems on Heterogeneous
//! Memory by Integrating DRAM Cache with Virtual Memory Management") gives file systems one
//! virtual space over DRAM and persistent memory, moves data by remapping pages instead of
//! copying them, protects shared pages with copy-on-write, flushes without locks and loads
//! asynchronously on a miss. This crate emulates it in user space on Linux.

pub mod apps;
pub mod attach_alt;
pub mod bench;
pub mod cow;
pub mod crash;
pub mod dram;
pub mod error;
pub mod flac;
pub mod frames;
pub mod fs;
pub mod kcost;
pub mod micro;
pub mod pm;
pub mod run;
pub mod sys;

pub use error::{FlacError, Result};
pub use flac::{AttachMode, Buffer, Flac, FlacConfig, Loc, PflushHandle, StatsSnapshot, Xfer};
pub use pm::cost::PmCost;
pub use pm::log::Tx;
pub use pm::Format;
