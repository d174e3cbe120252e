//! Keyspace commands: DEL, EXISTS, TOUCH, TYPE, KEYS, SCAN and their glob patterns, RENAME,
//! RANDOMKEY, DBSIZE, FLUSHDB.

use super::*;

/// DEL / UNLINK key [key ...]: how many were there (a key past its time is expired, not
/// counted, as in Redis).
pub(super) fn del(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let mut n = 0;
    for k in &a[1..] {
        if x.expired(k)? {
            x.expire_now(k)?;
        } else {
            n += x.remove(k)? as i64;
        }
    }
    reply::int(x.out, n);
    Ok(())
}

/// EXISTS / TOUCH key [key ...]: how many are there (a key counted as often as named).
pub(super) fn exists(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let mut n = 0;
    for k in &a[1..] {
        n += x.alive(k)? as i64;
    }
    reply::int(x.out, n);
    Ok(())
}

/// What TYPE says of `key` ("none" when it is not there).
pub(super) fn type_name(x: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, ReplyError> {
    Ok(match x.fetch(key)? {
        None => "none",
        Some((Value::Str(_), _)) => "string",
        Some((Value::Hash(_), _)) => "hash",
        Some((Value::Zset(_), _)) => "zset",
    })
}

pub(super) fn type_(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let t = type_name(x, &a[1])?;
    reply::simple(x.out, t);
    Ok(())
}

/// KEYS pattern: every key matching, in byte order (redis-server answers in its hash order);
/// keys past their time are expired on the way.
pub(super) fn keys(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let mut hits = vec![];
    let mut after: Option<Vec<u8>> = None;
    loop {
        let batch = x.store.keys_after(after.as_deref(), CHUNK).map_err(ReplyError::from)?;
        let n = batch.len();
        for k in batch {
            after = Some(k.clone());
            if !glob_match(&a[1], &k) {
                continue;
            }
            if x.expired(&k)? {
                x.expire_now(&k)?;
            } else {
                hits.push(k);
            }
        }
        if n < CHUNK {
            break;
        }
    }
    reply::array(x.out, hits.len());
    for k in &hits {
        reply::bulk(x.out, k);
    }
    Ok(())
}

/// RENAME / RENAMENX key newkey: the value and its expiry time move to `newkey`, replacing what
/// was there (RENAMENX: only if nothing was).
pub(super) fn rename(x: &mut Ctx<'_>, a: &Args, nx: bool) -> Result<(), ReplyError> {
    let (from, to) = (&a[1], &a[2]);
    if x.fetch(from)?.is_none() {
        return Err("ERR no such key".into());
    }
    if from == to {
        if nx {
            reply::int(x.out, 0);
        } else {
            reply::ok(x.out);
        }
        return Ok(());
    }
    if nx && x.alive(to)? {
        reply::int(x.out, 0);
        return Ok(());
    }
    // The stored bytes as they are: header (type, expiry time) and all.
    let raw = x.store.get(from).map_err(ReplyError::from)?.ok_or("ERR no such key")?;
    let (_, ttl, _) = header(&raw)?;
    x.store.set(to, &raw).map_err(ReplyError::from)?;
    x.db.expiries.set(to, ttl);
    x.remove(from)?;
    if nx {
        reply::int(x.out, 1);
    } else {
        reply::ok(x.out);
    }
    Ok(())
}

/// RANDOMKEY: a key, or nil when there is none. One of the up to [`RANDOM_WINDOW`] keys that
/// follow a random byte string (wrapping to the first keys): uniform over a keyspace smaller
/// than that, not over a bigger one (redis-server picks from its hash table). Keys past their
/// time are expired on the way, as redis-server does.
pub(super) fn randomkey(x: &mut Ctx<'_>, _: &Args) -> Result<(), ReplyError> {
    for _ in 0..CHUNK {
        let r = x.db.random(x.now_us);
        let start = r.to_be_bytes();
        let start = &start[..1 + (r % 4) as usize];
        let mut keys: std::collections::BTreeSet<Vec<u8>> =
            x.store.keys_after(Some(start), RANDOM_WINDOW).map_err(ReplyError::from)?.into_iter().collect();
        if keys.len() < RANDOM_WINDOW {
            keys.extend(x.store.keys_after(None, RANDOM_WINDOW - keys.len()).map_err(ReplyError::from)?);
        }
        if keys.is_empty() {
            break;
        }
        let pick = (x.db.random(x.now_us) % keys.len() as u64) as usize;
        let k = keys.into_iter().nth(pick).expect("a key");
        if x.expired(&k)? {
            x.expire_now(&k)?;
            continue;
        }
        reply::bulk(x.out, &k);
        return Ok(());
    }
    reply::null(x.out);
    Ok(())
}

/// How many keys RANDOMKEY picks among.
const RANDOM_WINDOW: usize = 64;

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: up to COUNT keys after the cursor's
/// (filtered by MATCH and TYPE after they are read, as Redis filters), and the next cursor,
/// "0" at the end.
pub(super) fn scan(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
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
        c => Some(x.db.cursors.last_key.get(&c).cloned().ok_or(INVALID)?),
    };
    let keys = x.store.keys_after(after.as_deref(), count).map_err(ReplyError::from)?;
    let next = if keys.len() < count { 0 } else { x.db.cursors.issue(keys.last().cloned().unwrap_or_default()) };
    let mut picked = Vec::with_capacity(keys.len());
    for k in keys {
        if pattern.is_some_and(|p| !glob_match(p, &k)) {
            continue;
        }
        if x.expired(&k)? {
            x.expire_now(&k)?;
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

pub(super) fn dbsize(x: &mut Ctx<'_>, _: &Args) -> Result<(), ReplyError> {
    let n = x.store.key_count().map_err(ReplyError::from)?;
    reply::int(x.out, n as i64);
    Ok(())
}

pub(super) fn flush(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    match a.len() {
        1 => {}
        2 if matches!(lower(&a[1]).as_str(), "async" | "sync") => {}
        _ => return Err(SYNTAX.into()),
    }
    // In chunks: other clients' commands run between them (see `Long::Flush`).
    x.db.expiries.clear(false);
    if x.store.clear_some(CHUNK).map_err(ReplyError::from)? {
        x.db.expiries.clear(true);
        reply::ok(x.out);
    } else {
        x.long = Some(Long::Flush);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::harness::T;

    /// Each reply is redis-server 7.0's to the same commands (KEYS in byte order, where
    /// redis-server's order is its hash table's).
    #[test]
    fn keyspace_commands_answer_as_redis_server() {
        let mut t = T::new();
        assert_eq!(t.run("MSET a 1 b 2 ab 3"), "+OK\r\n");
        assert_eq!(t.run("HSET h f v"), ":1\r\n");
        assert_eq!(t.run("KEYS *"), "*4\r\n$1\r\na\r\n$2\r\nab\r\n$1\r\nb\r\n$1\r\nh\r\n");
        assert_eq!(t.run("KEYS a*"), "*2\r\n$1\r\na\r\n$2\r\nab\r\n");
        assert_eq!(t.run("KEYS ?"), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nh\r\n");
        assert_eq!(t.run("KEYS [ab]"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run("KEYS nothing"), "*0\r\n");
        assert_eq!(t.run("RENAME a c"), "+OK\r\n");
        assert_eq!(t.run("GET c"), "$1\r\n1\r\n");
        assert_eq!(t.run("EXISTS a"), ":0\r\n");
        assert_eq!(t.run("RENAME a c"), "-ERR no such key\r\n");
        assert_eq!(t.run("RENAME c c"), "+OK\r\n");
        assert_eq!(t.run("RENAMENX c c"), ":0\r\n");
        assert_eq!(t.run("RENAMENX c b"), ":0\r\n");
        assert_eq!(t.run("RENAMENX c d"), ":1\r\n");
        assert_eq!(t.run("GET d"), "$1\r\n1\r\n");
        assert_eq!(t.run("RENAME d h"), "+OK\r\n");
        assert_eq!(t.run("TYPE h"), "+string\r\n");
        assert_eq!(t.run("GET h"), "$1\r\n1\r\n");
        assert_eq!(t.run("RENAME none x"), "-ERR no such key\r\n");
        assert_eq!(t.run("RENAMENX none x"), "-ERR no such key\r\n");
        assert_eq!(t.run("TOUCH b d none b"), ":2\r\n");
        assert_eq!(t.run("EXPIRE b 100"), ":1\r\n");
        assert_eq!(t.run("RENAME b e"), "+OK\r\n");
        assert_eq!(t.run("TTL e"), ":100\r\n");
        assert_eq!(t.run("TTL b"), ":-2\r\n");
        assert_eq!(t.run("SET f 1"), "+OK\r\n");
        assert_eq!(t.run("EXPIRE f 50"), ":1\r\n");
        assert_eq!(t.run("RENAME e f"), "+OK\r\n");
        assert_eq!(t.run("TTL f"), ":100\r\n");
        assert_eq!(t.run("SET g 1"), "+OK\r\n");
        assert_eq!(t.run("EXPIRE g 50"), ":1\r\n");
        assert_eq!(t.run("RENAME h g"), "+OK\r\n");
        assert_eq!(t.run("TTL g"), ":-1\r\n");
        assert_eq!(t.run("TYPE g"), "+string\r\n");
        assert_eq!(t.run("DEL f g"), ":2\r\n");
        assert_eq!(t.run("DBSIZE"), ":1\r\n");
    }

    #[test]
    fn randomkey_picks_a_live_key_and_expires_the_dead_ones() {
        let mut t = T::new();
        assert_eq!(t.run("RANDOMKEY"), "$-1\r\n");
        for k in ["a", "b", "c"] {
            t.run(&format!("SET {k} v"));
        }
        t.run("SET dead v PX 10");
        t.advance_ms(10);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let r = t.run("RANDOMKEY");
            assert!(["$1\r\na\r\n", "$1\r\nb\r\n", "$1\r\nc\r\n"].contains(&r.as_str()), "{r:?}");
            seen.insert(r);
        }
        assert_eq!(seen.len(), 3);
        assert!(!t.store.map.contains_key(&b"dead"[..]));
        t.run("DEL a b c");
        t.run("SET dead v PX 10");
        t.advance_ms(10);
        assert_eq!(t.run("RANDOMKEY"), "$-1\r\n");
        assert!(t.store.map.is_empty() && t.counters.expired_keys == 2);
    }
}
