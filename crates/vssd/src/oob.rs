//! The 16-byte OOB record FlashBlox keeps in every erase block it writes: the block's logical
//! address (8 bytes: logical die id and block id in that die), its erase count (2 bytes) and
//! its erase timestamp (6 bytes). The device-level map lives in host memory; these records are
//! what rebuilds it after a crash (see `recovery.rs`).
//!
//! Layout, little-endian: `[0..4)` logical die, `[4..8)` block in the die, `[8..10)` erase
//! count, `[10..16)` timestamp. The timestamp is the layer's own 48-bit clock (one tick per
//! block opened for writing), not wall time: it orders the copies of a block that a crash
//! during a migration can leave behind, and 2^48 openings outlast any device.

use ssdlab_core::ftl::ocssd::OOB_BYTES;

/// Largest timestamp a record can hold.
pub const TIMESTAMP_MAX: u64 = (1 << 48) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OobRecord {
    pub ldie: u32,
    pub block: u32,
    pub erase_count: u16,
    pub timestamp: u64,
}

impl OobRecord {
    pub fn encode(&self) -> [u8; OOB_BYTES] {
        assert!(self.timestamp <= TIMESTAMP_MAX, "timestamp {} exceeds 48 bits", self.timestamp);
        let mut b = [0u8; OOB_BYTES];
        b[0..4].copy_from_slice(&self.ldie.to_le_bytes());
        b[4..8].copy_from_slice(&self.block.to_le_bytes());
        b[8..10].copy_from_slice(&self.erase_count.to_le_bytes());
        b[10..16].copy_from_slice(&self.timestamp.to_le_bytes()[..6]);
        b
    }

    pub fn decode(b: &[u8; OOB_BYTES]) -> OobRecord {
        let mut ts = [0u8; 8];
        ts[..6].copy_from_slice(&b[10..16]);
        OobRecord {
            ldie: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            block: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            erase_count: u16::from_le_bytes(b[8..10].try_into().expect("2 bytes")),
            timestamp: u64::from_le_bytes(ts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_in_sixteen_bytes() {
        assert_eq!(OOB_BYTES, 16);
        for r in [
            OobRecord { ldie: 0, block: 0, erase_count: 0, timestamp: 1 },
            OobRecord { ldie: 63, block: 4095, erase_count: 2999, timestamp: TIMESTAMP_MAX },
            OobRecord { ldie: u32::MAX, block: u32::MAX, erase_count: u16::MAX, timestamp: 0x1234_5678_9abc },
        ] {
            assert_eq!(OobRecord::decode(&r.encode()), r);
        }
    }
}
