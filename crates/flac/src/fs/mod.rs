//! FlacFS and its baselines: a library file system (POSIX-like calls in the calling process,
//! no kernel involvement) whose data path is an [`engine::Engine`] (FLAC, a DRAM page cache,
//! or DAX-style copies to PM).
//!
//! Metadata is key-value pairs, as in the document's FlacFS: `i<ino>` -> inode record and
//! `d<parent><name>` -> child inode number, kept in memory and persisted through the metadata
//! log. Every change is appended to a pending transaction that the next commit writes
//! together with the data flushed (`pflush_add` / `pflush_commit`), so after a crash the file
//! system is as of its last commit: metadata and the data it refers to agree. Each file is one
//! contiguous range of FLAC pages ([`range::Ranges`]); bytes beyond a file's size are zeros.
//!
//! Commits happen on `fsync`, `sync`, unmount, when dirty data passes a share of the cache,
//! and periodically from a background flusher. Locks: one for the namespace, one per inode
//! for its data, and small leaf locks for pending work; a flush holds a file's lock only to
//! collect its dirty pages (FlacFS) or for the whole write-back (the page-cache baseline).
//!
//! The parts: `inode` (inode records, their keys, attributes), `mount` (mounting: loading and
//! repairing the metadata; unmounting), `resolve` (path lookup), `namespace` (creating,
//! opening, linking, renaming, removing), `data` (reads, writes, truncation, file ranges) and
//! `sync` (pending work and commits, the background flusher).

pub mod blocks;
pub mod calls;
pub mod dax;
pub mod engine;
pub mod pagecache;
pub mod range;

mod data;
mod inode;
mod mount;
mod namespace;
mod resolve;
mod sync;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::flac::{Flac, FlacConfig};
use crate::pm::log::Tx;
use crate::pm::Pm;
use crate::sys::PAGE;
use engine::{Engine, EngineKind};
use inode::InodeCell;
use range::Ranges;

pub const ROOT: u64 = 1;

const NO_RANGE: u8 = u8::MAX;

const MAX_SYMLINKS: usize = 40;

const NAME_MAX: usize = 255;

/// How a library file system is mounted.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsConfig {
    /// Data path: flac (FlacFS), pagecache or dax.
    pub engine: EngineKind,
    /// The PM image, DRAM size (FLAC's DRAM frames / the page cache) and PM cost model.
    pub flac: FlacConfig,
    /// FlacFS: transfers of at least this many bytes of whole pages are attached, smaller
    /// ones copied (attaching costs page-table updates; see docs/case-studies/flac.md).
    pub zcopy_min_bytes: usize,
    /// FlacFS: flush without holding the file's lock while copying to PM (false: the
    /// copying-flush ablation).
    pub lockfree_flush: bool,
    /// Background flush period (ms; 0 = no background flusher).
    pub flush_interval_ms: u64,
    /// The background flusher also runs when dirty data passes this share of the cache.
    pub dirty_background_ratio: f64,
    /// A writer flushes itself when dirty data passes this share of the cache.
    pub dirty_ratio: f64,
    /// Where the file system appears (absolute symlink targets under it stay inside).
    pub mount: String,
    /// Per-call kernel costs charged on every call (none by default: a library file system
    /// makes no system call); see [`calls`].
    pub kernel_cost: calls::KernelCost,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            engine: EngineKind::Flac,
            flac: FlacConfig::default(),
            zcopy_min_bytes: 64 << 10,
            lockfree_flush: true,
            flush_interval_ms: 200,
            dirty_background_ratio: 0.1,
            dirty_ratio: 0.4,
            mount: "/".into(),
            kernel_cost: calls::KernelCost::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ts {
    pub sec: i64,
    pub nsec: u32,
}

impl Ts {
    pub fn now() -> Ts {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Ts { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

/// File attributes (what `stat` returns).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stat {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub dev: u64,
}

impl Stat {
    /// Fill a `struct stat` (for the POSIX front-ends: the shim and the C API).
    pub fn to_libc(&self, st: &mut libc::stat) {
        // SAFETY: libc::stat is plain data.
        *st = unsafe { std::mem::zeroed() };
        st.st_dev = self.dev;
        st.st_ino = self.ino;
        st.st_nlink = self.nlink as _;
        st.st_mode = self.mode;
        st.st_uid = self.uid;
        st.st_gid = self.gid;
        st.st_size = self.size as libc::off_t;
        st.st_blksize = PAGE as _;
        st.st_blocks = self.blocks as _;
        st.st_atime = self.atime.sec;
        st.st_atime_nsec = self.atime.nsec as _;
        st.st_mtime = self.mtime.sec;
        st.st_mtime_nsec = self.mtime.nsec as _;
        st.st_ctime = self.ctime.sec;
        st.st_ctime_nsec = self.ctime.nsec as _;
    }
}

struct Ns {
    inodes: HashMap<u64, Arc<InodeCell>>,
    dirs: HashMap<u64, BTreeMap<Vec<u8>, u64>>,
    /// Directory -> its parent (a directory has one name).
    parents: HashMap<u64, u64>,
    next_ino: u64,
}

/// Work waiting for the next commit (leaf locks).
#[derive(Default)]
struct Pending {
    /// Namespace records (dirents, inode deletions), in order.
    ops: Tx,
    /// Files with data to flush / inode records to write.
    data: Vec<Arc<InodeCell>>,
    meta: Vec<Arc<InodeCell>>,
    /// Ranges freed: unmapped by the commit, then reusable.
    frees: Vec<(u64, u8)>,
}

/// An open file description (shared by duplicated descriptors).
pub struct File {
    cell: Arc<InodeCell>,
    pub flags: i32,
    pos: Mutex<u64>,
    closed: AtomicBool,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "File {{ ino: {}, flags: {:#o}, pos: {} }}", self.cell.ino, self.flags, self.pos())
    }
}

impl File {
    pub fn ino(&self) -> u64 {
        self.cell.ino
    }

    pub fn is_dir(&self) -> bool {
        self.cell.read().is_dir()
    }

    pub fn pos(&self) -> u64 {
        *self.pos.lock().unwrap()
    }
}

/// A directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    /// `DT_*` type.
    pub kind: u8,
}

/// Where a path leads.
#[derive(Debug)]
pub enum Resolved {
    /// An existing inode (and its parent and final name).
    Found { ino: u64, parent: u64, name: Vec<u8> },
    /// The parent exists, the final component does not.
    Missing { parent: u64, name: Vec<u8> },
    /// A symlink led outside the file system: this host path (the caller serves it).
    Outside(Vec<u8>),
}

/// Attribute changes for [`Fs::setattr`] (None = keep).
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<Ts>,
    pub mtime: Option<Ts>,
}

/// Counters of file-system calls and bytes moved.
#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    mapped_bytes: AtomicU64,
    copied_bytes: AtomicU64,
    syncs: AtomicU64,
    relocations: AtomicU64,
    flusher_runs: AtomicU64,
    throttled: AtomicU64,
}

enum Store {
    Flac(Arc<Flac>),
    Pm(Arc<Pm>),
}

pub struct Fs {
    cfg: FsConfig,
    store: Store,
    engine: Box<dyn Engine>,
    ns: Mutex<Ns>,
    ranges: Mutex<Ranges>,
    pending: Mutex<Pending>,
    sync_lock: Mutex<()>,
    counters: Counters,
    calls: calls::Calls,
    dev: u64,
    stop: Mutex<bool>,
    kick: Condvar,
    flusher: Mutex<Option<JoinHandle<()>>>,
    flusher_id: Mutex<Option<std::thread::ThreadId>>,
    /// Largest number of pages one data-only commit carries (bounded by the log).
    commit_pages: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

impl Fs {
    pub fn pm(&self) -> &Pm {
        match &self.store {
            Store::Flac(f) => &f.pm,
            Store::Pm(p) => p,
        }
    }

    /// The FLAC instance under FlacFS (None for the baselines).
    pub fn flac(&self) -> Option<&Arc<Flac>> {
        match &self.store {
            Store::Flac(f) => Some(f),
            Store::Pm(_) => None,
        }
    }

    pub fn engine_kind(&self) -> EngineKind {
        self.engine.kind()
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// (bytes total, bytes free, files) for statfs.
    pub fn statfs(&self) -> (u64, u64, u64) {
        let pm = self.pm();
        let g = pm.geometry();
        let free = pm.state().alloc.nfree() as u64;
        (g.data_frames * PAGE as u64, free * PAGE as u64, lock(&self.ns).inodes.len() as u64)
    }

    pub fn stats(&self) -> serde_json::Value {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "engine": self.engine.kind().name(),
            "reads": r(&c.reads), "writes": r(&c.writes),
            "read_bytes": r(&c.read_bytes), "write_bytes": r(&c.write_bytes),
            "mapped_bytes": r(&c.mapped_bytes), "copied_bytes": r(&c.copied_bytes),
            "syncs": r(&c.syncs), "relocations": r(&c.relocations),
            "flusher_runs": r(&c.flusher_runs), "throttled": r(&c.throttled),
            "files": lock(&self.ns).inodes.len(),
            "data": self.engine.stats(),
            "io": self.calls.json(),
        })
    }

    /// Enter a counted call (see [`calls`]).
    fn call(&self, kind: calls::Call, size: Option<u64>) -> calls::Timed<'_> {
        self.calls.enter(kind, size)
    }
}
