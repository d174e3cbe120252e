//! The LSM store behind the RESP front-end (`ssdlab kv serve`): Redis clients' SET, GET and DEL
//! become the store's puts, lookups and tombstones on the emulated ZNS SSD, so deletes issued
//! by real clients are tracked to their physical erasure like those of a simulated run.
//!
//! Time: the store's clock follows the wall clock since the server started (requests are
//! submitted when they arrive; compactions and TTL-driven FADE compactions due by then run),
//! so a served session is not byte-identical to another; `ssdlab kv run` is.
//!
//! Expiry: the RESP front-end deletes a key whose expiry time has passed with the same DEL as a
//! client's (crates/resp/src/commands/expiry.rs), so an expired key is a tombstone tracked to
//! its erasure; its time is stored in the value's header, so it is journaled with the SET that
//! stored it and survives a restart.
//!
//! Persistence: with a journal ([`ssdlab_lsm::journal`], `--data DIR`) every command is recorded with
//! the simulated time it ran at, and a restarted server replays them into a fresh device; the
//! clock then goes on from where the journal left it.

use std::path::Path;

use serde_json::Value;
use ssdlab_resp::{Backend, Entries, StoreError};

use ssdlab_lsm::format::MAX_VALUE_BYTES;
use ssdlab_lsm::journal::{Command, Journal};
use ssdlab_lsm::{Error, Store};

/// Keys are read this many at a time by DBSIZE and FLUSHDB.
const SCAN_BATCH: usize = 4096;

pub struct KvBackend {
    store: Store,
    /// At shutdown, search the NAND for deleted values (needs `track_deletes`).
    audit: bool,
    journal: Option<Journal>,
    /// Simulated time at which this server started: the journal's last time (0 for a new
    /// store); the wall clock since the start is added to it.
    start_ns: u64,
}

impl KvBackend {
    pub fn new(store: Store, audit: bool) -> Result<KvBackend, Error> {
        if audit && !store.config().track_deletes {
            return Err(Error::Config("the audit of deleted values needs lsm.track_deletes = true".into()));
        }
        Ok(KvBackend { store, audit, journal: None, start_ns: 0 })
    }

    /// A backend whose store persists in `dir`: the journal there (made with the same
    /// `config`, any stable text describing the device and store) is replayed into `store`, a
    /// fresh store, and every command from now on is added to it. Returns the backend and the
    /// number of commands replayed.
    pub fn persistent(store: Store, audit: bool, dir: &Path, config: &str) -> Result<(KvBackend, u64), Error> {
        let mut b = KvBackend::new(store, audit)?;
        let mut n = 0u64;
        let journal = Journal::open(dir, config, |cmd| {
            n += 1;
            // A command that failed when it first ran fails again the same way: its error was
            // the client's answer then, and is not the replay's.
            let _ = b.apply(&cmd);
            Ok(())
        })?;
        b.start_ns = b.store.now_ns();
        b.journal = Some(journal);
        Ok((b, n))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Run one command on the store (no journal).
    fn apply(&mut self, cmd: &Command) -> Result<Answer, StoreError> {
        Ok(match cmd {
            Command::Tick(t) => {
                let t = (*t).max(self.store.now_ns());
                self.store.advance_to(t).map_err(msg)?;
                Answer::None
            }
            Command::Get(k) => Answer::Value(self.store.get(k).map_err(msg)?.value),
            Command::Set(k, v) => {
                // New data only with room past the reserve that deletes and compactions need:
                // a full device keeps serving reads and deletes, and deletes give room back.
                if !self.store.make_room().map_err(msg)? {
                    return Err(full(&self.store));
                }
                self.store.put(k, v).map_err(|e| match e {
                    Error::NoSpace(_) => full(&self.store),
                    e => msg(e),
                })?;
                Answer::None
            }
            Command::Del(k) => {
                // Redis's DEL of a missing key changes nothing: no tombstone for it either.
                if self.store.get(k).map_err(msg)?.value.is_none() {
                    Answer::Bool(false)
                } else {
                    self.store.delete(k).map_err(msg)?;
                    Answer::Bool(true)
                }
            }
            Command::KeysAfter(after, limit) => Answer::Entries(self.entries_from(after.as_deref(), *limit as usize)?),
            Command::KeyCount => Answer::Count(self.keys()?.len() as u64),
            Command::Clear => {
                for k in self.keys()? {
                    self.store.delete(&k).map_err(msg)?;
                }
                Answer::None
            }
            Command::ClearSome(limit) => {
                for k in self.keys_from(None, *limit as usize)? {
                    self.store.delete(&k).map_err(msg)?;
                }
                Answer::Bool(self.keys_from(None, 1)?.is_empty())
            }
        })
    }

    /// Run a command and journal it once it succeeded; a write is on disk before it returns.
    fn run(&mut self, cmd: Command) -> Result<Answer, StoreError> {
        let a = self.apply(&cmd)?;
        if let Some(j) = self.journal.as_mut() {
            j.record(&cmd).map_err(msg)?;
        }
        Ok(a)
    }

    /// Every live key, in order.
    fn keys(&mut self) -> Result<Vec<Vec<u8>>, StoreError> {
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
    fn keys_from(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.entries_from(after, limit)?.into_iter().map(|(k, _)| k).collect())
    }

    /// [`KvBackend::keys_from`] with the values.
    fn entries_from(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Entries, StoreError> {
        // The smallest key after `after`: `after` with a zero byte appended.
        let start = after.map(|k| [k, &[0]].concat()).unwrap_or_else(|| vec![0]);
        let (pairs, _) = self.store.scan(&start, None, limit).map_err(msg)?;
        Ok(pairs)
    }
}

/// What a command gives back.
enum Answer {
    None,
    Value(Option<Vec<u8>>),
    Bool(bool),
    Entries(Entries),
    Count(u64),
}

/// Redis's answer to a write past `maxmemory` (its `-OOM` error class), with the device's state.
fn full(store: &Store) -> StoreError {
    let fs = store.fs();
    StoreError(format!(
        "OOM command not allowed when the device is full ({} of {} zones empty, {} kept for compactions and deletes; {} MiB live); DEL or FLUSHALL gives room back",
        fs.free_zones(),
        fs.zone_count(),
        store.reserve_zones(),
        fs.live_bytes() >> 20
    ))
}

fn msg(e: Error) -> StoreError {
    StoreError(e.to_string().replace(['\r', '\n'], " "))
}

impl Backend for KvBackend {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.run(Command::Get(key.to_vec()))? {
            Answer::Value(v) => Ok(v),
            _ => unreachable!("GET answers a value"),
        }
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.run(Command::Set(key.to_vec(), value.to_vec())).map(|_| ())
    }
    fn del(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        match self.run(Command::Del(key.to_vec()))? {
            Answer::Bool(b) => Ok(b),
            _ => unreachable!("DEL answers whether the key was there"),
        }
    }
    fn key_count(&mut self) -> Result<u64, StoreError> {
        match self.run(Command::KeyCount)? {
            Answer::Count(n) => Ok(n),
            _ => unreachable!("DBSIZE answers a count"),
        }
    }
    fn keys_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.entries_after(after, limit)?.into_iter().map(|(k, _)| k).collect())
    }
    /// The same store scan as SCAN's (one journal record), with the values: the walk that
    /// finds the expiry times at start.
    fn entries_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Entries, StoreError> {
        match self.run(Command::KeysAfter(after.map(|k| k.to_vec()), limit as u64))? {
            Answer::Entries(e) => Ok(e),
            _ => unreachable!("SCAN answers keys"),
        }
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        self.run(Command::Clear).map(|_| ())
    }
    /// FLUSHALL in parts: `limit` deletes (tombstones) at a time, one journal record each.
    fn clear_some(&mut self, limit: usize) -> Result<bool, StoreError> {
        match self.run(Command::ClearSome(limit as u64))? {
            Answer::Bool(empty) => Ok(empty),
            _ => unreachable!("a partial clear answers whether the store is empty"),
        }
    }
    fn max_value_bytes(&self) -> usize {
        MAX_VALUE_BYTES
    }
    fn tick(&mut self, now_ns: u64) -> Result<(), StoreError> {
        let t = self.start_ns.saturating_add(now_ns);
        if t > self.store.now_ns() {
            self.run(Command::Tick(t))?;
        }
        Ok(())
    }
    fn metrics(&mut self) -> Value {
        ssdlab_lsm::run::served_summary(&self.store)
    }
    fn closing(&mut self) -> Result<Value, StoreError> {
        if !self.audit {
            return Ok(Value::Null);
        }
        let audit = self.store.audit().map_err(msg)?;
        Ok(serde_json::json!({ "audit": audit }))
    }
}
