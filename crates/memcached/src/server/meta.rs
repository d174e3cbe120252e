//! The meta commands (mg, ms, md, ma): one method per command, over a request's flags and
//! the return flags they ask for.

use ssdlab_cache::cache::cache_seconds;
use ssdlab_cache::hash::key_of;
use ssdlab_cache::item::Item;

use super::{expiry_s, line, Server};
use crate::proto::{self, MetaKind, StoreKind};

const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";

/// A meta command's key and flags (in the order the request gave them), and the time it
/// arrived.
struct MetaReq<'a> {
    key: &'a [u8],
    flags: &'a [(u8, &'a [u8])],
    now: u64,
}

impl<'a> MetaReq<'a> {
    fn has(&self, f: u8) -> bool {
        self.flags.iter().any(|&(g, _)| g == f)
    }

    fn token(&self, f: u8) -> Option<&'a [u8]> {
        self.flags.iter().find(|&&(g, _)| g == f).map(|&(_, t)| t)
    }

    fn quiet(&self) -> bool {
        self.has(b'q')
    }

    /// The return flags: O and k always; c when there is a CAS to give (an ms gives 0 when
    /// nothing was stored); f, s and t from the item, when there is one.
    /// An mg's T takes effect where it stands: a t before it gives the old TTL (memcached
    /// walks the flags once, in order). `touched`: the expiry T set.
    fn ret_touched(&self, it: Option<&Item>, cas: Option<u64>, touched: Option<u32>) -> String {
        let mut r = String::new();
        let mut expiry = it.map(|i| i.expiry_s);
        for &(f, t) in self.flags {
            let s = match (f, it, cas) {
                (b'O', _, _) => format!("O{}", String::from_utf8_lossy(t)),
                (b'k', _, _) => format!("k{}", String::from_utf8_lossy(self.key)),
                (b'c', _, Some(cas)) => format!("c{cas}"),
                (b'f', Some(i), _) => format!("f{}", i.flags),
                (b's', Some(i), _) => format!("s{}", i.value.len()),
                (b'T', Some(_), _) => {
                    expiry = touched.or(expiry);
                    continue;
                }
                (b't', Some(_), _) => match expiry {
                    Some(0) | None => "t-1".into(),
                    Some(e) => format!("t{}", e.saturating_sub(cache_seconds(self.now))),
                },
                _ => continue,
            };
            r.push(' ');
            r.push_str(&s);
        }
        r
    }

    fn ret(&self, it: Option<&Item>, cas: Option<u64>) -> String {
        self.ret_touched(it, cas, None)
    }
}

/// A reply line: a code, then the return flags.
fn code(out: &mut Vec<u8>, code: &str, rest: &str) {
    line(out, &format!("{code}{rest}"))
}

impl Server {
    /// A meta command (mg, ms, md, ma) with memcached's reply codes: HD (done), VA (a value
    /// follows), EN (miss), NF (not found), NS (not stored), EX (CAS mismatch); the return
    /// flags in the order the request gave them; `q` drops the HD (and mg's EN) replies.
    pub(super) fn meta(&self, kind: MetaKind, key: &[u8], flags: &[(u8, &[u8])], data: Vec<u8>, out: &mut Vec<u8>) {
        let req = MetaReq { key, flags, now: self.now_ns() };
        match kind {
            MetaKind::Get => self.meta_get(&req, out),
            MetaKind::Set => self.meta_set(&req, data, out),
            MetaKind::Delete => self.meta_delete(&req, out),
            MetaKind::Arith => self.meta_arith(&req, out),
        }
    }

    /// mg: the item's value (v) and return flags; T touches it.
    fn meta_get(&self, req: &MetaReq<'_>, out: &mut Vec<u8>) {
        let (key, now) = (req.key, req.now);
        let touch = match req.token(b'T').map(proto::safe_strtol_token) {
            Some(None) => return line(out, BAD_TOKEN),
            t => t.flatten(),
        };
        let mut st = self.state();
        let h = key_of(key);
        let touched = touch.map(|exptime| expiry_s(exptime, now));
        let got = st.cache.get_item(h, key, now).and_then(|got| match (&got, touched) {
            (Some(c), Some(e)) => st.cache.set_item(h, Item { expiry_s: e, ..(**c).clone() }, now).map(|_| got),
            _ => Ok(got),
        });
        // As memcached counts an mg: a hit that updates the TTL is a touch, anything
        // else a get.
        let o = &mut st.ops;
        match (&got, touch) {
            (Ok(Some(_)), Some(_)) => (o.cmd_touch, o.touch_hits) = (o.cmd_touch + 1, o.touch_hits + 1),
            (Ok(Some(_)), None) => (o.cmd_get, o.get_hits) = (o.cmd_get + 1, o.get_hits + 1),
            _ => (o.cmd_get, o.get_misses) = (o.cmd_get + 1, o.get_misses + 1),
        }
        if req.token(b'O').is_some_and(|t| t.len() > proto::META_OPAQUE_MAX) {
            drop(st);
            return line(out, "CLIENT_ERROR opaque token too long");
        }
        match got {
            Ok(Some(it)) => {
                drop(st);
                let rest = req.ret_touched(Some(&it), Some(it.cas), touched);
                if req.has(b'v') {
                    code(out, &format!("VA {}", it.value.len()), &rest);
                    out.extend_from_slice(&it.value);
                    out.extend_from_slice(b"\r\n");
                } else {
                    // `q` hides only the miss (EN) of an mg.
                    code(out, "HD", &rest);
                }
            }
            Ok(None) => {
                if !req.quiet() {
                    code(out, "EN", &req.ret(None, None));
                }
            }
            Err(e) => line(out, &self.server_error(&mut st, e)),
        }
    }

    /// ms: a store of the data block; M picks the mode, C compares the CAS.
    fn meta_set(&self, req: &MetaReq<'_>, data: Vec<u8>, out: &mut Vec<u8>) {
        let num = |f: u8| req.token(f).map(|t| proto::safe_strtol_token(t).ok_or(()));
        let (Ok(fl), Ok(exptime), Ok(compare)) = (
            req.token(b'F').map(proto::safe_strtoul_token).map_or(Ok(0), |v| v.ok_or(())),
            num(b'T').unwrap_or(Ok(0)),
            req.token(b'C').map(|t| proto::safe_strtoull(t).ok_or(())).transpose(),
        ) else {
            return line(out, BAD_TOKEN);
        };
        let kind = match req.token(b'M').map(|m| m[0].to_ascii_uppercase()) {
            Some(b'E') => StoreKind::Add,
            Some(b'A') => StoreKind::Append,
            Some(b'P') => StoreKind::Prepend,
            // With a CAS, set and replace are memcached's cas (add ignores it; append
            // and prepend compare it themselves).
            _ if compare.is_some() => StoreKind::Cas,
            Some(b'R') => StoreKind::Replace,
            _ => StoreKind::Set,
        };
        self.state().ops.cmd_set += 1;
        let (r, cas) = self.store(kind, req.key, fl, exptime, data, compare);
        let rest = req.ret(None, Some(cas));
        match r.as_str() {
            "STORED" if req.quiet() => {}
            "STORED" => code(out, "HD", &rest),
            "NOT_STORED" => code(out, "NS", &rest),
            "EXISTS" => code(out, "EX", &rest),
            "NOT_FOUND" => code(out, "NF", &rest),
            other => line(out, other),
        }
    }

    /// md: a delete, compared with C's CAS when given.
    fn meta_delete(&self, req: &MetaReq<'_>, out: &mut Vec<u8>) {
        let (key, now) = (req.key, req.now);
        let Ok(compare) = req.token(b'C').map(|t| proto::safe_strtoull(t).ok_or(())).transpose() else {
            return line(out, BAD_TOKEN);
        };
        let mut st = self.state();
        let h = key_of(key);
        let r = Self::peek(&mut st, h, key, now).and_then(|cur| match (cur, compare) {
            (None, _) => Ok("NF"),
            (Some(c), Some(want)) if c.cas != want => Ok("EX"),
            (Some(_), _) => st.cache.delete_item(h, key, now).map(|hit| if hit { "HD" } else { "NF" }),
        });
        match r {
            Ok(c) => {
                if c == "HD" {
                    st.ops.delete_hits += 1;
                } else if c == "NF" {
                    st.ops.delete_misses += 1;
                }
                drop(st);
                if !(req.quiet() && c == "HD") {
                    code(out, c, &req.ret(None, None));
                }
            }
            Err(e) => line(out, &self.server_error(&mut st, e)),
        }
    }

    /// ma: incr (default) or decr by D (default 1); N creates a missing item with J.
    fn meta_arith(&self, req: &MetaReq<'_>, out: &mut Vec<u8>) {
        let (key, now) = (req.key, req.now);
        let bad = "CLIENT_ERROR invalid or duplicate flag";
        let u = |f: u8, dflt: u64| req.token(f).map_or(Some(dflt), proto::safe_strtoull);
        let (Some(delta), Some(initial)) = (u(b'D', 1), u(b'J', 0)) else { return line(out, bad) };
        let vivify = match req.token(b'N').map(proto::safe_strtol_token) {
            Some(None) => return line(out, bad),
            n => n.flatten(),
        };
        let incr = match req.token(b'M') {
            None | Some(b"I" | b"i" | b"+") => true,
            Some(b"D" | b"d" | b"-") => false,
            Some(_) => return line(out, "CLIENT_ERROR invalid mode for ma M token"),
        };
        let h = key_of(key);
        // Autovivify (N): a missing item is created with the initial value (J), which is
        // returned; no miss is counted.
        let vivified =
            vivify.is_some_and(|exptime| self.store(StoreKind::Add, key, 0, exptime, initial.to_string().into_bytes(), None).0 == "STORED");
        let r = if vivified { initial.to_string() } else { self.arith(incr, key, delta) };
        if r == "NOT_FOUND" {
            return code(out, "NF", &req.ret(None, None));
        }
        if r.starts_with("CLIENT_ERROR") || r.starts_with("SERVER_ERROR") {
            return line(out, &r);
        }
        let it = {
            let mut st = self.state();
            Self::peek(&mut st, h, key, now).ok().flatten()
        };
        let rest = req.ret(it.as_deref(), it.as_ref().map(|i| i.cas));
        if req.has(b'v') {
            code(out, &format!("VA {}", r.len()), &rest);
            line(out, &r);
        } else if !req.quiet() || vivified {
            // memcached's q hides the HD of an applied delta, not of a vivified item.
            code(out, "HD", &rest);
        }
    }
}
