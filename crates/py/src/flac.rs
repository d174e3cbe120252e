//! `ssdlab._native` functions of the flac case study (crate ssdlab-flac): FlacFS (and the
//! baseline library file systems) with FLAC buffers for zero-copy I/O, and the JSON runner
//! of experiments and benches. `ssdlab.studies.flac.api` wraps these; configs cross as JSON.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ssdlab_flac::fs::{File, Fs, FsConfig, Stat};
use ssdlab_flac::{Buffer, FlacError};
// The handle maps are bookkeeping in the sense of the lock-poisoning policy
// (docs/ARCHITECTURE.md, "Locks and panics"): they change in whole steps (one get, insert or
// remove, one counter step; `unmount` closes files while it drains the map, and a panic there
// still leaves it drained, with the file system already taken). A panic cannot leave them
// half-changed, so a poisoned map is taken as is (`lock`), neither refused with a panic
// (`lock_store`, for stores an update can break) nor turned into a Python error: the handles
// in it are still right, and refusing them would strand the files Python has open.
use ssdlab_server::lock;

fn err(e: FlacError) -> PyErr {
    match e {
        FlacError::Invalid(m) => PyValueError::new_err(m),
        e => PyOSError::new_err((e.errno(), e.to_string())),
    }
}

fn stat_dict(s: &Stat) -> HashMap<&'static str, u64> {
    HashMap::from([
        ("ino", s.ino),
        ("mode", s.mode as u64),
        ("nlink", s.nlink as u64),
        ("uid", s.uid as u64),
        ("gid", s.gid as u64),
        ("size", s.size),
        ("mtime_ns", s.mtime.sec as u64 * 1_000_000_000 + s.mtime.nsec as u64),
    ])
}

/// A FLAC buffer: memory whose pages attach to and from FlacFS files without copying.
#[pyclass(module = "ssdlab._native", weakref)]
struct FlacBuf {
    buf: Buffer,
}

#[pymethods]
impl FlacBuf {
    #[getter]
    fn addr(&self) -> usize {
        self.buf.as_ptr() as usize
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// Give shared pages private frames now (before system calls write into the buffer).
    fn unshare(&self) -> PyResult<()> {
        self.buf.unshare().map_err(err)
    }
}

/// A mounted library file system (FlacFS or a baseline).
#[pyclass(module = "ssdlab._native")]
struct FlacFs {
    fs: Option<Arc<Fs>>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    next: Mutex<u64>,
}

impl FlacFs {
    fn fs(&self) -> PyResult<&Arc<Fs>> {
        self.fs.as_ref().ok_or_else(|| PyValueError::new_err("the file system is unmounted"))
    }

    fn file(&self, h: u64) -> PyResult<Arc<File>> {
        lock(&self.files).get(&h).cloned().ok_or_else(|| PyOSError::new_err((libc::EBADF, format!("handle {h} is not open"))))
    }
}

#[pymethods]
impl FlacFs {
    #[new]
    fn new(py: Python<'_>, config_json: &str) -> PyResult<FlacFs> {
        let cfg: FsConfig = serde_json::from_str(config_json).map_err(|e| PyValueError::new_err(format!("file-system config: {e}")))?;
        let fs = py.detach(|| Fs::mount(cfg)).map_err(err)?;
        Ok(FlacFs { fs: Some(fs), files: Mutex::new(HashMap::new()), next: Mutex::new(3) })
    }

    #[getter]
    fn engine(&self) -> PyResult<&'static str> {
        Ok(self.fs()?.engine_kind().name())
    }

    fn open(&self, path: &[u8], flags: i32, mode: u32) -> PyResult<u64> {
        let f = self.fs()?.open(path, flags, mode).map_err(err)?;
        let mut n = lock(&self.next);
        *n += 1;
        lock(&self.files).insert(*n, f);
        Ok(*n)
    }

    fn close(&self, h: u64) -> PyResult<()> {
        let f = lock(&self.files).remove(&h).ok_or_else(|| PyOSError::new_err((libc::EBADF, format!("handle {h} is not open"))))?;
        self.fs()?.close(&f).map_err(err)
    }

    fn pread<'py>(&self, py: Python<'py>, h: u64, n: usize, off: u64) -> PyResult<Bound<'py, PyBytes>> {
        let (fs, f) = (self.fs()?.clone(), self.file(h)?);
        let mut v = vec![0u8; n];
        let k = py.detach(|| fs.pread(&f, &mut v, off)).map_err(err)?;
        Ok(PyBytes::new(py, &v[..k]))
    }

    fn pwrite(&self, py: Python<'_>, h: u64, data: &[u8], off: u64) -> PyResult<usize> {
        let (fs, f) = (self.fs()?.clone(), self.file(h)?);
        py.detach(|| fs.pwrite(&f, data, off)).map_err(err)
    }

    /// Read `n` bytes at `off` into memory at `addr` (a FLAC buffer attaches); returns
    /// (bytes read, bytes mapped, bytes copied).
    fn read_into(&self, py: Python<'_>, h: u64, addr: usize, n: usize, off: u64) -> PyResult<(usize, u64, u64)> {
        let (fs, f) = (self.fs()?.clone(), self.file(h)?);
        // SAFETY: the caller passes writable memory of n bytes (a FlacBuf or a numpy array).
        let (k, x) = py.detach(|| unsafe { fs.pread_raw(&f, addr as *mut u8, n, off) }).map_err(err)?;
        Ok((k, x.mapped_bytes, x.copied_bytes))
    }

    /// Write `n` bytes from memory at `addr` at `off`; returns (bytes mapped, bytes copied).
    fn write_from(&self, py: Python<'_>, h: u64, addr: usize, n: usize, off: u64) -> PyResult<(u64, u64)> {
        let (fs, f) = (self.fs()?.clone(), self.file(h)?);
        // SAFETY: the caller passes readable memory of n bytes.
        let (_, x) = py.detach(|| unsafe { fs.pwrite_raw(&f, addr as *const u8, n, Some(off)) }).map_err(err)?;
        Ok((x.mapped_bytes, x.copied_bytes))
    }

    fn truncate(&self, h: u64, len: u64) -> PyResult<()> {
        let f = self.file(h)?;
        self.fs()?.ftruncate(&f, len).map_err(err)
    }

    fn fstat(&self, h: u64) -> PyResult<HashMap<&'static str, u64>> {
        let f = self.file(h)?;
        Ok(stat_dict(&self.fs()?.fstat(&f)))
    }

    #[pyo3(signature = (path, follow=true))]
    fn stat(&self, path: &[u8], follow: bool) -> PyResult<HashMap<&'static str, u64>> {
        Ok(stat_dict(&self.fs()?.stat(path, follow).map_err(err)?))
    }

    fn mkdir(&self, path: &[u8], mode: u32) -> PyResult<()> {
        self.fs()?.mkdir(path, mode).map_err(err)
    }

    fn remove(&self, path: &[u8], dir: bool) -> PyResult<()> {
        self.fs()?.remove(path, dir).map_err(err)
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> PyResult<()> {
        self.fs()?.rename(src, dst, false).map_err(err)
    }

    /// (name, inode, DT_* type) of a directory's entries, in name order.
    fn listdir<'py>(&self, py: Python<'py>, path: &[u8]) -> PyResult<Vec<(Bound<'py, PyBytes>, u64, u8)>> {
        let fs = self.fs()?;
        let d = fs.open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(err)?;
        let r = fs.readdir(&d).map_err(err);
        fs.close(&d).map_err(err)?;
        Ok(r?.into_iter().map(|e| (PyBytes::new(py, &e.name), e.ino, e.kind)).collect())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.fs()?.clone();
        py.detach(|| fs.sync()).map_err(err)
    }

    fn drop_caches(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.fs()?.clone();
        py.detach(|| fs.drop_caches()).map_err(err)
    }

    /// Statistics (JSON).
    fn stats(&self) -> PyResult<String> {
        Ok(self.fs()?.stats().to_string())
    }

    /// A FLAC buffer of `n` bytes (FlacFS only).
    fn alloc(&self, n: usize) -> PyResult<FlacBuf> {
        let flac = self.fs()?.flac().ok_or_else(|| PyValueError::new_err("FLAC buffers exist on FlacFS only (engine \"flac\")"))?;
        Ok(FlacBuf { buf: flac.alloc_buffer(n).map_err(err)? })
    }

    /// DRAM and PM frames in use (FlacFS; sharing counts once).
    fn frames_in_use(&self) -> PyResult<(u64, u64)> {
        let fs = self.fs()?;
        Ok(match fs.flac() {
            Some(f) => f.frames_in_use(),
            None => {
                let s = fs.pm().state();
                (0, (s.alloc.nframes() - s.alloc.nfree()) as u64)
            }
        })
    }

    /// Check FLAC's and PM's invariants (reference counts, page tables); an error names
    /// the first broken one.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.fs()?.clone();
        py.detach(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if let Some(f) = fs.flac() {
                    f.check_invariants();
                }
                fs.pm().check_invariants();
            }))
        })
        .map_err(|p| {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            PyOSError::new_err((libc::EIO, format!("inconsistent image: {msg}")))
        })
    }

    /// Commit everything and release the image (also done when the object is collected).
    fn unmount(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(fs) = self.fs.take() else { return Ok(()) };
        for (_, f) in lock(&self.files).drain() {
            let _ = fs.close(&f);
        }
        py.detach(|| fs.unmount()).map_err(err)
    }
}

/// Run an experiment or bench spec (JSON, see ssdlab_flac::run); returns the result (JSON).
#[pyfunction]
fn flac_run(py: Python<'_>, spec_json: &str) -> PyResult<String> {
    py.detach(|| ssdlab_flac::run::run_json(spec_json)).map_err(err)
}

/// The default file-system config (JSON).
#[pyfunction]
fn flac_defaults() -> String {
    serde_json::to_string(&FsConfig::default()).unwrap()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FlacFs>()?;
    m.add_class::<FlacBuf>()?;
    m.add_function(wrap_pyfunction!(flac_run, m)?)?;
    m.add_function(wrap_pyfunction!(flac_defaults, m)?)?;
    Ok(())
}
