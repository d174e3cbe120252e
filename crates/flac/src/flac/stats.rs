//! What FLAC reports about itself: its counters, occupancy and dirty pages, and the check
//! that reference counts agree with their holders.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::table::{bent_loc, ent_loc, DIRTY, FLUSHING};
use super::{Flac, Loc, ZERO_FRAME};
use crate::sys::PAGE;

/// Counters of what FLAC did (monotonic).
#[derive(Default)]
pub struct Stats {
    pub mapped_pages: AtomicU64,
    pub copied_bytes: AtomicU64,
    pub map_calls: AtomicU64,
    pub protect_calls: AtomicU64,
    pub cow_faults: AtomicU64,
    pub cow_copies: AtomicU64,
    pub view_faults: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub loads_async: AtomicU64,
    pub loads_sync: AtomicU64,
    pub evictions: AtomicU64,
    pub flushed_pages: AtomicU64,
    pub flush_copies: AtomicU64,
    pub commits: AtomicU64,
    pub lends_released: AtomicU64,
}

/// A snapshot of [`Stats`] plus occupancy, for reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StatsSnapshot {
    pub mapped_pages: u64,
    pub copied_bytes: u64,
    pub map_calls: u64,
    pub protect_calls: u64,
    pub cow_faults: u64,
    pub cow_copies: u64,
    pub view_faults: u64,
    pub hits: u64,
    pub misses: u64,
    pub loads_async: u64,
    pub loads_sync: u64,
    pub evictions: u64,
    pub flushed_pages: u64,
    pub flush_copies: u64,
    pub commits: u64,
    pub lends_released: u64,
    pub dram_frames: u64,
    pub dram_free: u64,
    pub dirty_pages: u64,
    pub pm_frames: u64,
    pub pm_free: u64,
    pub pm_read_bytes: u64,
    pub pm_write_bytes: u64,
    pub pm_stall_ns: u64,
}

impl Flac {
    /// Pages that are dirty (written, not yet flushed).
    pub fn dirty_pages(&self) -> u64 {
        self.lock().dirty
    }

    /// Dirty pages in `addr..addr+len`.
    pub fn dirty_in(&self, addr: usize, len: usize) -> u64 {
        let Ok(vpn0) = self.check_space(addr, len, "dirty_in") else { return 0 };
        let vpn1 = (addr + len).div_ceil(PAGE) as u64 - (self.space as usize / PAGE) as u64;
        let c = self.lock();
        (vpn0..vpn1).filter(|&v| c.vpt[v as usize] & DIRTY != 0).count() as u64
    }

    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.stats;
        let c = self.lock();
        let l = &self.pm.lanes;
        let pst = self.pm.state();
        StatsSnapshot {
            mapped_pages: s.mapped_pages.load(Ordering::Relaxed),
            copied_bytes: s.copied_bytes.load(Ordering::Relaxed),
            map_calls: s.map_calls.load(Ordering::Relaxed),
            protect_calls: s.protect_calls.load(Ordering::Relaxed),
            cow_faults: s.cow_faults.load(Ordering::Relaxed),
            cow_copies: s.cow_copies.load(Ordering::Relaxed),
            view_faults: s.view_faults.load(Ordering::Relaxed),
            hits: s.hits.load(Ordering::Relaxed),
            misses: s.misses.load(Ordering::Relaxed),
            loads_async: s.loads_async.load(Ordering::Relaxed),
            loads_sync: s.loads_sync.load(Ordering::Relaxed),
            evictions: s.evictions.load(Ordering::Relaxed),
            flushed_pages: s.flushed_pages.load(Ordering::Relaxed),
            flush_copies: s.flush_copies.load(Ordering::Relaxed),
            commits: s.commits.load(Ordering::Relaxed),
            lends_released: s.lends_released.load(Ordering::Relaxed),
            dram_frames: c.dram.nframes() as u64,
            dram_free: c.dram.nfree() as u64,
            dirty_pages: c.dirty,
            pm_frames: pst.alloc.nframes() as u64,
            pm_free: pst.alloc.nfree() as u64,
            pm_read_bytes: l.read_bytes.load(Ordering::Relaxed),
            pm_write_bytes: l.write_bytes.load(Ordering::Relaxed),
            pm_stall_ns: l.stall_ns.load(Ordering::Relaxed),
        }
    }

    /// Frames in use by the space's pages (DRAM and PM, each frame counted once): what the
    /// space holds, with sharing.
    pub fn frames_in_use(&self) -> (u64, u64) {
        let c = self.lock();
        let pst = self.pm.state();
        ((c.dram.nframes() - c.dram.nfree() - 1) as u64, (pst.alloc.nframes() - pst.alloc.nfree()) as u64)
    }

    /// Reference counts agree with the holders (pages, buffers, lends, the page table) and
    /// the dirty count with the flags. Call with no flush in flight (loads are waited for).
    pub fn check_invariants(&self) {
        self.wait_loads();
        let c = self.lock();
        let mut dref = vec![0u32; c.dram.nframes()];
        let mut pref = self.pm.ppt_refcounts();
        dref[ZERO_FRAME as usize] += 1;
        let mut dirty = 0;
        let count = |l: Loc, dref: &mut Vec<u32>, pref: &mut Vec<u32>| match l {
            Loc::Dram(f) => dref[f as usize] += 1,
            Loc::Pm(f) => pref[f as usize] += 1,
        };
        for &e in &c.vpt {
            assert_eq!(e & FLUSHING, 0, "check_invariants with a flush in flight");
            if let Some(l) = ent_loc(e) {
                count(l, &mut dref, &mut pref);
            }
            dirty += (e & DIRTY != 0) as u64;
            if e & DIRTY != 0 {
                assert!(ent_loc(e).is_some(), "dirty page without a current frame");
            }
        }
        for b in &c.bufs {
            for &e in &b.ents {
                if let Some(l) = bent_loc(e) {
                    count(l, &mut dref, &mut pref);
                }
            }
        }
        for &l in c.lends.values() {
            count(l, &mut dref, &mut pref);
        }
        for (f, &p) in c.persisted.iter().enumerate() {
            if p != 0 {
                assert!(c.dram.refs(f as u32) > 0, "free DRAM frame {f} remembers a PM copy");
                pref[(p - 1) as usize] += 1;
            }
        }
        assert_eq!(dirty, c.dirty, "dirty count");
        for (f, &r) in dref.iter().enumerate() {
            assert_eq!(c.dram.refs(f as u32), r, "DRAM frame {f} reference count");
        }
        let pst = self.pm.state();
        for (f, &r) in pref.iter().enumerate() {
            assert_eq!(pst.alloc.refs(f as u32), r, "PM frame {f} reference count");
        }
        c.dram.check_invariants();
        pst.alloc.check_invariants();
    }
}
