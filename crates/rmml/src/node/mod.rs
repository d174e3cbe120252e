//! Remote memory nodes: the service that lends its spare memory to the RMML.
//!
//! A node keeps regions (contiguous byte ranges it allocated) and serves reads and writes into
//! them; it reports its capacity and free memory. The same [`Store`] runs in-process
//! ([`LocalNode`], for benches and unit tests) and behind TCP in a separate process
//! ([`TcpNode`] here; the server, `ssdlab rmml node`, is crates/serve's `rmml::node`). Region handles carry the node's instance
//! number, drawn at start: a node that restarted refuses every handle of its previous life,
//! so stale handles never alias new data.

mod client;
pub mod proto;
mod store;

pub use client::TcpNode;
pub use proto::MAX_IO_BYTES;
pub use store::{Refusal, Store};

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// What a node reports about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeStat {
    /// Drawn when the node starts; changes when it restarts.
    pub instance: u32,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub regions: u64,
}

impl NodeStat {
    pub fn free_bytes(&self) -> u64 {
        self.capacity_bytes - self.used_bytes
    }
}

/// The interface the RMML and the Infiniswap-like baseline use for one node.
pub trait MemoryNode: Send {
    /// Where the node is (for messages).
    fn addr(&self) -> String;
    fn stat(&mut self) -> Result<NodeStat>;
    /// Allocate a region of `len` bytes (zero-filled); returns its handle.
    fn alloc(&mut self, len: u64) -> Result<u64>;
    fn free(&mut self, region: u64) -> Result<()>;
    fn write(&mut self, region: u64, offset: u64, data: &[u8]) -> Result<()>;
    fn read(&mut self, region: u64, offset: u64, out: &mut [u8]) -> Result<()>;
}

/// A node in this process: a [`Store`] called directly.
pub struct LocalNode {
    pub store: Store,
    name: String,
}

impl LocalNode {
    pub fn new(capacity_bytes: u64, instance: u32) -> LocalNode {
        LocalNode { store: Store::new(capacity_bytes, instance), name: format!("local#{instance}") }
    }
}

impl MemoryNode for LocalNode {
    fn addr(&self) -> String {
        self.name.clone()
    }
    fn stat(&mut self) -> Result<NodeStat> {
        Ok(self.store.stat())
    }
    fn alloc(&mut self, len: u64) -> Result<u64> {
        self.store.alloc(len).map_err(|e| e.into_error(0, &self.name))
    }
    fn free(&mut self, region: u64) -> Result<()> {
        self.store.free(region).map_err(|e| e.into_error(0, &self.name))
    }
    fn write(&mut self, region: u64, offset: u64, data: &[u8]) -> Result<()> {
        self.store.write(region, offset, data).map_err(|e| e.into_error(0, &self.name))
    }
    fn read(&mut self, region: u64, offset: u64, out: &mut [u8]) -> Result<()> {
        self.store.read(region, offset, out).map_err(|e| e.into_error(0, &self.name))
    }
}
