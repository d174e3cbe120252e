//! What PM costs. The PM here is a file in DRAM, so without a model it would be as fast as
//! the DRAM cache in front of it and neither caching, asynchronous loading nor lock-free
//! flushing would matter. The model gives PM a read latency and read and write bandwidths.
//!
//! Defaults: one Intel Optane DC persistent memory module, from Izraelevitz et al., *Basic
//! Performance Measurements of the Intel Optane DC Persistent Memory Module* (arXiv:1903.05714,
//! 2019): random load latency 305 ns (DRAM: 81 ns), bandwidth 6.6 GB/s read and 2.3 GB/s write
//! for a single module (six interleaved modules: 39.4 and 13.9 GB/s).
//!
//! The device is two lanes (read, write), each busy until a time, the analytic-timeline
//! approach ssdlab's SSD engine uses: an access of `n` bytes occupies its lane for `n / bw`
//! from the later of now and the lane's free time, and a read completes one latency after its
//! transfer. The accessing thread does its real copy, then waits (spinning, as a CPU stalled on
//! PM would) until the modelled completion; a copy slower than the model is not slowed further.
//! So concurrent threads share PM's bandwidth, and a background flusher competes with
//! foreground reads and writes as on the real device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PmCost {
    /// Model PM's cost (on by default). Off: PM is as fast as the DRAM it is emulated in.
    pub enabled: bool,
    /// Latency added to each read access (ns).
    pub read_latency_ns: u64,
    /// Read bandwidth (GB/s, 10^9 bytes per second).
    pub read_gb_s: f64,
    /// Write bandwidth (GB/s).
    pub write_gb_s: f64,
}

impl Default for PmCost {
    fn default() -> Self {
        PmCost { enabled: true, read_latency_ns: 305, read_gb_s: 6.6, write_gb_s: 2.3 }
    }
}

impl PmCost {
    pub fn off() -> Self {
        PmCost { enabled: false, ..PmCost::default() }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.read_gb_s > 0.0 && self.read_gb_s < 10_000.0) {
            return Err(format!("cost.read_gb_s must be in (0, 10000), got {}", self.read_gb_s));
        }
        if !(self.write_gb_s > 0.0 && self.write_gb_s < 10_000.0) {
            return Err(format!("cost.write_gb_s must be in (0, 10000), got {}", self.write_gb_s));
        }
        if self.read_latency_ns > 1_000_000 {
            return Err(format!("cost.read_latency_ns must be at most 1000000, got {}", self.read_latency_ns));
        }
        Ok(())
    }

    /// Lane occupancy of `bytes` at `gb_s` (ns).
    pub fn transfer_ns(bytes: u64, gb_s: f64) -> u64 {
        (bytes as f64 / gb_s).ceil() as u64
    }
}

/// When an access completes (ns since the lanes' origin); 0 = nothing to wait for.
#[derive(Clone, Copy, Debug, Default)]
#[must_use = "a PM access must be waited for"]
pub struct Ticket(u64);

/// The PM device's two lanes and what they were asked to do.
pub struct Lanes {
    cost: PmCost,
    origin: Instant,
    read_free_ns: AtomicU64,
    write_free_ns: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    /// Time threads spent waiting for the model beyond their real copy (ns).
    pub stall_ns: AtomicU64,
}

/// Waits shorter than this spin; longer ones sleep most of the way (a sleeping thread leaves
/// its core to others, which matters on a 2-core machine with a background flusher).
const SPIN_NS: u64 = 200_000;

impl Lanes {
    pub fn new(cost: PmCost) -> Self {
        Lanes {
            cost,
            origin: Instant::now(),
            read_free_ns: AtomicU64::new(0),
            write_free_ns: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            read_ops: AtomicU64::new(0),
            write_ops: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
        }
    }

    pub fn cost(&self) -> &PmCost {
        &self.cost
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Occupy `lane` for `busy_ns` from the later of now and its free time; returns the end.
    fn reserve(&self, lane: &AtomicU64, busy_ns: u64) -> u64 {
        let now = self.now_ns();
        let mut cur = lane.load(Ordering::Relaxed);
        loop {
            let end = cur.max(now) + busy_ns;
            match lane.compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return end,
                Err(v) => cur = v,
            }
        }
    }

    /// Start a read of `bytes` from PM.
    pub fn read(&self, bytes: u64) -> Ticket {
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.read_ops.fetch_add(1, Ordering::Relaxed);
        if !self.cost.enabled || bytes == 0 {
            return Ticket(0);
        }
        let end = self.reserve(&self.read_free_ns, PmCost::transfer_ns(bytes, self.cost.read_gb_s));
        Ticket(end + self.cost.read_latency_ns)
    }

    /// Start a write of `bytes` to PM.
    pub fn write(&self, bytes: u64) -> Ticket {
        self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.write_ops.fetch_add(1, Ordering::Relaxed);
        if !self.cost.enabled || bytes == 0 {
            return Ticket(0);
        }
        Ticket(self.reserve(&self.write_free_ns, PmCost::transfer_ns(bytes, self.cost.write_gb_s)))
    }

    /// Wait until the access completes.
    pub fn wait(&self, t: Ticket) {
        if t.0 == 0 {
            return;
        }
        let mut now = self.now_ns();
        if now >= t.0 {
            return;
        }
        self.stall_ns.fetch_add(t.0 - now, Ordering::Relaxed);
        if t.0 - now > SPIN_NS {
            std::thread::sleep(Duration::from_nanos(t.0 - now - SPIN_NS / 2));
        }
        while now < t.0 {
            std::hint::spin_loop();
            now = self.now_ns();
        }
    }

    /// Model a whole access now: start it and wait for it (for accesses with no real copy to
    /// overlap, e.g. an application reading PM pages FLAC mapped into its buffer).
    pub fn read_now(&self, bytes: u64) {
        let t = self.read(bytes);
        self.wait(t);
    }

    pub fn write_now(&self, bytes: u64) {
        let t = self.write(bytes);
        self.wait(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_shared_and_latency_added() {
        let lanes = Lanes::new(PmCost { enabled: true, read_latency_ns: 1000, read_gb_s: 1.0, write_gb_s: 0.5 });
        let t0 = Instant::now();
        // Two 1 MB reads back to back on a 1 GB/s lane: the second ends ~2 ms in, plus latency.
        let a = lanes.read(1_000_000);
        let b = lanes.read(1_000_000);
        assert!(b.0 >= a.0 + 1_000_000 - 10, "{a:?} {b:?}");
        lanes.wait(b);
        let el = t0.elapsed();
        assert!(el >= Duration::from_micros(2_000), "{el:?}");
        // Writes at 0.5 GB/s: 500 KB take 1 ms.
        let t1 = Instant::now();
        lanes.write_now(500_000);
        assert!(t1.elapsed() >= Duration::from_micros(1_000));
        assert_eq!(lanes.read_bytes.load(Ordering::Relaxed), 2_000_000);
    }

    #[test]
    fn disabled_model_never_waits() {
        let lanes = Lanes::new(PmCost::off());
        let t = lanes.write(1 << 30);
        assert_eq!(t.0, 0);
        lanes.wait(t);
        assert_eq!(lanes.stall_ns.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn validation_names_the_key() {
        let c = PmCost { read_gb_s: 0.0, ..PmCost::default() };
        assert!(c.validate().unwrap_err().contains("cost.read_gb_s"));
    }
}
