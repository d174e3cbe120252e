//! Path-based calls: which paths are FlacFS's, opening, stat, namespace changes, attributes,
//! the current directory, realpath.
//!
//! The calls live in `paths/` by role: `open` (open, openat, creat), `stat` (stat, statx,
//! access), `namespace` (mkdir, unlink, rename, link, symlink, readlink, mknod), `attrs`
//! (chmod, chown, utimes, truncate), `cwd` (chdir, getcwd, realpath) and `statfs` (statfs,
//! statvfs, extended attributes); this file decides which paths are FlacFS's.

mod attrs;
mod cwd;
mod namespace;
mod open;
mod stat;
mod statfs;

use std::ffi::{c_char, c_int};

use crate::{cstr, fail_err, inside, mount, ours, running};

pub(crate) use attrs::{times_attr, timeval_attr};
pub(crate) use open::open_ours;
pub(crate) use stat::fill_stat;
pub(crate) use statfs::{fill_statfs, fill_statvfs};

pub(crate) enum Target {
    /// A host path; `Some` when it went through the mount point and came out (`/flac/..`):
    /// the normalized path to use instead (the kernel has no `/flac` to walk through).
    Real(Option<std::ffi::CString>),
    /// A path inside the file system.
    Ours(Vec<u8>),
}

impl Target {
    /// The host path to pass on (normalized if it left the mount point, else `path`).
    pub(crate) fn host(&self, path: *const c_char) -> *const c_char {
        match self {
            Target::Real(Some(c)) => c.as_ptr(),
            _ => path,
        }
    }
}

/// Lexically normalise an absolute path ("." and ".." and repeated slashes), keeping a
/// trailing slash.
pub(crate) fn normalize(p: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(p.len());
    for c in &parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() || p.ends_with(b"/") {
        out.push(b'/');
    }
    out
}

fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    if !v.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(rel);
    v
}

/// Whether `path` (relative to `dirfd`) is under the mount prefix; then its path inside.
pub(crate) unsafe fn classify(dirfd: c_int, path: *const c_char) -> Target {
    if inside() {
        return Target::Real(None);
    }
    let Some(m) = mount() else { return Target::Real(None) };
    let Some(p) = cstr(path) else { return Target::Real(None) };
    classify_bytes(dirfd, p, m)
}

pub(crate) fn classify_bytes(dirfd: c_int, p: &[u8], m: &[u8]) -> Target {
    let abs = if p.first() == Some(&b'/') {
        p.to_vec()
    } else if dirfd == libc::AT_FDCWD {
        match running().and_then(|s| s.vcwd.lock().unwrap().clone()) {
            Some(vc) => join(&running().unwrap().host_path(&vc), p),
            None => return Target::Real(None),
        }
    } else if let Some(o) = ours(dirfd) {
        join(&running().unwrap().host_path(&o.path), p)
    } else {
        return Target::Real(None);
    };
    let n = normalize(&abs);
    let trailing = n.len() > 1 && n.ends_with(b"/");
    let core = if trailing { &n[..n.len() - 1] } else { &n[..] };
    if core == m {
        return Target::Ours(b"/".to_vec());
    }
    if core.starts_with(m) && core[m.len()] == b'/' {
        let mut inner = core[m.len()..].to_vec();
        if trailing {
            inner.push(b'/');
        }
        return Target::Ours(inner);
    }
    // Through the mount point and out again ("/flac/..", or relative to a FlacFS directory).
    let through = abs.starts_with(m) && abs.get(m.len()).is_none_or(|&c| c == b'/');
    if through || p.first() != Some(&b'/') {
        return Target::Real(std::ffi::CString::new(n).ok());
    }
    Target::Real(None)
}

fn fs_result(r: ssdlab_flac::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail_err(&e),
    }
}

fn strip_slash(p: &[u8]) -> &[u8] {
    if p.len() > 1 && p.ends_with(b"/") {
        &p[..p.len() - 1]
    } else {
        p
    }
}
