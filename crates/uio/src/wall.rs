//! Wall-clock latency through real processes, the document's own timing: put and get from
//! host 0 on UIO's path (host -> its device -> NET -> the key's device) and on the traditional
//! one (the host routes in software and names the key's device; local keys go straight to the
//! UTL, GME bypassed; a remote key's device hands the request to its host's daemon, into that
//! host's memory, which submits it back through its queues). Media in RAM (NAND timing off),
//! as the document's simulator ran.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::{Gme, Path as DataPath};
use crate::device::{HostDevice, TraditionalHost};
use crate::repro::{latency_histogram, letter_value, LatencyPlan, LatencyRow};

/// What a wall-clock run talks to: host 0's device on a UIO system and on a traditional one,
/// both of `devices` devices.
pub struct WallTargets<'a> {
    pub uio_socket: &'a Path,
    pub traditional_socket: &'a Path,
    pub devices: u16,
}

trait Kv {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), String>;
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, String>;
    /// The last command's simulated latency as its device accounted it.
    fn sim_ns(&self) -> u64;
}

impl Kv for HostDevice {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), String> {
        HostDevice::put(self, k, v)
    }
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, String> {
        HostDevice::get(self, k)
    }
    fn sim_ns(&self) -> u64 {
        self.last_sim_ns
    }
}

impl Kv for TraditionalHost {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), String> {
        TraditionalHost::put(self, k, v)
    }
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, String> {
        TraditionalHost::get(self, k)
    }
    fn sim_ns(&self) -> u64 {
        self.last_sim_ns()
    }
}

/// The wall-clock rows and, for the same commands, the simulated latency the devices
/// accounted (their links and flash time; see `crate::device::DeviceStore`).
pub struct WallRows {
    pub rows: Vec<LatencyRow>,
    pub sim_rows: Vec<LatencyRow>,
}

/// Latency rows (`nand_timing` false) of `plan`'s value sizes on both paths, measured in wall
/// time from host 0, the paths taking turns per value size; beside them the same commands'
/// simulated latency from their completions.
pub fn wall_latency(plan: &LatencyPlan, t: &WallTargets) -> Result<WallRows, String> {
    let timeout = Duration::from_secs(10);
    let n = t.devices;
    let mut uio = HostDevice::attach(t.uio_socket, timeout).map_err(|e| format!("UIO host: {e}"))?;
    let local = HostDevice::attach(t.traditional_socket, timeout).map_err(|e| format!("traditional host: {e}"))?;
    let mut trad = TraditionalHost::new(0, n, local);
    let gme = Gme::uniform(n, 1024);
    let (mut rows, mut sim_rows) = (vec![], vec![]);
    for &vb in &plan.value_bytes {
        let (local_keys, remote_keys) = plan.keys(&gme, vb as u64 + 1000);
        let value = letter_value(vb, vb as u64);
        for (path, kv) in [(DataPath::Uio, &mut uio as &mut dyn Kv), (DataPath::Traditional, &mut trad as &mut dyn Kv)] {
            for (remote, keys) in [(false, &local_keys), (true, &remote_keys)] {
                let (mut put, mut get) = (latency_histogram(), latency_histogram());
                let (mut sim_put, mut sim_get) = (latency_histogram(), latency_histogram());
                for k in keys {
                    let t0 = Instant::now();
                    kv.put(k, &value)?;
                    put.record((t0.elapsed().as_nanos() as u64).max(1)).expect("in range");
                    sim_put.record(kv.sim_ns().max(1)).expect("in range");
                }
                for k in keys {
                    let t0 = Instant::now();
                    let got = kv.get(k)?;
                    get.record((t0.elapsed().as_nanos() as u64).max(1)).expect("in range");
                    sim_get.record(kv.sim_ns().max(1)).expect("in range");
                    if got.as_deref() != Some(&value[..]) {
                        return Err(format!("key {} read back wrong on the {path:?} path", String::from_utf8_lossy(k)));
                    }
                }
                rows.extend(LatencyRow::pair(false, vb, remote, path, &put, &get));
                sim_rows.extend(LatencyRow::pair(false, vb, remote, path, &sim_put, &sim_get));
            }
        }
    }
    Ok(WallRows { rows, sim_rows })
}
