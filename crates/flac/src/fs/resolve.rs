//! Path lookup: walking a path through the directories, following symlinks (those leading
//! outside the mount are handed back to the caller).

use std::sync::Arc;

use super::inode::InodeCell;
use super::{lock, show, Fs, Ns, Resolved, MAX_SYMLINKS, NAME_MAX, ROOT};
use crate::error::{posix, FlacError, Result};

impl Fs {
    pub(super) fn cell(&self, ns: &Ns, ino: u64) -> Result<Arc<InodeCell>> {
        ns.inodes.get(&ino).cloned().ok_or_else(|| FlacError::Posix(libc::ENOENT, format!("inode {ino} is gone")))
    }

    /// Resolve `path` (absolute in the file system). `follow`: follow a final symlink.
    pub fn resolve(&self, path: &[u8], follow: bool) -> Result<Resolved> {
        let ns = lock(&self.ns);
        self.resolve_in(&ns, path, follow)
    }

    pub(super) fn resolve_in(&self, ns: &Ns, path: &[u8], follow: bool) -> Result<Resolved> {
        if path.first() != Some(&b'/') {
            return posix(libc::EINVAL, format!("{}: paths in the file system are absolute", show(path)));
        }
        let mut comps: Vec<Vec<u8>> = path.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev().map(|c| c.to_vec()).collect();
        let mut stack: Vec<(u64, Vec<u8>)> = Vec::new(); // (ino, name) from root
        let mut cur = ROOT;
        let mut links = 0;
        let mut trailing_slash = path.ends_with(b"/") && path.len() > 1;
        while let Some(c) = comps.pop() {
            if c == b"." {
                continue;
            }
            if c == b".." {
                if let Some((_, _)) = stack.pop() {
                    cur = stack.last().map_or(ROOT, |s| s.0);
                }
                continue;
            }
            if c.len() > NAME_MAX {
                return posix(libc::ENAMETOOLONG, show(path));
            }
            let dir = self.cell(ns, cur)?;
            if !dir.read().is_dir() {
                return posix(libc::ENOTDIR, show(path));
            }
            let child = ns.dirs.get(&cur).and_then(|d| d.get(&c)).copied();
            let last = comps.is_empty();
            let Some(child) = child else {
                if last {
                    return Ok(Resolved::Missing { parent: cur, name: c });
                }
                return posix(libc::ENOENT, show(path));
            };
            let node = self.cell(ns, child)?;
            let n = node.read();
            if n.is_lnk() && (!last || follow || trailing_slash) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return posix(libc::ELOOP, show(path));
                }
                let target = n.target.clone();
                drop(n);
                let mount = self.cfg.mount.as_bytes().strip_suffix(b"/").unwrap_or(self.cfg.mount.as_bytes());
                if target.first() == Some(&b'/') {
                    // Absolute: inside the mount it restarts at our root, otherwise it leaves.
                    let inside = if mount.is_empty() {
                        Some(&target[..])
                    } else if target.starts_with(mount) && (target.len() == mount.len() || target[mount.len()] == b'/') {
                        Some(&target[mount.len()..])
                    } else {
                        None
                    };
                    match inside {
                        Some(rest) => {
                            stack.clear();
                            cur = ROOT;
                            for t in rest.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                                comps.push(t.to_vec());
                            }
                        }
                        None => {
                            let mut out = target.clone();
                            for c in comps.iter().rev() {
                                out.push(b'/');
                                out.extend_from_slice(c);
                            }
                            if trailing_slash {
                                out.push(b'/');
                            }
                            return Ok(Resolved::Outside(out));
                        }
                    }
                } else {
                    for t in target.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                        comps.push(t.to_vec());
                    }
                }
                if comps.is_empty() {
                    // A link to "/" (or the mount itself): the root.
                    return Ok(Resolved::Found { ino: ROOT, parent: ROOT, name: b"/".to_vec() });
                }
                trailing_slash = false;
                continue;
            }
            if last {
                if trailing_slash && !n.is_dir() {
                    return posix(libc::ENOTDIR, show(path));
                }
                return Ok(Resolved::Found { ino: child, parent: cur, name: c });
            }
            drop(n);
            stack.push((child, c));
            cur = child;
        }
        let parent = if stack.len() >= 2 { stack[stack.len() - 2].0 } else { ROOT };
        Ok(Resolved::Found { ino: cur, parent, name: stack.last().map(|s| s.1.clone()).unwrap_or_else(|| b"/".to_vec()) })
    }

    pub(super) fn found(&self, path: &[u8], follow: bool) -> Result<u64> {
        match self.resolve(path, follow)? {
            Resolved::Found { ino, .. } => Ok(ino),
            Resolved::Missing { .. } => posix(libc::ENOENT, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
        }
    }
}

pub(super) fn outside(p: Vec<u8>) -> FlacError {
    FlacError::Posix(libc::EXDEV, format!("{}: a symlink leads outside the file system", show(&p)))
}
