//! A configured device: format, precondition, run workloads, measure, snapshot and restore.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Personality;
use crate::config::{Arrival, Config, Pattern, StopRule, WorkloadConfig};
use crate::driver::{self, Ending, Limits, Loop};
use crate::error::{Error, Result};
use crate::ftl::conventional::Conventional;
use crate::ftl::hostlog::HostLog;
use crate::ftl::ocssd::Ocssd;
use crate::ftl::zns::Zns;
use crate::ftl::{BlockDevice, WriteOpts};
use crate::metrics::{Recorder, Steady};
use crate::workload::{Mix, Source, Synthetic};

const SNAPSHOT_MAGIC: &[u8; 8] = b"SSDLABSN";
const SNAPSHOT_VERSION: u32 = 6;

/// Progress callback: (phase, fraction done) -> keep going?
pub type Progress<'a> = &'a mut dyn FnMut(&str, f64) -> bool;

/// Results of one measured run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub metrics: Value,
    pub series_csv: String,
    pub ending: Ending,
}

impl RunReport {
    /// Write `metrics.json` and `timeseries.csv` into `dir` (created if needed).
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut text = serde_json::to_string_pretty(&self.metrics).expect("metrics serialise");
        text.push('\n');
        std::fs::write(dir.join("metrics.json"), text)?;
        std::fs::write(dir.join("timeseries.csv"), &self.series_csv)?;
        Ok(())
    }
    pub fn dlwa(&self) -> f64 {
        self.metrics["dlwa"].as_f64().unwrap_or(0.0)
    }
}

/// The personality behind a device.
#[derive(Clone, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // one per device, never in arrays
pub enum Personal {
    Conventional(Conventional),
    /// A ZNS device inside the host log that runs ordinary workloads on it.
    Zns(HostLog<Zns>),
    /// An open-channel device inside the host log that runs ordinary workloads on it; host
    /// FTLs of their own drive the device itself (case studies, the vector API).
    Ocssd(HostLog<Ocssd>),
}

/// An emulated SSD.
#[derive(Clone, Serialize, Deserialize)]
pub struct Device {
    cfg: Config,
    dev: Personal,
    now_ns: u64,
}

impl Device {
    /// Format a device. The config must be valid (`Config::validate`).
    pub fn new(cfg: Config) -> Result<Device> {
        // The checks building runs, and the memory it will take, before allocating anything.
        crate::sizing::ensure_memory(&crate::sizing::sizing(&cfg)?)?;
        let dev = match cfg.personality {
            Personality::Conventional => Personal::Conventional(Conventional::new(&cfg)?),
            Personality::Zns => {
                let z = Zns::new(&cfg)?;
                let streams = z.max_open().min(4) as usize;
                Personal::Zns(HostLog::new(z, streams))
            }
            Personality::Ocssd => Personal::Ocssd(HostLog::new(Ocssd::new(&cfg)?, 1)),
        };
        let d = Device { cfg, dev, now_ns: 0 };
        assert_eq!(d.block_device().mapped_sectors(), 0, "a freshly formatted device maps nothing");
        Ok(d)
    }

    /// The device as workloads see it (for ZNS and open-channel: through the host log).
    fn bd(&mut self) -> &mut dyn BlockDevice {
        match &mut self.dev {
            Personal::Conventional(c) => c,
            Personal::Zns(log) => log,
            Personal::Ocssd(log) => log,
        }
    }

    /// Assert every invariant of the device and of the host log in front of it (slow: O(device)).
    fn check_invariants(&self) {
        match &self.dev {
            Personal::Conventional(c) => c.check_invariants(),
            Personal::Zns(log) => log.check_invariants(),
            Personal::Ocssd(log) => log.check_invariants(),
        }
    }

    /// The personality itself (host commands go here; for ZNS, raw zone writes).
    fn raw(&mut self) -> &mut dyn BlockDevice {
        match &mut self.dev {
            Personal::Conventional(c) => c,
            Personal::Zns(log) => &mut log.dev,
            Personal::Ocssd(log) => &mut log.dev,
        }
    }

    /// Read-only view of the personality's shared interface.
    pub fn block_device(&self) -> &dyn BlockDevice {
        match &self.dev {
            Personal::Conventional(c) => c,
            Personal::Zns(log) => &log.dev,
            Personal::Ocssd(log) => &log.dev,
        }
    }

    /// The open-channel device, if this is one.
    pub fn ocssd_mut(&mut self) -> Option<&mut Ocssd> {
        match &mut self.dev {
            Personal::Ocssd(log) => Some(&mut log.dev),
            _ => None,
        }
    }

    /// The ZNS device, if this is one.
    pub fn zns(&self) -> Option<&Zns> {
        match &self.dev {
            Personal::Zns(log) => Some(&log.dev),
            _ => None,
        }
    }
    pub fn zns_mut(&mut self) -> Option<&mut Zns> {
        match &mut self.dev {
            Personal::Zns(log) => Some(&mut log.dev),
            _ => None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// The conventional FTL. Panics on other personalities (see [`Device::block_device`]).
    pub fn ftl(&self) -> &Conventional {
        match &self.dev {
            Personal::Conventional(c) => c,
            _ => panic!("ftl(): this device's personality is {:?}", self.cfg.personality),
        }
    }
    pub fn ftl_mut(&mut self) -> &mut Conventional {
        match &mut self.dev {
            Personal::Conventional(c) => c,
            _ => panic!("ftl_mut(): this device's personality is {:?}", self.cfg.personality),
        }
    }
    /// Simulated time reached so far (ns).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    pub fn logical_bytes(&self) -> u64 {
        self.block_device().logical_sectors() * self.cfg.geometry.sector_bytes as u64
    }

    /// Bring the device to the state `[precondition]` asks for (not measured).
    pub fn precondition(&mut self, progress: Progress) -> Result<Ending> {
        let p = self.cfg.precondition.clone();
        let logical = self.logical_bytes();
        let sector = self.cfg.geometry.sector_bytes as u64;
        if p.sequential_fill {
            let unit = (self.cfg.geometry.page_bytes as u64 * self.cfg.geometry.planes_per_die as u64).max(sector);
            let chunk = (128 * 1024 / unit).max(1) * unit;
            let chunk = if logical.is_multiple_of(chunk) { chunk } else { sector };
            let w =
                WorkloadConfig { pattern: Pattern::Sequential, block_bytes: vec![chunk], block_weights: vec![1.0], ..Default::default() };
            let e = self.drive(&w, Limits { host_write_bytes: logical, ..Default::default() }, None, "fill", progress)?.1;
            if e == Ending::Interrupted {
                return Ok(e);
            }
            if let Personal::Conventional(c) = &self.dev {
                debug_assert_eq!(c.mapped_sectors(), c.logical_sectors(), "a sequential fill maps every sector");
            }
        }
        if p.random_device_writes > 0.0 {
            let w = WorkloadConfig { pattern: Pattern::Uniform, block_bytes: vec![sector], block_weights: vec![1.0], ..Default::default() };
            let bytes = (p.random_device_writes * logical as f64) as u64;
            let e = self.drive(&w, Limits { host_write_bytes: bytes, ..Default::default() }, None, "precondition", progress)?.1;
            if e == Ending::Interrupted {
                return Ok(e);
            }
        }
        self.flush()?;
        Ok(Ending::Limit)
    }

    /// Run the config's own `[workload]` (after `[precondition]`), measured.
    pub fn run_configured(&mut self, progress: Progress) -> Result<RunReport> {
        if self.precondition(progress)? == Ending::Interrupted {
            let mut rec = self.recorder(0);
            let metrics = rec.finish(self.block_device(), &self.cfg, true);
            return Ok(RunReport { metrics, series_csv: rec.series_csv(), ending: Ending::Interrupted });
        }
        let w = self.cfg.workload.clone();
        if w.mix.is_empty() {
            self.run(&w, progress)
        } else {
            let parts = w.mix_parts()?;
            self.run_mix(&parts, &w, progress)
        }
    }

    /// Run a synthetic workload, measured from its first command.
    pub fn run(&mut self, w: &WorkloadConfig, progress: Progress) -> Result<RunReport> {
        let limits = self.limits(w);
        let (rep, _) = self.drive(w, limits, Some(w), "run", progress)?;
        Ok(rep.expect("measured run"))
    }

    fn limits(&self, w: &WorkloadConfig) -> Limits {
        let mut hw = w.stop_host_write_bytes;
        if w.stop_device_writes > 0.0 {
            let b = (w.stop_device_writes * self.logical_bytes() as f64) as u64;
            hw = if hw == 0 { b } else { hw.min(b) };
        }
        Limits { ops: w.stop_ops, host_write_bytes: hw, sim_ns: w.stop_sim_ns }
    }

    fn recorder(&self, planned_bytes: u64) -> Recorder {
        let m = &self.cfg.metrics;
        let mut bytes = m.series_interval_host_bytes;
        if bytes == 0 && !self.cfg.timing.enabled {
            let planned = if planned_bytes > 0 { planned_bytes } else { self.logical_bytes() };
            bytes = (planned / 50).max(1);
        }
        Recorder::new(self.block_device(), self.now_ns, m.series_interval_ns, bytes)
    }

    fn drive(
        &mut self,
        w: &WorkloadConfig,
        limits: Limits,
        measured: Option<&WorkloadConfig>,
        phase: &str,
        progress: Progress,
    ) -> Result<(Option<RunReport>, Ending)> {
        let sector = self.cfg.geometry.sector_bytes;
        let seed = self.cfg.seed.wrapping_add(phase.len() as u64 * 0x9E37_79B9);
        let mut src = Synthetic::new(w, self.block_device().logical_sectors(), sector, seed)?;
        let lp = if w.rate_iops > 0.0 {
            Loop::Rate { iops: w.rate_iops, poisson: w.arrival == Arrival::Poisson }
        } else {
            Loop::Closed { depth: w.queue_depth }
        };
        self.drive_source(&mut src, lp, limits, measured, phase, progress)
    }

    /// Run several synthetic workloads interleaved by weight (each may carry its own placement
    /// identifier), measured; `stop` gives the stop conditions and the queue depth or rate.
    pub fn run_mix(&mut self, parts: &[(WorkloadConfig, f64)], stop: &WorkloadConfig, progress: Progress) -> Result<RunReport> {
        let sector = self.cfg.geometry.sector_bytes;
        let mut gens = vec![];
        for (i, (w, weight)) in parts.iter().enumerate() {
            let mut c = self.cfg.clone();
            c.workload = w.clone();
            c.workload.stop_device_writes = 1.0; // stop conditions come from `stop`
            c.validate().map_err(|e| match e {
                Error::Config(mut ce) => {
                    ce.key = Some(format!("mix[{i}].{}", ce.key.unwrap_or_default()));
                    Error::Config(ce)
                }
                other => other,
            })?;
            gens.push((
                Synthetic::new(w, self.block_device().logical_sectors(), sector, self.cfg.seed.wrapping_add(7919 * (i as u64 + 1)))?,
                *weight,
            ));
        }
        let mut src = Mix::new(gens, self.cfg.seed, stop.mix_order)?;
        let lp = if stop.rate_iops > 0.0 {
            Loop::Rate { iops: stop.rate_iops, poisson: stop.arrival == Arrival::Poisson }
        } else {
            Loop::Closed { depth: stop.queue_depth }
        };
        let limits = self.limits(stop);
        let (rep, _) = self.drive_source(&mut src, lp, limits, Some(stop), "run", progress)?;
        Ok(rep.expect("measured run"))
    }

    /// Replay any command source (trace) against the device, measured.
    pub fn run_source(&mut self, src: &mut dyn Source, lp: Loop, limits: Limits, progress: Progress) -> Result<RunReport> {
        let (rep, _) = self.drive_source(src, lp, limits, Some(&WorkloadConfig::default()), "replay", progress)?;
        Ok(rep.expect("measured run"))
    }

    fn drive_source(
        &mut self,
        src: &mut dyn Source,
        lp: Loop,
        limits: Limits,
        measured: Option<&WorkloadConfig>,
        phase: &str,
        progress: Progress,
    ) -> Result<(Option<RunReport>, Ending)> {
        let mut rec = self.recorder(limits.host_write_bytes);
        if let Some(w) = measured.filter(|w| w.stop == StopRule::Steady) {
            let window = (w.steady_window_device_writes * self.logical_bytes() as f64) as u64;
            rec.watch_steady(Steady::new(window, w.steady_tolerance, w.steady_windows));
        }
        let start = self.now_ns;
        let seed = self.cfg.seed;
        let mut cb = |f: f64| progress(phase, f);
        let (ending, last) = driver::run(self.bd(), src, driver::Plan { lp, limits, start, seed }, &mut rec, &mut cb)?;
        assert!(last >= start, "the {phase} phase ended at {last} ns, before its start at {start} ns");
        // Between runs every invariant holds; checking them is O(device) against a run's
        // O(commands), so debug builds (the tests) check after every phase.
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        self.now_ns = self.now_ns.max(last);
        progress(phase, 1.0);
        if measured.is_none() {
            return Ok((None, ending));
        }
        let metrics = rec.finish(self.block_device(), &self.cfg, ending == Ending::Interrupted);
        Ok((Some(RunReport { metrics, series_csv: rec.series_csv(), ending }), ending))
    }

    // Host commands, in bytes (offsets and lengths must be sector-aligned).

    fn sectors(&self, offset: u64, len: u64) -> Result<(u64, u32)> {
        let sb = self.cfg.geometry.sector_bytes as u64;
        if !offset.is_multiple_of(sb) || !len.is_multiple_of(sb) || len == 0 {
            return Err(Error::Command(format!("offset {offset} and length {len} must be non-zero multiples of the {sb}-byte sector")));
        }
        if len / sb > u32::MAX as u64 {
            return Err(Error::Command(format!("length {len} too large")));
        }
        Ok((offset / sb, (len / sb) as u32))
    }

    /// Write `data` at byte `offset`; returns the completion time (ns). On a ZNS device this
    /// is a zone write: it must land at the zone's write pointer.
    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<u64> {
        self.write_placed(offset, data, fua, None)
    }

    /// Write with an FDP placement identifier (ignored when FDP is off).
    pub fn write_placed(&mut self, offset: u64, data: &[u8], fua: bool, placement: Option<u16>) -> Result<u64> {
        let (lba, n) = self.sectors(offset, data.len() as u64)?;
        let now = self.now_ns;
        self.raw().write(lba, n, Some(data), WriteOpts { fua, placement }, now)
    }
    /// Write `len` bytes at byte `offset` without carrying data, for hosts that keep the data
    /// elsewhere or only model placement and timing (the NBD server's image, cache
    /// simulations). A data-backed device refuses it, since the sectors would keep stale
    /// contents. Returns the completion time.
    pub fn write_placed_len(&mut self, offset: u64, len: u64, fua: bool, placement: Option<u16>) -> Result<u64> {
        if self.cfg.storage == crate::config::StorageMode::Data {
            return Err(Error::Command("a write without data needs storage = \"metadata\"; this device keeps data".into()));
        }
        let (lba, n) = self.sectors(offset, len)?;
        let now = self.now_ns;
        self.raw().write(lba, n, None, WriteOpts { fua, placement }, now)
    }
    /// Hint that a command on byte `offset` is coming, so the metadata it touches can be
    /// loaded early (stages as [`BlockDevice::prefetch`]). No effect on results.
    #[inline]
    pub fn prefetch(&self, offset: u64, stage: u8) {
        self.block_device().prefetch(offset / self.cfg.geometry.sector_bytes as u64, stage)
    }
    /// Read `len` bytes at byte `offset` without returning contents (timing and counters only).
    pub fn read_len(&mut self, offset: u64, len: u64) -> Result<u64> {
        let (lba, n) = self.sectors(offset, len)?;
        let now = self.now_ns;
        self.raw().read(lba, n, None, now)
    }
    /// Read `out.len()` bytes at byte `offset`.
    pub fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<u64> {
        let (lba, n) = self.sectors(offset, out.len() as u64)?;
        let now = self.now_ns;
        self.raw().read(lba, n, Some(out), now)
    }
    pub fn trim(&mut self, offset: u64, len: u64) -> Result<u64> {
        let (lba, n) = self.sectors(offset, len)?;
        let now = self.now_ns;
        self.raw().trim(lba, n, now)
    }
    /// Flush: the device's write buffer, and the buffer of the host log that runs workloads on
    /// it (the open-channel log's partial units).
    pub fn flush(&mut self) -> Result<u64> {
        let now = self.now_ns;
        self.bd().flush(now)
    }
    /// Let the device work in the background at its current time (garbage collection on idle
    /// dies), as the drivers do between open-loop arrivals.
    pub fn idle(&mut self) {
        let now = self.now_ns;
        self.bd().idle(now);
    }
    /// Advance the device's clock (host commands issued later start no earlier).
    pub fn advance_to(&mut self, t_ns: u64) {
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Save the whole device state (mapping, blocks, wear, contents, clock) to `path`.
    pub fn snapshot(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        {
            let mut f = BufWriter::new(std::fs::File::create(&tmp)?);
            f.write_all(SNAPSHOT_MAGIC)?;
            f.write_all(&SNAPSHOT_VERSION.to_le_bytes())?;
            bincode::serialize_into(&mut f, self).map_err(|e| Error::Snapshot(e.to_string()))?;
            f.flush()?;
            f.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    /// Load a device saved by [`Device::snapshot`].
    pub fn restore(path: &Path) -> Result<Device> {
        let mut f = BufReader::new(std::fs::File::open(path)?);
        let mut magic = [0u8; 8];
        f.read_exact(&mut magic).map_err(|_| Error::Snapshot(format!("{}: too short to be a snapshot", path.display())))?;
        if &magic != SNAPSHOT_MAGIC {
            return Err(Error::Snapshot(format!("{}: not an ssdlab snapshot", path.display())));
        }
        let mut v = [0u8; 4];
        f.read_exact(&mut v)?;
        let v = u32::from_le_bytes(v);
        if v != SNAPSHOT_VERSION {
            return Err(Error::Snapshot(format!("{}: snapshot version {v}, this ssdlab reads {SNAPSHOT_VERSION}", path.display())));
        }
        let dev: Device = bincode::deserialize_from(&mut f).map_err(|e| Error::Snapshot(format!("{}: {e}", path.display())))?;
        Ok(dev)
    }
}

/// A progress callback that never stops the run.
pub fn no_progress(_: &str, _: f64) -> bool {
    true
}
