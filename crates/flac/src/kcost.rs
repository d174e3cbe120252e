//! What a kernel file system's calls cost on this machine, measured on a tmpfs (the kernel's
//! page cache, no device): `pread` and `pwrite` of one byte of a cached file, `open` and
//! `close` of an existing file, `stat` of its path, `lseek`. Each figure is the median over
//! `repeats` batches of the mean per call in a batch of `batch` calls; the clock's own cost is
//! not subtracted (two clock reads per batch of 200 calls). The library file systems charge
//! these costs per call when asked to ([`crate::fs::calls::KernelCost`]): the kernel crossing
//! and the VFS work that a library file system does not pay.

use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

use crate::error::{FlacError, Result};
use crate::fs::calls::KernelCost;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn check(r: i64, what: &str) -> Result<()> {
    if r < 0 {
        return Err(FlacError::io(what, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Per-call ns of `f` over `repeats` batches of `batch` calls (median of the batch means).
fn per_call(repeats: usize, batch: usize, mut f: impl FnMut() -> Result<()>) -> Result<u64> {
    let mut v = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t0 = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        v.push(t0.elapsed().as_nanos() as f64 / batch as f64);
    }
    Ok(median(v).round() as u64)
}

/// Measure the per-call costs on a file created (and removed) in `dir`.
pub fn measure(dir: &Path, repeats: usize) -> Result<KernelCost> {
    let path = dir.join(format!("ssdlab-kcost-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 65536]).map_err(|e| FlacError::io(format!("writing {}", path.display()), e))?;
    let r = measure_file(&path, repeats.max(3));
    let _ = std::fs::remove_file(&path);
    r
}

fn measure_file(path: &Path, repeats: usize) -> Result<KernelCost> {
    const BATCH: usize = 200;
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| FlacError::Invalid("path with NUL".into()))?;
    // SAFETY: plain system calls on a file this function created; buffers outlive the calls.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDWR);
        check(fd as i64, "open")?;
        let mut b = [0u8; 1];
        let read_ns = per_call(repeats, BATCH, || check(libc::pread(fd, b.as_mut_ptr().cast(), 1, 0) as i64, "pread"));
        let write_ns = per_call(repeats, BATCH, || check(libc::pwrite(fd, b.as_ptr().cast(), 1, 0) as i64, "pwrite"));
        let seek_ns = per_call(repeats, BATCH, || check(libc::lseek(fd, 0, libc::SEEK_SET), "lseek"));
        let mut st: libc::stat = std::mem::zeroed();
        let stat_ns = per_call(repeats, BATCH, || check(libc::stat(c.as_ptr(), &mut st) as i64, "stat"));
        libc::close(fd);
        let (read_ns, write_ns, seek_ns, stat_ns) = (read_ns?, write_ns?, seek_ns?, stat_ns?);
        // Opens and closes in separate batches: BATCH descriptors open at once.
        let mut fds = vec![0; BATCH];
        let (mut opens, mut closes) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let t0 = Instant::now();
            for slot in fds.iter_mut() {
                *slot = libc::open(c.as_ptr(), libc::O_RDONLY);
            }
            opens.push(t0.elapsed().as_nanos() as f64 / BATCH as f64);
            let bad = fds.iter().any(|&f| f < 0);
            let t0 = Instant::now();
            for &f in fds.iter().filter(|&&f| f >= 0) {
                libc::close(f);
            }
            closes.push(t0.elapsed().as_nanos() as f64 / BATCH as f64);
            if bad {
                return Err(FlacError::io("open", std::io::Error::last_os_error()));
            }
        }
        Ok(KernelCost {
            read_ns,
            write_ns,
            open_ns: median(opens).round() as u64,
            close_ns: median(closes).round() as u64,
            stat_ns,
            seek_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_call_kind_gets_a_positive_cost() {
        let k = super::measure(&std::env::temp_dir(), 3).unwrap();
        for v in [k.read_ns, k.write_ns, k.open_ns, k.close_ns, k.stat_ns, k.seek_ns] {
            assert!(v > 0);
        }
    }
}
