//! A host's RESP front-end on a UIO device (`ssdlab uio kv-serve`): Redis clients' SET and GET
//! become put and get commands through the host's queues to its device, which routes each key
//! (GME) to itself or a peer (NET). The device's command set is put and get: commands that need
//! more (DEL, DBSIZE, FLUSHDB) answer an error saying so. A connection's pipelined GETs and
//! SETs come as a batch ([`Backend::batch`]): all submitted (up to the queue's depth), then
//! reaped, so the device and its peers work on them together.

use serde_json::json;
use ssdlab_resp::{Backend, BatchDone, BatchOp, StoreError};

use ssdlab_uio::device::{HostDevice, Reply, Request};

/// Largest value: a record must fit one UTL block (256 KiB on the case study's devices).
pub const MAX_VALUE_BYTES: usize = 240 << 10;

pub struct UioBackend {
    dev: HostDevice,
}

impl UioBackend {
    pub fn new(dev: HostDevice) -> UioBackend {
        UioBackend { dev }
    }
}

const ONLY: &str = "the UIO device has put and get only";

impl Backend for UioBackend {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.dev.get(key).map_err(StoreError)
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.dev.put(key, value).map_err(StoreError)
    }
    fn del(&mut self, _key: &[u8]) -> Result<bool, StoreError> {
        Err(ONLY.into())
    }
    fn key_count(&mut self) -> Result<u64, StoreError> {
        Err(ONLY.into())
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        Err(ONLY.into())
    }
    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Vec<Result<BatchDone, StoreError>> {
        // DEL is refused without reaching the device; the rest go through its queues together.
        let reqs: Vec<Request<'_>> = ops
            .iter()
            .filter_map(|op| match *op {
                BatchOp::Get(key) => Some(Request::Get { dest: None, key }),
                BatchOp::Set(key, value) => Some(Request::Put { dest: None, key, value }),
                BatchOp::Del(_) => None,
            })
            .collect();
        let mut done = self.dev.run_batch(&reqs).into_iter();
        ops.iter()
            .map(|op| match op {
                BatchOp::Del(_) => Err(ONLY.into()),
                _ => done.next().expect("an answer per request").map_err(StoreError).map(|r| match r {
                    Reply::Stored => BatchDone::Set,
                    Reply::Value(v) => BatchDone::Got(v),
                }),
            })
            .collect()
    }
    fn max_value_bytes(&self) -> usize {
        MAX_VALUE_BYTES
    }
    fn metrics(&mut self) -> serde_json::Value {
        json!({"puts": self.dev.puts, "gets": self.dev.gets})
    }
}
