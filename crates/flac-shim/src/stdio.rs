//! stdio streams on FlacFS files: `fopen` of a FlacFS path returns a `fopencookie` stream whose
//! reads, writes, seeks and close go through the shim's descriptor calls (glibc's own stdio
//! calls the kernel directly, past any LD_PRELOAD). Its `fileno` is the FlacFS descriptor.

use std::ffi::{c_char, c_int, c_void};

use libc::{off64_t, size_t, ssize_t};

use crate::paths::{classify, open_ours, Target};
use crate::{fail, guard, ours, real};

/// glibc's `cookie_io_functions_t` (not in the libc crate).
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieIo) -> *mut libc::FILE;
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// A FlacFS descriptor became 0, 1 or 2 (`dup2`, as `sort -o` does): glibc's stdin, stdout or
/// stderr would use the kernel descriptor, so the standard stream becomes a FlacFS stream.
pub(crate) unsafe fn redirect_std(fd: c_int) {
    let (slot, mode) = match fd {
        0 => (&raw mut stdin, c"r"),
        1 => (&raw mut stdout, c"w"),
        2 => (&raw mut stderr, c"w"),
        _ => return,
    };
    let fp = fopencookie(fd as usize as *mut c_void, mode.as_ptr(), funcs());
    if fp.is_null() {
        return;
    }
    set_fileno(fp, fd);
    let old = *slot;
    if !old.is_null() {
        libc::fflush(old);
    }
    *slot = fp;
}

fn funcs() -> CookieIo {
    CookieIo { read: Some(ck_read), write: Some(ck_write), seek: Some(ck_seek), close: Some(ck_close) }
}

unsafe extern "C" fn ck_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    crate::io::read(cookie as usize as c_int, buf.cast(), n)
}

unsafe extern "C" fn ck_write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let r = crate::io::write(cookie as usize as c_int, buf.cast(), n);
    // fopencookie's write returns 0 on error.
    r.max(0)
}

unsafe extern "C" fn ck_seek(cookie: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let r = crate::io::lseek(cookie as usize as c_int, *off, whence);
    if r < 0 {
        return -1;
    }
    *off = r;
    0
}

unsafe extern "C" fn ck_close(cookie: *mut c_void) -> c_int {
    crate::io::close(cookie as usize as c_int)
}

/// open(2) flags for an fopen mode string; None if it is malformed.
fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let mut f = match mode.first()? {
        b'r' => libc::O_RDONLY,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &c in &mode[1..] {
        match c {
            b'+' => f = (f & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => f |= libc::O_EXCL,
            b'e' => f |= libc::O_CLOEXEC,
            b'b' | b't' | b'm' | b'c' => {}
            b',' => break,
            _ => {}
        }
    }
    Some(f)
}

/// A stream over FlacFS descriptor `fd` (which the stream owns from now on).
unsafe fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let fp = fopencookie(fd as usize as *mut c_void, mode, funcs());
    if fp.is_null() {
        crate::io::close(fd);
        return fp;
    }
    set_fileno(fp, fd);
    fp
}

/// Make `fileno(fp)` return our descriptor (glibc keeps it in `_fileno`, at byte 112 of
/// `struct _IO_FILE` on x86-64; cookie streams have -2 there, which fileno reports as EBADF).
unsafe fn set_fileno(fp: *mut libc::FILE, fd: c_int) {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    {
        let p = (fp as *mut u8).add(112) as *mut c_int;
        debug_assert_eq!(*p, -2, "glibc's FILE layout changed");
        *p = fd;
    }
    #[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
    let _ = (fp, fd);
}

unsafe fn do_fopen(path: *const c_char, mode: *const c_char, real_call: impl FnOnce() -> *mut libc::FILE) -> *mut libc::FILE {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real_call(),
        Target::Ours(p) => guard(std::ptr::null_mut(), || {
            let Some(flags) = crate::cstr(mode).and_then(mode_flags) else {
                fail(libc::EINVAL);
                return std::ptr::null_mut();
            };
            let fd = open_ours(&p, flags, 0o666);
            if fd < 0 {
                return std::ptr::null_mut();
            }
            stream(fd, mode)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    do_fopen(path, mode, || real!("fopen64", unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE)(path, mode))
}
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    fopen(path, mode)
}
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if ours(fd).is_none() {
        return real!("fdopen", unsafe extern "C" fn(c_int, *const c_char) -> *mut libc::FILE)(fd, mode);
    }
    guard(std::ptr::null_mut(), || {
        let fp = fopencookie(fd as usize as *mut c_void, mode, funcs());
        if !fp.is_null() {
            set_fileno(fp, fd);
        }
        fp
    })
}
#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, fp: *mut libc::FILE) -> *mut libc::FILE {
    if !path.is_null() {
        if let Target::Ours(_) = classify(libc::AT_FDCWD, path) {
            fail(libc::ENOTSUP);
            return std::ptr::null_mut();
        }
    }
    real!("freopen64", unsafe extern "C" fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE)(path, mode, fp)
}
#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, fp: *mut libc::FILE) -> *mut libc::FILE {
    freopen(path, mode, fp)
}
