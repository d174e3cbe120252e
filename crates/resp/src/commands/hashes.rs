//! Hash commands: a hash is one stored value, its fields in insertion order.

use super::*;

/// HSET / HMSET key field value [field value ...]: set fields in place, new ones at the end.
pub(super) fn hset(x: &mut Ctx<'_>, a: &Args, hmset: bool) -> Result<(), String> {
    if !a.len().is_multiple_of(2) {
        return Err(wrong_arity(if hmset { "hmset" } else { "hset" }));
    }
    let mut h = x.hash(&a[1])?;
    let mut added = 0;
    for fv in a[2..].chunks(2) {
        match h.iter_mut().find(|(f, _)| *f == fv[0]) {
            Some(e) => e.1 = fv[1].clone(),
            None => {
                h.push((fv[0].clone(), fv[1].clone()));
                added += 1;
            }
        }
    }
    x.save(&a[1], &Value::Hash(h))?;
    if hmset {
        reply::ok(x.out);
    } else {
        reply::int(x.out, added);
    }
    Ok(())
}

pub(super) fn hget(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let h = x.hash(&a[1])?;
    reply::opt_bulk(x.out, h.iter().find(|(f, _)| *f == a[2]).map(|(_, v)| v.as_slice()));
    Ok(())
}

pub(super) fn hmget(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let h = x.hash(&a[1])?;
    reply::array(x.out, a.len() - 2);
    for f in &a[2..] {
        reply::opt_bulk(x.out, h.iter().find(|(g, _)| g == f).map(|(_, v)| v.as_slice()));
    }
    Ok(())
}

pub(super) fn hgetall(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let h = x.hash(&a[1])?;
    reply::array(x.out, 2 * h.len());
    for (f, v) in &h {
        reply::bulk(x.out, f);
        reply::bulk(x.out, v);
    }
    Ok(())
}

/// HDEL key field [field ...]: the hash goes when its last field does.
pub(super) fn hdel(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let mut h = x.hash(&a[1])?;
    let before = h.len();
    h.retain(|(f, _)| !a[2..].contains(f));
    let removed = before - h.len();
    x.shrunk(&a[1], removed, h.is_empty(), Value::Hash(h))
}
