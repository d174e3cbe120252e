//! Descriptor-based calls: read and write (zero-copy into page-aligned buffers), seeking,
//! closing (a commit when a written file's last descriptor closes), truncation and sync, mmap,
//! and the calls FlacFS refuses or fakes (locks, ioctls). Duplication and fcntl: `fds.rs`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use libc::{off_t, size_t, ssize_t};
use ssdlab_flac::fs::SetAttr;

use crate::paths::{fill_stat, fill_statfs, fill_statvfs, times_attr, timeval_attr};
use crate::{debug, fail, fail_err, guard, ours, real, running, set_errno, Open};

fn count(r: ssdlab_flac::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail_err(&e) as ssize_t,
    }
}

/// Read into `buf` at `off` (None: at the file position, advancing it).
pub(crate) unsafe fn read_open(o: &Open, buf: *mut c_void, n: size_t, off: Option<i64>) -> ssize_t {
    let s = running().unwrap();
    if o.file.is_dir() {
        return fail(libc::EISDIR) as ssize_t;
    }
    match off {
        Some(off) if off < 0 => fail(libc::EINVAL) as ssize_t,
        Some(off) => count(s.fs.pread_raw(&o.file, buf as *mut u8, n, off as u64).map(|r| r.0)),
        None => count(s.fs.with_pos(&o.file, |pos| {
            let (k, _) = s.fs.pread_raw(&o.file, buf as *mut u8, n, *pos)?;
            *pos += k as u64;
            Ok(k)
        })),
    }
}

/// Write from `buf` at `off` (None: at the file position, or the end with O_APPEND).
pub(crate) unsafe fn write_open(o: &Open, buf: *const c_void, n: size_t, off: Option<i64>) -> ssize_t {
    let s = running().unwrap();
    o.written.store(true, std::sync::atomic::Ordering::Relaxed);
    match off {
        Some(off) if off < 0 => fail(libc::EINVAL) as ssize_t,
        Some(off) => count(s.fs.pwrite_raw(&o.file, buf as *const u8, n, Some(off as u64)).map(|_| n)),
        None => count(s.fs.with_pos(&o.file, |pos| {
            let (at, _) = s.fs.pwrite_raw(&o.file, buf as *const u8, n, Some(*pos))?;
            *pos = at + n as u64;
            Ok(n)
        })),
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match ours(fd) {
        None => real!("read", unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n),
        Some(o) => guard(-1, || read_open(&o, buf, n, None)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, _buflen: size_t) -> ssize_t {
    read(fd, buf, n)
}
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    match ours(fd) {
        None => real!("pread64", unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t)(fd, buf, n, off),
        Some(o) => guard(-1, || read_open(&o, buf, n, Some(off))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    pread(fd, buf, n, off)
}
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _buflen: size_t) -> ssize_t {
    pread(fd, buf, n, off)
}
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _buflen: size_t) -> ssize_t {
    pread(fd, buf, n, off)
}
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match ours(fd) {
        None => real!("write", unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n),
        Some(o) => guard(-1, || write_open(&o, buf, n, None)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    match ours(fd) {
        None => real!("pwrite64", unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t)(fd, buf, n, off),
        Some(o) => guard(-1, || write_open(&o, buf, n, Some(off))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    pwrite(fd, buf, n, off)
}

unsafe fn vectored(o: &Open, iov: *const libc::iovec, cnt: c_int, off: Option<i64>, write: bool) -> ssize_t {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return fail(libc::EINVAL) as ssize_t;
    }
    let v = std::slice::from_raw_parts(iov, cnt as usize);
    let mut total: ssize_t = 0;
    for io in v {
        let at = off.map(|o| o + total as i64);
        let n = if write { write_open(o, io.iov_base, io.iov_len, at) } else { read_open(o, io.iov_base, io.iov_len, at) };
        if n < 0 {
            return if total > 0 { total } else { n };
        }
        total += n;
        if (n as usize) < io.iov_len {
            break;
        }
    }
    total
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    match ours(fd) {
        None => real!("readv", unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt),
        Some(o) => guard(-1, || vectored(&o, iov, cnt, None, false)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    match ours(fd) {
        None => real!("writev", unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, cnt),
        Some(o) => guard(-1, || vectored(&o, iov, cnt, None, true)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    match ours(fd) {
        None => real!("preadv64", unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off),
        Some(o) => guard(-1, || vectored(&o, iov, cnt, Some(off), false)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    preadv(fd, iov, cnt, off)
}
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    match ours(fd) {
        None => real!("pwritev64", unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off),
        Some(o) => guard(-1, || vectored(&o, iov, cnt, Some(off), true)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: off_t) -> ssize_t {
    pwritev(fd, iov, cnt, off)
}

pub(crate) unsafe fn seek_open(o: &Open, off: off_t, whence: c_int) -> off_t {
    match running().unwrap().fs.seek(&o.file, off, whence) {
        Ok(p) => p as off_t,
        Err(e) => fail_err(&e) as off_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    match ours(fd) {
        None => real!("lseek64", unsafe extern "C" fn(c_int, off_t, c_int) -> off_t)(fd, off, whence),
        Some(o) => guard(-1, || seek_open(&o, off, whence)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    lseek(fd, off, whence)
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    match ours(fd) {
        None => real!("fstat64", unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int)(fd, st),
        Some(o) => {
            fill_stat(st, &running().unwrap().fs.fstat(&o.file));
            0
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    fstat(fd, st)
}

/// Close FlacFS descriptor `fd` (already unregistered): the last descriptor of an open file
/// closes it, and commits if it was written.
pub(crate) unsafe fn release(o: Arc<Open>) -> c_int {
    if Arc::strong_count(&o) > 1 {
        return 0;
    }
    let s = running().unwrap();
    if let Err(e) = s.fs.close(&o.file) {
        return fail_err(&e);
    }
    if s.sync_on_close && o.written.load(std::sync::atomic::Ordering::Relaxed) {
        if let Err(e) = s.fs.sync() {
            return fail_err(&e);
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if ours(fd).is_none() {
        return real!("close", unsafe extern "C" fn(c_int) -> c_int)(fd);
    }
    guard(-1, || {
        let o = running().unwrap().unregister(fd);
        real!("close", unsafe extern "C" fn(c_int) -> c_int)(fd);
        if debug() {
            eprintln!("flacfs: close fd {fd}");
        }
        match o {
            Some(o) => release(o),
            None => 0,
        }
    })
}

fn fs_result(r: ssdlab_flac::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail_err(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    match ours(fd) {
        None => real!("ftruncate64", unsafe extern "C" fn(c_int, off_t) -> c_int)(fd, len),
        Some(o) => guard(-1, || {
            if len < 0 {
                return fail(libc::EINVAL);
            }
            o.written.store(true, std::sync::atomic::Ordering::Relaxed);
            fs_result(running().unwrap().fs.ftruncate(&o.file, len as u64))
        }),
    }
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    ftruncate(fd, len)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    match ours(fd) {
        None => real!("fsync", unsafe extern "C" fn(c_int) -> c_int)(fd),
        Some(o) => guard(-1, || fs_result(running().unwrap().fs.fsync(&o.file))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    match ours(fd) {
        None => real!("fdatasync", unsafe extern "C" fn(c_int) -> c_int)(fd),
        Some(o) => guard(-1, || fs_result(running().unwrap().fs.fsync(&o.file))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    match ours(fd) {
        None => real!("syncfs", unsafe extern "C" fn(c_int) -> c_int)(fd),
        Some(_) => guard(-1, || fs_result(running().unwrap().fs.sync())),
    }
}
#[no_mangle]
pub unsafe extern "C" fn sync() {
    if let Some(s) = running() {
        let _ = s.fs.sync();
    }
    real!("sync", unsafe extern "C" fn())()
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    match ours(fd) {
        None => real!("posix_fadvise64", unsafe extern "C" fn(c_int, off_t, off_t, c_int) -> c_int)(fd, off, len, advice),
        Some(_) => 0,
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    posix_fadvise(fd, off, len, advice)
}

unsafe fn grow(o: &Open, off: off_t, len: off_t) -> c_int {
    if off < 0 || len <= 0 {
        return libc::EINVAL;
    }
    let s = running().unwrap();
    let end = (off + len) as u64;
    if s.fs.fstat(&o.file).size < end {
        o.written.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = s.fs.ftruncate(&o.file, end) {
            return e.errno();
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    match ours(fd) {
        None => real!("fallocate64", unsafe extern "C" fn(c_int, c_int, off_t, off_t) -> c_int)(fd, mode, off, len),
        Some(_) if mode != 0 => fail(libc::EOPNOTSUPP),
        Some(o) => guard(-1, || match grow(&o, off, len) {
            0 => 0,
            e => fail(e),
        }),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    fallocate(fd, mode, off, len)
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    match ours(fd) {
        None => real!("posix_fallocate64", unsafe extern "C" fn(c_int, off_t, off_t) -> c_int)(fd, off, len),
        Some(o) => guard(libc::EIO, || grow(&o, off, len)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    posix_fallocate(fd, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fin: c_int,
    offin: *mut off_t,
    fout: c_int,
    offout: *mut off_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    if ours(fin).is_some() || ours(fout).is_some() {
        // Callers (cat, cp) fall back to read/write, which FlacFS serves.
        return fail(libc::EXDEV) as ssize_t;
    }
    real!("copy_file_range", unsafe extern "C" fn(c_int, *mut off_t, c_int, *mut off_t, size_t, libc::c_uint) -> ssize_t)(
        fin, offin, fout, offout, len, flags,
    )
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fin: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if ours(fin).is_none() && ours(out).is_none() {
        return real!("sendfile64", unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t)(out, fin, off, n);
    }
    guard(-1, || {
        // Emulated with read and write through the shim.
        let mut buf = vec![0u8; (n).min(1 << 20)];
        let mut done = 0usize;
        while done < n {
            let want = (n - done).min(buf.len());
            let r = if off.is_null() {
                read(fin, buf.as_mut_ptr().cast(), want)
            } else {
                pread(fin, buf.as_mut_ptr().cast(), want, *off + done as off_t)
            };
            if r < 0 {
                return if done > 0 { done as ssize_t } else { r };
            }
            if r == 0 {
                break;
            }
            let w = write(out, buf.as_ptr().cast(), r as usize);
            if w < 0 {
                return if done > 0 { done as ssize_t } else { w };
            }
            done += w as usize;
            if (w as usize) < r as usize {
                break;
            }
        }
        if !off.is_null() {
            *off += done as off_t;
        }
        done as ssize_t
    })
}
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, fin: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    sendfile(out, fin, off, n)
}
#[no_mangle]
pub unsafe extern "C" fn splice(
    fin: c_int,
    offin: *mut off_t,
    fout: c_int,
    offout: *mut off_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    if ours(fin).is_some() || ours(fout).is_some() {
        return fail(libc::EINVAL) as ssize_t;
    }
    real!("splice", unsafe extern "C" fn(c_int, *mut off_t, c_int, *mut off_t, size_t, libc::c_uint) -> ssize_t)(
        fin, offin, fout, offout, len, flags,
    )
}

unsafe fn fsetattr(fd: c_int, a: SetAttr, real_call: impl FnOnce() -> c_int) -> c_int {
    match ours(fd) {
        None => real_call(),
        Some(o) => guard(-1, || fs_result(running().unwrap().fs.setattr(&o.file, &a))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: libc::mode_t) -> c_int {
    fsetattr(fd, SetAttr { mode: Some(mode), ..SetAttr::default() }, || {
        real!("fchmod", unsafe extern "C" fn(c_int, libc::mode_t) -> c_int)(fd, mode)
    })
}
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    let a = SetAttr { uid: (uid != u32::MAX).then_some(uid), gid: (gid != u32::MAX).then_some(gid), ..SetAttr::default() };
    fsetattr(fd, a, || real!("fchown", unsafe extern "C" fn(c_int, libc::uid_t, libc::gid_t) -> c_int)(fd, uid, gid))
}
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    fsetattr(fd, times_attr(times), || real!("futimens", unsafe extern "C" fn(c_int, *const libc::timespec) -> c_int)(fd, times))
}
#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    fsetattr(fd, timeval_attr(tv), || real!("futimes", unsafe extern "C" fn(c_int, *const libc::timeval) -> c_int)(fd, tv))
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    match ours(fd) {
        None => real!("fstatfs", unsafe extern "C" fn(c_int, *mut libc::statfs) -> c_int)(fd, buf),
        Some(_) => {
            fill_statfs(buf);
            0
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int {
    fstatfs(fd, buf)
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    match ours(fd) {
        None => real!("fstatvfs", unsafe extern "C" fn(c_int, *mut libc::statvfs) -> c_int)(fd, buf),
        Some(_) => {
            fill_statvfs(buf);
            0
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    fstatvfs(fd, buf)
}

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(fd: c_int, n: *const libc::c_char, v: *mut c_void, s: size_t) -> ssize_t {
    match ours(fd) {
        None => real!("fgetxattr", unsafe extern "C" fn(c_int, *const libc::c_char, *mut c_void, size_t) -> ssize_t)(fd, n, v, s),
        Some(_) => fail(libc::ENOTSUP) as ssize_t,
    }
}
#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, l: *mut libc::c_char, s: size_t) -> ssize_t {
    match ours(fd) {
        None => real!("flistxattr", unsafe extern "C" fn(c_int, *mut libc::c_char, size_t) -> ssize_t)(fd, l, s),
        Some(_) => 0,
    }
}
#[no_mangle]
pub unsafe extern "C" fn fsetxattr(fd: c_int, n: *const libc::c_char, v: *const c_void, s: size_t, f: c_int) -> c_int {
    match ours(fd) {
        None => real!("fsetxattr", unsafe extern "C" fn(c_int, *const libc::c_char, *const c_void, size_t, c_int) -> c_int)(fd, n, v, s, f),
        Some(_) => fail(libc::ENOTSUP),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, n: *const libc::c_char) -> c_int {
    match ours(fd) {
        None => real!("fremovexattr", unsafe extern "C" fn(c_int, *const libc::c_char) -> c_int)(fd, n),
        Some(_) => fail(libc::ENOTSUP),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    match ours(fd) {
        None => real!("ioctl", unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int)(fd, req, arg),
        Some(_) => fail(libc::ENOTTY),
    }
}
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    match ours(fd) {
        None => real!("flock", unsafe extern "C" fn(c_int, c_int) -> c_int)(fd, op),
        Some(_) => 0,
    }
}

/// mmap of a FlacFS file: private (and read-only shared) mappings get the file's pages
/// (attached zero-copy where aligned; a snapshot, as MAP_PRIVATE allows); shared writable
/// mappings are refused.
#[no_mangle]
pub unsafe extern "C" fn mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void {
    let realf = real!("mmap64", unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void);
    let Some(o) = ours(fd) else { return realf(addr, len, prot, flags, fd, off) };
    guard(libc::MAP_FAILED, || {
        if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
            set_errno(libc::ENODEV);
            return libc::MAP_FAILED;
        }
        if off < 0 || off % 4096 != 0 || len == 0 {
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE);
        let p = realf(addr, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep, -1, 0);
        if p == libc::MAP_FAILED {
            return p;
        }
        let s = running().unwrap();
        let size = s.fs.fstat(&o.file).size;
        if (off as u64) < size {
            let n = (len as u64).min(size - off as u64) as usize;
            if let Err(e) = s.fs.pread_raw(&o.file, p as *mut u8, n, off as u64) {
                libc::munmap(p, len);
                fail_err(&e);
                return libc::MAP_FAILED;
            }
        }
        if prot != libc::PROT_READ | libc::PROT_WRITE {
            libc::mprotect(p, len, prot);
        }
        p
    })
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t) -> *mut c_void {
    mmap(addr, len, prot, flags, fd, off)
}
