//! Any swap backend (the RMML, the Infiniswap-like and ZNSwap-like baselines) as a disk of
//! ssdlab's NBD server, so real block clients use it: qemu-io, fio's nbd engine, nbdcopy, the
//! kernel's nbd client (a swap partition of the host or a guest). `ssdlab rmml serve`.
//!
//! NBD requests come at any byte alignment; the backends take whole 4 KiB pages. A request
//! covering part of a page reads that page first and writes it whole (counted in
//! `partial_page_requests`). Modelled time follows the wall clock: a command is issued at the
//! time elapsed since the server started (never earlier than the previous one), and its
//! completion is the backend's modelled completion, which the server waits for in `emulated`
//! latency mode. Nothing persists: like a swap device, the contents live in the backend
//! (remote memory nodes, the emulated ZNS SSD) and are gone when the server stops.

use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use ssdlab_core::metrics::latency_summary;
use ssdlab_nbd::{BackendError, Disk, DiskResult};

use ssdlab_rmml::device::{SwapDevice, PAGE_BYTES};

/// Largest piece a zero-write is cut into (bytes).
const ZERO_CHUNK: u64 = 1 << 20;

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Trim,
    Zeroes,
    Flush,
}

const KINDS: [(&str, Kind); 5] =
    [("read", Kind::Read), ("write", Kind::Write), ("trim", Kind::Trim), ("write_zeroes", Kind::Zeroes), ("flush", Kind::Flush)];

/// A swap backend served as a disk.
pub struct SwapDisk {
    dev: Box<dyn SwapDevice>,
    started: Instant,
    /// Issue time of the latest command (modelled ns).
    last_ns: u64,
    /// Modelled latency of each command kind (ns), in [`KINDS`] order.
    lat: Vec<Histogram<u64>>,
    bytes: [u64; 5],
    partial_page_requests: u64,
    errors: u64,
    /// The latest backend error's message (a lost node, remote memory full...).
    last_error: Option<String>,
}

fn err(e: ssdlab_rmml::Error) -> BackendError {
    BackendError::msg(e.to_string())
}

impl SwapDisk {
    pub fn new(dev: Box<dyn SwapDevice>) -> SwapDisk {
        let hist = ssdlab_core::metrics::latency_histogram;
        SwapDisk {
            dev,
            started: Instant::now(),
            last_ns: 0,
            lat: KINDS.iter().map(|_| hist()).collect(),
            bytes: [0; 5],
            partial_page_requests: 0,
            errors: 0,
            last_error: None,
        }
    }

    pub fn kind(&self) -> &'static str {
        self.dev.kind()
    }

    /// The modelled time of a command issued now.
    fn now(&mut self) -> u64 {
        self.last_ns = self.last_ns.max(self.started.elapsed().as_nanos() as u64);
        self.last_ns
    }

    fn account(&mut self, k: Kind, t: u64, res: ssdlab_rmml::Result<u64>, bytes: u64) -> DiskResult<u64> {
        match res {
            Ok(done) => {
                self.lat[k as usize].saturating_record(done.saturating_sub(t).max(1));
                self.bytes[k as usize] += bytes;
                Ok(done)
            }
            Err(e) => {
                self.errors += 1;
                let e = err(e);
                self.last_error = Some(e.0.clone());
                Err(e)
            }
        }
    }

    /// The whole pages covering `offset..offset + len`.
    fn covering(offset: u64, len: u64) -> (u64, u64) {
        let a = offset / PAGE_BYTES * PAGE_BYTES;
        (a, (offset + len).div_ceil(PAGE_BYTES) * PAGE_BYTES - a)
    }

    /// The whole pages inside `offset..offset + len`, if any.
    fn inside(offset: u64, len: u64) -> Option<(u64, u64)> {
        let a = offset.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let b = (offset + len) / PAGE_BYTES * PAGE_BYTES;
        (b > a).then(|| (a, b - a))
    }

    /// Write `data` at `offset` from time `t`, reading the partial pages at its edges first.
    fn write_at(&mut self, offset: u64, data: &[u8], t: u64) -> ssdlab_rmml::Result<u64> {
        let (a, n) = Self::covering(offset, data.len() as u64);
        if a == offset && n == data.len() as u64 {
            return self.dev.write(offset, data, t);
        }
        self.partial_page_requests += 1;
        let mut buf = vec![0u8; n as usize];
        let mut ready = t;
        // Only the first and last pages can be partial; the others are overwritten whole.
        let last = a + n - PAGE_BYTES;
        let head = offset != a;
        let end_aligned = (offset + data.len() as u64).is_multiple_of(PAGE_BYTES);
        // A single partial page read as the head needs no second read.
        let tail = !(end_aligned || head && last == a);
        if head {
            ready = ready.max(self.dev.read(a, &mut buf[..PAGE_BYTES as usize], t)?);
        }
        if tail {
            let at = (last - a) as usize;
            ready = ready.max(self.dev.read(last, &mut buf[at..], t)?);
        }
        let at = (offset - a) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        self.dev.write(a, &buf, ready)
    }

    fn zeroes_at(&mut self, offset: u64, len: u64, t: u64) -> ssdlab_rmml::Result<u64> {
        let zeros = vec![0u8; ZERO_CHUNK.min(len) as usize];
        let (mut pos, end, mut done) = (offset, offset + len, t);
        while pos < end {
            // Chunks end on page boundaries so that only the range's own edges are partial.
            let next = ((pos / ZERO_CHUNK + 1) * ZERO_CHUNK).min(end);
            done = done.max(self.write_at(pos, &zeros[..(next - pos) as usize], t)?);
            pos = next;
        }
        Ok(done)
    }

    fn durable(&mut self, fua: bool, done: u64) -> ssdlab_rmml::Result<u64> {
        if fua {
            Ok(done.max(self.dev.flush(done)?))
        } else {
            Ok(done)
        }
    }
}

impl Disk for SwapDisk {
    fn logical_bytes(&self) -> u64 {
        self.dev.capacity_bytes()
    }

    fn read(&mut self, offset: u64, out: &mut [u8]) -> DiskResult<u64> {
        let t = self.now();
        let (a, n) = Self::covering(offset, out.len() as u64);
        let res = if a == offset && n == out.len() as u64 {
            self.dev.read(offset, out, t)
        } else {
            self.partial_page_requests += 1;
            let mut buf = vec![0u8; n as usize];
            self.dev.read(a, &mut buf, t).inspect(|_| {
                let at = (offset - a) as usize;
                out.copy_from_slice(&buf[at..at + out.len()]);
            })
        };
        self.account(Kind::Read, t, res, out.len() as u64)
    }

    fn write(&mut self, offset: u64, data: &[u8], fua: bool, _placement: Option<u16>) -> DiskResult<u64> {
        let t = self.now();
        let res = self.write_at(offset, data, t).and_then(|d| self.durable(fua, d));
        self.account(Kind::Write, t, res, data.len() as u64)
    }

    /// The whole pages inside the range are discarded (backends free them; some read them back
    /// as zeros, see [`SwapDevice::discard_zeroes`]); partial pages at its edges are left as
    /// they are, which NBD allows.
    fn trim(&mut self, offset: u64, len: u64, fua: bool) -> DiskResult<u64> {
        let t = self.now();
        let res = match Self::inside(offset, len) {
            Some((a, n)) => self.dev.discard(a, n, t),
            None => Ok(t),
        }
        .and_then(|d| self.durable(fua, d));
        self.account(Kind::Trim, t, res, len)
    }

    /// Whole pages are discarded where the backend reads discarded pages as zeros, unless
    /// `no_hole`; otherwise (and at partial edge pages) zeros are written.
    fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool, fua: bool, _placement: Option<u16>) -> DiskResult<u64> {
        let t = self.now();
        let res = (|| {
            if no_hole || !self.dev.discard_zeroes() {
                return self.zeroes_at(offset, len, t);
            }
            let Some((a, n)) = Self::inside(offset, len) else { return self.zeroes_at(offset, len, t) };
            let mut done = self.dev.discard(a, n, t)?;
            for (o, l) in [(offset, a - offset), (a + n, offset + len - (a + n))] {
                if l > 0 {
                    done = done.max(self.zeroes_at(o, l, t)?);
                }
            }
            Ok(done)
        })()
        .and_then(|d| self.durable(fua, d));
        self.account(Kind::Zeroes, t, res, len)
    }

    fn flush(&mut self) -> DiskResult<u64> {
        let t = self.now();
        let res = self.dev.flush(t);
        self.account(Kind::Flush, t, res, 0)
    }

    fn metrics(&mut self) -> Value {
        let t = self.now();
        let mut lat = serde_json::Map::new();
        for (i, (name, _)) in KINDS.iter().enumerate() {
            let mut figures = latency_summary(&self.lat[i], &ssdlab_rmml::LATENCY);
            figures.insert("bytes".into(), json!(self.bytes[i]));
            lat.insert((*name).into(), Value::Object(figures));
        }
        json!({
            "backend": self.dev.kind(),
            "capacity_bytes": self.dev.capacity_bytes(),
            "modelled_time_ns": t,
            "latency_ns": lat,
            "partial_page_requests": self.partial_page_requests,
            "backend_errors": self.errors,
            "last_backend_error": self.last_error,
            "device": self.dev.stats(),
        })
    }

    fn wall_of(&self, t_ns: u64) -> Instant {
        self.started + std::time::Duration::from_nanos(t_ns)
    }

    fn describe(&self) -> String {
        format!("{} swap backend, modelled time from the server's start; contents not persistent", self.dev.kind())
    }
}
