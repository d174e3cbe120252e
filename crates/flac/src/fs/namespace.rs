//! The namespace: creating, opening and closing files, directories and symlinks, links,
//! renames, removal (and freeing an inode when its last name and open description go),
//! directory listing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::calls::Call;
use super::inode::{dkey, dtype, ikey, new_cell, unsafe_id, Inode, InodeCell, NEXT_INO_KEY};
use super::resolve::outside;
use super::{lock, show, DirEntry, File, Fs, Ns, Pending, Resolved, Ts, NAME_MAX, NO_RANGE, ROOT};
use crate::error::{posix, Result};

impl Fs {
    fn alloc_ino(&self, ns: &mut Ns, p: &mut Pending) -> u64 {
        let ino = ns.next_ino;
        ns.next_ino += 1;
        p.ops.put(NEXT_INO_KEY, &ns.next_ino.to_le_bytes());
        ino
    }

    /// Create an inode named `name` in `parent` (the caller holds `ns`).
    fn create_in(&self, ns: &mut Ns, parent: u64, name: &[u8], mode: u32, target: Vec<u8>) -> Result<Arc<InodeCell>> {
        if name.len() > NAME_MAX {
            return posix(libc::ENAMETOOLONG, show(name));
        }
        let mut p = lock(&self.pending);
        let ino = self.alloc_ino(ns, &mut p);
        let now = Ts::now();
        let (uid, gid) = unsafe_id();
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        let node = Inode {
            mode,
            nlink: if is_dir { 2 } else { 1 },
            uid,
            gid,
            size: if mode & libc::S_IFMT == libc::S_IFLNK { target.len() as u64 } else { 0 },
            atime: now,
            mtime: now,
            ctime: now,
            vstart: 0,
            order: NO_RANGE,
            target,
        };
        let cell = Arc::new(new_cell(ino, node));
        p.ops.put(&dkey(parent, name), &ino.to_le_bytes());
        self.queue_meta(&mut p, &cell);
        ns.inodes.insert(ino, cell.clone());
        ns.dirs.entry(parent).or_default().insert(name.to_vec(), ino);
        if is_dir {
            ns.dirs.insert(ino, BTreeMap::new());
            ns.parents.insert(ino, parent);
        }
        let pc = self.cell(ns, parent)?;
        let mut pn = pc.write();
        pn.mtime = now;
        pn.ctime = now;
        if is_dir {
            pn.nlink += 1;
        }
        drop(pn);
        self.queue_meta(&mut p, &pc);
        Ok(cell)
    }

    /// Open (and with O_CREAT create) a file or directory.
    pub fn open(&self, path: &[u8], flags: i32, mode: u32) -> Result<Arc<File>> {
        let _t = self.call(Call::Open, None);
        let acc = flags & libc::O_ACCMODE;
        let cell = {
            let mut ns = lock(&self.ns);
            let follow = flags & libc::O_NOFOLLOW == 0;
            match self.resolve_in(&ns, path, follow)? {
                Resolved::Outside(p) => return Err(outside(p)),
                Resolved::Found { ino, .. } => {
                    if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                        return posix(libc::EEXIST, show(path));
                    }
                    let c = self.cell(&ns, ino)?;
                    let n = c.read();
                    if n.is_lnk() {
                        return posix(libc::ELOOP, show(path));
                    }
                    if n.is_dir() && acc != libc::O_RDONLY {
                        return posix(libc::EISDIR, show(path));
                    }
                    if !n.is_dir() && flags & libc::O_DIRECTORY != 0 {
                        return posix(libc::ENOTDIR, show(path));
                    }
                    drop(n);
                    c
                }
                Resolved::Missing { parent, name } => {
                    if flags & libc::O_CREAT == 0 {
                        return posix(libc::ENOENT, show(path));
                    }
                    if flags & libc::O_DIRECTORY != 0 {
                        return posix(libc::EINVAL, show(path));
                    }
                    self.create_in(&mut ns, parent, &name, libc::S_IFREG | (mode & 0o7777), Vec::new())?
                }
            }
        };
        cell.open.fetch_add(1, Ordering::AcqRel);
        let f = Arc::new(File { cell, flags, pos: Mutex::new(0), closed: AtomicBool::new(false) });
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY && f.cell.read().is_reg() {
            self.ftruncate(&f, 0)?;
        }
        Ok(f)
    }

    /// Close an open description (the last close of an unlinked file frees it).
    pub fn close(&self, f: &File) -> Result<()> {
        let _t = self.call(Call::Close, None);
        if f.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if f.cell.open.fetch_sub(1, Ordering::AcqRel) == 1 && f.cell.read().nlink == 0 {
            self.free_inode(&f.cell)?;
        }
        Ok(())
    }

    fn free_inode(&self, c: &Arc<InodeCell>) -> Result<()> {
        let mut n = c.write();
        if c.deleted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut p = lock(&self.pending);
        if n.order != NO_RANGE {
            self.engine.discard(n.vstart, n.cap_pages())?;
            p.frees.push((n.vstart, n.order));
            n.order = NO_RANGE;
        }
        p.ops.del(&ikey(c.ino));
        drop(p);
        lock(&self.ns).inodes.remove(&c.ino);
        Ok(())
    }

    pub fn mkdir(&self, path: &[u8], mode: u32) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let mut ns = lock(&self.ns);
        match self.resolve_in(&ns, path, false)? {
            Resolved::Found { .. } => posix(libc::EEXIST, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
            Resolved::Missing { parent, name } => {
                self.create_in(&mut ns, parent, &name, libc::S_IFDIR | (mode & 0o7777), Vec::new()).map(|_| ())
            }
        }?;
        drop(ns);
        self.maybe_commit_meta()
    }

    pub fn symlink(&self, target: &[u8], path: &[u8]) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let mut ns = lock(&self.ns);
        match self.resolve_in(&ns, path, false)? {
            Resolved::Found { .. } => posix(libc::EEXIST, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
            Resolved::Missing { parent, name } => {
                self.create_in(&mut ns, parent, &name, libc::S_IFLNK | 0o777, target.to_vec()).map(|_| ())
            }
        }?;
        drop(ns);
        self.maybe_commit_meta()
    }

    pub fn readlink(&self, path: &[u8]) -> Result<Vec<u8>> {
        let _t = self.call(Call::Other, None);
        let ino = self.found(path, false)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        let n = c.read();
        if !n.is_lnk() {
            return posix(libc::EINVAL, show(path));
        }
        Ok(n.target.clone())
    }

    /// Remove a name (`dir`: rmdir semantics).
    pub fn remove(&self, path: &[u8], dir: bool) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let mut ns = lock(&self.ns);
        let (ino, parent, name) = match self.resolve_in(&ns, path, false)? {
            Resolved::Found { ino, parent, name } => (ino, parent, name),
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(path)),
            Resolved::Outside(p) => return Err(outside(p)),
        };
        if ino == ROOT {
            return posix(libc::EBUSY, show(path));
        }
        let c = self.cell(&ns, ino)?;
        let is_dir = c.read().is_dir();
        if dir && !is_dir {
            return posix(libc::ENOTDIR, show(path));
        }
        if !dir && is_dir {
            return posix(libc::EISDIR, show(path));
        }
        if is_dir && !ns.dirs.get(&ino).is_none_or(|d| d.is_empty()) {
            return posix(libc::ENOTEMPTY, show(path));
        }
        self.unlink_in(&mut ns, parent, &name, &c)?;
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Drop the name `parent/name` of inode `c` (the caller holds `ns`).
    fn unlink_in(&self, ns: &mut Ns, parent: u64, name: &[u8], c: &Arc<InodeCell>) -> Result<()> {
        ns.dirs.get_mut(&parent).map(|d| d.remove(name));
        let now = Ts::now();
        let mut n = c.write();
        let is_dir = n.is_dir();
        n.nlink = if is_dir { 0 } else { n.nlink.saturating_sub(1) };
        n.ctime = now;
        let gone = n.nlink == 0;
        drop(n);
        {
            let mut p = lock(&self.pending);
            p.ops.del(&dkey(parent, name));
            self.queue_meta(&mut p, c);
            let pc = self.cell(ns, parent)?;
            let mut pn = pc.write();
            pn.mtime = now;
            pn.ctime = now;
            if is_dir {
                pn.nlink -= 1;
            }
            drop(pn);
            self.queue_meta(&mut p, &pc);
        }
        if is_dir {
            ns.dirs.remove(&c.ino);
            ns.parents.remove(&c.ino);
        }
        if gone && c.open.load(Ordering::Acquire) == 0 {
            // Frees under `ns`: take the inode out of the map here, not in free_inode.
            let mut n = c.write();
            c.deleted.store(true, Ordering::Release);
            let mut p = lock(&self.pending);
            if n.order != NO_RANGE {
                self.engine.discard(n.vstart, n.cap_pages())?;
                p.frees.push((n.vstart, n.order));
                n.order = NO_RANGE;
            }
            p.ops.del(&ikey(c.ino));
            ns.inodes.remove(&c.ino);
        }
        Ok(())
    }

    pub fn link(&self, old: &[u8], new: &[u8]) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let mut ns = lock(&self.ns);
        let ino = match self.resolve_in(&ns, old, false)? {
            Resolved::Found { ino, .. } => ino,
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(old)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(old)),
        };
        let (parent, name) = match self.resolve_in(&ns, new, false)? {
            Resolved::Missing { parent, name } => (parent, name),
            Resolved::Found { .. } => return posix(libc::EEXIST, show(new)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(new)),
        };
        let c = self.cell(&ns, ino)?;
        if c.read().is_dir() {
            return posix(libc::EPERM, show(old));
        }
        ns.dirs.entry(parent).or_default().insert(name.clone(), ino);
        let now = Ts::now();
        let mut n = c.write();
        n.nlink += 1;
        n.ctime = now;
        drop(n);
        let mut p = lock(&self.pending);
        p.ops.put(&dkey(parent, &name), &ino.to_le_bytes());
        self.queue_meta(&mut p, &c);
        let pc = self.cell(&ns, parent)?;
        pc.write().mtime = now;
        self.queue_meta(&mut p, &pc);
        drop(p);
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Rename; `noreplace`: fail with EEXIST if `to` exists (RENAME_NOREPLACE).
    pub fn rename(&self, from: &[u8], to: &[u8], noreplace: bool) -> Result<()> {
        let _t = self.call(Call::Other, None);
        let mut ns = lock(&self.ns);
        let (ino, fparent, fname) = match self.resolve_in(&ns, from, false)? {
            Resolved::Found { ino, parent, name } => (ino, parent, name),
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(from)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(from)),
        };
        if ino == ROOT {
            return posix(libc::EBUSY, show(from));
        }
        let c = self.cell(&ns, ino)?;
        let is_dir = c.read().is_dir();
        let (tparent, tname, existing) = match self.resolve_in(&ns, to, false)? {
            Resolved::Found { ino: t, parent, name } => (parent, name, Some(t)),
            Resolved::Missing { parent, name } => (parent, name, None),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(to)),
        };
        if existing == Some(ino) {
            return Ok(());
        }
        if is_dir {
            // Not into its own subtree.
            let mut a = tparent;
            loop {
                if a == ino {
                    return posix(libc::EINVAL, format!("{} into {}", show(from), show(to)));
                }
                if a == ROOT {
                    break;
                }
                a = parent_of(&ns, a).unwrap_or(ROOT);
            }
        }
        if let Some(t) = existing {
            if noreplace {
                return posix(libc::EEXIST, show(to));
            }
            let tc = self.cell(&ns, t)?;
            let tdir = tc.read().is_dir();
            if is_dir && !tdir {
                return posix(libc::ENOTDIR, show(to));
            }
            if !is_dir && tdir {
                return posix(libc::EISDIR, show(to));
            }
            if tdir && !ns.dirs.get(&t).is_none_or(|d| d.is_empty()) {
                return posix(libc::ENOTEMPTY, show(to));
            }
            self.unlink_in(&mut ns, tparent, &tname, &tc)?;
        }
        ns.dirs.get_mut(&fparent).map(|d| d.remove(&fname));
        ns.dirs.entry(tparent).or_default().insert(tname.clone(), ino);
        if is_dir {
            ns.parents.insert(ino, tparent);
        }
        let now = Ts::now();
        let mut p = lock(&self.pending);
        p.ops.del(&dkey(fparent, &fname));
        p.ops.put(&dkey(tparent, &tname), &ino.to_le_bytes());
        c.write().ctime = now;
        self.queue_meta(&mut p, &c);
        for (par, delta) in [(fparent, -1i32), (tparent, 1)] {
            let pc = self.cell(&ns, par)?;
            let mut pn = pc.write();
            pn.mtime = now;
            pn.ctime = now;
            if is_dir && fparent != tparent {
                pn.nlink = (pn.nlink as i32 + delta) as u32;
            }
            drop(pn);
            self.queue_meta(&mut p, &pc);
        }
        drop(p);
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Entries of a directory, in name order (without "." and "..").
    pub fn readdir(&self, f: &File) -> Result<Vec<DirEntry>> {
        let _t = self.call(Call::Other, None);
        let ns = lock(&self.ns);
        let Some(d) = ns.dirs.get(&f.cell.ino) else {
            return if f.cell.read().is_dir() { Ok(Vec::new()) } else { posix(libc::ENOTDIR, format!("inode {}", f.cell.ino)) };
        };
        Ok(d.iter()
            .map(|(name, &ino)| DirEntry {
                name: name.clone(),
                ino,
                kind: ns.inodes.get(&ino).map_or(libc::DT_UNKNOWN, |c| dtype(c.read().mode)),
            })
            .collect())
    }

    /// The parent of directory `ino` (for "..").
    pub fn parent_of(&self, ino: u64) -> u64 {
        parent_of(&lock(&self.ns), ino).unwrap_or(ROOT)
    }
}

fn parent_of(ns: &Ns, ino: u64) -> Option<u64> {
    ns.parents.get(&ino).copied()
}
