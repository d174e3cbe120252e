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
//!    page on a first touch;
//! 3. maps the page (UFFDIO_COPY) and wakes the workload.
//!
//! Time is the modelled clock the workload advances for its computation and the handler for
//! each fault (fault overhead + reclaim writes + the read, as the backend models them); each
//! fault's wall-clock time is recorded too. With one workload thread, the order of faults
//! depends only on the workload, so runs are deterministic.
//!
//! The policy is FIFO: userfaultfd reports missing pages only, never accesses to resident
//! ones, so an LRU approximation like the kernel's (which reads accessed bits) is not possible
//! here; the guest-kernel path (docs/case-studies/dpuswap.md) uses the kernel's own.

use std::collections::VecDeque;
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
}

impl Default for PagingConfig {
    fn default() -> Self {
        PagingConfig { budget_pages: 1 << 16, evict_batch: 32, fault_overhead_ns: 1_000, evict_page_ns: 100 }
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
    resident: VecDeque<u32>,
    slots: Slots,
    batch: Vec<u8>,
    page: Vec<u8>,
    faults: u64,
    major_faults: u64,
    zero_faults: u64,
    evicted_pages: u64,
    fault_ns: u64,
    lat_modelled: Histogram<u64>,
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

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

impl Pager {
    /// Reclaim a batch; returns the time it ends.
    fn evict(&mut self, base: u64, t: u64) -> Result<u64> {
        let n = (self.cfg.evict_batch as usize).min(self.resident.len());
        let mut victims: Vec<(u32, u64)> = Vec::with_capacity(n);
        for _ in 0..n {
            let p = self.resident.pop_front().expect("resident pages");
            let s = self.slots.alloc().ok_or_else(|| Error::NoSpace("swap device full".into()))?;
            victims.push((p, s));
        }
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
        Ok(done + n as u64 * self.cfg.evict_page_ns)
    }

    /// Resolve a fault on page `p`: returns the modelled time it ends and whether the page
    /// comes back from swap (its contents in `self.page`) rather than as a zero page. The
    /// caller maps it, after publishing the time (mapping wakes the workload).
    fn fault(&mut self, base: u64, p: u64, now: u64) -> Result<(u64, bool)> {
        let mut t = now + self.cfg.fault_overhead_ns;
        if self.resident.len() as u64 >= self.cfg.budget_pages {
            t = self.evict(base, t)?;
        }
        let from_swap = match self.state[p as usize] {
            NEVER => {
                self.zero_faults += 1;
                false
            }
            RESIDENT => panic!("fault on resident page {p}"),
            s => {
                self.major_faults += 1;
                let s = s as u64;
                t = self.backend.read(s * PAGE_BYTES, &mut self.page, t)?;
                // The slot is released once the page is back (the device may drop it).
                self.backend.discard(s * PAGE_BYTES, PAGE_BYTES, t)?;
                self.slots.free(s);
                true
            }
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
        let slots = backend.capacity_bytes() / PAGE_BYTES;
        let pager = Pager {
            backend,
            state: vec![NEVER; pages as usize],
            resident: VecDeque::with_capacity(cfg.budget_pages.min(pages) as usize + 1),
            slots: Slots::new(slots),
            batch: Vec::new(),
            page: vec![0; PAGE_BYTES as usize],
            faults: 0,
            major_faults: 0,
            zero_faults: 0,
            evicted_pages: 0,
            fault_ns: 0,
            lat_modelled: hist(),
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
        let pct = |h: &Histogram<u64>| json!({"count": h.len(), "mean": h.mean(), "p50": h.value_at_quantile(0.5), "p99": h.value_at_quantile(0.99), "max": h.max()});
        json!({
            "faults": p.faults, "major_faults": p.major_faults, "zero_faults": p.zero_faults,
            "evicted_pages": p.evicted_pages, "fault_time_ns": p.fault_ns,
            "resident_pages": p.resident.len(), "budget_pages": p.cfg.budget_pages,
            "fault_latency_ns": pct(&p.lat_modelled), "fault_latency_wall_ns": pct(&p.lat_wall),
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
                    pg.resident.push_back(p as u32);
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
