//! The metadata log: how a flush's page-table updates and the file system's metadata updates
//! become persistent together. A transaction is a list of records (page-table runs and
//! key-value puts/deletes) written to the log slot in PM; it is committed when its header,
//! written last and checksummed together with the body, is in place. It is then applied (page
//! table, key-value stream) and the superblock's applied sequence number moves past it. After
//! a crash, recovery replays the slot's transaction if it is committed and not yet applied;
//! replay is idempotent, so a crash during apply or during recovery is harmless.
//!
//! One transaction is in the slot at a time (commits serialize on the metadata lock, which is
//! held only for the metadata write: the data of a flush is copied to PM before).

use crc32fast::Hasher;

use crate::error::{FlacError, Result};

pub const HDR_BYTES: usize = 64;
const MAGIC: u32 = 0x5854_4c46; // "FLTX"

const TAG_PT: u8 = 1;
const TAG_PUT: u8 = 2;
const TAG_DEL: u8 = 3;
const PT_BYTES: usize = 1 + 8 + 4 + 4;

/// A record of a transaction.
#[derive(Debug, PartialEq, Eq)]
pub enum Rec<'a> {
    /// Persistent page table: pages `vpn..vpn+count` map to frames `first..first+count`, or
    /// to nothing (`first` None: the pages were freed).
    Pt {
        vpn: u64,
        count: u32,
        first: Option<u32>,
    },
    Put {
        key: &'a [u8],
        val: &'a [u8],
    },
    Del {
        key: &'a [u8],
    },
}

/// A transaction being built.
#[derive(Default, Clone, Debug)]
pub struct Tx {
    body: Vec<u8>,
    nrec: u32,
    /// Offset of the last page-table record (to extend runs in place).
    last_pt: Option<usize>,
    kv_bytes: usize,
}

impl Tx {
    pub fn new() -> Self {
        Tx::default()
    }

    pub fn is_empty(&self) -> bool {
        self.nrec == 0
    }

    pub fn nrec(&self) -> u32 {
        self.nrec
    }

    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// Bytes the key-value records will take in the key-value stream (an upper bound).
    pub fn kv_bytes(&self) -> usize {
        self.kv_bytes
    }

    /// Map page `vpn` to `frame` (None: unmap), extending the previous run when it continues it.
    pub fn pt_set(&mut self, vpn: u64, frame: Option<u32>) {
        if let Some(at) = self.last_pt {
            let b = &mut self.body[at..at + PT_BYTES];
            let rvpn = u64::from_le_bytes(b[1..9].try_into().unwrap());
            let count = u32::from_le_bytes(b[9..13].try_into().unwrap());
            let first = u32::from_le_bytes(b[13..17].try_into().unwrap());
            let next_frame = if first == 0 { 0 } else { first + count };
            let want = frame.map_or(0, |f| f + 1);
            if rvpn + count as u64 == vpn && want == next_frame && count < u32::MAX {
                b[9..13].copy_from_slice(&(count + 1).to_le_bytes());
                return;
            }
        }
        self.pt_run(vpn, 1, frame);
    }

    /// Map `count` pages from `vpn` to consecutive frames from `first` (None: unmap them).
    pub fn pt_run(&mut self, vpn: u64, count: u32, first: Option<u32>) {
        assert!(count > 0);
        self.last_pt = Some(self.body.len());
        self.body.push(TAG_PT);
        self.body.extend_from_slice(&vpn.to_le_bytes());
        self.body.extend_from_slice(&count.to_le_bytes());
        self.body.extend_from_slice(&first.map_or(0, |f| f + 1).to_le_bytes());
        self.nrec += 1;
    }

    pub fn put(&mut self, key: &[u8], val: &[u8]) {
        assert!(key.len() <= u16::MAX as usize && val.len() <= u32::MAX as usize);
        self.body.push(TAG_PUT);
        self.body.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.body.extend_from_slice(&(val.len() as u32).to_le_bytes());
        self.body.extend_from_slice(key);
        self.body.extend_from_slice(val);
        self.nrec += 1;
        self.last_pt = None;
        self.kv_bytes += super::kv::record_bytes(key.len(), val.len());
    }

    pub fn del(&mut self, key: &[u8]) {
        self.body.push(TAG_DEL);
        self.body.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.body.extend_from_slice(key);
        self.nrec += 1;
        self.last_pt = None;
        self.kv_bytes += super::kv::record_bytes(key.len(), 0);
    }

    /// Append another transaction's records.
    pub fn extend(&mut self, other: &Tx) {
        self.body.extend_from_slice(&other.body);
        self.nrec += other.nrec;
        self.kv_bytes += other.kv_bytes;
        self.last_pt = None;
    }

    pub fn records(&self) -> Records<'_> {
        Records { body: &self.body, at: 0 }
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

pub struct Records<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Records<'a> {
    pub fn over(body: &'a [u8]) -> Self {
        Records { body, at: 0 }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.body.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Rec<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.body.len() {
            return None;
        }
        let bad = || FlacError::Corrupt("metadata log: malformed record in a checksummed transaction".into());
        let tag = self.take(1)?[0];
        let r = match tag {
            TAG_PT => (|| {
                let b = self.take(PT_BYTES - 1)?;
                let vpn = u64::from_le_bytes(b[0..8].try_into().unwrap());
                let count = u32::from_le_bytes(b[8..12].try_into().unwrap());
                let first = u32::from_le_bytes(b[12..16].try_into().unwrap());
                Some(Rec::Pt { vpn, count, first: first.checked_sub(1) })
            })(),
            TAG_PUT => (|| {
                let kl = u16::from_le_bytes(self.take(2)?.try_into().unwrap()) as usize;
                let vl = u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize;
                let key = self.take(kl)?;
                let val = self.take(vl)?;
                Some(Rec::Put { key, val })
            })(),
            TAG_DEL => (|| {
                let kl = u16::from_le_bytes(self.take(2)?.try_into().unwrap()) as usize;
                Some(Rec::Del { key: self.take(kl)? })
            })(),
            _ => None,
        };
        match r {
            Some(r) => Some(Ok(r)),
            None => {
                self.at = self.body.len();
                Some(Err(bad()))
            }
        }
    }
}

fn hdr_crc(h: &[u8]) -> u32 {
    let mut c = Hasher::new();
    c.update(&h[..28]);
    c.finalize()
}

/// Write `tx` as transaction `seq` into the log slot `slot` (header + body) and commit it.
/// Returns the bytes written (for the PM write cost).
pub fn write(slot: &mut [u8], seq: u64, tx: &Tx) -> Result<usize> {
    let body = tx.body();
    if HDR_BYTES + body.len() > slot.len() {
        return Err(FlacError::NoSpace(format!(
            "metadata log: a transaction of {} bytes does not fit the {}-byte log (flush less at once)",
            body.len(),
            slot.len() - HDR_BYTES
        )));
    }
    // Invalidate the old header first, so a torn body is never taken for the old transaction's.
    slot[..4].copy_from_slice(&0u32.to_le_bytes());
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    slot[HDR_BYTES..HDR_BYTES + body.len()].copy_from_slice(body);
    let mut h = [0u8; 32];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&tx.nrec.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
    h[24..28].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    let c = hdr_crc(&h);
    h[28..32].copy_from_slice(&c.to_le_bytes());
    // The body is persistent before the header that commits it (a persist barrier on PM).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    crate::crash::point("log.before_header");
    slot[4..32].copy_from_slice(&h[4..32]);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    slot[0..4].copy_from_slice(&h[0..4]);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    Ok(HDR_BYTES + body.len())
}

/// The committed transaction in the slot: (sequence number, body), if the slot holds one.
pub fn read(slot: &[u8]) -> Option<(u64, &[u8])> {
    let h = &slot[..32];
    if u32::from_le_bytes(h[0..4].try_into().unwrap()) != MAGIC {
        return None;
    }
    if u32::from_le_bytes(h[28..32].try_into().unwrap()) != hdr_crc(h) {
        return None;
    }
    let seq = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let len = u64::from_le_bytes(h[16..24].try_into().unwrap()) as usize;
    let body = slot.get(HDR_BYTES..HDR_BYTES + len)?;
    if crc32fast::hash(body) != u32::from_le_bytes(h[24..28].try_into().unwrap()) {
        return None;
    }
    Some((seq, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_and_round_trip() {
        let mut tx = Tx::new();
        for i in 0..10 {
            tx.pt_set(100 + i, Some(50 + i as u32));
        }
        tx.pt_set(110, None);
        tx.pt_set(111, None);
        tx.put(b"k", b"value");
        tx.del(b"gone");
        let recs: Vec<_> = tx.records().map(|r| r.unwrap()).collect();
        assert_eq!(
            recs,
            vec![
                Rec::Pt { vpn: 100, count: 10, first: Some(50) },
                Rec::Pt { vpn: 110, count: 2, first: None },
                Rec::Put { key: b"k", val: b"value" },
                Rec::Del { key: b"gone" },
            ]
        );
        let mut slot = vec![0u8; 4096];
        write(&mut slot, 7, &tx).unwrap();
        let (seq, body) = read(&slot).unwrap();
        assert_eq!(seq, 7);
        assert_eq!(Records::over(body).count(), 4);
    }

    #[test]
    fn torn_or_damaged_transactions_are_not_committed() {
        let mut tx = Tx::new();
        tx.put(b"a", &[1; 100]);
        let mut slot = vec![0u8; 4096];
        write(&mut slot, 1, &tx).unwrap();
        let mut torn = slot.clone();
        torn[HDR_BYTES + 50] ^= 1;
        assert!(read(&torn).is_none(), "body damage is caught by the body checksum");
        let mut torn = slot.clone();
        torn[10] ^= 1;
        assert!(read(&torn).is_none(), "header damage is caught by the header checksum");
        let big = {
            let mut t = Tx::new();
            t.put(b"a", &[0; 5000]);
            t
        };
        assert!(matches!(write(&mut slot, 2, &big), Err(FlacError::NoSpace(_))));
    }
}
