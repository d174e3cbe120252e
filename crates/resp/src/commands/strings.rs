//! String commands: GET, SET and its options, the multi-key and counter commands, APPEND.

use super::*;

pub(super) fn get(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let v = x.lookup(&a[1])?;
    reply::opt_bulk(x.out, v.as_deref());
    Ok(())
}

/// SET key value [NX|XX] [GET] [KEEPTTL]; EX/PX/EXAT/PXAT are checked as Redis checks them,
/// then refused: the stores behind this front-end keep no expiry times.
pub(super) fn set(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let (mut nx, mut xx, mut get, mut keepttl, mut expire) = (false, false, false, false, None);
    let mut j = 3;
    while j < a.len() {
        let opt = lower(&a[j]);
        let has_next = j + 1 < a.len();
        match opt.as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "keepttl" if expire.is_none() => keepttl = true,
            "ex" | "px" | "exat" | "pxat" if !keepttl && expire.is_none() && has_next => {
                expire = Some(a[j + 1].clone());
                j += 1;
            }
            _ => return Err(SYNTAX.into()),
        }
        j += 1;
    }
    if let Some(e) = expire {
        let t = integer(&e)?;
        if t <= 0 {
            return Err("ERR invalid expire time in 'set' command".into());
        }
        return Err("ERR expiry times (EX, PX, EXAT, PXAT) are not supported by ssdlab's stores".into());
    }
    // Any type counts as there for NX/XX; GET needs a string.
    let there = if nx || xx || get { x.load(&a[1])? } else { None };
    let old = match &there {
        Some(Value::Str(s)) => Some(s.clone()),
        Some(_) if get => return Err(WRONGTYPE.into()),
        _ => None,
    };
    if (nx && there.is_some()) || (xx && there.is_none()) {
        if get {
            reply::opt_bulk(x.out, old.as_deref());
        } else {
            reply::null(x.out);
        }
        return Ok(());
    }
    x.store_value(&a[1], &a[2])?;
    if get {
        reply::opt_bulk(x.out, old.as_deref());
    } else {
        reply::ok(x.out);
    }
    Ok(())
}

pub(super) fn setnx(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let there = x.store.exists(&a[1]).map_err(err)?;
    if !there {
        x.store_value(&a[1], &a[2])?;
    }
    reply::int(x.out, !there as i64);
    Ok(())
}

pub(super) fn getset(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let old = x.lookup(&a[1])?;
    x.store_value(&a[1], &a[2])?;
    reply::opt_bulk(x.out, old.as_deref());
    Ok(())
}

pub(super) fn getdel(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let old = x.lookup(&a[1])?;
    if old.is_some() {
        x.store.del(&a[1]).map_err(err)?;
    }
    reply::opt_bulk(x.out, old.as_deref());
    Ok(())
}

pub(super) fn mget(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
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

pub(super) fn mget_value(x: &mut Ctx<'_>, k: &[u8]) -> Result<Option<Vec<u8>>, String> {
    Ok(match x.load(k)? {
        Some(Value::Str(s)) => Some(s),
        _ => None,
    })
}

pub(super) fn mset(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    if a.len().is_multiple_of(2) {
        return Err(wrong_arity("mset"));
    }
    for kv in a[1..].chunks(2) {
        x.store_value(&kv[0], &kv[1])?;
    }
    reply::ok(x.out);
    Ok(())
}

pub(super) fn incr_arg(x: &mut Ctx<'_>, a: &Args, negate: bool) -> Result<(), String> {
    let by = integer(&a[2])?;
    if negate && by == i64::MIN {
        return Err("ERR decrement would overflow".into());
    }
    incr_by(x, &a[1], if negate { -by } else { by })
}

pub(super) fn incr_by(x: &mut Ctx<'_>, key: &[u8], by: i64) -> Result<(), String> {
    let old = match x.lookup(key)? {
        Some(v) => integer(&v)?,
        None => 0,
    };
    let new = old.checked_add(by).ok_or_else(|| "ERR increment or decrement would overflow".to_string())?;
    x.store_value(key, new.to_string().as_bytes())?;
    reply::int(x.out, new);
    Ok(())
}

pub(super) fn append(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    // In place: the stored bytes (type tag first) grow by the argument, with no copy of the
    // value beyond what the store itself needs.
    let max = x.store.max_value_bytes();
    let (tail, mut len, mut found, mut refused) = (&a[2], 0, false, None);
    let r = x.store.update(&a[1], &mut |v| {
        found = !v.is_empty();
        if v.first().is_some_and(|&tag| tag != 0) {
            refused = Some(WRONGTYPE.to_string());
            return Err(String::new());
        }
        let n = v.len().max(1) + tail.len();
        if n > max {
            refused = Some(too_big(n, max));
            return Err(String::new());
        }
        if !found {
            v.push(0);
        }
        v.extend_from_slice(tail);
        len = v.len() - 1;
        Ok(())
    });
    if let Some(e) = refused {
        return Err(e);
    }
    r.map_err(err)?;
    if found {
        x.counters.keyspace_hits += 1;
    } else {
        x.counters.keyspace_misses += 1;
    }
    reply::int(x.out, len as i64);
    Ok(())
}

/// A stored value of `n` bytes (type tag included) is more than the store's `max`.
pub(super) fn too_big(n: usize, max: usize) -> String {
    format!("ERR value of {} bytes: this store takes values of at most {} bytes", n - 1, max - 1)
}

pub(super) fn strlen(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let n = x.lookup(&a[1])?.map_or(0, |v| v.len());
    reply::int(x.out, n as i64);
    Ok(())
}
