//! The header in front of every compressed block in remote memory: which logical block it
//! holds and how long it is (the source document's two fields), plus what is needed to read
//! it back safely (codec, raw length, checksum). Little-endian, 32 bytes; records are packed
//! back to back at 8-byte alignment.

use crate::codec::Codec;
use crate::error::{Error, Result};

pub const HEADER_BYTES: usize = 32;
pub const MAGIC: u32 = u32::from_le_bytes(*b"RMML");
pub const VERSION: u8 = 1;
/// Records start at multiples of this.
pub const ALIGN: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub codec: Codec,
    /// Logical block address (block index on the swap device).
    pub lba: u64,
    /// Bytes of payload after the header (the compressed length).
    pub stored_len: u32,
    /// Bytes the payload decompresses to.
    pub raw_len: u32,
    /// CRC-32 of the payload.
    pub crc32: u32,
    /// Low bits of the write sequence of this copy (diagnostics).
    pub seq: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.codec.code();
        b[8..16].copy_from_slice(&self.lba.to_le_bytes());
        b[16..20].copy_from_slice(&self.stored_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.raw_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc32.to_le_bytes());
        b[28..32].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() < HEADER_BYTES {
            return Err(Error::Corrupt(format!("header of {} bytes", b.len())));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if u32_at(0) != MAGIC {
            return Err(Error::Corrupt(format!("bad magic {:#010x}", u32_at(0))));
        }
        if b[4] != VERSION {
            return Err(Error::Corrupt(format!("header version {}", b[4])));
        }
        let codec = Codec::from_code(b[5]).ok_or_else(|| Error::Corrupt(format!("unknown codec {}", b[5])))?;
        Ok(Header {
            codec,
            lba: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            stored_len: u32_at(16),
            raw_len: u32_at(20),
            crc32: u32_at(24),
            seq: u32_at(28),
        })
    }

    /// Bytes the whole record takes in remote memory, padding included.
    pub fn record_bytes(stored_len: u32) -> u64 {
        (HEADER_BYTES as u64 + stored_len as u64).div_ceil(ALIGN) * ALIGN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode() {
        let h = Header { codec: Codec::Zstd, lba: 0x1234_5678_9abc, stored_len: 777, raw_len: 1 << 20, crc32: 0xdead_beef, seq: 9 };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(Header::decode(&bad).is_err());
        assert_eq!(Header::record_bytes(777), 816);
        assert_eq!(Header::record_bytes(0), 32);
    }
}
