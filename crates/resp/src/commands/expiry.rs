//! Expiry times: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT), TTL, PTTL,
//! EXPIRETIME, PEXPIRETIME, PERSIST and TIME here; SET's EX, PX, EXAT, PXAT and KEEPTTL,
//! SETEX and PSETEX in strings.rs. Times are wall-clock unix milliseconds, as Redis's.
//!
//! An expired key is deleted, not hidden: for ssdlab's stores a key that expires is a delete
//! the store must make persistent (on the LSM store of `ssdlab kv serve`, a tombstone that
//! enters its deletion tracker), so expiry goes through [`Backend::del`] like a client's DEL.
//!
//! - The time lives with the value: a stored value's type byte carries a flag, and the 8 bytes
//!   after it are the unix time in milliseconds at which the key expires (a value without the
//!   flag never expires, so values stored before times were served read as before). A store
//!   that persists its values (kv serve's journal) therefore keeps the times across a restart.
//! - Lazy expiry: any command that reads a key whose time has passed deletes it through the
//!   store first and then answers as if the key were missing, as Redis does.
//! - Active expiry: an index of (time, key) held by the server ([`Expiries`]) is checked before
//!   each batch of commands and every 100 ms by the server's housekeeping ([`housekeeping`]),
//!   which deletes up to [`CHUNK`] due keys per lock hold, so other clients run in between.
//! - The index is rebuilt after a restart by a walk of the store's keys with their values
//!   ([`Backend::entries_after`]), [`CHUNK`] keys per housekeeping step; until the walk has
//!   passed a key, reads still expire it lazily (and put it in the index). A store that cannot
//!   list its keys gets lazy expiry only.
//! - Whatever replaces a key's value drops its time as Redis does (SET without KEEPTTL, GETSET,
//!   MSET, a RENAME onto it, DEL); what changes a value in place keeps it (INCR, APPEND,
//!   SETRANGE, HSET, ZADD, ...); RENAME moves it with the value.

use std::collections::{BTreeSet, HashMap};

use super::*;

/// Which keys expire when: the index active expiry works from.
#[derive(Debug, Default)]
pub struct Expiries {
    by_key: HashMap<Vec<u8>, i64>,
    by_time: BTreeSet<(i64, Vec<u8>)>,
    walk: Walk,
}

/// How far the walk that finds the times of keys stored before the server started has come.
#[derive(Debug, Default, Clone, PartialEq)]
enum Walk {
    #[default]
    Start,
    /// The last key read.
    After(Vec<u8>),
    Done,
}

impl Expiries {
    /// `key` expires at `ttl` (unix ms), or never.
    pub fn set(&mut self, key: &[u8], ttl: Option<i64>) {
        match ttl {
            None => {
                if self.by_key.is_empty() {
                    return;
                }
                if let Some(t) = self.by_key.remove(key) {
                    self.by_time.remove(&(t, key.to_vec()));
                }
            }
            Some(t) => {
                match self.by_key.insert(key.to_vec(), t) {
                    Some(old) if old == t => return,
                    Some(old) => {
                        self.by_time.remove(&(old, key.to_vec()));
                    }
                    None => {}
                }
                self.by_time.insert((t, key.to_vec()));
            }
        }
    }

    /// When `key` expires, if the index knows.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.by_key.get(key).copied()
    }

    /// How many keys have a time.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Forget every time (FLUSHALL); with `store_empty`, the walk has nothing left to find.
    pub fn clear(&mut self, store_empty: bool) {
        self.by_key.clear();
        self.by_time.clear();
        if store_empty {
            self.walk = Walk::Done;
        }
    }

    /// Whether housekeeping has work at `now_ms`: the walk, or a key due.
    pub fn pending(&self, now_ms: i64) -> bool {
        self.walk != Walk::Done || self.by_time.first().is_some_and(|(t, _)| *t <= now_ms)
    }

    /// The start's walk has read every key.
    pub fn walked(&self) -> bool {
        self.walk == Walk::Done
    }
}

/// The server's housekeeping at `now_us` (unix µs), under the store's lock, before a batch of
/// commands and on a timer: one step of the start's walk (up to [`CHUNK`] keys), then the
/// deletion of up to [`CHUNK`] keys whose time has come. Returns how many it deleted.
pub fn housekeeping(store: &mut dyn Backend, counters: &mut Counters, db: &mut Db, now_us: i64) -> Result<usize, ReplyError> {
    let now_ms = now_us.div_euclid(1000);
    let ex = &mut db.expiries;
    if ex.walk != Walk::Done {
        let after = match &ex.walk {
            Walk::After(k) => Some(k.clone()),
            _ => None,
        };
        match store.entries_after(after.as_deref(), CHUNK) {
            Ok(entries) => {
                ex.walk = match entries.last() {
                    Some((k, _)) if entries.len() >= CHUNK => Walk::After(k.clone()),
                    _ => Walk::Done,
                };
                for (k, v) in &entries {
                    if let Ok((_, Some(t), _)) = header(v) {
                        ex.set(k, Some(t));
                    }
                }
            }
            // A store that cannot list its keys: its keys expire when read.
            Err(_) => ex.walk = Walk::Done,
        }
    }
    let due: Vec<Vec<u8>> = ex.by_time.iter().take_while(|(t, _)| *t <= now_ms).take(CHUNK).map(|(_, k)| k.clone()).collect();
    let mut deleted = 0;
    for k in due {
        ex.set(&k, None);
        if store.del(&k)? {
            counters.expired_keys += 1;
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT key time [NX|XX|GT|LT]: `unit_ms` 1000 for seconds,
/// `relative` from now (else a unix time). Checks in Redis 7.0's order.
pub(super) fn expire(x: &mut Ctx<'_>, a: &Args, name: &str, unit_ms: i64, relative: bool) -> Result<(), ReplyError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[3..] {
        match lower(opt).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            _ => return Err(format!("ERR Unsupported option {}", c_str(opt, usize::MAX)).into()),
        }
    }
    if nx && (xx || gt || lt) {
        return Err("ERR NX and XX, GT or LT options at the same time are not compatible".into());
    }
    if gt && lt {
        return Err("ERR GT and LT options at the same time are not compatible".into());
    }
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let when = integer(&a[2])?.checked_mul(unit_ms).ok_or_else(invalid)?;
    let base = if relative { x.now_ms() } else { 0 };
    let when = when.checked_add(base).ok_or_else(invalid)?;
    let Some((v, current)) = x.fetch(&a[1])? else {
        reply::int(x.out, 0);
        return Ok(());
    };
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        reply::int(x.out, 0);
        return Ok(());
    }
    if when <= x.now_ms() {
        // A time already past deletes the key now (Redis: as a DEL).
        x.remove(&a[1])?;
    } else {
        x.save(&a[1], &v, Some(when))?;
    }
    reply::int(x.out, 1);
    Ok(())
}

/// TTL / PTTL / EXPIRETIME / PEXPIRETIME key: -2 without the key, -1 without a time; else the
/// time left (`abs`: the unix time), in ms or rounded to seconds.
pub(super) fn ttl(x: &mut Ctx<'_>, a: &Args, ms: bool, abs: bool) -> Result<(), ReplyError> {
    let n = match x.fetch(&a[1])? {
        None => -2,
        Some((_, None)) => -1,
        Some((_, Some(t))) => {
            let left = if abs { t } else { t - x.now_ms() }.max(0);
            if ms {
                left
            } else {
                // Rounded; near i64::MAX redis-server's sum does not wrap either.
                ((left as i128 + 500) / 1000) as i64
            }
        }
    };
    reply::int(x.out, n);
    Ok(())
}

/// PERSIST key: 1 if it had a time (now dropped), else 0.
pub(super) fn persist(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let dropped = match x.fetch(&a[1])? {
        Some((v, Some(_))) => {
            x.save(&a[1], &v, None)?;
            true
        }
        _ => false,
    };
    reply::int(x.out, dropped as i64);
    Ok(())
}

/// TIME: the unix time's seconds and microseconds.
pub(super) fn time(x: &mut Ctx<'_>, _: &Args) -> Result<(), ReplyError> {
    reply::array(x.out, 2);
    reply::bulk(x.out, x.now_us.div_euclid(1_000_000).to_string().as_bytes());
    reply::bulk(x.out, x.now_us.rem_euclid(1_000_000).to_string().as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::harness::T;
    use super::*;

    /// Each reply is redis-server 7.0's to the same commands (the clock standing still).
    #[test]
    fn expiry_commands_answer_as_redis_server() {
        let mut t = T::new();
        assert_eq!(t.run("SET k v"), "+OK\r\n");
        assert_eq!(t.run("EXPIRE none 10"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 100"), ":1\r\n");
        assert_eq!(t.run("TTL k"), ":100\r\n");
        assert_eq!(t.run("EXPIRE k 50 GT"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 200 GT"), ":1\r\n");
        assert_eq!(t.run("TTL k"), ":200\r\n");
        assert_eq!(t.run("EXPIRE k 300 LT"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 100 LT"), ":1\r\n");
        assert_eq!(t.run("TTL k"), ":100\r\n");
        assert_eq!(t.run("EXPIRE k 10 NX"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 10 XX"), ":1\r\n");
        assert_eq!(t.run("TTL k"), ":10\r\n");
        assert_eq!(t.run("PERSIST k"), ":1\r\n");
        assert_eq!(t.run("PERSIST k"), ":0\r\n");
        assert_eq!(t.run("PERSIST none"), ":0\r\n");
        assert_eq!(t.run("TTL k"), ":-1\r\n");
        assert_eq!(t.run("TTL none"), ":-2\r\n");
        assert_eq!(t.run("PTTL k"), ":-1\r\n");
        assert_eq!(t.run("PTTL none"), ":-2\r\n");
        assert_eq!(t.run("EXPIRE k 10 XX"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 10 GT"), ":0\r\n");
        assert_eq!(t.run("EXPIRE k 10 LT"), ":1\r\n");
        assert_eq!(t.run("TTL k"), ":10\r\n");
        assert_eq!(t.run("EXPIRE k 10 nx xx"), "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n");
        assert_eq!(t.run("EXPIRE k 10 gt lt"), "-ERR GT and LT options at the same time are not compatible\r\n");
        assert_eq!(t.run("EXPIRE k 10 bogus"), "-ERR Unsupported option bogus\r\n");
        assert_eq!(t.run("EXPIRE k 10 NX bogus"), "-ERR Unsupported option bogus\r\n");
        assert_eq!(t.run("EXPIRE k x"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("EXPIRE k 9223372036854775807"), "-ERR invalid expire time in 'expire' command\r\n");
        assert_eq!(t.run("PEXPIRE k 9223372036854775807"), "-ERR invalid expire time in 'pexpire' command\r\n");
        assert_eq!(t.run("EXPIREAT k 9223372036854776"), "-ERR invalid expire time in 'expireat' command\r\n");
        assert_eq!(t.run("EXPIREAT k 9223372036854775"), ":1\r\n");
        assert_eq!(t.run("EXPIRETIME k"), ":9223372036854775\r\n");
        assert_eq!(t.run("PEXPIRETIME k"), ":9223372036854775000\r\n");
        assert_eq!(t.run("PEXPIREAT k 9223372036854775807"), ":1\r\n");
        assert_eq!(t.run("EXPIRETIME k"), ":9223372036854776\r\n");
        assert_eq!(t.run("PEXPIRETIME k"), ":9223372036854775807\r\n");
        assert_eq!(t.run("PEXPIRETIME none"), ":-2\r\n");
        assert_eq!(t.run("EXPIRETIME none"), ":-2\r\n");
        assert_eq!(t.run("PERSIST k"), ":1\r\n");
        assert_eq!(t.run("EXPIRETIME k"), ":-1\r\n");
        assert_eq!(t.run("EXPIRE k 0"), ":1\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("SET k v"), "+OK\r\n");
        assert_eq!(t.run("EXPIRE k -10 LT"), ":1\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("SET k v"), "+OK\r\n");
        assert_eq!(t.run("EXPIREAT k 1"), ":1\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("SET k v"), "+OK\r\n");
        assert_eq!(t.run("PEXPIREAT k 1"), ":1\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("HSET h f v"), ":1\r\n");
        assert_eq!(t.run("EXPIRE h 100"), ":1\r\n");
        assert_eq!(t.run("HSET h g w"), ":1\r\n");
        assert_eq!(t.run("TTL h"), ":100\r\n");
        assert_eq!(t.run("HDEL h f g"), ":2\r\n");
        assert_eq!(t.run("TTL h"), ":-2\r\n");
        assert_eq!(t.run("ZADD z 1 a"), ":1\r\n");
        assert_eq!(t.run("EXPIRE z 100"), ":1\r\n");
        assert_eq!(t.run("ZADD z 2 b"), ":1\r\n");
        assert_eq!(t.run("ZINCRBY z 1 a"), "$1\r\n2\r\n");
        assert_eq!(t.run("TTL z"), ":100\r\n");
        assert_eq!(t.run("EXPIRE"), "-ERR wrong number of arguments for 'expire' command\r\n");
        assert_eq!(t.run("TTL"), "-ERR wrong number of arguments for 'ttl' command\r\n");
        assert_eq!(t.run("TTL a b"), "-ERR wrong number of arguments for 'ttl' command\r\n");
        assert_eq!(t.run("PERSIST"), "-ERR wrong number of arguments for 'persist' command\r\n");
    }

    #[test]
    fn ttl_counts_down_and_a_read_after_the_time_deletes_the_key_through_the_store() {
        let mut t = T::new();
        assert_eq!(t.run("SET k v PX 1500"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":2\r\n");
        t.advance_ms(1000);
        assert_eq!((t.run("TTL k"), t.run("PTTL k")), (":1\r\n".into(), ":500\r\n".into()));
        t.advance_ms(499);
        assert_eq!(t.run("GET k"), "$1\r\nv\r\n");
        assert!(t.store.map.contains_key(&b"k"[..]));
        t.advance_ms(1);
        assert_eq!(t.run("GET k"), "$-1\r\n");
        assert!(t.store.map.is_empty(), "the expired key is deleted from the store, not hidden");
        assert_eq!((t.counters.expired_keys, t.db.expiries.len()), (1, 0));
        // Each way of reading answers as if the key were missing.
        for (cmd, want) in [
            ("EXISTS k", ":0\r\n"),
            ("TYPE k", "+none\r\n"),
            ("TTL k", ":-2\r\n"),
            ("DEL k", ":0\r\n"),
            ("HGET k f", "$-1\r\n"),
            ("ZSCORE k m", "$-1\r\n"),
            ("SETNX k w", ":1\r\n"),
        ] {
            t.run("SET k v EX 1");
            t.advance_ms(1000);
            t.run("DEL other");
            assert_eq!(t.run(cmd), want, "{cmd}");
        }
        assert_eq!(t.run("GET k"), "$1\r\nw\r\n");
        assert_eq!(t.counters.expired_keys, 8);
    }

    #[test]
    fn active_expiry_deletes_due_keys_in_chunks() {
        let mut t = T::new();
        let n = 2 * CHUNK + 10;
        for i in 0..n {
            t.run(&format!("SET k{i:05} v PX {}", 100 + i % 2));
        }
        t.run("SET keep v EX 100");
        t.run("SET plain v");
        assert_eq!(t.housekeeping(), 0);
        t.advance_ms(101);
        assert_eq!(t.housekeeping(), CHUNK);
        assert_eq!(t.housekeeping(), CHUNK);
        assert_eq!(t.housekeeping(), 10);
        assert_eq!(t.housekeeping(), 0);
        assert_eq!(t.store.map.len(), 2);
        assert_eq!((t.counters.expired_keys, t.db.expiries.len()), (n as u64, 1));
        assert!(!t.db.expiries.pending(t.now_ms()));
    }

    #[test]
    fn what_replaces_a_value_drops_its_time_and_flushall_forgets_every_time() {
        let mut t = T::new();
        for (cmd, want) in [
            ("SET k w", ":-1\r\n"),
            ("GETSET k w", ":-1\r\n"),
            ("MSET k w", ":-1\r\n"),
            ("RENAME plain k", ":-1\r\n"),
            ("DEL k", ":-2\r\n"),
            ("GETDEL k", ":-2\r\n"),
            ("SET k w KEEPTTL", ":100\r\n"),
            ("INCRBYFLOAT k 1", ":100\r\n"),
            ("SETRANGE k 0 x", ":100\r\n"),
        ] {
            t.run("SET plain w");
            t.run("SET k 1 EX 100");
            t.run(cmd);
            assert_eq!(t.run("TTL k"), want, "{cmd}");
            assert_eq!(t.db.expiries.get(b"k").is_some(), want == ":100\r\n", "{cmd}");
        }
        t.run("SET a v EX 100");
        t.run("FLUSHALL");
        assert!(t.db.expiries.is_empty() && t.db.expiries.walked());
    }

    #[test]
    fn times_stored_before_a_restart_are_found_by_the_walk_and_old_values_have_none() {
        let mut t = T::new();
        for i in 0..(CHUNK + 5) {
            t.run(&format!("SET k{i:05} v EX {}", 10 + i));
        }
        // A value stored before expiry times were served: the type byte alone.
        t.store.map.insert(b"old".to_vec(), b"\0plain".to_vec());
        // The same store behind a restarted server: the index is empty until the walk.
        let mut r = T { store: std::mem::take(&mut t.store), ..T::new() };
        assert!(r.db.expiries.is_empty() && r.db.expiries.pending(r.now_ms()));
        assert_eq!(r.run("TTL k00003"), ":13\r\n");
        assert_eq!(r.run("TTL old"), ":-1\r\n");
        assert_eq!(r.run("GET old"), "$5\r\nplain\r\n");
        assert_eq!(r.housekeeping(), 0);
        assert_eq!(r.db.expiries.len(), CHUNK);
        assert_eq!(r.housekeeping(), 0);
        assert_eq!(r.db.expiries.len(), CHUNK + 5);
        assert!(r.db.expiries.walked() && !r.db.expiries.pending(r.now_ms()));
        r.advance_ms(15_000);
        assert_eq!(r.housekeeping(), 6);
        assert_eq!(r.store.map.len(), CHUNK + 5 - 6 + 1);
    }

    /// A store whose deletes fail while `refuse_del` is set (a device refusing the write).
    #[derive(Default)]
    struct Refusing {
        mem: crate::MemoryStore,
        refuse_del: bool,
    }

    impl Backend for Refusing {
        fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.mem.get(k)
        }
        fn set(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
            self.mem.set(k, v)
        }
        fn del(&mut self, k: &[u8]) -> Result<bool, StoreError> {
            if self.refuse_del {
                return Err("the device refused the delete".into());
            }
            self.mem.del(k)
        }
        fn key_count(&mut self) -> Result<u64, StoreError> {
            self.mem.key_count()
        }
        fn keys_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
            self.mem.keys_after(after, limit)
        }
        fn clear(&mut self) -> Result<(), StoreError> {
            self.mem.clear()
        }
        fn max_value_bytes(&self) -> usize {
            self.mem.max_value_bytes()
        }
        fn metrics(&mut self) -> serde_json::Value {
            self.mem.metrics()
        }
    }

    fn run_on(store: &mut Refusing, db: &mut Db, counters: &mut Counters, now_us: i64, line: &str) -> String {
        let args = crate::proto::split_args(line.as_bytes()).unwrap();
        let (mut s, mut out) = (Session::default(), vec![]);
        let info = || String::from("# Server\r\n");
        execute(&mut Ctx::new(store, &mut s, counters, &mut out, &info, db, now_us), &args);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The expiry index follows the store: a DEL the store refuses is an error reply, and the
    /// key, still stored, still expires at its time.
    #[test]
    fn a_refused_delete_leaves_the_key_and_its_expiry_time_whole() {
        let (mut st, mut db, mut c) = (Refusing::default(), Db::default(), Counters::default());
        let now = 1_700_000_000_000_000;
        assert_eq!(housekeeping(&mut st, &mut c, &mut db, now).unwrap(), 0);
        assert!(db.expiries.walked());
        assert_eq!(run_on(&mut st, &mut db, &mut c, now, "SET k v EX 10"), "+OK\r\n");
        st.refuse_del = true;
        assert_eq!(run_on(&mut st, &mut db, &mut c, now, "DEL k"), "-ERR the device refused the delete\r\n");
        assert!(st.mem.map.contains_key(&b"k"[..]));
        assert_eq!(db.expiries.get(b"k"), Some(now / 1000 + 10_000));
        st.refuse_del = false;
        assert_eq!(housekeeping(&mut st, &mut c, &mut db, now + 11_000_000).unwrap(), 1);
        assert!(st.mem.map.is_empty() && db.expiries.is_empty());
    }

    #[test]
    fn time_is_the_unix_time_in_seconds_and_microseconds() {
        let mut t = T::new();
        t.now_us = 1_700_000_000_012_345;
        assert_eq!(t.run("TIME"), "*2\r\n$10\r\n1700000000\r\n$5\r\n12345\r\n");
    }
}
