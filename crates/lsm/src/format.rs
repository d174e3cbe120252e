//! On-flash encodings: entries, data blocks (checksummed, optionally LZ4-compressed), varints.
//!
//! An entry is `varint key_len | varint value_len | key | u64 tag | value` with
//! `tag = seq << 8 | kind`, little-endian. Entries of a block are sorted by user key
//! ascending, then sequence number descending (newest version first), as in every LSM.
//! A block on flash is `payload | u8 compression | u32 crc32(payload, compression)`.

use std::cmp::Ordering;

use crate::config::Compression;
use crate::error::{Error, Result};

/// Largest key the store accepts (RocksDB has no hard limit; ours keeps index entries small).
pub const MAX_KEY_BYTES: usize = 64 << 10;
/// Largest value the store accepts.
pub const MAX_VALUE_BYTES: usize = 64 << 20;
/// Sequence numbers use 56 bits.
pub const MAX_SEQ: u64 = (1 << 56) - 1;

/// What an entry says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A point tombstone; its value is the delete's time (u64 LE ns), as Lethe keeps it.
    Delete = 0,
    Put = 1,
}

impl Kind {
    pub fn from_u8(b: u8) -> Result<Kind> {
        match b {
            0 => Ok(Kind::Delete),
            1 => Ok(Kind::Put),
            _ => Err(Error::Corrupt(format!("entry kind {b}"))),
        }
    }
}

#[inline]
pub fn tag(seq: u64, kind: Kind) -> u64 {
    debug_assert!(seq <= MAX_SEQ);
    (seq << 8) | kind as u64
}

/// Internal-key order: user key ascending, then newest (highest sequence) first.
#[inline]
pub fn cmp_internal(ka: &[u8], sa: u64, kb: &[u8], sb: u64) -> Ordering {
    ka.cmp(kb).then(sb.cmp(&sa))
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decode a varint at `buf[*pos..]`, advancing `pos`.
#[inline]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos).ok_or_else(|| Error::Corrupt("truncated varint".into()))?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(Error::Corrupt("varint longer than 10 bytes".into()));
        }
    }
}

/// Append one entry.
pub fn put_entry(out: &mut Vec<u8>, key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
    put_varint(out, key.len() as u64);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(key);
    out.extend_from_slice(&tag(seq, kind).to_le_bytes());
    out.extend_from_slice(value);
}

/// Bytes `put_entry` takes for these sizes.
pub fn entry_len(key_len: usize, value_len: usize) -> usize {
    fn vl(mut v: usize) -> usize {
        let mut n = 1;
        while v >= 0x80 {
            v >>= 7;
            n += 1;
        }
        n
    }
    vl(key_len) + vl(value_len) + key_len + 8 + value_len
}

/// An entry decoded in place: offsets into the block's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPos {
    pub key: (u32, u32),
    pub value: (u32, u32),
    pub seq: u64,
    pub kind: Kind,
    /// Offset of the next entry.
    pub next: u32,
}

impl EntryPos {
    #[inline]
    pub fn key<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.key.0 as usize..self.key.1 as usize]
    }
    #[inline]
    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value.0 as usize..self.value.1 as usize]
    }
}

/// Decode the entry at `buf[pos..]`.
#[inline]
pub fn decode_entry(buf: &[u8], pos: usize) -> Result<EntryPos> {
    let mut p = pos;
    let kl = get_varint(buf, &mut p)? as usize;
    let vl = get_varint(buf, &mut p)? as usize;
    let k0 = p;
    let t0 = k0 + kl;
    let v0 = t0 + 8;
    let end = v0 + vl;
    if end > buf.len() {
        return Err(Error::Corrupt(format!("entry at {pos} runs past its block ({end} > {})", buf.len())));
    }
    let tag = u64::from_le_bytes(buf[t0..v0].try_into().unwrap());
    Ok(EntryPos {
        key: (k0 as u32, t0 as u32),
        value: (v0 as u32, end as u32),
        seq: tag >> 8,
        kind: Kind::from_u8(tag as u8)?,
        next: end as u32,
    })
}

const TRAILER: usize = 5;
const RAW: u8 = 0;
const LZ4: u8 = 1;

/// Seal a block's entries for flash: compress (if asked and worth it), append type and CRC.
pub fn seal_block(raw: &[u8], compression: Compression, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(raw);
    seal_tail(out, start, compression);
}

/// Seal the entries written at `out[start..]` as a block, in place (a table builder writes
/// entries straight into its output).
pub fn seal_tail(out: &mut Vec<u8>, start: usize, compression: Compression) {
    let ctype = match compression {
        Compression::Lz4 => {
            let raw_len = out.len() - start;
            let c = lz4_flex::block::compress_prepend_size(&out[start..]);
            if c.len() < raw_len - raw_len / 8 {
                out.truncate(start);
                out.extend_from_slice(&c);
                LZ4
            } else {
                RAW
            }
        }
        Compression::None => RAW,
    };
    out.push(ctype);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Check and open a sealed block; returns its entries' bytes (borrowed when stored raw).
pub fn open_block(sealed: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
    if sealed.len() < TRAILER {
        return Err(Error::Corrupt(format!("block of {} bytes", sealed.len())));
    }
    let body = &sealed[..sealed.len() - 4];
    let crc = u32::from_le_bytes(sealed[sealed.len() - 4..].try_into().unwrap());
    if crc32fast::hash(body) != crc {
        return Err(Error::Corrupt("block checksum mismatch".into()));
    }
    let payload = &body[..body.len() - 1];
    match body[body.len() - 1] {
        RAW => Ok(std::borrow::Cow::Borrowed(payload)),
        LZ4 => lz4_flex::block::decompress_size_prepended(payload)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| Error::Corrupt(format!("lz4 block: {e}"))),
        t => Err(Error::Corrupt(format!("block compression type {t}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_sealed_blocks() {
        for comp in [Compression::None, Compression::Lz4] {
            let mut raw = vec![];
            let v = vec![b'a'; 300];
            put_entry(&mut raw, b"k1", 7, Kind::Put, &v);
            put_entry(&mut raw, b"k2", MAX_SEQ, Kind::Delete, &5u64.to_le_bytes());
            assert_eq!(raw.len(), entry_len(2, 300) + entry_len(2, 8));
            let mut sealed = vec![];
            seal_block(&raw, comp, &mut sealed);
            let opened = open_block(&sealed).unwrap();
            assert_eq!(&opened[..], &raw[..]);
            let e = decode_entry(&opened, 0).unwrap();
            assert_eq!((e.key(&opened), e.seq, e.kind, e.value(&opened)), (&b"k1"[..], 7, Kind::Put, &v[..]));
            let e2 = decode_entry(&opened, e.next as usize).unwrap();
            assert_eq!((e2.key(&opened), e2.seq, e2.kind), (&b"k2"[..], MAX_SEQ, Kind::Delete));
            assert_eq!(e2.next as usize, opened.len());
            let mut bad = sealed.clone();
            bad[3] ^= 1;
            assert!(matches!(open_block(&bad), Err(Error::Corrupt(_))));
        }
    }

    #[test]
    fn internal_order_is_key_then_newest_first() {
        assert_eq!(cmp_internal(b"a", 1, b"b", 9), Ordering::Less);
        assert_eq!(cmp_internal(b"a", 9, b"a", 1), Ordering::Less);
        assert_eq!(cmp_internal(b"a", 1, b"a", 1), Ordering::Equal);
    }
}
