//! A stored value's encoding: the type byte, the expiry time, then the string, the hash's
//! fields or the sorted set's members.

use crate::ReplyError;

pub(super) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A stored value: its type in the first byte (0 string, 1 hash, 2 sorted set), with
/// [`TTL_FLAG`] set when the key has an expiry time, which follows as 8 bytes (unix time in
/// milliseconds, little-endian); then its bytes. Values stored without a time (every value
/// before expiry times were served) read as they always did. A hash keeps its fields in
/// insertion order, as Redis's small hashes (listpacks) do; a sorted set keeps (score, member)
/// ordered by score, then member bytes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Str(Vec<u8>),
    Hash(Fields),
    Zset(Scored),
}

/// The type byte's flag for "an expiry time follows".
pub(super) const TTL_FLAG: u8 = 0x80;

/// A stored value's header length: the type byte, and the expiry time if there is one.
pub(super) fn header_len(ttl: Option<i64>) -> usize {
    if ttl.is_some() {
        9
    } else {
        1
    }
}

/// A stored value's header: its type (0, 1, 2), expiry time and length.
pub(super) fn header(b: &[u8]) -> Result<(u8, Option<i64>, usize), ReplyError> {
    let corrupt = || ReplyError::from("ERR a stored value is corrupt (unknown type or truncated)");
    let &tag = b.first().ok_or_else(corrupt)?;
    if tag & TTL_FLAG == 0 {
        return Ok((tag, None, 1));
    }
    let t = b.get(1..9).ok_or_else(corrupt)?;
    Ok((tag & !TTL_FLAG, Some(i64::from_le_bytes(t.try_into().expect("8 bytes"))), 9))
}

/// A value with its expiry time (unix ms), if it has one.
pub(super) type Timed<T> = (T, Option<i64>);

/// A hash's (field, value) pairs in insertion order.
pub(super) type Fields = Vec<(Vec<u8>, Vec<u8>)>;
/// A sorted set's (score, member) pairs, ordered.
pub(super) type Scored = Vec<(f64, Vec<u8>)>;

impl Value {
    pub(super) fn encode(&self, ttl: Option<i64>) -> Vec<u8> {
        let tag = match self {
            Value::Str(_) => 0,
            Value::Hash(_) => 1,
            Value::Zset(_) => 2,
        };
        let mut b = Vec::with_capacity(9 + if let Value::Str(s) = self { s.len() } else { 64 });
        match ttl {
            None => b.push(tag),
            Some(t) => {
                b.push(tag | TTL_FLAG);
                b.extend_from_slice(&t.to_le_bytes());
            }
        }
        match self {
            Value::Str(s) => b.extend_from_slice(s),
            Value::Zset(z) => {
                b.extend_from_slice(&(z.len() as u32).to_le_bytes());
                for (score, m) in z {
                    b.extend_from_slice(&score.to_le_bytes());
                    put_bytes(&mut b, m);
                }
            }
            Value::Hash(h) => {
                b.extend_from_slice(&(h.len() as u32).to_le_bytes());
                for (f, v) in h {
                    put_bytes(&mut b, f);
                    put_bytes(&mut b, v);
                }
            }
        }
        b
    }

    /// Decode a stored value and its expiry time, reusing its buffer for a string (the common
    /// case: no copy).
    pub(super) fn decode_owned(mut b: Vec<u8>) -> Result<(Value, Option<i64>), ReplyError> {
        let (tag, ttl, n) = header(&b)?;
        if tag == 0 {
            b.drain(..n);
            return Ok((Value::Str(b), ttl));
        }
        Value::decode(&b)
    }

    pub(super) fn decode(b: &[u8]) -> Result<(Value, Option<i64>), ReplyError> {
        let corrupt = || ReplyError::from("ERR a stored value is corrupt (unknown type or truncated)");
        let (tag, ttl, n) = header(b)?;
        let rest = &b[n..];
        let mut r = Reader(rest);
        let v = match tag {
            0 => Some(Value::Str(rest.to_vec())),
            1 => (|| {
                let n = r.u32()? as usize;
                let mut h = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let f = r.bytes()?;
                    h.push((f, r.bytes()?));
                }
                Some(Value::Hash(h))
            })(),
            2 => (|| {
                let n = r.u32()? as usize;
                let mut z = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let score = f64::from_le_bytes(r.take(8)?.try_into().ok()?);
                    z.push((score, r.bytes()?));
                }
                Some(Value::Zset(z))
            })(),
            _ => None,
        };
        v.map(|v| (v, ttl)).ok_or_else(corrupt)
    }
}

pub(super) fn put_bytes(b: &mut Vec<u8>, x: &[u8]) {
    b.extend_from_slice(&(x.len() as u32).to_le_bytes());
    b.extend_from_slice(x);
}

/// Reads a stored value's fields front to back; None when it runs short.
pub(super) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(a)
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    /// A length-prefixed byte string (as `put_bytes` writes it).
    pub(super) fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        self.take(n).map(<[u8]>::to_vec)
    }
}
