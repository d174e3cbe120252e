//! The text protocol's commands other than meta and stats, executed against the cache: the
//! gets key by key, stores (set/add/replace/append/prepend/cas), incr/decr, delete, touch,
//! flush_all.

use std::sync::Arc;

use ssdlab_cache::hash::key_of;
use ssdlab_cache::item::Item;
use ssdlab_cache::CacheError;

use super::{expiry_s, line, reply, unix_now_s, Server, State, VERSION};
use crate::proto::{self, Command, Refusal, StoreKind, RELATIVE_EXPTIME_MAX};

impl Server {
    /// One key of a get/gets/gat/gats: its VALUE block, if it is there.
    pub(super) fn get_one(&self, key: &[u8], cas: bool, touch: Option<i64>, out: &mut Vec<u8>) {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let res = match touch {
            None => st.cache.get_item(h, key, now),
            Some(exptime) => st.cache.get_item(h, key, now).and_then(|got| match got {
                Some(c) => {
                    let it =
                        Item { key: c.key.clone(), value: c.value.clone(), flags: c.flags, expiry_s: expiry_s(exptime, now), cas: c.cas };
                    st.cache.set_item(h, it, now).map(|_| Some(c))
                }
                None => Ok(None),
            }),
        };
        let o = &mut st.ops;
        match (&res, touch) {
            (_, Some(_)) => {
                o.cmd_touch += 1;
                if matches!(res, Ok(Some(_))) {
                    o.touch_hits += 1
                } else {
                    o.touch_misses += 1
                }
            }
            (Ok(Some(_)), None) => {
                o.cmd_get += 1;
                o.get_hits += 1;
            }
            (_, None) => {
                o.cmd_get += 1;
                o.get_misses += 1;
            }
        }
        match res {
            Ok(Some(it)) => {
                drop(st);
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                let head = if cas {
                    format!(" {} {} {}\r\n", it.flags, it.value.len(), it.cas)
                } else {
                    format!(" {} {}\r\n", it.flags, it.value.len())
                };
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&it.value);
                out.extend_from_slice(b"\r\n");
            }
            Ok(None) => {}
            Err(e) => {
                let m = self.server_error(&mut st, e);
                line(out, &m);
            }
        }
    }

    /// Execute a command other than a get (whose keys are served one by one) or quit; a
    /// storage command's data block (without its CRLF) is `data`.
    pub(super) fn execute(&self, cmd: Command<'_>, data: Vec<u8>, out: &mut Vec<u8>) {
        match cmd {
            Command::Meta { kind, key, flags, .. } => self.meta(kind, key, &flags, data, out),
            Command::Store { kind, key, flags, exptime, cas_unique, noreply, .. } => {
                let compare = (kind == StoreKind::Cas).then_some(cas_unique);
                self.state().ops.cmd_set += 1;
                let (r, _) = self.store(kind, key, flags, exptime, data, compare);
                reply(out, &r, noreply);
            }
            Command::Arith { incr, key, delta, noreply } => {
                let r = self.arith(incr, key, delta);
                reply(out, &r, noreply);
            }
            Command::Delete { key, noreply } => {
                let mut st = self.state();
                let now = self.now_ns();
                let r = match st.cache.delete_item(key_of(key), key, now) {
                    Ok(true) => {
                        st.ops.delete_hits += 1;
                        "DELETED".to_string()
                    }
                    Ok(false) => {
                        st.ops.delete_misses += 1;
                        "NOT_FOUND".to_string()
                    }
                    Err(e) => self.server_error(&mut st, e),
                };
                drop(st);
                reply(out, &r, noreply);
            }
            Command::Touch { key, exptime, noreply } => {
                let mut st = self.state();
                let now = self.now_ns();
                st.ops.cmd_touch += 1;
                let h = key_of(key);
                let res = st.cache.peek_item(h, key, now).and_then(|cur| match cur {
                    None => Ok(false),
                    Some(c) => {
                        let it = Item {
                            key: c.key.clone(),
                            value: c.value.clone(),
                            flags: c.flags,
                            expiry_s: expiry_s(exptime, now),
                            cas: c.cas,
                        };
                        st.cache.set_item(h, it, now).map(|_| true)
                    }
                });
                let r = match res {
                    Ok(true) => {
                        st.ops.touch_hits += 1;
                        "TOUCHED".to_string()
                    }
                    Ok(false) => {
                        st.ops.touch_misses += 1;
                        "NOT_FOUND".to_string()
                    }
                    Err(e) => self.server_error(&mut st, e),
                };
                drop(st);
                reply(out, &r, noreply);
            }
            Command::FlushAll { delay, noreply } => {
                let mut st = self.state();
                st.ops.cmd_flush += 1;
                // memcached's realtime(): up to 30 days relative, larger a Unix time.
                let delay_s = if delay <= 0 {
                    0
                } else if delay <= RELATIVE_EXPTIME_MAX {
                    delay as u64
                } else {
                    (delay as u64).saturating_sub(unix_now_s())
                };
                if delay_s == 0 {
                    st.flush_at_ns = None;
                    st.cache.flush_all();
                } else {
                    st.flush_at_ns = Some(self.now_ns() + delay_s * 1_000_000_000);
                }
                drop(st);
                reply(out, "OK", noreply);
            }
            Command::Verbosity { noreply } => reply(out, "OK", noreply),
            Command::Stats { group, arg } => self.stats_command(group, arg, out),
            Command::Version => line(out, &format!("VERSION {VERSION}")),
            Command::MetaNoop => line(out, "MN"),
            Command::Get { .. } | Command::Quit => unreachable!("served by the session"),
        }
    }

    /// An existing item for the read-modify-write commands (no GET counted, no promotion).
    pub(super) fn peek(st: &mut State, h: u64, key: &[u8], now: u64) -> Result<Option<Arc<Item>>, CacheError> {
        st.cache.peek_item(h, key, now)
    }

    /// set/add/replace/append/prepend/cas under one lock: the check and the store are one step.
    /// Returns the reply and the stored item's CAS unique (0 when nothing was stored).
    /// `compare`: the CAS unique given (cas, ms with C: checked by cas, append and prepend).
    pub(super) fn store(
        &self,
        kind: StoreKind,
        key: &[u8],
        flags: u32,
        exptime: i64,
        value: Vec<u8>,
        compare: Option<u64>,
    ) -> (String, u64) {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let max = self.max_value_bytes;
        let step = |st: &mut State| -> Result<(&'static str, u64), CacheError> {
            // memcached's do_store_item, in its order: add finds an item, replace / append /
            // prepend find none, cas compares (and counts), append / prepend with a CAS
            // compare it (a replace's CAS is not checked).
            let (value, flags, expiry) = if kind == StoreKind::Set {
                (value, flags, expiry_s(exptime, now))
            } else {
                let cur = Self::peek(st, h, key, now)?;
                match (kind, cur) {
                    (StoreKind::Add, Some(_)) | (StoreKind::Replace | StoreKind::Append | StoreKind::Prepend, None) => {
                        return Ok(("NOT_STORED", 0))
                    }
                    (StoreKind::Cas, None) => {
                        st.ops.cas_misses += 1;
                        return Ok(("NOT_FOUND", 0));
                    }
                    (StoreKind::Cas, Some(c)) if Some(c.cas) != compare => {
                        st.ops.cas_badval += 1;
                        return Ok(("EXISTS", 0));
                    }
                    (StoreKind::Cas, Some(_)) => {
                        st.ops.cas_hits += 1;
                        (value, flags, expiry_s(exptime, now))
                    }
                    (StoreKind::Append | StoreKind::Prepend, Some(c)) if compare.is_some_and(|x| x != c.cas) => {
                        return Ok(("EXISTS", 0));
                    }
                    (StoreKind::Append | StoreKind::Prepend, Some(c)) => {
                        if (c.value.len() + value.len()) as u64 > max {
                            return Ok(("SERVER_ERROR object too large for cache", 0));
                        }
                        // The old item's flags and expiry stay (memcached ignores the new ones).
                        let v = if kind == StoreKind::Append { [&c.value[..], &value].concat() } else { [&value, &c.value[..]].concat() };
                        (v, c.flags, c.expiry_s)
                    }
                    _ => (value, flags, expiry_s(exptime, now)),
                }
            };
            let cas = st.cache.new_cas();
            let it = Item { key: key.into(), value: value.into_boxed_slice(), flags, expiry_s: expiry, cas };
            st.cache.set_item(h, it, now)?;
            st.ops.total_items += 1;
            Ok(("STORED", cas))
        };
        match step(&mut st) {
            Ok((r, cas)) => (r.to_string(), cas),
            Err(e) => (self.server_error(&mut st, e), 0),
        }
    }

    /// incr/decr: memcached's rules. The value must be a decimal number (as C's strtoull reads
    /// it) of at most 64 bits; incr wraps at 2^64, decr stops at 0; a result shorter than the
    /// value is padded with spaces to the value's length (memcached rewrites in place).
    pub(super) fn arith(&self, incr: bool, key: &[u8], delta: u64) -> String {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let step = |st: &mut State| -> Result<String, CacheError> {
            let Some(c) = Self::peek(st, h, key, now)? else {
                if incr {
                    st.ops.incr_misses += 1
                } else {
                    st.ops.decr_misses += 1
                }
                return Ok("NOT_FOUND".into());
            };
            let Some(v) = (!c.value.is_empty()).then(|| proto::safe_strtoull(&c.value)).flatten() else {
                return Ok("CLIENT_ERROR cannot increment or decrement non-numeric value".into());
            };
            let new = if incr { v.wrapping_add(delta) } else { v.saturating_sub(delta) };
            if incr {
                st.ops.incr_hits += 1
            } else {
                st.ops.decr_hits += 1
            }
            let text = new.to_string();
            let mut value = text.clone().into_bytes();
            if value.len() < c.value.len() {
                value.resize(c.value.len(), b' ');
            }
            let cas = st.cache.new_cas();
            let it = Item { key: key.into(), value: value.into_boxed_slice(), flags: c.flags, expiry_s: c.expiry_s, cas };
            st.cache.set_item(h, it, now)?;
            Ok(text)
        };
        match step(&mut st) {
            Ok(r) => r,
            Err(e) => self.server_error(&mut st, e),
        }
    }

    /// A refused line: skip its data block, delete what a failed set must not leave behind.
    pub(super) fn refused_line(&self, f: &Refusal) {
        if let Some(key) = &f.delete_key {
            let mut st = self.state();
            st.ops.store_too_large += 1;
            let now = self.now_ns();
            if let Err(e) = st.cache.delete_item(key_of(key), key, now) {
                self.server_error(&mut st, e);
            }
        } else if f.skip_bytes > 0 {
            self.state().ops.store_too_large += 1;
        }
    }
}
