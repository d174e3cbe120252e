//! The microbenchmark (the document's: 2 MB I/O over 64 GB of data): threads read or write
//! fixed-size I/Os at random (or sequential) offsets of their own file through the library
//! file system API, as fio does: the buffer is reused and not modified between writes.
//! Throughput is reported for the I/O calls, and for writes also with the final commit.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::apps::{read_at, write_at, IoBuf};
use crate::error::{FlacError, Result};
use crate::fs::Fs;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicroSpec {
    /// "read" or "write".
    pub op: String,
    pub io_bytes: usize,
    /// Data set, split evenly over the threads' files.
    pub data_bytes: u64,
    pub threads: usize,
    /// I/Os per thread.
    pub ops: u64,
    pub random: bool,
    /// Drop the DRAM cache after the data set is written (reads miss); else read it once
    /// first (reads hit as far as the cache holds).
    pub cold: bool,
    pub seed: u64,
}

impl Default for MicroSpec {
    fn default() -> Self {
        MicroSpec { op: "read".into(), io_bytes: 2 << 20, data_bytes: 256 << 20, threads: 1, ops: 256, random: true, cold: false, seed: 42 }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct MicroResult {
    pub seconds: f64,
    pub bytes: u64,
    pub gb_s: f64,
    /// Writes: including the commit of all written data.
    pub seconds_with_commit: f64,
    pub gb_s_with_commit: f64,
    pub us_per_io: f64,
    pub stats: serde_json::Value,
}

/// Write each thread's file (not timed), then warm or drop the cache.
fn setup(fs: &Fs, spec: &MicroSpec) -> Result<u64> {
    let per = (spec.data_bytes / spec.threads as u64) / spec.io_bytes as u64 * spec.io_bytes as u64;
    if per == 0 {
        return Err(FlacError::Invalid(format!("micro: data_bytes {} too small for {} threads of {}-byte I/Os", spec.data_bytes, spec.threads, spec.io_bytes)));
    }
    match fs.mkdir(b"/micro", 0o755) {
        Ok(()) | Err(FlacError::Posix(libc::EEXIST, _)) => {}
        Err(e) => return Err(e),
    }
    let chunk = (2usize << 20).max(spec.io_bytes);
    let buf = IoBuf::new(fs, chunk)?;
    let mut rng = Pcg64Mcg::seed_from_u64(spec.seed ^ 0x5eed);
    for t in 0..spec.threads {
        let f = fs.open(format!("/micro/t{t}").as_bytes(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, 0o644)?;
        let mut off = 0;
        while off < per {
            let n = chunk.min((per - off) as usize);
            rng.fill(buf.slice_mut(n));
            write_at(fs, &f, &buf, n, off)?;
            off += n as u64;
            if fs.flac().is_some_and(|fl| fl.dirty_pages() * 4096 > fs.config().flac.dram_bytes / 4) {
                fs.sync()?;
            }
        }
        fs.close(&f)?;
    }
    fs.sync()?;
    if spec.cold {
        fs.drop_caches()?;
    } else {
        // Read everything once so the cache holds what fits.
        for t in 0..spec.threads {
            let f = fs.open(format!("/micro/t{t}").as_bytes(), libc::O_RDONLY, 0)?;
            let mut off = 0;
            while off < per {
                off += read_at(fs, &f, &buf, chunk.min((per - off) as usize), off)? as u64;
            }
            fs.close(&f)?;
        }
        if let Some(fl) = fs.flac() {
            fl.wait_loads();
        }
    }
    Ok(per)
}

pub fn run_micro(fs: &Arc<Fs>, spec: &MicroSpec) -> Result<MicroResult> {
    let write = match spec.op.as_str() {
        "read" => false,
        "write" => true,
        o => return Err(FlacError::Invalid(format!("micro: op must be read or write, got {o:?}"))),
    };
    if spec.threads == 0 || spec.io_bytes == 0 || spec.ops == 0 {
        return Err(FlacError::Invalid("micro: threads, io_bytes and ops must be positive".into()));
    }
    let per = setup(fs, spec)?;
    let slots = per / spec.io_bytes as u64;
    let barrier = Arc::new(Barrier::new(spec.threads + 1));
    let mut handles = Vec::new();
    for t in 0..spec.threads {
        let fs = fs.clone();
        let spec = spec.clone();
        let barrier = barrier.clone();
        handles.push(std::thread::spawn(move || -> Result<u64> {
            let f = fs.open(format!("/micro/t{t}").as_bytes(), libc::O_RDWR, 0)?;
            let buf = IoBuf::new(&fs, spec.io_bytes)?;
            buf.slice_mut(spec.io_bytes).fill(t as u8 + 1);
            let mut rng = Pcg64Mcg::seed_from_u64(spec.seed + t as u64);
            barrier.wait();
            let mut bytes = 0;
            for i in 0..spec.ops {
                let slot = if spec.random { rng.gen_range(0..slots) } else { i % slots };
                let off = slot * spec.io_bytes as u64;
                if write {
                    write_at(&fs, &f, &buf, spec.io_bytes, off)?;
                } else {
                    read_at(&fs, &f, &buf, spec.io_bytes, off)?;
                }
                bytes += spec.io_bytes as u64;
            }
            fs.close(&f)?;
            Ok(bytes)
        }));
    }
    barrier.wait();
    let t0 = Instant::now();
    let mut bytes = 0;
    for h in handles {
        bytes += h.join().map_err(|_| FlacError::Invalid("micro: a thread panicked".into()))??;
    }
    let seconds = t0.elapsed().as_secs_f64();
    if write {
        fs.sync()?;
    }
    let with_commit = t0.elapsed().as_secs_f64();
    let ios = spec.ops * spec.threads as u64;
    Ok(MicroResult {
        seconds,
        bytes,
        gb_s: bytes as f64 / seconds / 1e9,
        seconds_with_commit: with_commit,
        gb_s_with_commit: bytes as f64 / with_commit / 1e9,
        us_per_io: seconds * 1e6 / ios as f64 * spec.threads as f64,
        stats: fs.stats(),
    })
}
