//! `libflacfs.so`: an LD_PRELOAD shim that lets unmodified programs (coreutils, tar, grep,
//! sort, ...) use FlacFS, or one of the baseline library file systems, under a mount prefix:
//!
//! ```sh
//! FLACFS_IMAGE=/dev/shm/fs.pm FLACFS_MOUNT=/flac LD_PRELOAD=target/release/libflacfs.so cat /flac/a
//! ```
//!
//! Calls on paths under `FLACFS_MOUNT` (and on descriptors, directory streams and FILE streams
//! they opened) are served by the library file system in the process; everything else goes to
//! libc. A FlacFS descriptor is a real descriptor (`/dev/null` opened `O_PATH`, so numbering,
//! `close`-on-exec and `dup` behave) that the shim maps to an open file. Reads into page-aligned
//! buffers of at least `FLACFS_ZCOPY_MIN` bytes are zero-copy (the file's frames are mapped
//! privately into the buffer); the rest is copied and counted.
//!
//! Environment: `FLACFS_IMAGE` (required; without it the shim passes everything through),
//! `FLACFS_MOUNT` (default /flac), `FLACFS_ENGINE` (flac, pagecache, dax), `FLACFS_DRAM`
//! (cache size, e.g. 256M), `FLACFS_DRAM_DIR`, `FLACFS_PM_COST` (on/off), `FLACFS_ZCOPY_MIN`,
//! `FLACFS_ASYNC_LOAD`, `FLACFS_LOCKFREE_FLUSH`, `FLACFS_CREATE` (create the image with this
//! size if missing), `FLACFS_WAIT_MS` (wait for another process holding the image),
//! `FLACFS_SYNC_ON_CLOSE` (commit when a written file is closed; on), `FLACFS_PREFAULT`
//! (allocate the whole DRAM cache at start; off), `FLACFS_KERNEL_COST` (per-call kernel costs
//! charged on every call, JSON as `ssdlab_flac::fs::calls::KernelCost`: `{"read_ns": 300, ...}`),
//! `FLACFS_STATS` (append a JSON line of statistics at exit, with the time inside file-system
//! calls and the read/write sizes), `FLACFS_DEBUG`.
//!
//! Limits (docs/case-studies/flac.md): one process uses an image at a time (others wait up to
//! `FLACFS_WAIT_MS`); FlacFS descriptors are not inherited across `exec`; a forked child does
//! not use FlacFS until it execs; shared writable `mmap` of a FlacFS file is refused (private
//! and read-only mappings work); relative paths resolve lexically (`a/../b` is `b`).

#![allow(clippy::missing_safety_doc)]

mod dirs;
mod fds;
mod io;
mod paths;
mod stdio;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ssdlab_flac::fs::engine::EngineKind;
use ssdlab_flac::fs::{File, Fs, FsConfig};
use ssdlab_flac::{FlacConfig, FlacError, Format, PmCost};

/// The real libc function `name`, resolved once with `dlsym(RTLD_NEXT)`.
#[macro_export]
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static P: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            p = libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) as usize;
            assert!(p != 0, concat!("flacfs: libc has no ", $name));
            P.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        std::mem::transmute::<usize, $ty>(p)
    }};
}

/// An open FlacFS file or directory behind a descriptor (shared by `dup`s).
pub(crate) struct Open {
    pub file: Arc<File>,
    /// Its path inside the file system (for `*at` calls relative to a directory).
    pub path: Vec<u8>,
    pub written: AtomicBool,
}

pub(crate) struct Shim {
    pub fs: Arc<Fs>,
    pub mount: Vec<u8>,
    pub fds: Mutex<HashMap<c_int, Arc<Open>>>,
    /// The current directory when a `chdir` went into the file system (a path inside it).
    pub vcwd: Mutex<Option<Vec<u8>>>,
    pub pid: i32,
    pub sync_on_close: bool,
    stats_path: Option<PathBuf>,
    started: Instant,
}

const FAST_FDS: usize = 65536;
/// `OURS[fd]`: fd is a FlacFS descriptor (a quick test before any lock).
static OURS: [AtomicBool; FAST_FDS] = [const { AtomicBool::new(false) }; FAST_FDS];
static STATE: OnceLock<Option<Shim>> = OnceLock::new();
static MOUNT: OnceLock<Option<Vec<u8>>> = OnceLock::new();
static FORKED: AtomicBool = AtomicBool::new(false);
static DEBUG: OnceLock<bool> = OnceLock::new();
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The process's umask (u32::MAX: not read yet); `umask` calls are tracked.
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The umask FlacFS applies to the modes of files and directories it creates (the kernel does
/// this for host files).
pub(crate) fn current_umask() -> u32 {
    let u = UMASK.load(Ordering::Relaxed);
    if u != u32::MAX {
        return u;
    }
    let m = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").map(|v| u32::from_str_radix(v.trim(), 8).ok())).flatten())
        .unwrap_or(0o022);
    UMASK.store(m, Ordering::Relaxed);
    m
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    let old = real!("umask", unsafe extern "C" fn(libc::mode_t) -> libc::mode_t)(mask);
    UMASK.store(mask & 0o777, Ordering::Relaxed);
    old
}

thread_local! {
    /// Set while the shim itself runs (initialisation): every call passes through.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn debug() -> bool {
    *DEBUG.get_or_init(|| std::env::var_os("FLACFS_DEBUG").is_some())
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

pub(crate) fn fail_err(e: &FlacError) -> c_int {
    if debug() {
        eprintln!("flacfs: {e}");
    }
    fail(e.errno())
}

/// The mount prefix (without a trailing slash), if the shim is active.
pub(crate) fn mount() -> Option<&'static [u8]> {
    MOUNT
        .get_or_init(|| {
            std::env::var_os("FLACFS_IMAGE")?;
            let m = std::env::var("FLACFS_MOUNT").unwrap_or_else(|_| "/flac".into());
            let m = m.trim_end_matches('/');
            if !m.starts_with('/') || m.is_empty() {
                eprintln!("flacfs: FLACFS_MOUNT must be an absolute path other than /, got {m:?}; the shim is off");
                return None;
            }
            Some(m.as_bytes().to_vec())
        })
        .as_deref()
}

pub(crate) fn inside() -> bool {
    INSIDE.with(|i| i.get())
}

fn parse_size(what: &str, v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let m = match v[i..].to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1u64 << 40,
                _ => return Err(format!("{what}={v:?}: expected a size like 4096, 64K, 256M or 2G")),
            };
            (&v[..i], m)
        }
        None => (v, 1),
    };
    num.trim().parse::<u64>().map(|n| n * mul).map_err(|_| format!("{what}={v:?}: expected a size like 4096, 64K, 256M or 2G"))
}

fn flag(name: &str, default: bool) -> Result<bool, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "on" | "yes" | "true" => Ok(true),
            "0" | "off" | "no" | "false" => Ok(false),
            _ => Err(format!("{name}={v:?}: expected on or off")),
        },
    }
}

/// The file-system configuration from the environment.
pub fn config_from_env() -> Result<FsConfig, String> {
    let image = std::env::var("FLACFS_IMAGE").map_err(|_| "FLACFS_IMAGE is not set".to_string())?;
    let mount = String::from_utf8_lossy(mount().ok_or("FLACFS_MOUNT is invalid")?).into_owned();
    if image.starts_with(&format!("{mount}/")) {
        return Err(format!("FLACFS_IMAGE {image} must not be under the mount prefix {mount}"));
    }
    let engine = match std::env::var("FLACFS_ENGINE") {
        Ok(e) => EngineKind::parse(&e).ok_or_else(|| format!("FLACFS_ENGINE={e:?}: expected flac, pagecache or dax"))?,
        Err(_) => EngineKind::Flac,
    };
    let size = |name: &str, default: u64| -> Result<u64, String> {
        match std::env::var(name) {
            Ok(v) => parse_size(name, &v),
            Err(_) => Ok(default),
        }
    };
    let format = match std::env::var("FLACFS_CREATE") {
        Ok(v) => Some(Format { pm_bytes: parse_size("FLACFS_CREATE", &v)?, ..Format::default() }),
        Err(_) => None,
    };
    let cost = if flag("FLACFS_PM_COST", true)? { PmCost::default() } else { PmCost::off() };
    let flac = FlacConfig {
        pm_path: image.into(),
        format,
        dram_bytes: size("FLACFS_DRAM", 256 << 20)?,
        dram_dir: std::env::var_os("FLACFS_DRAM_DIR").map(PathBuf::from),
        cost,
        async_load: flag("FLACFS_ASYNC_LOAD", true)?,
        lock_wait_ms: size("FLACFS_WAIT_MS", 30_000)?,
        // A program uses little of the cache: frames are cleared as it touches them.
        prefault: flag("FLACFS_PREFAULT", false)?,
        ..FlacConfig::default()
    };
    Ok(FsConfig {
        engine,
        flac,
        zcopy_min_bytes: size("FLACFS_ZCOPY_MIN", 64 << 10)? as usize,
        lockfree_flush: flag("FLACFS_LOCKFREE_FLUSH", true)?,
        mount,
        kernel_cost: match std::env::var("FLACFS_KERNEL_COST") {
            Ok(v) => serde_json::from_str(&v).map_err(|e| format!("FLACFS_KERNEL_COST={v:?}: {e}"))?,
            Err(_) => Default::default(),
        },
        ..FsConfig::default()
    })
}

fn init() -> Option<Shim> {
    INSIDE.with(|i| i.set(true));
    let r = (|| -> Result<Shim, String> {
        let cfg = config_from_env()?;
        let stats_path = std::env::var_os("FLACFS_STATS").map(PathBuf::from);
        let sync_on_close = flag("FLACFS_SYNC_ON_CLOSE", true)?;
        let mount = mount().unwrap().to_vec();
        let fs = Fs::mount(cfg.clone()).map_err(|e| format!("mounting {}: {e}", cfg.flac.pm_path.display()))?;
        Ok(Shim {
            fs,
            mount,
            fds: Mutex::new(HashMap::new()),
            vcwd: Mutex::new(None),
            pid: ssdlab_flac::sys::getpid(),
            sync_on_close,
            stats_path,
            started: Instant::now(),
        })
    })();
    INSIDE.with(|i| i.set(false));
    match r {
        Ok(s) => {
            OWNER_PID.store(s.pid, Ordering::SeqCst);
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            Some(s)
        }
        Err(e) => {
            eprintln!("flacfs: {e}");
            None
        }
    }
}

/// Registered before `main` runs, so the exit handler runs after the program's own (which
/// close streams, as coreutils' close_stdout does) and before nothing that writes FlacFS.
extern "C" fn on_load() {
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

extern "C" fn in_child() {
    FORKED.store(true, Ordering::SeqCst);
}

extern "C" fn at_exit() {
    if ssdlab_flac::sys::getpid() != OWNER_PID.load(Ordering::SeqCst) || FORKED.load(Ordering::SeqCst) {
        return;
    }
    let Some(Some(s)) = STATE.get() else { return };
    // Streams the program did not close still hold data for FlacFS files.
    // SAFETY: fflush(NULL) flushes every stdio stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    INSIDE.with(|i| i.set(true));
    if let Err(e) = s.fs.unmount() {
        eprintln!("flacfs: committing at exit: {e}");
    }
    if let Some(p) = &s.stats_path {
        let mut v = s.fs.stats();
        v["wall_s"] = serde_json::json!(s.started.elapsed().as_secs_f64());
        v["pid"] = serde_json::json!(s.pid);
        v["argv0"] = serde_json::json!(std::env::args().next().unwrap_or_default());
        let line = format!("{v}\n");
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
            let _ = f.write_all(line.as_bytes());
        }
    }
    INSIDE.with(|i| i.set(false));
}

/// The shim's state, initialising the file system on first use. None: not usable (init
/// failed, or a forked child).
pub(crate) fn state() -> Option<&'static Shim> {
    if FORKED.load(Ordering::Relaxed) {
        eprintln!("flacfs: FlacFS is not usable in a forked child before exec");
        return None;
    }
    STATE.get_or_init(init).as_ref()
}

/// The shim's state if it is already running (never initialises).
pub(crate) fn running() -> Option<&'static Shim> {
    STATE.get().and_then(|s| s.as_ref())
}

impl Shim {
    pub fn fds(&self) -> MutexGuard<'_, HashMap<c_int, Arc<Open>>> {
        self.fds.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, fd: c_int, o: Arc<Open>) {
        if (fd as usize) < FAST_FDS {
            OURS[fd as usize].store(true, Ordering::Release);
        }
        self.fds().insert(fd, o);
    }

    pub fn unregister(&self, fd: c_int) -> Option<Arc<Open>> {
        let o = self.fds().remove(&fd);
        if (fd as usize) < FAST_FDS {
            OURS[fd as usize].store(false, Ordering::Release);
        }
        o
    }

    /// A host path for a path inside the file system (mount prefix + path).
    pub fn host_path(&self, p: &[u8]) -> Vec<u8> {
        let mut out = self.mount.clone();
        if p != b"/" {
            out.extend_from_slice(p);
        }
        out
    }
}

/// The open file behind `fd`, if it is a FlacFS descriptor.
pub(crate) fn ours(fd: c_int) -> Option<Arc<Open>> {
    if fd < 0 || ((fd as usize) < FAST_FDS && !OURS[fd as usize].load(Ordering::Acquire)) {
        return None;
    }
    running()?.fds().get(&fd).cloned()
}

/// Run `f` catching panics (they must not unwind into C): a panic becomes EIO.
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            fallback
        }
    }
}

pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_bytes())
    }
}
