//! The microbenchmark (the document's: 2 MB I/O over 64 GB of data): threads read or write
//! fixed-size I/Os at random (or sequential) offsets of their own file through the library
//! file system API, as fio does: the buffer is reused and not modified between writes, and
//! after a read the application touches one byte of each page it got (so a mapping is paid
//! for in full: page-table entries are filled on use, not by the read). Throughput is
//! reported for the I/O calls, and for writes also with the commit of all written data.
//!
//! A suite writes one data set (not timed) and measures several points on it.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::apps::{read_at, write_at, IoBuf};
use crate::error::{FlacError, Result};
use crate::fs::Fs;
use crate::sys::PAGE;

/// The data set: `threads` files of `data_bytes / threads` each.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicroSetup {
    pub data_bytes: u64,
    pub threads: usize,
    pub seed: u64,
}

impl Default for MicroSetup {
    fn default() -> Self {
        MicroSetup { data_bytes: 256 << 20, threads: 1, seed: 42 }
    }
}

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicroPoint {
    /// "read" or "write".
    pub op: String,
    pub io_bytes: usize,
    /// Threads (at most the setup's), each on its own file.
    pub threads: usize,
    /// Bytes moved per thread.
    pub bytes: u64,
    pub random: bool,
    /// Drop the DRAM cache first (reads miss); otherwise the data set was read once after it
    /// was written, so the cache holds what fits.
    pub cold: bool,
    /// Touch one byte of each page read (see the module doc).
    pub touch: bool,
    /// Writes: put new data in the buffer before each write (a counter in every page), as
    /// an application producing data does; false: rewrite the same buffer (fio's default).
    /// With new data FlacFS pays copy-on-write on the buffer, and no page is written twice.
    pub fresh_data: bool,
    /// Use ordinary memory for the I/O buffer even on FlacFS (transfers copy).
    pub plain_buffer: bool,
    /// Runs; the median is reported.
    pub repeats: usize,
}

impl Default for MicroPoint {
    fn default() -> Self {
        MicroPoint {
            op: "read".into(),
            io_bytes: 2 << 20,
            threads: 1,
            bytes: 256 << 20,
            random: true,
            cold: false,
            touch: true,
            fresh_data: false,
            plain_buffer: false,
            repeats: 1,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct MicroResult {
    pub op: String,
    pub io_bytes: usize,
    pub threads: usize,
    pub cold: bool,
    pub fresh_data: bool,
    pub gb_s: f64,
    /// Writes: including the commit of the written data (median).
    pub gb_s_with_commit: f64,
    /// Latency of one I/O (µs, median of runs' averages).
    pub us_per_io: f64,
    /// Each run's GB/s.
    pub runs: Vec<f64>,
    /// Bytes attached vs copied during the point (file-system counters).
    pub mapped_bytes: u64,
    pub copied_bytes: u64,
}

fn file(t: usize) -> String {
    format!("/micro/t{t}")
}

/// Write the data set, commit it, read it once (warm cache).
pub fn setup(fs: &Fs, s: &MicroSetup) -> Result<u64> {
    let per = (s.data_bytes / s.threads.max(1) as u64) / (2 << 20) * (2 << 20);
    if per == 0 {
        return Err(FlacError::Invalid(format!("micro: data_bytes {} is less than 2 MiB per thread", s.data_bytes)));
    }
    match fs.mkdir(b"/micro", 0o755) {
        Ok(()) | Err(FlacError::Posix(libc::EEXIST, _)) => {}
        Err(e) => return Err(e),
    }
    let chunk = 2usize << 20;
    let mut rng = Pcg64Mcg::seed_from_u64(s.seed ^ 0x5eed);
    let mut data = vec![0u8; chunk];
    for t in 0..s.threads {
        let f = fs.open(file(t).as_bytes(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, 0o644)?;
        let mut off = 0;
        while off < per {
            rng.fill(&mut data[..]);
            fs.pwrite(&f, &data, off)?;
            off += chunk as u64;
        }
        fs.close(&f)?;
        fs.sync()?;
    }
    warm(fs, s.threads, per)?;
    Ok(per)
}

fn warm(fs: &Fs, threads: usize, per: u64) -> Result<()> {
    let chunk = 2usize << 20;
    let buf = IoBuf::new(fs, chunk)?;
    for t in 0..threads {
        let f = fs.open(file(t).as_bytes(), libc::O_RDONLY, 0)?;
        let mut off = 0;
        while off < per {
            off += read_at(fs, &f, &buf, chunk, off)? as u64;
        }
        fs.close(&f)?;
    }
    if let Some(fl) = fs.flac() {
        fl.wait_loads();
    }
    Ok(())
}

fn counters(fs: &Fs) -> (u64, u64) {
    let s = fs.stats();
    (s["mapped_bytes"].as_u64().unwrap_or(0), s["copied_bytes"].as_u64().unwrap_or(0))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One run of a point: (seconds of I/O, seconds with the commit).
fn run_once(fs: &Arc<Fs>, p: &MicroPoint, per: u64, seed: u64) -> Result<(f64, f64)> {
    let write = p.op == "write";
    let slots = per / p.io_bytes as u64;
    let barrier = Arc::new(Barrier::new(p.threads + 1));
    let mut handles = Vec::new();
    for t in 0..p.threads {
        let fs = fs.clone();
        let p = p.clone();
        let barrier = barrier.clone();
        handles.push(std::thread::spawn(move || -> Result<(Instant, Instant)> {
            let f = fs.open(file(t).as_bytes(), libc::O_RDWR, 0)?;
            let buf = if p.plain_buffer { IoBuf::Plain(crate::apps::IoBufPlain::new(p.io_bytes)?) } else { IoBuf::new(&fs, p.io_bytes)? };
            buf.slice_mut(p.io_bytes).fill(t as u8 + 1);
            let mut rng = Pcg64Mcg::seed_from_u64(seed + t as u64);
            let ios = p.bytes / p.io_bytes as u64;
            barrier.wait();
            // Each thread times itself: the main thread may not run again until they are done.
            let start = Instant::now();
            let mut sink = 0u64;
            for i in 0..ios {
                let slot = if p.random { rng.gen_range(0..slots) } else { i % slots };
                let off = slot * p.io_bytes as u64;
                if write {
                    if p.fresh_data {
                        let s = buf.slice_mut(p.io_bytes);
                        let mut at = 0;
                        while at + 8 <= s.len() {
                            s[at..at + 8].copy_from_slice(&(i * 4096 + at as u64).to_le_bytes());
                            at += PAGE;
                        }
                    }
                    write_at(&fs, &f, &buf, p.io_bytes, off)?;
                } else {
                    read_at(&fs, &f, &buf, p.io_bytes, off)?;
                    if p.touch {
                        let s = buf.slice(p.io_bytes);
                        let mut at = 0;
                        while at < s.len() {
                            sink = sink.wrapping_add(s[at] as u64);
                            at += PAGE;
                        }
                    }
                }
            }
            std::hint::black_box(sink);
            let end = Instant::now();
            fs.close(&f)?;
            Ok((start, end))
        }));
    }
    barrier.wait();
    let mut span: Option<(Instant, Instant)> = None;
    for h in handles {
        let (s, e) = h.join().map_err(|_| FlacError::Invalid("micro: a thread panicked".into()))??;
        span = Some(match span {
            None => (s, e),
            Some((a, b)) => (a.min(s), b.max(e)),
        });
    }
    let (start, end) = span.expect("at least one thread");
    let io = (end - start).as_secs_f64();
    if !write {
        return Ok((io, io));
    }
    fs.sync()?;
    Ok((io, start.elapsed().as_secs_f64()))
}

/// Measure each point on the data set made by [`setup`].
pub fn run_points(fs: &Arc<Fs>, s: &MicroSetup, points: &[MicroPoint]) -> Result<Vec<MicroResult>> {
    let per = setup(fs, s)?;
    let mut out = Vec::new();
    for (k, p) in points.iter().enumerate() {
        if p.op != "read" && p.op != "write" {
            return Err(FlacError::Invalid(format!("micro: op must be read or write, got {:?}", p.op)));
        }
        if p.threads == 0 || p.threads > s.threads || p.io_bytes == 0 || p.io_bytes % PAGE != 0 || per % p.io_bytes as u64 != 0 {
            return Err(FlacError::Invalid(format!(
                "micro point {k}: threads 1..={}, io_bytes a multiple of 4096 dividing {per}",
                s.threads
            )));
        }
        let (mut mapped, mut copied) = (0, 0);
        let mut runs = Vec::new();
        let mut with_commit = Vec::new();
        let mut lat = Vec::new();
        for r in 0..p.repeats.max(1) {
            if p.cold {
                fs.drop_caches()?;
            }
            let (m0, c0) = counters(fs);
            let (io, all) = run_once(fs, p, per, s.seed + 1000 * (k as u64 + 1) + r as u64)?;
            let (m1, c1) = counters(fs);
            mapped += m1 - m0;
            copied += c1 - c0;
            let bytes = (p.bytes / p.io_bytes as u64 * p.io_bytes as u64) * p.threads as u64;
            runs.push(bytes as f64 / io / 1e9);
            with_commit.push(bytes as f64 / all / 1e9);
            lat.push(io * 1e6 / (p.bytes / p.io_bytes as u64) as f64);
            if p.op == "write" && !p.cold {
                // Later points read a warm cache again.
                warm(fs, s.threads, per)?;
            }
        }
        let mut sorted = runs.clone();
        out.push(MicroResult {
            op: p.op.clone(),
            io_bytes: p.io_bytes,
            threads: p.threads,
            cold: p.cold,
            fresh_data: p.fresh_data,
            gb_s: median(&mut sorted),
            gb_s_with_commit: median(&mut with_commit),
            us_per_io: median(&mut lat),
            runs,
            mapped_bytes: mapped,
            copied_bytes: copied,
        });
    }
    Ok(out)
}
