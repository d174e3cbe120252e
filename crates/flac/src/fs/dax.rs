//! The DAX-style baseline (like ext4-DAX or NOVA): no DRAM cache; reads copy from PM to the
//! application, writes copy from the application to PM (in place when the page's frame is
//! the file's alone, into a fresh frame otherwise), every byte at PM's cost.

use std::sync::{Arc, Mutex};

use super::blocks::Overlay;
use super::engine::{Engine, EngineKind, Staged};
use crate::error::Result;
use crate::flac::Xfer;
use crate::pm::log::Tx;
use crate::pm::Pm;
use crate::sys::PAGE;

pub struct DaxEngine {
    pm: Arc<Pm>,
    ov: Mutex<Overlay>,
}

impl DaxEngine {
    pub fn new(pm: Arc<Pm>) -> DaxEngine {
        DaxEngine { pm, ov: Mutex::new(Overlay::default()) }
    }

    fn ov(&self) -> std::sync::MutexGuard<'_, Overlay> {
        self.ov.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Page `v`'s frame with a reference held for the caller.
    fn frame_ref(&self, v: u64) -> Option<u32> {
        let ov = self.ov();
        let f = ov.frame(&self.pm, v);
        if let Some(f) = f {
            self.pm.incref(f);
        }
        f
    }

    /// Write `n` bytes at `off` of page `v` from `src`.
    fn write_page(&self, v: u64, off: usize, src: *const u8, n: usize) -> Result<()> {
        let cur = self.frame_ref(v);
        if let Some(f) = cur {
            // Refs: ours + one holder. In place when that holder is the page alone.
            if self.pm.state().alloc.refs(f) == 2 {
                // SAFETY: the frame is this page's alone; src is readable for n bytes.
                unsafe { self.pm.write_frame(f, off, src, n) };
                self.pm.decref(f);
                return Ok(());
            }
        }
        let g = self.pm.alloc_frames(1, false)?[0];
        // SAFETY: g is fresh; f is held; src readable.
        unsafe {
            if n < PAGE {
                let mut page = [0u8; PAGE];
                if let Some(f) = cur {
                    self.pm.read_frame(f, 0, page.as_mut_ptr(), PAGE);
                }
                std::ptr::copy_nonoverlapping(src, page.as_mut_ptr().add(off), n);
                self.pm.write_frame(g, 0, page.as_ptr(), PAGE);
            } else {
                self.pm.write_frame(g, 0, src, PAGE);
            }
        }
        if let Some(f) = cur {
            self.pm.decref(f);
        }
        self.ov().set(&self.pm, v, Some(g));
        Ok(())
    }
}

/// Call `f(page, offset in page, offset in buffer, bytes)` for each page a transfer touches.
pub(crate) fn for_pages(vpn: u64, off: u64, len: usize, mut f: impl FnMut(u64, usize, usize, usize) -> Result<()>) -> Result<()> {
    let mut done = 0;
    while done < len {
        let o = off as usize + done;
        let v = vpn + (o / PAGE) as u64;
        let po = o % PAGE;
        let n = (PAGE - po).min(len - done);
        f(v, po, done, n)?;
        done += n;
    }
    Ok(())
}

impl Engine for DaxEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Dax
    }

    unsafe fn read(&self, vpn: u64, off: u64, dst: *mut u8, len: usize) -> Result<Xfer> {
        let mut x = Xfer { copied_bytes: len as u64, ..Xfer::default() };
        for_pages(vpn, off, len, |v, po, at, n| {
            // SAFETY: dst is writable for len bytes.
            match self.frame_ref(v) {
                Some(f) => unsafe {
                    self.pm.read_frame(f, po, dst.add(at), n);
                    self.pm.decref(f);
                    x.pm_pages += 1;
                },
                None => unsafe { std::ptr::write_bytes(dst.add(at), 0, n) },
            }
            Ok(())
        })?;
        Ok(x)
    }

    unsafe fn write(&self, vpn: u64, off: u64, src: *const u8, len: usize) -> Result<Xfer> {
        // SAFETY (closure): src is readable for len bytes.
        for_pages(vpn, off, len, |v, po, at, n| self.write_page(v, po, unsafe { src.add(at) }, n))?;
        Ok(Xfer { copied_bytes: len as u64, ..Xfer::default() })
    }

    fn zero(&self, vpn: u64, from: u64, to: u64) -> Result<()> {
        let zeros = [0u8; PAGE];
        for_pages(vpn, from, (to - from) as usize, |v, po, _, n| {
            if n == PAGE {
                self.ov().set(&self.pm, v, None);
                Ok(())
            } else {
                self.write_page(v, po, zeros.as_ptr(), n)
            }
        })
    }

    fn discard(&self, vpn: u64, pages: u64) -> Result<()> {
        let held = self.ov().discard_range(vpn, pages);
        for f in held {
            self.pm.decref(f);
        }
        Ok(())
    }

    fn relocate(&self, to: u64, from: u64, pages: u64) -> Result<()> {
        for i in 0..pages {
            if let Some(f) = self.frame_ref(from + i) {
                self.ov().set(&self.pm, to + i, Some(f));
            }
        }
        self.discard(from, pages)
    }

    fn stage(&self, st: &mut Staged, vpn: u64, pages: u64) -> Result<()> {
        // Data is in PM already: only the new frames' page-table entries are left to commit.
        self.ov().stage_range(vpn, pages, st);
        Ok(())
    }

    fn commit(&self, mut st: Staged, meta: &Tx) -> Result<()> {
        st.tx.extend(meta);
        let r = if st.tx.is_empty() { Ok(0) } else { self.pm.commit(&st.tx) };
        self.ov().committed(&st);
        for f in st.frames {
            self.pm.decref(f);
        }
        r.map(|_| ())
    }

    fn lock_through_commit(&self) -> bool {
        false
    }

    fn dirty_bytes(&self) -> u64 {
        0
    }

    fn cache_bytes(&self) -> u64 {
        0
    }

    fn drop_caches(&self) -> Result<()> {
        Ok(())
    }

    fn view_addr(&self, _vpn: u64) -> Option<usize> {
        None
    }

    fn stats(&self) -> serde_json::Value {
        let l = &self.pm.lanes;
        use std::sync::atomic::Ordering::Relaxed;
        serde_json::json!({
            "pm_read_bytes": l.read_bytes.load(Relaxed),
            "pm_write_bytes": l.write_bytes.load(Relaxed),
            "pm_stall_ns": l.stall_ns.load(Relaxed),
        })
    }
}
