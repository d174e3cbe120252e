//! ssdlab-flac: the flac case study. FLAC (FAST'24, "Optimizing File Systems on Heterogeneous
//! Memory by Integrating DRAM Cache with Virtual Memory Management") gives file systems one
//! virtual space over DRAM and persistent memory, moves data by remapping pages instead of
//! copying them, protects shared pages with copy-on-write, flushes without locks and loads
//! asynchronously on a miss. This crate emulates it in user space on Linux.

pub mod crash;
pub mod error;
pub mod frames;
pub mod pm;
pub mod sys;

pub use error::{FlacError, Result};
