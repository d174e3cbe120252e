//! Connection and server commands: SELECT, PING, INFO, CONFIG GET/SET (and its glob
//! patterns), CLIENT SETNAME.

use super::*;

pub(super) fn select(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    match integer(&a[1])? {
        0 => ok(x),
        _ => Err("ERR DB index is out of range".into()),
    }
}

pub(super) fn ping(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    match a.len() {
        1 => reply::simple(x.out, "PONG"),
        2 => reply::bulk(x.out, &a[1]),
        _ => return Err(wrong_arity("ping").into()),
    }
    Ok(())
}

pub(super) fn info(x: &mut Ctx<'_>, _: &Args) -> Result<(), ReplyError> {
    let c = *x.counters;
    let mut s = (x.info)();
    s.push_str(&format!(
        "\r\n# Stats\r\ntotal_commands_processed:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nexpired_keys:{}\r\nrejected_commands:{}\r\n",
        c.commands, c.keyspace_hits, c.keyspace_misses, c.expired_keys, c.rejected_commands
    ));
    s.push_str(&format!("\r\n# ssdlab\r\nkeys_with_expiry:{}\r\n", x.db.expiries.len()));
    if let serde_json::Value::Object(m) = x.store.metrics() {
        for (k, v) in m {
            if !v.is_object() && !v.is_array() {
                s.push_str(&format!("{k}:{}\r\n", v.to_string().trim_matches('"')));
            }
        }
    }
    reply::bulk(x.out, s.as_bytes());
    Ok(())
}

/// The parameters CONFIG GET knows: enough for clients that ask at start (redis-benchmark asks
/// for `save` and `appendonly`).
const PARAMS: &[(&str, &str)] = &[("appendonly", "no"), ("databases", "1"), ("maxmemory", "0"), ("save", "")];

pub(super) fn config_get(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let mut hits: Vec<(&str, String)> = vec![];
    for (name, value) in PARAMS {
        if a[2..].iter().any(|p| glob(&lower(p), name)) {
            hits.push((name, value.to_string()));
        }
    }
    if a[2..].iter().any(|p| glob(&lower(p), "proto-max-bulk-len")) {
        hits.push(("proto-max-bulk-len", x.store.max_value_bytes().to_string()));
    }
    reply::array(x.out, hits.len() * 2);
    for (k, v) in hits {
        reply::bulk(x.out, k.as_bytes());
        reply::bulk(x.out, v.as_bytes());
    }
    Ok(())
}

pub(super) fn config_set(_: &mut Ctx<'_>, _: &Args) -> Result<(), ReplyError> {
    Err("ERR CONFIG SET is not supported by ssdlab (settings come from the server's command line)".into())
}

pub(super) fn client_setname(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let n = &a[2];
    if n.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err("ERR Client names cannot contain spaces, newlines or special characters.".into());
    }
    x.session.name = (!n.is_empty()).then(|| n.clone());
    ok(x)
}

/// Glob matching with `*` and `?` (CONFIG GET patterns).
pub(super) fn glob(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}
