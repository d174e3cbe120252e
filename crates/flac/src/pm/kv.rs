//! The persistent key-value store of file-system metadata (FlacFS keeps its metadata as
//! key-value pairs, as the document describes). The pairs live in memory (a hash map); PM
//! holds an append-only stream of checksummed put/delete records in one of two areas. When the
//! active area fills, the live pairs are written as a fresh stream into the other area with
//! the next generation number and the superblock switches to it with one 8-byte store, so a
//! crash leaves either the old or the new stream. Records of another generation (left over
//! from the area's previous use) end the scan, as does a torn record (bad checksum).

use std::collections::HashMap;

use crc32fast::Hasher;

pub const REC_HDR: usize = 24;
const OP_PUT: u8 = 1;
const OP_DEL: u8 = 2;

/// Bytes one record takes in the stream.
pub fn record_bytes(klen: usize, vlen: usize) -> usize {
    (REC_HDR + klen + vlen).next_multiple_of(8)
}

#[derive(Default)]
pub struct Kv {
    pub map: HashMap<Vec<u8>, Vec<u8>>,
    /// Stream bytes the live pairs would take (the size of a compacted stream).
    live_bytes: usize,
    pub gen: u32,
    pub active: usize,
    pub tail: usize,
}

fn crc_of(rec: &[u8]) -> u32 {
    let mut c = Hasher::new();
    c.update(&rec[8..]);
    c.finalize()
}

fn encode(out: &mut [u8], gen: u32, op: u8, key: &[u8], val: &[u8]) -> usize {
    let n = record_bytes(key.len(), val.len());
    let rec = &mut out[..n];
    rec[..REC_HDR].fill(0);
    rec[0..4].copy_from_slice(&(n as u32).to_le_bytes());
    rec[8..12].copy_from_slice(&gen.to_le_bytes());
    rec[12] = op;
    rec[14..16].copy_from_slice(&(key.len() as u16).to_le_bytes());
    rec[16..20].copy_from_slice(&(val.len() as u32).to_le_bytes());
    rec[REC_HDR..REC_HDR + key.len()].copy_from_slice(key);
    rec[REC_HDR + key.len()..REC_HDR + key.len() + val.len()].copy_from_slice(val);
    rec[REC_HDR + key.len() + val.len()..].fill(0);
    let c = crc_of(rec);
    // The checksum goes in last: a record is valid only once all of it is in place.
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    rec[4..8].copy_from_slice(&c.to_le_bytes());
    n
}

impl Kv {
    /// Load the stream of generation `gen` from `area` (the active one).
    pub fn load(area: &[u8], gen: u32, active: usize) -> Kv {
        let mut kv = Kv { gen, active, ..Kv::default() };
        let mut at = 0;
        while at + REC_HDR <= area.len() {
            let n = u32::from_le_bytes(area[at..at + 4].try_into().unwrap()) as usize;
            if n < REC_HDR || !n.is_multiple_of(8) || at + n > area.len() {
                break;
            }
            let rec = &area[at..at + n];
            if u32::from_le_bytes(rec[8..12].try_into().unwrap()) != gen || u32::from_le_bytes(rec[4..8].try_into().unwrap()) != crc_of(rec)
            {
                break;
            }
            let kl = u16::from_le_bytes(rec[14..16].try_into().unwrap()) as usize;
            let vl = u32::from_le_bytes(rec[16..20].try_into().unwrap()) as usize;
            if REC_HDR + kl + vl > n {
                break;
            }
            let key = &rec[REC_HDR..REC_HDR + kl];
            match rec[12] {
                OP_PUT => kv.set(key, &rec[REC_HDR + kl..REC_HDR + kl + vl]),
                OP_DEL => kv.remove(key),
                _ => break,
            }
            at += n;
        }
        kv.tail = at;
        kv
    }

    fn set(&mut self, key: &[u8], val: &[u8]) {
        if let Some(old) = self.map.insert(key.to_vec(), val.to_vec()) {
            self.live_bytes -= record_bytes(key.len(), old.len());
        }
        self.live_bytes += record_bytes(key.len(), val.len());
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.map.remove(key) {
            self.live_bytes -= record_bytes(key.len(), old.len());
        }
    }

    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Whether `add` more stream bytes fit after the tail of an area of `area_len`.
    pub fn fits(&self, add: usize, area_len: usize) -> bool {
        self.tail + add <= area_len
    }

    /// Append a put to the active `area`; returns the bytes written.
    pub fn put(&mut self, area: &mut [u8], key: &[u8], val: &[u8]) -> usize {
        let n = encode(&mut area[self.tail..], self.gen, OP_PUT, key, val);
        self.tail += n;
        self.set(key, val);
        n
    }

    pub fn del(&mut self, area: &mut [u8], key: &[u8]) -> usize {
        let n = encode(&mut area[self.tail..], self.gen, OP_DEL, key, &[]);
        self.tail += n;
        self.remove(key);
        n
    }

    /// Write the live pairs into `other` (the inactive area) as generation `gen + 1`; the
    /// caller then switches the superblock to it and calls [`Kv::switched`]. Returns bytes
    /// written. Pairs are written in key order (the same metadata gives the same stream).
    pub fn compact_into(&self, other: &mut [u8]) -> usize {
        assert!(self.live_bytes <= other.len(), "compaction needs {} bytes, area has {}", self.live_bytes, other.len());
        let mut keys: Vec<&Vec<u8>> = self.map.keys().collect();
        keys.sort();
        let mut at = 0;
        for k in keys {
            at += encode(&mut other[at..], self.gen + 1, OP_PUT, k, &self.map[k]);
        }
        if at + REC_HDR <= other.len() {
            other[at..at + 4].fill(0);
        }
        at
    }

    pub fn switched(&mut self, tail: usize) {
        self.gen += 1;
        self.active ^= 1;
        self.tail = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_round_trip_and_compaction() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        let mut kv = Kv::load(&a, 1, 0);
        assert!(kv.map.is_empty());
        kv.put(&mut a, b"x", b"1");
        kv.put(&mut a, b"y", b"22");
        kv.put(&mut a, b"x", b"333");
        kv.del(&mut a, b"y");
        let again = Kv::load(&a, 1, 0);
        assert_eq!(again.map.len(), 1);
        assert_eq!(again.map[&b"x".to_vec()], b"333");
        assert_eq!(again.tail, kv.tail);
        assert_eq!(again.live_bytes(), record_bytes(1, 3));
        // Compaction into b with generation 2; stale records of generation 1 in b are ignored.
        let n = kv.compact_into(&mut b);
        kv.switched(n);
        let c = Kv::load(&b, 2, 1);
        assert_eq!(c.map, kv.map);
        assert_eq!(c.tail, n);
        // A torn record (bad checksum) ends the stream.
        let t = kv.tail;
        kv.put(&mut b, b"z", b"9");
        b[t + REC_HDR] ^= 0xff;
        let d = Kv::load(&b, 2, 1);
        assert!(!d.map.contains_key(b"z".as_slice()));
        assert_eq!(d.tail, t);
    }
}
