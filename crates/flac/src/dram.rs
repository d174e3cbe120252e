//! The DRAM tier: a memfd (or an unnamed file on a chosen tmpfs) of `dram_bytes`, so DRAM
//! frames can be mapped anywhere like PM frames. The whole file is also mapped once, the
//! "window": FLAC reads and writes frames through it (the kernel's direct map), never through
//! the protected views the application sees.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::error::{FlacError, Result};
use crate::sys::{self, HUGE, PAGE};

pub struct Dram {
    fd: OwnedFd,
    window: *mut u8,
    frames: usize,
    pub on_tmpfs_dir: bool,
}

// SAFETY: the window is a shared mapping owned by this struct; frame ownership is arbitrated
// by FLAC's reference counts.
unsafe impl Send for Dram {}
unsafe impl Sync for Dram {}

impl Dram {
    pub fn new(bytes: u64, dir: Option<&Path>, prefault: bool) -> Result<Dram> {
        if bytes < HUGE as u64 || !bytes.is_multiple_of(HUGE as u64) {
            return Err(FlacError::Invalid(format!("dram_bytes must be a positive multiple of 2 MiB, got {bytes}")));
        }
        let fd = match dir {
            Some(d) => sys::tmpfile_in(d, bytes)?,
            None => sys::memfd("flac-dram", bytes)?,
        };
        let len = bytes as usize;
        let window = sys::reserve(len, HUGE)?;
        // SAFETY: mapping the frame file over the reservation just made.
        unsafe { sys::map_shared_fixed(window, len, sys::PROT_RW, fd.as_raw_fd(), 0) }
            .map_err(|e| FlacError::io("mapping the DRAM frame window", e))?;
        sys::advise_huge(window, len);
        if prefault {
            // SAFETY: the window mapped above.
            unsafe { sys::populate_write(window, len) };
        }
        Ok(Dram { fd, window, frames: len / PAGE, on_tmpfs_dir: dir.is_some() })
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    #[inline]
    pub fn frame_ptr(&self, f: u32) -> *mut u8 {
        debug_assert!((f as usize) < self.frames);
        // SAFETY: inside the window.
        unsafe { self.window.add(f as usize * PAGE) }
    }

    #[inline]
    pub fn frame_off(&self, f: u32) -> u64 {
        f as u64 * PAGE as u64
    }
}

impl Drop for Dram {
    fn drop(&mut self) {
        // SAFETY: the window mapped in `new`.
        unsafe { sys::unmap(self.window, self.frames * PAGE) };
    }
}
