//! The node protocol on the wire (little-endian, one request at a time per connection).
//!
//! Request: op u8, 3 bytes zero, len u32, region u64, offset u64 (24 bytes), then `len` bytes
//! of data for WRITE. ALLOC carries the region size in `offset`.
//! Reply: status u8 (0 = ok, else a [`super::store::Refusal`] code), 3 bytes zero, len u32,
//! then `len` bytes: the data read, the region handle (ALLOC), the stat (HELLO, STAT), or the
//! refusal's message.

use std::io::{Read, Write};

use super::NodeStat;

pub const OP_HELLO: u8 = 1;
pub const OP_STAT: u8 = 2;
pub const OP_ALLOC: u8 = 3;
pub const OP_FREE: u8 = 4;
pub const OP_WRITE: u8 = 5;
pub const OP_READ: u8 = 6;

pub const REQUEST_BYTES: usize = 24;
pub const REPLY_BYTES: usize = 8;
/// The largest read, write or region (a whole block group fits many times over).
pub const MAX_IO_BYTES: u32 = 256 << 20;
pub const STAT_BYTES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: u8,
    pub len: u32,
    pub region: u64,
    pub offset: u64,
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[0] = self.op;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.region.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8; REQUEST_BYTES]) -> Request {
        Request {
            op: b[0],
            len: u32::from_le_bytes(b[4..8].try_into().expect("4")),
            region: u64::from_le_bytes(b[8..16].try_into().expect("8")),
            offset: u64::from_le_bytes(b[16..24].try_into().expect("8")),
        }
    }
}

pub fn encode_stat(s: &NodeStat) -> [u8; STAT_BYTES] {
    let mut b = [0u8; STAT_BYTES];
    b[0..4].copy_from_slice(&s.instance.to_le_bytes());
    b[8..16].copy_from_slice(&s.capacity_bytes.to_le_bytes());
    b[16..24].copy_from_slice(&s.used_bytes.to_le_bytes());
    b[24..32].copy_from_slice(&s.regions.to_le_bytes());
    b
}

pub fn decode_stat(b: &[u8]) -> Option<NodeStat> {
    if b.len() != STAT_BYTES {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
    let s = NodeStat {
        instance: u32::from_le_bytes(b[0..4].try_into().expect("4")),
        capacity_bytes: u64_at(8),
        used_bytes: u64_at(16),
        regions: u64_at(24),
    };
    (s.used_bytes <= s.capacity_bytes).then_some(s)
}

pub fn write_reply(w: &mut impl Write, status: u8, payload: &[u8]) -> std::io::Result<()> {
    write_reply_header(w, status, payload.len() as u32)?;
    w.write_all(payload)
}

/// A reply header alone (the payload of `len` bytes follows, written in pieces).
pub fn write_reply_header(w: &mut impl Write, status: u8, len: u32) -> std::io::Result<()> {
    let mut h = [0u8; REPLY_BYTES];
    h[0] = status;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    w.write_all(&h)
}

/// Read a reply header: (status, payload length).
pub fn read_reply_header(r: &mut impl Read) -> std::io::Result<(u8, u32)> {
    let mut h = [0u8; REPLY_BYTES];
    r.read_exact(&mut h)?;
    Ok((h[0], u32::from_le_bytes(h[4..8].try_into().expect("4"))))
}
