//! Path-based calls: which paths are FlacFS's, opening, stat, namespace changes, attributes,
//! the current directory, realpath.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use libc::{mode_t, off_t, size_t, ssize_t};
use ssdlab_flac::fs::{Resolved, SetAttr, Stat, Ts};
use ssdlab_flac::FlacError;

use crate::{cstr, debug, fail, fail_err, guard, inside, mount, ours, real, running, set_errno, state, Open};

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

/// Open a FlacFS path: the file system opens it, a placeholder descriptor stands for it.
pub(crate) unsafe fn open_ours(p: &[u8], flags: c_int, mode: mode_t) -> c_int {
    let Some(s) = state() else { return fail(libc::EIO) };
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return fail(libc::EOPNOTSUPP);
    }
    let mut fflags = flags
        & !(libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | libc::O_LARGEFILE
            | libc::O_NOCTTY
            | libc::O_NOATIME
            | libc::O_DIRECT
            | libc::O_SYNC
            | libc::O_DSYNC);
    if flags & libc::O_PATH != 0 {
        fflags = libc::O_RDONLY | (flags & (libc::O_NOFOLLOW | libc::O_DIRECTORY));
    }
    let f = match s.fs.open(p, fflags, mode & 0o7777 & !crate::current_umask()) {
        Ok(f) => f,
        Err(FlacError::Posix(libc::EXDEV, _)) => {
            // A symlink inside led outside: open the host path it names.
            if let Ok(Resolved::Outside(host)) = s.fs.resolve(p, flags & libc::O_NOFOLLOW == 0) {
                let c = std::ffi::CString::new(host).unwrap_or_default();
                return real!("open64", unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int)(c.as_ptr(), flags, mode as c_int);
            }
            return fail(libc::EXDEV);
        }
        Err(e) => return fail_err(&e),
    };
    let fd = real!("open64", unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int)(
        c"/dev/null".as_ptr(),
        libc::O_PATH | (flags & libc::O_CLOEXEC),
    );
    if fd < 0 {
        let _ = s.fs.close(&f);
        return -1;
    }
    let path = normalize(p);
    s.register(fd, Arc::new(Open { file: f, path, written: AtomicBool::new(false) }));
    if debug() {
        eprintln!("flacfs: open {} -> fd {fd}", String::from_utf8_lossy(p));
    }
    fd
}

unsafe fn do_openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    match classify(dirfd, path) {
        t @ Target::Real(_) => {
            real!("openat64", unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int)(dirfd, t.host(path), flags, mode as c_int)
        }
        Target::Ours(p) => guard(-1, || open_ours(&p, flags, mode)),
    }
}

// The mode argument is variadic in C; on x86-64 and aarch64 Linux it arrives in the same
// register as a third fixed argument, and is read only with O_CREAT or O_TMPFILE (then the
// caller passed it).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags, mode)
}
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags, mode)
}
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    do_openat(dirfd, path, flags, mode)
}
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    do_openat(dirfd, path, flags, mode)
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    do_openat(dirfd, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    do_openat(dirfd, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    do_openat(libc::AT_FDCWD, path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, mode)
}
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    creat(path, mode)
}

// ---- stat ------------------------------------------------------------------------------

pub(crate) fn fill_stat(st: *mut libc::stat, s: &Stat) {
    // SAFETY: the caller passes a valid stat buffer.
    s.to_libc(unsafe { &mut *st });
}

fn fill_statx(stx: *mut libc::statx, s: &Stat) {
    // SAFETY: the caller passes a valid statx buffer.
    unsafe {
        std::ptr::write_bytes(stx, 0, 1);
        let x = &mut *stx;
        x.stx_mask = libc::STATX_BASIC_STATS;
        x.stx_blksize = 4096;
        x.stx_nlink = s.nlink;
        x.stx_uid = s.uid;
        x.stx_gid = s.gid;
        x.stx_mode = s.mode as u16;
        x.stx_ino = s.ino;
        x.stx_size = s.size;
        x.stx_blocks = s.blocks;
        let ts = |t: Ts| {
            let mut x: libc::statx_timestamp = std::mem::zeroed();
            x.tv_sec = t.sec;
            x.tv_nsec = t.nsec;
            x
        };
        x.stx_atime = ts(s.atime);
        x.stx_mtime = ts(s.mtime);
        x.stx_ctime = ts(s.ctime);
        x.stx_btime = ts(s.ctime);
        x.stx_dev_major = (s.dev >> 20) as u32 & 0xfff;
        x.stx_dev_minor = s.dev as u32 & 0xfffff;
    }
}

/// Stat a FlacFS path (`follow`: follow a final symlink). A symlink leading outside is
/// stat'ed on the host.
unsafe fn stat_ours(p: &[u8], follow: bool) -> Result<Stat, c_int> {
    let Some(s) = state() else { return Err(libc::EIO) };
    match s.fs.stat(p, follow) {
        Ok(st) => Ok(st),
        Err(e) => Err(e.errno()),
    }
}

unsafe fn host_stat(p: &[u8], st: *mut libc::stat, follow: bool) -> c_int {
    let Some(s) = running() else { return fail(libc::EIO) };
    match s.fs.resolve(p, follow) {
        Ok(Resolved::Outside(h)) => {
            let c = std::ffi::CString::new(h).unwrap_or_default();
            real!("fstatat64", unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
                libc::AT_FDCWD,
                c.as_ptr(),
                st,
                0,
            )
        }
        _ => fail(libc::EXDEV),
    }
}

unsafe fn do_fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && cstr(path).is_some_and(|p| p.is_empty()) {
        if let Some(o) = ours(dirfd) {
            let s = running().unwrap();
            fill_stat(st, &s.fs.fstat(&o.file));
            return 0;
        }
    }
    match classify(dirfd, path) {
        t @ Target::Real(_) => {
            real!("fstatat64", unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(dirfd, t.host(path), st, flags)
        }
        Target::Ours(p) => guard(-1, || {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            match stat_ours(&p, follow) {
                Ok(s) => {
                    fill_stat(st, &s);
                    0
                }
                Err(libc::EXDEV) => host_stat(&p, st, follow),
                Err(e) => fail(e),
            }
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    do_fstatat(libc::AT_FDCWD, path, st, 0)
}
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    do_fstatat(libc::AT_FDCWD, path, st, 0)
}
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    do_fstatat(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW)
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    do_fstatat(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW)
}
#[no_mangle]
pub unsafe extern "C" fn fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    do_fstatat(dirfd, path, st, flags)
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int {
    do_fstatat(dirfd, path, st, flags)
}

#[no_mangle]
pub unsafe extern "C" fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: libc::c_uint, stx: *mut libc::statx) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && cstr(path).is_some_and(|p| p.is_empty()) {
        if let Some(o) = ours(dirfd) {
            fill_statx(stx, &running().unwrap().fs.fstat(&o.file));
            return 0;
        }
    }
    match classify(dirfd, path) {
        t @ Target::Real(_) => real!("statx", unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int)(
            dirfd,
            t.host(path),
            flags,
            mask,
            stx,
        ),
        Target::Ours(p) => guard(-1, || match stat_ours(&p, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
            Ok(s) => {
                fill_statx(stx, &s);
                0
            }
            Err(e) => fail(e),
        }),
    }
}

unsafe fn do_access(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    match classify(dirfd, path) {
        t @ Target::Real(_) => {
            real!("faccessat", unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int)(dirfd, t.host(path), mode, flags)
        }
        Target::Ours(p) => guard(-1, || match stat_ours(&p, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
            // No permission checks (FlacFS runs as its caller): existence, and X_OK needs an
            // execute bit.
            Ok(s) if mode & libc::X_OK != 0 && s.mode & 0o111 == 0 => fail(libc::EACCES),
            Ok(_) => 0,
            Err(e) => fail(e),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    do_access(libc::AT_FDCWD, path, mode, 0)
}
#[no_mangle]
pub unsafe extern "C" fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    do_access(dirfd, path, mode, flags)
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    do_access(libc::AT_FDCWD, path, mode, 0)
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    do_access(libc::AT_FDCWD, path, mode, 0)
}

// ---- namespace ---------------------------------------------------------------------------

fn fs_result(r: ssdlab_flac::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail_err(&e),
    }
}

unsafe fn do_mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real!("mkdirat", unsafe extern "C" fn(c_int, *const c_char, mode_t) -> c_int)(dirfd, path, mode),
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => fs_result(s.fs.mkdir(strip_slash(&p), mode & !crate::current_umask())),
            None => fail(libc::EIO),
        }),
    }
}

fn strip_slash(p: &[u8]) -> &[u8] {
    if p.len() > 1 && p.ends_with(b"/") {
        &p[..p.len() - 1]
    } else {
        p
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    do_mkdirat(libc::AT_FDCWD, path, mode)
}
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    do_mkdirat(dirfd, path, mode)
}

unsafe fn do_unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real!("unlinkat", unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int)(dirfd, path, flags),
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => fs_result(s.fs.remove(strip_slash(&p), flags & libc::AT_REMOVEDIR != 0)),
            None => fail(libc::EIO),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    do_unlinkat(libc::AT_FDCWD, path, 0)
}
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    do_unlinkat(dirfd, path, flags)
}
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    do_unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR)
}
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("remove", unsafe extern "C" fn(*const c_char) -> c_int)(path),
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => {
                let dir = s.fs.stat(&p, false).map(|st| st.mode & libc::S_IFMT == libc::S_IFDIR).unwrap_or(false);
                fs_result(s.fs.remove(strip_slash(&p), dir))
            }
            None => fail(libc::EIO),
        }),
    }
}

unsafe fn do_renameat2(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: libc::c_uint) -> c_int {
    match (classify(olddir, old), classify(newdir, new)) {
        (Target::Real(_), Target::Real(_)) => real!(
            "renameat2",
            unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, libc::c_uint) -> c_int
        )(olddir, old, newdir, new, flags),
        (Target::Ours(a), Target::Ours(b)) => guard(-1, || {
            if flags & !libc::RENAME_NOREPLACE != 0 {
                return fail(libc::EINVAL);
            }
            match state() {
                Some(s) => fs_result(s.fs.rename(strip_slash(&a), strip_slash(&b), flags & libc::RENAME_NOREPLACE != 0)),
                None => fail(libc::EIO),
            }
        }),
        _ => fail(libc::EXDEV),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    do_renameat2(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}
#[no_mangle]
pub unsafe extern "C" fn renameat(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char) -> c_int {
    do_renameat2(olddir, old, newdir, new, 0)
}
#[no_mangle]
pub unsafe extern "C" fn renameat2(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: libc::c_uint) -> c_int {
    do_renameat2(olddir, old, newdir, new, flags)
}

unsafe fn do_linkat(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: c_int) -> c_int {
    match (classify(olddir, old), classify(newdir, new)) {
        (Target::Real(_), Target::Real(_)) => real!(
            "linkat",
            unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int
        )(olddir, old, newdir, new, flags),
        (Target::Ours(a), Target::Ours(b)) => guard(-1, || match state() {
            Some(s) => fs_result(s.fs.link(&a, strip_slash(&b))),
            None => fail(libc::EIO),
        }),
        _ => fail(libc::EXDEV),
    }
}

#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    do_linkat(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}
#[no_mangle]
pub unsafe extern "C" fn linkat(olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: c_int) -> c_int {
    do_linkat(olddir, old, newdir, new, flags)
}

unsafe fn do_symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real!("symlinkat", unsafe extern "C" fn(*const c_char, c_int, *const c_char) -> c_int)(target, dirfd, path),
        Target::Ours(p) => guard(-1, || match (state(), cstr(target)) {
            (Some(s), Some(t)) => fs_result(s.fs.symlink(t, strip_slash(&p))),
            (None, _) => fail(libc::EIO),
            (_, None) => fail(libc::EFAULT),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    do_symlinkat(target, libc::AT_FDCWD, path)
}
#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    do_symlinkat(target, dirfd, path)
}

unsafe fn do_readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, len: size_t) -> ssize_t {
    match classify(dirfd, path) {
        Target::Real(_) => {
            real!("readlinkat", unsafe extern "C" fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t)(dirfd, path, buf, len)
        }
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => match s.fs.readlink(&p) {
                Ok(t) => {
                    let n = t.len().min(len);
                    std::ptr::copy_nonoverlapping(t.as_ptr(), buf as *mut u8, n);
                    n as ssize_t
                }
                Err(e) => fail_err(&e) as ssize_t,
            },
            None => fail(libc::EIO) as ssize_t,
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, len: size_t) -> ssize_t {
    do_readlinkat(libc::AT_FDCWD, path, buf, len)
}
#[no_mangle]
pub unsafe extern "C" fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, len: size_t) -> ssize_t {
    do_readlinkat(dirfd, path, buf, len)
}
#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(path: *const c_char, buf: *mut c_char, len: size_t, _buflen: size_t) -> ssize_t {
    do_readlinkat(libc::AT_FDCWD, path, buf, len)
}
#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(dirfd: c_int, path: *const c_char, buf: *mut c_char, len: size_t, _buflen: size_t) -> ssize_t {
    do_readlinkat(dirfd, path, buf, len)
}

unsafe fn refuse_special(dirfd: c_int, path: *const c_char, real_call: impl FnOnce() -> c_int) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real_call(),
        Target::Ours(_) => fail(libc::EPERM),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    refuse_special(dirfd, path, || {
        real!("mknodat", unsafe extern "C" fn(c_int, *const c_char, mode_t, libc::dev_t) -> c_int)(dirfd, path, mode, dev)
    })
}
#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    refuse_special(dirfd, path, || real!("mkfifoat", unsafe extern "C" fn(c_int, *const c_char, mode_t) -> c_int)(dirfd, path, mode))
}
#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    mkfifoat(libc::AT_FDCWD, path, mode)
}

// ---- attributes --------------------------------------------------------------------------

unsafe fn setattr_at(dirfd: c_int, path: *const c_char, follow: bool, a: SetAttr, real_call: impl FnOnce() -> c_int) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real_call(),
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => fs_result(s.fs.setattr_path(&p, follow, &a)),
            None => fail(libc::EIO),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    setattr_at(libc::AT_FDCWD, path, true, SetAttr { mode: Some(mode), ..SetAttr::default() }, || {
        real!("chmod", unsafe extern "C" fn(*const c_char, mode_t) -> c_int)(path, mode)
    })
}
#[no_mangle]
pub unsafe extern "C" fn lchmod(path: *const c_char, mode: mode_t) -> c_int {
    setattr_at(libc::AT_FDCWD, path, false, SetAttr { mode: Some(mode), ..SetAttr::default() }, || {
        real!("lchmod", unsafe extern "C" fn(*const c_char, mode_t) -> c_int)(path, mode)
    })
}
#[no_mangle]
pub unsafe extern "C" fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int {
    setattr_at(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, SetAttr { mode: Some(mode), ..SetAttr::default() }, || {
        real!("fchmodat", unsafe extern "C" fn(c_int, *const c_char, mode_t, c_int) -> c_int)(dirfd, path, mode, flags)
    })
}

fn owner(uid: libc::uid_t, gid: libc::gid_t) -> SetAttr {
    SetAttr { uid: (uid != u32::MAX).then_some(uid), gid: (gid != u32::MAX).then_some(gid), ..SetAttr::default() }
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    setattr_at(libc::AT_FDCWD, path, true, owner(uid, gid), || {
        real!("chown", unsafe extern "C" fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int)(path, uid, gid)
    })
}
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    setattr_at(libc::AT_FDCWD, path, false, owner(uid, gid), || {
        real!("lchown", unsafe extern "C" fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int)(path, uid, gid)
    })
}
#[no_mangle]
pub unsafe extern "C" fn fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int {
    setattr_at(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, owner(uid, gid), || {
        real!("fchownat", unsafe extern "C" fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int)(
            dirfd, path, uid, gid, flags,
        )
    })
}

/// `utimensat` times (UTIME_NOW, UTIME_OMIT) as attribute changes.
pub(crate) unsafe fn times_attr(times: *const libc::timespec) -> SetAttr {
    let now = Ts::now();
    let conv = |t: &libc::timespec| -> Option<Ts> {
        match t.tv_nsec {
            libc::UTIME_OMIT => None,
            libc::UTIME_NOW => Some(now),
            n => Some(Ts { sec: t.tv_sec, nsec: n as u32 }),
        }
    };
    if times.is_null() {
        return SetAttr { atime: Some(now), mtime: Some(now), ..SetAttr::default() };
    }
    let t = std::slice::from_raw_parts(times, 2);
    SetAttr { atime: conv(&t[0]), mtime: conv(&t[1]), ..SetAttr::default() }
}

pub(crate) unsafe fn timeval_attr(tv: *const libc::timeval) -> SetAttr {
    if tv.is_null() {
        return times_attr(std::ptr::null());
    }
    let t = std::slice::from_raw_parts(tv, 2);
    let ts = [
        libc::timespec { tv_sec: t[0].tv_sec, tv_nsec: t[0].tv_usec * 1000 },
        libc::timespec { tv_sec: t[1].tv_sec, tv_nsec: t[1].tv_usec * 1000 },
    ];
    times_attr(ts.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(dirfd: c_int, path: *const c_char, times: *const libc::timespec, flags: c_int) -> c_int {
    if path.is_null() {
        // utimensat(fd, NULL, ...) is futimens.
        if let Some(o) = ours(dirfd) {
            return guard(-1, || fs_result(running().unwrap().fs.setattr(&o.file, &times_attr(times))));
        }
        return real!("utimensat", unsafe extern "C" fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(
            dirfd, path, times, flags,
        );
    }
    setattr_at(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, times_attr(times), || {
        real!("utimensat", unsafe extern "C" fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(dirfd, path, times, flags)
    })
}
#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    setattr_at(libc::AT_FDCWD, path, true, timeval_attr(tv), || {
        real!("utimes", unsafe extern "C" fn(*const c_char, *const libc::timeval) -> c_int)(path, tv)
    })
}
#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    setattr_at(libc::AT_FDCWD, path, false, timeval_attr(tv), || {
        real!("lutimes", unsafe extern "C" fn(*const c_char, *const libc::timeval) -> c_int)(path, tv)
    })
}
#[no_mangle]
pub unsafe extern "C" fn futimesat(dirfd: c_int, path: *const c_char, tv: *const libc::timeval) -> c_int {
    setattr_at(dirfd, path, true, timeval_attr(tv), || {
        real!("futimesat", unsafe extern "C" fn(c_int, *const c_char, *const libc::timeval) -> c_int)(dirfd, path, tv)
    })
}
#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, buf: *const libc::utimbuf) -> c_int {
    let attr = if buf.is_null() {
        times_attr(std::ptr::null())
    } else {
        let b = &*buf;
        SetAttr { atime: Some(Ts { sec: b.actime, nsec: 0 }), mtime: Some(Ts { sec: b.modtime, nsec: 0 }), ..SetAttr::default() }
    };
    setattr_at(libc::AT_FDCWD, path, true, attr, || {
        real!("utime", unsafe extern "C" fn(*const c_char, *const libc::utimbuf) -> c_int)(path, buf)
    })
}

unsafe fn do_truncate(path: *const c_char, len: off_t) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("truncate64", unsafe extern "C" fn(*const c_char, off_t) -> c_int)(path, len),
        Target::Ours(p) => guard(-1, || {
            if len < 0 {
                return fail(libc::EINVAL);
            }
            match state() {
                Some(s) => fs_result(s.fs.truncate(&p, len as u64)),
                None => fail(libc::EIO),
            }
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    do_truncate(path, len)
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    do_truncate(path, len)
}

// ---- the current directory -------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        t @ Target::Real(_) => {
            let r = real!("chdir", unsafe extern "C" fn(*const c_char) -> c_int)(t.host(path));
            if r == 0 {
                if let Some(s) = running() {
                    *s.vcwd.lock().unwrap() = None;
                }
            }
            r
        }
        Target::Ours(p) => guard(-1, || match stat_ours(&p, true) {
            Ok(st) if st.mode & libc::S_IFMT == libc::S_IFDIR => {
                *state().unwrap().vcwd.lock().unwrap() = Some(normalize(strip_slash(&p)));
                0
            }
            Ok(_) => fail(libc::ENOTDIR),
            Err(e) => fail(e),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(o) = ours(fd) {
        if !o.file.is_dir() {
            return fail(libc::ENOTDIR);
        }
        *running().unwrap().vcwd.lock().unwrap() = Some(o.path.clone());
        return 0;
    }
    let r = real!("fchdir", unsafe extern "C" fn(c_int) -> c_int)(fd);
    if r == 0 {
        if let Some(s) = running() {
            *s.vcwd.lock().unwrap() = None;
        }
    }
    r
}

unsafe fn virtual_cwd() -> Option<Vec<u8>> {
    let s = running()?;
    let v = s.vcwd.lock().unwrap().clone()?;
    Some(s.host_path(&v))
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let Some(cwd) = virtual_cwd() else {
        return real!("getcwd", unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char)(buf, size);
    };
    let need = cwd.len() + 1;
    if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        let p = libc::malloc(n) as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        std::ptr::copy_nonoverlapping(cwd.as_ptr(), p as *mut u8, cwd.len());
        *p.add(cwd.len()) = 0;
        return p;
    }
    if size < need {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    std::ptr::copy_nonoverlapping(cwd.as_ptr(), buf as *mut u8, cwd.len());
    *buf.add(cwd.len()) = 0;
    buf
}
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, size: size_t, _buflen: size_t) -> *mut c_char {
    getcwd(buf, size)
}
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    if virtual_cwd().is_some() {
        return getcwd(std::ptr::null_mut(), 0);
    }
    real!("get_current_dir_name", unsafe extern "C" fn() -> *mut c_char)()
}

/// realpath for a FlacFS path: follow symlinks component by component.
unsafe fn realpath_ours(p: &[u8]) -> Result<Vec<u8>, c_int> {
    let s = state().ok_or(libc::EIO)?;
    let mut todo: Vec<Vec<u8>> = p.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev().map(|c| c.to_vec()).collect();
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == b"." {
            continue;
        }
        if c == b".." {
            done.pop();
            continue;
        }
        done.push(c);
        let cur = {
            let mut v = Vec::new();
            for d in &done {
                v.push(b'/');
                v.extend_from_slice(d);
            }
            v
        };
        let st = s.fs.stat(&cur, false).map_err(|e| e.errno())?;
        if st.mode & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > 40 {
                return Err(libc::ELOOP);
            }
            let t = s.fs.readlink(&cur).map_err(|e| e.errno())?;
            done.pop();
            if t.first() == Some(&b'/') {
                match classify_bytes(libc::AT_FDCWD, &t, &s.mount) {
                    Target::Ours(inner) => {
                        done.clear();
                        for x in inner.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                            todo.push(x.to_vec());
                        }
                    }
                    Target::Real(_) => return Err(libc::EXDEV),
                }
            } else {
                for x in t.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                    todo.push(x.to_vec());
                }
            }
        }
    }
    let mut inner = Vec::new();
    for d in &done {
        inner.push(b'/');
        inner.extend_from_slice(d);
    }
    if inner.is_empty() {
        inner.push(b'/');
    }
    Ok(s.host_path(&inner))
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("realpath", unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char)(path, resolved),
        Target::Ours(p) => guard(std::ptr::null_mut(), || match realpath_ours(&p) {
            Ok(out) => {
                if out.len() >= libc::PATH_MAX as usize {
                    set_errno(libc::ENAMETOOLONG);
                    return std::ptr::null_mut();
                }
                let dst = if resolved.is_null() { libc::malloc(out.len() + 1) as *mut c_char } else { resolved };
                if dst.is_null() {
                    set_errno(libc::ENOMEM);
                    return dst;
                }
                std::ptr::copy_nonoverlapping(out.as_ptr(), dst as *mut u8, out.len());
                *dst.add(out.len()) = 0;
                dst
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }),
    }
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, _len: size_t) -> *mut c_char {
    realpath(path, resolved)
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    realpath(path, std::ptr::null_mut())
}

// ---- statfs and extended attributes --------------------------------------------------------

pub(crate) fn fill_statfs(buf: *mut libc::statfs) {
    let Some(s) = running() else { return };
    let (total, free, files) = s.fs.statfs();
    // SAFETY: the caller passes a valid statfs buffer.
    unsafe {
        std::ptr::write_bytes(buf, 0, 1);
        let b = &mut *buf;
        b.f_type = 0x464c4143; // "FLAC"
        b.f_bsize = 4096;
        b.f_frsize = 4096;
        b.f_blocks = total / 4096;
        b.f_bfree = free / 4096;
        b.f_bavail = free / 4096;
        b.f_files = files + free / 4096;
        b.f_ffree = free / 4096;
        b.f_namelen = 255;
    }
}

pub(crate) fn fill_statvfs(buf: *mut libc::statvfs) {
    let Some(s) = running() else { return };
    let (total, free, files) = s.fs.statfs();
    // SAFETY: the caller passes a valid statvfs buffer.
    unsafe {
        std::ptr::write_bytes(buf, 0, 1);
        let b = &mut *buf;
        b.f_bsize = 4096;
        b.f_frsize = 4096;
        b.f_blocks = total / 4096;
        b.f_bfree = free / 4096;
        b.f_bavail = free / 4096;
        b.f_files = files + free / 4096;
        b.f_ffree = free / 4096;
        b.f_favail = free / 4096;
        b.f_namemax = 255;
    }
}

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("statfs", unsafe extern "C" fn(*const c_char, *mut libc::statfs) -> c_int)(path, buf),
        Target::Ours(_) => {
            if state().is_none() {
                return fail(libc::EIO);
            }
            fill_statfs(buf);
            0
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    statfs(path, buf)
}
#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("statvfs", unsafe extern "C" fn(*const c_char, *mut libc::statvfs) -> c_int)(path, buf),
        Target::Ours(_) => {
            if state().is_none() {
                return fail(libc::EIO);
            }
            fill_statvfs(buf);
            0
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    statvfs(path, buf)
}

/// Extended attributes: FlacFS has none (get: ENODATA... as "not supported"; list: empty).
macro_rules! xattr_path {
    ($name:ident, $lit:literal, ($($a:ident: $t:ty),*), $ret:ty, $ours:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, $($a: $t),*) -> $ret {
            match classify(libc::AT_FDCWD, path) {
                Target::Real(_) => real!($lit, unsafe extern "C" fn(*const c_char, $($t),*) -> $ret)(path, $($a),*),
                Target::Ours(_) => $ours,
            }
        }
    };
}

xattr_path!(getxattr, "getxattr", (n: *const c_char, v: *mut c_void, s: size_t), ssize_t, fail(libc::ENOTSUP) as ssize_t);
xattr_path!(lgetxattr, "lgetxattr", (n: *const c_char, v: *mut c_void, s: size_t), ssize_t, fail(libc::ENOTSUP) as ssize_t);
xattr_path!(listxattr, "listxattr", (l: *mut c_char, s: size_t), ssize_t, 0);
xattr_path!(llistxattr, "llistxattr", (l: *mut c_char, s: size_t), ssize_t, 0);
xattr_path!(setxattr, "setxattr", (n: *const c_char, v: *const c_void, s: size_t, f: c_int), c_int, fail(libc::ENOTSUP));
xattr_path!(lsetxattr, "lsetxattr", (n: *const c_char, v: *const c_void, s: size_t, f: c_int), c_int, fail(libc::ENOTSUP));
xattr_path!(removexattr, "removexattr", (n: *const c_char), c_int, fail(libc::ENOTSUP));
xattr_path!(lremovexattr, "lremovexattr", (n: *const c_char), c_int, fail(libc::ENOTSUP));
