//! The volatile page table: entry encoding (page and buffer entries), frame references, a
//! page's current copy, DRAM allocation with CLOCK eviction, and pages made writable.

use std::sync::atomic::Ordering;

use super::{Core, Flac, Inner, Loc, ZERO_FRAME};
use crate::error::{FlacError, Result};
use crate::sys::{self, PAGE};

// Volatile page-table entry: frame (32 bits), kind (2), flags, view state (2).
const FRAME_MASK: u64 = 0xffff_ffff;
const KIND_SHIFT: u32 = 32;
const KIND_MASK: u64 = 3 << KIND_SHIFT;
pub(super) const K_COMMITTED: u64 = 0;
const K_DRAM: u64 = 1;
const K_PM: u64 = 2;
pub(super) const DIRTY: u64 = 1 << 34;
pub(super) const FLUSHING: u64 = 1 << 35;
pub(super) const LOADING: u64 = 1 << 36;
const VIEW_SHIFT: u32 = 37;
const VIEW_MASK: u64 = 3 << VIEW_SHIFT;
pub(super) const V_NONE: u64 = 0;
pub(super) const V_RO: u64 = 1;
pub(super) const V_RW: u64 = 2;

pub(super) fn ent_kind(e: u64) -> u64 {
    (e & KIND_MASK) >> KIND_SHIFT
}

pub(super) fn ent_loc(e: u64) -> Option<Loc> {
    let f = (e & FRAME_MASK) as u32;
    match ent_kind(e) {
        K_DRAM => Some(Loc::Dram(f)),
        K_PM => Some(Loc::Pm(f)),
        _ => None,
    }
}

pub(super) fn ent_view(e: u64) -> u64 {
    (e & VIEW_MASK) >> VIEW_SHIFT
}

pub(super) fn with_view(e: u64, v: u64) -> u64 {
    (e & !VIEW_MASK) | v << VIEW_SHIFT
}

pub(super) fn loc_bits(l: Loc) -> u64 {
    match l {
        Loc::Dram(f) => K_DRAM << KIND_SHIFT | f as u64,
        Loc::Pm(f) => K_PM << KIND_SHIFT | f as u64,
    }
}

// Buffer page entry: frame (32), kind (2: 0 = private anonymous copy), read-only (shared),
// locked (attached read-only: writes are not allowed).
pub(super) const B_RO: u64 = 1 << 34;
pub(super) const B_LOCKED: u64 = 1 << 35;

pub(super) fn bent_loc(e: u64) -> Option<Loc> {
    ent_loc(e & (FRAME_MASK | KIND_MASK))
}

impl Inner {
    #[inline]
    pub fn loc_ptr(&self, l: Loc) -> *mut u8 {
        match l {
            Loc::Dram(f) => self.dram.frame_ptr(f),
            Loc::Pm(f) => self.pm.frame_ptr(f),
        }
    }

    pub(super) fn fd_off(&self, l: Loc) -> (i32, u64) {
        match l {
            Loc::Dram(f) => (self.dram.fd(), self.dram.frame_off(f)),
            Loc::Pm(f) => (self.pm.fd(), self.pm.frame_off(f)),
        }
    }

    pub(super) fn incref(&self, c: &mut Core, l: Loc) {
        match l {
            Loc::Dram(f) => c.dram.incref(f),
            Loc::Pm(f) => self.pm.incref(f),
        }
    }

    pub(super) fn decref(&self, c: &mut Core, l: Loc) {
        match l {
            Loc::Dram(f) => {
                if c.dram.decref(f) {
                    self.forget_persisted(c, f);
                }
            }
            Loc::Pm(f) => self.pm.decref(f),
        }
    }

    /// DRAM frame `f` may change (or is free): it no longer matches a PM copy.
    pub(super) fn forget_persisted(&self, c: &mut Core, f: u32) {
        let p = std::mem::take(&mut c.persisted[f as usize]);
        if p != 0 {
            self.pm.decref(p - 1);
        }
    }

    /// Where page `vpn`'s current copy is (None: a hole).
    pub(super) fn current(&self, c: &Core, vpn: u64) -> Option<Loc> {
        let e = c.vpt[vpn as usize];
        ent_loc(e).or_else(|| self.pm.state().ppt(vpn).map(Loc::Pm))
    }

    /// Make `l` (a reference the caller holds, which passes to the page) page `vpn`'s current
    /// copy (None: fall back to the committed copy), keeping flags and view state.
    pub(super) fn set_current(&self, c: &mut Core, vpn: u64, new: Option<(Loc, bool)>) {
        let i = vpn as usize;
        let e = c.vpt[i];
        if let Some(old) = ent_loc(e) {
            self.decref(c, old);
        }
        if e & DIRTY != 0 {
            c.dirty -= 1;
        }
        let keep = e & (FLUSHING | VIEW_MASK);
        c.vpt[i] = match new {
            None => keep,
            Some((l, dirty)) => {
                if dirty {
                    c.dirty += 1;
                }
                keep | loc_bits(l) | if dirty { DIRTY } else { 0 }
            }
        };
    }

    /// `n` DRAM frames (2 MiB-aligned runs first when `huge_first`), evicting clean pages if
    /// the pool is short.
    pub(super) fn alloc_dram(&self, c: &mut Core, n: usize, huge_first: bool) -> Result<Vec<u32>> {
        if c.dram.nfree() < n + c.dram.nframes() / 64 {
            self.evict(c, n + c.dram.nframes() / 32)?;
        }
        let mut out = Vec::with_capacity(n);
        if !c.dram.alloc_many(n, huge_first, &mut out) {
            return Err(FlacError::NoSpace(format!(
                "DRAM cache full: {n} frames wanted, {} free, {} dirty pages (commit them with pflush)",
                c.dram.nfree(),
                c.dirty
            )));
        }
        Ok(out)
    }

    /// Evict up to `want` clean DRAM pages (CLOCK over the space's pages, a second chance for
    /// frames hit since the last pass): their pages fall back to the committed PM copy. Pages
    /// whose frame is shared (with a buffer, a flush, another page) or dirty stay.
    pub(super) fn evict(&self, c: &mut Core, want: usize) -> Result<usize> {
        let n = self.space_pages as usize;
        let mut done = 0;
        let mut victims: Vec<u64> = Vec::new();
        for _ in 0..2 * n {
            if done >= want {
                break;
            }
            let v = c.hand;
            c.hand = (c.hand + 1) % n;
            let e = c.vpt[v];
            let Some(Loc::Dram(f)) = ent_loc(e) else { continue };
            if f == ZERO_FRAME || e & (DIRTY | FLUSHING | LOADING) != 0 || c.dram.refs(f) != 1 {
                continue;
            }
            let bit = 1u64 << (f % 64);
            if c.referenced[f as usize / 64] & bit != 0 {
                c.referenced[f as usize / 64] &= !bit;
                continue;
            }
            if self.pm.state().ppt(v as u64).is_none() {
                continue;
            }
            self.set_current(c, v as u64, None);
            victims.push(v as u64);
            done += 1;
        }
        self.stats.evictions.fetch_add(done as u64, Ordering::Relaxed);
        for v in victims {
            self.view_invalidate(c, v, 1)?;
        }
        Ok(done)
    }

    /// Make page `vpn`'s current copy a DRAM frame only the page holds (copying a shared
    /// frame, loading from PM, or zero-filling a hole), mark it dirty, and return it.
    pub(super) fn page_for_write(&self, c: &mut Core, vpn: u64) -> Result<u32> {
        let e = c.vpt[vpn as usize];
        if let Some(Loc::Dram(f)) = ent_loc(e) {
            if f != ZERO_FRAME && c.dram.refs(f) == 1 {
                if e & DIRTY == 0 {
                    c.vpt[vpn as usize] |= DIRTY;
                    c.dirty += 1;
                }
                self.forget_persisted(c, f);
                return Ok(f);
            }
        }
        let cur = self.current(c, vpn);
        let f = self.alloc_dram(c, 1, false)?[0];
        let dst = self.dram.frame_ptr(f);
        // SAFETY: f is a fresh frame; the source is a frame FLAC holds (current copy).
        unsafe {
            match cur {
                None | Some(Loc::Dram(ZERO_FRAME)) => std::ptr::write_bytes(dst, 0, PAGE),
                Some(Loc::Dram(g)) => {
                    sys::copy(dst, self.dram.frame_ptr(g), PAGE);
                    self.stats.cow_copies.fetch_add(1, Ordering::Relaxed);
                }
                Some(Loc::Pm(p)) => self.pm.read_frame(p, 0, dst, PAGE),
            }
        }
        self.set_current(c, vpn, Some((Loc::Dram(f), true)));
        self.view_invalidate(c, vpn, 1)?;
        Ok(f)
    }
}

impl Flac {
    /// Drop every clean DRAM copy (the next access is a miss): a cold cache for experiments.
    pub fn drop_clean_cache(&self) -> Result<usize> {
        let mut c = self.lock();
        let n = c.dram.nframes();
        let mut done = 0;
        for v in 0..self.space_pages {
            let e = c.vpt[v as usize];
            if let Some(Loc::Dram(f)) = ent_loc(e) {
                if f != ZERO_FRAME && e & (DIRTY | FLUSHING) == 0 && c.dram.refs(f) == 1 && self.pm.state().ppt(v).is_some() {
                    self.set_current(&mut c, v, None);
                    self.view_invalidate(&mut c, v, 1)?;
                    done += 1;
                }
            }
        }
        debug_assert!(c.dram.nfree() <= n);
        Ok(done)
    }
}
