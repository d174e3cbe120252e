//! Moving bytes between memory and the space: the zcopy and copy calls, `attach`, the partial
//! pages at either end of a transfer (copied through the frames), and pages lent to
//! application memory.

use std::sync::atomic::Ordering;

use super::table::{ent_kind, K_COMMITTED};
use super::{AttachMode, Flac, Loc, Xfer};
use crate::error::{FlacError, Result};
use crate::sys::{self, PAGE};

impl Flac {
    /// Move `len` bytes from `from` (any readable memory) to `to` in the FLAC space: whole
    /// pages whose offsets match are attached (frames shared copy-on-write, or copied once
    /// into a frame if the source is not FLAC memory), the rest is copied.
    pub fn zcopy_to_flac(&self, to: usize, from: *const u8, len: usize) -> Result<Xfer> {
        self.mem_to_flac(to, from as usize, len, false)
    }

    /// Like [`Flac::zcopy_to_flac`] but always copying (the copying baseline of a transfer).
    pub fn copy_to_flac(&self, to: usize, from: *const u8, len: usize) -> Result<Xfer> {
        self.mem_to_flac(to, from as usize, len, true)
    }

    /// Move `len` bytes from `from` in the FLAC space to `to` (any writable memory): whole
    /// pages are attached (a FLAC buffer gets shared read-only pages, other memory private
    /// ones the kernel copies on write), the rest is copied. `mode` ReadOnly maps the pages
    /// read-only for good.
    pub fn zcopy_from_flac(&self, to: *mut u8, from: usize, len: usize, mode: AttachMode) -> Result<Xfer> {
        self.flac_to_mem(to as usize, from, len, mode, false)
    }

    /// Like [`Flac::zcopy_from_flac`] but always copying.
    pub fn copy_from_flac(&self, to: *mut u8, from: usize, len: usize) -> Result<Xfer> {
        self.flac_to_mem(to as usize, from, len, AttachMode::Cow, true)
    }

    /// Map `len` bytes (whole pages) of `from` at `to`, sharing the frames copy-on-write.
    /// `to` and `from` are FLAC-space addresses or FLAC buffers (or, as destination, any
    /// memory the caller hands over).
    pub fn attach(&self, to: usize, from: usize, len: usize, mode: AttachMode) -> Result<Xfer> {
        if !to.is_multiple_of(PAGE) || !from.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(FlacError::Invalid(format!("attach: {to:#x} <- {from:#x} +{len}: addresses and length must be page-aligned")));
        }
        if self.in_space(to) && mode != AttachMode::Cow {
            return Err(FlacError::Invalid("attach: FLAC-space destinations are copy-on-write".into()));
        }
        self.transfer(to, from, len / PAGE, mode, false)
    }

    fn mem_to_flac(&self, to: usize, from: usize, len: usize, force_copy: bool) -> Result<Xfer> {
        self.check_space(to, len, "zcopy_to_flac destination")?;
        let mut x = Xfer::default();
        if len == 0 {
            return Ok(x);
        }
        // Whole destination pages get whole frames (attached when the source is aligned alike,
        // otherwise copied into fresh frames), partial ones are written in place.
        let aligned = to % PAGE == from % PAGE;
        let (head, body, tail) = split(to, to, len);
        if head > 0 {
            x.add(self.write_partial(to, from, head)?);
        }
        if body > 0 {
            x.add(self.transfer(to + head, from + head, body / PAGE, AttachMode::Cow, force_copy || !aligned)?);
        }
        if tail > 0 {
            x.add(self.write_partial(to + head + body, from + head + body, tail)?);
        }
        Ok(x)
    }

    fn flac_to_mem(&self, to: usize, from: usize, len: usize, mode: AttachMode, force_copy: bool) -> Result<Xfer> {
        self.check_space(from, len, "zcopy_from_flac source")?;
        if self.in_space(to) {
            return self.mem_to_flac(to, from, len, force_copy);
        }
        let mut x = Xfer::default();
        if len == 0 {
            return Ok(x);
        }
        let (head, body, tail) = split(to, from, len);
        if head > 0 {
            x.add(self.read_partial(to, from, head)?);
        }
        if body > 0 {
            if force_copy {
                x.add(self.read_partial(to + head, from + head, body)?);
            } else {
                x.add(self.transfer(to + head, from + head, body / PAGE, mode, false)?);
            }
        }
        if tail > 0 {
            x.add(self.read_partial(to + head + body, from + head + body, tail)?);
        }
        Ok(x)
    }

    /// Copy `len` bytes from `from` into the space at `to` through the pages' frames.
    fn write_partial(&self, to: usize, from: usize, len: usize) -> Result<Xfer> {
        let mut done = 0;
        while done < len {
            let a = to + done;
            let vpn = self.vpn_of(a);
            let off = a % PAGE;
            let n = (PAGE - off).min(len - done);
            let f = {
                let mut c = self.lock();
                self.page_for_write(&mut c, vpn)?
            };
            // SAFETY: f is the page's private DRAM frame; the source is readable memory. The
            // copy is made without the lock (the source may be a protected page that faults).
            unsafe { sys::copy(self.dram.frame_ptr(f).add(off), (from + done) as *const u8, n) };
            done += n;
        }
        self.stats.copied_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Xfer { copied_bytes: len as u64, ..Xfer::default() })
    }

    /// Copy `len` bytes of the space at `from` to `to`, page by page (a miss is served from
    /// PM and the page is loaded into DRAM as the configuration says).
    fn read_partial(&self, to: usize, from: usize, len: usize) -> Result<Xfer> {
        let mut x = Xfer { copied_bytes: len as u64, ..Xfer::default() };
        let mut done = 0;
        while done < len {
            let a = from + done;
            let vpn = self.vpn_of(a);
            let off = a % PAGE;
            let n = (PAGE - off).min(len - done);
            let loc = {
                let mut c = self.lock();
                let cur = self.current(&c, vpn);
                match cur {
                    Some(l @ Loc::Dram(f)) => {
                        c.referenced[f as usize / 64] |= 1 << (f % 64);
                        self.incref(&mut c, l);
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(l @ Loc::Pm(_)) => {
                        self.incref(&mut c, l);
                        self.stats.misses.fetch_add(1, Ordering::Relaxed);
                        x.pm_pages += 1;
                        if ent_kind(c.vpt[vpn as usize]) == K_COMMITTED {
                            self.queue_load(&mut c, vpn, 1);
                        }
                    }
                    None => {}
                }
                cur
            };
            // SAFETY: the frame is held by the reference taken above; `to` is writable memory.
            unsafe {
                match loc {
                    None => std::ptr::write_bytes((to + done) as *mut u8, 0, n),
                    Some(Loc::Dram(f)) => sys::copy((to + done) as *mut u8, self.dram.frame_ptr(f).add(off), n),
                    Some(Loc::Pm(p)) => self.pm.read_frame(p, off, (to + done) as *mut u8, n),
                }
            }
            if let Some(l) = loc {
                let mut c = self.lock();
                self.decref(&mut c, l);
            }
            done += n;
        }
        self.stats.copied_bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.kick_loader();
        Ok(x)
    }

    /// Release lent pages the application no longer maps (it wrote them, so the kernel gave
    /// it a private copy, or it unmapped them). Returns how many were released.
    pub fn reclaim_lends(&self) -> usize {
        let mut c = self.lock();
        let stale: Vec<(usize, Loc)> =
            c.lends.iter().filter(|(&va, &l)| !lent_page_intact(va, self.loc_ptr(l) as usize)).map(|(&a, &l)| (a, l)).collect();
        for &(va, l) in &stale {
            c.lends.remove(&va);
            self.decref(&mut c, l);
        }
        self.stats.lends_released.fetch_add(stale.len() as u64, Ordering::Relaxed);
        stale.len()
    }
}

/// Whether the application page at `va` still maps the frame whose window page is at
/// `window` (same physical page: not copied on write, not remapped). Without access to
/// physical frame numbers (no CAP_SYS_ADMIN) nothing is trusted and the page is copied.
pub(super) fn lent_page_intact(va: usize, window: usize) -> bool {
    let a = sys::pfn_of(va);
    a != 0 && a == sys::pfn_of(window)
}

/// Split a transfer into a partial head, whole pages and a partial tail (by the destination's
/// alignment; if source and destination are not aligned alike, everything is copied).
fn split(to: usize, from: usize, len: usize) -> (usize, usize, usize) {
    if to % PAGE != from % PAGE {
        return (len, 0, 0);
    }
    let head = ((PAGE - to % PAGE) % PAGE).min(len);
    let body = (len - head) / PAGE * PAGE;
    (head, body, len - head - body)
}
