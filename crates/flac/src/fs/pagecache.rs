//! The page-cache baseline (like ext4 on PM without DAX): a DRAM cache of file pages. Reads
//! and writes copy between the application and the cache; a miss copies the page from PM
//! first (at PM's read cost); write-back copies dirty pages to PM (in place when the frame is
//! the page's alone) while the file system holds the file's lock, so writers of that file
//! wait for it, as they wait for page locks under kernel write-back. Eviction is CLOCK over
//! clean pages.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::blocks::Overlay;
use super::dax::for_pages;
use super::engine::{Engine, EngineKind, Staged};
use crate::error::{FlacError, Result};
use crate::flac::Xfer;
use crate::pm::log::Tx;
use crate::pm::Pm;
use crate::sys::{self, HUGE, PAGE};

const FREE: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Slot {
    vpn: u64,
    dirty: bool,
    referenced: bool,
    ready: bool,
    pins: u32,
}

struct Inner {
    map: HashMap<u64, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    hand: usize,
    dirty: BTreeSet<u64>,
    ov: Overlay,
    hits: u64,
    misses: u64,
    evictions: u64,
    writebacks: u64,
}

pub struct PageCacheEngine {
    pm: Arc<Pm>,
    pool: *mut u8,
    bytes: usize,
    inner: Mutex<Inner>,
    ready: Condvar,
}

// SAFETY: the pool is owned; slot contents are accessed by pin holders.
unsafe impl Send for PageCacheEngine {}
unsafe impl Sync for PageCacheEngine {}

impl Drop for PageCacheEngine {
    fn drop(&mut self) {
        // SAFETY: the pool mapped in new.
        unsafe { sys::unmap(self.pool, self.bytes) };
    }
}

impl PageCacheEngine {
    pub fn new(pm: Arc<Pm>, bytes: u64, prefault: bool) -> Result<PageCacheEngine> {
        if bytes < HUGE as u64 || !bytes.is_multiple_of(HUGE as u64) {
            return Err(FlacError::Invalid(format!("cache size must be a positive multiple of 2 MiB, got {bytes}")));
        }
        let n = bytes as usize;
        let pool = sys::reserve(n, HUGE)?;
        // SAFETY: anonymous memory over the reservation.
        unsafe { sys::map_anon_fixed(pool, n, sys::PROT_RW) }.map_err(|e| FlacError::io("allocating the page cache", e))?;
        sys::advise_huge(pool, n);
        if prefault {
            // The cache's memory is there from the start, as FLAC's DRAM frames are.
            // SAFETY: the pool mapped above.
            unsafe { sys::populate_write(pool, n) };
        }
        let nslots = n / PAGE;
        Ok(PageCacheEngine {
            pm,
            pool,
            bytes: n,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                slots: vec![Slot { vpn: FREE, dirty: false, referenced: false, ready: false, pins: 0 }; nslots],
                free: (0..nslots as u32).rev().collect(),
                hand: 0,
                dirty: BTreeSet::new(),
                ov: Overlay::default(),
                hits: 0,
                misses: 0,
                evictions: 0,
                writebacks: 0,
            }),
            ready: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot_ptr(&self, s: u32) -> *mut u8 {
        // SAFETY: inside the pool.
        unsafe { self.pool.add(s as usize * PAGE) }
    }

    /// A free slot, evicting a clean unpinned page if needed.
    fn alloc_slot(&self, g: &mut Inner) -> Result<u32> {
        if let Some(s) = g.free.pop() {
            return Ok(s);
        }
        let n = g.slots.len();
        for _ in 0..2 * n {
            let i = g.hand;
            g.hand = (g.hand + 1) % n;
            let s = g.slots[i];
            if s.pins > 0 || s.dirty || !s.ready {
                continue;
            }
            if s.referenced {
                g.slots[i].referenced = false;
                continue;
            }
            g.map.remove(&s.vpn);
            g.slots[i].vpn = FREE;
            g.evictions += 1;
            return Ok(i as u32);
        }
        Err(FlacError::NoSpace(format!("page cache full: {} dirty pages and no clean page to evict", g.dirty.len())))
    }

    /// Page `v`'s slot, pinned; filled from PM on a miss when `fill`.
    fn get(&self, v: u64, fill: bool) -> Result<u32> {
        let mut g = self.lock();
        loop {
            if let Some(&s) = g.map.get(&v) {
                if !g.slots[s as usize].ready {
                    g = self.ready.wait(g).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                g.slots[s as usize].pins += 1;
                g.slots[s as usize].referenced = true;
                g.hits += 1;
                return Ok(s);
            }
            break;
        }
        let s = self.alloc_slot(&mut g)?;
        g.slots[s as usize] = Slot { vpn: v, dirty: false, referenced: true, ready: false, pins: 1 };
        g.map.insert(v, s);
        g.misses += 1;
        let frame = g.ov.frame(&self.pm, v);
        if let Some(f) = frame {
            self.pm.incref(f);
        }
        drop(g);
        // SAFETY: the slot is pinned and not ready: nobody else touches it.
        unsafe {
            match frame {
                Some(f) if fill => self.pm.read_frame(f, 0, self.slot_ptr(s), PAGE),
                _ => std::ptr::write_bytes(self.slot_ptr(s), 0, PAGE),
            }
        }
        if let Some(f) = frame {
            self.pm.decref(f);
        }
        let mut g = self.lock();
        g.slots[s as usize].ready = true;
        drop(g);
        self.ready.notify_all();
        Ok(s)
    }

    fn unpin(&self, s: u32, dirty: bool) {
        let mut g = self.lock();
        let slot = &mut g.slots[s as usize];
        slot.pins -= 1;
        if dirty && !slot.dirty {
            slot.dirty = true;
            let v = slot.vpn;
            g.dirty.insert(v);
        }
    }

    /// Drop page `v` from the cache (clean or dirty), if cached and not pinned.
    fn forget(&self, g: &mut Inner, v: u64) {
        if let Some(s) = g.map.remove(&v) {
            debug_assert_eq!(g.slots[s as usize].pins, 0, "forgetting a pinned page");
            g.slots[s as usize] = Slot { vpn: FREE, dirty: false, referenced: false, ready: false, pins: 0 };
            g.free.push(s);
            g.dirty.remove(&v);
        }
    }
}

impl Engine for PageCacheEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Pagecache
    }

    unsafe fn read(&self, vpn: u64, off: u64, dst: *mut u8, len: usize) -> Result<Xfer> {
        for_pages(vpn, off, len, |v, po, at, n| {
            let s = self.get(v, true)?;
            // SAFETY: the slot is pinned; dst is writable for len bytes.
            unsafe { sys::copy(dst.add(at), self.slot_ptr(s).add(po), n) };
            self.unpin(s, false);
            Ok(())
        })?;
        Ok(Xfer { copied_bytes: len as u64, ..Xfer::default() })
    }

    unsafe fn write(&self, vpn: u64, off: u64, src: *const u8, len: usize) -> Result<Xfer> {
        for_pages(vpn, off, len, |v, po, at, n| {
            let s = self.get(v, n < PAGE)?;
            // SAFETY: the slot is pinned; src is readable for len bytes.
            unsafe { sys::copy(self.slot_ptr(s).add(po), src.add(at), n) };
            self.unpin(s, true);
            Ok(())
        })?;
        Ok(Xfer { copied_bytes: len as u64, ..Xfer::default() })
    }

    fn zero(&self, vpn: u64, from: u64, to: u64) -> Result<()> {
        let zeros = [0u8; PAGE];
        for_pages(vpn, from, (to - from) as usize, |v, po, _, n| {
            if n == PAGE {
                let mut g = self.lock();
                self.forget(&mut g, v);
                let pm = self.pm.clone();
                g.ov.set(&pm, v, None);
                Ok(())
            } else {
                // SAFETY: zeros is readable for n <= PAGE bytes.
                unsafe { self.write(v, po as u64, zeros.as_ptr(), n).map(|_| ()) }
            }
        })
    }

    fn discard(&self, vpn: u64, pages: u64) -> Result<()> {
        let mut g = self.lock();
        let cached: Vec<u64> = if (pages as usize) < g.map.len() {
            (vpn..vpn + pages).filter(|v| g.map.contains_key(v)).collect()
        } else {
            g.map.keys().copied().filter(|&v| v >= vpn && v < vpn + pages).collect()
        };
        for v in cached {
            self.forget(&mut g, v);
        }
        let held = g.ov.discard_range(vpn, pages);
        drop(g);
        for f in held {
            self.pm.decref(f);
        }
        Ok(())
    }

    fn relocate(&self, to: u64, from: u64, pages: u64) -> Result<()> {
        let mut g = self.lock();
        for i in 0..pages {
            if let Some(s) = g.map.remove(&(from + i)) {
                g.map.insert(to + i, s);
                g.slots[s as usize].vpn = to + i;
                if g.dirty.remove(&(from + i)) {
                    g.dirty.insert(to + i);
                }
            }
            let f = g.ov.frame(&self.pm, from + i);
            if let Some(f) = f {
                self.pm.incref(f);
                let pm = self.pm.clone();
                g.ov.set(&pm, to + i, Some(f));
            }
        }
        drop(g);
        self.discard(from, pages)
    }

    fn stage(&self, st: &mut Staged, vpn: u64, pages: u64) -> Result<()> {
        // Write-back with the file's lock held by the caller: copy each dirty page to PM.
        let dirty: Vec<u64> = self.lock().dirty.range(vpn..vpn + pages).copied().collect();
        for v in dirty {
            let mut g = self.lock();
            let Some(&s) = g.map.get(&v) else { continue };
            g.slots[s as usize].pins += 1;
            g.slots[s as usize].dirty = false;
            g.dirty.remove(&v);
            let cur = g.ov.frame(&self.pm, v);
            let target = match cur {
                Some(f) if self.pm.state().alloc.refs(f) == 1 => f,
                _ => {
                    let f = self.pm.alloc_frames(1, false)?[0];
                    self.pm.incref(f);
                    let pm = self.pm.clone();
                    g.ov.set(&pm, v, Some(f));
                    f
                }
            };
            g.writebacks += 1;
            drop(g);
            // SAFETY: the slot is pinned; target is this page's frame.
            unsafe { self.pm.write_frame(target, 0, self.slot_ptr(s), PAGE) };
            if cur != Some(target) {
                // Drop the allocation's reference: the overlay holds the frame now.
                self.pm.decref(target);
            }
            self.unpin(s, false);
            st.pages += 1;
        }
        self.lock().ov.stage_range(vpn, pages, st);
        Ok(())
    }

    fn commit(&self, mut st: Staged, meta: &Tx) -> Result<()> {
        st.tx.extend(meta);
        let r = if st.tx.is_empty() { Ok(0) } else { self.pm.commit(&st.tx) };
        self.lock().ov.committed(&st);
        for f in st.frames {
            self.pm.decref(f);
        }
        r.map(|_| ())
    }

    fn lock_through_commit(&self) -> bool {
        false
    }

    fn dirty_bytes(&self) -> u64 {
        self.lock().dirty.len() as u64 * PAGE as u64
    }

    fn cache_bytes(&self) -> u64 {
        self.bytes as u64
    }

    fn drop_caches(&self) -> Result<()> {
        let mut g = self.lock();
        let clean: Vec<u64> =
            g.map.iter().filter(|(_, &s)| !g.slots[s as usize].dirty && g.slots[s as usize].pins == 0).map(|(&v, _)| v).collect();
        for v in clean {
            self.forget(&mut g, v);
        }
        Ok(())
    }

    fn view_addr(&self, _vpn: u64) -> Option<usize> {
        None
    }

    fn stats(&self) -> serde_json::Value {
        let g = self.lock();
        let l = &self.pm.lanes;
        use std::sync::atomic::Ordering::Relaxed;
        serde_json::json!({
            "hits": g.hits, "misses": g.misses, "evictions": g.evictions, "writebacks": g.writebacks,
            "cached_pages": g.map.len(), "dirty_pages": g.dirty.len(),
            "pm_read_bytes": l.read_bytes.load(Relaxed),
            "pm_write_bytes": l.write_bytes.load(Relaxed),
            "pm_stall_ns": l.stall_ns.load(Relaxed),
        })
    }
}
