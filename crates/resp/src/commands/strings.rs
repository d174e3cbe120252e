//! String commands: GET, SET and its options (expiry times included), SETEX, the multi-key and
//! counter commands (INCRBYFLOAT in C's `long double`), APPEND, GETRANGE, SETRANGE.

use super::*;

pub(super) fn get(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let v = x.lookup(&a[1])?;
    reply::opt_bulk(x.out, v.as_deref());
    Ok(())
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL], options
/// accepted as Redis 7.0 accepts them (the same time option twice is taken, the last one wins).
pub(super) fn set(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expire: Option<(&str, &[u8])> = None;
    let mut j = 3;
    while j < a.len() {
        let opt = lower(&a[j]);
        let has_next = j + 1 < a.len();
        match opt.as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "keepttl" if expire.is_none() => keepttl = true,
            "ex" | "px" | "exat" | "pxat" if !keepttl && expire.is_none_or(|(u, _)| u == opt) && has_next => {
                expire = Some((["ex", "px", "exat", "pxat"].into_iter().find(|u| *u == opt).expect("a unit"), &a[j + 1]));
                j += 1;
            }
            _ => return Err(SYNTAX.into()),
        }
        j += 1;
    }
    let ttl = match expire {
        None => None,
        Some((unit, t)) => Some(deadline(x, t, unit.starts_with('e'), !unit.ends_with("at"), "set")?),
    };
    set_generic(x, &a[1], &a[2], SetHow { nx, xx, get, keepttl, ttl })
}

/// How SET stores: its conditions, GET, and the new value's expiry time.
#[derive(Default)]
pub(super) struct SetHow {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    ttl: Option<i64>,
}

/// SET's time argument as a unix time in ms (Redis's getExpireMillisecondsOrReply): a positive
/// count of seconds or ms, from now if `relative`.
fn deadline(x: &Ctx<'_>, t: &[u8], seconds: bool, relative: bool, name: &str) -> Result<i64, ReplyError> {
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let mut ms = integer(t)?;
    if ms <= 0 {
        return Err(invalid().into());
    }
    if seconds {
        ms = ms.checked_mul(1000).ok_or_else(invalid)?;
    }
    if relative {
        ms = ms.checked_add(x.now_ms()).ok_or_else(invalid)?;
    }
    Ok(ms)
}

fn set_generic(x: &mut Ctx<'_>, key: &[u8], value: &[u8], how: SetHow) -> Result<(), ReplyError> {
    // Any type counts as there for NX/XX; GET needs a string.
    let there = if how.nx || how.xx || how.get || how.keepttl { x.load(key)? } else { None };
    let old = match &there {
        Some((Value::Str(s), _)) => Some(s.clone()),
        Some(_) if how.get => return Err(WRONGTYPE.into()),
        _ => None,
    };
    if (how.nx && there.is_some()) || (how.xx && there.is_none()) {
        if how.get {
            reply::opt_bulk(x.out, old.as_deref());
        } else {
            reply::null(x.out);
        }
        return Ok(());
    }
    let ttl = if how.keepttl { there.and_then(|(_, t)| t) } else { how.ttl };
    if ttl.is_some_and(|t| t <= x.now_ms()) {
        // EXAT/PXAT in the past: stored and expired at once, i.e. deleted.
        x.remove(key)?;
    } else {
        x.save(key, &Value::Str(value.to_vec()), ttl)?;
    }
    if how.get {
        reply::opt_bulk(x.out, old.as_deref());
    } else {
        reply::ok(x.out);
    }
    Ok(())
}

/// SETEX / PSETEX key time value: SET key value EX/PX time, under its own name in errors.
pub(super) fn setex(x: &mut Ctx<'_>, a: &Args, seconds: bool, name: &str) -> Result<(), ReplyError> {
    let ttl = deadline(x, &a[2], seconds, true, name)?;
    set_generic(x, &a[1], &a[3], SetHow { ttl: Some(ttl), ..SetHow::default() })
}

pub(super) fn setnx(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let there = x.alive(&a[1])?;
    if !there {
        x.store_value(&a[1], &a[2])?;
    }
    reply::int(x.out, !there as i64);
    Ok(())
}

pub(super) fn getset(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let old = x.lookup(&a[1])?;
    x.store_value(&a[1], &a[2])?;
    reply::opt_bulk(x.out, old.as_deref());
    Ok(())
}

pub(super) fn getdel(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let old = x.lookup(&a[1])?;
    if old.is_some() {
        x.remove(&a[1])?;
    }
    reply::opt_bulk(x.out, old.as_deref());
    Ok(())
}

pub(super) fn mget(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    // The first chunk is looked up before replying, so that a store error there (every error of
    // an MGET of up to CHUNK keys) is one error, not a torn array. Keys of another type read as
    // nil, as in Redis. Past the first chunk a key the store fails on is an error element.
    let first = &a[1..a.len().min(1 + CHUNK)];
    let mut vals = Vec::with_capacity(first.len());
    for k in first {
        vals.push(mget_value(x, k)?);
    }
    reply::array(x.out, a.len() - 1);
    for v in &vals {
        reply::opt_bulk(x.out, v.as_deref());
    }
    if a.len() > 1 + CHUNK {
        x.long = Some(Long::Mget { keys: a[1 + CHUNK..].to_vec(), next: 0 });
    }
    Ok(())
}

pub(super) fn mget_value(x: &mut Ctx<'_>, k: &[u8]) -> Result<Option<Vec<u8>>, ReplyError> {
    Ok(match x.load(k)? {
        Some((Value::Str(s), _)) => Some(s),
        _ => None,
    })
}

pub(super) fn mset(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    if a.len().is_multiple_of(2) {
        return Err(wrong_arity("mset").into());
    }
    for kv in a[1..].chunks(2) {
        x.store_value(&kv[0], &kv[1])?;
    }
    reply::ok(x.out);
    Ok(())
}

/// MSETNX key value [key value ...]: all set (1), or none when any key is there (0).
pub(super) fn msetnx(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    if a.len().is_multiple_of(2) {
        return Err(wrong_arity("msetnx").into());
    }
    for kv in a[1..].chunks(2) {
        if x.alive(&kv[0])? {
            reply::int(x.out, 0);
            return Ok(());
        }
    }
    for kv in a[1..].chunks(2) {
        x.store_value(&kv[0], &kv[1])?;
    }
    reply::int(x.out, 1);
    Ok(())
}

pub(super) fn incr_arg(x: &mut Ctx<'_>, a: &Args, negate: bool) -> Result<(), ReplyError> {
    let by = integer(&a[2])?;
    if negate && by == i64::MIN {
        return Err("ERR decrement would overflow".into());
    }
    incr_by(x, &a[1], if negate { -by } else { by })
}

pub(super) fn incr_by(x: &mut Ctx<'_>, key: &[u8], by: i64) -> Result<(), ReplyError> {
    let (old, ttl) = match x.lookup_ttl(key)? {
        Some((v, ttl)) => (integer(&v)?, ttl),
        None => (0, None),
    };
    let new = old.checked_add(by).ok_or_else(|| "ERR increment or decrement would overflow".to_string())?;
    x.save(key, &Value::Str(new.to_string().into_bytes()), ttl)?;
    reply::int(x.out, new);
    Ok(())
}

const NOT_FLOAT: &str = "ERR value is not a valid float";

/// INCRBYFLOAT key increment: in C's `long double`, printed as Redis prints it (see
/// [`crate::ldouble`]); the key keeps its expiry time.
pub(super) fn incrbyfloat(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (old, ttl) = match x.lookup_ttl(&a[1])? {
        Some((v, ttl)) => (ldouble::parse(&v).ok_or(NOT_FLOAT)?, ttl),
        None => (Ok(ldouble::Ld::ZERO), None),
    };
    let by = ldouble::parse(&a[2]).ok_or(NOT_FLOAT)?;
    let new = ld_sum(old, by)?;
    x.save(&a[1], &Value::Str(new.clone().into_bytes()), ttl)?;
    reply::bulk(x.out, new.as_bytes());
    Ok(())
}

/// The text of `a + b`, or Redis's error for an infinite or NaN result.
pub(super) fn ld_sum(a: Result<ldouble::Ld, ldouble::NotFinite>, b: Result<ldouble::Ld, ldouble::NotFinite>) -> Result<String, ReplyError> {
    match (a, b) {
        (Ok(a), Ok(b)) => a.plus(b).ok(),
        _ => None,
    }
    .map(|v| v.format())
    .ok_or_else(|| "ERR increment would produce NaN or Infinity".into())
}

pub(super) fn append(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    // In place: the stored bytes (header first) grow by the argument, with no copy of the
    // value beyond what the store itself needs; the key keeps its expiry time.
    let (max, now) = (x.store.max_value_bytes(), x.now_ms());
    let (tail, mut len, mut found, mut refused, mut expired) = (&a[2], 0, false, None, false);
    let r = x.store.update(&a[1], &mut |v| {
        found = !v.is_empty();
        let head = if found {
            match header(v) {
                Err(e) => {
                    refused = Some(e);
                    return Err(StoreError::new(""));
                }
                Ok((_, Some(t), _)) if t <= now => {
                    expired = true;
                    return Err(StoreError::new(""));
                }
                Ok((0, _, n)) => n,
                Ok(_) => {
                    refused = Some(WRONGTYPE.into());
                    return Err(StoreError::new(""));
                }
            }
        } else {
            1
        };
        let n = v.len().max(1) + tail.len();
        if n > max {
            refused = Some(too_big(n, max, head));
            return Err(StoreError::new(""));
        }
        if !found {
            v.push(0);
        }
        v.extend_from_slice(tail);
        len = v.len() - head;
        Ok(())
    });
    if expired {
        // Deleted as expired first; then the APPEND makes a new key.
        x.expire_now(&a[1])?;
        return append(x, a);
    }
    if let Some(e) = refused {
        return Err(e);
    }
    r.map_err(ReplyError::from)?;
    if found {
        x.counters.keyspace_hits += 1;
    } else {
        x.counters.keyspace_misses += 1;
    }
    reply::int(x.out, len as i64);
    Ok(())
}

/// A stored value of `n` bytes (`header` of them the type byte and expiry time) is more than
/// the store's `max`.
pub(super) fn too_big(n: usize, max: usize, header: usize) -> ReplyError {
    format!("ERR value of {} bytes: this store takes values of at most {} bytes", n - header, max.saturating_sub(header)).into()
}

pub(super) fn strlen(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let n = x.lookup(&a[1])?.map_or(0, |v| v.len());
    reply::int(x.out, n as i64);
    Ok(())
}

/// GETRANGE key start end: Redis's index rules (negative from the end, clamped), "" for a
/// missing key or an empty range.
pub(super) fn getrange(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (mut start, mut end) = (integer(&a[2])?, integer(&a[3])?);
    let s = x.lookup(&a[1])?.unwrap_or_default();
    let len = s.len() as i64;
    if start < 0 && end < 0 && start > end {
        reply::bulk(x.out, b"");
        return Ok(());
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    let start = start.max(0);
    let end = end.max(0).min(len - 1);
    if start > end || len == 0 {
        reply::bulk(x.out, b"");
    } else {
        reply::bulk(x.out, &s[start as usize..=end as usize]);
    }
    Ok(())
}

/// SETRANGE key offset value: overwrite from `offset`, zero-padded; the new length. The key
/// keeps its expiry time.
pub(super) fn setrange(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let offset = integer(&a[2])?;
    if offset < 0 {
        return Err("ERR offset is out of range".into());
    }
    let val = &a[3];
    let (mut s, ttl) = match x.lookup_ttl(&a[1])? {
        None if val.is_empty() => {
            reply::int(x.out, 0);
            return Ok(());
        }
        None => (vec![], None),
        Some((s, _)) if val.is_empty() => {
            reply::int(x.out, s.len() as i64);
            return Ok(());
        }
        Some(found) => found,
    };
    let end = (offset as u64).saturating_add(val.len() as u64);
    if end > crate::proto::BULK_MAX_BYTES as u64 {
        return Err("ERR string exceeds maximum allowed size (proto-max-bulk-len)".into());
    }
    let (end, max, head) = (end as usize, x.store.max_value_bytes(), header_len(ttl));
    if end.max(s.len()) + head > max {
        return Err(too_big(end.max(s.len()) + head, max, head));
    }
    if s.len() < end {
        s.resize(end, 0);
    }
    s[offset as usize..end].copy_from_slice(val);
    let n = s.len();
    x.save(&a[1], &Value::Str(s), ttl)?;
    reply::int(x.out, n as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::harness::T;

    /// Each reply is redis-server 7.0's to the same commands (the clock stands still here, as
    /// it does for redis-server within a millisecond).
    #[test]
    fn string_commands_answer_as_redis_server() {
        let mut t = T::new();
        assert_eq!(t.run("SET s Hello"), "+OK\r\n");
        assert_eq!(t.run("GETRANGE s 0 -1"), "$5\r\nHello\r\n");
        assert_eq!(t.run("GETRANGE s -3 -1"), "$3\r\nllo\r\n");
        assert_eq!(t.run("GETRANGE s 5 10"), "$0\r\n\r\n");
        assert_eq!(t.run("GETRANGE s -1 -5"), "$0\r\n\r\n");
        assert_eq!(t.run("GETRANGE s 3 1"), "$0\r\n\r\n");
        assert_eq!(t.run("GETRANGE s 0 100"), "$5\r\nHello\r\n");
        assert_eq!(t.run("GETRANGE s -100 2"), "$3\r\nHel\r\n");
        assert_eq!(t.run("GETRANGE s -100 -90"), "$1\r\nH\r\n");
        assert_eq!(t.run("GETRANGE missing 0 -1"), "$0\r\n\r\n");
        assert_eq!(t.run("GETRANGE s x 1"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("GETRANGE s 0 9223372036854775807"), "$5\r\nHello\r\n");
        assert_eq!(t.run("GETRANGE s -9223372036854775808 0"), "$1\r\nH\r\n");
        assert_eq!(t.run("SET e \"\""), "+OK\r\n");
        assert_eq!(t.run("GETRANGE e 0 -1"), "$0\r\n\r\n");
        assert_eq!(t.run("GETRANGE e -1 0"), "$0\r\n\r\n");
        assert_eq!(t.run("SETRANGE n 0 \"\""), ":0\r\n");
        assert_eq!(t.run("EXISTS n"), ":0\r\n");
        assert_eq!(t.run("SETRANGE n 3 ab"), ":5\r\n");
        assert_eq!(t.run("GET n"), "$5\r\n\0\0\0ab\r\n");
        assert_eq!(t.run("SETRANGE s 1 X"), ":5\r\n");
        assert_eq!(t.run("GET s"), "$5\r\nHXllo\r\n");
        assert_eq!(t.run("SETRANGE s 10 \"\""), ":5\r\n");
        assert_eq!(t.run("SETRANGE s -1 x"), "-ERR offset is out of range\r\n");
        assert_eq!(t.run("SETRANGE s x x"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("SETRANGE s 536870911 xx"), "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n");
        assert_eq!(t.run("HSET h f v"), ":1\r\n");
        assert_eq!(t.run("SETRANGE h 0 x"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("GETRANGE h 0 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("INCRBYFLOAT h 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("SET f 10.5"), "+OK\r\n");
        assert_eq!(t.run("INCRBYFLOAT f 0.1"), "$4\r\n10.6\r\n");
        assert_eq!(t.run("INCRBYFLOAT f -5e-1"), "$4\r\n10.1\r\n");
        assert_eq!(t.run("INCRBYFLOAT f abc"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("INCRBYFLOAT f inf"), "-ERR increment would produce NaN or Infinity\r\n");
        assert_eq!(t.run("INCRBYFLOAT nf 3"), "$1\r\n3\r\n");
        assert_eq!(t.run("INCRBYFLOAT nf 0x1p-2"), "$4\r\n3.25\r\n");
        assert_eq!(t.run("SET g abc"), "+OK\r\n");
        assert_eq!(t.run("INCRBYFLOAT g 1"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("SET g \" 1\""), "+OK\r\n");
        assert_eq!(t.run("INCRBYFLOAT g 1"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("SET g 1e5000"), "+OK\r\n");
        assert_eq!(t.run("INCRBYFLOAT g 1"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("SET g 7"), "+OK\r\n");
        assert_eq!(t.run("INCRBYFLOAT g -7"), "$1\r\n0\r\n");
        assert_eq!(t.run("GET g"), "$1\r\n0\r\n");
        assert_eq!(t.run("MSETNX a 1 b 2"), ":1\r\n");
        assert_eq!(t.run("MSETNX b 3 c 4"), ":0\r\n");
        assert_eq!(t.run("EXISTS c"), ":0\r\n");
        assert_eq!(t.run("MSETNX a 1 b"), "-ERR wrong number of arguments for 'msetnx' command\r\n");
        assert_eq!(t.run("MSETNX a"), "-ERR wrong number of arguments for 'msetnx' command\r\n");
        assert_eq!(t.run("MGET a b c"), "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n");
        assert_eq!(t.run("SETEX k 0 v"), "-ERR invalid expire time in 'setex' command\r\n");
        assert_eq!(t.run("SETEX k x v"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("PSETEX k -5 v"), "-ERR invalid expire time in 'psetex' command\r\n");
        assert_eq!(t.run("SETEX k 100 v"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":100\r\n");
        assert_eq!(t.run("PSETEX k 9223372036854775807 v"), "-ERR invalid expire time in 'psetex' command\r\n");
        assert_eq!(t.run("SETEX k 9223372036854775 v"), "-ERR invalid expire time in 'setex' command\r\n");
        assert_eq!(t.run("SET k v EX 10 EX 20"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":20\r\n");
        assert_eq!(t.run("SET k v EX 10 PX 20"), "-ERR syntax error\r\n");
        assert_eq!(t.run("SET k v KEEPTTL EX 5"), "-ERR syntax error\r\n");
        assert_eq!(t.run("SET k v EX 5 KEEPTTL"), "-ERR syntax error\r\n");
        assert_eq!(t.run("SET k v PXAT 1 EXAT 1"), "-ERR syntax error\r\n");
        assert_eq!(t.run("SET k v KEEPTTL KEEPTTL"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":20\r\n");
        assert_eq!(t.run("SET k w KEEPTTL"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":20\r\n");
        assert_eq!(t.run("SET k w"), "+OK\r\n");
        assert_eq!(t.run("TTL k"), ":-1\r\n");
        assert_eq!(t.run("SET k v EX 100 GET"), "$1\r\nw\r\n");
        assert_eq!(t.run("TTL k"), ":100\r\n");
        assert_eq!(t.run("INCR k"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("SET c 5 EX 100"), "+OK\r\n");
        assert_eq!(t.run("INCR c"), ":6\r\n");
        assert_eq!(t.run("TTL c"), ":100\r\n");
        assert_eq!(t.run("APPEND c 1"), ":2\r\n");
        assert_eq!(t.run("TTL c"), ":100\r\n");
        assert_eq!(t.run("GETSET c 1"), "$2\r\n61\r\n");
        assert_eq!(t.run("TTL c"), ":-1\r\n");
        assert_eq!(t.run("SET k v EXAT 1"), "+OK\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("SET k v NX EXAT 1"), "+OK\r\n");
        assert_eq!(t.run("EXISTS k"), ":0\r\n");
        assert_eq!(t.run("SET k v GET PXAT 1"), "$-1\r\n");
        assert_eq!(t.run("SET k v EX 0"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(t.run("SET k v PX -1"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(t.run("SET k v EXAT 9223372036854775807"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(t.run("SET k v PX 9223372036854775807"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(t.run("SET k v EX 9223372036854776"), "-ERR invalid expire time in 'set' command\r\n");
    }

    #[test]
    fn a_stored_value_near_the_store_limit_has_room_for_its_expiry_time_or_says_so() {
        let mut t = T::new();
        t.store.max_value_bytes = 16;
        assert_eq!(t.run("SET k 012345678901234"), "+OK\r\n");
        assert_eq!(t.run("SET k 012345678901234 EX 10"), "-ERR value of 15 bytes: this store takes values of at most 7 bytes\r\n");
        assert_eq!(t.run("SET k 0123456 EX 10"), "+OK\r\n");
        assert_eq!(t.run("APPEND k 7"), "-ERR value of 8 bytes: this store takes values of at most 7 bytes\r\n");
        assert_eq!(t.run("SETRANGE k 7 x"), "-ERR value of 8 bytes: this store takes values of at most 7 bytes\r\n");
        assert_eq!(t.run("GET k"), "$7\r\n0123456\r\n");
    }

    #[test]
    fn append_to_an_expired_key_starts_a_new_value_without_a_time() {
        let mut t = T::new();
        t.run("SET k old PX 100");
        assert_eq!(t.run("APPEND k x"), ":4\r\n");
        assert_eq!(t.run("PTTL k"), ":100\r\n");
        t.advance_ms(100);
        assert_eq!(t.run("APPEND k new"), ":3\r\n");
        assert_eq!(t.run("GET k"), "$3\r\nnew\r\n");
        assert_eq!(t.run("TTL k"), ":-1\r\n");
        assert_eq!(t.counters.expired_keys, 1);
    }
}
