//! The LSM store behind the RESP front-end (`ssdlab kv serve`): Redis clients' SET, GET and DEL
//! become the store's puts, lookups and tombstones on the emulated ZNS SSD, so deletes issued
//! by real clients are tracked to their physical erasure like those of a simulated run.
//!
//! Time: the store's clock follows the wall clock since the server started (requests are
//! submitted when they arrive; compactions and TTL-driven FADE compactions due by then run),
//! so a served session is not byte-identical to another; `ssdlab kv run` is.

use serde_json::Value;
use ssdlab_resp::Backend;

use crate::format::MAX_VALUE_BYTES;
use crate::{Error, Store};

/// Keys are read this many at a time by DBSIZE and FLUSHDB.
const SCAN_BATCH: usize = 4096;

pub struct KvBackend {
    store: Store,
    /// At shutdown, search the NAND for deleted values (needs `track_deletes`).
    audit: bool,
}

impl KvBackend {
    pub fn new(store: Store, audit: bool) -> Result<KvBackend, Error> {
        if audit && !store.config().track_deletes {
            return Err(Error::Config("the audit of deleted values needs lsm.track_deletes = true".into()));
        }
        Ok(KvBackend { store, audit })
    }
    pub fn store(&self) -> &Store {
        &self.store
    }
    /// Every live key, in order.
    fn keys(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut keys: Vec<Vec<u8>> = vec![];
        loop {
            let batch = self.keys_from(keys.last().map(|k| k.as_slice()), SCAN_BATCH)?;
            let n = batch.len();
            keys.extend(batch);
            if n < SCAN_BATCH {
                return Ok(keys);
            }
        }
    }

    /// Up to `limit` live keys after `after` (from the first with None), in order.
    fn keys_from(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, String> {
        // The smallest key after `after`: `after` with a zero byte appended.
        let start = after.map(|k| [k, &[0]].concat()).unwrap_or_else(|| vec![0]);
        let (pairs, _) = self.store.scan(&start, None, limit).map_err(msg)?;
        Ok(pairs.into_iter().map(|(k, _)| k).collect())
    }
}

fn msg(e: Error) -> String {
    e.to_string().replace(['\r', '\n'], " ")
}

impl Backend for KvBackend {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.store.get(key).map_err(msg)?.value)
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.store.put(key, value).map_err(msg)?;
        Ok(())
    }
    fn del(&mut self, key: &[u8]) -> Result<bool, String> {
        // Redis's DEL of a missing key changes nothing: no tombstone for it either.
        if self.store.get(key).map_err(msg)?.value.is_none() {
            return Ok(false);
        }
        self.store.delete(key).map_err(msg)?;
        Ok(true)
    }
    fn key_count(&mut self) -> Result<u64, String> {
        Ok(self.keys()?.len() as u64)
    }
    fn keys_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, String> {
        self.keys_from(after, limit)
    }
    fn clear(&mut self) -> Result<(), String> {
        for k in self.keys()? {
            self.store.delete(&k).map_err(msg)?;
        }
        Ok(())
    }
    fn max_value_bytes(&self) -> usize {
        MAX_VALUE_BYTES
    }
    fn tick(&mut self, now_ns: u64) -> Result<(), String> {
        let t = now_ns.max(self.store.now_ns());
        self.store.advance_to(t).map_err(msg)
    }
    fn metrics(&mut self) -> Value {
        crate::run::served_summary(&self.store)
    }
    fn closing(&mut self) -> Result<Value, String> {
        if !self.audit {
            return Ok(Value::Null);
        }
        let audit = self.store.audit().map_err(msg)?;
        Ok(serde_json::json!({ "audit": audit }))
    }
}
