//! Whole-page transfers: each source page is shared, copied or loaded into a fresh frame, and
//! the frames are installed at the destination (the space, a buffer, or other memory).

use std::sync::atomic::Ordering;

use super::attach::lent_page_intact;
use super::table::{bent_loc, ent_kind, loc_bits, B_LOCKED, B_RO, K_COMMITTED, LOADING};
use super::{AttachMode, Core, Flac, Inner, Loc, Region, Xfer, ZERO_FRAME};
use crate::error::{FlacError, Result};
use crate::sys::{self, HUGE, HUGE_PAGES, PAGE};

/// A source page of a transfer: a frame to share (reference taken), a hole, or bytes to copy
/// into a fresh frame.
#[derive(Clone, Copy)]
enum Src {
    Share(Loc),
    Hole,
    Copy(usize),
    /// A committed PM page to load into DRAM first (synchronous load).
    Load(u64, u32),
}

/// A page loaded synchronously by a transfer: (page, its committed PM frame, the DRAM frame
/// holding the copy).
type Loaded = (u64, u32, u32);

impl Flac {
    /// Move `n` whole pages from `from` to `to` by mapping (or copying into fresh frames when
    /// `force_copy` or the source is not FLAC memory).
    pub(super) fn transfer(&self, to: usize, from: usize, n: usize, mode: AttachMode, force_copy: bool) -> Result<Xfer> {
        debug_assert!(to.is_multiple_of(PAGE) && (force_copy || from.is_multiple_of(PAGE)) && n > 0);
        let bounds = self.space_bounds();
        let mut x = Xfer::default();
        // Phase 1, locked: what each source page is; references on shared frames; fresh
        // frames for pages to copy or load.
        let mut c = self.lock();
        let dst = self.transfer_dest(&c, to, n, bounds)?;
        let to_space = matches!(dst, Region::Space);
        let (srcs, ncopy) = self.classify_sources(&mut c, from, n, to_space, force_copy, bounds);
        self.protect_shared_sources(&mut c, from, &srcs, bounds)?;
        let fresh = self.alloc_copy_frames(&mut c, &srcs, ncopy, to)?;
        drop(c);
        // Phase 2, unlocked: copies and loads into the fresh frames.
        let (locs, loaded) = self.fill_frames(&srcs, &fresh, &mut x);
        // Phase 3, locked: install.
        let mut c = self.lock();
        self.install_loaded(&mut c, &loaded);
        let shared = locs.iter().zip(&srcs).filter(|(_, s)| matches!(s, Src::Share(_) | Src::Hole)).count();
        x.mapped_bytes += (shared * PAGE) as u64;
        self.stats.mapped_pages.fetch_add(shared as u64, Ordering::Relaxed);
        self.stats.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        match dst {
            Region::Space => self.install_in_space(&mut c, to, &locs)?,
            Region::Buffer(_) => x.pm_pages += self.install_in_buffer(&mut c, to, &locs, &srcs, mode)?,
            Region::Foreign => x.pm_pages += self.install_foreign(&mut c, to, &locs, &srcs, mode)?,
        }
        drop(c);
        // The application reads what it asked for: pages mapped straight from PM cost a PM
        // read (with no copy to overlap it with).
        let pm_mapped = locs.iter().zip(&srcs).filter(|(l, s)| matches!(l, Some(Loc::Pm(_))) && matches!(s, Src::Share(_))).count();
        if !to_space && pm_mapped > 0 {
            self.pm.lanes.read_now((pm_mapped * PAGE) as u64);
        }
        self.kick_loader();
        Ok(x)
    }

    /// The destination of a transfer of `n` pages at `to`, which must be one kind of memory
    /// throughout (the space, one buffer, or other memory) and inside the space if it starts
    /// there.
    fn transfer_dest(&self, c: &Core, to: usize, n: usize, bounds: (usize, usize)) -> Result<Region> {
        let dst = Inner::region(c, to, bounds);
        let dst_end = Inner::region(c, to + (n - 1) * PAGE, bounds);
        match (&dst, &dst_end) {
            (Region::Space, Region::Space) | (Region::Foreign, Region::Foreign) => {}
            (Region::Buffer(a), Region::Buffer(b)) if a == b => {}
            _ => return Err(FlacError::Invalid(format!("attach: destination {to:#x}+{} pages spans different kinds of memory", n))),
        }
        if let Region::Space = dst {
            self.check_space(to, n * PAGE, "attach destination")?;
        }
        Ok(dst)
    }

    /// What each of the `n` source pages from `from` is (a reference is taken on each frame
    /// to share), and how many need a fresh frame (to copy or load into). Misses on committed
    /// pages are queued for the loader.
    fn classify_sources(
        &self,
        c: &mut Core,
        from: usize,
        n: usize,
        to_space: bool,
        force_copy: bool,
        bounds: (usize, usize),
    ) -> (Vec<Src>, usize) {
        let mut srcs: Vec<Src> = Vec::with_capacity(n);
        let mut ncopy = 0;
        let mut loads: Vec<(u64, u64)> = Vec::new();
        for i in 0..n {
            let a = from + i * PAGE;
            let s = match Inner::region(c, a, bounds) {
                _ if force_copy && !self.in_space(a) => Src::Copy(a),
                Region::Space => self.space_source(c, a, to_space, force_copy, &mut loads),
                Region::Buffer(b) => {
                    let k = (a - c.bufs[b].base) / PAGE;
                    match bent_loc(c.bufs[b].ents[k]) {
                        Some(l) if !force_copy => Src::Share(l),
                        _ => Src::Copy(a),
                    }
                }
                Region::Foreign => match c.lends.get(&a) {
                    Some(&l) if !force_copy && lent_page_intact(a, self.loc_ptr(l) as usize) => Src::Share(l),
                    _ => Src::Copy(a),
                },
            };
            match s {
                Src::Share(l) => self.incref(c, l),
                Src::Copy(_) | Src::Load(..) => ncopy += 1,
                Src::Hole => {}
            }
            srcs.push(s);
        }
        for (v, k) in loads {
            self.queue_load(c, v, k);
        }
        (srcs, ncopy)
    }

    /// A source page at `a` in the space: a hole, a DRAM frame (a hit), or a PM frame. A miss
    /// on a committed page going out of the space is loaded first when loads are synchronous,
    /// otherwise added to `loads` (runs of pages) for the loader.
    fn space_source(&self, c: &mut Core, a: usize, to_space: bool, force_copy: bool, loads: &mut Vec<(u64, u64)>) -> Src {
        let vpn = self.vpn_of(a);
        match self.current(c, vpn) {
            None => Src::Hole,
            Some(l @ Loc::Dram(f)) => {
                c.referenced[f as usize / 64] |= 1 << (f % 64);
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                if force_copy {
                    Src::Copy(a)
                } else {
                    Src::Share(l)
                }
            }
            Some(l @ Loc::Pm(p)) => {
                let committed = ent_kind(c.vpt[vpn as usize]) == K_COMMITTED;
                if !to_space {
                    self.stats.misses.fetch_add(1, Ordering::Relaxed);
                }
                if committed && !to_space && !self.cfg.async_load {
                    Src::Load(vpn, p)
                } else {
                    if committed && !to_space && c.vpt[vpn as usize] & LOADING == 0 {
                        match loads.last_mut() {
                            Some((v, k)) if *v + *k == vpn => *k += 1,
                            _ => loads.push((vpn, 1)),
                        }
                    }
                    if force_copy {
                        Src::Copy(a)
                    } else {
                        Src::Share(l)
                    }
                }
            }
        }
    }

    /// Source buffer pages now shared become read-only.
    fn protect_shared_sources(&self, c: &mut Core, from: usize, srcs: &[Src], bounds: (usize, usize)) -> Result<()> {
        let n = srcs.len();
        let mut i = 0;
        while i < n {
            let a = from + i * PAGE;
            if let (Src::Share(_), Region::Buffer(b)) = (srcs[i], Inner::region(c, a, bounds)) {
                let base = c.bufs[b].base;
                let start = (a - base) / PAGE;
                let mut j = i;
                while j < n && matches!(srcs[j], Src::Share(_)) && from + j * PAGE < base + c.bufs[b].ents.len() * PAGE {
                    j += 1;
                }
                self.buf_protect(c, b, start, j - i)?;
                i = j;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Fresh DRAM frames for the `ncopy` pages to copy or load (2 MiB runs first when every
    /// page is copied to a 2 MiB-aligned destination). If there are not enough, the references
    /// taken on the frames to share are dropped.
    fn alloc_copy_frames(&self, c: &mut Core, srcs: &[Src], ncopy: usize, to: usize) -> Result<Vec<u32>> {
        let n = srcs.len();
        let huge = to.is_multiple_of(HUGE) && n >= HUGE_PAGES;
        if ncopy == 0 {
            return Ok(Vec::new());
        }
        match self.alloc_dram(c, ncopy, huge && ncopy == n) {
            Ok(f) => Ok(f),
            Err(e) => {
                for s in srcs {
                    if let Src::Share(l) = *s {
                        self.decref(c, l);
                    }
                }
                Err(e)
            }
        }
    }

    /// Copy and load into the fresh frames (no lock held). Returns each page's frame (None: a
    /// hole) and the pages loaded from PM.
    fn fill_frames(&self, srcs: &[Src], fresh: &[u32], x: &mut Xfer) -> (Vec<Option<Loc>>, Vec<Loaded>) {
        let mut locs: Vec<Option<Loc>> = Vec::with_capacity(srcs.len());
        let mut k = 0;
        let mut loaded: Vec<Loaded> = Vec::new();
        let pm_bytes: u64 = srcs.iter().filter(|s| matches!(s, Src::Load(..))).count() as u64 * PAGE as u64;
        let ticket = self.pm.lanes.read(pm_bytes);
        for s in srcs {
            locs.push(match *s {
                Src::Share(l) => Some(l),
                Src::Hole => None,
                Src::Copy(a) => {
                    let f = fresh[k];
                    k += 1;
                    // SAFETY: a fresh frame; `a` is readable memory (a protected page is readable).
                    unsafe { sys::copy(self.dram.frame_ptr(f), a as *const u8, PAGE) };
                    x.copied_bytes += PAGE as u64;
                    Some(Loc::Dram(f))
                }
                Src::Load(vpn, p) => {
                    let f = fresh[k];
                    k += 1;
                    // SAFETY: p is the committed frame (held by the page table), f is fresh.
                    unsafe { sys::copy(self.dram.frame_ptr(f), self.pm.frame_ptr(p), PAGE) };
                    loaded.push((vpn, p, f));
                    Some(Loc::Dram(f))
                }
            });
        }
        self.pm.lanes.wait(ticket);
        (locs, loaded)
    }

    /// Install the pages loaded synchronously (phase 2 copied them from PM).
    fn install_loaded(&self, c: &mut Core, loaded: &[Loaded]) {
        for &(vpn, p, f) in loaded {
            // The loaded copy becomes the page's cached copy if the page has not changed.
            let e = c.vpt[vpn as usize];
            if ent_kind(e) == K_COMMITTED && self.pm.state().ppt(vpn) == Some(p) {
                self.incref(c, Loc::Dram(f));
                self.set_current(c, vpn, Some((Loc::Dram(f), false)));
            }
        }
        self.stats.loads_sync.fetch_add(loaded.len() as u64, Ordering::Relaxed);
    }

    /// The frames become the current (dirty) copies of the space's pages from `to`.
    fn install_in_space(&self, c: &mut Core, to: usize, locs: &[Option<Loc>]) -> Result<()> {
        let vpn = self.vpn_of(to);
        for (i, &l) in locs.iter().enumerate() {
            let l = or_zero_frame(c, l);
            self.set_current(c, vpn + i as u64, Some((l, true)));
        }
        self.view_invalidate(c, vpn, locs.len() as u64)
    }

    /// The frames replace the destination buffer's pages from `to` and are mapped there.
    /// Returns the pages mapped from PM.
    fn install_in_buffer(&self, c: &mut Core, to: usize, locs: &[Option<Loc>], srcs: &[Src], mode: AttachMode) -> Result<u64> {
        // Other threads may have added or freed buffers since phase 1: find it again.
        let Region::Buffer(b) = Inner::region(c, to, self.space_bounds()) else {
            unreachable!("a buffer being transferred into cannot be freed (its owner is in this call)")
        };
        let base = c.bufs[b].base;
        let start = (to - base) / PAGE;
        for i in 0..locs.len() {
            let old = c.bufs[b].ents[start + i];
            if let Some(l) = bent_loc(old) {
                self.decref(c, l);
            }
        }
        for (i, &l) in locs.iter().enumerate() {
            let l = or_zero_frame(c, l);
            // A fresh copy belongs to the buffer alone and stays writable.
            let exclusive = matches!(srcs[i], Src::Copy(_)) && mode == AttachMode::Cow;
            let flags = if exclusive { 0 } else { B_RO } | if mode == AttachMode::ReadOnly { B_LOCKED } else { 0 };
            c.bufs[b].ents[start + i] = loc_bits(l) | flags;
        }
        self.map_into(to, locs, srcs, mode, false)?;
        Ok(pm_pages(locs))
    }

    /// The frames are lent to application memory from `to` (replacing pages lent there before)
    /// and mapped there privately. Returns the pages mapped from PM.
    fn install_foreign(&self, c: &mut Core, to: usize, locs: &[Option<Loc>], srcs: &[Src], mode: AttachMode) -> Result<u64> {
        for i in 0..locs.len() {
            if let Some(l) = c.lends.remove(&(to + i * PAGE)) {
                self.decref(c, l);
            }
        }
        for (i, &l) in locs.iter().enumerate() {
            let l = or_zero_frame(c, l);
            c.lends.insert(to + i * PAGE, l);
        }
        self.map_into(to, locs, srcs, mode, true)?;
        Ok(pm_pages(locs))
    }

    /// Map the transfer's frames at `to` (a buffer: shared; other memory: private).
    fn map_into(&self, to: usize, locs: &[Option<Loc>], srcs: &[Src], mode: AttachMode, private: bool) -> Result<()> {
        let ro = mode == AttachMode::ReadOnly;
        if private {
            // Private mappings are writable (the kernel copies on write) unless read-only.
            // SAFETY: memory the caller handed over for the transfer.
            return unsafe { self.map_locs(to, locs, if ro { sys::PROT_R } else { sys::PROT_RW }, !ro) };
        }
        // Buffer pages: fresh copies writable, shared frames read-only.
        let mut i = 0;
        while i < locs.len() {
            let excl = matches!(srcs[i], Src::Copy(_)) && !ro;
            let mut j = i + 1;
            while j < locs.len() && (matches!(srcs[j], Src::Copy(_)) && !ro) == excl {
                j += 1;
            }
            // SAFETY: pages of a registered buffer.
            unsafe { self.map_locs(to + i * PAGE, &locs[i..j], if excl { sys::PROT_RW } else { sys::PROT_R }, false)? };
            i = j;
        }
        Ok(())
    }
}

/// A page's frame, or (for a hole) the zero frame with a reference taken on it.
fn or_zero_frame(c: &mut Core, l: Option<Loc>) -> Loc {
    l.unwrap_or_else(|| {
        c.dram.incref(ZERO_FRAME);
        Loc::Dram(ZERO_FRAME)
    })
}

/// How many of the frames are PM frames.
fn pm_pages(locs: &[Option<Loc>]) -> u64 {
    locs.iter().filter(|l| matches!(l, Some(Loc::Pm(_)))).count() as u64
}
