//! The journal: 32-byte records with a CRC of every command that changes the device, written
//! before the replies they acknowledge, replayed through the device at restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ssdlab_core::ftl::zns::ZoneAction;
use ssdlab_core::Device;

use super::{BackendError, Recovery, Result, FORMAT_VERSION};

const JOURNAL_MAGIC: &[u8; 8] = b"SSDLABJN";
const JOURNAL_HEADER: u64 = 32;
const RECORD: usize = 32;

/// Kinds of journal records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum JOp {
    Write = 1,
    Trim = 2,
    Flush = 3,
    /// FDP reclaim unit handle update of one placement identifier (the record's placement).
    RuhUpdate = 4,
    /// Zone Management Send: the record's offset is the zone's start LBA, its flags the
    /// action (1 close, 2 finish, 3 open, 4 reset, 5 offline), its length 1 for "select all".
    ZoneAction = 5,
}

/// A zone action's journal code (Zone Management Send's ZSA values).
pub fn zone_action_code(a: ZoneAction) -> u8 {
    match a {
        ZoneAction::Close => 1,
        ZoneAction::Finish => 2,
        ZoneAction::Open => 3,
        ZoneAction::Reset => 4,
        ZoneAction::Offline => 5,
    }
}

pub(super) fn zone_action_of(code: u8) -> Option<ZoneAction> {
    Some(match code {
        1 => ZoneAction::Close,
        2 => ZoneAction::Finish,
        3 => ZoneAction::Open,
        4 => ZoneAction::Reset,
        5 => ZoneAction::Offline,
        _ => return None,
    })
}

/// The open journal: records collect in `pending` and go to the file on `commit`.
pub(super) struct Journal {
    pub(super) file: File,
    pub(super) path: PathBuf,
    pub(super) records: u64,
    /// Records appended but not yet written (whole records only).
    pending: Vec<u8>,
}

impl Journal {
    pub(super) fn create(path: &Path, generation: u64, logical: u64) -> Result<Journal> {
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        let mut h = [0u8; JOURNAL_HEADER as usize];
        h[..8].copy_from_slice(JOURNAL_MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&generation.to_le_bytes());
        h[24..32].copy_from_slice(&logical.to_le_bytes());
        file.write_all(&h)?;
        file.sync_data()?;
        Ok(Journal { file, path: path.to_path_buf(), records: 0, pending: Vec::with_capacity(64 * RECORD) })
    }

    pub(super) fn append(&mut self, t: u64, op: JOp, offset: u64, len: u64, flags: u8, placement: Option<u16>) -> Result<()> {
        let mut r = [0u8; RECORD];
        r[0..8].copy_from_slice(&t.to_le_bytes());
        r[8..16].copy_from_slice(&offset.to_le_bytes());
        r[16..24].copy_from_slice(&len.to_le_bytes());
        r[24] = op as u8;
        r[25] = flags;
        r[26..28].copy_from_slice(&placement.unwrap_or(u16::MAX).to_le_bytes());
        let crc = crc32fast::hash(&r[..28]);
        r[28..32].copy_from_slice(&crc.to_le_bytes());
        self.pending.extend_from_slice(&r);
        self.records += 1;
        Ok(())
    }

    /// Write the pending records with one write(2): once it returns they are the kernel's, so
    /// they survive the death of this process; fdatasync (flush, FUA) makes them survive power
    /// loss. A crash inside the write leaves a torn last record, which replay drops.
    pub(super) fn commit(&mut self) -> Result<()> {
        debug_assert_eq!(self.pending.len() % RECORD, 0, "whole records only");
        if !self.pending.is_empty() {
            self.file.write_all(&self.pending).map_err(|e| BackendError::msg(format!("{}: {e}", self.path.display())))?;
            self.pending.clear();
        }
        Ok(())
    }
}

/// A decoded journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    t: u64,
    op: JOp,
    offset: u64,
    len: u64,
    fua: bool,
    /// The flags byte: FUA for writes, the action for zone actions.
    flags: u8,
    placement: Option<u16>,
}

fn decode(r: &[u8; RECORD]) -> Option<Record> {
    let crc = u32::from_le_bytes(r[28..32].try_into().ok()?);
    if crc32fast::hash(&r[..28]) != crc {
        return None;
    }
    let op = match r[24] {
        1 => JOp::Write,
        2 => JOp::Trim,
        3 => JOp::Flush,
        4 => JOp::RuhUpdate,
        5 => JOp::ZoneAction,
        _ => return None,
    };
    let pid = u16::from_le_bytes([r[26], r[27]]);
    Some(Record {
        t: u64::from_le_bytes(r[0..8].try_into().ok()?),
        offset: u64::from_le_bytes(r[8..16].try_into().ok()?),
        len: u64::from_le_bytes(r[16..24].try_into().ok()?),
        op,
        fua: r[25] & 1 != 0,
        flags: r[25],
        placement: (pid != u16::MAX).then_some(pid),
    })
}

/// Replay the journal at `path` if it belongs to `generation`; true if it held records.
pub(super) fn replay_journal(dev: &mut Device, path: &Path, generation: u64, logical: u64, rec: &mut Recovery) -> Result<bool> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut h = [0u8; JOURNAL_HEADER as usize];
    if f.read_exact(&mut h).is_err() || &h[..8] != JOURNAL_MAGIC {
        return Err(BackendError::msg(format!("{}: not an ssdlab journal", path.display())));
    }
    let jgen = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    let jlogical = u64::from_le_bytes(h[24..32].try_into().expect("8 bytes"));
    if jlogical != logical {
        return Err(BackendError::msg(format!("{}: journal of a {jlogical}-byte device, this one has {logical}", path.display())));
    }
    if jgen != generation {
        // Written before the snapshot we loaded (a crash between snapshot and new journal).
        return Ok(false);
    }
    let total = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(JOURNAL_HEADER))?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut buf = [0u8; RECORD];
    let mut n = 0u64;
    loop {
        match r.read_exact(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
        let Some(rec_) = decode(&buf) else {
            rec.torn_records_dropped += 1;
            break;
        };
        dev.advance_to(rec_.t);
        match rec_.op {
            JOp::Write => dev.write_placed_len(rec_.offset, rec_.len, rec_.fua, rec_.placement)?,
            JOp::Trim => dev.trim(rec_.offset, rec_.len)?,
            JOp::Flush => dev.flush()?,
            JOp::RuhUpdate => {
                dev.ftl_mut().ruh_update(&[rec_.placement.unwrap_or(u16::MAX)], rec_.t)?;
                rec_.t
            }
            JOp::ZoneAction => {
                let a = zone_action_of(rec_.flags).ok_or_else(|| BackendError::msg(format!("journal: zone action code {}", rec_.flags)))?;
                let z = dev.zns_mut().ok_or_else(|| BackendError::msg("journal: a zone action on a device without zones"))?;
                z.zone_action(rec_.offset, a, rec_.len != 0, rec_.t)?
            }
        };
        n += 1;
    }
    let tail = total - JOURNAL_HEADER - n * RECORD as u64;
    if tail > 0 && rec.torn_records_dropped == 0 {
        rec.torn_records_dropped = 1; // a partial record at the end
    }
    rec.journal_records_replayed = n;
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_records_round_trip_and_detect_damage() {
        let dir = std::env::temp_dir().join(format!("ssdlab-jtest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut j = Journal::create(&dir.join("j"), 7, 1 << 20).unwrap();
        j.append(123, JOp::Write, 4096, 8192, 1, Some(3)).unwrap();
        j.append(456, JOp::Trim, 0, 4096, 0, None).unwrap();
        assert_eq!(std::fs::read(dir.join("j")).unwrap().len(), 32, "nothing written before the commit");
        j.commit().unwrap();
        let bytes = std::fs::read(dir.join("j")).unwrap();
        let r0: [u8; RECORD] = bytes[32..64].try_into().unwrap();
        assert_eq!(decode(&r0), Some(Record { t: 123, op: JOp::Write, offset: 4096, len: 8192, fua: true, flags: 1, placement: Some(3) }));
        let mut bad = r0;
        bad[9] ^= 1;
        assert_eq!(decode(&bad), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
