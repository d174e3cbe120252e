//! Keyspace commands: DEL, EXISTS, TYPE, SCAN and its glob patterns, DBSIZE, FLUSHDB.

use super::*;

pub(super) fn del(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let mut n = 0;
    for k in &a[1..] {
        n += x.store.del(k).map_err(err)? as i64;
    }
    reply::int(x.out, n);
    Ok(())
}

pub(super) fn exists(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let mut n = 0;
    for k in &a[1..] {
        n += x.store.exists(k).map_err(err)? as i64;
    }
    reply::int(x.out, n);
    Ok(())
}

/// What TYPE says of `key` ("none" when it is not there).
pub(super) fn type_name(x: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, String> {
    Ok(match x.store.get(key).map_err(err)?.map(|b| Value::decode(&b)).transpose()? {
        None => "none",
        Some(Value::Str(_)) => "string",
        Some(Value::Hash(_)) => "hash",
        Some(Value::Zset(_)) => "zset",
    })
}

pub(super) fn type_(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let t = type_name(x, &a[1])?;
    reply::simple(x.out, t);
    Ok(())
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: up to COUNT keys after the cursor's
/// (filtered by MATCH and TYPE after they are read, as Redis filters), and the next cursor,
/// "0" at the end.
pub(super) fn scan(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    const INVALID: &str = "ERR invalid cursor";
    let cursor: u64 = std::str::from_utf8(&a[1]).ok().and_then(|t| t.parse().ok()).ok_or(INVALID)?;
    let (mut pattern, mut count, mut kind): (Option<&[u8]>, usize, Option<String>) = (None, 10, None);
    let mut i = 2;
    while i < a.len() {
        let opt = lower(&a[i]);
        let val = a.get(i + 1).ok_or(SYNTAX)?;
        match opt.as_str() {
            "match" => pattern = Some(val),
            "count" => {
                let n = integer(val)?;
                if n < 1 {
                    return Err(SYNTAX.into());
                }
                count = n.min(1 << 20) as usize;
            }
            "type" => kind = Some(lower(val)),
            _ => return Err(SYNTAX.into()),
        }
        i += 2;
    }
    let after = match cursor {
        0 => None,
        c => Some(x.cursors.last_key.get(&c).cloned().ok_or(INVALID)?),
    };
    let keys = x.store.keys_after(after.as_deref(), count).map_err(err)?;
    let next = if keys.len() < count { 0 } else { x.cursors.issue(keys.last().cloned().unwrap_or_default()) };
    let mut picked = Vec::with_capacity(keys.len());
    for k in keys {
        if pattern.is_some_and(|p| !glob_match(p, &k)) {
            continue;
        }
        if let Some(t) = &kind {
            let name = type_name(x, &k)?;
            if name == "none" || name != t {
                continue;
            }
        }
        picked.push(k);
    }
    reply::array(x.out, 2);
    reply::bulk(x.out, next.to_string().as_bytes());
    reply::array(x.out, picked.len());
    for k in &picked {
        reply::bulk(x.out, k);
    }
    Ok(())
}

/// Redis's glob (stringmatchlen, case-sensitive): `*`, `?`, `[abc]`, `[^a]`, `[a-z]` and `\x`
/// escapes, over bytes.
pub fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, string index it has eaten to).
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi + 1, si));
                    pi += 1;
                    continue;
                }
                b'?' => Some(pi + 1),
                b'[' => class(p, pi, s[si]),
                b'\\' if pi + 1 < p.len() => (p[pi + 1] == s[si]).then_some(pi + 2),
                c => (c == s[si]).then_some(pi + 1),
            }
        } else {
            None
        };
        match (step, star) {
            (Some(next), _) => {
                pi = next;
                si += 1;
            }
            (None, Some((sp, ss))) => {
                pi = sp;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at `p[at]` against byte `c`: the pattern index after it if `c` matches.
pub(super) fn class(p: &[u8], at: usize, c: u8) -> Option<usize> {
    let mut i = at + 1;
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    while i < p.len() && p[i] != b']' {
        if p[i] == b'\\' && i + 1 < p.len() {
            hit |= p[i + 1] == c;
            i += 2;
        } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            let (lo, hi) = if p[i] <= p[i + 2] { (p[i], p[i + 2]) } else { (p[i + 2], p[i]) };
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    // An unterminated class ends the pattern (Redis treats the rest as the class).
    let end = if i < p.len() { i + 1 } else { i };
    (hit != not).then_some(end)
}

pub(super) fn dbsize(x: &mut Ctx<'_>, _: &Args) -> Result<(), String> {
    let n = x.store.key_count().map_err(err)?;
    reply::int(x.out, n as i64);
    Ok(())
}

pub(super) fn flush(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    match a.len() {
        1 => {}
        2 if matches!(lower(&a[1]).as_str(), "async" | "sync") => {}
        _ => return Err(SYNTAX.into()),
    }
    // In chunks: other clients' commands run between them (see `Long::Flush`).
    if x.store.clear_some(CHUNK).map_err(err)? {
        reply::ok(x.out);
    } else {
        x.long = Some(Long::Flush);
    }
    Ok(())
}
