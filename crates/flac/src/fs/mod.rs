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

pub mod blocks;
pub mod dax;
pub mod engine;
pub mod pagecache;
pub mod range;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{posix, FlacError, Result};
use crate::flac::{Flac, FlacConfig, Xfer};
use crate::pm::log::Tx;
use crate::pm::Pm;
use crate::sys::{HUGE_PAGES, PAGE};
use engine::{Engine, EngineKind, FlacEngine, Staged};
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

#[derive(Clone, Debug)]
struct Inode {
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Ts,
    mtime: Ts,
    ctime: Ts,
    vstart: u64,
    order: u8,
    target: Vec<u8>,
}

impl Inode {
    fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    fn is_reg(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    fn is_lnk(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    fn cap_pages(&self) -> u64 {
        if self.order == NO_RANGE {
            0
        } else {
            1 << self.order
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(80 + self.target.len());
        for v in [self.mode, self.nlink, self.uid, self.gid] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.size.to_le_bytes());
        for t in [self.atime, self.mtime, self.ctime] {
            b.extend_from_slice(&t.sec.to_le_bytes());
            b.extend_from_slice(&t.nsec.to_le_bytes());
        }
        b.extend_from_slice(&self.vstart.to_le_bytes());
        b.push(self.order);
        b.extend_from_slice(&self.target);
        b
    }

    fn decode(b: &[u8]) -> Option<Inode> {
        if b.len() < 69 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let ts = |i: usize| Ts { sec: u64_at(i) as i64, nsec: u32_at(i + 8) };
        Some(Inode {
            mode: u32_at(0),
            nlink: u32_at(4),
            uid: u32_at(8),
            gid: u32_at(12),
            size: u64_at(16),
            atime: ts(24),
            mtime: ts(36),
            ctime: ts(48),
            vstart: u64_at(60),
            order: b[68],
            target: b[69..].to_vec(),
        })
    }
}

fn ikey(ino: u64) -> Vec<u8> {
    let mut k = vec![b'i'];
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

fn dkey(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = vec![b'd'];
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name);
    k
}

const NEXT_INO_KEY: &[u8] = b"s/next_ino";

struct InodeCell {
    ino: u64,
    data: RwLock<Inode>,
    /// Queued for the next flush (data) / metadata write.
    data_queued: AtomicBool,
    meta_queued: AtomicBool,
    /// Open descriptions.
    open: AtomicU32,
    deleted: AtomicBool,
}

impl InodeCell {
    fn read(&self) -> RwLockReadGuard<'_, Inode> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inode> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
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

fn dtype(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFIFO => libc::DT_FIFO,
        _ => libc::DT_UNKNOWN,
    }
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

impl Fs {
    /// Mount (creating or recovering the image): loads the metadata, repairs what a crash
    /// left behind (orphaned files, pages no file refers to), starts the background flusher.
    pub fn mount(cfg: FsConfig) -> Result<Arc<Fs>> {
        if !(cfg.dirty_ratio > 0.0
            && cfg.dirty_ratio <= 1.0
            && cfg.dirty_background_ratio > 0.0
            && cfg.dirty_background_ratio <= cfg.dirty_ratio)
        {
            return Err(FlacError::Invalid("dirty ratios must satisfy 0 < dirty_background_ratio <= dirty_ratio <= 1".into()));
        }
        let (store, engine): (Store, Box<dyn Engine>) = match cfg.engine {
            EngineKind::Flac => {
                let flac = Flac::init(cfg.flac.clone())?;
                let e = FlacEngine { flac: flac.clone(), zcopy_min_bytes: cfg.zcopy_min_bytes, lockfree_flush: cfg.lockfree_flush };
                (Store::Flac(flac), Box::new(e))
            }
            kind => {
                let f = &cfg.flac;
                let pm = Arc::new(Pm::open(&f.pm_path, f.format.as_ref(), f.cost.clone(), f.lock_wait_ms)?);
                let e: Box<dyn Engine> = match kind {
                    EngineKind::Pagecache => Box::new(pagecache::PageCacheEngine::new(pm.clone(), f.dram_bytes, f.prefault)?),
                    _ => Box::new(dax::DaxEngine::new(pm.clone())),
                };
                (Store::Pm(pm), e)
            }
        };
        let pm = match &store {
            Store::Flac(f) => &f.pm,
            Store::Pm(p) => &**p,
        };
        let geo = *pm.geometry();
        let dev = crc32fast::hash(pm.path().as_os_str().as_encoded_bytes()) as u64 | 0x5100_0000_0000;
        let commit_pages = ((geo.log_bytes as usize / 2) / 17).max(64) as u64;
        let fs = Arc::new(Fs {
            cfg,
            store,
            engine,
            ns: Mutex::new(Ns { inodes: HashMap::new(), dirs: HashMap::new(), parents: HashMap::new(), next_ino: ROOT + 1 }),
            ranges: Mutex::new(Ranges::new(geo.space_pages)),
            pending: Mutex::new(Pending::default()),
            sync_lock: Mutex::new(()),
            counters: Counters::default(),
            dev,
            stop: Mutex::new(false),
            kick: Condvar::new(),
            flusher: Mutex::new(None),
            flusher_id: Mutex::new(None),
            commit_pages,
        });
        fs.load()?;
        if fs.cfg.flush_interval_ms > 0 {
            let weak = Arc::downgrade(&fs);
            let h = std::thread::Builder::new()
                .name("flacfs-flusher".into())
                .spawn(move || flusher_main(weak))
                .map_err(|e| FlacError::io("starting the flusher thread", e))?;
            *lock(&fs.flusher_id) = Some(h.thread().id());
            *lock(&fs.flusher) = Some(h);
        }
        Ok(fs)
    }

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

    fn load(&self) -> Result<()> {
        let pm = self.pm();
        let mut ns = lock(&self.ns);
        let mut ranges = lock(&self.ranges);
        let mut fix = Tx::new();
        for (k, v) in pm.kv_scan(b"i") {
            if k.len() != 9 {
                continue;
            }
            let ino = u64::from_be_bytes(k[1..9].try_into().unwrap());
            let node =
                Inode::decode(&v).ok_or_else(|| FlacError::Corrupt(format!("{}: inode {ino}: malformed record", pm.path().display())))?;
            ns.inodes.insert(ino, Arc::new(new_cell(ino, node)));
        }
        for (k, v) in pm.kv_scan(b"d") {
            if k.len() < 9 || v.len() != 8 {
                continue;
            }
            let parent = u64::from_be_bytes(k[1..9].try_into().unwrap());
            let child = u64::from_le_bytes(v[..8].try_into().unwrap());
            let name = k[9..].to_vec();
            if !ns.inodes.contains_key(&child) || !ns.inodes.contains_key(&parent) {
                fix.del(&k);
                continue;
            }
            if ns.inodes[&child].read().is_dir() {
                ns.parents.insert(child, parent);
            }
            ns.dirs.entry(parent).or_default().insert(name, child);
        }
        if let Some(v) = pm.kv_get(NEXT_INO_KEY) {
            ns.next_ino = u64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]));
        }
        ns.next_ino = ns.next_ino.max(ns.inodes.keys().max().copied().unwrap_or(ROOT) + 1);
        ns.inodes.entry(ROOT).or_insert_with(|| {
            let now = Ts::now();
            let root = Inode {
                mode: libc::S_IFDIR | 0o755,
                nlink: 2,
                uid: unsafe_id().0,
                gid: unsafe_id().1,
                size: 0,
                atime: now,
                mtime: now,
                ctime: now,
                vstart: 0,
                order: NO_RANGE,
                target: Vec::new(),
            };
            fix.put(&ikey(ROOT), &root.encode());
            Arc::new(new_cell(ROOT, root))
        });
        ns.dirs.entry(ROOT).or_default();
        // Orphans (unlinked while open when the process died) go now.
        let orphans: Vec<u64> = ns.inodes.iter().filter(|(&i, c)| i != ROOT && c.read().nlink == 0).map(|(&i, _)| i).collect();
        for ino in orphans {
            ns.inodes.remove(&ino);
            fix.del(&ikey(ino));
        }
        // Ranges in use; pages mapped outside a file's pages are freed.
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (ino, c) in &ns.inodes {
            let n = c.read();
            if n.order != NO_RANGE {
                if !ranges.reserve(n.vstart, n.order as usize) {
                    return Err(FlacError::Corrupt(format!("{}: inode {ino}'s pages overlap another file's", pm.path().display())));
                }
                live.push((n.vstart, n.size.div_ceil(PAGE as u64)));
            }
        }
        live.sort_unstable();
        let mut stray = 0u64;
        for (vpn, _) in pm.ppt_mapped() {
            let i = live.partition_point(|&(s, _)| s <= vpn);
            let inside = i > 0 && vpn < live[i - 1].0 + live[i - 1].1;
            if !inside {
                fix.pt_set(vpn, None);
                stray += 1;
            }
        }
        drop(ranges);
        drop(ns);
        if !fix.is_empty() {
            match &self.store {
                Store::Flac(f) => {
                    // Pages being freed must not linger in FLAC's volatile state (none yet:
                    // nothing was read); commit the repair.
                    f.commit_meta(&fix)?;
                }
                Store::Pm(p) => {
                    p.commit(&fix)?;
                }
            }
        }
        let _ = stray;
        Ok(())
    }

    // ---- paths ---------------------------------------------------------------------------

    fn cell(&self, ns: &Ns, ino: u64) -> Result<Arc<InodeCell>> {
        ns.inodes.get(&ino).cloned().ok_or_else(|| FlacError::Posix(libc::ENOENT, format!("inode {ino} is gone")))
    }

    /// Resolve `path` (absolute in the file system). `follow`: follow a final symlink.
    pub fn resolve(&self, path: &[u8], follow: bool) -> Result<Resolved> {
        let ns = lock(&self.ns);
        self.resolve_in(&ns, path, follow)
    }

    fn resolve_in(&self, ns: &Ns, path: &[u8], follow: bool) -> Result<Resolved> {
        if path.first() != Some(&b'/') {
            return posix(libc::EINVAL, format!("{}: paths in the file system are absolute", show(path)));
        }
        let mut comps: Vec<Vec<u8>> = path.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev().map(|c| c.to_vec()).collect();
        let mut stack: Vec<(u64, Vec<u8>)> = Vec::new(); // (ino, name) from root
        let mut cur = ROOT;
        let mut links = 0;
        let mut trailing_slash = path.ends_with(b"/") && path.len() > 1;
        while let Some(c) = comps.pop() {
            if c == b"." {
                continue;
            }
            if c == b".." {
                if let Some((_, _)) = stack.pop() {
                    cur = stack.last().map_or(ROOT, |s| s.0);
                }
                continue;
            }
            if c.len() > NAME_MAX {
                return posix(libc::ENAMETOOLONG, show(path));
            }
            let dir = self.cell(ns, cur)?;
            if !dir.read().is_dir() {
                return posix(libc::ENOTDIR, show(path));
            }
            let child = ns.dirs.get(&cur).and_then(|d| d.get(&c)).copied();
            let last = comps.is_empty();
            let Some(child) = child else {
                if last {
                    return Ok(Resolved::Missing { parent: cur, name: c });
                }
                return posix(libc::ENOENT, show(path));
            };
            let node = self.cell(ns, child)?;
            let n = node.read();
            if n.is_lnk() && (!last || follow || trailing_slash) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return posix(libc::ELOOP, show(path));
                }
                let target = n.target.clone();
                drop(n);
                let mount = self.cfg.mount.as_bytes().strip_suffix(b"/").unwrap_or(self.cfg.mount.as_bytes());
                if target.first() == Some(&b'/') {
                    // Absolute: inside the mount it restarts at our root, otherwise it leaves.
                    let inside = if mount.is_empty() {
                        Some(&target[..])
                    } else if target.starts_with(mount) && (target.len() == mount.len() || target[mount.len()] == b'/') {
                        Some(&target[mount.len()..])
                    } else {
                        None
                    };
                    match inside {
                        Some(rest) => {
                            stack.clear();
                            cur = ROOT;
                            for t in rest.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                                comps.push(t.to_vec());
                            }
                        }
                        None => {
                            let mut out = target.clone();
                            for c in comps.iter().rev() {
                                out.push(b'/');
                                out.extend_from_slice(c);
                            }
                            if trailing_slash {
                                out.push(b'/');
                            }
                            return Ok(Resolved::Outside(out));
                        }
                    }
                } else {
                    for t in target.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                        comps.push(t.to_vec());
                    }
                }
                if comps.is_empty() {
                    // A link to "/" (or the mount itself): the root.
                    return Ok(Resolved::Found { ino: ROOT, parent: ROOT, name: b"/".to_vec() });
                }
                trailing_slash = false;
                continue;
            }
            if last {
                if trailing_slash && !n.is_dir() {
                    return posix(libc::ENOTDIR, show(path));
                }
                return Ok(Resolved::Found { ino: child, parent: cur, name: c });
            }
            drop(n);
            stack.push((child, c));
            cur = child;
        }
        let parent = if stack.len() >= 2 { stack[stack.len() - 2].0 } else { ROOT };
        Ok(Resolved::Found { ino: cur, parent, name: stack.last().map(|s| s.1.clone()).unwrap_or_else(|| b"/".to_vec()) })
    }

    fn found(&self, path: &[u8], follow: bool) -> Result<u64> {
        match self.resolve(path, follow)? {
            Resolved::Found { ino, .. } => Ok(ino),
            Resolved::Missing { .. } => posix(libc::ENOENT, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
        }
    }

    // ---- namespace -----------------------------------------------------------------------

    fn alloc_ino(&self, ns: &mut Ns, p: &mut Pending) -> u64 {
        let ino = ns.next_ino;
        ns.next_ino += 1;
        p.ops.put(NEXT_INO_KEY, &ns.next_ino.to_le_bytes());
        ino
    }

    fn queue_meta(&self, p: &mut Pending, c: &Arc<InodeCell>) {
        if !c.meta_queued.swap(true, Ordering::AcqRel) {
            p.meta.push(c.clone());
        }
    }

    /// Create an inode named `name` in `parent` (the caller holds `ns`).
    fn create_in(&self, ns: &mut Ns, parent: u64, name: &[u8], mode: u32, target: Vec<u8>) -> Result<Arc<InodeCell>> {
        if name.len() > NAME_MAX {
            return posix(libc::ENAMETOOLONG, show(name));
        }
        let mut p = lock(&self.pending);
        let ino = self.alloc_ino(ns, &mut p);
        let now = Ts::now();
        let (uid, gid) = unsafe_id();
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        let node = Inode {
            mode,
            nlink: if is_dir { 2 } else { 1 },
            uid,
            gid,
            size: if mode & libc::S_IFMT == libc::S_IFLNK { target.len() as u64 } else { 0 },
            atime: now,
            mtime: now,
            ctime: now,
            vstart: 0,
            order: NO_RANGE,
            target,
        };
        let cell = Arc::new(new_cell(ino, node));
        p.ops.put(&dkey(parent, name), &ino.to_le_bytes());
        self.queue_meta(&mut p, &cell);
        ns.inodes.insert(ino, cell.clone());
        ns.dirs.entry(parent).or_default().insert(name.to_vec(), ino);
        if is_dir {
            ns.dirs.insert(ino, BTreeMap::new());
            ns.parents.insert(ino, parent);
        }
        let pc = self.cell(ns, parent)?;
        let mut pn = pc.write();
        pn.mtime = now;
        pn.ctime = now;
        if is_dir {
            pn.nlink += 1;
        }
        drop(pn);
        self.queue_meta(&mut p, &pc);
        Ok(cell)
    }

    /// Open (and with O_CREAT create) a file or directory.
    pub fn open(&self, path: &[u8], flags: i32, mode: u32) -> Result<Arc<File>> {
        let acc = flags & libc::O_ACCMODE;
        let cell = {
            let mut ns = lock(&self.ns);
            let follow = flags & libc::O_NOFOLLOW == 0;
            match self.resolve_in(&ns, path, follow)? {
                Resolved::Outside(p) => return Err(outside(p)),
                Resolved::Found { ino, .. } => {
                    if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                        return posix(libc::EEXIST, show(path));
                    }
                    let c = self.cell(&ns, ino)?;
                    let n = c.read();
                    if n.is_lnk() {
                        return posix(libc::ELOOP, show(path));
                    }
                    if n.is_dir() && acc != libc::O_RDONLY {
                        return posix(libc::EISDIR, show(path));
                    }
                    if !n.is_dir() && flags & libc::O_DIRECTORY != 0 {
                        return posix(libc::ENOTDIR, show(path));
                    }
                    drop(n);
                    c
                }
                Resolved::Missing { parent, name } => {
                    if flags & libc::O_CREAT == 0 {
                        return posix(libc::ENOENT, show(path));
                    }
                    if flags & libc::O_DIRECTORY != 0 {
                        return posix(libc::EINVAL, show(path));
                    }
                    self.create_in(&mut ns, parent, &name, libc::S_IFREG | (mode & 0o7777), Vec::new())?
                }
            }
        };
        cell.open.fetch_add(1, Ordering::AcqRel);
        let f = Arc::new(File { cell, flags, pos: Mutex::new(0), closed: AtomicBool::new(false) });
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY && f.cell.read().is_reg() {
            self.ftruncate(&f, 0)?;
        }
        Ok(f)
    }

    /// Close an open description (the last close of an unlinked file frees it).
    pub fn close(&self, f: &File) -> Result<()> {
        if f.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if f.cell.open.fetch_sub(1, Ordering::AcqRel) == 1 && f.cell.read().nlink == 0 {
            self.free_inode(&f.cell)?;
        }
        Ok(())
    }

    fn free_inode(&self, c: &Arc<InodeCell>) -> Result<()> {
        let mut n = c.write();
        if c.deleted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut p = lock(&self.pending);
        if n.order != NO_RANGE {
            self.engine.discard(n.vstart, n.cap_pages())?;
            p.frees.push((n.vstart, n.order));
            n.order = NO_RANGE;
        }
        p.ops.del(&ikey(c.ino));
        drop(p);
        lock(&self.ns).inodes.remove(&c.ino);
        Ok(())
    }

    pub fn mkdir(&self, path: &[u8], mode: u32) -> Result<()> {
        let mut ns = lock(&self.ns);
        match self.resolve_in(&ns, path, false)? {
            Resolved::Found { .. } => posix(libc::EEXIST, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
            Resolved::Missing { parent, name } => {
                self.create_in(&mut ns, parent, &name, libc::S_IFDIR | (mode & 0o7777), Vec::new()).map(|_| ())
            }
        }?;
        drop(ns);
        self.maybe_commit_meta()
    }

    pub fn symlink(&self, target: &[u8], path: &[u8]) -> Result<()> {
        let mut ns = lock(&self.ns);
        match self.resolve_in(&ns, path, false)? {
            Resolved::Found { .. } => posix(libc::EEXIST, show(path)),
            Resolved::Outside(p) => Err(outside(p)),
            Resolved::Missing { parent, name } => {
                self.create_in(&mut ns, parent, &name, libc::S_IFLNK | 0o777, target.to_vec()).map(|_| ())
            }
        }?;
        drop(ns);
        self.maybe_commit_meta()
    }

    pub fn readlink(&self, path: &[u8]) -> Result<Vec<u8>> {
        let ino = self.found(path, false)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        let n = c.read();
        if !n.is_lnk() {
            return posix(libc::EINVAL, show(path));
        }
        Ok(n.target.clone())
    }

    /// Remove a name (`dir`: rmdir semantics).
    pub fn remove(&self, path: &[u8], dir: bool) -> Result<()> {
        let mut ns = lock(&self.ns);
        let (ino, parent, name) = match self.resolve_in(&ns, path, false)? {
            Resolved::Found { ino, parent, name } => (ino, parent, name),
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(path)),
            Resolved::Outside(p) => return Err(outside(p)),
        };
        if ino == ROOT {
            return posix(libc::EBUSY, show(path));
        }
        let c = self.cell(&ns, ino)?;
        let is_dir = c.read().is_dir();
        if dir && !is_dir {
            return posix(libc::ENOTDIR, show(path));
        }
        if !dir && is_dir {
            return posix(libc::EISDIR, show(path));
        }
        if is_dir && !ns.dirs.get(&ino).is_none_or(|d| d.is_empty()) {
            return posix(libc::ENOTEMPTY, show(path));
        }
        self.unlink_in(&mut ns, parent, &name, &c)?;
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Drop the name `parent/name` of inode `c` (the caller holds `ns`).
    fn unlink_in(&self, ns: &mut Ns, parent: u64, name: &[u8], c: &Arc<InodeCell>) -> Result<()> {
        ns.dirs.get_mut(&parent).map(|d| d.remove(name));
        let now = Ts::now();
        let mut n = c.write();
        let is_dir = n.is_dir();
        n.nlink = if is_dir { 0 } else { n.nlink.saturating_sub(1) };
        n.ctime = now;
        let gone = n.nlink == 0;
        drop(n);
        {
            let mut p = lock(&self.pending);
            p.ops.del(&dkey(parent, name));
            self.queue_meta(&mut p, c);
            let pc = self.cell(ns, parent)?;
            let mut pn = pc.write();
            pn.mtime = now;
            pn.ctime = now;
            if is_dir {
                pn.nlink -= 1;
            }
            drop(pn);
            self.queue_meta(&mut p, &pc);
        }
        if is_dir {
            ns.dirs.remove(&c.ino);
            ns.parents.remove(&c.ino);
        }
        if gone && c.open.load(Ordering::Acquire) == 0 {
            // Frees under `ns`: take the inode out of the map here, not in free_inode.
            let mut n = c.write();
            c.deleted.store(true, Ordering::Release);
            let mut p = lock(&self.pending);
            if n.order != NO_RANGE {
                self.engine.discard(n.vstart, n.cap_pages())?;
                p.frees.push((n.vstart, n.order));
                n.order = NO_RANGE;
            }
            p.ops.del(&ikey(c.ino));
            ns.inodes.remove(&c.ino);
        }
        Ok(())
    }

    pub fn link(&self, old: &[u8], new: &[u8]) -> Result<()> {
        let mut ns = lock(&self.ns);
        let ino = match self.resolve_in(&ns, old, false)? {
            Resolved::Found { ino, .. } => ino,
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(old)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(old)),
        };
        let (parent, name) = match self.resolve_in(&ns, new, false)? {
            Resolved::Missing { parent, name } => (parent, name),
            Resolved::Found { .. } => return posix(libc::EEXIST, show(new)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(new)),
        };
        let c = self.cell(&ns, ino)?;
        if c.read().is_dir() {
            return posix(libc::EPERM, show(old));
        }
        ns.dirs.entry(parent).or_default().insert(name.clone(), ino);
        let now = Ts::now();
        let mut n = c.write();
        n.nlink += 1;
        n.ctime = now;
        drop(n);
        let mut p = lock(&self.pending);
        p.ops.put(&dkey(parent, &name), &ino.to_le_bytes());
        self.queue_meta(&mut p, &c);
        let pc = self.cell(&ns, parent)?;
        pc.write().mtime = now;
        self.queue_meta(&mut p, &pc);
        drop(p);
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Rename; `noreplace`: fail with EEXIST if `to` exists (RENAME_NOREPLACE).
    pub fn rename(&self, from: &[u8], to: &[u8], noreplace: bool) -> Result<()> {
        let mut ns = lock(&self.ns);
        let (ino, fparent, fname) = match self.resolve_in(&ns, from, false)? {
            Resolved::Found { ino, parent, name } => (ino, parent, name),
            Resolved::Missing { .. } => return posix(libc::ENOENT, show(from)),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(from)),
        };
        if ino == ROOT {
            return posix(libc::EBUSY, show(from));
        }
        let c = self.cell(&ns, ino)?;
        let is_dir = c.read().is_dir();
        let (tparent, tname, existing) = match self.resolve_in(&ns, to, false)? {
            Resolved::Found { ino: t, parent, name } => (parent, name, Some(t)),
            Resolved::Missing { parent, name } => (parent, name, None),
            Resolved::Outside(_) => return posix(libc::EXDEV, show(to)),
        };
        if existing == Some(ino) {
            return Ok(());
        }
        if is_dir {
            // Not into its own subtree.
            let mut a = tparent;
            loop {
                if a == ino {
                    return posix(libc::EINVAL, format!("{} into {}", show(from), show(to)));
                }
                if a == ROOT {
                    break;
                }
                a = parent_of(&ns, a).unwrap_or(ROOT);
            }
        }
        if let Some(t) = existing {
            if noreplace {
                return posix(libc::EEXIST, show(to));
            }
            let tc = self.cell(&ns, t)?;
            let tdir = tc.read().is_dir();
            if is_dir && !tdir {
                return posix(libc::ENOTDIR, show(to));
            }
            if !is_dir && tdir {
                return posix(libc::EISDIR, show(to));
            }
            if tdir && !ns.dirs.get(&t).is_none_or(|d| d.is_empty()) {
                return posix(libc::ENOTEMPTY, show(to));
            }
            self.unlink_in(&mut ns, tparent, &tname, &tc)?;
        }
        ns.dirs.get_mut(&fparent).map(|d| d.remove(&fname));
        ns.dirs.entry(tparent).or_default().insert(tname.clone(), ino);
        if is_dir {
            ns.parents.insert(ino, tparent);
        }
        let now = Ts::now();
        let mut p = lock(&self.pending);
        p.ops.del(&dkey(fparent, &fname));
        p.ops.put(&dkey(tparent, &tname), &ino.to_le_bytes());
        c.write().ctime = now;
        self.queue_meta(&mut p, &c);
        for (par, delta) in [(fparent, -1i32), (tparent, 1)] {
            let pc = self.cell(&ns, par)?;
            let mut pn = pc.write();
            pn.mtime = now;
            pn.ctime = now;
            if is_dir && fparent != tparent {
                pn.nlink = (pn.nlink as i32 + delta) as u32;
            }
            drop(pn);
            self.queue_meta(&mut p, &pc);
        }
        drop(p);
        drop(ns);
        self.maybe_commit_meta()
    }

    /// Entries of a directory, in name order (without "." and "..").
    pub fn readdir(&self, f: &File) -> Result<Vec<DirEntry>> {
        let ns = lock(&self.ns);
        let Some(d) = ns.dirs.get(&f.cell.ino) else {
            return if f.cell.read().is_dir() { Ok(Vec::new()) } else { posix(libc::ENOTDIR, format!("inode {}", f.cell.ino)) };
        };
        Ok(d.iter()
            .map(|(name, &ino)| DirEntry {
                name: name.clone(),
                ino,
                kind: ns.inodes.get(&ino).map_or(libc::DT_UNKNOWN, |c| dtype(c.read().mode)),
            })
            .collect())
    }

    /// The parent of directory `ino` (for "..").
    pub fn parent_of(&self, ino: u64) -> u64 {
        parent_of(&lock(&self.ns), ino).unwrap_or(ROOT)
    }

    // ---- attributes ------------------------------------------------------------------------

    fn stat_of(&self, c: &InodeCell) -> Stat {
        let n = c.read();
        Stat {
            ino: c.ino,
            mode: n.mode,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            size: if n.is_dir() { PAGE as u64 } else { n.size },
            blocks: if n.is_reg() { n.size.div_ceil(PAGE as u64) * 8 } else { 8 },
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            dev: self.dev,
        }
    }

    pub fn stat(&self, path: &[u8], follow: bool) -> Result<Stat> {
        let ino = self.found(path, follow)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        Ok(self.stat_of(&c))
    }

    pub fn fstat(&self, f: &File) -> Stat {
        self.stat_of(&f.cell)
    }

    pub fn setattr_path(&self, path: &[u8], follow: bool, a: &SetAttr) -> Result<()> {
        let ino = self.found(path, follow)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        self.setattr_cell(&c, a)
    }

    pub fn setattr(&self, f: &File, a: &SetAttr) -> Result<()> {
        self.setattr_cell(&f.cell, a)
    }

    fn setattr_cell(&self, c: &Arc<InodeCell>, a: &SetAttr) -> Result<()> {
        let mut n = c.write();
        if let Some(m) = a.mode {
            n.mode = (n.mode & libc::S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = a.uid {
            n.uid = u;
        }
        if let Some(g) = a.gid {
            n.gid = g;
        }
        if let Some(t) = a.atime {
            n.atime = t;
        }
        if let Some(t) = a.mtime {
            n.mtime = t;
        }
        n.ctime = Ts::now();
        drop(n);
        self.queue_meta(&mut lock(&self.pending), c);
        Ok(())
    }

    // ---- data ------------------------------------------------------------------------------

    /// Give file `n` room for `pages` pages (moving it to a larger range if needed).
    fn ensure_capacity(&self, c: &InodeCell, n: &mut Inode, pages: u64) -> Result<()> {
        if pages <= n.cap_pages() {
            return Ok(());
        }
        let order = Ranges::order_of(pages.max(2 * n.cap_pages()));
        let at = lock(&self.ranges).alloc(order).ok_or_else(|| {
            FlacError::Posix(libc::ENOSPC, format!("inode {}: no free range of {} pages in the FLAC space", c.ino, 1u64 << order))
        })?;
        if n.order != NO_RANGE {
            let used = n.size.div_ceil(PAGE as u64).min(n.cap_pages());
            if used > 0 {
                self.engine.relocate(at, n.vstart, used)?;
                // The moved pages are dirty at their new place (no committed copy there yet):
                // a big file would fill the DRAM cache with pages it may not evict. Commit them
                // now (a data-only transaction: PM-resident pages are remapped, not copied) if
                // they pass the dirty limit.
                let cache = self.engine.cache_bytes() as f64;
                if cache > 0.0 && self.engine.dirty_bytes() as f64 > cache * self.cfg.dirty_ratio {
                    let mut done = 0;
                    while done < used {
                        let k = (used - done).min(self.commit_pages);
                        let mut st = Staged::default();
                        self.engine.stage(&mut st, at + done, k)?;
                        self.engine.commit(st, &Tx::new())?;
                        done += k;
                    }
                }
            }
            let rest = n.cap_pages() - used;
            if rest > 0 {
                self.engine.discard(n.vstart + used, rest)?;
            }
            lock(&self.pending).frees.push((n.vstart, n.order));
            self.counters.relocations.fetch_add(1, Ordering::Relaxed);
        }
        n.vstart = at;
        n.order = order as u8;
        Ok(())
    }

    fn queue_data(&self, c: &Arc<InodeCell>) {
        if !c.data_queued.swap(true, Ordering::AcqRel) {
            lock(&self.pending).data.push(c.clone());
        }
    }

    /// Read up to `len` bytes at `off` into `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes.
    pub unsafe fn pread_raw(&self, f: &File, dst: *mut u8, len: usize, off: u64) -> Result<(usize, Xfer)> {
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return posix(libc::EBADF, format!("inode {}: not open for reading", f.cell.ino));
        }
        let n = f.cell.read();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", f.cell.ino));
        }
        if off >= n.size || len == 0 {
            return Ok((0, Xfer::default()));
        }
        let len = len.min((n.size - off) as usize);
        let x = if n.order == NO_RANGE {
            std::ptr::write_bytes(dst, 0, len);
            Xfer { copied_bytes: len as u64, ..Xfer::default() }
        } else {
            self.engine.read(n.vstart, off, dst, len)?
        };
        drop(n);
        let cn = &self.counters;
        cn.reads.fetch_add(1, Ordering::Relaxed);
        cn.read_bytes.fetch_add(len as u64, Ordering::Relaxed);
        cn.mapped_bytes.fetch_add(x.mapped_bytes, Ordering::Relaxed);
        cn.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        Ok((len, x))
    }

    /// Write `len` bytes from `src` at `off` (at the end with O_APPEND); returns the offset
    /// written at and what moved.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    pub unsafe fn pwrite_raw(&self, f: &File, src: *const u8, len: usize, off: Option<u64>) -> Result<(u64, Xfer)> {
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return posix(libc::EBADF, format!("inode {}: not open for writing", f.cell.ino));
        }
        // A write larger than the DRAM cache can take at once goes in pieces, each followed by
        // the dirty-data balance (which may commit to PM and so free frames to evict): a single
        // allocation of more frames than the cache has would fail. The pieces are contiguous
        // (an O_APPEND write takes its offset once) but, unlike Linux's, not one atomic step
        // for concurrent readers of the same range.
        let piece = self.write_piece_bytes();
        let mut at = off;
        let mut total = Xfer::default();
        let mut first = None;
        let mut done = 0;
        loop {
            let k = (len - done).min(piece);
            // SAFETY: src..src+len is readable (the caller's contract); done + k <= len.
            let piece_write = || unsafe { self.pwrite_piece(f, src.add(done), k, at, first.is_none()) };
            let (o, x) = match piece_write() {
                // Frames short while a flush holds some (the background flusher's copy to PM)
                // or dirty pages hold the rest: commit (which waits for flushes in flight) and
                // write again; a write of the same bytes at the same place is idempotent.
                Err(FlacError::NoSpace(_)) => {
                    self.counters.throttled.fetch_add(1, Ordering::Relaxed);
                    self.sync()?;
                    piece_write()?
                }
                r => r?,
            };
            first.get_or_insert(o);
            total.add(x);
            done += k;
            if done >= len {
                return Ok((first.unwrap_or(0), total));
            }
            at = Some(o + k as u64);
        }
    }

    /// The largest piece of a write: a quarter of what the dirty limit leaves of the DRAM cache
    /// (whole 2 MiB runs where that is at least one, so large aligned writes still attach
    /// huge pages), or everything without a cache.
    fn write_piece_bytes(&self) -> usize {
        let cache = self.engine.cache_bytes() as f64;
        if cache == 0.0 {
            return usize::MAX;
        }
        let b = (cache * (1.0 - self.cfg.dirty_ratio) / 4.0) as usize;
        let huge = HUGE_PAGES * PAGE;
        if b >= huge {
            b / huge * huge
        } else {
            (b / PAGE).max(1) * PAGE
        }
    }

    /// # Safety
    /// `src..src+len` must be readable.
    unsafe fn pwrite_piece(&self, f: &File, src: *const u8, len: usize, off: Option<u64>, first: bool) -> Result<(u64, Xfer)> {
        let mut n = f.cell.write();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", f.cell.ino));
        }
        let off = if first && f.flags & libc::O_APPEND != 0 { n.size } else { off.unwrap_or(0) };
        if len == 0 {
            return Ok((off, Xfer::default()));
        }
        let end = off.checked_add(len as u64).ok_or_else(|| FlacError::Posix(libc::EFBIG, "write past 2^64".into()))?;
        self.ensure_capacity(&f.cell, &mut n, end.div_ceil(PAGE as u64))?;
        let x = self.engine.write(n.vstart, off, src, len)?;
        n.size = n.size.max(end);
        let now = Ts::now();
        n.mtime = now;
        n.ctime = now;
        drop(n);
        self.queue_data(&f.cell);
        self.queue_meta(&mut lock(&self.pending), &f.cell);
        let cn = &self.counters;
        cn.writes.fetch_add(1, Ordering::Relaxed);
        cn.write_bytes.fetch_add(len as u64, Ordering::Relaxed);
        cn.mapped_bytes.fetch_add(x.mapped_bytes, Ordering::Relaxed);
        cn.copied_bytes.fetch_add(x.copied_bytes, Ordering::Relaxed);
        self.balance_dirty()?;
        Ok((off, x))
    }

    /// Writers flush themselves when dirty data passes `dirty_ratio` of the cache, and wake
    /// the background flusher above `dirty_background_ratio`.
    fn balance_dirty(&self) -> Result<()> {
        let cache = self.engine.cache_bytes() as f64;
        if cache == 0.0 {
            return Ok(());
        }
        let dirty = self.engine.dirty_bytes() as f64;
        if dirty > cache * self.cfg.dirty_ratio {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
            self.sync()?;
        } else if dirty > cache * self.cfg.dirty_background_ratio {
            self.kick.notify_one();
        }
        Ok(())
    }

    pub fn read(&self, f: &File, buf: &mut [u8]) -> Result<usize> {
        let mut pos = lock(&f.pos);
        // SAFETY: buf is writable for its length.
        let (n, _) = unsafe { self.pread_raw(f, buf.as_mut_ptr(), buf.len(), *pos)? };
        *pos += n as u64;
        Ok(n)
    }

    pub fn write(&self, f: &File, buf: &[u8]) -> Result<usize> {
        let mut pos = lock(&f.pos);
        // SAFETY: buf is readable for its length.
        let (at, _) = unsafe { self.pwrite_raw(f, buf.as_ptr(), buf.len(), Some(*pos))? };
        *pos = at + buf.len() as u64;
        Ok(buf.len())
    }

    pub fn pread(&self, f: &File, buf: &mut [u8], off: u64) -> Result<usize> {
        // SAFETY: buf is writable for its length.
        unsafe { self.pread_raw(f, buf.as_mut_ptr(), buf.len(), off).map(|r| r.0) }
    }

    pub fn pwrite(&self, f: &File, buf: &[u8], off: u64) -> Result<usize> {
        // SAFETY: buf is readable for its length.
        unsafe { self.pwrite_raw(f, buf.as_ptr(), buf.len(), Some(off)).map(|_| buf.len()) }
    }

    /// The file position (for read/write without offsets), under its lock.
    pub fn with_pos<T>(&self, f: &File, op: impl FnOnce(&mut u64) -> Result<T>) -> Result<T> {
        let mut pos = lock(&f.pos);
        op(&mut pos)
    }

    /// `lseek`: SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE.
    pub fn seek(&self, f: &File, off: i64, whence: i32) -> Result<u64> {
        let mut pos = lock(&f.pos);
        let size = f.cell.read().size;
        let new = match whence {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => *pos as i64 + off,
            libc::SEEK_END => size as i64 + off,
            libc::SEEK_DATA => {
                if off < 0 || off as u64 >= size {
                    return posix(libc::ENXIO, "SEEK_DATA past the end");
                }
                off
            }
            libc::SEEK_HOLE => {
                if off < 0 || off as u64 > size {
                    return posix(libc::ENXIO, "SEEK_HOLE past the end");
                }
                size as i64
            }
            _ => return posix(libc::EINVAL, format!("lseek whence {whence}")),
        };
        if new < 0 {
            return posix(libc::EINVAL, "lseek to a negative offset");
        }
        *pos = new as u64;
        Ok(*pos)
    }

    pub fn ftruncate(&self, f: &File, len: u64) -> Result<()> {
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return posix(libc::EBADF, format!("inode {}: not open for writing", f.cell.ino));
        }
        self.truncate_cell(&f.cell, len)
    }

    pub fn truncate(&self, path: &[u8], len: u64) -> Result<()> {
        let ino = self.found(path, true)?;
        let c = self.cell(&lock(&self.ns), ino)?;
        self.truncate_cell(&c, len)
    }

    fn truncate_cell(&self, c: &Arc<InodeCell>, len: u64) -> Result<()> {
        let mut n = c.write();
        if n.is_dir() {
            return posix(libc::EISDIR, format!("inode {}", c.ino));
        }
        if !n.is_reg() {
            return posix(libc::EINVAL, format!("inode {}", c.ino));
        }
        if len < n.size && n.order != NO_RANGE {
            // Bytes beyond the size are zeros: clear what the file held past `len`.
            let held = (n.cap_pages() * PAGE as u64).min(n.size.div_ceil(PAGE as u64) * PAGE as u64);
            self.engine.zero(n.vstart, len, held)?;
        } else if len > n.size {
            self.ensure_capacity(c, &mut n, len.div_ceil(PAGE as u64))?;
        }
        n.size = len;
        let now = Ts::now();
        n.mtime = now;
        n.ctime = now;
        drop(n);
        self.queue_data(c);
        self.queue_meta(&mut lock(&self.pending), c);
        Ok(())
    }

    /// The file's pages in the FLAC space (FlacFS only): a direct, read-only view of its
    /// data, valid until the file grows (it may move to a larger range then).
    pub fn file_view(&self, f: &File) -> Option<(usize, u64)> {
        let n = f.cell.read();
        if n.order == NO_RANGE {
            return None;
        }
        let a = self.engine.view_addr(n.vstart)?;
        if let Some(fl) = self.flac() {
            fl.use_view();
        }
        Some((a, n.size))
    }

    // ---- commits -----------------------------------------------------------------------------

    /// Flush all dirty data and commit all pending metadata (one transaction, or data-only
    /// transactions first and the metadata with the last when the data is large).
    pub fn sync(&self) -> Result<()> {
        let _s = lock(&self.sync_lock);
        let (files, metas, ops, frees) = {
            let mut p = lock(&self.pending);
            (std::mem::take(&mut p.data), std::mem::take(&mut p.meta), std::mem::take(&mut p.ops), std::mem::take(&mut p.frees))
        };
        let through = self.engine.lock_through_commit();
        let mut st = Staged::default();
        let mut held: Vec<RwLockWriteGuard<'_, Inode>> = Vec::new();
        // The inodes whose metadata this sync commits, and their records. A record is taken
        // under the inode's lock with its queue mark cleared at that moment: a writer changes
        // an inode under the lock and queues it afterwards, so whatever a record misses is
        // queued again for the next sync. (Clearing the mark after encoding lost such changes:
        // a file's last writes, when they slipped in between, never reached PM.) Only inodes
        // of this sync's list are cleared: one queued since is in the next list and must stay
        // marked, or a later write would queue it twice.
        let ours: HashSet<u64> = metas.iter().map(|c| c.ino).collect();
        let mut records: HashMap<u64, Vec<u8>> = HashMap::new();
        for c in &files {
            c.data_queued.store(false, Ordering::Release);
            let g = c.write();
            if c.deleted.load(Ordering::Acquire) || g.order == NO_RANGE {
                continue;
            }
            // The whole range, not only up to the size: pages a truncate zeroed past the
            // size are changes to commit too (their old frames go).
            let pages = g.cap_pages();
            let mut at = 0;
            while at < pages {
                let k = (pages - at).min(self.commit_pages);
                self.engine.stage(&mut st, g.vstart + at, k)?;
                at += k;
                if st.pages >= self.commit_pages {
                    // A data-only transaction: pages past a file's committed size or not yet
                    // in any committed file are invisible until the metadata commits.
                    self.engine.commit(std::mem::take(&mut st), &Tx::new())?;
                }
            }
            if ours.contains(&c.ino) && !records.contains_key(&c.ino) {
                c.meta_queued.store(false, Ordering::Release);
                records.insert(c.ino, g.encode());
            }
            if through {
                held.push(g);
            }
        }
        let mut meta = Tx::new();
        let pm = self.pm();
        for &(vpn, order) in &frees {
            for v in vpn..vpn + (1u64 << order) {
                if pm.state().ppt(v).is_some() {
                    meta.pt_set(v, None);
                }
            }
        }
        meta.extend(&ops);
        for c in &metas {
            // Inodes this sync holds (lock through commit) all have their records by now.
            let rec = match records.get(&c.ino) {
                Some(r) => r.clone(),
                None => {
                    let g = c.read();
                    c.meta_queued.store(false, Ordering::Release);
                    let r = g.encode();
                    records.insert(c.ino, r.clone());
                    r
                }
            };
            if c.deleted.load(Ordering::Acquire) {
                continue;
            }
            meta.put(&ikey(c.ino), &rec);
        }
        self.engine.commit(st, &meta)?;
        drop(held);
        let mut r = lock(&self.ranges);
        for (vpn, order) in frees {
            r.free(vpn, order as usize);
        }
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Commit pending metadata early when it grows large (namespace-heavy work between syncs).
    fn maybe_commit_meta(&self) -> Result<()> {
        let big = lock(&self.pending).ops.body_len() as u64 > self.pm().geometry().log_bytes / 4;
        if big {
            self.sync()?;
        }
        Ok(())
    }

    /// `fsync`: a full commit (FlacFS commits all pending work together).
    pub fn fsync(&self, _f: &File) -> Result<()> {
        self.sync()
    }

    /// Drop clean cached data (experiments: a cold cache).
    pub fn drop_caches(&self) -> Result<()> {
        self.sync()?;
        self.engine.drop_caches()
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
        })
    }

    /// Stop the flusher and commit everything (also done on drop).
    pub fn unmount(&self) -> Result<()> {
        *lock(&self.stop) = true;
        self.kick.notify_all();
        // The flusher may hold the last reference itself (then it is the one unmounting).
        if *lock(&self.flusher_id) != Some(std::thread::current().id()) {
            if let Some(h) = lock(&self.flusher).take() {
                let _ = h.join();
            }
        }
        self.sync()
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        let _ = self.unmount();
    }
}

fn flusher_main(fs: std::sync::Weak<Fs>) {
    loop {
        let Some(f) = fs.upgrade() else { return };
        let period = Duration::from_millis(f.cfg.flush_interval_ms);
        {
            let stop = lock(&f.stop);
            if *stop {
                return;
            }
            let (stop, _) = f.kick.wait_timeout(stop, period).unwrap_or_else(|e| e.into_inner());
            if *stop {
                return;
            }
        }
        f.counters.flusher_runs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = f.sync() {
            eprintln!("flacfs: background flush failed: {e}");
        }
    }
}

fn new_cell(ino: u64, node: Inode) -> InodeCell {
    InodeCell {
        ino,
        data: RwLock::new(node),
        data_queued: AtomicBool::new(false),
        meta_queued: AtomicBool::new(false),
        open: AtomicU32::new(0),
        deleted: AtomicBool::new(false),
    }
}

fn parent_of(ns: &Ns, ino: u64) -> Option<u64> {
    ns.parents.get(&ino).copied()
}

fn outside(p: Vec<u8>) -> FlacError {
    FlacError::Posix(libc::EXDEV, format!("{}: a symlink leads outside the file system", show(&p)))
}

fn unsafe_id() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}
