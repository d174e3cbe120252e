//! The paging runtime: an anonymous memory region whose pages swap to any [`SwapDevice`] under
//! a budget of resident pages, driven by real page faults (userfaultfd).
//!
//! The workload runs in the caller's thread and touches the region as ordinary memory. The
//! first touch of a page that is not resident stops that thread in the kernel and wakes the
//! handler thread here, which (like the kernel's swap path under a cgroup memory limit):
//! 1. when the budget is full, reclaims a batch of `evict_batch` pages in FIFO order of
//!    arrival: copies them out, writes them to swap slots allocated a cluster at a time
//!    (contiguous slots, Linux's 256-page swap clusters), and drops them (MADV_DONTNEED);
//! 2. reads the faulting page from its slot and releases the slot (a discard), or maps a zero
//!    page on a first touch; with swap readahead on (the default, as Linux's `vm.page-cluster`
//!    = 3), it also reads the pages of the neighbouring slots of the faulting one into a swap
//!    cache, where a later fault finds them without a device read (a minor fault);
//! 3. maps the page (UFFDIO_COPY) and wakes the workload.
//!
//! Time is the modelled clock the workload advances for its computation and the handler for
//! each fault (fault overhead + reclaim writes + the read, as the backend models them); each
//! fault's wall-clock time is recorded too. With one workload thread, the order of faults
//! depends only on the workload, so runs are deterministic.
//!
//! Readahead follows Linux's swap-slot readahead (`swap_cluster_readahead` with its adaptive
//! window, mm/swap_state.c): the window is the aligned group of slots around the faulting one,
//! of 1 up to `readahead_pages` slots, grown by the read-ahead pages that faults found in the
//! swap cache since the previous decision and halved at most per decision; with no such hits it
//! reads ahead only when the fault's slot is next to the previous one. Read-ahead pages count
//! against the budget, keep their slots until they are mapped, and leave memory without a write
//! when reclaimed untouched. Their reads are issued with the fault's own and occupy the
//! backend's links or dies, but the fault waits only for its own page (the kernel also waits
//! for that page only), and a read-ahead page is usable at once.
//!
//! The policy is FIFO: userfaultfd reports missing pages only, never accesses to resident
//! ones, so an LRU approximation like the kernel's (which reads accessed bits) is not possible
//! here; the guest-kernel path (docs/case-studies/dpuswap.md) uses the kernel's own.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::device::{SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::uffd::Uffd;

const NEVER: u32 = u32::MAX;
const RESIDENT: u32 = u32::MAX - 1;
/// Linux's swap cluster (SWAPFILE_CLUSTER).
const CLUSTER_SLOTS: u64 = 256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PagingConfig {
    /// Resident pages allowed (the local memory budget).
    pub budget_pages: u64,
    /// Pages reclaimed at once when the budget is full (Linux's SWAP_CLUSTER_MAX).
    pub evict_batch: u32,
    /// Kernel cost of a fault that goes to swap: trap, page-table and swap-cache work (ns).
    pub fault_overhead_ns: u64,
    /// Kernel cost per reclaimed page: unmapping, TLB shootdown, LRU work (ns).
    pub evict_page_ns: u64,
    /// Most swap slots read per major fault (the largest readahead window): a power of two,
    /// 1 for no readahead. Linux's default `vm.page-cluster` = 3 gives 8.
    pub readahead_pages: u32,
}

impl Default for PagingConfig {
    fn default() -> Self {
        PagingConfig { budget_pages: 1 << 16, evict_batch: 32, fault_overhead_ns: 1_000, evict_page_ns: 100, readahead_pages: 8 }
    }
}

/// The adaptive readahead window (Linux's heuristic for swap-slot readahead, in its spirit).
#[derive(Debug, Default)]
struct Readahead {
    /// Read-ahead pages that faults found in the swap cache since the last decision.
    hits: u32,
    /// The slot of the last fault that decided without hits.
    prev_slot: u64,
    /// The last window.
    last: u32,
}

impl Readahead {
    /// The window for a major fault on `slot`, at most `max` slots (a power of two).
    fn window(&mut self, slot: u64, max: u32) -> u32 {
        if max <= 1 {
            return 1;
        }
        let hits = std::mem::take(&mut self.hits);
        let mut pages = if hits == 0 {
            // Nothing to judge by: read a pair if the faults walk the slots, else none.
            if slot == self.prev_slot + 1 || slot + 1 == self.prev_slot {
                2
            } else {
                1
            }
        } else {
            (hits + 2).next_power_of_two().max(4)
        };
        // Never more than the maximum; never shrink faster than by half.
        pages = pages.min(max).max(self.last / 2);
        if hits == 0 {
            self.prev_slot = slot;
        }
        self.last = pages;
        pages
    }
}

/// Swap slots, allocated a cluster at a time so a reclaim batch lands in consecutive slots.
struct Slots {
    used: Vec<bool>,
    cluster_free: Vec<u32>,
    free_clusters: VecDeque<u64>,
    cur: Option<u64>,
    next: u64,
    scan: u64,
}

impl Slots {
    fn new(slots: u64) -> Slots {
        let clusters = slots.div_ceil(CLUSTER_SLOTS);
        Slots {
            used: vec![false; slots as usize],
            cluster_free: (0..clusters).map(|c| (slots - c * CLUSTER_SLOTS).min(CLUSTER_SLOTS) as u32).collect(),
            free_clusters: (0..clusters).collect(),
            cur: None,
            next: 0,
            scan: 0,
        }
    }

    fn take(&mut self, s: u64) -> u64 {
        assert!(!self.used[s as usize], "swap slot {s} given twice");
        self.used[s as usize] = true;
        self.cluster_free[(s / CLUSTER_SLOTS) as usize] -= 1;
        s
    }

    fn alloc(&mut self) -> Option<u64> {
        let n = self.used.len() as u64;
        if let Some(c) = self.cur {
            while self.next < ((c + 1) * CLUSTER_SLOTS).min(n) {
                let s = self.next;
                self.next += 1;
                if !self.used[s as usize] {
                    return Some(self.take(s));
                }
            }
            self.cur = None;
        }
        // A whole free cluster, else any slot (next fit).
        while let Some(c) = self.free_clusters.pop_front() {
            if self.cluster_free[c as usize] as u64 == ((c + 1) * CLUSTER_SLOTS).min(n) - c * CLUSTER_SLOTS {
                self.cur = Some(c);
                self.next = c * CLUSTER_SLOTS + 1;
                return Some(self.take(c * CLUSTER_SLOTS));
            }
        }
        for _ in 0..n {
            let s = self.scan;
            self.scan = (self.scan + 1) % n;
            if !self.used[s as usize] {
                return Some(self.take(s));
            }
        }
        None
    }

    fn free(&mut self, s: u64) {
        assert!(self.used[s as usize], "swap slot {s} freed twice");
        self.used[s as usize] = false;
        let c = s / CLUSTER_SLOTS;
        self.cluster_free[c as usize] += 1;
        let size = ((c + 1) * CLUSTER_SLOTS).min(self.used.len() as u64) - c * CLUSTER_SLOTS;
        if self.cluster_free[c as usize] as u64 == size && self.cur != Some(c) {
            self.free_clusters.push_back(c);
        }
    }
}

struct Pager {
    backend: Box<dyn SwapDevice>,
    cfg: PagingConfig,
    state: Vec<u32>,
    /// The page whose contents each swap slot holds (NEVER for a free slot).
    slot_page: Vec<u32>,
    /// Pages in memory (mapped, or read ahead into the swap cache), in order of arrival.
    resident: VecDeque<u32>,
    /// The swap cache: read-ahead pages not yet mapped, with their contents (their state is
    /// still their slot, which they keep until mapped).
    swap_cache: HashMap<u32, Box<[u8]>>,
    spare: Vec<Box<[u8]>>,
    readahead: Readahead,
    /// (slot, page) of this fault's readahead.
    ra_pages: Vec<(u64, u32)>,
    slots: Slots,
    batch: Vec<u8>,
    page: Vec<u8>,
    faults: u64,
    major_faults: u64,
    zero_faults: u64,
    minor_faults: u64,
    readahead_pages: u64,
    /// Read-ahead pages reclaimed before any fault wanted them.
    readahead_unused: u64,
    evicted_pages: u64,
    fault_ns: u64,
    lat_modelled: Histogram<u64>,
    /// Modelled latency of the faults that read their page from the device.
    lat_major: Histogram<u64>,
    lat_wall: Histogram<u64>,
}

struct Shared {
    pager: Mutex<Pager>,
    clock_ns: AtomicU64,
    stop: AtomicBool,
    failed: Mutex<Option<String>>,
}

/// A paged region. The workload reaches it through [`Paged::mem`].
pub struct Paged {
    base: *mut u8,
    len: usize,
    uffd: Arc<Uffd>,
    shared: Arc<Shared>,
    handler: Option<JoinHandle<()>>,
}

// SAFETY: the region is owned by this value; the handler thread reads pages only while the
// (single) workload thread waits in a fault.
unsafe impl Send for Paged {}

use crate::latency_histogram as hist;

impl Pager {
    /// Reclaim a batch; returns the time it ends. Read-ahead pages that no fault wanted leave
    /// memory without a write (their slots still hold them).
    fn evict(&mut self, base: u64, t: u64) -> Result<u64> {
        let batch = (self.cfg.evict_batch as usize).min(self.resident.len());
        let mut victims: Vec<(u32, u64)> = Vec::with_capacity(batch);
        for _ in 0..batch {
            let p = self.resident.pop_front().expect("resident pages");
            if let Some(buf) = self.swap_cache.remove(&p) {
                self.spare.push(buf);
                self.readahead_unused += 1;
                continue;
            }
            let s = self.slots.alloc().ok_or_else(|| Error::NoSpace("swap device full".into()))?;
            self.slot_page[s as usize] = p;
            victims.push((p, s));
        }
        let n = victims.len();
        // Consecutive slots go out as one write.
        victims.sort_by_key(|&(_, s)| s);
        self.batch.resize(n * PAGE_BYTES as usize, 0);
        for (i, &(p, _)) in victims.iter().enumerate() {
            // SAFETY: page p is resident and the workload thread is stopped in a fault.
            let src = unsafe { std::slice::from_raw_parts((base + p as u64 * PAGE_BYTES) as *const u8, PAGE_BYTES as usize) };
            self.batch[i * PAGE_BYTES as usize..(i + 1) * PAGE_BYTES as usize].copy_from_slice(src);
        }
        let mut done = t;
        let mut i = 0;
        while i < n {
            let mut k = 1;
            while i + k < n && victims[i + k].1 == victims[i].1 + k as u64 {
                k += 1;
            }
            let data = &self.batch[i * PAGE_BYTES as usize..(i + k) * PAGE_BYTES as usize];
            done = done.max(self.backend.write(victims[i].1 * PAGE_BYTES, data, t)?);
            i += k;
        }
        for &(p, s) in &victims {
            // SAFETY: a page of our mapping; the next touch faults again.
            let r = unsafe { libc::madvise((base + p as u64 * PAGE_BYTES) as *mut libc::c_void, PAGE_BYTES as usize, libc::MADV_DONTNEED) };
            if r != 0 {
                return Err(Error::Io(std::io::Error::last_os_error()));
            }
            self.state[p as usize] = s as u32;
        }
        self.evicted_pages += n as u64;
        Ok(done + batch as u64 * self.cfg.evict_page_ns)
    }

    /// Give slot `s` back once its page is in memory for good (the device may drop it).
    fn release(&mut self, s: u64, t: u64) -> Result<()> {
        self.backend.discard(s * PAGE_BYTES, PAGE_BYTES, t)?;
        self.slots.free(s);
        self.slot_page[s as usize] = NEVER;
        Ok(())
    }

    /// The swapped-out pages of the readahead window around slot `s` (aligned, `window`
    /// slots), the faulting page's own slot excluded, into `ra_pages`.
    fn readahead_candidates(&mut self, s: u64, window: u32) {
        self.ra_pages.clear();
        let w = window as u64;
        let start = s & !(w - 1);
        for x in start..(start + w).min(self.slot_page.len() as u64) {
            let q = self.slot_page[x as usize];
            if x != s && q != NEVER && self.state[q as usize] == x as u32 && !self.swap_cache.contains_key(&q) {
                self.ra_pages.push((x, q));
            }
        }
    }

    /// Read the pages of `ra_pages` into the swap cache, consecutive slots as one request,
    /// issued at `t` (their completion does not hold up the fault).
    fn read_ahead(&mut self, t: u64) -> Result<()> {
        let mut i = 0;
        while i < self.ra_pages.len() {
            let mut k = 1;
            while i + k < self.ra_pages.len() && self.ra_pages[i + k].0 == self.ra_pages[i].0 + k as u64 {
                k += 1;
            }
            self.batch.resize(k * PAGE_BYTES as usize, 0);
            self.backend.read(self.ra_pages[i].0 * PAGE_BYTES, &mut self.batch, t)?;
            for j in 0..k {
                let q = self.ra_pages[i + j].1;
                let mut buf = self.spare.pop().unwrap_or_else(|| vec![0; PAGE_BYTES as usize].into_boxed_slice());
                buf.copy_from_slice(&self.batch[j * PAGE_BYTES as usize..(j + 1) * PAGE_BYTES as usize]);
                self.swap_cache.insert(q, buf);
                self.resident.push_back(q);
            }
            i += k;
        }
        self.readahead_pages += self.ra_pages.len() as u64;
        Ok(())
    }

    /// Resolve a fault on page `p`: returns the modelled time it ends and whether the page
    /// comes back from swap (its contents in `self.page`) rather than as a zero page. The
    /// caller maps it, after publishing the time (mapping wakes the workload).
    fn fault(&mut self, base: u64, p: u64, now: u64) -> Result<(u64, bool)> {
        let mut t = now + self.cfg.fault_overhead_ns;
        let s = self.state[p as usize];
        if s == RESIDENT {
            panic!("fault on resident page {p}");
        }
        if let Some(buf) = self.swap_cache.remove(&(p as u32)) {
            // Read ahead earlier: in memory already (and counted in the budget), no device read.
            self.minor_faults += 1;
            self.readahead.hits += 1;
            self.page.copy_from_slice(&buf);
            self.spare.push(buf);
            self.release(s as u64, t)?;
            self.state[p as usize] = RESIDENT;
            return Ok((t, true));
        }
        if s != NEVER {
            let w = self.readahead.window(s as u64, self.cfg.readahead_pages);
            self.readahead_candidates(s as u64, w);
        } else {
            self.ra_pages.clear();
        }
        let incoming = 1 + self.ra_pages.len() as u64;
        while self.resident.len() as u64 + incoming > self.cfg.budget_pages && !self.resident.is_empty() {
            t = self.evict(base, t)?;
        }
        let from_swap = if s == NEVER {
            self.zero_faults += 1;
            false
        } else {
            self.major_faults += 1;
            let s = s as u64;
            let issued = t;
            t = self.backend.read(s * PAGE_BYTES, &mut self.page, t)?;
            self.release(s, t)?;
            self.read_ahead(issued)?;
            true
        };
        self.state[p as usize] = RESIDENT;
        self.resident.push_back(p as u32);
        Ok((t, from_swap))
    }
}

impl Paged {
    /// A region of `bytes` (rounded up to pages) paging to `backend` with `cfg`'s budget.
    pub fn new(bytes: u64, cfg: PagingConfig, backend: Box<dyn SwapDevice>) -> Result<Paged> {
        let pages = bytes.div_ceil(PAGE_BYTES);
        if pages == 0 || pages >= RESIDENT as u64 {
            return Err(Error::Config(format!("paged region of {bytes} bytes: expected 1 page to 16 TiB")));
        }
        if cfg.budget_pages == 0 || cfg.evict_batch == 0 || cfg.evict_batch > 1024 {
            return Err(Error::Config(format!(
                "paging: budget_pages {} and evict_batch {} must be positive (batch <= 1024)",
                cfg.budget_pages, cfg.evict_batch
            )));
        }
        if !cfg.readahead_pages.is_power_of_two() || cfg.readahead_pages > 256 {
            return Err(Error::Config(format!(
                "paging: readahead_pages = {}: expected a power of two from 1 (no readahead) to 256",
                cfg.readahead_pages
            )));
        }
        let swapped = pages.saturating_sub(cfg.budget_pages) + cfg.evict_batch as u64;
        if cfg.budget_pages < pages && backend.capacity_bytes() / PAGE_BYTES < swapped {
            return Err(Error::Config(format!(
                "paging: the {} backend holds {} pages, the region may swap out {swapped}",
                backend.kind(),
                backend.capacity_bytes() / PAGE_BYTES
            )));
        }
        let len = (pages * PAGE_BYTES) as usize;
        // SAFETY: a fresh private anonymous mapping.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        let unmap = || {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(base, len) };
        };
        // Transparent huge pages would fault 2 MiB at a time: keep the 4 KiB granularity.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
        let uffd = match Uffd::new().and_then(|u| u.register(base as u64, len as u64).map(|_| u)) {
            Ok(u) => Arc::new(u),
            Err(e) => {
                unmap();
                return Err(Error::Io(e));
            }
        };
        // Slots beyond every page out plus a batch in flight are never needed: leaving them out
        // gives every backend the same slot layout (and so the same readahead and faults)
        // whatever its capacity's rounding.
        let slots = (backend.capacity_bytes() / PAGE_BYTES).min(pages + cfg.evict_batch as u64);
        let pager = Pager {
            backend,
            state: vec![NEVER; pages as usize],
            slot_page: vec![NEVER; slots as usize],
            resident: VecDeque::with_capacity(cfg.budget_pages.min(pages) as usize + 1),
            swap_cache: HashMap::new(),
            spare: Vec::new(),
            readahead: Readahead::default(),
            ra_pages: Vec::new(),
            slots: Slots::new(slots),
            batch: Vec::new(),
            page: vec![0; PAGE_BYTES as usize],
            faults: 0,
            major_faults: 0,
            zero_faults: 0,
            minor_faults: 0,
            readahead_pages: 0,
            readahead_unused: 0,
            evicted_pages: 0,
            fault_ns: 0,
            lat_modelled: hist(),
            lat_major: hist(),
            lat_wall: hist(),
            cfg,
        };
        let shared = Arc::new(Shared {
            pager: Mutex::new(pager),
            clock_ns: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
        });
        let (u, sh, b) = (uffd.clone(), shared.clone(), base as u64);
        let handler = std::thread::Builder::new().name("ssdlab-pager".into()).spawn(move || handle(&u, &sh, b, len as u64))?;
        Ok(Paged { base: base as *mut u8, len, uffd, shared, handler: Some(handler) })
    }

    /// The region as memory.
    pub fn mem(&mut self) -> &mut [u8] {
        // SAFETY: our mapping, `len` bytes, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// The modelled clock (ns).
    pub fn now_ns(&self) -> u64 {
        self.shared.clock_ns.load(Ordering::Acquire)
    }
    /// Charge `ns` of computation to the modelled clock.
    pub fn advance(&self, ns: u64) {
        self.shared.clock_ns.fetch_add(ns, Ordering::AcqRel);
    }
    /// Why the runtime failed (a backend error during a fault), if it did. The fault was
    /// resolved with a zero page so the workload could stop; its results must be discarded.
    pub fn failed(&self) -> Option<String> {
        self.shared.failed.lock().expect("failed flag").clone()
    }

    /// Counters and fault-latency percentiles so far, with the backend's stats.
    pub fn stats(&self) -> serde_json::Value {
        let mut p = self.shared.pager.lock().expect("pager");
        let pct = crate::percentiles;
        json!({
            "faults": p.faults, "major_faults": p.major_faults, "zero_faults": p.zero_faults,
            "minor_faults": p.minor_faults, "readahead_pages": p.readahead_pages,
            "readahead_unused": p.readahead_unused, "swap_cache_pages": p.swap_cache.len(),
            "evicted_pages": p.evicted_pages, "fault_time_ns": p.fault_ns,
            "resident_pages": p.resident.len(), "budget_pages": p.cfg.budget_pages,
            "fault_latency_ns": pct(&p.lat_modelled), "major_fault_latency_ns": pct(&p.lat_major),
            "fault_latency_wall_ns": pct(&p.lat_wall),
            "backend": p.backend.stats(),
        })
    }

    /// Fault-latency histograms (modelled, wall) for merging into reports.
    pub fn fault_ns(&self) -> u64 {
        self.shared.pager.lock().expect("pager").fault_ns
    }
}

fn handle(uffd: &Uffd, sh: &Shared, base: u64, len: u64) {
    while !sh.stop.load(Ordering::Acquire) {
        let addr = match uffd.next_fault(50) {
            Ok(Some(a)) => a,
            Ok(None) => continue,
            Err(e) => {
                *sh.failed.lock().expect("failed flag") = Some(format!("userfaultfd: {e}"));
                return;
            }
        };
        assert!(addr >= base && addr < base + len, "fault at {addr:#x} outside the region");
        let p = (addr - base) / PAGE_BYTES;
        let wall = Instant::now();
        let mut pg = sh.pager.lock().expect("pager");
        let now = sh.clock_ns.load(Ordering::Acquire);
        let addr = base + p * PAGE_BYTES;
        let major = pg.major_faults;
        match pg.fault(base, p, now) {
            Ok((t, from_swap)) => {
                // Publish the time before the workload wakes up.
                sh.clock_ns.store(t, Ordering::Release);
                let mapped = if from_swap { uffd.copy(addr, &pg.page) } else { uffd.zeropage(addr, PAGE_BYTES) };
                if let Err(e) = mapped {
                    // Never leave the workload stuck in its fault: a zero page, and the run failed.
                    sh.failed.lock().expect("failed flag").get_or_insert(format!("page {p}: mapping it: {e}"));
                    let _ = uffd.zeropage(addr, PAGE_BYTES);
                }
                let d = t - now;
                pg.faults += 1;
                pg.fault_ns += d;
                pg.lat_modelled.record(d.max(1)).expect("histogram range");
                if pg.major_faults > major {
                    pg.lat_major.record(d.max(1)).expect("histogram range");
                }
                pg.lat_wall.record((wall.elapsed().as_nanos() as u64).max(1)).expect("histogram range");
            }
            Err(e) => {
                let mut f = sh.failed.lock().expect("failed flag");
                if f.is_none() {
                    *f = Some(format!("page {p}: {e}"));
                }
                drop(f);
                // Wake the workload so it can stop; it checks `failed` after each operation.
                if pg.state[p as usize] != RESIDENT {
                    pg.state[p as usize] = RESIDENT;
                    // A read-ahead page is in the resident queue already.
                    if pg.swap_cache.remove(&(p as u32)).is_none() {
                        pg.resident.push_back(p as u32);
                    }
                }
                let _ = uffd.zeropage(addr, PAGE_BYTES);
            }
        }
    }
}

impl Drop for Paged {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.handler.take() {
            let _ = h.join();
        }
        let _ = self.uffd.unregister(self.base as u64, self.len as u64);
        // SAFETY: our mapping; nothing refers to it after this.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readahead_window_grows_with_hits_and_shrinks_by_half() {
        let mut r = Readahead::default();
        assert_eq!(r.window(100, 1), 1, "readahead off");
        assert_eq!(r.window(100, 8), 1, "a lone fault reads only its page");
        assert_eq!(r.window(500, 8), 1);
        assert_eq!(r.window(501, 8), 2, "a fault next to the previous one reads a pair");
        r.hits = 1;
        assert_eq!(r.window(700, 8), 4, "hits open the window (at least 4)");
        r.hits = 5;
        assert_eq!(r.window(900, 8), 8, "hits + 2 rounded up to a power of two, at most the maximum");
        assert_eq!(r.window(2000, 8), 4, "no hits: half the last window, not less");
        assert_eq!(r.window(3000, 8), 2);
        assert_eq!(r.window(4000, 8), 1);
        assert_eq!(r.window(5000, 8), 1);
    }

    #[test]
    fn slots_fill_clusters_in_order_and_reuse_freed_ones() {
        let mut s = Slots::new(600);
        let a: Vec<u64> = (0..300).map(|_| s.alloc().unwrap()).collect();
        assert_eq!(a, (0..300).collect::<Vec<_>>());
        for x in 0..256 {
            s.free(x);
        }
        // Cluster 1 goes on where it was, then cluster 2 (88 slots), then cluster 0 (freed whole).
        let b: Vec<u64> = (0..300).map(|_| s.alloc().unwrap()).collect();
        assert_eq!(b[0], 300);
        assert_eq!(b[299], 599);
        assert_eq!(s.alloc(), Some(0));
        for _ in 1..256 {
            assert!(s.alloc().is_some());
        }
        assert_eq!(s.alloc(), None);
    }
}
