//! The ways a user-space FlacFS can attach frames to an address, measured per attach and size
//! (the report's attach table): `mmap(MAP_FIXED)` of the frames' file range in one call (what
//! FLAC does for a contiguous run) and one call per 4 KiB page; `mremap` with
//! `MREMAP_FIXED | MREMAP_DONTUNMAP` of a mapping of the frames (moves the page-table entries;
//! the source stays mapped, empty); userfaultfd's `UFFDIO_MOVE` (Linux 6.8 and later; moves
//! private anonymous pages only, so a file's frames cannot be shared through it). Each figure
//! is the median over repeats of one attach, with and without touching every page after it.

use std::time::Instant;

use serde::Serialize;

use crate::error::{FlacError, Result};
use crate::sys::PAGE;

#[derive(Serialize)]
pub struct AltRow {
    pub bytes: usize,
    /// mmap(MAP_FIXED) of the whole range in one call: call only / with a touch of every page.
    pub mmap_batch_us: f64,
    pub mmap_batch_touch_us: f64,
    /// One mmap(MAP_FIXED) per 4 KiB page.
    pub mmap_per_page_us: f64,
    pub mmap_per_page_touch_us: f64,
    /// mremap(MREMAP_FIXED | MREMAP_DONTUNMAP) of a populated shared mapping.
    pub mremap_us: Option<f64>,
    pub mremap_touch_us: Option<f64>,
    /// UFFDIO_MOVE of populated anonymous pages (None: the kernel lacks it).
    pub uffd_move_us: Option<f64>,
    pub uffd_move_touch_us: Option<f64>,
    /// memcpy of the same bytes (the copy attach replaces).
    pub memcpy_us: f64,
}

#[derive(Serialize)]
pub struct AltReport {
    pub kernel: String,
    pub uffd_move: bool,
    /// Why UFFDIO_MOVE was not measured, when it was not.
    pub uffd_note: String,
    pub rows: Vec<AltRow>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn oserr(what: &str) -> FlacError {
    FlacError::io(what, std::io::Error::last_os_error())
}

unsafe fn touch(p: *mut u8, len: usize) {
    let mut s = 0u8;
    for off in (0..len).step_by(PAGE) {
        s = s.wrapping_add(std::ptr::read_volatile(p.add(off)));
    }
    std::hint::black_box(s);
}

unsafe fn anon(len: usize) -> Result<*mut u8> {
    let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
    if p == libc::MAP_FAILED {
        return Err(oserr("mmap"));
    }
    Ok(p.cast())
}

/// Time `f` (one attach) `reps` times, `prep` before each outside the timing; (call, call + touch).
unsafe fn timed(
    reps: usize,
    dst: *mut u8,
    len: usize,
    mut prep: impl FnMut() -> Result<()>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    let (mut call, mut with) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        prep()?;
        let t0 = Instant::now();
        f()?;
        let t1 = Instant::now();
        touch(dst, len);
        let t2 = Instant::now();
        call.push((t1 - t0).as_secs_f64() * 1e6);
        with.push((t2 - t0).as_secs_f64() * 1e6);
    }
    Ok((median(call), median(with)))
}

const UFFDIO: u64 = 0xAA;
const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (UFFDIO << 8) | nr
}
const UFFDIO_API: u64 = iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = iowr(0x00, 32);
const UFFDIO_MOVE: u64 = iowr(0x05, 40);
const UFFD_FEATURE_MOVE: u64 = 1 << 16;

/// A userfaultfd with UFFDIO_MOVE, registered on `dst..dst+len` (None + why if not available).
unsafe fn uffd_for(dst: *mut u8, len: usize) -> std::result::Result<i32, String> {
    const UFFD_USER_MODE_ONLY: i32 = 1;
    let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY) as i32;
    if fd < 0 {
        return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()));
    }
    let mut api = [0xAAu64, UFFD_FEATURE_MOVE, 0];
    if libc::ioctl(fd, UFFDIO_API as _, api.as_mut_ptr()) < 0 || api[1] & UFFD_FEATURE_MOVE == 0 {
        libc::close(fd);
        return Err("this kernel's userfaultfd has no UFFDIO_MOVE (Linux 6.8 and later)".into());
    }
    // struct uffdio_register { start, len, mode, ioctls }: mode MISSING = 1.
    let mut reg = [dst as u64, len as u64, 1u64, 0u64];
    if libc::ioctl(fd, UFFDIO_REGISTER as _, reg.as_mut_ptr()) < 0 {
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        return Err(format!("UFFDIO_REGISTER: {e}"));
    }
    Ok(fd)
}

/// Measure every alternative at each size (`reps` attaches each).
pub fn measure(sizes: &[usize], reps: usize) -> Result<AltReport> {
    let max = sizes.iter().copied().max().unwrap_or(PAGE).next_multiple_of(PAGE);
    let reps = reps.max(3);
    let fd = crate::sys::memfd("attach-alt", max as u64)?;
    let fdn = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    // SAFETY: every mapping below is this function's own and unmapped before it returns.
    unsafe {
        let src = anon(max)?;
        crate::sys::map_shared_fixed(src, max, libc::PROT_READ | libc::PROT_WRITE, fdn, 0).map_err(|e| FlacError::io("mmap", e))?;
        crate::sys::populate_write(src, max);
        let dst = anon(max)?;
        let asrc = anon(max)?;
        let udst = anon(max)?;
        let uffd = uffd_for(udst, max);
        let mut rows = Vec::new();
        let r = (|| -> Result<()> {
            for &len in sizes {
                let len = len.next_multiple_of(PAGE);
                let map = |p: *mut u8, n: usize, off: usize| -> Result<()> {
                    crate::sys::map_shared_fixed(p, n, libc::PROT_READ, fdn, off as u64).map_err(|e| FlacError::io("mmap", e))
                };
                let (mb, mbt) = timed(reps, dst, len, || Ok(()), || map(dst, len, 0))?;
                let (mp, mpt) = timed(reps, dst, len, || Ok(()), || (0..len).step_by(PAGE).try_for_each(|o| map(dst.add(o), PAGE, o)))?;
                let mremap = timed(
                    reps,
                    dst,
                    len,
                    || {
                        crate::sys::populate_read(src, len);
                        Ok(())
                    },
                    || {
                        const MREMAP_DONTUNMAP: i32 = 4;
                        let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | MREMAP_DONTUNMAP;
                        let p = libc::mremap(src.cast(), len, len, flags, dst as *mut libc::c_void);
                        if p == libc::MAP_FAILED {
                            return Err(oserr("mremap"));
                        }
                        Ok(())
                    },
                )
                .ok();
                let uffd_move = match &uffd {
                    &Ok(ufd) => timed(
                        reps,
                        udst,
                        len,
                        || {
                            libc::madvise(udst.cast(), len, libc::MADV_DONTNEED);
                            crate::sys::populate_write(asrc, len);
                            Ok(())
                        },
                        || {
                            // struct uffdio_move { dst, src, len, mode, move }
                            let mut mv = [udst as u64, asrc as u64, len as u64, 0u64, 0u64];
                            if libc::ioctl(ufd, UFFDIO_MOVE as _, mv.as_mut_ptr()) < 0 {
                                return Err(oserr("UFFDIO_MOVE"));
                            }
                            Ok(())
                        },
                    )
                    .ok(),
                    Err(_) => None,
                };
                let buf = vec![1u8; len];
                let mut out = vec![0u8; len];
                let mut cp = Vec::new();
                for _ in 0..reps {
                    let t0 = Instant::now();
                    crate::sys::copy(out.as_mut_ptr(), buf.as_ptr(), len);
                    cp.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                std::hint::black_box(&out);
                rows.push(AltRow {
                    bytes: len,
                    mmap_batch_us: mb,
                    mmap_batch_touch_us: mbt,
                    mmap_per_page_us: mp,
                    mmap_per_page_touch_us: mpt,
                    mremap_us: mremap.map(|x| x.0),
                    mremap_touch_us: mremap.map(|x| x.1),
                    uffd_move_us: uffd_move.map(|x| x.0),
                    uffd_move_touch_us: uffd_move.map(|x| x.1),
                    memcpy_us: median(cp),
                });
            }
            Ok(())
        })();
        if let Ok(u) = uffd {
            libc::close(u);
        }
        for p in [src, dst, asrc, udst] {
            libc::munmap(p.cast(), max);
        }
        r?;
        let uffd_note = match &uffd {
            Ok(_) => String::new(),
            Err(e) => e.clone(),
        };
        Ok(AltReport { kernel, uffd_move: uffd.is_ok(), uffd_note, rows })
    }
}
