//! Figures for `scripts/bench-flac.py`: attach against memcpy from 4 KiB to 2 MiB (measured
//! side by side in one run), and what page faults and remapping cost per page on this
//! machine (they decide where zero-copy wins).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::flac::{AttachMode, Flac};
use crate::sys::{self, PAGE};

#[derive(Clone, Debug, Serialize)]
pub struct AttachRow {
    pub bytes: usize,
    /// memcpy between two warm DRAM buffers (µs per transfer).
    pub memcpy_us: f64,
    /// The DAX-style path: memcpy into PM at PM's write cost.
    pub copy_to_pm_us: f64,
    /// Attach an application (FLAC) buffer into the FLAC space.
    pub attach_to_space_us: f64,
    /// Attach FLAC-space pages into an application buffer (its page tables fill on use).
    pub attach_to_buffer_us: f64,
    /// The same, then one load per page (page-table entries filled).
    pub attach_to_buffer_touch_us: f64,
    pub memcpy_over_attach_to_buffer: f64,
    pub memcpy_over_attach_touch: f64,
    pub copy_to_pm_over_attach_touch: f64,
}

fn time_per<F: FnMut(usize)>(reps: usize, mut f: F) -> f64 {
    // Best of three rounds: the machine is shared; the minimum is the cost without noise.
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        for i in 0..reps {
            f(i);
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e6 / reps as f64);
    }
    best
}

fn touch(p: *const u8, len: usize) -> u64 {
    let mut s = 0u64;
    let mut at = 0;
    while at < len {
        // SAFETY: inside the mapping.
        s = s.wrapping_add(unsafe { std::ptr::read_volatile(p.add(at)) } as u64);
        at += PAGE;
    }
    s
}

/// Attach vs memcpy for each size (bytes, multiples of 4096).
pub fn attach_vs_memcpy(flac: &Arc<Flac>, sizes: &[usize], budget_bytes: usize) -> Result<Vec<AttachRow>> {
    let max = *sizes.iter().max().unwrap_or(&PAGE);
    let mut out = Vec::new();
    let src = flac.alloc_buffer(max)?;
    // SAFETY: the buffer is writable.
    unsafe { std::ptr::write_bytes(src.as_ptr(), 7, max) };
    let dst = flac.alloc_buffer(max)?;
    // memcpy's source rotates through 256 MiB, so it comes from memory, not the CPU caches
    // (as file data does).
    let span = (256usize << 20).max(max * 2);
    let plain_a = crate::apps::IoBufPlain::new(span)?;
    let plain_b = crate::apps::IoBufPlain::new(max)?;
    // SAFETY: plain memory, writable.
    unsafe {
        std::ptr::write_bytes(plain_a.ptr, 3, span);
        std::ptr::write_bytes(plain_b.ptr, 4, max);
    }
    // The space is used from page 0 upward; each size gets its own slots.
    let slot_pages = max.div_ceil(sys::HUGE) * sys::HUGE_PAGES;
    let slots = 16;
    let pm_frames = flac.pm.alloc_frames(max / PAGE, true)?;
    for &n in sizes {
        assert!(n % PAGE == 0 && n > 0);
        let reps = (budget_bytes / n).clamp(8, 4096);
        let slots_a = span / n;
        let memcpy_us = time_per(reps, |i| {
            // SAFETY: plain_a holds span bytes, plain_b max >= n.
            unsafe { sys::copy(plain_b.ptr, plain_a.ptr.add((i * 7919 % slots_a) * n), n) };
            std::hint::black_box(plain_b.ptr);
        });
        let copy_to_pm_us = time_per(reps, |_| {
            let t = flac.pm.lanes.write(n as u64);
            for (k, &f) in pm_frames.iter().take(n / PAGE).enumerate() {
                // SAFETY: frames allocated above; source holds n bytes.
                unsafe { sys::copy(flac.pm.frame_ptr(f), plain_a.ptr.add(k * PAGE), PAGE) };
            }
            flac.pm.lanes.wait(t);
        });
        let attach_to_space_us = time_per(reps, |i| {
            let to = flac.addr(((i % slots) * slot_pages) as u64);
            flac.zcopy_to_flac(to, src.as_ptr(), n).unwrap();
        });
        // Source pages in the space for the reverse direction: attach once, then map them
        // into the destination buffer again and again.
        let from = flac.addr(0);
        flac.zcopy_to_flac(from, src.as_ptr(), n)?;
        let attach_to_buffer_us = time_per(reps, |_| {
            flac.zcopy_from_flac(dst.as_ptr(), from, n, AttachMode::Cow).unwrap();
        });
        let attach_to_buffer_touch_us = time_per(reps, |_| {
            flac.zcopy_from_flac(dst.as_ptr(), from, n, AttachMode::Cow).unwrap();
            std::hint::black_box(touch(dst.as_ptr(), n));
        });
        for s in 0..slots {
            flac.pdiscard(flac.addr((s * slot_pages) as u64), slot_pages * PAGE)?;
        }
        out.push(AttachRow {
            bytes: n,
            memcpy_us,
            copy_to_pm_us,
            attach_to_space_us,
            attach_to_buffer_us,
            attach_to_buffer_touch_us,
            memcpy_over_attach_to_buffer: memcpy_us / attach_to_buffer_us,
            memcpy_over_attach_touch: memcpy_us / attach_to_buffer_touch_us,
            copy_to_pm_over_attach_touch: copy_to_pm_us / attach_to_buffer_touch_us,
        });
    }
    for f in pm_frames {
        flac.pm.decref(f);
    }
    Ok(out)
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultCosts {
    /// A write to a shared FLAC buffer page: signal, page copy, remap (µs per page).
    pub cow_fault_us: f64,
    /// The first load of a FLAC-space page through the on-demand view (µs per page; the
    /// handler maps up to 2 MiB around the fault).
    pub view_fault_us: f64,
    /// Mapping scattered frames into a buffer, one `mmap` each (µs per page).
    pub remap_scattered_us: f64,
    /// Mapping 512 consecutive frames with one `mmap`, then touching them (µs per page).
    pub remap_run_touch_us: f64,
    /// Kernel references on this machine: first touch of anonymous memory, mprotect of a
    /// populated page, an mmap + munmap pair (µs).
    pub anon_fault_us: f64,
    pub mprotect_us: f64,
    pub mmap_munmap_us: f64,
}

/// Per-page costs of faults and remapping (pages: how many to average over).
pub fn fault_costs(flac: &Arc<Flac>, pages: usize) -> Result<FaultCosts> {
    let pages = pages.max(64);
    let n = pages * PAGE;
    let mut c = FaultCosts::default();
    // Copy-on-write faults.
    let mut b = flac.alloc_buffer(n)?;
    b.as_mut_slice().fill(1);
    flac.zcopy_to_flac(flac.addr(0), b.as_ptr(), n)?;
    let t0 = Instant::now();
    for p in 0..pages {
        b.as_mut_slice()[p * PAGE] = 2;
    }
    c.cow_fault_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    // View faults.
    flac.use_view();
    let t0 = Instant::now();
    std::hint::black_box(touch(flac.addr(0) as *const u8, n));
    c.view_fault_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    // Scattered frames: every other page of a range, attached page by page.
    let spread = flac.alloc_buffer(2 * n)?;
    for p in 0..pages {
        flac.zcopy_to_flac(flac.addr((4 * pages + p) as u64), spread.as_ptr().wrapping_add(2 * p * PAGE), PAGE)?;
    }
    let dst = flac.alloc_buffer(n)?;
    let t0 = Instant::now();
    flac.zcopy_from_flac(dst.as_ptr(), flac.addr(4 * pages as u64), n, AttachMode::Cow)?;
    std::hint::black_box(touch(dst.as_ptr(), n));
    c.remap_scattered_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    let t0 = Instant::now();
    flac.zcopy_from_flac(dst.as_ptr(), flac.addr(0), n, AttachMode::Cow)?;
    std::hint::black_box(touch(dst.as_ptr(), n));
    c.remap_run_touch_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    flac.pdiscard(flac.addr(0), n)?;
    flac.pdiscard(flac.addr(4 * pages as u64), n)?;
    // Kernel references.
    let a = crate::apps::IoBufPlain::new(n)?;
    let t0 = Instant::now();
    // SAFETY: fresh anonymous memory, n bytes.
    unsafe {
        for p in 0..pages {
            *a.ptr.add(p * PAGE) = 1;
        }
    }
    c.anon_fault_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    let t0 = Instant::now();
    // SAFETY: a's pages, populated above.
    unsafe {
        for p in 0..pages {
            let _ = sys::protect(a.ptr.add(p * PAGE), PAGE, sys::PROT_R);
        }
    }
    c.mprotect_us = t0.elapsed().as_secs_f64() * 1e6 / pages as f64;
    let t0 = Instant::now();
    for _ in 0..256 {
        let r = sys::reserve(PAGE, PAGE)?;
        // SAFETY: the reservation just made.
        unsafe { sys::unmap(r, PAGE) };
    }
    c.mmap_munmap_us = t0.elapsed().as_secs_f64() * 1e6 / 256.0;
    Ok(c)
}
