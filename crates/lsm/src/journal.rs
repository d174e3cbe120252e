//! The command journal of a served store (`ssdlab kv serve --data DIR`): Redis's append-only
//! file, for an emulated device.
//!
//! The store and its device are a deterministic function of the commands they were given and
//! the simulated times at which they came. So instead of writing the device's NAND and the
//! store's manifest to disk, the server appends every command it executes (with the simulated
//! time it ran at) to `DIR/journal`, and a restarted server replays the journal into a fresh
//! device: the same files, zones, wear and deletion records come back, not only the data.
//!
//! Durability is Redis's `appendfsync always`: a write (SET, DEL, FLUSHDB) is answered only
//! after its record is on disk (`fdatasync`), so a kill -9 loses no acknowledged write. Reads
//! and clock ticks change the device's timing state too and are journaled without a sync of
//! their own (they reach the disk with the next write, or at shutdown); a crash may lose the
//! reads after the last write, which changes timing only. A torn record at the end (a crash in
//! the middle of an append) is dropped at replay.
//!
//! The journal starts with the configuration it was made with; a restart with another
//! configuration is refused (the replay would build a different store). The journal grows with
//! every command and a restart replays all of it.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"SLKVJNL1";
/// Reads and ticks are written out (without a sync) once this much is buffered.
const BUFFER_BYTES: usize = 1 << 20;
/// The largest record a replay accepts (a value is at most 512 MiB).
const MAX_RECORD: u32 = (512 << 20) + 4096;

/// One journaled command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The clock moved to this simulated time.
    Tick(u64),
    Get(Vec<u8>),
    Set(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    /// Up to `limit` keys after `after` (SCAN).
    KeysAfter(Option<Vec<u8>>, u64),
    /// DBSIZE.
    KeyCount,
    /// FLUSHDB / FLUSHALL.
    Clear,
    /// Up to this many keys removed, from the first (FLUSHALL in parts).
    ClearSome(u64),
}

impl Command {
    /// Whether the command changes the stored data (answered only once on disk).
    pub fn is_write(&self) -> bool {
        matches!(self, Command::Set(..) | Command::Del(_) | Command::Clear | Command::ClearSome(_))
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let put = |out: &mut Vec<u8>, kind: u8, a: u64, k: &[u8], v: &[u8]| {
            out.push(kind);
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        };
        match self {
            Command::Tick(t) => put(out, 1, *t, &[], &[]),
            Command::Get(k) => put(out, 2, 0, k, &[]),
            Command::Set(k, v) => put(out, 3, 0, k, v),
            Command::Del(k) => put(out, 4, 0, k, &[]),
            Command::KeysAfter(None, n) => put(out, 5, *n, &[], &[]),
            Command::KeysAfter(Some(k), n) => put(out, 6, *n, k, &[]),
            Command::KeyCount => put(out, 7, 0, &[], &[]),
            Command::Clear => put(out, 8, 0, &[], &[]),
            Command::ClearSome(n) => put(out, 9, *n, &[], &[]),
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&out[start + 4..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Command> {
        if b.len() < 13 {
            return None;
        }
        let a = u64::from_le_bytes(b[1..9].try_into().ok()?);
        let kl = u32::from_le_bytes(b[9..13].try_into().ok()?) as usize;
        let k = b.get(13..13 + kl)?.to_vec();
        let v = b[13 + kl..].to_vec();
        Some(match b[0] {
            1 => Command::Tick(a),
            2 => Command::Get(k),
            3 => Command::Set(k, v),
            4 => Command::Del(k),
            5 => Command::KeysAfter(None, a),
            6 => Command::KeysAfter(Some(k), a),
            7 => Command::KeyCount,
            8 => Command::Clear,
            9 => Command::ClearSome(a),
            _ => return None,
        })
    }
}

/// An open journal, appending.
pub struct Journal {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
}

fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Config(format!("{}: {what}: {e}", path.display()))
}

impl Journal {
    /// Open (or create) `dir/journal` for a store made with `config` (any stable text, e.g.
    /// JSON); `replay` is called with every command already in it, in order. The directory is
    /// locked against a second server.
    pub fn open(dir: &Path, config: &str, mut replay: impl FnMut(Command) -> Result<()>) -> Result<Journal> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, "cannot create the data directory", e))?;
        let path = dir.join("journal");
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(|e| io(&path, "cannot open", e))?;
        file.try_lock()
            .map_err(|_| Error::Config(format!("{}: in use by another server (the data directory is locked)", dir.display())))?;
        let len = file.metadata().map_err(|e| io(&path, "cannot stat", e))?.len();
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&(config.len() as u32).to_le_bytes());
        header.extend_from_slice(config.as_bytes());
        header.extend_from_slice(&crc32fast::hash(config.as_bytes()).to_le_bytes());
        if len == 0 {
            file.write_all(&header).map_err(|e| io(&path, "cannot write", e))?;
            file.sync_all().map_err(|e| io(&path, "cannot sync", e))?;
            // The new file's directory entry must be durable too.
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, "cannot sync", e))?;
            return Ok(Journal { file, path, buf: vec![] });
        }
        let mut r = BufReader::with_capacity(1 << 20, &mut file);
        let mut have = vec![0u8; header.len()];
        if r.read_exact(&mut have).is_err() || have[..8] != MAGIC[..] {
            return Err(Error::Config(format!("{}: not an ssdlab kv journal", path.display())));
        }
        if have != header {
            return Err(Error::Config(format!(
                "{}: the store there was made with another configuration; serve it with that one, or use a new --data \
                 directory",
                dir.display()
            )));
        }
        let mut good = header.len() as u64;
        let mut body = vec![];
        loop {
            let mut n = [0u8; 4];
            if r.read_exact(&mut n).is_err() {
                break;
            }
            let n = u32::from_le_bytes(n);
            if n > MAX_RECORD {
                break;
            }
            body.resize(n as usize + 4, 0);
            if r.read_exact(&mut body).is_err() {
                break;
            }
            let (b, crc) = body.split_at(n as usize);
            if crc32fast::hash(b).to_le_bytes() != crc {
                break;
            }
            let Some(cmd) = Command::decode(b) else { break };
            replay(cmd)?;
            good += 4 + n as u64 + 4;
        }
        drop(r);
        // Drop a torn tail, so the next record follows the last whole one.
        if good < len {
            file.set_len(good).map_err(|e| io(&path, "cannot truncate a torn record", e))?;
            file.sync_all().map_err(|e| io(&path, "cannot sync", e))?;
        }
        file.seek(SeekFrom::Start(good)).map_err(|e| io(&path, "cannot seek", e))?;
        Ok(Journal { file, path, buf: vec![] })
    }

    /// Append `cmd`; a write is on disk when this returns.
    pub fn record(&mut self, cmd: &Command) -> Result<()> {
        cmd.encode(&mut self.buf);
        if cmd.is_write() {
            self.sync()
        } else if self.buf.len() >= BUFFER_BYTES {
            self.write_out()
        } else {
            Ok(())
        }
    }

    fn write_out(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf).map_err(|e| io(&self.path, "cannot write", e))?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Everything recorded is on disk.
    pub fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        self.file.sync_data().map_err(|e| io(&self.path, "cannot sync", e))
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = self.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ssdlab-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn all(dir: &Path, config: &str) -> Result<Vec<Command>> {
        let mut v = vec![];
        Journal::open(dir, config, |c| {
            v.push(c);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn commands_come_back_in_order_and_a_torn_tail_is_dropped() {
        let d = tmp("order");
        let cmds = vec![
            Command::Tick(5),
            Command::Set(b"k".to_vec(), b"v".repeat(3000)),
            Command::Get(b"k".to_vec()),
            Command::KeysAfter(None, 10),
            Command::KeysAfter(Some(b"a".to_vec()), 7),
            Command::KeyCount,
            Command::Del(b"k".to_vec()),
            Command::Clear,
            Command::ClearSome(1024),
        ];
        {
            let mut j = Journal::open(&d, "cfg", |_| panic!("a new journal has nothing to replay")).unwrap();
            for c in &cmds {
                j.record(c).unwrap();
            }
        }
        assert_eq!(all(&d, "cfg").unwrap(), cmds);
        // A crash in the middle of an append: half a record at the end.
        let p = d.join("journal");
        let whole = std::fs::metadata(&p).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        let mut half = vec![];
        Command::Set(b"x".to_vec(), b"y".repeat(100)).encode(&mut half);
        f.write_all(&half[..half.len() / 2]).unwrap();
        drop(f);
        assert_eq!(all(&d, "cfg").unwrap(), cmds, "the torn record is not replayed");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), whole, "and is cut off");
        let e = all(&d, "other").unwrap_err().to_string();
        assert!(e.contains("another configuration"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_server_is_refused() {
        let d = tmp("lock");
        let _j = Journal::open(&d, "cfg", |_| Ok(())).unwrap();
        let e = Journal::open(&d, "cfg", |_| Ok(())).err().unwrap().to_string();
        assert!(e.contains("in use"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
