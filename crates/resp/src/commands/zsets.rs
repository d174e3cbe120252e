//! Sorted-set commands: a sorted set is one stored value, (score, member) in order.

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

/// A score as Redis reads one (strtod of the whole text, no NaN).
pub(super) fn parse_score(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?;
    if t.is_empty() || t.starts_with(char::is_whitespace) || t.ends_with(char::is_whitespace) {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| !v.is_nan())
}

/// ZADD key [NX|XX] [GT|LT] [CH] score member [score member ...].
pub(super) fn zadd(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut j = 2;
    while j < a.len() {
        match lower(&a[j]).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            "ch" => ch = true,
            "incr" => return Err("ERR ZADD INCR is not supported by ssdlab (use ZSCORE and ZADD)".into()),
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
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        scores.push((parse_score(&p[0]).ok_or_else(|| "ERR value is not a valid float".to_string())?, p[1].clone()));
    }
    let mut z = x.zset(&a[1])?;
    let (mut added, mut changed) = (0, 0);
    for (score, m) in scores {
        match z.iter().position(|(_, e)| *e == m) {
            Some(i) => {
                let old = z[i].0;
                if nx || (gt && score <= old) || (lt && score >= old) {
                    continue;
                }
                if score != old {
                    z[i].0 = score;
                    changed += 1;
                }
            }
            None if xx => {}
            None => {
                z.push((score, m));
                added += 1;
            }
        }
    }
    z.sort_by(|p, q| p.0.total_cmp(&q.0).then_with(|| p.1.cmp(&q.1)));
    if added + changed > 0 {
        x.save(&a[1], &Value::Zset(z))?;
    }
    reply::int(x.out, if ch { added + changed } else { added });
    Ok(())
}

pub(super) fn zrem(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let mut z = x.zset(&a[1])?;
    let before = z.len();
    z.retain(|(_, m)| !a[2..].contains(m));
    let removed = before - z.len();
    x.shrunk(&a[1], removed, z.is_empty(), Value::Zset(z))
}

/// A ZRANGEBYSCORE bound: `(` makes it exclusive; -inf/+inf.
pub(super) fn score_bound(b: &[u8]) -> Option<(f64, bool)> {
    match b.split_first() {
        Some((b'(', rest)) => parse_score(rest).map(|v| (v, true)),
        _ => parse_score(b).map(|v| (v, false)),
    }
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count].
pub(super) fn zrangebyscore(x: &mut Ctx<'_>, a: &Args) -> Result<(), String> {
    let (Some(min), Some(max)) = (score_bound(&a[2]), score_bound(&a[3])) else {
        return Err("ERR min or max is not a float".into());
    };
    let (mut withscores, mut limit) = (false, None);
    let mut j = 4;
    while j < a.len() {
        match lower(&a[j]).as_str() {
            "withscores" => withscores = true,
            "limit" if j + 2 < a.len() => {
                limit = Some((integer(&a[j + 1])?, integer(&a[j + 2])?));
                j += 2;
            }
            _ => return Err(SYNTAX.into()),
        }
        j += 1;
    }
    let z = x.zset(&a[1])?;
    let inside = |v: f64| (if min.1 { v > min.0 } else { v >= min.0 }) && (if max.1 { v < max.0 } else { v <= max.0 });
    let hits: Vec<&(f64, Vec<u8>)> = z.iter().filter(|(v, _)| inside(*v)).collect();
    let picked: Vec<&(f64, Vec<u8>)> = match limit {
        None => hits,
        Some((off, _)) if off < 0 => vec![],
        Some((off, cnt)) => {
            let it = hits.into_iter().skip(off as usize);
            if cnt < 0 {
                it.collect()
            } else {
                it.take(cnt as usize).collect()
            }
        }
    };
    reply::array(x.out, picked.len() * if withscores { 2 } else { 1 });
    for (v, m) in picked {
        reply::bulk(x.out, m);
        if withscores {
            reply::bulk(x.out, fmt_score(*v).as_bytes());
        }
    }
    Ok(())
}
