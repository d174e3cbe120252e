//! The cache's view of the device: byte-addressed reads and placed writes through
//! ssdlab-core's `Device`, with device-side latency histograms. Simulation runs use the
//! metadata-only commands (`read`, `write`: no data buffers); a data-backed cache (the
//! memcached front-end) moves real bytes with `read_into` and `write_data`.
//!
//! Time: every request carries its arrival time; its device commands are submitted at that
//! time (an open-loop host with enough threads that requests never wait for each other), so
//! a command's latency is the device's queueing and media time, garbage collection included.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use ssdlab_core::metrics::latency_histogram;
use ssdlab_core::Device;

use crate::error::{CacheError, Result};
use crate::placement::PlacementHandle;

fn trace_err(path: &Path, e: std::io::Error) -> CacheError {
    CacheError::Input(format!("device trace {}: {e}", path.display()))
}

#[derive(Serialize, Deserialize)]
pub struct Flash {
    pub dev: Device,
    /// Submission time of the current request's commands.
    pub now_ns: u64,
    #[serde(with = "hist_serde")]
    pub read_ns: Histogram<u64>,
    #[serde(with = "hist_serde")]
    pub write_ns: Histogram<u64>,
    /// Latest completion seen (for throughput in simulated time).
    pub last_done_ns: u64,
    /// Where every command goes as a trace line, if asked (`record_to`; not in checkpoints,
    /// which refuse a run that records one).
    #[serde(skip)]
    trace: Option<(BufWriter<File>, PathBuf)>,
}

/// A latency histogram in a checkpoint: hdrhistogram's own V2 encoding (every count, exactly).
pub(crate) mod hist_serde {
    use hdrhistogram::serialization::{Deserializer as HistDe, Serializer as _, V2Serializer};
    use hdrhistogram::Histogram;
    use serde::{de::Error as _, ser::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = Vec::new();
        V2Serializer::new().serialize(h, &mut buf).map_err(|e| S::Error::custom(format!("histogram: {e:?}")))?;
        s.serialize_bytes(&buf)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let buf = Vec::<u8>::deserialize(d)?;
        HistDe::new().deserialize(&mut &buf[..]).map_err(|e| D::Error::custom(format!("histogram: {e:?}")))
    }
}

impl Flash {
    pub fn new(dev: Device) -> Flash {
        Flash { dev, now_ns: 0, read_ns: latency_histogram(), write_ns: latency_histogram(), last_done_ns: 0, trace: None }
    }

    /// From now on, write every device command to `path` as a line of an MSR Cambridge trace
    /// (`Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`: submission time and
    /// the device's response time in 100 ns ticks, offset and size in bytes), which `ssdlab
    /// replay --format msr` reads back. Placement handles are not in the format.
    pub fn record_to(&mut self, path: &Path) -> Result<()> {
        let f = File::create(path).map_err(|e| trace_err(path, e))?;
        self.trace = Some((BufWriter::with_capacity(1 << 20, f), path.to_path_buf()));
        Ok(())
    }

    /// Flush the trace being recorded, if any, and stop recording.
    pub fn finish_trace(&mut self) -> Result<()> {
        if let Some((mut w, path)) = self.trace.take() {
            w.flush().map_err(|e| trace_err(&path, e))?;
        }
        Ok(())
    }

    /// A command submitted now completed at `done`: its latency goes to the read or write
    /// histogram, and its line to the trace being recorded.
    #[inline]
    fn complete(&mut self, write: bool, offset: u64, len: u64, done: u64) -> Result<()> {
        let at = self.dev.now_ns();
        let lat = done.saturating_sub(at);
        if let Some((w, path)) = &mut self.trace {
            let op = if write { "Write" } else { "Read" };
            writeln!(w, "{},ssdlab,0,{op},{offset},{len},{}", at / 100, lat / 100).map_err(|e| trace_err(path, e))?;
        }
        if write { &mut self.write_ns } else { &mut self.read_ns }.saturating_record(lat.max(1));
        self.last_done_ns = self.last_done_ns.max(done);
        Ok(())
    }

    /// A request arrives at `t_ns`: the device clock moves there and idle dies get a chance
    /// to collect garbage in the background first (as on a real SSD between commands).
    pub fn set_time(&mut self, t_ns: u64) {
        if t_ns > self.now_ns {
            self.now_ns = t_ns;
            self.dev.advance_to(t_ns);
            self.dev.idle();
        }
    }

    #[inline]
    pub fn read(&mut self, offset: u64, len: u64) -> Result<()> {
        let done = self.dev.read_len(offset, len)?;
        self.complete(false, offset, len, done)
    }

    #[inline]
    pub fn write(&mut self, offset: u64, len: u64, h: PlacementHandle) -> Result<()> {
        let done = self.dev.write_placed_len(offset, len, false, h.pid)?;
        self.complete(true, offset, len, done)
    }

    /// Read `out.len()` bytes at `offset` (a data-backed device).
    pub fn read_into(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let done = self.dev.read(offset, out)?;
        self.complete(false, offset, out.len() as u64, done)
    }

    /// Write `data` at `offset` with placement handle `h` (a data-backed device).
    pub fn write_data(&mut self, offset: u64, data: &[u8], h: PlacementHandle) -> Result<()> {
        let done = self.dev.write_placed(offset, data, false, h.pid)?;
        self.complete(true, offset, data.len() as u64, done)
    }

    pub fn reset_histograms(&mut self) {
        self.read_ns.reset();
        self.write_ns.reset();
    }
}
