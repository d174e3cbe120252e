//! FLAC buffers: application memory backed by DRAM frames (so it can be attached without
//! copying), protected when its frames are shared, and its copy-on-write faults.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::table::{bent_loc, loc_bits, B_LOCKED, B_RO};
use super::view::map_error;
use super::{BufMeta, Core, Flac, Inner, Loc, Region, ZERO_FRAME};
use crate::error::{FlacError, Result};
use crate::sys::{self, HUGE, HUGE_PAGES, PAGE};

/// Memory FLAC manages for an application: pages backed by DRAM frames, so data in it can be
/// attached to the FLAC space (and from it) without copying. After a page is shared it is
/// read-only until written, when it gets a private frame (copy-on-write).
pub struct Buffer {
    flac: Arc<Flac>,
    base: *mut u8,
    len: usize,
    pages: usize,
}

// SAFETY: the buffer's memory is owned by it; FLAC's bookkeeping is behind FLAC's lock.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer's pages are mapped readable for its lifetime.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// The buffer's bytes, writable (a write to a shared page copies it first).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; writes to read-only pages are resolved by the fault handler.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// Give every shared page of the buffer a private frame now, so system calls may write
    /// into it (a read-only page makes them fail with EFAULT: the fault handler only sees
    /// the application's own writes).
    pub fn unshare(&self) -> Result<()> {
        self.flac.unshare_buffer(self.base as usize, self.pages)
    }

    pub fn flac(&self) -> &Arc<Flac> {
        &self.flac
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.flac.free_buffer(self.base as usize, self.pages);
    }
}

impl Inner {
    fn buf_index(c: &Core, base: usize) -> usize {
        c.bufs.binary_search_by(|b| b.base.cmp(&base)).expect("registered buffer")
    }

    /// Protect the buffer pages `[i, i + n)` of buffer `b` that are writable (their frames are
    /// about to be shared).
    pub(super) fn buf_protect(&self, c: &mut Core, b: usize, i: usize, n: usize) -> Result<()> {
        let base = c.bufs[b].base;
        let mut k = i;
        while k < i + n {
            if c.bufs[b].ents[k] & B_RO != 0 || bent_loc(c.bufs[b].ents[k]).is_none() {
                k += 1;
                continue;
            }
            let mut j = k;
            while j < i + n && c.bufs[b].ents[j] & B_RO == 0 && bent_loc(c.bufs[b].ents[j]).is_some() {
                c.bufs[b].ents[j] |= B_RO;
                j += 1;
            }
            // SAFETY: pages of a registered buffer.
            unsafe { sys::protect((base + k * PAGE) as *mut u8, (j - k) * PAGE, sys::PROT_R) }
                .map_err(|e| FlacError::io("write-protecting buffer pages", e))?;
            self.stats.protect_calls.fetch_add(1, Ordering::Relaxed);
            k = j;
        }
        Ok(())
    }

    pub(super) fn buffer_fault(&self, c: &mut Core, page: usize) -> Result<bool> {
        let b = match Inner::region(c, page, self.space_bounds()) {
            Region::Buffer(b) => b,
            _ => return Ok(false),
        };
        let i = (page - c.bufs[b].base) / PAGE;
        let e = c.bufs[b].ents[i];
        if e & B_LOCKED != 0 || e & B_RO == 0 {
            return Ok(false);
        }
        self.stats.cow_faults.fetch_add(1, Ordering::Relaxed);
        let old = bent_loc(e).expect("read-only buffer pages hold a frame");
        if let Loc::Dram(f) = old {
            if f != ZERO_FRAME && c.dram.refs(f) == 1 {
                // Nobody else holds the frame any more: just make it writable again.
                // SAFETY: a registered buffer page.
                unsafe { sys::protect(page as *mut u8, PAGE, sys::PROT_RW) }.map_err(|e| FlacError::io("unprotecting a buffer page", e))?;
                self.stats.protect_calls.fetch_add(1, Ordering::Relaxed);
                c.bufs[b].ents[i] = e & !B_RO;
                self.forget_persisted(c, f);
                return Ok(true);
            }
        }
        // Copy-on-write around the fault: the following pages of the buffer that are shared
        // too are copied with it, into consecutive frames mapped by one call (an application
        // filling its buffer writes them next; one fault instead of one per page).
        let window = self.cfg.cow_window_pages.max(1);
        let ents = &c.bufs[b].ents;
        let mut n = 1;
        while n < window && i + n < ents.len() {
            let e2 = ents[i + n];
            let shared = e2 & B_RO != 0
                && e2 & B_LOCKED == 0
                && match bent_loc(e2) {
                    Some(Loc::Dram(f)) => f == ZERO_FRAME || c.dram.refs(f) > 1,
                    Some(Loc::Pm(_)) => true,
                    None => false,
                };
            if !shared {
                break;
            }
            n += 1;
        }
        let mut run = c.dram.alloc_run(n, 1);
        if run.is_none() {
            self.evict(c, n + c.dram.nframes() / 32)?;
            run = c.dram.alloc_run(n, 1);
        }
        let fresh = match run.map(|f| (f..f + n as u32).collect::<Vec<_>>()) {
            Some(v) => v,
            None => match self.alloc_dram(c, 1, false) {
                Ok(v) => {
                    n = 1;
                    v
                }
                Err(_) => {
                    // DRAM is full of dirty pages: the page becomes private anonymous memory
                    // (it can still be attached later, by copying).
                    // SAFETY: a readable buffer page.
                    if !unsafe { crate::cow::private_copy(page) } {
                        return Ok(false);
                    }
                    self.decref(c, old);
                    c.bufs[b].ents[i] = 0;
                    return Ok(true);
                }
            },
        };
        for (k, &new) in fresh.iter().enumerate() {
            let old = bent_loc(c.bufs[b].ents[i + k]).expect("shared buffer pages hold a frame");
            // SAFETY: `new` is a fresh frame; `old` is held by the buffer page.
            unsafe {
                match old {
                    Loc::Dram(f) => sys::copy(self.dram.frame_ptr(new), self.dram.frame_ptr(f), PAGE),
                    Loc::Pm(p) => self.pm.read_frame(p, 0, self.dram.frame_ptr(new), PAGE),
                }
            }
            self.decref(c, old);
            c.bufs[b].ents[i + k] = loc_bits(Loc::Dram(new));
        }
        // SAFETY: pages of a registered buffer; the frames are consecutive.
        unsafe { sys::map_shared_fixed(page as *mut u8, n * PAGE, sys::PROT_RW, self.dram.fd(), self.dram.frame_off(fresh[0])) }
            .map_err(|e| map_error(e, n * PAGE))?;
        self.stats.cow_copies.fetch_add(n as u64, Ordering::Relaxed);
        self.stats.map_calls.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

impl Flac {
    /// Allocate a FLAC buffer of `len` bytes (zeroed).
    pub fn alloc_buffer(self: &Arc<Flac>, len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(FlacError::Invalid("alloc_buffer: length 0".into()));
        }
        let pages = len.div_ceil(PAGE);
        let base = sys::reserve(pages * PAGE, if pages >= HUGE_PAGES { HUGE } else { PAGE })?;
        let frames = {
            let mut c = self.lock();
            self.alloc_dram(&mut c, pages, true)
        };
        let frames = match frames {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the reservation made above.
                unsafe { sys::unmap(base, pages * PAGE) };
                return Err(e);
            }
        };
        for &f in &frames {
            // SAFETY: fresh frames owned by this buffer.
            unsafe { std::ptr::write_bytes(self.dram.frame_ptr(f), 0, PAGE) };
        }
        let locs: Vec<Option<Loc>> = frames.iter().map(|&f| Some(Loc::Dram(f))).collect();
        let mut c = self.lock();
        // SAFETY: the buffer's reservation; not yet visible to anyone.
        if let Err(e) = unsafe { self.map_locs(base as usize, &locs, sys::PROT_RW, false) } {
            for &f in &frames {
                self.decref(&mut c, Loc::Dram(f));
            }
            drop(c);
            // SAFETY: as above.
            unsafe { sys::unmap(base, pages * PAGE) };
            return Err(e);
        }
        let meta = BufMeta { base: base as usize, ents: frames.iter().map(|&f| loc_bits(Loc::Dram(f))).collect() };
        let at = c.bufs.binary_search_by(|b| b.base.cmp(&meta.base)).unwrap_err();
        c.bufs.insert(at, meta);
        self.buf_lo.fetch_min(base as usize, Ordering::Relaxed);
        self.buf_hi.fetch_max(base as usize + pages * PAGE, Ordering::Relaxed);
        Ok(Buffer { flac: self.clone(), base, len, pages })
    }

    fn free_buffer(&self, base: usize, pages: usize) {
        let mut c = self.lock();
        let i = Inner::buf_index(&c, base);
        let meta = c.bufs.remove(i);
        for e in meta.ents {
            if let Some(l) = bent_loc(e) {
                self.decref(&mut c, l);
            }
        }
        drop(c);
        // SAFETY: the buffer's range; the buffer is gone.
        unsafe { sys::unmap(base as *mut u8, pages * PAGE) };
    }

    fn unshare_buffer(&self, base: usize, pages: usize) -> Result<()> {
        let mut c = self.lock();
        let b = Inner::buf_index(&c, base);
        for i in 0..pages {
            if c.bufs[b].ents[i] & B_RO != 0 && c.bufs[b].ents[i] & B_LOCKED == 0 {
                self.buffer_fault(&mut c, base + i * PAGE)?;
            }
        }
        Ok(())
    }
}
