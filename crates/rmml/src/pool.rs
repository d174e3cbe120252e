//! The remote memory nodes as the RMML (and the Infiniswap-like baseline) sees them: which are
//! up, how full each is, and where a new region should go.

use serde_json::json;

use crate::error::{Error, Result};
use crate::node::MemoryNode;

/// Ask every node for its real free memory after this many allocations (nodes may lend memory
/// to others too; between reports the pool counts its own allocations).
const STAT_EVERY_ALLOCS: u64 = 64;

pub struct Pool {
    pub nodes: Vec<Box<dyn MemoryNode>>,
    pub up: Vec<bool>,
    capacity: Vec<u64>,
    used: Vec<u64>,
    allocs: u64,
    /// Regions allocated and freed, per node (ours only).
    pub allocated: Vec<u64>,
    pub freed: Vec<u64>,
}

impl Pool {
    pub fn new(mut nodes: Vec<Box<dyn MemoryNode>>) -> Result<Pool> {
        if nodes.is_empty() {
            return Err(Error::Config("at least one remote memory node is needed".into()));
        }
        let mut capacity = Vec::new();
        let mut used = Vec::new();
        for n in nodes.iter_mut() {
            let s = n.stat()?;
            capacity.push(s.capacity_bytes);
            used.push(s.used_bytes);
        }
        let k = nodes.len();
        Ok(Pool { nodes, up: vec![true; k], capacity, used, allocs: 0, allocated: vec![0; k], freed: vec![0; k] })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn used_fraction(&self, i: usize) -> f64 {
        self.used[i] as f64 / self.capacity[i].max(1) as f64
    }
    pub fn used_bytes(&self, i: usize) -> u64 {
        self.used[i]
    }

    /// Learn node `i`'s real capacity and usage.
    pub fn refresh(&mut self, i: usize) {
        if self.up[i] {
            if let Ok(s) = self.nodes[i].stat() {
                self.capacity[i] = s.capacity_bytes;
                self.used[i] = s.used_bytes;
            }
        }
    }

    /// The up node with the lowest used fraction that has `len` bytes free (load balancing at
    /// placement), other than `avoid`.
    pub fn pick(&self, len: u64, avoid: Option<usize>) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.up[i] && Some(i) != avoid && self.capacity[i] - self.used[i].min(self.capacity[i]) >= len)
            .min_by(|&a, &b| self.used_fraction(a).total_cmp(&self.used_fraction(b)).then(a.cmp(&b)))
    }

    /// Of two candidates drawn by `draw`, the one with more free memory (Infiniswap's power of
    /// two choices).
    pub fn pick_two(&self, len: u64, a: usize, b: usize) -> Option<usize> {
        let ok = |i: usize| self.up[i] && self.capacity[i] - self.used[i].min(self.capacity[i]) >= len;
        match (ok(a), ok(b)) {
            (true, true) => Some(if self.capacity[b] - self.used[b] > self.capacity[a] - self.used[a] { b } else { a }),
            (true, false) => Some(a),
            (false, true) => Some(b),
            (false, false) => self.pick(len, None),
        }
    }

    /// Count a region of `len` bytes the caller allocated on node `i`.
    pub fn count_alloc(&mut self, i: usize, len: u64) {
        self.used[i] += len;
        self.allocated[i] += 1;
        self.allocs += 1;
        if self.allocs.is_multiple_of(STAT_EVERY_ALLOCS) {
            for j in 0..self.nodes.len() {
                self.refresh(j);
            }
        }
    }

    pub fn free_on(&mut self, i: usize, region: u64, len: u64) -> Result<()> {
        self.used[i] = self.used[i].saturating_sub(len);
        self.freed[i] += 1;
        self.nodes[i].free(region)
    }

    /// The node answered that it lost our data or could not be reached: mark it down if it
    /// cannot be reached, and learn its real usage if it came back.
    pub fn failed(&mut self, i: usize, err: &Error) {
        match err {
            Error::Lost(_) => {
                if let Ok(s) = self.nodes[i].stat() {
                    self.used[i] = s.used_bytes;
                    self.capacity[i] = s.capacity_bytes;
                }
            }
            _ => self.up[i] = false,
        }
    }

    pub fn stats(&self) -> serde_json::Value {
        json!((0..self.nodes.len())
            .map(|i| json!({
                "addr": self.nodes[i].addr(), "up": self.up[i], "capacity_bytes": self.capacity[i],
                "used_bytes": self.used[i], "regions_allocated": self.allocated[i], "regions_freed": self.freed[i],
            }))
            .collect::<Vec<_>>())
    }
}
