//! `statfs` and `statvfs` of the file system, and extended attributes (it has none).

use std::ffi::{c_char, c_int, c_void};

use libc::{size_t, ssize_t};

use super::{classify, Target};
use crate::{fail, real, running, state};

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
