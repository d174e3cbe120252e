//! The record DMA builds in device DRAM and the UTL appends to flash (the document's Table 4):
//! checksum | key length | value length | key | value.
//!
//! Widths (the document gives none; assumed): a CRC-32 (IEEE) of everything after it, 4 bytes;
//! key length 2 bytes; value length 4 bytes; little-endian. A header whose key length is 0
//! marks the zero padding at the end of a flash block's last page (keys are never empty).

/// Bytes before the key.
pub const HEADER_BYTES: usize = 10;
/// Longest key a record can carry.
pub const MAX_KEY_BYTES: usize = u16::MAX as usize;

/// Bytes of the record of a `key`/`value` pair.
#[inline]
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    HEADER_BYTES + key_len + value_len
}

/// Append the record of `key`/`value` to `out`.
pub fn encode(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    assert!(!key.is_empty() && key.len() <= MAX_KEY_BYTES, "key of {} bytes", key.len());
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32fast::hash(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A record read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl Record<'_> {
    /// Bytes the record takes.
    pub fn len(&self) -> usize {
        encoded_len(self.key.len(), self.value.len())
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What reading a record at the start of `buf` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    Record(Record<'a>),
    /// Zero padding: no more records follow in this block.
    End,
    /// The header runs past `buf`, or the checksum does not match.
    Corrupt(&'static str),
}

/// Decode the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Decoded<'_> {
    if buf.len() < HEADER_BYTES {
        return if buf.iter().all(|&b| b == 0) { Decoded::End } else { Decoded::Corrupt("truncated header") };
    }
    let key_len = u16::from_le_bytes([buf[4], buf[5]]) as usize;
    if key_len == 0 {
        return Decoded::End;
    }
    let value_len = u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]) as usize;
    let end = encoded_len(key_len, value_len);
    if end > buf.len() {
        return Decoded::Corrupt("record runs past the data");
    }
    let crc = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if crc32fast::hash(&buf[4..end]) != crc {
        return Decoded::Corrupt("checksum mismatch");
    }
    Decoded::Record(Record { key: &buf[HEADER_BYTES..HEADER_BYTES + key_len], value: &buf[HEADER_BYTES + key_len..end] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let mut b = Vec::new();
        encode(b"k1", b"value", &mut b);
        assert_eq!(b.len(), encoded_len(2, 5));
        assert_eq!(&b[4..10], &[2, 0, 5, 0, 0, 0]);
        assert_eq!(&b[10..], b"k1value");
        assert_eq!(decode(&b), Decoded::Record(Record { key: b"k1", value: b"value" }));
        b[12] ^= 1;
        assert_eq!(decode(&b), Decoded::Corrupt("checksum mismatch"));
        assert_eq!(decode(&[0; 64]), Decoded::End);
        assert_eq!(decode(&[0; 3]), Decoded::End);
    }
}
