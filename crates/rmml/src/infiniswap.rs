//! The Infiniswap-like baseline: page-granular remote memory (Gu et al., NSDI'17).
//!
//! The swap device is cut into slabs; a slab is mapped to a remote node when first written,
//! choosing the one with more free memory of two drawn at random (Infiniswap's power of two
//! choices). Every request is one RDMA transfer of exactly its pages: no compression, no cache,
//! no reclamation (a discarded page keeps its remote memory, as Infiniswap's slabs do).
//! The host drives the NIC itself, so a request pays the host's per-request cost, PCIe to the
//! NIC and the network.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::device::{check, PageBits, SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::link::{Lane, Link};
use crate::node::MemoryNode;
use crate::pool::Pool;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InfiniswapConfig {
    pub capacity_bytes: u64,
    /// Remote slab size (Infiniswap's default is 1 GiB; smaller slabs spread small runs).
    pub slab_bytes: u64,
    pub pcie: Link,
    pub rdma: Link,
    /// Host software per request (posting the verb, polling its completion), ns.
    pub host_request_ns: u64,
    pub seed: u64,
}

impl Default for InfiniswapConfig {
    fn default() -> Self {
        InfiniswapConfig {
            capacity_bytes: 1 << 30,
            slab_bytes: 64 << 20,
            pcie: Link::PCIE,
            rdma: Link::RDMA,
            host_request_ns: 200,
            seed: 42,
        }
    }
}

impl InfiniswapConfig {
    pub fn validate(&self) -> Result<()> {
        if self.slab_bytes < PAGE_BYTES || !self.slab_bytes.is_multiple_of(PAGE_BYTES) || self.slab_bytes > crate::node::MAX_IO_BYTES as u64
        {
            return Err(Error::Config(format!("infiniswap.slab_bytes = {}: expected a multiple of 4096 up to 256 MiB", self.slab_bytes)));
        }
        if self.capacity_bytes == 0 || !self.capacity_bytes.is_multiple_of(self.slab_bytes) {
            return Err(Error::Config(format!(
                "infiniswap.capacity_bytes = {}: expected a positive multiple of slab_bytes",
                self.capacity_bytes
            )));
        }
        self.pcie.validate("infiniswap.pcie")?;
        self.rdma.validate("infiniswap.rdma")
    }
}

pub struct Infiniswap {
    cfg: InfiniswapConfig,
    pool: Pool,
    /// (node, region) per slab.
    slabs: Vec<Option<(usize, u64)>>,
    written: PageBits,
    pcie: Lane,
    rdma: Lane,
    rng: Pcg64,
    reads: u64,
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
    remote_ops: u64,
}

impl Infiniswap {
    pub fn new(cfg: InfiniswapConfig, nodes: Vec<Box<dyn MemoryNode>>) -> Result<Infiniswap> {
        cfg.validate()?;
        let pool = Pool::new(nodes)?;
        let slabs = (cfg.capacity_bytes / cfg.slab_bytes) as usize;
        Ok(Infiniswap {
            written: PageBits::new(cfg.capacity_bytes / PAGE_BYTES),
            slabs: vec![None; slabs],
            pcie: Lane::default(),
            rdma: Lane::default(),
            rng: Pcg64::seed_from_u64(cfg.seed),
            reads: 0,
            writes: 0,
            read_bytes: 0,
            write_bytes: 0,
            remote_ops: 0,
            pool,
            cfg,
        })
    }

    fn map_slab(&mut self, s: usize) -> Result<(usize, u64)> {
        if let Some(m) = self.slabs[s] {
            return Ok(m);
        }
        let k = self.pool.len();
        let a = self.rng.gen_range(0..k);
        let b = if k > 1 { (a + self.rng.gen_range(1..k)) % k } else { a };
        let node = self
            .pool
            .pick_two(self.cfg.slab_bytes, a, b)
            .ok_or_else(|| Error::NoSpace(format!("no node has a free {}-byte slab", self.cfg.slab_bytes)))?;
        let region = self.pool.nodes[node].alloc(self.cfg.slab_bytes)?;
        self.pool.count_alloc(node, self.cfg.slab_bytes);
        self.slabs[s] = Some((node, region));
        Ok((node, region))
    }

    /// Split a request at slab boundaries: (slab, offset in slab, bytes).
    fn pieces(&self, offset: u64, len: u64) -> Vec<(usize, u64, usize)> {
        let sb = self.cfg.slab_bytes;
        let mut v = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let n = (sb - at % sb).min(offset + len - at);
            v.push(((at / sb) as usize, at % sb, n as usize));
            at += n;
        }
        v
    }

    fn node_error(&mut self, node: usize, e: Error) -> Error {
        if matches!(e, Error::Lost(_) | Error::Node { .. }) {
            self.pool.failed(node, &e);
            // Every slab on that node is gone: Infiniswap has no copy elsewhere.
            for s in self.slabs.iter_mut() {
                if matches!(s, Some((n, _)) if *n == node) {
                    *s = None;
                }
            }
        }
        e
    }
}

impl SwapDevice for Infiniswap {
    fn kind(&self) -> &'static str {
        "infiniswap"
    }
    fn capacity_bytes(&self) -> u64 {
        self.cfg.capacity_bytes
    }

    fn write(&mut self, offset: u64, data: &[u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, data.len() as u64)?;
        self.writes += 1;
        self.write_bytes += data.len() as u64;
        let t = self.pcie.transfer(&self.cfg.pcie, now_ns + self.cfg.host_request_ns, data.len() as u64);
        let mut done = t;
        let mut at = 0;
        for (s, off, n) in self.pieces(offset, data.len() as u64) {
            let (node, region) = self.map_slab(s)?;
            if let Err(e) = self.pool.nodes[node].write(region, off, &data[at..at + n]) {
                return Err(self.node_error(node, e));
            }
            self.remote_ops += 1;
            done = done.max(self.rdma.transfer(&self.cfg.rdma, t, n as u64));
            at += n;
        }
        for p in offset / PAGE_BYTES..(offset + data.len() as u64) / PAGE_BYTES {
            self.written.set(p, true);
        }
        Ok(done)
    }

    fn read(&mut self, offset: u64, out: &mut [u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, out.len() as u64)?;
        self.reads += 1;
        self.read_bytes += out.len() as u64;
        let t = now_ns + self.cfg.host_request_ns + self.cfg.pcie.latency_ns;
        let mut ready = t;
        let mut at = 0;
        let p0 = offset / PAGE_BYTES;
        for (s, off, n) in self.pieces(offset, out.len() as u64) {
            let piece = &mut out[at..at + n];
            let first = p0 + at as u64 / PAGE_BYTES;
            at += n;
            if !self.written.any(first, first + n as u64 / PAGE_BYTES) {
                piece.fill(0);
                continue;
            }
            let Some((node, region)) = self.slabs[s] else {
                return Err(Error::Lost(format!("bytes {offset}+{}: their slab's node failed", out.len())));
            };
            if let Err(e) = self.pool.nodes[node].read(region, off, piece) {
                return Err(self.node_error(node, e));
            }
            self.remote_ops += 1;
            ready = ready.max(self.rdma.transfer(&self.cfg.rdma, t, n as u64));
        }
        Ok(self.pcie.transfer(&self.cfg.pcie, ready, out.len() as u64))
    }

    fn discard(&mut self, offset: u64, len: u64, now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, len)?;
        Ok(now_ns + self.cfg.host_request_ns)
    }

    fn stats(&mut self) -> serde_json::Value {
        let mapped = self.slabs.iter().filter(|s| s.is_some()).count() as u64;
        json!({
            "kind": "infiniswap", "slab_bytes": self.cfg.slab_bytes,
            "reads": self.reads, "writes": self.writes, "read_bytes": self.read_bytes, "write_bytes": self.write_bytes,
            "remote_ops": self.remote_ops, "slabs_mapped": mapped, "remote_region_bytes": mapped * self.cfg.slab_bytes,
            "nodes": self.pool.stats(),
            "pcie_busy_ns": self.pcie.busy_ns, "rdma_busy_ns": self.rdma.busy_ns,
        })
    }
}
