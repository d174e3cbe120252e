//! The two link models DPUSwap rests on, and the lanes that keep modelled time.
//!
//! The source document's point is the gap between them ("RDMA us, PCIe link ns"): a host
//! request crosses PCIe to the DPU (hundreds of ns), and only a DPU-cache miss crosses the
//! network to a remote memory node (microseconds). Every operation is charged in modelled
//! nanoseconds from these models, never from the loopback TCP the nodes really use, whose
//! own tens of microseconds would hide the gap.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A link: a fixed latency per transfer plus bytes at a bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// One-way cost of a transfer before its first byte arrives (ns).
    pub latency_ns: u64,
    /// Sustained bandwidth (bytes/s).
    pub bytes_per_s: f64,
}

impl Link {
    /// Host <-> DPU: PCIe Gen4 x16 (BlueField-2 class), ~0.6 us per DMA round trip.
    pub const PCIE: Link = Link { latency_ns: 600, bytes_per_s: 16e9 };
    /// DPU <-> remote node: one-sided RDMA over 100 Gb/s, ~3 us per verb.
    pub const RDMA: Link = Link { latency_ns: 3_000, bytes_per_s: 12.5e9 };

    /// Time the link is occupied moving `bytes` (ns).
    pub fn occupancy_ns(&self, bytes: u64) -> u64 {
        (bytes as f64 * 1e9 / self.bytes_per_s).ceil() as u64
    }
    /// Latency plus occupancy: a transfer's cost on an idle link (ns).
    pub fn cost_ns(&self, bytes: u64) -> u64 {
        self.latency_ns + self.occupancy_ns(bytes)
    }
    pub fn validate(&self, name: &str) -> Result<()> {
        if !(self.bytes_per_s >= 1e6 && self.bytes_per_s.is_finite()) {
            return Err(Error::Config(format!("{name}.bytes_per_s = {}: expected at least 1e6", self.bytes_per_s)));
        }
        if self.latency_ns > 1_000_000_000 {
            return Err(Error::Config(format!("{name}.latency_ns = {}: expected at most 1 s", self.latency_ns)));
        }
        Ok(())
    }
}

/// A shared resource with a busy-until time: a link's bandwidth or a DPU core. Transfers queue
/// behind each other for the occupancy part; latency overlaps.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Lane {
    pub busy_until_ns: u64,
    pub busy_ns: u64,
}

impl Lane {
    /// Reserve `occupancy_ns` starting no earlier than `now_ns`; returns when the reservation ends.
    pub fn reserve(&mut self, now_ns: u64, occupancy_ns: u64) -> u64 {
        let start = self.busy_until_ns.max(now_ns);
        self.busy_until_ns = start + occupancy_ns;
        self.busy_ns += occupancy_ns;
        self.busy_until_ns
    }
    /// A transfer of `bytes` on `link` issued at `now_ns`: returns its completion time.
    pub fn transfer(&mut self, link: &Link, now_ns: u64, bytes: u64) -> u64 {
        self.reserve(now_ns, link.occupancy_ns(bytes)) + link.latency_ns
    }
}

/// Several identical lanes (the DPU's cores): work goes to the one free first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Lanes(pub Vec<Lane>);

impl Lanes {
    pub fn new(n: usize) -> Lanes {
        assert!(n > 0, "a lane group needs at least one lane");
        Lanes(vec![Lane::default(); n])
    }
    pub fn reserve(&mut self, now_ns: u64, occupancy_ns: u64) -> u64 {
        // Ties go to the lowest index, so the choice is deterministic.
        let i = (0..self.0.len()).min_by_key(|&i| (self.0[i].busy_until_ns.max(now_ns), i)).expect("lanes");
        self.0[i].reserve(now_ns, occupancy_ns)
    }
    pub fn busy_ns(&self) -> u64 {
        self.0.iter().map(|l| l.busy_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_queue_for_bandwidth_and_overlap_latency() {
        let l = Link { latency_ns: 1000, bytes_per_s: 1e9 };
        let mut lane = Lane::default();
        assert_eq!(lane.transfer(&l, 0, 1000), 2000);
        // The second transfer waits for the first's bytes, not its latency.
        assert_eq!(lane.transfer(&l, 0, 1000), 3000);
        assert_eq!(lane.transfer(&l, 10_000, 0), 11_000);
        assert_eq!(lane.busy_ns, 2000);
    }

    #[test]
    fn lanes_pick_the_first_free() {
        let mut c = Lanes::new(2);
        assert_eq!(c.reserve(0, 100), 100);
        assert_eq!(c.reserve(0, 100), 100);
        assert_eq!(c.reserve(0, 100), 200);
    }
}
