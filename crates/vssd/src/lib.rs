//! ssdlab-vssd: the flashblox case study. Virtual SSDs with channel, die and soft-plane
//! isolation on ssdlab's open-channel device, a block-granular device-level map with 16-byte
//! OOB records and crash recovery, FlashBlox's log-structured API, wear-levelling by
//! channel/die swaps, and the applications and experiments of the document (FlashBlox,
//! FAST'17; seed 003).
//!
//! - [`config`]: the devices and the layer's settings; [`resources`]: the resource manager's
//!   bookkeeping (allocation, merging);
//! - [`flashblox`]: the vSSD layer (maps, the log-structured API, swaps and migration);
//!   [`oob`]: the OOB record; [`recovery`]: rebuilding the maps after a crash;
//! - [`limiter`]: the weighted-fair token buckets of soft-plane vSSDs; [`analysis`]: the
//!   swap-frequency model;
//! - [`apps`]: a compact log-structured KV behind a small trait, YCSB mixes, a log-structured
//!   block store (for fio-like jobs and trace replay);
//! - [`sim`]: timed multi-tenant runs; [`lifetime`]: block-level wear studies to end of life.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod apps;
pub mod config;
pub mod cost;
pub mod error;
pub mod flashblox;
pub mod lifetime;
pub mod limiter;
pub mod oob;
pub mod recovery;
pub mod resources;
pub mod sim;

pub use config::{device_config, FlashBloxConfig, SwapPair, SwapPolicy, WearConfig};
pub use error::{Result, VssdError};
pub use flashblox::{BlockApi, FlashBlox, LayoutTable, VssdIo};
pub use resources::{Isolation, Placement, Slot};
