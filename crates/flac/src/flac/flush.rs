//! Flushing and freeing pages: pflush (take the dirty frames, copy them to PM with no lock
//! held, commit the page table with the metadata), metadata-only commits, pfree, pdiscard,
//! pzero.

use std::sync::atomic::Ordering;

use super::table::{ent_loc, ent_view, DIRTY, FLUSHING, LOADING, V_RW};
use super::{Flac, Loc, PflushHandle, ZERO_FRAME};
use crate::error::{FlacError, Result};
use crate::pm::log::Tx;
use crate::sys::{self, HUGE_PAGES, PAGE};

impl Flac {
    /// Start a flush: take the frames of the dirty pages in `addr..addr+len` (waiting for
    /// flushes of them already in flight), so that later writes to them copy. Returns the
    /// number of pages added.
    pub fn pflush_add(&self, h: &mut PflushHandle, addr: usize, len: usize) -> Result<usize> {
        let vpn0 = self.check_space(addr, len, "pflush_add")?;
        let vpn1 = (addr + len).div_ceil(PAGE) as u64 - (self.space as usize / PAGE) as u64;
        let mut c = self.lock();
        while (vpn0..vpn1).any(|v| c.vpt[v as usize] & FLUSHING != 0) {
            c = c.wait(&self.flushcv);
        }
        let mut added = 0;
        for v in vpn0..vpn1 {
            let e = c.vpt[v as usize];
            if e & DIRTY == 0 {
                continue;
            }
            let l = ent_loc(e).expect("a dirty page has a current frame");
            if ent_view(e) == V_RW {
                self.view_downgrade(&mut c, v, 1)?;
            }
            self.incref(&mut c, l);
            c.vpt[v as usize] = (c.vpt[v as usize] & !DIRTY) | FLUSHING;
            c.dirty -= 1;
            h.items.push((v, l));
            added += 1;
        }
        Ok(added)
    }

    pub fn pflush_handle(&self) -> PflushHandle {
        PflushHandle { items: Vec::new() }
    }

    /// Finish a flush: copy the handle's DRAM pages to fresh PM frames (no lock held), then
    /// commit their page-table entries together with `meta` (the file system's metadata
    /// updates) as one transaction. Returns the transaction's sequence number.
    pub fn pflush_commit(&self, mut h: PflushHandle, meta: &Tx) -> Result<u64> {
        h.items.sort_by_key(|&(v, _)| v);
        // DRAM frames already persisted (the same bytes are in a PM frame, e.g. a page
        // attached from a file that was flushed): map that PM frame, copy nothing.
        let shared: Vec<Option<u32>> = {
            let c = self.lock();
            h.items
                .iter()
                .map(|&(_, l)| match l {
                    Loc::Dram(f) if f != ZERO_FRAME => c.persisted[f as usize].checked_sub(1),
                    _ => None,
                })
                .collect()
        };
        let needs_copy = |k: usize| matches!(h.items[k].1, Loc::Dram(f) if f != ZERO_FRAME) && shared[k].is_none();
        // PM frames for the rest, one allocation per run of consecutive pages.
        let mut plan: Vec<Option<u32>> = vec![None; h.items.len()];
        let mut i = 0;
        let res = (|| -> Result<()> {
            while i < h.items.len() {
                if !needs_copy(i) {
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                while j < h.items.len() && h.items[j].0 == h.items[j - 1].0 + 1 && needs_copy(j) {
                    j += 1;
                }
                let huge = h.items[i].0.is_multiple_of(HUGE_PAGES as u64) && j - i >= HUGE_PAGES;
                let frames = self.pm.alloc_frames(j - i, huge)?;
                for (k, f) in frames.into_iter().enumerate() {
                    plan[i + k] = Some(f);
                }
                i = j;
            }
            Ok(())
        })();
        if let Err(e) = res {
            self.abort_flush(&h, &plan);
            return Err(e);
        }
        // Persist the data: DRAM -> PM at PM's write bandwidth, with no lock held.
        let copies = plan.iter().filter(|p| p.is_some()).count();
        let t = self.pm.lanes.write((copies * PAGE) as u64);
        for (k, &(_, l)) in h.items.iter().enumerate() {
            if let (Some(p), Loc::Dram(f)) = (plan[k], l) {
                // SAFETY: f is held by the handle, p is a fresh PM frame.
                unsafe { sys::copy(self.pm.frame_ptr(p), self.dram.frame_ptr(f), PAGE) };
            }
        }
        self.pm.lanes.wait(t);
        std::sync::atomic::fence(Ordering::SeqCst);
        crate::crash::point("flush.after_copy");
        let mut tx = Tx::new();
        for (k, &(v, l)) in h.items.iter().enumerate() {
            match (plan[k], shared[k], l) {
                (Some(p), _, _) | (None, Some(p), _) | (None, None, Loc::Pm(p)) => tx.pt_set(v, Some(p)),
                (None, None, Loc::Dram(_)) => tx.pt_set(v, None),
            }
        }
        tx.extend(meta);
        let seq = match self.pm.commit(&tx) {
            Ok(s) => s,
            Err(e) => {
                self.abort_flush(&h, &plan);
                return Err(e);
            }
        };
        let mut c = self.lock();
        for (k, &(v, l)) in h.items.iter().enumerate() {
            let e = c.vpt[v as usize];
            c.vpt[v as usize] = e & !FLUSHING;
            if let (Loc::Pm(p), Some(Loc::Pm(q))) = (l, ent_loc(e)) {
                if p == q && e & DIRTY == 0 {
                    // The PM page is the committed copy now (the page table holds it).
                    self.set_current(&mut c, v, None);
                }
            }
            if let (Some(p), Loc::Dram(f)) = (plan[k], l) {
                // Remember the copy (the frame cannot change while the flush holds it).
                if c.persisted[f as usize] == 0 {
                    self.pm.incref(p);
                    c.persisted[f as usize] = p + 1;
                }
            }
            self.decref(&mut c, l);
            if let Some(p) = plan[k] {
                self.pm.decref(p);
            }
        }
        drop(c);
        self.flushcv.notify_all();
        self.stats.flushed_pages.fetch_add(h.items.len() as u64, Ordering::Relaxed);
        self.stats.flush_copies.fetch_add(copies as u64, Ordering::Relaxed);
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    /// Commit `meta` alone (metadata-only operations: no pages).
    pub fn commit_meta(&self, meta: &Tx) -> Result<u64> {
        if meta.is_empty() {
            return Ok(0);
        }
        let seq = self.pm.commit(meta)?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    fn abort_flush(&self, h: &PflushHandle, plan: &[Option<u32>]) {
        let mut c = self.lock();
        for (k, &(v, l)) in h.items.iter().enumerate() {
            let e = c.vpt[v as usize];
            let mut e2 = e & !FLUSHING;
            if ent_loc(e) == Some(l) && e & DIRTY == 0 {
                e2 |= DIRTY;
                c.dirty += 1;
            }
            c.vpt[v as usize] = e2;
            self.decref(&mut c, l);
            if let Some(p) = plan[k] {
                self.pm.decref(p);
            }
        }
        drop(c);
        self.flushcv.notify_all();
    }

    /// Free the pages `addr..addr+len` (DRAM and PM copies) and commit `meta` with the
    /// page-table updates as one transaction.
    pub fn pfree(&self, addr: usize, len: usize, meta: &Tx) -> Result<u64> {
        let vpn0 = self.check_space(addr, len, "pfree")?;
        if !addr.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(FlacError::Invalid(format!("pfree: {addr:#x}+{len} must be page-aligned")));
        }
        let n = (len / PAGE) as u64;
        let mut c = self.lock();
        while (vpn0..vpn0 + n).any(|v| c.vpt[v as usize] & FLUSHING != 0) {
            c = c.wait(&self.flushcv);
        }
        let mut tx = Tx::new();
        for v in vpn0..vpn0 + n {
            self.set_current(&mut c, v, None);
            c.vpt[v as usize] &= !LOADING;
            if self.pm.state().ppt(v).is_some() {
                tx.pt_set(v, None);
            }
        }
        self.view_invalidate(&mut c, vpn0, n)?;
        tx.extend(meta);
        let seq = if tx.is_empty() { 0 } else { self.pm.commit(&tx)? };
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    /// Forget the pages `addr..addr+len` in DRAM (freed by the caller, whose next commit
    /// unmaps their PM frames): they show their committed copy until then.
    pub fn pdiscard(&self, addr: usize, len: usize) -> Result<()> {
        let (vpn0, n) = self.page_range(addr, len, "pdiscard")?;
        let mut c = self.lock();
        while (vpn0..vpn0 + n).any(|v| c.vpt[v as usize] & FLUSHING != 0) {
            c = c.wait(&self.flushcv);
        }
        for v in vpn0..vpn0 + n {
            self.set_current(&mut c, v, None);
            c.vpt[v as usize] &= !LOADING;
        }
        self.view_invalidate(&mut c, vpn0, n)
    }

    /// Make the pages `addr..addr+len` holes (read as zeros; the next flush of them unmaps
    /// their PM frames).
    pub fn pzero(&self, addr: usize, len: usize) -> Result<()> {
        let (vpn0, n) = self.page_range(addr, len, "pzero")?;
        let mut c = self.lock();
        for v in vpn0..vpn0 + n {
            c.vpt[v as usize] &= !LOADING;
            // A page with a committed copy, or one a flush in flight is about to commit,
            // becomes a dirty zero page (its next flush unmaps the frame). Made a plain hole
            // during a flush, it showed the flushed bytes again once that flush committed.
            if self.pm.state().ppt(v).is_some() || c.vpt[v as usize] & FLUSHING != 0 {
                c.dram.incref(ZERO_FRAME);
                self.set_current(&mut c, v, Some((Loc::Dram(ZERO_FRAME), true)));
            } else {
                self.set_current(&mut c, v, None);
            }
        }
        self.view_invalidate(&mut c, vpn0, n)
    }

    fn page_range(&self, addr: usize, len: usize, what: &str) -> Result<(u64, u64)> {
        let vpn0 = self.check_space(addr, len, what)?;
        if !addr.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(FlacError::Invalid(format!("{what}: {addr:#x}+{len} must be page-aligned")));
        }
        Ok((vpn0, (len / PAGE) as u64))
    }
}
