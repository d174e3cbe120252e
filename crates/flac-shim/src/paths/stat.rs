//! `stat` and its variants, `statx`, and `access` on paths.

use std::ffi::{c_char, c_int};

use ssdlab_flac::fs::{Resolved, Stat, Ts};

use super::{classify, Target};
use crate::{cstr, fail, guard, ours, real, running, state};

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
pub(super) unsafe fn stat_ours(p: &[u8], follow: bool) -> Result<Stat, c_int> {
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
