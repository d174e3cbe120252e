//! Thin wrappers over the system calls FLAC is built on: reserving and remapping virtual
//! ranges (`mmap` with `MAP_FIXED` of memfd / PM-file pages), protection changes, memfd and
//! `O_TMPFILE` backing files, `flock`, and `/proc/self/pagemap`. Every wrapper returns the OS
//! error with what was being done.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::error::{FlacError, Result};

/// Bytes per page (and per frame). FLAC works in base pages; 2 MiB runs of them are mapped
/// with one call, which the kernel maps with one PMD when the backing file has huge pages.
pub const PAGE: usize = 4096;
/// Pages per 2 MiB huge page: runs this long and this aligned can be PMD-mapped.
pub const HUGE_PAGES: usize = 512;
pub const HUGE: usize = PAGE * HUGE_PAGES;

/// `statfs.f_type` of tmpfs/shmem.
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

pub const PROT_NONE: i32 = libc::PROT_NONE;
pub const PROT_R: i32 = libc::PROT_READ;
pub const PROT_RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

pub fn check_page_size() -> Result<()> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if ps as usize != PAGE {
        return Err(FlacError::Invalid(format!("flac needs 4096-byte pages; this system uses {ps}")));
    }
    Ok(())
}

/// Reserve `len` bytes of address space aligned to `align` (inaccessible, no memory committed).
pub fn reserve(len: usize, align: usize) -> Result<*mut u8> {
    assert!(len > 0 && len.is_multiple_of(PAGE) && align.is_power_of_two() && align >= PAGE);
    let total = len + align;
    // SAFETY: a fresh anonymous PROT_NONE mapping; nothing else refers to it.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), total, PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(FlacError::last_os(format!("reserving {} MiB of address space", total >> 20)));
    }
    let start = p as usize;
    let aligned = (start + align - 1) & !(align - 1);
    // SAFETY: trimming the unaligned head and tail of the mapping made above.
    unsafe {
        if aligned > start {
            libc::munmap(p, aligned - start);
        }
        let end = aligned + len;
        if start + total > end {
            libc::munmap(end as *mut libc::c_void, start + total - end);
        }
    }
    Ok(aligned as *mut u8)
}

/// Map `len` bytes of `fd` at `off` over `addr` (shared: stores reach the backing file).
///
/// # Safety
/// `addr..addr+len` must be a range this process owns (a FLAC reservation, a FLAC buffer, or
/// memory the caller hands over); whatever was mapped there is replaced.
pub unsafe fn map_shared_fixed(addr: *mut u8, len: usize, prot: i32, fd: RawFd, off: u64) -> io::Result<()> {
    debug_assert!((addr as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && off.is_multiple_of(PAGE as u64));
    let p = libc::mmap(addr.cast(), len, prot, libc::MAP_SHARED | libc::MAP_FIXED, fd, off as libc::off_t);
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    debug_assert_eq!(p as usize, addr as usize);
    Ok(())
}

/// Map `len` bytes of `fd` at `off` over `addr` privately: reads see the frame, the first write
/// to a page makes the kernel copy it (copy-on-write without any handler; survives `fork`).
///
/// # Safety
/// As [`map_shared_fixed`].
pub unsafe fn map_private_fixed(addr: *mut u8, len: usize, prot: i32, fd: RawFd, off: u64) -> io::Result<()> {
    debug_assert!((addr as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && off.is_multiple_of(PAGE as u64));
    let p = libc::mmap(addr.cast(), len, prot, libc::MAP_PRIVATE | libc::MAP_FIXED, fd, off as libc::off_t);
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Replace `addr..addr+len` with fresh anonymous memory of protection `prot`.
///
/// # Safety
/// As [`map_shared_fixed`].
pub unsafe fn map_anon_fixed(addr: *mut u8, len: usize, prot: i32) -> io::Result<()> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE;
    let p = libc::mmap(addr.cast(), len, prot, flags, -1, 0);
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// # Safety
/// `addr..addr+len` must be mapped by this process and owned by the caller.
pub unsafe fn protect(addr: *mut u8, len: usize, prot: i32) -> io::Result<()> {
    if libc::mprotect(addr.cast(), len, prot) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// # Safety
/// Nothing may use `addr..addr+len` afterwards.
pub unsafe fn unmap(addr: *mut u8, len: usize) {
    let r = libc::munmap(addr.cast(), len);
    debug_assert_eq!(r, 0, "munmap: {}", io::Error::last_os_error());
}

/// Map a whole file shared and read-write (the frame windows: FLAC's direct map of DRAM and PM).
pub fn map_file(fd: RawFd, len: usize, what: &str) -> Result<*mut u8> {
    // SAFETY: a new mapping at an address the kernel chooses.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, PROT_RW, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(FlacError::last_os(format!("mapping {what} ({} MiB)", len >> 20)));
    }
    Ok(p.cast())
}

/// Ask the kernel to back `addr..addr+len` with huge pages where it can.
pub fn advise_huge(addr: *mut u8, len: usize) {
    // SAFETY: advice only; failure (huge pages off) is harmless.
    unsafe {
        libc::madvise(addr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

/// A memfd of `len` bytes (DRAM frames).
pub fn memfd(name: &str, len: u64) -> Result<OwnedFd> {
    let c = CString::new(name).expect("memfd name has no NUL");
    // SAFETY: memfd_create with a valid C string.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(FlacError::last_os("memfd_create for the DRAM frames"));
    }
    // SAFETY: fd was just returned by the kernel and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    truncate(&fd, len, "the DRAM memfd")?;
    Ok(fd)
}

/// An unnamed file of `len` bytes in `dir` (O_TMPFILE): a memfd on a chosen tmpfs, e.g. one
/// mounted with `huge=always`, which gives the DRAM frames 2 MiB pages.
pub fn tmpfile_in(dir: &Path, len: u64) -> Result<OwnedFd> {
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| FlacError::Invalid("dram_dir contains NUL".into()))?;
    // SAFETY: open with a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        return Err(FlacError::last_os(format!("creating the DRAM frame file in {}", dir.display())));
    }
    // SAFETY: fd was just returned by the kernel and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    truncate(&fd, len, "the DRAM frame file")?;
    Ok(fd)
}

pub fn truncate(fd: &impl AsRawFd, len: u64, what: &str) -> Result<()> {
    // SAFETY: ftruncate on an open descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(FlacError::last_os(format!("sizing {what} to {len} bytes")));
    }
    Ok(())
}

/// Fault in (allocate and clear) a shared mapping's pages now: tmpfs and memfd allocate and
/// clear pages on first touch, even after fallocate, and clearing a 2 MiB huge page takes
/// ~0.1 ms, which would land on whichever I/O touches it first.
///
/// # Safety
/// `addr..addr+len` must be a writable mapping the caller owns.
pub unsafe fn populate_write(addr: *mut u8, len: usize) {
    const MADV_POPULATE_WRITE: i32 = 23;
    // On failure (an old kernel) touch instead.
    unsafe {
        if libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE) != 0 {
            let mut at = 0;
            while at < len {
                std::ptr::write_volatile(addr.add(at), std::ptr::read_volatile(addr.add(at)));
                at += PAGE;
            }
        }
    }
}

/// The file system type (`statfs.f_type`) a descriptor lives on.
pub fn fs_magic(fd: RawFd) -> io::Result<i64> {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// Images this process holds (device, inode): a second open in the same process is refused
/// with a message that says so (flock would say "another process").
static HELD: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// Release a lock taken by [`lock_exclusive`] (the file is being closed). The lock is dropped
/// explicitly: closing the descriptor releases it only with the last reference to the open
/// file, and a mapping of the image in a child forked meanwhile, or a reference the kernel
/// lets go of later, would keep the image locked after FLAC closed it.
pub fn release_lock(file: &File) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: flock on an open descriptor; unlocking a lock this process holds.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    if let Ok(m) = file.metadata() {
        HELD.lock().unwrap().retain(|&k| k != (m.dev(), m.ino()));
    }
}

/// Who holds a lock on the file (device, inode), from /proc/locks: "process 123 (python3)".
fn lock_holders(dev: u64, ino: u64) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else { return Vec::new() };
    // "1: FLOCK  ADVISORY  WRITE 4242 00:1a:12345 0 EOF" (major:minor in hex, inode in decimal)
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let mut id = f[5].split(':');
        let (Some(ma), Some(mi), Some(i)) = (id.next(), id.next(), id.next()) else { continue };
        let same = u32::from_str_radix(ma, 16).ok() == Some(major)
            && u32::from_str_radix(mi, 16).ok() == Some(minor)
            && i.parse::<u64>().ok() == Some(ino);
        if same {
            let pid = f[4];
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push(if comm.trim().is_empty() { format!("process {pid}") } else { format!("process {pid} ({})", comm.trim()) });
        }
    }
    out
}

/// Take an exclusive lock on `file`, waiting up to `wait_ms`.
pub fn lock_exclusive(file: &File, wait_ms: u64, what: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let key = file.metadata().map(|m| (m.dev(), m.ino())).map_err(|e| FlacError::io(format!("stat {what}"), e))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    loop {
        let mine = HELD.lock().unwrap().contains(&key);
        if !mine {
            // SAFETY: flock on an open descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                HELD.lock().unwrap().push(key);
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(FlacError::io(format!("locking {what}"), e));
            }
        }
        if std::time::Instant::now() >= deadline {
            return Err(FlacError::Busy(if mine {
                format!("{what} is already open in this process (FLAC buffers, e.g. numpy arrays on FLAC memory, keep it open until they are freed)")
            } else {
                let who = lock_holders(key.0, key.1);
                let who = if who.is_empty() { "another process".to_string() } else { who.join(", ") };
                format!("{what} is in use by {who} (FLAC images are opened by one process at a time)")
            }));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Populate page-table entries for `addr..addr+len` without writing (no copy-on-write break).
///
/// # Safety
/// The range must be mapped.
pub unsafe fn populate_read(addr: *mut u8, len: usize) {
    const MADV_POPULATE_READ: i32 = 22;
    libc::madvise(addr.cast(), len, MADV_POPULATE_READ);
}

fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP.get_or_init(|| File::open("/proc/self/pagemap").ok()).as_ref()
}

/// The physical frame number behind `va`, when the kernel shows it (needs CAP_SYS_ADMIN) and
/// the page is present; 0 otherwise. Used to check that a page the application got from FLAC
/// by a private mapping still shows FLAC's frame (not yet copied on write, not remapped).
pub fn pfn_of(va: usize) -> u64 {
    let Some(f) = pagemap() else { return 0 };
    let mut b = [0u8; 8];
    if f.read_exact_at(&mut b, (va / PAGE * 8) as u64).is_err() {
        return 0;
    }
    let e = u64::from_le_bytes(b);
    let present = e >> 63 & 1 == 1;
    if !present {
        return 0;
    }
    e & ((1u64 << 55) - 1)
}

/// The calling thread's id (for lock-owner assertions in the fault handler).
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Copy `len` bytes between non-overlapping regions.
///
/// # Safety
/// Both ranges must be valid for `len` bytes and not overlap.
#[inline]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_names_the_process_holding_it() {
        use std::os::unix::fs::MetadataExt;
        let f = tempfile::NamedTempFile::new().unwrap();
        let m = f.as_file().metadata().unwrap();
        assert!(lock_holders(m.dev(), m.ino()).is_empty());
        lock_exclusive(f.as_file(), 0, "the file").unwrap();
        let me = format!("process {} (", std::process::id());
        let held = lock_holders(m.dev(), m.ino());
        assert!(held.len() == 1 && held[0].starts_with(&me), "{held:?}");
        release_lock(f.as_file());
        assert!(lock_holders(m.dev(), m.ino()).is_empty());
    }
}
