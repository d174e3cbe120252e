//! What the NBD server serves: any [`Disk`]. The emulated SSD ([`crate::Backend`]) is one;
//! case studies export their own block devices through the same server (the dpuswap RMML and
//! its baselines, crates/serve/src/rmml/export.rs), so every NBD client works with them unchanged.
//!
//! Offsets and lengths are bytes of the whole disk, any alignment (the server has checked the
//! range against the export). Each command returns its completion time in the disk's modelled
//! nanoseconds; [`Disk::wall_of`] maps that time to a wall-clock instant, at which the server
//! replies in `emulated` latency mode.

use std::time::Instant;

use serde_json::Value;
use ssdlab_core::error::Status;

/// A failure of a disk (the emulated SSD's backend or any other), with a message for the user.
#[derive(Debug)]
pub struct BackendError(pub String, pub Option<Status>);

impl BackendError {
    /// A failure with a message and no NVMe status.
    pub fn msg(m: impl Into<String>) -> BackendError {
        BackendError(m.into(), None)
    }
    /// The NVMe status the device answered with, if the failure is a command the device
    /// refused (zone and FDP rules).
    pub fn status(&self) -> Option<Status> {
        self.1
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<std::io::Error> for BackendError {
    fn from(e: std::io::Error) -> Self {
        BackendError::msg(e.to_string())
    }
}

impl From<ssdlab_core::Error> for BackendError {
    fn from(e: ssdlab_core::Error) -> Self {
        let status = match &e {
            ssdlab_core::Error::Nvme(s, _) => Some(*s),
            _ => None,
        };
        BackendError(e.to_string(), status)
    }
}

pub type DiskResult<T> = std::result::Result<T, BackendError>;

pub trait Disk: Send {
    /// Bytes the disk holds.
    fn logical_bytes(&self) -> u64;
    /// Write `data` at `offset`; `fua`: durable before the reply; `placement`: an FDP
    /// placement identifier (disks without placement ignore it).
    fn write(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> DiskResult<u64>;
    fn read(&mut self, offset: u64, out: &mut [u8]) -> DiskResult<u64>;
    /// Deallocate: the contents of the range need not be kept.
    fn trim(&mut self, offset: u64, len: u64, fua: bool) -> DiskResult<u64>;
    /// Make the range read as zeros; with `no_hole` without deallocating it.
    fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool, fua: bool, placement: Option<u16>) -> DiskResult<u64>;
    fn flush(&mut self) -> DiskResult<u64>;
    /// Allocation status of `offset..offset + len`: runs of (length, is hole), at most `max`.
    /// The default reports the whole range allocated, which is always a correct answer.
    fn extents(&self, _offset: u64, len: u64, _max: usize) -> DiskResult<Vec<(u64, bool)>> {
        Ok(vec![(len, false)])
    }
    /// Make the records of the commands executed so far durable before their replies go out
    /// (a journal's group commit). Default: nothing to do.
    fn commit_journal(&mut self) -> DiskResult<()> {
        Ok(())
    }
    /// Save what a restart needs (clean shutdown). Default: nothing persists.
    fn snapshot(&mut self) -> DiskResult<()> {
        Ok(())
    }
    /// metrics.json as of now (a JSON object; the server adds its own figures under "nbd").
    fn metrics(&mut self) -> Value;
    /// timeseries.csv beside metrics.json (empty: none written).
    fn series_csv(&self) -> String {
        String::new()
    }
    /// One line for the server's "device ready" log: where the contents came from.
    fn describe(&self) -> String {
        String::new()
    }
    /// The wall-clock instant at which modelled time `t_ns` is reached.
    fn wall_of(&self, t_ns: u64) -> Instant;
    /// The emulated device behind the disk, if it is one (its FDP state, for the NVMe target).
    fn device(&self) -> Option<&ssdlab_core::Device> {
        None
    }
    /// FDP Reclaim Unit Handle Update. Disks without FDP refuse it.
    fn ruh_update(&mut self, _pids: &[u16]) -> DiskResult<u64> {
        Err(BackendError::msg("this disk has no FDP reclaim unit handles"))
    }
}
