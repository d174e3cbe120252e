//! Contents of a data-backed device, kept per physical sector so that every read goes through
//! the FTL's mapping (and a mapping bug shows up as wrong data, not as a lucky right answer).
//! All-zero sectors take no memory: a sector with no slot reads as zeros.

use serde::{Deserialize, Serialize};

use super::NIL;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataStore {
    sector_bytes: usize,
    /// Slot holding each physical sector's bytes, or NIL for zeros.
    slot_of: Vec<u32>,
    arena: Vec<u8>,
    free: Vec<u32>,
}

impl DataStore {
    pub fn new(physical_sectors: u64, sector_bytes: u32) -> DataStore {
        DataStore {
            sector_bytes: sector_bytes as usize,
            slot_of: super::mem::filled(physical_sectors as usize, NIL),
            arena: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Bytes of user data held in memory.
    pub fn resident_bytes(&self) -> u64 {
        self.arena.len() as u64 - self.free.len() as u64 * self.sector_bytes as u64
    }

    /// Store `data` (one sector) at `psa`, which must hold nothing yet.
    pub fn put(&mut self, psa: u32, data: &[u8]) {
        debug_assert_eq!(data.len(), self.sector_bytes);
        assert_eq!(self.slot_of[psa as usize], NIL, "program of a non-erased sector {psa}");
        if data.iter().all(|&b| b == 0) {
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = (self.arena.len() / self.sector_bytes) as u32;
                if self.arena.len() + self.sector_bytes > self.arena.capacity() {
                    // Grow by about a sixteenth, in whole sectors, not double: a device's
                    // contents are most of its memory, and doubling would overshoot its
                    // estimate (`sizing`) by up to 2x.
                    let sectors = (self.arena.len() / self.sector_bytes / 16).max(64);
                    self.arena.reserve_exact(sectors * self.sector_bytes);
                }
                self.arena.resize(self.arena.len() + self.sector_bytes, 0);
                s
            }
        };
        let off = slot as usize * self.sector_bytes;
        self.arena[off..off + self.sector_bytes].copy_from_slice(data);
        self.slot_of[psa as usize] = slot;
    }

    /// Move a sector's contents (GC relocation): no copy, the slot changes owner.
    pub fn relocate(&mut self, from: u32, to: u32) {
        assert_eq!(self.slot_of[to as usize], NIL, "relocation onto a non-erased sector {to}");
        self.slot_of[to as usize] = std::mem::replace(&mut self.slot_of[from as usize], NIL);
    }

    /// Forget a sector's contents (it was overwritten, trimmed, or its block erased).
    pub fn discard(&mut self, psa: u32) {
        let slot = std::mem::replace(&mut self.slot_of[psa as usize], NIL);
        if slot != NIL {
            self.free.push(slot);
        }
    }

    /// The bytes held at `psa`, or None for a sector that reads as zeros (erased, never
    /// programmed, or programmed with zeros). For instruments that inspect the NAND itself
    /// (a deletion audit), not for the I/O path.
    pub fn sector(&self, psa: u32) -> Option<&[u8]> {
        match self.slot_of[psa as usize] {
            NIL => None,
            slot => Some(&self.arena[slot as usize * self.sector_bytes..(slot as usize + 1) * self.sector_bytes]),
        }
    }

    pub fn get(&self, psa: u32, out: &mut [u8]) {
        match self.slot_of[psa as usize] {
            NIL => out.fill(0),
            slot => {
                let off = slot as usize * self.sector_bytes;
                out.copy_from_slice(&self.arena[off..off + self.sector_bytes]);
            }
        }
    }
}
