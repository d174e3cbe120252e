//! `ssdlab cache serve`: the memcached text protocol in front of ssdlab-cache's hybrid flash
//! cache running data-backed on an emulated (FDP) SSD, so real memcached clients store and
//! read values whose bytes go through the DRAM tier, the SOC's buckets and the LOC's regions
//! on the device. See docs/case-studies/fdp-cache.md, "Serving real clients".
//!
//! - [`proto`]: command-line parsing and limits (no I/O);
//! - [`server`]: a protocol on ssdlab's async server core (crates/server: connection
//!   limits, idle rules, loopback rule, clean shutdown on SIGINT/SIGTERM), the cache behind
//!   one lock, stats;
//! - [`fuzzing`]: a session of untrusted bytes on a small cache (fuzz targets, corpus runs).

#![forbid(unsafe_code)]

pub mod fuzzing;
pub mod proto;
pub mod server;

pub use server::{serve, serve_on, MemcachedOptions, Server};
