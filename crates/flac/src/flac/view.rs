//! The view of the space (pages mapped on demand) and the fault handler's entry: mapping runs
//! of frames, dropping and write-protecting view mappings, resolving faults on the view
//! (faults on buffers are resolved in `buffer`).

use std::sync::atomic::Ordering;

use super::table::{ent_view, with_view, V_NONE, V_RO, V_RW};
use super::{Core, Flac, Inner, Loc, ZERO_FRAME};
use crate::error::{FlacError, Result};
use crate::sys::{self, HUGE_PAGES, PAGE};

impl Inner {
    /// Map `locs` (None = the zero frame) over `va` page by page, one `mmap` per run of
    /// consecutive frames of one tier.
    ///
    /// # Safety
    /// `va..va + locs.len() pages` must be owned by the caller (a buffer, application memory
    /// handed over, or the view).
    pub(super) unsafe fn map_locs(&self, va: usize, locs: &[Option<Loc>], prot: i32, private: bool) -> Result<()> {
        let mut i = 0;
        while i < locs.len() {
            let first = locs[i].unwrap_or(Loc::Dram(ZERO_FRAME));
            let mut j = i + 1;
            while j < locs.len() {
                let next = locs[j].unwrap_or(Loc::Dram(ZERO_FRAME));
                let contiguous = match (first, next) {
                    (Loc::Dram(a), Loc::Dram(b)) => b as usize == a as usize + (j - i) && a != ZERO_FRAME,
                    (Loc::Pm(a), Loc::Pm(b)) => b as usize == a as usize + (j - i),
                    _ => false,
                };
                if !contiguous {
                    break;
                }
                j += 1;
            }
            let (fd, off) = self.fd_off(first);
            let addr = (va + i * PAGE) as *mut u8;
            let len = (j - i) * PAGE;
            let r =
                if private { sys::map_private_fixed(addr, len, prot, fd, off) } else { sys::map_shared_fixed(addr, len, prot, fd, off) };
            r.map_err(|e| map_error(e, len))?;
            self.stats.map_calls.fetch_add(1, Ordering::Relaxed);
            i = j;
        }
        Ok(())
    }

    /// Drop the view's mappings of `n` pages from `vpn` (they are mapped again on the next
    /// touch). Called whenever those pages' current copy changes.
    pub(super) fn view_invalidate(&self, c: &mut Core, vpn: u64, n: u64) -> Result<()> {
        if !self.view_used.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut i = vpn;
        while i < vpn + n {
            if ent_view(c.vpt[i as usize]) == V_NONE {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < vpn + n && ent_view(c.vpt[j as usize]) != V_NONE {
                c.vpt[j as usize] = with_view(c.vpt[j as usize], V_NONE);
                j += 1;
            }
            // SAFETY: the view is FLAC's reservation.
            unsafe { sys::map_anon_fixed((self.space as usize + i as usize * PAGE) as *mut u8, (j - i) as usize * PAGE, sys::PROT_NONE) }
                .map_err(|e| map_error(e, (j - i) as usize * PAGE))?;
            self.stats.map_calls.fetch_add(1, Ordering::Relaxed);
            i = j;
        }
        Ok(())
    }

    /// Pages whose view mapping is writable go back to read-only (before their frame is
    /// shared with a flush or a buffer).
    pub(super) fn view_downgrade(&self, c: &mut Core, vpn: u64, n: u64) -> Result<()> {
        for v in vpn..vpn + n {
            let e = c.vpt[v as usize];
            if ent_view(e) == V_RW {
                // SAFETY: a mapped view page.
                unsafe { sys::protect((self.space as usize + v as usize * PAGE) as *mut u8, PAGE, sys::PROT_R) }
                    .map_err(|e| FlacError::io("write-protecting a FLAC page", e))?;
                self.stats.protect_calls.fetch_add(1, Ordering::Relaxed);
                c.vpt[v as usize] = with_view(e, V_RO);
            }
        }
        Ok(())
    }

    /// Resolve a fault at `addr` (see [`crate::cow`]); false if it is not FLAC's.
    pub(crate) fn on_fault(&self, addr: usize, write: Option<bool>) -> bool {
        let page = addr & !(PAGE - 1);
        if sys::getpid() != self.pid {
            // A forked child must not touch the parent's state (its lock may be held by a
            // thread that does not exist here): a write to a read-only FLAC page gets a
            // private anonymous copy; its view of FLAC memory is a snapshot.
            // SAFETY: private_copy checks that the page is readable first.
            return write != Some(false) && unsafe { crate::cow::private_copy(page) };
        }
        let tid = sys::gettid();
        if self.owner.load(Ordering::Acquire) == tid {
            // FLAC touched protected memory while holding its lock: a bug, not a COW fault.
            let msg = b"flac: fault on a protected page while holding the FLAC lock\n";
            // SAFETY: write(2) and abort(3) are async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        let mut c = self.lock_as(tid);
        let r = if self.in_space(addr) { self.view_fault(&mut c, page, write) } else { self.buffer_fault(&mut c, page) };
        r.unwrap_or(false)
    }

    fn view_fault(&self, c: &mut Core, page: usize, write: Option<bool>) -> Result<bool> {
        self.stats.view_faults.fetch_add(1, Ordering::Relaxed);
        // From now on changed pages must be unmapped from the view.
        self.view_used.store(true, Ordering::Relaxed);
        let vpn = self.vpn_of(page);
        let e = c.vpt[vpn as usize];
        let write = write.unwrap_or(ent_view(e) == V_RO);
        if write {
            let f = self.page_for_write(c, vpn)?;
            // SAFETY: the view page at vpn.
            unsafe { sys::map_shared_fixed(page as *mut u8, PAGE, sys::PROT_RW, self.dram.fd(), self.dram.frame_off(f)) }
                .map_err(|e| map_error(e, PAGE))?;
            self.stats.map_calls.fetch_add(1, Ordering::Relaxed);
            c.vpt[vpn as usize] = with_view(c.vpt[vpn as usize], V_RW);
            return Ok(true);
        }
        // A read: map the run of pages around it with the same kind of current copy (up to
        // the enclosing 2 MiB), read-only.
        let lo = vpn / HUGE_PAGES as u64 * HUGE_PAGES as u64;
        let hi = (lo + HUGE_PAGES as u64).min(self.space_pages);
        let mut a = vpn;
        while a > lo && ent_view(c.vpt[(a - 1) as usize]) == V_NONE {
            a -= 1;
        }
        let mut b = vpn + 1;
        while b < hi && ent_view(c.vpt[b as usize]) == V_NONE {
            b += 1;
        }
        let locs: Vec<Option<Loc>> = (a..b).map(|v| self.current(c, v)).collect();
        // SAFETY: view pages a..b.
        unsafe { self.map_locs(self.addr(a), &locs, sys::PROT_R, false)? };
        for v in a..b {
            c.vpt[v as usize] = with_view(c.vpt[v as usize], V_RO);
        }
        Ok(true)
    }
}

pub(super) fn map_error(e: std::io::Error, len: usize) -> FlacError {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap_or_default();
        FlacError::NoSpace(format!(
            "mapping {len} bytes failed: out of memory mappings (vm.max_map_count = {}); raise it with `sysctl -w vm.max_map_count=1048576`",
            max.trim()
        ))
    } else {
        FlacError::io(format!("mapping {len} bytes of frames"), e)
    }
}

impl Flac {
    /// Map `addr..addr+len` of the space now (read-only), so system calls can read it (they
    /// do not take the demand-mapping fault path).
    pub fn prefault_view(&self, addr: usize, len: usize) -> Result<()> {
        let vpn0 = self.check_space(addr, len, "prefault_view")?;
        let vpn1 = (addr + len).div_ceil(PAGE) as u64 - (self.space as usize / PAGE) as u64;
        self.view_used.store(true, Ordering::Relaxed);
        let mut c = self.lock();
        let locs: Vec<Option<Loc>> = (vpn0..vpn1).map(|v| self.current(&c, v)).collect();
        // SAFETY: the view.
        unsafe { self.map_locs(self.addr(vpn0), &locs, sys::PROT_R, false)? };
        for v in vpn0..vpn1 {
            c.vpt[v as usize] = with_view(c.vpt[v as usize], V_RO);
        }
        Ok(())
    }

    /// Let the view be mapped on demand (touching the space faults pages in).
    pub fn use_view(&self) {
        self.view_used.store(true, Ordering::Relaxed);
    }
}
