//! ssdlab's RESP (Redis protocol) front-end: any key-value store behind a [`Backend`] served to
//! real Redis clients (redis-cli, redis-benchmark, redis-py, ...) on ssdlab's async server core
//! (crates/server: connection limits, deadlines, loopback rule, clean shutdown).
//!
//! - [`proto`]: RESP2 request parsing (multibulk and inline, pipelined) and reply encoding,
//!   with redis-server's limits and error texts;
//! - [`commands`]: strings (GET, SET with NX/XX/GET/EX/PX/EXAT/PXAT/KEEPTTL, MGET, MSET, INCR,
//!   INCRBYFLOAT, APPEND, GETRANGE, SETRANGE, ...), hashes (HSET, HGET, HGETALL, HINCRBY, HKEYS,
//!   ...), sorted sets (ZADD, ZRANGE in all its forms, ZRANK, ZCOUNT, ZINCRBY, ...), keys (DEL,
//!   EXISTS, TYPE, KEYS, SCAN, RENAME, RANDOMKEY, DBSIZE, FLUSHDB), expiry times (EXPIRE and its
//!   kin, TTL, PERSIST: an expired key is deleted through the store) and the connection and
//!   server commands clients send on their own (PING, TIME, SELECT 0, CONFIG GET, COMMAND,
//!   CLIENT, INFO, QUIT), answered as Redis 7.0 answers; values carry their type (and expiry
//!   time) in their first stored bytes; no lists, sets or streams;
//! - [`ldouble`]: C's x87 `long double` in software, for INCRBYFLOAT's exact Redis answers;
//! - [`server`]: the [`ssdlab_server::Protocol`] and `serve`;
//! - [`fuzzing`]: a session of untrusted bytes on the in-memory store (fuzz targets, corpus runs).
//!
//! Users: `ssdlab kv serve` (the LSM store of crates/lsm on an emulated ZNS SSD) and `ssdlab uio
//! kv-serve` (a UIO device's host); their backends are crates/serve's lsm.rs and uio.rs.

#![forbid(unsafe_code)]

pub mod commands;
pub mod error;
pub mod fuzzing;
pub mod ldouble;
pub mod proto;
pub mod server;

pub use error::{ReplyError, StoreError};
pub use server::{serve, serve_on, RespOptions, Server};

/// Keys with their stored values, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// What a store offers the RESP front-end. Calls come one at a time (the server holds a lock
/// around each command), so a command made of several calls (INCR, SETNX, SET ... GET) is
/// atomic, as in Redis. Long commands are the exception: an MGET of more than
/// [`commands::CHUNK`] keys and FLUSHALL/FLUSHDB let other clients' commands run between
/// chunks of that many keys (as Redis's lazy free lets clients on while a flush frees memory). Errors are one line of text ([`StoreError`]), sent to the client as `-ERR <text>`.
pub trait Backend: Send + 'static {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Remove `key`; true if it was there.
    fn del(&mut self, key: &[u8]) -> Result<bool, StoreError>;
    fn exists(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.get(key)?.is_some())
    }
    /// How many keys are stored (DBSIZE).
    fn key_count(&mut self) -> Result<u64, StoreError>;
    /// Up to `limit` keys in byte order, strictly after `after` (from the first with None):
    /// what SCAN walks. Stores that cannot list their keys leave the default.
    fn keys_after(&mut self, _after: Option<&[u8]>, _limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        Err(StoreError::new("SCAN is not supported by this store"))
    }
    /// Up to `limit` keys after `after` with their stored values, in byte order (fewer only at
    /// the end): the walk that finds the expiry times of keys stored before the server
    /// started. The default reads each key that [`Backend::keys_after`] lists.
    fn entries_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Entries, StoreError> {
        let mut out = vec![];
        for k in self.keys_after(after, limit)? {
            if let Some(v) = self.get(&k)? {
                out.push((k, v));
            }
        }
        Ok(out)
    }
    /// Remove every key (FLUSHDB, FLUSHALL).
    fn clear(&mut self) -> Result<(), StoreError>;
    /// Remove up to `limit` keys; true once no key is left. FLUSHALL calls it again and again,
    /// letting other clients' commands run in between, so a big store does not stop everyone
    /// while it empties. Stores that cannot clear in parts keep the default: all at once.
    fn clear_some(&mut self, _limit: usize) -> Result<bool, StoreError> {
        self.clear().map(|()| true)
    }
    /// Change the stored bytes of `key` in place (an empty vector when it is not there; `f`
    /// leaves it empty to store nothing): APPEND. `f` returns its error before changing anything. The
    /// default reads the value, changes it and writes it back; a store that can change a value
    /// where it lies saves those copies (APPEND to a long value is then as cheap as to a
    /// short one).
    fn update(&mut self, key: &[u8], f: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), StoreError>) -> Result<(), StoreError> {
        let mut v = self.get(key)?.unwrap_or_default();
        f(&mut v)?;
        if v.is_empty() {
            return Ok(());
        }
        self.set(key, &v)
    }
    /// The largest value the store takes (SET of a larger one is refused before it is stored).
    fn max_value_bytes(&self) -> usize;
    /// Wall-clock time since the server started, before each batch of commands (and before the
    /// expiry timer deletes keys that are due): stores with a simulated clock move it forward
    /// (background work due by then runs).
    fn tick(&mut self, _now_ns: u64) -> Result<(), StoreError> {
        Ok(())
    }
    /// Run a connection's pipelined store operations (what its GET and SET commands, already
    /// parsed, read and write), one answer each, in their order. Operations on one key take
    /// effect in their order; a store that can keep several in flight (a device's queues)
    /// overlaps the rest. The default runs them one by one.
    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Vec<Result<BatchDone, StoreError>> {
        one_by_one(self, ops)
    }
    /// The store's figures: INFO's `# ssdlab` section and the metrics written at shutdown.
    fn metrics(&mut self) -> serde_json::Value;
    /// Checks too slow for INFO that the store runs once, when the server has stopped (e.g. a
    /// search of the NAND for deleted values); they go into the final figures as `closing`.
    fn closing(&mut self) -> Result<serde_json::Value, StoreError> {
        Ok(serde_json::Value::Null)
    }
}

/// A batch run one operation at a time through the store's get, set and del: what
/// [`Backend::batch`] does unless a store overlaps them.
pub fn one_by_one<B: Backend + ?Sized>(store: &mut B, ops: &[BatchOp<'_>]) -> Vec<Result<BatchDone, StoreError>> {
    ops.iter()
        .map(|op| match *op {
            BatchOp::Get(k) => store.get(k).map(BatchDone::Got),
            BatchOp::Set(k, v) => store.set(k, v).map(|()| BatchDone::Set),
            BatchOp::Del(k) => store.del(k).map(BatchDone::Deleted),
        })
        .collect()
}

/// One store operation of a batch (see [`Backend::batch`]): read a key's stored bytes, store
/// them, remove the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp<'a> {
    Get(&'a [u8]),
    Set(&'a [u8], &'a [u8]),
    Del(&'a [u8]),
}

/// A [`BatchOp`]'s answer: the bytes read (None: no such key), stored, removed (true if the
/// key was there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchDone {
    Got(Option<Vec<u8>>),
    Set,
    Deleted(bool),
}

/// A store in memory: a quick RESP server without a device, and the reference store of the
/// front-end's tests.
#[derive(Debug, Default)]
pub struct MemoryStore {
    pub map: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    /// 0: 512 MiB (Redis's default proto-max-bulk-len).
    pub max_value_bytes: usize,
}

impl Backend for MemoryStore {
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map.get(k).cloned())
    }
    fn set(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
        self.map.insert(k.to_vec(), v.to_vec());
        Ok(())
    }
    fn del(&mut self, k: &[u8]) -> Result<bool, StoreError> {
        Ok(self.map.remove(k).is_some())
    }
    fn key_count(&mut self) -> Result<u64, StoreError> {
        Ok(self.map.len() as u64)
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        self.map.clear();
        Ok(())
    }
    fn clear_some(&mut self, limit: usize) -> Result<bool, StoreError> {
        for _ in 0..limit {
            if self.map.pop_first().is_none() {
                break;
            }
        }
        Ok(self.map.is_empty())
    }
    fn update(&mut self, k: &[u8], f: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), StoreError>) -> Result<(), StoreError> {
        match self.map.get_mut(k) {
            Some(v) => f(v),
            None => {
                let mut v = vec![];
                f(&mut v)?;
                if !v.is_empty() {
                    self.map.insert(k.to_vec(), v);
                }
                Ok(())
            }
        }
    }
    fn max_value_bytes(&self) -> usize {
        if self.max_value_bytes == 0 {
            proto::BULK_MAX_BYTES
        } else {
            self.max_value_bytes
        }
    }
    fn metrics(&mut self) -> serde_json::Value {
        serde_json::json!({ "keys": self.map.len() })
    }
    fn keys_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        use std::ops::Bound;
        let lo = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(self.map.range::<[u8], _>((lo, Bound::Unbounded)).take(limit).map(|(k, _)| k.clone()).collect())
    }
    fn entries_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Entries, StoreError> {
        use std::ops::Bound;
        let lo = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(self.map.range::<[u8], _>((lo, Bound::Unbounded)).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}
