//! Attribute changes on paths: chmod, chown, the utime family (with the conversions the
//! descriptor calls share), truncate.

use std::ffi::{c_char, c_int};

use libc::{mode_t, off_t};
use ssdlab_flac::fs::{SetAttr, Ts};

use super::{classify, fs_result, Target};
use crate::{fail, guard, ours, real, running, state};

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
