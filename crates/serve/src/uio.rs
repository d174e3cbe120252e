//! A host's RESP front-end on a UIO device (`ssdlab uio kv-serve`): Redis clients' SET and GET
//! become put and get commands through the host's queues to its device, which routes each key
//! (GME) to itself or a peer (NET). The device's command set is put and get: commands that need
//! more (DEL, DBSIZE, FLUSHDB) answer an error saying so.

use serde_json::json;
use ssdlab_resp::{Backend, StoreError};

use ssdlab_uio::device::HostDevice;

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
    fn max_value_bytes(&self) -> usize {
        MAX_VALUE_BYTES
    }
    fn metrics(&mut self) -> serde_json::Value {
        json!({"puts": self.dev.puts, "gets": self.dev.gets})
    }
}
