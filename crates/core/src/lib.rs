//! ssdlab core: an emulated flash device, layer by layer.
//!
//! - [`media`]: NAND geometry, per-block wear and bad blocks, OOB, data store;
//! - [`engine`]: simulated time (per-die and per-channel timelines);
//! - [`driver`]: host drivers, which run a workload on a device in simulated-time order;
//! - [`ftl`]: personalities (the conventional page-mapped FTL; FDP, ZNS and open-channel build
//!   on the same media and engine);
//! - [`metrics`]: one measurement schema for every run;
//! - [`workload`]: synthetic generators and trace replay;
//! - [`device`]: a configured device, its runs, reports and snapshots;
//! - [`sizing`]: what a config gives and costs, checked before the device is built.

pub mod analytic;
pub mod config;
pub mod device;
pub mod driver;
pub mod engine;
pub mod error;
pub mod ftl;
pub mod media;
pub mod metrics;
pub mod sizing;
pub mod workload;

pub use config::Config;
pub use device::{Device, RunReport};
pub use error::{Error, Result};
