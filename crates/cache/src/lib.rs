//! ssdlab-cache: the fdp-cache case study. A CacheLib-style hybrid flash cache, a DRAM tier
//! (LRU by bytes) in front of a small-object cache (set-associative 4 KiB buckets) and a
//! large-object cache (log-structured regions), doing its I/O on an emulated FDP SSD, so the
//! effect of segregating the two engines onto different reclaim unit handles can be measured.
//!
//! - [`config`]: cache sizes and policies; [`placement`]: the placement-handle allocator (the
//!   only code that knows about FDP); [`flash`]: device I/O and latency histograms;
//! - [`dram`], [`soc`] ([`buckets`]: its compact index), [`loc`], [`admission`]: the tiers and
//!   engines; [`cache`]: the whole; [`sizing`]: a run's memory, estimated before it starts;
//! - [`item`], [`values`]: a data-backed cache's items (on-device formats, DRAM bytes), for
//!   the memcached front-end (crate ssdlab-memcached);
//! - [`workload`]: generator and presets (Zipf ranks from the core's table, `ssdlab_core::workload::zipf`); [`trace`]: trace replay and converters;
//! - [`run`]: measured runs; [`model`]: Theorems 1-3 of the paper.

#![forbid(unsafe_code)]

pub mod admission;
pub mod buckets;
pub mod cache;
pub mod config;
pub mod dram;
pub mod error;
pub mod flash;
pub mod hash;
pub mod item;
pub mod loc;
pub mod model;
pub mod placement;
pub mod run;
pub mod sizing;
pub mod soc;
pub mod trace;
pub mod values;
pub mod workload;

pub use cache::{HybridCache, Outcome, Tier};
pub use config::CacheConfig;
pub use error::{CacheError, Result};
pub use run::{run, run_checkpointed, Checkpointing, RunResult, RunSpec};
pub use workload::{Generator, Request, WorkloadSpec};
