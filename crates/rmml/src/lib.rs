//! dpuswap: a compressed remote-memory swap space managed on a DPU (seed 000, section 3).
//!
//! - [`rmml`]: the remote memory management layer: 1 MiB block map, block groups, lz4/zstd
//!   compression with per-block headers and packing, reclamation, load balancing, DPU cache.
//! - [`node`]: the remote memory node service (in-process or over TCP).
//! - [`link`]: the PCIe and RDMA link models and modelled time.
//! - Baselines on the same [`device::SwapDevice`] interface: [`infiniswap`] (4 KiB pages in
//!   remote slabs) and [`znswap`] (swap slots on the emulated ZNS SSD).
//! - [`paging`]: a userfaultfd region whose pages swap to any backend under a memory budget;
//!   [`workload`]: the key-value, sort and fio-style workloads; [`experiment`]: one measured run.
//! - [`export`]: any backend as a disk of ssdlab's NBD server (`ssdlab rmml serve`).

// The stats are one `json!` literal of many keys.
#![recursion_limit = "256"]

pub mod cache;
pub mod codec;
pub mod config;
pub mod device;
pub mod error;
pub mod experiment;
pub mod export;
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

/// A latency histogram in ns: 1 ns to an hour, 3 significant digits.
pub(crate) fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// A latency histogram's count, mean, median, p99 and maximum, as the stats report them.
pub(crate) fn percentiles(h: &hdrhistogram::Histogram<u64>) -> serde_json::Value {
    serde_json::json!({"count": h.len(), "mean": h.mean(), "p50": h.value_at_quantile(0.5), "p99": h.value_at_quantile(0.99), "max": h.max()})
}
