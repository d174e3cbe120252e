//! lsm-deletion case study: an LSM-tree key-value store on ssdlab's ZNS device.
//!
//! Seed 000 (section 2) studies deletion in LSM stores on ZNS SSDs: a delete is a tombstone,
//! and the deleted data stays on flash until compactions carry the tombstone to the last
//! level *and* the zones holding the old versions are reset. This crate builds the whole
//! path so users can compare and audit deletion policies down to the NAND:
//!
//! - [`store`]: WAL, memtable, SSTables ([`sst`]: data blocks, index, Bloom filter),
//!   leveled compaction with size ratio T, sequence numbers, point tombstones, snapshots;
//! - [`zonefs`]: a ZenFS-spirit zone file layer (extents within zones, lifetime hints, zone
//!   resets, zone GC, finishing nearly full zones);
//! - [`compaction`]: the baseline (RocksDB), Lethe's FADE and the zone-aware policy;
//! - [`persist`]: deletion persistence at LSM and erase level, and the NAND audit;
//! - [`workload`]: the K-V workload generator's format (Lethe's workloads);
//! - [`run`]: measured runs in phases.

#![forbid(unsafe_code)]

pub mod compaction;
pub mod config;
pub mod error;
pub mod format;
pub mod journal;
pub mod memtable;
pub mod persist;
pub mod run;
mod search;
pub mod sst;
pub mod store;
pub mod workload;
pub mod zonefs;

pub use config::{Compression, GcMethod, LsmConfig, Policy};
pub use error::{Error, Result};
pub use run::{run, sizing, RunResult, RunSpec};
pub use store::{Lookup, Store};
