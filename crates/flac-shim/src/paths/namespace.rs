//! Namespace changes on paths: mkdir, unlink, rmdir, remove, rename, link, symlink,
//! readlink; device nodes and FIFOs are refused inside the file system.

use std::ffi::{c_char, c_int};

use libc::{mode_t, size_t, ssize_t};

use super::{classify, fs_result, strip_slash, Target};
use crate::{cstr, fail, fail_err, guard, real, state};

unsafe fn do_mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    match classify(dirfd, path) {
        Target::Real(_) => real!("mkdirat", unsafe extern "C" fn(c_int, *const c_char, mode_t) -> c_int)(dirfd, path, mode),
        Target::Ours(p) => guard(-1, || match state() {
            Some(s) => fs_result(s.fs.mkdir(strip_slash(&p), mode & !crate::current_umask())),
            None => fail(libc::EIO),
        }),
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
