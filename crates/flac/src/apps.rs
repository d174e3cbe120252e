//! The document's applications, in-process on the library file system API (the same code
//! on FlacFS and both baselines; FlacFS gets FLAC buffers so aligned transfers attach):
//!
//! - **grep**: read every file of a tree in large chunks and count the lines holding a
//!   pattern (read-intensive);
//! - **tar**: archive a tree into one file and extract it into another (read and write);
//!   members' data start on 4 KiB boundaries (a pax comment pads the header), so a FlacFS
//!   archive is attached page by page, and GNU tar reads it;
//! - **bigsort**: sort a file of 32-bit integers (the document sorts 134 million) by runs
//!   sorted in memory (radix sort, out of place) and a k-way merge (read, write, compute).
//!
//! Data sets are generated deterministically from a seed (not timed).

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::error::{FlacError, Result};
use crate::flac::Buffer;
use crate::fs::{File, Fs};
use crate::sys::{self, PAGE};

/// Page-aligned anonymous memory (2 MiB-aligned from 2 MiB, huge pages advised).
pub struct IoBufPlain {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: owned memory.
unsafe impl Send for IoBufPlain {}

impl IoBufPlain {
    pub fn new(len: usize) -> Result<IoBufPlain> {
        let len = len.next_multiple_of(PAGE);
        let p = sys::reserve(len, if len >= sys::HUGE { sys::HUGE } else { PAGE })?;
        // SAFETY: anonymous memory over the reservation.
        unsafe { sys::map_anon_fixed(p, len, sys::PROT_RW) }.map_err(|e| FlacError::io("allocating an I/O buffer", e))?;
        sys::advise_huge(p, len);
        Ok(IoBufPlain { ptr: p, len })
    }
}

impl Drop for IoBufPlain {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new.
        unsafe { sys::unmap(self.ptr, self.len) };
    }
}

/// An I/O buffer: a FLAC buffer on FlacFS (attachable), page-aligned memory otherwise.
pub enum IoBuf {
    Flac(Buffer),
    Plain(IoBufPlain),
}

impl IoBuf {
    /// A buffer of `len` bytes for `fs` (contents undefined).
    pub fn new(fs: &Fs, len: usize) -> Result<IoBuf> {
        match fs.flac() {
            Some(f) => Ok(IoBuf::Flac(f.alloc_buffer(len.next_multiple_of(PAGE))?)),
            None => Ok(IoBuf::Plain(IoBufPlain::new(len)?)),
        }
    }

    pub fn ptr(&self) -> *mut u8 {
        match self {
            IoBuf::Flac(b) => b.as_ptr(),
            IoBuf::Plain(p) => p.ptr,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            IoBuf::Flac(b) => b.len(),
            IoBuf::Plain(p) => p.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn slice(&self, n: usize) -> &[u8] {
        // SAFETY: the buffer is readable for its length.
        unsafe { std::slice::from_raw_parts(self.ptr(), n.min(self.len())) }
    }

    /// Writable view (a shared FLAC page is copied on the first write).
    #[allow(clippy::mut_from_ref)]
    pub fn slice_mut(&self, n: usize) -> &mut [u8] {
        // SAFETY: the buffer is writable for its length; callers do not alias it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), n.min(self.len())) }
    }
}

/// Read `n` bytes at `off` of `f` into `buf`.
pub fn read_at(fs: &Fs, f: &File, buf: &IoBuf, n: usize, off: u64) -> Result<usize> {
    assert!(n <= buf.len());
    // SAFETY: buf is writable for n bytes.
    unsafe { fs.pread_raw(f, buf.ptr(), n, off).map(|r| r.0) }
}

/// Write `n` bytes of `buf` at `off` of `f`.
pub fn write_at(fs: &Fs, f: &File, buf: &IoBuf, n: usize, off: u64) -> Result<()> {
    assert!(n <= buf.len());
    // SAFETY: buf is readable for n bytes.
    unsafe { fs.pwrite_raw(f, buf.ptr(), n, Some(off)).map(|_| ()) }
}

fn create(fs: &Fs, path: &str) -> Result<Arc<File>> {
    fs.open(path.as_bytes(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, 0o644)
}

fn mkdirs(fs: &Fs, path: &str) -> Result<()> {
    let mut p = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        p.push('/');
        p.push_str(c);
        match fs.mkdir(p.as_bytes(), 0o755) {
            Ok(()) | Err(FlacError::Posix(libc::EEXIST, _)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A tree of text files.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TreeSpec {
    pub root: String,
    pub files: usize,
    pub total_bytes: u64,
    /// Share of lines containing `pattern`.
    pub match_fraction: f64,
    pub pattern: String,
    pub seed: u64,
}

impl Default for TreeSpec {
    fn default() -> Self {
        TreeSpec { root: "/tree".into(), files: 64, total_bytes: 64 << 20, match_fraction: 0.01, pattern: "persistent".into(), seed: 42 }
    }
}

const WORDS: &[&str] = &[
    "cache",
    "page",
    "frame",
    "memory",
    "flush",
    "write",
    "read",
    "remap",
    "table",
    "virtual",
    "space",
    "buffer",
    "copy",
    "zero",
    "load",
    "dram",
    "device",
    "latency",
    "bandwidth",
    "commit",
    "log",
    "metadata",
    "file",
    "system",
    "kernel",
    "library",
    "thread",
    "lock",
];

/// Lines of words, `pattern` in about `match_fraction` of them.
fn text(rng: &mut Pcg64Mcg, bytes: usize, pattern: &str, match_fraction: f64) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(bytes + 128);
    let mut matches = 0;
    while out.len() < bytes {
        let words = rng.gen_range(6..14);
        let hit = rng.gen_bool(match_fraction);
        let at = if hit { rng.gen_range(0..words) } else { usize::MAX };
        for w in 0..words {
            if w > 0 {
                out.push(b' ');
            }
            if w == at {
                out.extend_from_slice(pattern.as_bytes());
            } else {
                out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
            }
        }
        out.push(b'\n');
        matches += hit as u64;
    }
    out.truncate(bytes);
    if out.last() != Some(&b'\n') {
        // The last line was cut short (and maybe its match with it): count exactly.
        matches = count_matching_lines(&out, pattern.as_bytes());
    }
    (out, matches)
}

fn count_matching_lines(data: &[u8], pat: &[u8]) -> u64 {
    data.split(|&b| b == b'\n').filter(|l| memchr::memmem::find(l, pat).is_some()).count() as u64
}

/// File sizes for a tree: log-uniform between 4 KiB and 64x the mean, scaled to the total.
fn file_sizes(rng: &mut Pcg64Mcg, files: usize, total: u64) -> Vec<u64> {
    let raw: Vec<f64> = (0..files).map(|_| (rng.gen_range(0.0f64..1.0) * 10.0).exp()).collect();
    let sum: f64 = raw.iter().sum();
    raw.iter().map(|r| ((r / sum * total as f64) as u64).max(1)).collect()
}

/// Write the tree; returns the number of matching lines written.
pub fn make_tree(fs: &Fs, spec: &TreeSpec) -> Result<u64> {
    let mut rng = Pcg64Mcg::seed_from_u64(spec.seed);
    mkdirs(fs, &spec.root)?;
    let sizes = file_sizes(&mut rng, spec.files, spec.total_bytes);
    let mut matches = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let dir = format!("{}/d{:02}", spec.root, i % 8);
        mkdirs(fs, &dir)?;
        let (data, m) = text(&mut rng, size as usize, &spec.pattern, spec.match_fraction);
        matches += m;
        let f = create(fs, &format!("{dir}/f{i:05}.txt"))?;
        fs.pwrite(&f, &data, 0)?;
        fs.close(&f)?;
    }
    fs.sync()?;
    Ok(matches)
}

/// Files under `root`, depth-first in name order (path, size).
pub fn walk(fs: &Fs, root: &str) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_string()];
    while let Some(d) = stack.pop() {
        let h = fs.open(d.as_bytes(), libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        let mut ents = fs.readdir(&h)?;
        fs.close(&h)?;
        ents.reverse();
        for e in ents {
            let p = format!("{d}/{}", String::from_utf8_lossy(&e.name));
            if e.kind == libc::DT_DIR {
                stack.push(p);
            } else if e.kind == libc::DT_REG {
                let size = fs.stat(p.as_bytes(), false)?.size;
                out.push((p, size));
            }
        }
    }
    Ok(out)
}

/// What an application run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AppResult {
    pub seconds: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// grep: matching lines; tar: files extracted; bigsort: integers sorted.
    pub result: u64,
    pub checksum: u64,
}

/// grep: matching lines of every file under `root`, reading `chunk` bytes at a time.
pub fn grep(fs: &Fs, root: &str, pattern: &str, chunk: usize) -> Result<AppResult> {
    let t0 = Instant::now();
    let finder = memchr::memmem::Finder::new(pattern.as_bytes());
    let buf = IoBuf::new(fs, chunk)?;
    let mut r = AppResult::default();
    let mut carry: Vec<u8> = Vec::new();
    for (path, size) in walk(fs, root)? {
        let f = fs.open(path.as_bytes(), libc::O_RDONLY, 0)?;
        let mut off = 0;
        carry.clear();
        while off < size {
            let n = read_at(fs, &f, &buf, chunk, off)?;
            if n == 0 {
                break;
            }
            off += n as u64;
            r.bytes_read += n as u64;
            let data = buf.slice(n);
            // Whole lines of this chunk (with the partial line carried from the last one).
            let end = match memchr::memrchr(b'\n', data) {
                Some(i) => i + 1,
                None => 0,
            };
            let (head, tail) = data.split_at(end);
            if !carry.is_empty() {
                let first = memchr::memchr(b'\n', head).map_or(head.len(), |i| i + 1);
                carry.extend_from_slice(&head[..first]);
                r.result += count_lines(&finder, &carry);
                carry.clear();
                r.result += count_lines(&finder, &head[first..]);
            } else {
                r.result += count_lines(&finder, head);
            }
            carry.extend_from_slice(tail);
        }
        if !carry.is_empty() {
            r.result += count_lines(&finder, &carry);
        }
        fs.close(&f)?;
    }
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Lines of `data` (complete lines) containing the pattern.
fn count_lines(finder: &memchr::memmem::Finder, data: &[u8]) -> u64 {
    let mut n = 0;
    let mut at = 0;
    while let Some(i) = finder.find(&data[at..]) {
        n += 1;
        let hit = at + i;
        at = match memchr::memchr(b'\n', &data[hit..]) {
            Some(j) => hit + j + 1,
            None => data.len(),
        };
        if at >= data.len() {
            break;
        }
    }
    n
}

// ---- tar --------------------------------------------------------------------------------

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0width$o}", v, width = field.len() - 1);
    field[..s.len()].copy_from_slice(s.as_bytes());
    field[field.len() - 1] = 0;
}

fn ustar_header(name: &str, size: u64, typeflag: u8, mode: u32, mtime: i64) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.as_bytes();
    assert!(n.len() <= 100, "names up to 100 bytes (this tar writes no long-name records)");
    h[..n.len()].copy_from_slice(n);
    octal(&mut h[100..108], mode as u64 & 0o7777);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime.max(0) as u64);
    h[148..156].fill(b' ');
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// A pax extended header whose comment pads the member's data to a 4 KiB boundary: `at` is
/// where the pax header starts; returns (pax header, pax data) to write before the ustar one.
fn pax_pad(at: u64, name: &str) -> Vec<u8> {
    // Layout: pax header (512) + pax data (k x 512) + ustar header (512) + data.
    let base = at + 1024;
    debug_assert_eq!(base % 512, 0);
    let k = match (PAGE as u64 - base % PAGE as u64) % PAGE as u64 / 512 {
        0 => 8,
        k => k,
    };
    let data_len = (k * 512) as usize;
    // One record "LEN comment=xxx\n" filling the data block exactly (records are counted by
    // their length prefix, which includes itself).
    let mut body = Vec::new();
    for digits in 1..8 {
        let fill = data_len - digits - " comment=".len() - 1;
        let rec = format!("{} comment={}\n", data_len, "x".repeat(fill));
        if rec.len() == data_len {
            body = rec.into_bytes();
            break;
        }
    }
    assert_eq!(body.len(), data_len, "pax padding record");
    let mut out =
        ustar_header(&format!("PaxHeaders/{}", name.rsplit('/').next().unwrap_or(name)), data_len as u64, b'x', 0o644, 0).to_vec();
    out.extend_from_slice(&body);
    out
}

/// tar c: archive the files under `root` into `archive` (paths relative to `root`).
pub fn tar_create(fs: &Fs, root: &str, archive: &str, chunk: usize) -> Result<AppResult> {
    let t0 = Instant::now();
    let mut r = AppResult::default();
    let out = create(fs, archive)?;
    let buf = IoBuf::new(fs, chunk)?;
    let mut at: u64 = 0;
    for (path, size) in walk(fs, root)? {
        let rel = path.strip_prefix(root).unwrap_or(&path).trim_start_matches('/').to_string();
        let st = fs.stat(path.as_bytes(), false)?;
        let mut hdr = pax_pad(at, &rel);
        hdr.extend_from_slice(&ustar_header(&rel, size, b'0', st.mode, st.mtime.sec));
        fs.pwrite(&out, &hdr, at)?;
        at += hdr.len() as u64;
        debug_assert_eq!(at % PAGE as u64, 0);
        let f = fs.open(path.as_bytes(), libc::O_RDONLY, 0)?;
        let mut off = 0;
        while off < size {
            let n = read_at(fs, &f, &buf, chunk.min((size - off) as usize), off)?;
            write_at(fs, &out, &buf, n, at + off)?;
            r.bytes_read += n as u64;
            r.bytes_written += n as u64;
            off += n as u64;
        }
        fs.close(&f)?;
        at += size.next_multiple_of(512);
        r.result += 1;
    }
    // End of archive: two zero blocks; the size a multiple of the 10 KiB record.
    let end = (at + 1024).next_multiple_of(10240);
    fs.ftruncate(&out, end)?;
    fs.close(&out)?;
    fs.sync()?;
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// tar x: extract `archive` (as written by [`tar_create`] or GNU tar, regular files and
/// directories) under `dest`.
pub fn tar_extract(fs: &Fs, archive: &str, dest: &str, chunk: usize) -> Result<AppResult> {
    let t0 = Instant::now();
    let mut r = AppResult::default();
    mkdirs(fs, dest)?;
    let a = fs.open(archive.as_bytes(), libc::O_RDONLY, 0)?;
    let size = fs.fstat(&a).size;
    let buf = IoBuf::new(fs, chunk)?;
    let mut at = 0u64;
    let mut hdr = [0u8; 512];
    while at + 512 <= size {
        fs.pread(&a, &mut hdr, at)?;
        if hdr.iter().all(|&b| b == 0) {
            break;
        }
        let field = |a: usize, b: usize| -> u64 {
            let s = std::str::from_utf8(&hdr[a..b]).unwrap_or("").trim_matches(|c: char| c == '\0' || c == ' ');
            u64::from_str_radix(s, 8).unwrap_or(0)
        };
        let len = field(124, 136);
        let typ = hdr[156];
        let name_end = hdr[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8_lossy(&hdr[..name_end]).into_owned();
        at += 512;
        match typ {
            b'x' | b'g' => {}
            b'5' => mkdirs(fs, &format!("{dest}/{}", name.trim_end_matches('/')))?,
            b'0' | 0 => {
                let path = format!("{dest}/{name}");
                if let Some(parent) = path.rsplit_once('/').map(|p| p.0) {
                    mkdirs(fs, parent)?;
                }
                let f = create(fs, &path)?;
                let mut off = 0;
                while off < len {
                    let n = read_at(fs, &a, &buf, chunk.min((len - off) as usize), at + off)?;
                    write_at(fs, &f, &buf, n, off)?;
                    r.bytes_read += n as u64;
                    r.bytes_written += n as u64;
                    off += n as u64;
                }
                fs.setattr(&f, &crate::fs::SetAttr { mode: Some(field(100, 108) as u32), ..Default::default() })?;
                fs.close(&f)?;
                r.result += 1;
            }
            other => {
                return Err(FlacError::Invalid(format!(
                    "{archive}: member {name:?} has type {:?}, this tar extracts files and directories",
                    other as char
                )))
            }
        }
        at += len.next_multiple_of(512);
    }
    fs.close(&a)?;
    fs.sync()?;
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// FNV-1a over every file's path and bytes under `root` (to check an extraction).
pub fn tree_checksum(fs: &Fs, root: &str) -> Result<u64> {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut mix = |b: &[u8]| {
        for &x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    };
    let mut buf = vec![0u8; 1 << 20];
    for (path, size) in walk(fs, root)? {
        mix(path.strip_prefix(root).unwrap_or(&path).as_bytes());
        let f = fs.open(path.as_bytes(), libc::O_RDONLY, 0)?;
        let mut off = 0;
        while off < size {
            let n = fs.pread(&f, &mut buf, off)?;
            mix(&buf[..n]);
            off += n as u64;
        }
        fs.close(&f)?;
    }
    Ok(h)
}

// ---- bigsort ----------------------------------------------------------------------------

/// Write `n` random u32 (little-endian) to `path`.
pub fn make_ints(fs: &Fs, path: &str, n: u64, seed: u64) -> Result<()> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let f = create(fs, path)?;
    let chunk = 1 << 20;
    let mut v = vec![0u8; chunk * 4];
    let mut done = 0;
    while done < n {
        let k = (n - done).min(chunk as u64) as usize;
        for i in 0..k {
            v[i * 4..i * 4 + 4].copy_from_slice(&rng.gen::<u32>().to_le_bytes());
        }
        fs.pwrite(&f, &v[..k * 4], done * 4)?;
        done += k as u64;
    }
    fs.close(&f)?;
    fs.sync()
}

/// LSD radix sort of `src` into `dst` (out of place: `src` is only read), using `tmp`.
fn radix_sort(src: &[u32], tmp: &mut [u32], dst: &mut [u32]) {
    let n = src.len();
    assert!(tmp.len() >= n && dst.len() >= n);
    let mut counts = [[0usize; 256]; 4];
    for &v in src {
        for (p, c) in counts.iter_mut().enumerate() {
            c[(v >> (8 * p)) as usize & 255] += 1;
        }
    }
    for c in counts.iter_mut() {
        let mut sum = 0;
        for x in c.iter_mut() {
            let t = *x;
            *x = sum;
            sum += t;
        }
    }
    // Passes: src -> dst -> tmp -> dst -> tmp ... ending in dst after 4 passes.
    let scatter = |from: &[u32], to: &mut [u32], c: &mut [usize; 256], shift: u32| {
        for &v in from {
            let b = (v >> shift) as usize & 255;
            to[c[b]] = v;
            c[b] += 1;
        }
    };
    let [mut c0, mut c1, mut c2, mut c3] = counts;
    scatter(src, &mut tmp[..n], &mut c0, 0);
    scatter(&tmp[..n], &mut dst[..n], &mut c1, 8);
    scatter(&dst[..n], &mut tmp[..n], &mut c2, 16);
    scatter(&tmp[..n], &mut dst[..n], &mut c3, 24);
}

fn as_u32(buf: &IoBuf, n: usize) -> &[u32] {
    // SAFETY: page-aligned memory, n u32 within its length.
    unsafe { std::slice::from_raw_parts(buf.ptr() as *const u32, n) }
}

#[allow(clippy::mut_from_ref)]
fn as_u32_mut(buf: &IoBuf, n: usize) -> &mut [u32] {
    // SAFETY: as above; the caller does not alias it.
    unsafe { std::slice::from_raw_parts_mut(buf.ptr() as *mut u32, n) }
}

/// bigsort: sort the u32s of `input` into `output`, runs of `run_ints` under `tmpdir`.
pub fn bigsort(fs: &Fs, input: &str, output: &str, tmpdir: &str, run_ints: usize, chunk: usize) -> Result<AppResult> {
    let t0 = Instant::now();
    let mut r = AppResult::default();
    mkdirs(fs, tmpdir)?;
    let inp = fs.open(input.as_bytes(), libc::O_RDONLY, 0)?;
    let total = fs.fstat(&inp).size / 4;
    let tmp = IoBuf::new(fs, run_ints * 4)?;
    let mut runs: Vec<(String, u64)> = Vec::new();
    let mut done = 0u64;
    while done < total {
        let k = (total - done).min(run_ints as u64) as usize;
        let src = IoBuf::new(fs, k * 4)?;
        let n = read_at(fs, &inp, &src, k * 4, done * 4)?;
        assert_eq!(n, k * 4);
        r.bytes_read += n as u64;
        // A fresh output buffer per run: written once, then attached to the run file.
        let dst = IoBuf::new(fs, k * 4)?;
        radix_sort(as_u32(&src, k), as_u32_mut(&tmp, k), as_u32_mut(&dst, k));
        let path = format!("{tmpdir}/run{:04}", runs.len());
        let f = create(fs, &path)?;
        write_at(fs, &f, &dst, k * 4, 0)?;
        r.bytes_written += (k * 4) as u64;
        fs.close(&f)?;
        runs.push((path, k as u64));
        done += k as u64;
    }
    fs.close(&inp)?;
    // k-way merge: a chunk of each run in memory, output written a chunk at a time.
    let per = (chunk / 4).max(1024);
    let out = create(fs, output)?;
    struct Run {
        f: Arc<File>,
        len: u64,
        next: u64,
        buf: IoBuf,
        have: usize,
        at: usize,
    }
    let mut rs: Vec<Run> = Vec::new();
    for (p, len) in &runs {
        rs.push(Run { f: fs.open(p.as_bytes(), libc::O_RDONLY, 0)?, len: *len, next: 0, buf: IoBuf::new(fs, per * 4)?, have: 0, at: 0 });
    }
    let refill = |fs: &Fs, run: &mut Run, r: &mut AppResult| -> Result<()> {
        let k = (run.len - run.next).min(per as u64) as usize;
        if k > 0 {
            read_at(fs, &run.f, &run.buf, k * 4, run.next * 4)?;
            r.bytes_read += (k * 4) as u64;
        }
        run.next += k as u64;
        run.have = k;
        run.at = 0;
        Ok(())
    };
    for run in rs.iter_mut() {
        refill(fs, run, &mut r)?;
    }
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u32, usize)>> = rs
        .iter()
        .enumerate()
        .filter(|(_, run)| run.have > 0)
        .map(|(i, run)| std::cmp::Reverse((as_u32(&run.buf, run.have)[0], i)))
        .collect();
    let mut written = 0u64;
    let mut obuf = IoBuf::new(fs, per * 4)?;
    let mut fill = 0usize;
    let mut prev = 0u32;
    let mut sum: u64 = 0;
    while let Some(std::cmp::Reverse((v, i))) = heap.pop() {
        debug_assert!(v >= prev);
        prev = v;
        sum = sum.wrapping_add(v as u64);
        as_u32_mut(&obuf, per)[fill] = v;
        fill += 1;
        if fill == per {
            write_at(fs, &out, &obuf, fill * 4, written * 4)?;
            written += fill as u64;
            r.bytes_written += (fill * 4) as u64;
            fill = 0;
            // The written buffer's pages now belong to the file: take fresh ones.
            obuf = IoBuf::new(fs, per * 4)?;
        }
        let run = &mut rs[i];
        run.at += 1;
        if run.at == run.have {
            refill(fs, run, &mut r)?;
        }
        if run.at < run.have {
            heap.push(std::cmp::Reverse((as_u32(&run.buf, run.have)[run.at], i)));
        }
    }
    if fill > 0 {
        write_at(fs, &out, &obuf, fill * 4, written * 4)?;
        written += fill as u64;
        r.bytes_written += (fill * 4) as u64;
    }
    for run in rs {
        fs.close(&run.f)?;
    }
    for (p, _) in &runs {
        fs.remove(p.as_bytes(), false)?;
    }
    fs.close(&out)?;
    fs.sync()?;
    assert_eq!(written, total);
    r.result = total;
    r.checksum = sum;
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Whether `path` holds sorted u32s; returns (count, sum).
pub fn check_sorted(fs: &Fs, path: &str) -> Result<(u64, u64)> {
    let f = fs.open(path.as_bytes(), libc::O_RDONLY, 0)?;
    let size = fs.fstat(&f).size;
    let mut buf = vec![0u8; 1 << 22];
    let (mut off, mut prev, mut sum) = (0u64, 0u32, 0u64);
    while off < size {
        let n = fs.pread(&f, &mut buf, off)?;
        for c in buf[..n].chunks_exact(4) {
            let v = u32::from_le_bytes(c.try_into().unwrap());
            if v < prev {
                return Err(FlacError::Invalid(format!("{path}: not sorted at integer {}", off / 4)));
            }
            prev = v;
            sum = sum.wrapping_add(v as u64);
        }
        off += n as u64;
    }
    fs.close(&f)?;
    Ok((size / 4, sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sorts_and_pax_pads() {
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let src: Vec<u32> = (0..10_000).map(|_| rng.gen()).collect();
        let mut tmp = vec![0; src.len()];
        let mut dst = vec![0; src.len()];
        radix_sort(&src, &mut tmp, &mut dst);
        let mut want = src.clone();
        want.sort();
        assert_eq!(dst, want);
        for at in [0u64, 512, 4096 + 1536, 8192 + 3584] {
            let p = pax_pad(at, "x");
            assert_eq!((at + p.len() as u64 + 512) % PAGE as u64, 0, "data of a member starting at {at} is page-aligned");
        }
        let data = b"a persistent b\nno\npersistent persistent\nx";
        assert_eq!(count_matching_lines(data, b"persistent"), 2);
        assert_eq!(count_lines(&memchr::memmem::Finder::new("persistent"), data), 2);
    }
}
