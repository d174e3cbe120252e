//! Sorted-set commands: a sorted set is one stored value, (score, member) in order; a change
//! keeps the key's expiry time.

use super::*;

/// Redis's score text in RESP2 (7.0: printf's %.17g; inf and -inf as such).
pub(super) fn fmt_score(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // %.17g: 17 significant digits, scientific when the exponent is < -4 or >= 17, trailing
    // zeros (and a trailing point) removed.
    let sci = format!("{v:.16e}");
    let (mant, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if !(-4..17).contains(&exp) {
        let mant = mant.trim_end_matches('0').trim_end_matches('.');
        format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let s = format!("{v:.*}", (16 - exp).max(0) as usize);
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// A score as ZADD and ZINCRBY read one (Redis's getDoubleFromObject: strtod of the whole
/// text, no leading space, no NaN, nothing out of a double's range).
pub(super) fn parse_score(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?;
    if t.is_empty() || t.starts_with(|c: char| c.is_ascii_whitespace() || c == '\x0b') {
        return None;
    }
    let v = t.parse::<f64>().ok().filter(|v| !v.is_nan())?;
    // strtod's ERANGE: an overflow to infinity, or an underflow to zero, is refused.
    let digits = t.trim_start_matches(['+', '-']);
    let inf_text = digits.eq_ignore_ascii_case("inf") || digits.eq_ignore_ascii_case("infinity");
    let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
    if (v.is_infinite() && !inf_text) || (v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c))) {
        return None;
    }
    Some(v)
}

/// A range bound as ZRANGEBYSCORE and ZCOUNT read one (Redis's zslParseRange: strtod of the
/// text up to a NUL, leading space skipped, no range check; `(` makes it exclusive; an empty
/// text is 0).
fn score_bound(b: &[u8]) -> Option<(f64, bool)> {
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    let (ex, b) = match b.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, b),
    };
    if b.is_empty() {
        return Some((0.0, ex));
    }
    let t = std::str::from_utf8(b).ok()?.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    t.parse::<f64>().ok().filter(|v| !v.is_nan()).map(|v| (v, ex))
}

const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...], and ZINCRBY key
/// increment member (ZADD INCR without options).
pub(super) fn zadd(x: &mut Ctx<'_>, a: &Args, zincrby: bool) -> Result<(), ReplyError> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, zincrby);
    let mut j = 2;
    while j < a.len() && !zincrby {
        match lower(&a[j]).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            "ch" => ch = true,
            "incr" => incr = true,
            _ => break,
        }
        j += 1;
    }
    let pairs = &a[j..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(SYNTAX.into());
    }
    if nx && xx {
        return Err("ERR XX and NX options at the same time are not compatible".into());
    }
    if (gt || lt) && (nx || (gt && lt)) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".into());
    }
    if incr && pairs.len() > 2 {
        return Err("ERR INCR option supports a single increment-element pair".into());
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        scores.push((parse_score(&p[0]).ok_or_else(|| "ERR value is not a valid float".to_string())?, p[1].clone()));
    }
    let (mut z, ttl) = x.zset_ttl(&a[1])?;
    let (mut added, mut changed, mut last) = (0, 0, None);
    for (score, m) in scores {
        match z.iter().position(|(_, e)| *e == m) {
            Some(i) => {
                let old = z[i].0;
                if nx {
                    continue;
                }
                let new = if incr { old + score } else { score };
                if new.is_nan() {
                    return Err(NAN_SCORE.into());
                }
                if (gt && new <= old) || (lt && new >= old) {
                    continue;
                }
                last = Some(new);
                if new != old {
                    z[i].0 = new;
                    changed += 1;
                }
            }
            None if xx => {}
            None => {
                z.push((score, m));
                added += 1;
                last = Some(score);
            }
        }
    }
    z.sort_by(|p, q| p.0.total_cmp(&q.0).then_with(|| p.1.cmp(&q.1)));
    if added + changed > 0 {
        x.save(&a[1], &Value::Zset(z), ttl)?;
    }
    if incr {
        match last {
            Some(v) => reply::bulk(x.out, fmt_score(v).as_bytes()),
            None => reply::null(x.out),
        }
    } else {
        reply::int(x.out, if ch { added + changed } else { added });
    }
    Ok(())
}

pub(super) fn zrem(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (mut z, ttl) = x.zset_ttl(&a[1])?;
    let before = z.len();
    z.retain(|(_, m)| !a[2..].contains(m));
    let removed = before - z.len();
    x.shrunk(&a[1], removed, z.is_empty(), Value::Zset(z), ttl)
}

/// What a ZRANGE's two bounds are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum By {
    Rank,
    Score,
    Lex,
}

/// A BYLEX bound: `-` and `+` (the ends), `[x` (inclusive) or `(x` (exclusive).
#[derive(Debug, Clone, PartialEq)]
enum Lex {
    Min,
    Max,
    Val(Vec<u8>),
}

fn lex_bound(b: &[u8]) -> Option<(Lex, bool)> {
    // `+` and `-` as C strings: a NUL may follow.
    let alone = b.get(1).is_none_or(|&c| c == 0);
    match b.first()? {
        b'+' if alone => Some((Lex::Max, true)),
        b'-' if alone => Some((Lex::Min, true)),
        b'(' => Some((Lex::Val(b[1..].to_vec()), true)),
        b'[' => Some((Lex::Val(b[1..].to_vec()), false)),
        _ => None,
    }
}

/// Redis's sdscmplex: the ends below and above every string.
fn cmp_lex(a: &Lex, b: &Lex) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (Lex::Min, Lex::Min) | (Lex::Max, Lex::Max) => Equal,
        (Lex::Min, _) | (_, Lex::Max) => Less,
        (Lex::Max, _) | (_, Lex::Min) => Greater,
        (Lex::Val(x), Lex::Val(y)) => x.cmp(y),
    }
}

/// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES], and the
/// older commands that are its forms: `by` and `rev` preset (ZRANGEBYSCORE: by score, forward;
/// ZREVRANGE: by rank, reversed; ...). Options, checks and errors in Redis 7.0's order; a
/// BYLEX range is walked as Redis walks a small sorted set (from the first member not below
/// the minimum while members are not above the maximum), which is the lexicographic range when
/// the members share a score.
pub(super) fn zrange(x: &mut Ctx<'_>, a: &Args, by: Option<By>, rev: Option<bool>) -> Result<(), ReplyError> {
    let (mut by, mut rev) = (by, rev);
    let (mut withscores, mut offset, mut count) = (false, 0i64, -1i64);
    let mut j = 4;
    while j < a.len() {
        let left = a.len() - j - 1;
        match lower(&a[j]).as_str() {
            "withscores" => withscores = true,
            "limit" if left >= 2 => {
                offset = integer(&a[j + 1])?;
                count = integer(&a[j + 2])?;
                j += 2;
            }
            "rev" if rev.is_none() => rev = Some(true),
            "bylex" if by.is_none() => by = Some(By::Lex),
            "byscore" if by.is_none() => by = Some(By::Score),
            _ => return Err(SYNTAX.into()),
        }
        j += 1;
    }
    let (rev, by) = (rev.unwrap_or(false), by.unwrap_or(By::Rank));
    if count != -1 && by == By::Rank {
        return Err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX".into());
    }
    if withscores && by == By::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX".into());
    }
    // BYSCORE and BYLEX ranges are given as max, min when reversed.
    let (lo, hi) = if rev && by != By::Rank { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
    let (z, ids, withscores) = match by {
        By::Rank => {
            let (start, end) = (integer(lo)?, integer(hi)?);
            let z = x.zset(&a[1])?;
            let n = z.len() as i64;
            let start = if start < 0 { (start + n).max(0) } else { start };
            let end = if end < 0 { end + n } else { end };
            let ids: Vec<usize> = if start > end || start >= n { vec![] } else { (start as usize..=end.min(n - 1) as usize).collect() };
            let ids = ids.into_iter().map(|i| if rev { z.len() - 1 - i } else { i }).collect();
            (z, ids, withscores)
        }
        By::Score => {
            let (Some(min), Some(max)) = (score_bound(lo), score_bound(hi)) else {
                return Err("ERR min or max is not a float".into());
            };
            let z = x.zset(&a[1])?;
            let inside = |v: f64| (if min.1 { v > min.0 } else { v >= min.0 }) && (if max.1 { v < max.0 } else { v <= max.0 });
            let hits = (0..z.len()).filter(|&i| inside(z[i].0));
            let hits: Vec<usize> = if rev { hits.rev().collect() } else { hits.collect() };
            (z, limit(hits, offset, count), withscores)
        }
        By::Lex => {
            let (Some(min), Some(max)) = (lex_bound(lo), lex_bound(hi)) else {
                return Err("ERR min or max not valid string range item".into());
            };
            let z = x.zset(&a[1])?;
            let gte_min = |m: &[u8]| {
                let o = cmp_lex(&Lex::Val(m.to_vec()), &min.0);
                if min.1 {
                    o.is_gt()
                } else {
                    o.is_ge()
                }
            };
            let lte_max = |m: &[u8]| {
                let o = cmp_lex(&Lex::Val(m.to_vec()), &max.0);
                if max.1 {
                    o.is_lt()
                } else {
                    o.is_le()
                }
            };
            let c = cmp_lex(&min.0, &max.0);
            let empty = c.is_gt() || (c.is_eq() && (min.1 || max.1)) || z.is_empty() || !gte_min(&z[z.len() - 1].1) || !lte_max(&z[0].1);
            let mut hits = vec![];
            if !empty {
                if rev {
                    if let Some(first) = (0..z.len()).rev().find(|&i| lte_max(&z[i].1)) {
                        hits = (0..=first).rev().take_while(|&i| gte_min(&z[i].1)).collect();
                    }
                } else if let Some(first) = (0..z.len()).find(|&i| gte_min(&z[i].1)) {
                    hits = (first..z.len()).take_while(|&i| lte_max(&z[i].1)).collect();
                }
            }
            (z, limit(hits, offset, count), false)
        }
    };
    zreply(x, &z, ids.into_iter(), withscores)
}

/// LIMIT offset count over a range's hits (a negative offset: nothing; a negative count: all).
fn limit(hits: Vec<usize>, offset: i64, count: i64) -> Vec<usize> {
    if offset < 0 {
        return vec![];
    }
    let it = hits.into_iter().skip(offset as usize);
    if count < 0 {
        it.collect()
    } else {
        it.take(count as usize).collect()
    }
}

fn zreply(x: &mut Ctx<'_>, z: &[(f64, Vec<u8>)], ids: impl ExactSizeIterator<Item = usize>, withscores: bool) -> Result<(), ReplyError> {
    reply::array(x.out, ids.len() * if withscores { 2 } else { 1 });
    for i in ids {
        reply::bulk(x.out, &z[i].1);
        if withscores {
            reply::bulk(x.out, fmt_score(z[i].0).as_bytes());
        }
    }
    Ok(())
}

/// ZRANK / ZREVRANK key member: its place from the lowest (highest) score, or nil.
pub(super) fn zrank(x: &mut Ctx<'_>, a: &Args, rev: bool) -> Result<(), ReplyError> {
    let z = x.zset(&a[1])?;
    match z.iter().position(|(_, m)| *m == a[2]) {
        Some(i) => reply::int(x.out, if rev { z.len() - 1 - i } else { i } as i64),
        None => reply::null(x.out),
    }
    Ok(())
}

/// ZCOUNT key min max.
pub(super) fn zcount(x: &mut Ctx<'_>, a: &Args) -> Result<(), ReplyError> {
    let (Some(min), Some(max)) = (score_bound(&a[2]), score_bound(&a[3])) else {
        return Err("ERR min or max is not a float".into());
    };
    let z = x.zset(&a[1])?;
    let inside = |v: f64| (if min.1 { v > min.0 } else { v >= min.0 }) && (if max.1 { v < max.0 } else { v <= max.0 });
    let n = z.iter().filter(|(v, _)| inside(*v)).count();
    reply::int(x.out, n as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::harness::T;

    /// Each reply is redis-server 7.0's to the same commands.
    #[test]
    fn sorted_set_commands_answer_as_redis_server() {
        let mut t = T::new();
        assert_eq!(t.run("ZADD z 1 a 2 b 3 c 3 d 5 e"), ":5\r\n");
        assert_eq!(t.run("ZRANGE z 0 -1"), "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n");
        assert_eq!(
            t.run("ZRANGE z 0 -1 WITHSCORES"),
            "*10\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\ne\r\n$1\r\n5\r\n"
        );
        assert_eq!(t.run("ZRANGE z -2 -1"), "*2\r\n$1\r\nd\r\n$1\r\ne\r\n");
        assert_eq!(t.run("ZRANGE z 3 1"), "*0\r\n");
        assert_eq!(t.run("ZRANGE z -100 1"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run("ZRANGE z 10 20"), "*0\r\n");
        assert_eq!(t.run("ZRANGE z 0 -1 REV"), "*5\r\n$1\r\ne\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n");
        assert_eq!(t.run("ZREVRANGE z 0 1 WITHSCORES"), "*4\r\n$1\r\ne\r\n$1\r\n5\r\n$1\r\nd\r\n$1\r\n3\r\n");
        assert_eq!(t.run("ZREVRANGE z -1 -1"), "*1\r\n$1\r\na\r\n");
        assert_eq!(t.run("ZRANGE z 0 x"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(
            t.run("ZRANGE z 0 -1 LIMIT 0 2"),
            "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n"
        );
        assert_eq!(t.run("ZRANGE z 0 -1 LIMIT 1 -1"), "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n");
        assert_eq!(t.run("ZRANGE z 0 -1 LIMIT x 1"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("ZRANGE z (1 3 BYSCORE"), "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n");
        assert_eq!(
            t.run("ZRANGE z 3 (1 BYSCORE REV WITHSCORES"),
            "*6\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n"
        );
        assert_eq!(t.run("ZRANGE z -inf +inf BYSCORE LIMIT 1 2"), "*2\r\n$1\r\nb\r\n$1\r\nc\r\n");
        assert_eq!(t.run("ZRANGE z -inf +inf BYSCORE REV LIMIT 1 2"), "*0\r\n");
        assert_eq!(t.run("ZRANGE z -inf +inf BYSCORE LIMIT -1 2"), "*0\r\n");
        assert_eq!(t.run("ZRANGE z -inf +inf BYSCORE LIMIT 0 0"), "*0\r\n");
        assert_eq!(t.run("ZRANGE z x 1 BYSCORE"), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run("ZRANGE z 0 1 BYSCORE BYLEX"), "-ERR syntax error\r\n");
        assert_eq!(t.run("ZRANGE z 0 1 REV REV"), "-ERR syntax error\r\n");
        assert_eq!(t.run("ZRANGE z 0 1 WITHSCORES BYLEX"), "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n");
        assert_eq!(t.run("ZRANGE z - + BYLEX"), "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n");
        assert_eq!(t.run("ZRANGE z [b (d BYLEX"), "*2\r\n$1\r\nb\r\n$1\r\nc\r\n");
        assert_eq!(t.run("ZRANGE z (d [b BYLEX REV"), "*2\r\n$1\r\nc\r\n$1\r\nb\r\n");
        assert_eq!(t.run("ZRANGE z + - BYLEX REV LIMIT 1 2"), "*2\r\n$1\r\nd\r\n$1\r\nc\r\n");
        assert_eq!(t.run("ZRANGE z a b BYLEX"), "-ERR min or max not valid string range item\r\n");
        assert_eq!(t.run("ZRANGEBYLEX z - +"), "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n");
        assert_eq!(t.run("ZREVRANGEBYLEX z + - LIMIT 0 1"), "*1\r\n$1\r\ne\r\n");
        assert_eq!(
            t.run("ZREVRANGEBYSCORE z 3 1 WITHSCORES"),
            "*8\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run("ZREVRANGEBYSCORE z 1 3"), "*0\r\n");
        assert_eq!(t.run("ZRANGEBYSCORE z 1 3 REV"), "-ERR syntax error\r\n");
        assert_eq!(t.run("ZRANGEBYSCORE z \"\" 1"), "*1\r\n$1\r\na\r\n");
        assert_eq!(t.run("ZRANGEBYSCORE z \" 1\" 2"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run("ZRANGEBYSCORE z ( 2"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run("ZRANGEBYSCORE z 1e400 2"), "*0\r\n");
        assert_eq!(t.run("ZRANK z c"), ":2\r\n");
        assert_eq!(t.run("ZREVRANK z c"), ":2\r\n");
        assert_eq!(t.run("ZRANK z nope"), "$-1\r\n");
        assert_eq!(t.run("ZRANK none a"), "$-1\r\n");
        assert_eq!(t.run("ZCOUNT z (1 3"), ":3\r\n");
        assert_eq!(t.run("ZCOUNT z -inf +inf"), ":5\r\n");
        assert_eq!(t.run("ZCOUNT z x 1"), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run("ZCOUNT none 0 1"), ":0\r\n");
        assert_eq!(t.run("ZINCRBY z 1.5 a"), "$3\r\n2.5\r\n");
        assert_eq!(t.run("ZINCRBY z 1 new"), "$1\r\n1\r\n");
        assert_eq!(t.run("ZINCRBY z x a"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("ZADD z -inf m"), ":1\r\n");
        assert_eq!(t.run("ZINCRBY z inf m"), "-ERR resulting score is not a number (NaN)\r\n");
        assert_eq!(t.run("ZINCRBY z -inf m"), "$4\r\n-inf\r\n");
        assert_eq!(t.run("ZADD z INCR 1 a"), "$3\r\n3.5\r\n");
        assert_eq!(t.run("ZADD z INCR 1 a 2 b"), "-ERR INCR option supports a single increment-element pair\r\n");
        assert_eq!(t.run("ZADD z NX INCR 1 a"), "$-1\r\n");
        assert_eq!(t.run("ZADD z XX INCR 1 zz"), "$-1\r\n");
        assert_eq!(t.run("ZADD z GT INCR -1 a"), "$-1\r\n");
        assert_eq!(t.run("ZADD z LT INCR -1 a"), "$3\r\n2.5\r\n");
        assert_eq!(t.run("ZADD none XX INCR 1 a"), "$-1\r\n");
        assert_eq!(t.run("ZADD z 1e400 a"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("ZADD z 1e-400 a"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("ZADD z 1e-310 tiny"), ":1\r\n");
        assert_eq!(t.run("ZSCORE z tiny"), "$23\r\n9.9999999999999694e-311\r\n");
        assert_eq!(t.run("ZADD z \" 1\" a"), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run("ZRANGE z 0 -1 WITHSCORES"), "*16\r\n$1\r\nm\r\n$4\r\n-inf\r\n$4\r\ntiny\r\n$23\r\n9.9999999999999694e-311\r\n$3\r\nnew\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$3\r\n2.5\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\ne\r\n$1\r\n5\r\n");
        assert_eq!(t.run("SET s v"), "+OK\r\n");
        assert_eq!(t.run("ZRANGE s 0 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("ZRANK s a"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("ZCOUNT s 0 1"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("ZINCRBY s 1 a"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("ZRANGE s x 1"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run("ZRANGE s 0 1 BYSCORE"), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run("ZREVRANGE none 0 -1"), "*0\r\n");
    }
}
