//! Inodes: the in-memory record and its encoding, the metadata keys (`i<ino>`,
//! `d<parent><name>`), the per-inode cell (lock and queue marks), and attributes (stat,
//! setattr).

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::calls::Call;
use super::{lock, File, Fs, SetAttr, Stat, Ts, NO_RANGE};
use crate::error::Result;
use crate::sys::PAGE;

#[derive(Clone, Debug)]
pub(super) struct Inode {
    pub(super) mode: u32,
    pub(super) nlink: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) size: u64,
    pub(super) atime: Ts,
    pub(super) mtime: Ts,
    pub(super) ctime: Ts,
    pub(super) vstart: u64,
    pub(super) order: u8,
    pub(super) target: Vec<u8>,
}

impl Inode {
    pub(super) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub(super) fn is_reg(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    pub(super) fn is_lnk(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    pub(super) fn cap_pages(&self) -> u64 {
        if self.order == NO_RANGE {
            0
        } else {
            1 << self.order
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(80 + self.target.len());
        for v in [self.mode, self.nlink, self.uid, self.gid] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.size.to_le_bytes());
        for t in [self.atime, self.mtime, self.ctime] {
            b.extend_from_slice(&t.sec.to_le_bytes());
            b.extend_from_slice(&t.nsec.to_le_bytes());
        }
        b.extend_from_slice(&self.vstart.to_le_bytes());
        b.push(self.order);
        b.extend_from_slice(&self.target);
        b
    }

    pub(super) fn decode(b: &[u8]) -> Option<Inode> {
        if b.len() < 69 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let ts = |i: usize| Ts { sec: u64_at(i) as i64, nsec: u32_at(i + 8) };
        Some(Inode {
            mode: u32_at(0),
            nlink: u32_at(4),
            uid: u32_at(8),
            gid: u32_at(12),
            size: u64_at(16),
            atime: ts(24),
            mtime: ts(36),
            ctime: ts(48),
            vstart: u64_at(60),
            order: b[68],
            target: b[69..].to_vec(),
        })
    }
}

pub(super) fn ikey(ino: u64) -> Vec<u8> {
    let mut k = vec![b'i'];
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

pub(super) fn dkey(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = vec![b'd'];
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name);
    k
}

pub(super) const NEXT_INO_KEY: &[u8] = b"s/next_ino";

pub(super) struct InodeCell {
    pub(super) ino: u64,
    pub(super) data: RwLock<Inode>,
    /// Queued for the next flush (data) / metadata write.
    pub(super) data_queued: AtomicBool,
    pub(super) meta_queued: AtomicBool,
    /// Open descriptions.
    pub(super) open: AtomicU32,
    pub(super) deleted: AtomicBool,
}

impl InodeCell {
    pub(super) fn read(&self) -> RwLockReadGuard<'_, Inode> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Inode> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) fn new_cell(ino: u64, node: Inode) -> InodeCell {
    InodeCell {
        ino,
        data: RwLock::new(node),
        data_queued: AtomicBool::new(false),
        meta_queued: AtomicBool::new(false),
        open: AtomicU32::new(0),
        deleted: AtomicBool::new(false),
    }
}

pub(super) fn dtype(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFIFO => libc::DT_FIFO,
        _ => libc::DT_UNKNOWN,
    }
}

pub(super) fn unsafe_id() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

impl Fs {
    fn stat_of(&self, c: &InodeCell) -> Stat {
        let n = c.read();
        Stat {
            ino: c.ino,
            mode: n.mode,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            size: if n.is_dir() { PAGE as u64 } else { n.size },
            blocks: if n.is_reg() { n.size.div_ceil(PAGE as u64) * 8 } else { 8 },
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            dev: self.dev,
        }
    }

    pub fn stat(&self, path: &[u8], follow: bool) -> Result<Stat> {
        let _t = self.call(Call::Stat, None);
        let ino = self.found(path, follow)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        Ok(self.stat_of(&c))
    }

    pub fn fstat(&self, f: &File) -> Stat {
        let _t = self.call(Call::Stat, None);
        self.stat_of(&f.cell)
    }

    pub fn setattr_path(&self, path: &[u8], follow: bool, a: &SetAttr) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let ino = self.found(path, follow)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        self.setattr_cell(&c, a)
    }

    pub fn setattr(&self, f: &File, a: &SetAttr) -> Result<()> {
        let _t = self.call(Call::Other, None);
        self.setattr_cell(&f.cell, a)
    }

    fn setattr_cell(&self, c: &Arc<InodeCell>, a: &SetAttr) -> Result<()> {
        let mut n = c.write();
        if let Some(m) = a.mode {
            n.mode = (n.mode & libc::S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = a.uid {
            n.uid = u;
        }
        if let Some(g) = a.gid {
            n.gid = g;
        }
        if let Some(t) = a.atime {
            n.atime = t;
        }
        if let Some(t) = a.mtime {
            n.mtime = t;
        }
        n.ctime = Ts::now();
        drop(n);
        self.queue_meta(&mut lock(&self.pending), c);
        Ok(())
    }
}
