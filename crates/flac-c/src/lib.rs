//! The C API of FLAC and FlacFS (`include/flac.h`): thin `extern "C"` wrappers over
//! ssdlab-flac. Errors return -1 (or NULL) with errno set and a message for
//! `flac_last_error()`.
//!
//! Every entry point runs through [`call`] (or [`guard`] for the ones without a handle): a NULL
//! handle fails with EINVAL, and a panic inside ssdlab (a bug) fails with EIO and its message
//! instead of unwinding into C, which would abort the host program.

#![allow(clippy::missing_safety_doc)]

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use libc::{off_t, size_t, ssize_t};
use ssdlab_flac::fs::engine::EngineKind;
use ssdlab_flac::fs::{File, Fs, FsConfig};
use ssdlab_flac::{AttachMode, Buffer, Flac, FlacConfig, FlacError, Format, PflushHandle, PmCost, Tx, Xfer};

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String, errno: c_int) {
    LAST.with(|l| *l.borrow_mut() = CString::new(msg.replace('\0', " ")).unwrap_or_default());
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = errno };
}

fn fail(e: FlacError) -> c_int {
    let n = e.errno();
    set_error(e.to_string(), n);
    -1
}

fn invalid(msg: &str) -> c_int {
    set_error(msg.to_string(), libc::EINVAL);
    -1
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "panic".into(),
    }
}

/// Runs `body`; a panic becomes a failure of `what` (EIO, its message for `flac_last_error`)
/// returning `failed`.
fn guard<T>(what: &str, failed: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(p) => {
            set_error(format!("{what}: internal error: {}", panic_text(&*p)), libc::EIO);
            failed
        }
    }
}

/// [`guard`] on the object behind a handle, failing with EINVAL when the handle is NULL.
unsafe fn call<H, T>(what: &str, h: *mut H, failed: T, body: impl FnOnce(&mut H) -> T) -> T {
    if h.is_null() {
        set_error(format!("{what}: handle is NULL"), libc::EINVAL);
        return failed;
    }
    guard(what, failed, || body(&mut *h))
}

/// The handles' tables change by one insert or remove at a time, so they are whole even when a
/// panic poisoned their lock: the lock is taken regardless.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[no_mangle]
pub extern "C" fn flac_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

unsafe fn path_arg(p: *const c_char) -> Option<PathBuf> {
    if p.is_null() {
        return None;
    }
    Some(PathBuf::from(std::ffi::OsStr::from_encoded_bytes_unchecked(CStr::from_ptr(p).to_bytes())))
}

fn flac_config(pm_path: PathBuf, create: u64, dram: u64, cost: c_int) -> FlacConfig {
    FlacConfig {
        pm_path,
        format: (create > 0).then(|| Format { pm_bytes: create, ..Format::default() }),
        dram_bytes: dram,
        cost: if cost != 0 { PmCost::default() } else { PmCost::off() },
        ..FlacConfig::default()
    }
}

pub struct FlacHandle {
    flac: Arc<Flac>,
    bufs: Mutex<HashMap<usize, Buffer>>,
}

pub struct PflushC {
    h: PflushHandle,
}

#[no_mangle]
pub unsafe extern "C" fn flac_init(pm_path: *const c_char, create_pm_bytes: u64, dram_bytes: u64, pm_cost: c_int) -> *mut FlacHandle {
    guard("flac_init", std::ptr::null_mut(), || {
        let Some(p) = path_arg(pm_path) else {
            invalid("flac_init: pm_path is NULL");
            return std::ptr::null_mut();
        };
        match Flac::init(flac_config(p, create_pm_bytes, dram_bytes, pm_cost)) {
            Ok(flac) => Box::into_raw(Box::new(FlacHandle { flac, bufs: Mutex::new(HashMap::new()) })),
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_close(f: *mut FlacHandle) {
    if !f.is_null() {
        guard("flac_close", (), || drop(Box::from_raw(f)));
    }
}

#[no_mangle]
pub unsafe extern "C" fn flac_space_base(f: *mut FlacHandle) -> *mut c_void {
    call("flac_space_base", f, std::ptr::null_mut(), |h| h.flac.space_base().cast())
}

#[no_mangle]
pub unsafe extern "C" fn flac_space_bytes(f: *mut FlacHandle) -> u64 {
    call("flac_space_bytes", f, 0, |h| h.flac.space_pages() * 4096)
}

#[no_mangle]
pub unsafe extern "C" fn flac_buffer_alloc(f: *mut FlacHandle, len: size_t) -> *mut c_void {
    call("flac_buffer_alloc", f, std::ptr::null_mut(), |h| match h.flac.alloc_buffer(len) {
        Ok(b) => {
            let p = b.as_ptr();
            locked(&h.bufs).insert(p as usize, b);
            p.cast()
        }
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_buffer_free(f: *mut FlacHandle, buf: *mut c_void) -> c_int {
    call("flac_buffer_free", f, -1, |h| match locked(&h.bufs).remove(&(buf as usize)) {
        Some(_) => 0,
        None => invalid("flac_buffer_free: not a FLAC buffer of this instance"),
    })
}

fn mode_of(m: c_int) -> Option<AttachMode> {
    match m {
        0 => Some(AttachMode::Cow),
        1 => Some(AttachMode::ReadOnly),
        _ => None,
    }
}

unsafe fn xfer_out(r: ssdlab_flac::Result<Xfer>, out: *mut Xfer) -> c_int {
    match r {
        Ok(x) => {
            if !out.is_null() {
                *out = x;
            }
            0
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn flac_attach(f: *mut FlacHandle, to: *mut c_void, from: *const c_void, len: size_t, mode: c_int) -> c_int {
    call("flac_attach", f, -1, |h| {
        let Some(m) = mode_of(mode) else { return invalid("flac_attach: mode must be FLAC_ATTACH_COW or FLAC_ATTACH_READONLY") };
        xfer_out(h.flac.attach(to as usize, from as usize, len, m), std::ptr::null_mut())
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_zcopy_to_flac(
    f: *mut FlacHandle,
    to: *mut c_void,
    from: *const c_void,
    len: size_t,
    out: *mut Xfer,
) -> c_int {
    call("flac_zcopy_to_flac", f, -1, |h| xfer_out(h.flac.zcopy_to_flac(to as usize, from.cast(), len), out))
}

#[no_mangle]
pub unsafe extern "C" fn flac_zcopy_from_flac(
    f: *mut FlacHandle,
    to: *mut c_void,
    from: *const c_void,
    len: size_t,
    mode: c_int,
    out: *mut Xfer,
) -> c_int {
    call("flac_zcopy_from_flac", f, -1, |h| {
        let Some(m) = mode_of(mode) else { return invalid("flac_zcopy_from_flac: bad mode") };
        xfer_out(h.flac.zcopy_from_flac(to.cast(), from as usize, len, m), out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_pflush_handle(f: *mut FlacHandle) -> *mut PflushC {
    call("flac_pflush_handle", f, std::ptr::null_mut(), |h| Box::into_raw(Box::new(PflushC { h: h.flac.pflush_handle() })))
}

#[no_mangle]
pub unsafe extern "C" fn flac_pflush_add(f: *mut FlacHandle, h: *mut PflushC, addr: *mut c_void, len: size_t) -> c_int {
    if h.is_null() {
        return invalid("flac_pflush_add: pflush handle is NULL");
    }
    call("flac_pflush_add", f, -1, |fh| match fh.flac.pflush_add(&mut (*h).h, addr as usize, len) {
        Ok(n) => n as c_int,
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_pflush_commit(
    f: *mut FlacHandle,
    h: *mut PflushC,
    key: *const c_char,
    val: *const c_void,
    val_len: size_t,
) -> c_int {
    if h.is_null() {
        return invalid("flac_pflush_commit: pflush handle is NULL");
    }
    call("flac_pflush_commit", f, -1, |fh| {
        let h = Box::from_raw(h);
        let mut tx = Tx::new();
        if !key.is_null() {
            tx.put(CStr::from_ptr(key).to_bytes(), std::slice::from_raw_parts(val.cast::<u8>(), val_len));
        }
        match fh.flac.pflush_commit(h.h, &tx) {
            Ok(_) => 0,
            Err(e) => fail(e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_pfree(f: *mut FlacHandle, addr: *mut c_void, len: size_t) -> c_int {
    call("flac_pfree", f, -1, |h| match h.flac.pfree(addr as usize, len, &Tx::new()) {
        Ok(_) => 0,
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn flac_meta_get(f: *mut FlacHandle, key: *const c_char, buf: *mut c_void, cap: size_t) -> ssize_t {
    if key.is_null() {
        return invalid("flac_meta_get: key is NULL") as ssize_t;
    }
    call("flac_meta_get", f, -1, |h| match h.flac.pm.kv_get(CStr::from_ptr(key).to_bytes()) {
        Some(v) => {
            std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), v.len().min(cap));
            v.len() as ssize_t
        }
        None => {
            set_error("flac_meta_get: no such key".into(), libc::ENOENT);
            -1
        }
    })
}

pub struct FsHandle {
    fs: Arc<Fs>,
    files: Mutex<Vec<Option<Arc<File>>>>,
    flac: Option<Box<FlacHandle>>,
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_mount(pm_path: *const c_char, engine: *const c_char, create: u64, dram: u64, cost: c_int) -> *mut FsHandle {
    guard("flacfs_mount", std::ptr::null_mut(), || {
        let Some(p) = path_arg(pm_path) else {
            invalid("flacfs_mount: pm_path is NULL");
            return std::ptr::null_mut();
        };
        let kind = if engine.is_null() { Some(EngineKind::Flac) } else { EngineKind::parse(&CStr::from_ptr(engine).to_string_lossy()) };
        let Some(kind) = kind else {
            invalid("flacfs_mount: engine must be \"flac\", \"pagecache\" or \"dax\"");
            return std::ptr::null_mut();
        };
        match Fs::mount(FsConfig { engine: kind, flac: flac_config(p, create, dram, cost), ..FsConfig::default() }) {
            Ok(fs) => {
                let flac = fs.flac().map(|f| Box::new(FlacHandle { flac: f.clone(), bufs: Mutex::new(HashMap::new()) }));
                Box::into_raw(Box::new(FsHandle { fs, files: Mutex::new(Vec::new()), flac }))
            }
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_unmount(fs: *mut FsHandle) -> c_int {
    if fs.is_null() {
        return 0;
    }
    guard("flacfs_unmount", -1, || {
        let h = Box::from_raw(fs);
        for f in locked(&h.files).iter().flatten() {
            let _ = h.fs.close(f);
        }
        let r = h.fs.unmount();
        drop(h);
        status(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_flac(fs: *mut FsHandle) -> *mut FlacHandle {
    call("flacfs_flac", fs, std::ptr::null_mut(), |h| match &mut h.flac {
        Some(b) => &mut **b,
        None => std::ptr::null_mut(),
    })
}

unsafe fn fs_path<'a>(p: *const c_char) -> Option<&'a [u8]> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_bytes())
}

fn status(r: ssdlab_flac::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// [`call`] on the open file `fd` of the FlacFS behind `fs` (EBADF when it is not open).
unsafe fn with_file<T: Copy>(what: &str, fs: *mut FsHandle, fd: c_int, failed: T, body: impl FnOnce(&Fs, &Arc<File>) -> T) -> T {
    call(what, fs, failed, |h| {
        let file = locked(&h.files).get(fd as usize).cloned().flatten();
        match file {
            Some(f) => body(&h.fs, &f),
            None => {
                fail(FlacError::Posix(libc::EBADF, format!("{what}: descriptor {fd} is not open")));
                failed
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_open(fs: *mut FsHandle, path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    let Some(p) = fs_path(path) else { return invalid("flacfs_open: path is NULL") };
    call("flacfs_open", fs, -1, |h| match h.fs.open(p, flags, mode) {
        Ok(f) => {
            let mut files = locked(&h.files);
            let slot = files.iter().position(|s| s.is_none()).unwrap_or(files.len());
            if slot == files.len() {
                files.push(None);
            }
            files[slot] = Some(f);
            slot as c_int
        }
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_close(fs: *mut FsHandle, fd: c_int) -> c_int {
    call("flacfs_close", fs, -1, |h| {
        let f = locked(&h.files).get_mut(fd as usize).and_then(|s| s.take());
        match f {
            Some(f) => status(h.fs.close(&f)),
            None => fail(FlacError::Posix(libc::EBADF, format!("flacfs_close: {fd} is not open"))),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_read(fs: *mut FsHandle, fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    with_file("flacfs_read", fs, fd, -1, |fs, f| {
        let r = fs.with_pos(f, |pos| {
            let (k, _) = fs.pread_raw(f, buf.cast(), n, *pos)?;
            *pos += k as u64;
            Ok(k)
        });
        match r {
            Ok(k) => k as ssize_t,
            Err(e) => fail(e) as ssize_t,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_write(fs: *mut FsHandle, fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    with_file("flacfs_write", fs, fd, -1, |fs, f| {
        let r = fs.with_pos(f, |pos| {
            let (at, _) = fs.pwrite_raw(f, buf.cast(), n, Some(*pos))?;
            *pos = at + n as u64;
            Ok(n)
        });
        match r {
            Ok(k) => k as ssize_t,
            Err(e) => fail(e) as ssize_t,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_pread(fs: *mut FsHandle, fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    if off < 0 {
        return invalid("flacfs_pread: negative offset") as ssize_t;
    }
    with_file("flacfs_pread", fs, fd, -1, |fs, f| match fs.pread_raw(f, buf.cast(), n, off as u64) {
        Ok((k, _)) => k as ssize_t,
        Err(e) => fail(e) as ssize_t,
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_pwrite(fs: *mut FsHandle, fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    if off < 0 {
        return invalid("flacfs_pwrite: negative offset") as ssize_t;
    }
    with_file("flacfs_pwrite", fs, fd, -1, |fs, f| match fs.pwrite_raw(f, buf.cast(), n, Some(off as u64)) {
        Ok(_) => n as ssize_t,
        Err(e) => fail(e) as ssize_t,
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_lseek(fs: *mut FsHandle, fd: c_int, off: off_t, whence: c_int) -> off_t {
    with_file("flacfs_lseek", fs, fd, -1, |fs, f| match fs.seek(f, off, whence) {
        Ok(p) => p as off_t,
        Err(e) => fail(e) as off_t,
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_fsync(fs: *mut FsHandle, fd: c_int) -> c_int {
    with_file("flacfs_fsync", fs, fd, -1, |fs, f| status(fs.fsync(f)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_ftruncate(fs: *mut FsHandle, fd: c_int, len: off_t) -> c_int {
    if len < 0 {
        return invalid("flacfs_ftruncate: negative length");
    }
    with_file("flacfs_ftruncate", fs, fd, -1, |fs, f| status(fs.ftruncate(f, len as u64)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_stat(fs: *mut FsHandle, path: *const c_char, st: *mut libc::stat) -> c_int {
    let Some(p) = fs_path(path) else { return invalid("flacfs_stat: path is NULL") };
    if st.is_null() {
        return invalid("flacfs_stat: stat buffer is NULL");
    }
    call("flacfs_stat", fs, -1, |h| match h.fs.stat(p, true) {
        Ok(s) => {
            s.to_libc(&mut *st);
            0
        }
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_mkdir(fs: *mut FsHandle, path: *const c_char, mode: libc::mode_t) -> c_int {
    let Some(p) = fs_path(path) else { return invalid("flacfs_mkdir: path is NULL") };
    call("flacfs_mkdir", fs, -1, |h| status(h.fs.mkdir(p, mode)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_unlink(fs: *mut FsHandle, path: *const c_char) -> c_int {
    let Some(p) = fs_path(path) else { return invalid("flacfs_unlink: path is NULL") };
    call("flacfs_unlink", fs, -1, |h| status(h.fs.remove(p, false)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_rmdir(fs: *mut FsHandle, path: *const c_char) -> c_int {
    let Some(p) = fs_path(path) else { return invalid("flacfs_rmdir: path is NULL") };
    call("flacfs_rmdir", fs, -1, |h| status(h.fs.remove(p, true)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_rename(fs: *mut FsHandle, from: *const c_char, to: *const c_char) -> c_int {
    let (Some(a), Some(b)) = (fs_path(from), fs_path(to)) else { return invalid("flacfs_rename: path is NULL") };
    call("flacfs_rename", fs, -1, |h| status(h.fs.rename(a, b, false)))
}

#[no_mangle]
pub unsafe extern "C" fn flacfs_sync(fs: *mut FsHandle) -> c_int {
    call("flacfs_sync", fs, -1, |h| status(h.fs.sync()))
}
