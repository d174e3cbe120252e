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
//!
//! The parts, in `flac/`: `table` (the volatile page table: entry encoding, frame references,
//! a page's current copy, DRAM allocation and eviction), `view` (mapping frames, the view of
//! the space and its faults), `buffer` (FLAC buffers and their copy-on-write faults), `attach`
//! (the zcopy/copy calls and partial pages), `transfer` (moving whole pages by mapping),
//! `flush` (pflush, commits, freeing pages), `load` (the asynchronous loader) and `stats`
//! (counters, occupancy and the reference-count invariants).

mod attach;
mod buffer;
mod flush;
mod load;
mod stats;
mod table;
mod transfer;
mod view;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::dram::Dram;
use crate::error::{FlacError, Result};
use crate::frames::FrameAlloc;
use crate::pm::cost::PmCost;
use crate::pm::{Format, Pm};
use crate::sys::{self, HUGE, PAGE};

pub use buffer::Buffer;
pub use stats::{Stats, StatsSnapshot};

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

/// The fault handler's view of an instance (see [`crate::cow`]).
impl crate::cow::FaultOwner for Inner {
    fn owns(&self, addr: usize) -> bool {
        Inner::owns(self, addr)
    }
    fn on_fault(&self, addr: usize, write: Option<bool>) -> bool {
        Inner::on_fault(self, addr, write)
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
        let owner: *const Inner = Arc::as_ptr(&inner);
        let slot = crate::cow::register(owner).ok_or_else(|| FlacError::NoSpace("too many FLAC instances in this process (64)".into()))?;
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
}
