//! FLAC: one virtual space over DRAM and PM.
//!
//! - **Unified space**: a reserved virtual range; page `vpn` of it has a current copy in a DRAM
//!   frame, a PM frame, or none (a hole reads as zeros). The persistent page table (in PM)
//!   says which PM frame holds each page's committed copy; the volatile table here says where
//!   the current copy is and whether it is dirty, being flushed or being loaded. The space is
//!   mapped on demand (a touch maps the page's current frame) for code that reads or writes it
//!   directly; file systems move data through the calls below.
//! - **Attach** (`zcopy_to_flac`, `zcopy_from_flac`, [`Flac::attach`]): pages move between
//!   an application buffer and the space by mapping frames, not by copying bytes. Both sides
//!   then share the frames copy-on-write: the application side is mapped read-only and a
//!   write faults ([`crate::cow`]) into a private frame; FLAC-side writes copy explicitly.
//!   Destinations that are FLAC [`Buffer`]s get shared mappings (their pages stay frames and
//!   can be attached again); other memory gets private mappings (the kernel copies on write).
//! - **Flush** ([`Flac::pflush_add`], [`Flac::pflush_commit`]): `add` takes a reference to
//!   each dirty page's frame (so later writes copy instead of changing it) under the short
//!   lock; `commit` copies the frames to fresh PM frames with no lock held, then commits the
//!   page-table updates with the file system's metadata through the metadata log.
//! - **Asynchronous load**: a miss maps the PM frame straight into the destination and a
//!   loader thread migrates the page to DRAM in the background.
//!
//! One lock guards the volatile state; it is held for bookkeeping and `mmap` calls, never for
//! copying data or waiting for PM.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::dram::Dram;
use crate::error::{FlacError, Result};
use crate::frames::FrameAlloc;
use crate::pm::cost::PmCost;
use crate::pm::log::Tx;
use crate::pm::{Format, Pm};
use crate::sys::{self, HUGE, HUGE_PAGES, PAGE};

/// How a FLAC instance is opened.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlacConfig {
    /// The PM image (a file; on tmpfs for PM-like persistence across process crashes).
    pub pm_path: PathBuf,
    /// Create the image with these sizes if it does not exist.
    pub format: Option<Format>,
    /// DRAM cache size (bytes, a multiple of 2 MiB).
    pub dram_bytes: u64,
    /// A directory (a tmpfs) for the DRAM frame file; none = a memfd. A tmpfs mounted with
    /// `huge=always` gives the DRAM frames 2 MiB pages.
    pub dram_dir: Option<PathBuf>,
    /// PM's cost model.
    pub cost: PmCost,
    /// On a miss, map the PM frame and migrate the page to DRAM in the background (true), or
    /// copy it to DRAM first (false: the synchronous-load ablation).
    pub async_load: bool,
    /// How long to wait for another process to release the image (ms).
    pub lock_wait_ms: u64,
    /// Allocate (and clear) all DRAM frames at start, so no I/O pays for a page's first
    /// touch; off for short-lived processes that use little of the cache (the shim).
    pub prefault: bool,
    /// A write fault on a shared buffer page copies up to this many pages from it on (those
    /// that are shared too), mapped with one call: fault-around for copy-on-write.
    pub cow_window_pages: usize,
}

impl Default for FlacConfig {
    fn default() -> Self {
        FlacConfig {
            pm_path: PathBuf::new(),
            format: None,
            dram_bytes: 256 << 20,
            dram_dir: None,
            cost: PmCost::default(),
            async_load: true,
            lock_wait_ms: 0,
            prefault: true,
            cow_window_pages: 16,
        }
    }
}

/// Where a page's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loc {
    Dram(u32),
    Pm(u32),
}

/// DRAM frame 0 is all zeros, never written, and shared by every hole mapped anywhere.
pub const ZERO_FRAME: u32 = 0;

// Volatile page-table entry: frame (32 bits), kind (2), flags, view state (2).
const FRAME_MASK: u64 = 0xffff_ffff;
const KIND_SHIFT: u32 = 32;
const KIND_MASK: u64 = 3 << KIND_SHIFT;
const K_COMMITTED: u64 = 0;
const K_DRAM: u64 = 1;
const K_PM: u64 = 2;
const DIRTY: u64 = 1 << 34;
const FLUSHING: u64 = 1 << 35;
const LOADING: u64 = 1 << 36;
const VIEW_SHIFT: u32 = 37;
const VIEW_MASK: u64 = 3 << VIEW_SHIFT;
const V_NONE: u64 = 0;
const V_RO: u64 = 1;
const V_RW: u64 = 2;

fn ent_kind(e: u64) -> u64 {
    (e & KIND_MASK) >> KIND_SHIFT
}

fn ent_loc(e: u64) -> Option<Loc> {
    let f = (e & FRAME_MASK) as u32;
    match ent_kind(e) {
        K_DRAM => Some(Loc::Dram(f)),
        K_PM => Some(Loc::Pm(f)),
        _ => None,
    }
}

fn ent_view(e: u64) -> u64 {
    (e & VIEW_MASK) >> VIEW_SHIFT
}

fn with_view(e: u64, v: u64) -> u64 {
    (e & !VIEW_MASK) | v << VIEW_SHIFT
}

fn loc_bits(l: Loc) -> u64 {
    match l {
        Loc::Dram(f) => K_DRAM << KIND_SHIFT | f as u64,
        Loc::Pm(f) => K_PM << KIND_SHIFT | f as u64,
    }
}

// Buffer page entry: frame (32), kind (2: 0 = private anonymous copy), read-only (shared),
// locked (attached read-only: writes are not allowed).
const B_RO: u64 = 1 << 34;
const B_LOCKED: u64 = 1 << 35;

fn bent_loc(e: u64) -> Option<Loc> {
    ent_loc(e & (FRAME_MASK | KIND_MASK))
}

struct BufMeta {
    base: usize,
    ents: Vec<u64>,
}

/// How the destination of an attach may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Both sides may be written; a write gets a private copy of the page.
    Cow,
    /// The destination is read-only: a write to it is a segmentation fault, as with
    /// `mmap(PROT_READ)`.
    ReadOnly,
}

/// What a transfer did (bytes moved by mapping vs by copying).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Xfer {
    pub mapped_bytes: u64,
    pub copied_bytes: u64,
    /// Pages served from PM (misses).
    pub pm_pages: u64,
}

impl Xfer {
    pub fn add(&mut self, o: Xfer) {
        self.mapped_bytes += o.mapped_bytes;
        self.copied_bytes += o.copied_bytes;
        self.pm_pages += o.pm_pages;
    }
}

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

/// A flush in progress: the frames of the pages added, held until the commit.
pub struct PflushHandle {
    items: Vec<(u64, Loc)>,
}

impl PflushHandle {
    pub fn pages(&self) -> usize {
        self.items.len()
    }
}

struct Core {
    vpt: Vec<u64>,
    dram: FrameAlloc,
    /// CLOCK reference bits over DRAM frames (set on hits).
    referenced: Vec<u64>,
    /// The eviction hand (a page of the space).
    hand: usize,
    bufs: Vec<BufMeta>,
    /// Pages of application memory (not FLAC buffers) holding a private mapping of a frame.
    lends: HashMap<usize, Loc>,
    dirty: u64,
    /// DRAM frame -> PM frame + 1 holding the same bytes (0: none): a flush of another page
    /// sharing the frame maps that PM frame instead of copying again. Cleared when the frame
    /// can be written in place; holds a reference to the PM frame.
    persisted: Vec<u32>,
}

struct LoadQueue {
    runs: VecDeque<(u64, u64)>,
    /// Runs taken by the loader and not finished.
    busy: usize,
    stop: bool,
}

pub struct Inner {
    pub pm: Pm,
    dram: Dram,
    space: *mut u8,
    space_pages: u64,
    core: Mutex<Core>,
    /// Thread id holding `core` (0: none), for the fault handler's reentrancy assertion.
    owner: AtomicI32,
    cfg: FlacConfig,
    pid: i32,
    pub stats: Stats,
    loadq: Mutex<LoadQueue>,
    loadcv: Condvar,
    flushcv: Condvar,
    slot: AtomicI32,
    /// Pages may be mapped in the view (skip view work when nobody ever touched the space).
    view_used: AtomicBool,
    /// Span of addresses buffers have occupied (for the fault handler's quick test).
    buf_lo: AtomicUsize,
    buf_hi: AtomicUsize,
}

// SAFETY: the raw pointers are mappings owned by this struct; mutable state is behind `core`.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// A FLAC instance. Dropping it stops its loader; dirty pages not committed are lost, as in a
/// crash (commit them with [`Flac::pflush_add`] / [`Flac::pflush_commit`]).
pub struct Flac {
    inner: Arc<Inner>,
    loader: Mutex<Option<JoinHandle<()>>>,
}

impl std::ops::Deref for Flac {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Drop for Flac {
    fn drop(&mut self) {
        self.inner.loadq.lock().unwrap().stop = true;
        self.inner.loadcv.notify_all();
        if let Some(h) = self.loader.lock().unwrap().take() {
            let _ = h.join();
        }
        let slot = self.inner.slot.load(Ordering::SeqCst);
        if slot >= 0 {
            crate::cow::unregister(slot as usize);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: the space reservation made in `init`.
        unsafe { sys::unmap(self.space, self.space_pages as usize * PAGE) };
    }
}

struct Guard<'a> {
    g: MutexGuard<'a, Core>,
    owner: &'a AtomicI32,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

impl std::ops::Deref for Guard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.g
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.g
    }
}

thread_local! {
    static TID: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

fn my_tid() -> i32 {
    TID.with(|t| {
        if t.get() == 0 {
            t.set(sys::gettid());
        }
        t.get()
    })
}

enum Region {
    Space,
    Buffer(usize),
    Foreign,
}

impl Flac {
    /// Create or recover the FLAC space in `cfg.pm_path`.
    pub fn init(cfg: FlacConfig) -> Result<Arc<Flac>> {
        crate::crash::arm_from_env();
        let pm = Pm::open(&cfg.pm_path, cfg.format.as_ref(), cfg.cost.clone(), cfg.lock_wait_ms)?;
        let dram = Dram::new(cfg.dram_bytes, cfg.dram_dir.as_deref(), cfg.prefault)?;
        let space_pages = pm.geometry().space_pages;
        let space = sys::reserve(space_pages as usize * PAGE, HUGE)?;
        let mut dalloc = FrameAlloc::new(dram.frames());
        let z = dalloc.alloc().expect("a fresh DRAM pool has frames");
        assert_eq!(z, ZERO_FRAME);
        let nd = dram.frames();
        let inner = Arc::new(Inner {
            pm,
            dram,
            space,
            space_pages,
            core: Mutex::new(Core {
                vpt: vec![0; space_pages as usize],
                dram: dalloc,
                referenced: vec![0; nd.div_ceil(64)],
                hand: 0,
                bufs: Vec::new(),
                lends: HashMap::new(),
                dirty: 0,
                persisted: vec![0; nd],
            }),
            owner: AtomicI32::new(0),
            cfg,
            pid: sys::getpid(),
            stats: Stats::default(),
            loadq: Mutex::new(LoadQueue { runs: VecDeque::new(), busy: 0, stop: false }),
            loadcv: Condvar::new(),
            flushcv: Condvar::new(),
            slot: AtomicI32::new(-1),
            view_used: AtomicBool::new(false),
            buf_lo: AtomicUsize::new(usize::MAX),
            buf_hi: AtomicUsize::new(0),
        });
        let slot = crate::cow::register(Arc::as_ptr(&inner))
            .ok_or_else(|| FlacError::NoSpace("too many FLAC instances in this process (64)".into()))?;
        inner.slot.store(slot as i32, Ordering::SeqCst);
        let loader = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("flac-loader".into())
                .spawn(move || inner.loader_main())
                .map_err(|e| FlacError::io("starting the FLAC loader thread", e))?
        };
        Ok(Arc::new(Flac { inner, loader: Mutex::new(Some(loader)) }))
    }
}

impl Inner {
    pub fn config(&self) -> &FlacConfig {
        &self.cfg
    }

    /// Base address of the FLAC space.
    pub fn space_base(&self) -> *mut u8 {
        self.space
    }

    pub fn space_pages(&self) -> u64 {
        self.space_pages
    }

    /// The address of page `vpn` of the space.
    pub fn addr(&self, vpn: u64) -> usize {
        assert!(vpn <= self.space_pages);
        self.space as usize + vpn as usize * PAGE
    }

    fn lock(&self) -> Guard<'_> {
        let me = my_tid();
        assert_ne!(self.owner.load(Ordering::Acquire), me, "FLAC lock taken twice by one thread");
        self.lock_as(me)
    }

    /// Take the lock as thread `tid` (the fault handler passes the raw thread id: no
    /// thread-local storage in a signal handler).
    fn lock_as(&self, tid: i32) -> Guard<'_> {
        let g = self.core.lock().unwrap_or_else(|e| e.into_inner());
        self.owner.store(tid, Ordering::Release);
        Guard { g, owner: &self.owner }
    }

    /// Whether `addr` may be this instance's (its space, or within the span of its buffers;
    /// the exact buffer is found under the lock).
    pub(crate) fn owns(&self, addr: usize) -> bool {
        self.in_space(addr) || (addr >= self.buf_lo.load(Ordering::Relaxed) && addr < self.buf_hi.load(Ordering::Relaxed))
    }

    fn in_space(&self, addr: usize) -> bool {
        addr >= self.space as usize && addr < self.space as usize + self.space_pages as usize * PAGE
    }

    fn vpn_of(&self, addr: usize) -> u64 {
        debug_assert!(self.in_space(addr));
        ((addr - self.space as usize) / PAGE) as u64
    }

    fn check_space(&self, addr: usize, len: usize, what: &str) -> Result<u64> {
        if !self.in_space(addr) || addr + len > self.space as usize + self.space_pages as usize * PAGE {
            return Err(FlacError::Invalid(format!("{what}: {addr:#x}+{len} is not inside the FLAC space")));
        }
        Ok(self.vpn_of(addr))
    }

    fn region(c: &Core, addr: usize, space: (usize, usize)) -> Region {
        if addr >= space.0 && addr < space.1 {
            return Region::Space;
        }
        match c.bufs.binary_search_by(|b| b.base.cmp(&addr)) {
            Ok(i) => Region::Buffer(i),
            Err(0) => Region::Foreign,
            Err(i) => {
                let b = &c.bufs[i - 1];
                if addr < b.base + b.ents.len() * PAGE {
                    Region::Buffer(i - 1)
                } else {
                    Region::Foreign
                }
            }
        }
    }

    fn space_bounds(&self) -> (usize, usize) {
        (self.space as usize, self.space as usize + self.space_pages as usize * PAGE)
    }

    // ---- frames ------------------------------------------------------------------------

    #[inline]
    pub fn loc_ptr(&self, l: Loc) -> *mut u8 {
        match l {
            Loc::Dram(f) => self.dram.frame_ptr(f),
            Loc::Pm(f) => self.pm.frame_ptr(f),
        }
    }

    fn fd_off(&self, l: Loc) -> (i32, u64) {
        match l {
            Loc::Dram(f) => (self.dram.fd(), self.dram.frame_off(f)),
            Loc::Pm(f) => (self.pm.fd(), self.pm.frame_off(f)),
        }
    }

    fn incref(&self, c: &mut Core, l: Loc) {
        match l {
            Loc::Dram(f) => c.dram.incref(f),
            Loc::Pm(f) => self.pm.incref(f),
        }
    }

    fn decref(&self, c: &mut Core, l: Loc) {
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
    fn forget_persisted(&self, c: &mut Core, f: u32) {
        let p = std::mem::take(&mut c.persisted[f as usize]);
        if p != 0 {
            self.pm.decref(p - 1);
        }
    }

    /// Where page `vpn`'s current copy is (None: a hole).
    fn current(&self, c: &Core, vpn: u64) -> Option<Loc> {
        let e = c.vpt[vpn as usize];
        ent_loc(e).or_else(|| self.pm.state().ppt(vpn).map(Loc::Pm))
    }

    /// Make `l` (a reference the caller holds, which passes to the page) page `vpn`'s current
    /// copy (None: fall back to the committed copy), keeping flags and view state.
    fn set_current(&self, c: &mut Core, vpn: u64, new: Option<(Loc, bool)>) {
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
    fn alloc_dram(&self, c: &mut Core, n: usize, huge_first: bool) -> Result<Vec<u32>> {
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
    fn evict(&self, c: &mut Core, want: usize) -> Result<usize> {
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

    // ---- mapping -----------------------------------------------------------------------

    /// Map `locs` (None = the zero frame) over `va` page by page, one `mmap` per run of
    /// consecutive frames of one tier.
    ///
    /// # Safety
    /// `va..va + locs.len() pages` must be owned by the caller (a buffer, application memory
    /// handed over, or the view).
    unsafe fn map_locs(&self, va: usize, locs: &[Option<Loc>], prot: i32, private: bool) -> Result<()> {
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
    fn view_invalidate(&self, c: &mut Core, vpn: u64, n: u64) -> Result<()> {
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
    fn view_downgrade(&self, c: &mut Core, vpn: u64, n: u64) -> Result<()> {
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

    /// Make page `vpn`'s current copy a DRAM frame only the page holds (copying a shared
    /// frame, loading from PM, or zero-filling a hole), mark it dirty, and return it.
    fn page_for_write(&self, c: &mut Core, vpn: u64) -> Result<u32> {
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

    // ---- buffers -----------------------------------------------------------------------

    fn buf_index(c: &Core, base: usize) -> usize {
        c.bufs.binary_search_by(|b| b.base.cmp(&base)).expect("registered buffer")
    }

    /// Protect the buffer pages `[i, i + n)` of buffer `b` that are writable (their frames are
    /// about to be shared).
    fn buf_protect(&self, c: &mut Core, b: usize, i: usize, n: usize) -> Result<()> {
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

    // ---- faults ------------------------------------------------------------------------

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

    fn buffer_fault(&self, c: &mut Core, page: usize) -> Result<bool> {
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

fn map_error(e: std::io::Error, len: usize) -> FlacError {
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

impl Guard<'_> {
    /// Wait on `cv` (releasing the lock), then take it again.
    fn wait(self, cv: &Condvar) -> Self {
        let tid = self.owner.load(Ordering::Relaxed);
        self.owner.store(0, Ordering::Release);
        // Move the MutexGuard out to wait on it; `self` is forgotten so Drop does not run twice.
        let g = unsafe { std::ptr::read(&self.g) };
        let owner = self.owner;
        std::mem::forget(self);
        let g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        owner.store(tid, Ordering::Release);
        Guard { g, owner }
    }
}

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

    /// Move `len` bytes from `from` (any readable memory) to `to` in the FLAC space: whole
    /// pages whose offsets match are attached (frames shared copy-on-write, or copied once
    /// into a frame if the source is not FLAC memory), the rest is copied.
    pub fn zcopy_to_flac(&self, to: usize, from: *const u8, len: usize) -> Result<Xfer> {
        self.mem_to_flac(to, from as usize, len, false)
    }

    /// Like [`Flac::zcopy_to_flac`] but always copying (the copying baseline of a transfer).
    pub fn copy_to_flac(&self, to: usize, from: *const u8, len: usize) -> Result<Xfer> {
        self.mem_to_flac(to, from as usize, len, true)
    }

    /// Move `len` bytes from `from` in the FLAC space to `to` (any writable memory): whole
    /// pages are attached (a FLAC buffer gets shared read-only pages, other memory private
    /// ones the kernel copies on write), the rest is copied. `mode` ReadOnly maps the pages
    /// read-only for good.
    pub fn zcopy_from_flac(&self, to: *mut u8, from: usize, len: usize, mode: AttachMode) -> Result<Xfer> {
        self.flac_to_mem(to as usize, from, len, mode, false)
    }

    /// Like [`Flac::zcopy_from_flac`] but always copying.
    pub fn copy_from_flac(&self, to: *mut u8, from: usize, len: usize) -> Result<Xfer> {
        self.flac_to_mem(to as usize, from, len, AttachMode::Cow, true)
    }

    /// Map `len` bytes (whole pages) of `from` at `to`, sharing the frames copy-on-write.
    /// `to` and `from` are FLAC-space addresses or FLAC buffers (or, as destination, any
    /// memory the caller hands over).
    pub fn attach(&self, to: usize, from: usize, len: usize, mode: AttachMode) -> Result<Xfer> {
        if !to.is_multiple_of(PAGE) || !from.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(FlacError::Invalid(format!("attach: {to:#x} <- {from:#x} +{len}: addresses and length must be page-aligned")));
        }
        if self.in_space(to) && mode != AttachMode::Cow {
            return Err(FlacError::Invalid("attach: FLAC-space destinations are copy-on-write".into()));
        }
        self.transfer(to, from, len / PAGE, mode, false)
    }

    fn mem_to_flac(&self, to: usize, from: usize, len: usize, force_copy: bool) -> Result<Xfer> {
        self.check_space(to, len, "zcopy_to_flac destination")?;
        let mut x = Xfer::default();
        if len == 0 {
            return Ok(x);
        }
        // Whole destination pages get whole frames (attached when the source is aligned alike,
        // otherwise copied into fresh frames), partial ones are written in place.
        let aligned = to % PAGE == from % PAGE;
        let (head, body, tail) = split(to, to, len);
        if head > 0 {
            x.add(self.write_partial(to, from, head)?);
        }
        if body > 0 {
            x.add(self.transfer(to + head, from + head, body / PAGE, AttachMode::Cow, force_copy || !aligned)?);
        }
        if tail > 0 {
            x.add(self.write_partial(to + head + body, from + head + body, tail)?);
        }
        Ok(x)
    }

    fn flac_to_mem(&self, to: usize, from: usize, len: usize, mode: AttachMode, force_copy: bool) -> Result<Xfer> {
        self.check_space(from, len, "zcopy_from_flac source")?;
        if self.in_space(to) {
            return self.mem_to_flac(to, from, len, force_copy);
        }
        let mut x = Xfer::default();
        if len == 0 {
            return Ok(x);
        }
        let (head, body, tail) = split(to, from, len);
        if head > 0 {
            x.add(self.read_partial(to, from, head)?);
        }
        if body > 0 {
            if force_copy {
                x.add(self.read_partial(to + head, from + head, body)?);
            } else {
                x.add(self.transfer(to + head, from + head, body / PAGE, mode, false)?);
            }
        }
        if tail > 0 {
            x.add(self.read_partial(to + head + body, from + head + body, tail)?);
        }
        Ok(x)
    }

    /// Copy `len` bytes from `from` into the space at `to` through the pages' frames.
    fn write_partial(&self, to: usize, from: usize, len: usize) -> Result<Xfer> {
        let mut done = 0;
        while done < len {
            let a = to + done;
            let vpn = self.vpn_of(a);
            let off = a % PAGE;
            let n = (PAGE - off).min(len - done);
            let f = {
                let mut c = self.lock();
                self.page_for_write(&mut c, vpn)?
            };
            // SAFETY: f is the page's private DRAM frame; the source is readable memory. The
            // copy is made without the lock (the source may be a protected page that faults).
            unsafe { sys::copy(self.dram.frame_ptr(f).add(off), (from + done) as *const u8, n) };
            done += n;
        }
        self.stats.copied_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Xfer { copied_bytes: len as u64, ..Xfer::default() })
    }

    /// Copy `len` bytes of the space at `from` to `to`, page by page (a miss is served from
    /// PM and the page is loaded into DRAM as the configuration says).
    fn read_partial(&self, to: usize, from: usize, len: usize) -> Result<Xfer> {
        let mut x = Xfer { copied_bytes: len as u64, ..Xfer::default() };
        let mut done = 0;
        while done < len {
            let a = from + done;
            let vpn = self.vpn_of(a);
            let off = a % PAGE;
            let n = (PAGE - off).min(len - done);
            let loc = {
                let mut c = self.lock();
                let cur = self.current(&c, vpn);
                match cur {
                    Some(l @ Loc::Dram(f)) => {
                        c.referenced[f as usize / 64] |= 1 << (f % 64);
                        self.incref(&mut c, l);
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(l @ Loc::Pm(_)) => {
                        self.incref(&mut c, l);
                        self.stats.misses.fetch_add(1, Ordering::Relaxed);
                        x.pm_pages += 1;
                        if ent_kind(c.vpt[vpn as usize]) == K_COMMITTED {
                            self.queue_load(&mut c, vpn, 1);
                        }
                    }
                    None => {}
                }
                cur
            };
            // SAFETY: the frame is held by the reference taken above; `to` is writable memory.
            unsafe {
                match loc {
                    None => std::ptr::write_bytes((to + done) as *mut u8, 0, n),
                    Some(Loc::Dram(f)) => sys::copy((to + done) as *mut u8, self.dram.frame_ptr(f).add(off), n),
                    Some(Loc::Pm(p)) => self.pm.read_frame(p, off, (to + done) as *mut u8, n),
                }
            }
            if let Some(l) = loc {
                let mut c = self.lock();
                self.decref(&mut c, l);
            }
            done += n;
        }
        self.stats.copied_bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.kick_loader();
        Ok(x)
    }

    /// Queue pages for the loader (asynchronous load) — a no-op when loads are synchronous
    /// (read_partial's copy from PM is the load's only cost then, as in a DAX read).
    fn queue_load(&self, c: &mut Core, vpn: u64, n: u64) {
        if !self.cfg.async_load {
            return;
        }
        for v in vpn..vpn + n {
            c.vpt[v as usize] |= LOADING;
        }
        self.loadq.lock().unwrap().runs.push_back((vpn, n));
    }

    fn kick_loader(&self) {
        if self.cfg.async_load && !self.loadq.lock().unwrap().runs.is_empty() {
            self.loadcv.notify_one();
        }
    }

    /// Move `n` whole pages from `from` to `to` by mapping (or copying into fresh frames when
    /// `force_copy` or the source is not FLAC memory).
    fn transfer(&self, to: usize, from: usize, n: usize, mode: AttachMode, force_copy: bool) -> Result<Xfer> {
        debug_assert!(to.is_multiple_of(PAGE) && (force_copy || from.is_multiple_of(PAGE)) && n > 0);
        let bounds = self.space_bounds();
        let mut x = Xfer::default();
        // Phase 1, locked: what each source page is; references on shared frames; fresh
        // frames for pages to copy or load.
        let mut c = self.lock();
        let dst = Inner::region(&c, to, bounds);
        let dst_end = Inner::region(&c, to + (n - 1) * PAGE, bounds);
        match (&dst, &dst_end) {
            (Region::Space, Region::Space) | (Region::Foreign, Region::Foreign) => {}
            (Region::Buffer(a), Region::Buffer(b)) if a == b => {}
            _ => return Err(FlacError::Invalid(format!("attach: destination {to:#x}+{} pages spans different kinds of memory", n))),
        }
        if let Region::Space = dst {
            self.check_space(to, n * PAGE, "attach destination")?;
        }
        let to_space = matches!(dst, Region::Space);
        let mut srcs: Vec<Src> = Vec::with_capacity(n);
        let mut ncopy = 0;
        let mut loads: Vec<(u64, u64)> = Vec::new();
        for i in 0..n {
            let a = from + i * PAGE;
            let s = match Inner::region(&c, a, bounds) {
                _ if force_copy && !self.in_space(a) => Src::Copy(a),
                Region::Space => {
                    let vpn = self.vpn_of(a);
                    match self.current(&c, vpn) {
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
                Src::Share(l) => self.incref(&mut c, l),
                Src::Copy(_) | Src::Load(..) => ncopy += 1,
                Src::Hole => {}
            }
            srcs.push(s);
        }
        for (v, k) in loads {
            self.queue_load(&mut c, v, k);
        }
        // Source buffer pages now shared become read-only.
        let mut i = 0;
        while i < n {
            let a = from + i * PAGE;
            if let (Src::Share(_), Region::Buffer(b)) = (srcs[i], Inner::region(&c, a, bounds)) {
                let base = c.bufs[b].base;
                let start = (a - base) / PAGE;
                let mut j = i;
                while j < n && matches!(srcs[j], Src::Share(_)) && from + j * PAGE < base + c.bufs[b].ents.len() * PAGE {
                    j += 1;
                }
                self.buf_protect(&mut c, b, start, j - i)?;
                i = j;
            } else {
                i += 1;
            }
        }
        let huge = to.is_multiple_of(HUGE) && n >= HUGE_PAGES;
        let fresh = if ncopy > 0 {
            match self.alloc_dram(&mut c, ncopy, huge && ncopy == n) {
                Ok(f) => f,
                Err(e) => {
                    for s in &srcs {
                        if let Src::Share(l) = *s {
                            self.decref(&mut c, l);
                        }
                    }
                    return Err(e);
                }
            }
        } else {
            Vec::new()
        };
        drop(c);
        // Phase 2, unlocked: copies and loads into the fresh frames.
        let mut locs: Vec<Option<Loc>> = Vec::with_capacity(n);
        let mut k = 0;
        let mut loaded: Vec<(u64, u32, u32)> = Vec::new();
        let pm_bytes: u64 = srcs.iter().filter(|s| matches!(s, Src::Load(..))).count() as u64 * PAGE as u64;
        let ticket = self.pm.lanes.read(pm_bytes);
        for s in &srcs {
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
        // Phase 3, locked: install.
        let mut c = self.lock();
        for &(vpn, p, f) in &loaded {
            // The loaded copy becomes the page's cached copy if the page has not changed.
            let e = c.vpt[vpn as usize];
            if ent_kind(e) == K_COMMITTED && self.pm.state().ppt(vpn) == Some(p) {
                self.incref(&mut c, Loc::Dram(f));
                self.set_current(&mut c, vpn, Some((Loc::Dram(f), false)));
            }
        }
        self.stats.loads_sync.fetch_add(loaded.len() as u64, Ordering::Relaxed);
        let shared = locs.iter().zip(&srcs).filter(|(_, s)| matches!(s, Src::Share(_) | Src::Hole)).count();
        x.mapped_bytes += (shared * PAGE) as u64;
        self.stats.mapped_pages.fetch_add(shared as u64, Ordering::Relaxed);
        self.stats.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        match dst {
            Region::Space => {
                let vpn = self.vpn_of(to);
                for (i, l) in locs.iter().enumerate() {
                    let l = l.unwrap_or_else(|| {
                        c.dram.incref(ZERO_FRAME);
                        Loc::Dram(ZERO_FRAME)
                    });
                    self.set_current(&mut c, vpn + i as u64, Some((l, true)));
                }
                self.view_invalidate(&mut c, vpn, n as u64)?;
            }
            Region::Buffer(_) => {
                // Other threads may have added or freed buffers since phase 1: find it again.
                let Region::Buffer(b) = Inner::region(&c, to, bounds) else {
                    unreachable!("a buffer being transferred into cannot be freed (its owner is in this call)")
                };
                let base = c.bufs[b].base;
                let start = (to - base) / PAGE;
                for i in 0..n {
                    let old = c.bufs[b].ents[start + i];
                    if let Some(l) = bent_loc(old) {
                        self.decref(&mut c, l);
                    }
                }
                for (i, l) in locs.iter().enumerate() {
                    let l = l.unwrap_or_else(|| {
                        c.dram.incref(ZERO_FRAME);
                        Loc::Dram(ZERO_FRAME)
                    });
                    // A fresh copy belongs to the buffer alone and stays writable.
                    let exclusive = matches!(srcs[i], Src::Copy(_)) && mode == AttachMode::Cow;
                    let flags = if exclusive { 0 } else { B_RO } | if mode == AttachMode::ReadOnly { B_LOCKED } else { 0 };
                    c.bufs[b].ents[start + i] = loc_bits(l) | flags;
                }
                self.map_into(to, &locs, &srcs, mode, false)?;
                x.pm_pages += locs.iter().filter(|l| matches!(l, Some(Loc::Pm(_)))).count() as u64;
            }
            Region::Foreign => {
                for i in 0..n {
                    if let Some(l) = c.lends.remove(&(to + i * PAGE)) {
                        self.decref(&mut c, l);
                    }
                }
                for (i, l) in locs.iter().enumerate() {
                    let l = l.unwrap_or_else(|| {
                        c.dram.incref(ZERO_FRAME);
                        Loc::Dram(ZERO_FRAME)
                    });
                    c.lends.insert(to + i * PAGE, l);
                }
                self.map_into(to, &locs, &srcs, mode, true)?;
                x.pm_pages += locs.iter().filter(|l| matches!(l, Some(Loc::Pm(_)))).count() as u64;
            }
        }
        drop(c);
        // The application reads what it asked for: pages mapped straight from PM cost a PM
        // read (with no copy to overlap it with).
        let pm_mapped = locs.iter().zip(&srcs).filter(|(l, s)| matches!(l, Some(Loc::Pm(_))) && matches!(s, Src::Share(_))).count();
        if !matches!(dst, Region::Space) && pm_mapped > 0 {
            self.pm.lanes.read_now((pm_mapped * PAGE) as u64);
        }
        self.kick_loader();
        Ok(x)
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

    /// Release lent pages the application no longer maps (it wrote them, so the kernel gave
    /// it a private copy, or it unmapped them). Returns how many were released.
    pub fn reclaim_lends(&self) -> usize {
        let mut c = self.lock();
        let stale: Vec<(usize, Loc)> =
            c.lends.iter().filter(|(&va, &l)| !lent_page_intact(va, self.loc_ptr(l) as usize)).map(|(&a, &l)| (a, l)).collect();
        for &(va, l) in &stale {
            c.lends.remove(&va);
            self.decref(&mut c, l);
        }
        self.stats.lends_released.fetch_add(stale.len() as u64, Ordering::Relaxed);
        stale.len()
    }

    /// Wait until the loader has nothing queued or in progress.
    pub fn wait_loads(&self) {
        let mut q = self.loadq.lock().unwrap();
        while !q.runs.is_empty() || q.busy > 0 {
            self.loadcv.notify_all();
            q = self.loadcv.wait_timeout(q, std::time::Duration::from_millis(1)).unwrap().0;
        }
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

impl Inner {
    fn loader_main(self: Arc<Inner>) {
        loop {
            let run = {
                let mut q = self.loadq.lock().unwrap();
                loop {
                    if q.stop {
                        return;
                    }
                    if let Some(r) = q.runs.pop_front() {
                        q.busy += 1;
                        break r;
                    }
                    q = self.loadcv.wait(q).unwrap();
                }
            };
            let (vpn, n) = run;
            let mut v = vpn;
            while v < vpn + n {
                let k = (vpn + n - v).min(HUGE_PAGES as u64);
                if let Err(e) = self.load_run(v, k) {
                    // DRAM full of dirty pages: the pages stay in PM (served from there).
                    let _ = e;
                }
                v += k;
            }
            self.loadq.lock().unwrap().busy -= 1;
            self.loadcv.notify_all();
        }
    }

    /// Migrate the committed pages `vpn..vpn+n` still marked for loading from PM to DRAM.
    fn load_run(&self, vpn: u64, n: u64) -> Result<()> {
        let mut c = self.lock();
        let mut cand: Vec<(u64, u32)> = Vec::new();
        for v in vpn..vpn + n {
            let e = c.vpt[v as usize];
            if e & LOADING == 0 {
                continue;
            }
            let committed = self.pm.state().ppt(v);
            match (ent_kind(e), committed) {
                (K_COMMITTED, Some(p)) => {
                    self.pm.incref(p);
                    cand.push((v, p));
                }
                _ => c.vpt[v as usize] &= !LOADING,
            }
        }
        if cand.is_empty() {
            return Ok(());
        }
        let huge = cand.len() == HUGE_PAGES && cand[0].0.is_multiple_of(HUGE_PAGES as u64);
        let frames = match self.alloc_dram(&mut c, cand.len(), huge) {
            Ok(f) => f,
            Err(e) => {
                for &(v, p) in &cand {
                    c.vpt[v as usize] &= !LOADING;
                    self.pm.decref(p);
                }
                return Err(e);
            }
        };
        drop(c);
        let t = self.pm.lanes.read((cand.len() * PAGE) as u64);
        for (&(_, p), &f) in cand.iter().zip(&frames) {
            // SAFETY: p is held (reference above), f is fresh.
            unsafe { sys::copy(self.dram.frame_ptr(f), self.pm.frame_ptr(p), PAGE) };
        }
        self.pm.lanes.wait(t);
        let mut c = self.lock();
        let mut installed = 0;
        for (&(v, p), &f) in cand.iter().zip(&frames) {
            let e = c.vpt[v as usize];
            if e & LOADING != 0 && ent_kind(e) == K_COMMITTED && self.pm.state().ppt(v) == Some(p) {
                c.vpt[v as usize] &= !LOADING;
                self.set_current(&mut c, v, Some((Loc::Dram(f), false)));
                self.view_invalidate(&mut c, v, 1)?;
                installed += 1;
            } else {
                c.vpt[v as usize] &= !LOADING;
                self.decref(&mut c, Loc::Dram(f));
            }
            self.pm.decref(p);
        }
        self.stats.loads_async.fetch_add(installed, Ordering::Relaxed);
        Ok(())
    }
}

/// Whether the application page at `va` still maps the frame whose window page is at
/// `window` (same physical page: not copied on write, not remapped). Without access to
/// physical frame numbers (no CAP_SYS_ADMIN) nothing is trusted and the page is copied.
fn lent_page_intact(va: usize, window: usize) -> bool {
    let a = sys::pfn_of(va);
    a != 0 && a == sys::pfn_of(window)
}

/// Split a transfer into a partial head, whole pages and a partial tail (by the destination's
/// alignment; if source and destination are not aligned alike, everything is copied).
fn split(to: usize, from: usize, len: usize) -> (usize, usize, usize) {
    if to % PAGE != from % PAGE {
        return (len, 0, 0);
    }
    let head = ((PAGE - to % PAGE) % PAGE).min(len);
    let body = (len - head) / PAGE * PAGE;
    (head, body, len - head - body)
}
