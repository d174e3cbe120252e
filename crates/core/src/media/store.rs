//! Contents of a data-backed device, kept per physical sector so that every read goes through
//! the FTL's mapping (and a mapping bug shows up as wrong data, not as a lucky right answer).
//! All-zero sectors take no memory: a sector with no slot reads as zeros.

use serde::{Deserialize, Serialize};

use super::NIL;

/// Bytes per chunk of slots: a sixteenth of the device (so the last chunk, mostly unused,
/// overshoots the contents by at most that, as `sizing` assumes), within these bounds.
const CHUNK_BYTES: (usize, usize) = (1 << 20, 64 << 20);

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "Wire")]
pub struct DataStore {
    sector_bytes: usize,
    /// Slot holding each physical sector's bytes, or NIL for zeros.
    slot_of: Vec<u32>,
    /// The slots, `chunk_slots` per chunk. Chunks are added as slots run out and never move
    /// (growing one flat array would copy all the device's contents each time it grows);
    /// a chunk's pages are touched only when its slots are first used.
    chunks: Vec<Vec<u8>>,
    chunk_slots: usize,
    /// Slots ever handed out (the next new slot).
    used: u32,
    free: Vec<u32>,
}

/// A store as saved: the same fields, the last chunk cut at the slots in use (a snapshot holds
/// the contents, not the unused end of a chunk).
#[derive(Serialize)]
struct WireRef<'a> {
    sector_bytes: usize,
    slot_of: &'a [u32],
    chunks: Vec<&'a [u8]>,
    chunk_slots: usize,
    used: u32,
    free: &'a [u32],
}

#[derive(Deserialize)]
struct Wire {
    sector_bytes: usize,
    slot_of: Vec<u32>,
    chunks: Vec<Vec<u8>>,
    chunk_slots: usize,
    used: u32,
    free: Vec<u32>,
}

impl Serialize for DataStore {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let used_bytes = self.used as usize * self.sector_bytes;
        let chunk_bytes = self.chunk_slots * self.sector_bytes;
        WireRef {
            sector_bytes: self.sector_bytes,
            slot_of: &self.slot_of,
            chunks: self.chunks.iter().enumerate().map(|(c, v)| &v[..(used_bytes - c * chunk_bytes).min(chunk_bytes)]).collect(),
            chunk_slots: self.chunk_slots,
            used: self.used,
            free: &self.free,
        }
        .serialize(s)
    }
}

impl From<Wire> for DataStore {
    fn from(w: Wire) -> DataStore {
        let mut chunks = w.chunks;
        if let Some(last) = chunks.last_mut() {
            last.resize(w.chunk_slots * w.sector_bytes, 0);
        }
        DataStore { sector_bytes: w.sector_bytes, slot_of: w.slot_of, chunks, chunk_slots: w.chunk_slots, used: w.used, free: w.free }
    }
}

impl DataStore {
    pub fn new(physical_sectors: u64, sector_bytes: u32) -> DataStore {
        let sb = sector_bytes as usize;
        DataStore {
            sector_bytes: sb,
            slot_of: super::mem::filled(physical_sectors as usize, NIL),
            chunks: Vec::new(),
            chunk_slots: ((physical_sectors as usize * sb / 16).clamp(CHUNK_BYTES.0, CHUNK_BYTES.1) / sb).max(1),
            used: 0,
            free: Vec::new(),
        }
    }

    /// Bytes of user data held in memory.
    pub fn resident_bytes(&self) -> u64 {
        (self.used as u64 - self.free.len() as u64) * self.sector_bytes as u64
    }

    #[inline]
    fn slot(&self, slot: u32) -> &[u8] {
        let (c, i) = (slot as usize / self.chunk_slots, slot as usize % self.chunk_slots);
        &self.chunks[c][i * self.sector_bytes..(i + 1) * self.sector_bytes]
    }

    /// Store `data` (one sector) at `psa`, which must hold nothing yet.
    pub fn put(&mut self, psa: u32, data: &[u8]) {
        debug_assert_eq!(data.len(), self.sector_bytes);
        assert_eq!(self.slot_of[psa as usize], NIL, "program of a non-erased sector {psa}");
        if data.iter().all(|&b| b == 0) {
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                debug_assert!(s < self.used, "free slot {s} was never handed out");
                s
            }
            None => {
                let s = self.used;
                if s as usize == self.chunks.len() * self.chunk_slots {
                    // Zeroed on allocation by the kernel as pages are first touched, not here.
                    self.chunks.push(vec![0u8; self.chunk_slots * self.sector_bytes]);
                }
                self.used += 1;
                s
            }
        };
        let (c, i) = (slot as usize / self.chunk_slots, slot as usize % self.chunk_slots);
        self.chunks[c][i * self.sector_bytes..(i + 1) * self.sector_bytes].copy_from_slice(data);
        self.slot_of[psa as usize] = slot;
    }

    /// Move a sector's contents (GC relocation): no copy, the slot changes owner.
    pub fn relocate(&mut self, from: u32, to: u32) {
        debug_assert_ne!(from, to, "relocation of sector {from} onto itself");
        assert_eq!(self.slot_of[to as usize], NIL, "relocation onto a non-erased sector {to}");
        self.slot_of[to as usize] = std::mem::replace(&mut self.slot_of[from as usize], NIL);
    }

    /// Forget a sector's contents (it was overwritten, trimmed, or its block erased).
    pub fn discard(&mut self, psa: u32) {
        let slot = std::mem::replace(&mut self.slot_of[psa as usize], NIL);
        if slot != NIL {
            self.free.push(slot);
            debug_assert!(self.free.len() <= self.used as usize, "more free slots than were handed out");
        }
    }

    /// The bytes held at `psa`, or None for a sector that reads as zeros (erased, never
    /// programmed, or programmed with zeros). For instruments that inspect the NAND itself
    /// (a deletion audit), not for the I/O path.
    pub fn sector(&self, psa: u32) -> Option<&[u8]> {
        match self.slot_of[psa as usize] {
            NIL => None,
            slot => Some(self.slot(slot)),
        }
    }

    /// The sector's bytes at `psa` into `out` (one sector).
    pub fn get(&self, psa: u32, out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.sector_bytes);
        self.get_part(psa, 0, out);
    }

    /// Bytes `from..from + out.len()` of the sector at `psa` (a read that starts or ends
    /// inside a sector copies only what the caller asked for).
    pub fn get_part(&self, psa: u32, from: usize, out: &mut [u8]) {
        assert!(from + out.len() <= self.sector_bytes, "read past the end of a sector");
        match self.slot_of[psa as usize] {
            NIL => out.fill(0),
            slot => out.copy_from_slice(&self.slot(slot)[from..from + out.len()]),
        }
    }
}
