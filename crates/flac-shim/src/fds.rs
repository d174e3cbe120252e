//! Descriptor duplication (dup, dup2, dup3, fcntl's F_DUPFD) and the rest of fcntl for FlacFS
//! descriptors: a duplicate shares its original's open file; one landing on 0, 1 or 2 also
//! takes over the process's stdio stream (`stdio::redirect_std`).

use std::ffi::c_int;
use std::sync::Arc;

use crate::io::release;
use crate::{fail, ours, real, running, Open};

/// Register `new` (a duplicate of our `old`) and return it.
unsafe fn adopt(new: c_int, o: Arc<Open>) -> c_int {
    if new >= 0 {
        running().unwrap().register(new, o);
        crate::stdio::redirect_std(new);
    }
    new
}

/// Before `new` is replaced by dup2/dup3: close it if it is ours.
unsafe fn drop_target(new: c_int) {
    if let Some(s) = running() {
        if let Some(o) = s.unregister(new) {
            release(o);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let r = real!("dup", unsafe extern "C" fn(c_int) -> c_int)(fd);
    match ours(fd) {
        Some(o) => adopt(r, o),
        None => r,
    }
}
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        return real!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int)(old, new);
    }
    let o = ours(old);
    drop_target(new);
    let r = real!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int)(old, new);
    match o {
        Some(o) => adopt(r, o),
        None => r,
    }
}
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let o = ours(old);
    if old != new {
        drop_target(new);
    }
    let r = real!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int)(old, new, flags);
    match o {
        Some(o) => adopt(r, o),
        None => r,
    }
}

unsafe fn do_fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let realf = real!("fcntl64", unsafe extern "C" fn(c_int, c_int, ...) -> c_int);
    let Some(o) = ours(fd) else { return realf(fd, cmd, arg) };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => adopt(realf(fd, cmd, arg), o),
        libc::F_GETFD | libc::F_SETFD => realf(fd, cmd, arg),
        libc::F_GETFL => o.file.flags | libc::O_LARGEFILE,
        libc::F_SETFL => 0,
        libc::F_GETLK | libc::F_OFD_GETLK => {
            // No other process can hold locks on FlacFS files (one process per image).
            let fl = arg as *mut libc::flock;
            if !fl.is_null() {
                (*fl).l_type = libc::F_UNLCK as _;
            }
            0
        }
        libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => 0,
        _ => fail(libc::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(fd, cmd, arg)
}
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(fd, cmd, arg)
}
