//! Hash commands: a hash is one stored value, its fields in insertion order (as Redis keeps
//! small hashes); a change keeps the key's expiry time.

use super::*;

/// HSET / HMSET key field value [field value ...]: set fields in place, new ones at the end.
pub(super) fn hset(x: &mut Ctx<'_>, a: &Args, hmset: bool) -> Result<(), ReplyError> {
    if !a.len().is_multiple_of(2) {
        return Err(wrong_arity(if hmset { "hmset" } else { "hset" }).into());
    }
    let (mut h, ttl) = x.hash_ttl(&a[1])?;
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
    x.save(&a[1], &Value::Hash(h), ttl)?;
    if hmset {
        reply::ok(x.out);
    } else {
        reply::int(x.out, added);
    }
    Ok(())
}

pub(super) fn hget(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let h = x.hash(&a[1])?;
    reply::opt_bulk(x.out, h.iter().find(|(f, _)| *f == a[2]).map(|(_, v)| v.as_slice()));
    Ok(())
}

pub(super) fn hmget(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let h = x.hash(&a[1])?;
    reply::array(x.out, a.len() - 2);
    for f in &a[2..] {
        reply::opt_bulk(x.out, h.iter().find(|(g, _)| g == f).map(|(_, v)| v.as_slice()));
    }
    Ok(())
}

pub(super) fn hgetall(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let h = x.hash(&a[1])?;
    reply::array(x.out, 2 * h.len());
    for (f, v) in &h {
        reply::bulk(x.out, f);
        reply::bulk(x.out, v);
    }
    Ok(())
}

/// HDEL key field [field ...]: the hash goes when its last field does.
pub(super) fn hdel(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (mut h, ttl) = x.hash_ttl(&a[1])?;
    let before = h.len();
    h.retain(|(f, _)| !a[2..].contains(f));
    let removed = before - h.len();
    x.shrunk(&a[1], removed, h.is_empty(), Value::Hash(h), ttl)
}

/// HKEYS / HVALS key: the fields or the values, in the hash's order.
pub(super) fn hkeys(x: &mut Ctx<'_>, a: &Args, values: bool) -> Result<(), ReplyError> {
    let h = x.hash(&a[1])?;
    reply::array(x.out, h.len());
    for (f, v) in &h {
        reply::bulk(x.out, if values { v } else { f });
    }
    Ok(())
}

/// HSETNX key field value: 1 if the field was new (and is now set), else 0.
pub(super) fn hsetnx(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (mut h, ttl) = x.hash_ttl(&a[1])?;
    let new = !h.iter().any(|(f, _)| *f == a[2]);
    if new {
        h.push((a[2].clone(), a[3].clone()));
        x.save(&a[1], &Value::Hash(h), ttl)?;
    }
    reply::int(x.out, new as i64);
    Ok(())
}

/// The field `f` of `h`, a new one (with `init`) at the end if it is not there.
fn field<'h>(h: &'h mut Fields, f: &[u8], init: &[u8]) -> &'h mut Vec<u8> {
    let i = match h.iter().position(|(g, _)| g == f) {
        Some(i) => i,
        None => {
            h.push((f.to_vec(), init.to_vec()));
            h.len() - 1
        }
    };
    &mut h[i].1
}

/// HINCRBY key field increment.
pub(super) fn hincrby(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let by = integer(&a[3])?;
    let (mut h, ttl) = x.hash_ttl(&a[1])?;
    let v = field(&mut h, &a[2], b"0");
    let old = string2ll(v).ok_or("ERR hash value is not an integer")?;
    let new = old.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
    *v = new.to_string().into_bytes();
    x.save(&a[1], &Value::Hash(h), ttl)?;
    reply::int(x.out, new);
    Ok(())
}

/// HINCRBYFLOAT key field increment: in C's `long double`, as INCRBYFLOAT.
pub(super) fn hincrbyfloat(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let by = ldouble::parse(&a[3]).ok_or("ERR value is not a valid float")?;
    if by.is_err() {
        return Err("ERR value is NaN or Infinity".into());
    }
    let (mut h, ttl) = x.hash_ttl(&a[1])?;
    let v = field(&mut h, &a[2], b"0");
    let old = ldouble::parse(v).ok_or("ERR hash value is not a float")?;
    let new = ld_sum(old, by)?;
    *v = new.clone().into_bytes();
    x.save(&a[1], &Value::Hash(h), ttl)?;
    reply::bulk(x.out, new.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::harness::T;

    /// Each reply is redis-server 7.0's to the same commands.
    #[test]
    fn hash_commands_answer_as_redis_server() {
        let mut t = T::new();
        assert_eq!(t.run("HINCRBY h n 5"), ":5\r\n");
        assert_eq!(t.run("HINCRBY h n -7"), ":-2\r\n");
        assert_eq!(t.run("HINCRBY h n x"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("HSET h s abc big 9223372036854775807"), ":2\r\n");
        assert_eq!(t.run("HINCRBY h s 1"), "-ERR hash value is not an integer\r\n");
        assert_eq!(t.run("HINCRBY h big 1"), "-ERR increment or decrement would overflow\r\n");
        assert_eq!(t.run("HINCRBY h big -1"), ":9223372036854775806\r\n");
        assert_eq!(t.run("HKEYS h"), "*3\r\n$1\r\nn\r\n$1\r\ns\r\n$3\r\nbig\r\n");
        assert_eq!(t.run("HVALS h"), "*3\r\n$2\r\n-2\r\n$3\r\nabc\r\n$19\r\n9223372036854775806\r\n");
        assert_eq!(t.run("HKEYS none"), "*0\r\n");
        assert_eq!(t.run("HVALS none"), "*0\r\n");
        assert_eq!(t.run("HSETNX h n 1"), ":0\r\n");
        assert_eq!(t.run("HSETNX h new v"), ":1\r\n");
        assert_eq!(
            t.run("HGETALL h"),
            "*8\r\n$1\r\nn\r\n$2\r\n-2\r\n$1\r\ns\r\n$3\r\nabc\r\n$3\r\nbig\r\n$19\r\n9223372036854775806\r\n$3\r\nnew\r\n$1\r\nv\r\n"
        );
        assert_eq!(t.run("HINCRBYFLOAT h f 1.5"), "$3\r\n1.5\r\n");
        assert_eq!(t.run("HINCRBYFLOAT h f 0.1"), "$3\r\n1.6\r\n");
        assert_eq!(t.run("HINCRBYFLOAT h s 1"), "-ERR hash value is not a float\r\n");
        assert_eq!(t.run("HINCRBYFLOAT h f x"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("HINCRBYFLOAT h f inf"), "-ERR value is NaN or Infinity\r\n");
        assert_eq!(t.run("HINCRBYFLOAT h big 1"), "$19\r\n9223372036854775807\r\n");
        assert_eq!(t.run("SET str v"), "+OK\r\n");
        assert_eq!(t.run("HINCRBY str f 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("HKEYS str"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("HVALS str"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("HSETNX str f v"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("HINCRBYFLOAT str f 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("HSETNX h2 f v"), ":1\r\n");
        assert_eq!(t.run("HGETALL h2"), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
    }
}
