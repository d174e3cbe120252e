//! dpuswap: a compressed remote-memory swap space managed on a DPU (seed 000, section 3).
//!
//! - [`rmml`]: the remote memory management layer: 1 MiB block map, block groups, lz4/zstd
//!   compression with per-block headers and packing, reclamation, load balancing, DPU cache.
//! - [`node`]: the remote memory node service: its store, in-process, and the client of a
//!   node over TCP (the TCP server is crates/serve's, with the NBD export of the backends).
//! - [`link`]: the PCIe and RDMA link models and modelled time.
//! - Baselines on the same [`device::SwapDevice`] interface: [`infiniswap`] (4 KiB pages in
//!   remote slabs) and [`znswap`] (swap slots on the emulated ZNS SSD).
//! - [`paging`]: a userfaultfd region whose pages swap to any backend under a memory budget;
//!   [`workload`]: the key-value, sort and fio-style workloads; [`experiment`]: one measured run.

// The stats are one `json!` literal of many keys.
#![recursion_limit = "256"]

pub mod cache;
pub mod codec;
pub mod config;
pub mod device;
pub mod error;
pub mod experiment;
pub mod header;
pub mod infiniswap;
pub mod link;
pub mod node;
pub mod paging;
pub mod pool;
pub mod rmml;
mod uffd;
pub mod workload;
pub mod znswap;

pub use config::RmmlConfig;
pub use device::{SwapDevice, PAGE_BYTES};
pub use error::{Error, Result};
pub use rmml::Rmml;

pub use ssdlab_core::metrics::latency_histogram;
use ssdlab_core::metrics::{latency_summary, LatencyShape, MeanRounding};

/// The stats' latency figures: count, mean, median, p99 and maximum, in ns.
pub const LATENCY: LatencyShape =
    LatencyShape { quantiles: &[0.5, 0.99], unit: "", mean: MeanRounding::Exact, min: false, empty_is_count: false };

/// A latency histogram's figures as the stats report them ([`LATENCY`]).
pub fn percentiles(h: &hdrhistogram::Histogram<u64>) -> serde_json::Value {
    serde_json::Value::Object(latency_summary(h, &LATENCY))
}
