//! Opening FlacFS paths: `open` and its variants, `openat`, `creat`; a placeholder descriptor
//! stands for the open file.

use std::ffi::{c_char, c_int};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use libc::mode_t;
use ssdlab_flac::fs::Resolved;
use ssdlab_flac::FlacError;

use super::{classify, normalize, Target};
use crate::{debug, fail, fail_err, guard, real, state, Open};

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
