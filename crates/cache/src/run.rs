//! One measured cache run: a device, a cache on it, a request source; counters, time series,
//! latency percentiles and the paper's models in one JSON summary.
//!
//! The summary holds nothing wall-clock, so a config and seed give byte-identical output; wall
//! time is returned beside it.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::config::{Geometry, StopRule, Timing};
use ssdlab_core::ftl::conventional::StreamStats;
use ssdlab_core::ftl::Counters;
use ssdlab_core::metrics::{latency_summary, ratio, round6 as r6, LatencyShape, MeanRounding, Steady};
use ssdlab_core::{Config, Device};

use crate::cache::{CacheStats, HybridCache, Outcome};
use crate::config::CacheConfig;
use crate::error::Result;
use crate::model::{self, CarbonParams};
use crate::workload::{Generator, Op, Request, WorkloadSpec};

/// Where requests come from: the generator or a trace.
pub trait RequestSource {
    fn next_request(&mut self) -> Option<Result<Request>>;
    /// A GET missed (sources that do look-aside SETs react).
    fn miss(&mut self, _r: &Request) {}
    /// The key of a request `k` places ahead, if the source knows it without side effects on
    /// what it gives (the run prefetches what that request will touch).
    fn upcoming(&mut self, _k: usize) -> Option<u64> {
        None
    }
}

/// How many requests ahead a run starts loading the cache lines a request will touch first
/// (map slots, bucket state), and those it finds through them (items).
const LOOKAHEAD: usize = 16;
const LOOKAHEAD_SECOND: usize = 8;

impl RequestSource for Generator {
    fn next_request(&mut self) -> Option<Result<Request>> {
        Some(Ok(Generator::next_request(self)))
    }
    fn upcoming(&mut self, k: usize) -> Option<u64> {
        Some(Generator::upcoming(self, k))
    }
    fn miss(&mut self, r: &Request) {
        self.feedback_miss(r)
    }
}

/// What to run and when to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub cache: CacheConfig,
    pub workload: WorkloadSpec,
    /// Stop after host writes of this many times the device's logical capacity (0 = no limit).
    pub stop_device_writes: f64,
    /// Stop after this many requests (0 = no limit).
    pub stop_requests: u64,
    /// Share of the run (by the stop limit) before the measurement window opens.
    pub warmup_fraction: f64,
    /// Write the LOC's regions once before the run (a warm cache's device state), so short
    /// runs reach the steady state of a large LOC.
    pub prefill_loc: bool,
    /// Rows of the time series.
    pub series_points: u32,
    pub carbon: CarbonParams,
    /// `volume`: run to the stop limit, measure after `warmup_fraction` of it. `steady`: stop
    /// once the device's DLWA has settled, by the core's rule (`ssdlab_core::metrics::Steady`:
    /// the last `steady_windows` windows of `steady_window_device_writes` logical capacities
    /// of host writes each lie within `steady_tolerance` of their mean), the stop limits
    /// capping the run; the summary's figures are then those of the steady windows, and its
    /// `steady` section says where they start (the warm-up window is used if DLWA never
    /// settled).
    pub stop: StopRule,
    /// Steady stop: host writes (logical capacities) before the first window, so the cache is
    /// warm (DRAM tier and SOC filled) before anything is measured.
    pub steady_start_device_writes: f64,
    pub steady_window_device_writes: f64,
    pub steady_tolerance: f64,
    pub steady_windows: u32,
    /// Record every device command of the run, the LOC prefill included, to this file as an
    /// MSR Cambridge trace (see `Flash::record_to`): replayed on the same device with timing
    /// off, it gives the same media writes (without FDP: placement is not recorded).
    pub device_trace: Option<PathBuf>,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            cache: CacheConfig::default(),
            workload: WorkloadSpec::default(),
            stop_device_writes: 2.0,
            stop_requests: 0,
            warmup_fraction: 0.5,
            prefill_loc: true,
            series_points: 60,
            carbon: CarbonParams::default(),
            stop: StopRule::Volume,
            steady_start_device_writes: 1.0,
            steady_window_device_writes: 0.5,
            steady_tolerance: 0.02,
            steady_windows: 4,
            device_trace: None,
        }
    }
}

impl RunSpec {
    /// Steady stop: host bytes before the rule's first window, on a device of `logical` bytes.
    fn steady_start_bytes(&self, logical: u64) -> u64 {
        (self.steady_start_device_writes * logical as f64) as u64
    }

    /// Check the run's own keys (the cache and workload check theirs).
    pub fn validate(&self) -> Result<()> {
        let bad = |k: &str, m: String| Err(crate::error::CacheError::Config(format!("run: {k}: {m}")));
        if !(self.stop_device_writes > 0.0) && self.stop_requests == 0 {
            return bad("stop_device_writes", "set stop_device_writes or stop_requests (the most a run may take)".into());
        }
        if !(0.0..1.0).contains(&self.warmup_fraction) {
            return bad("warmup_fraction", format!("{} is not in [0, 1)", self.warmup_fraction));
        }
        if self.stop == StopRule::Steady {
            if !(self.steady_start_device_writes >= 0.0 && self.steady_start_device_writes.is_finite()) {
                return bad("steady_start_device_writes", format!("{} must be >= 0", self.steady_start_device_writes));
            }
            if !(self.steady_window_device_writes > 0.0 && self.steady_window_device_writes.is_finite()) {
                return bad("steady_window_device_writes", format!("{} must be positive", self.steady_window_device_writes));
            }
            if !(0.0..=1.0).contains(&self.steady_tolerance) {
                return bad("steady_tolerance", format!("{} is not in [0, 1]", self.steady_tolerance));
            }
            if !(2..=1000).contains(&self.steady_windows) {
                return bad("steady_windows", format!("{} is not in 2..=1000", self.steady_windows));
            }
        }
        Ok(())
    }
}

pub struct RunResult {
    pub summary: Value,
    pub series_csv: String,
    /// Wall time of the run (of every session, for a run resumed from a checkpoint).
    pub wall_seconds: f64,
    pub interrupted: bool,
    /// What [`run_checkpointed`] did with its checkpoint (resumed, started afresh, saved; empty
    /// if nothing).
    pub checkpoint: String,
}

#[derive(Clone, Serialize, Deserialize)]
struct Mark {
    c: Counters,
    /// Sum over dies of their busy time so far.
    die_busy_ns: u64,
    streams: Vec<StreamStats>,
    stats: CacheStats,
    requests: u64,
    time_ns: u64,
}

fn mark(cache: &HybridCache, requests: u64, time_ns: u64) -> Mark {
    let dev = &cache.flash.dev;
    let streams =
        if dev.config().personality == ssdlab_core::config::Personality::Conventional { dev.ftl().stream_stats() } else { vec![] };
    let die_busy_ns = dev.block_device().timelines().die_busy_ns().iter().sum();
    Mark { c: dev.block_device().counters().clone(), die_busy_ns, streams, stats: cache.stats, requests, time_ns }
}

/// The state at the start of a measurement window: counters, and the latency histograms so
/// far (a window's latencies are the histograms at its end minus these).
#[derive(Clone, Serialize, Deserialize)]
struct WindowStart {
    /// Host bytes written since the run's start.
    host: u64,
    mark: Mark,
    #[serde(with = "crate::flash::hist_serde")]
    read_ns: Histogram<u64>,
    #[serde(with = "crate::flash::hist_serde")]
    write_ns: Histogram<u64>,
}

impl WindowStart {
    fn of(cache: &HybridCache, host: u64, requests: u64, time_ns: u64) -> WindowStart {
        WindowStart {
            host,
            mark: mark(cache, requests, time_ns),
            read_ns: cache.flash.read_ns.clone(),
            write_ns: cache.flash.write_ns.clone(),
        }
    }
}

/// `now - before`, where `before` is an earlier snapshot of the same histogram.
fn since(now: &Histogram<u64>, before: &Histogram<u64>) -> Histogram<u64> {
    let mut d = now.clone();
    // A snapshot's counts are a subset of the later histogram's: the subtraction cannot fail.
    d.subtract(before).expect("window histogram");
    d
}

/// The flash read and write latencies of a run's summary.
fn lat(h: &Histogram<u64>) -> Value {
    const SHAPE: LatencyShape =
        LatencyShape { quantiles: &[0.5, 0.99, 0.999], unit: "", mean: MeanRounding::Six, min: false, empty_is_count: true };
    Value::Object(latency_summary(h, &SHAPE))
}

/// Build the device and cache and run `spec.workload` (or `source`) to the stop limit.
pub fn run(
    device: Config,
    spec: &RunSpec,
    source: Option<&mut dyn RequestSource>,
    progress: &mut dyn FnMut(f64) -> bool,
) -> Result<RunResult> {
    let dev = Device::new(device)?;
    let mut cache = HybridCache::new(dev, spec.cache.clone())?;
    let mut gen;
    let src: &mut dyn RequestSource = match source {
        Some(s) => s,
        None => {
            gen = Generator::new(&spec.workload)?;
            &mut gen
        }
    };
    if let Some(path) = &spec.device_trace {
        cache.flash.record_to(path)?;
    }
    let r = run_on(&mut cache, spec, src, progress)?;
    cache.flash.finish_trace()?;
    Ok(r)
}

/// Run on an existing cache (tests use this to look inside afterwards).
pub fn run_on(
    cache: &mut HybridCache,
    spec: &RunSpec,
    src: &mut dyn RequestSource,
    progress: &mut dyn FnMut(f64) -> bool,
) -> Result<RunResult> {
    let wall = Instant::now();
    spec.validate()?;
    let mut st = LoopState::begin(cache, spec)?;
    let interrupted = drive(cache, spec, src, &mut st, progress, &mut |_, _, _| Ok(()))?;
    progress(1.0);
    Ok(finish(cache, spec, st, interrupted, wall.elapsed().as_secs_f64()))
}

/// Where a long run saves itself, and how often (see [`run_checkpointed`]).
#[derive(Debug, Clone)]
pub struct Checkpointing {
    pub path: PathBuf,
    /// Wall time between saves (a save happens at the first progress check after it).
    pub every: Duration,
}

/// [`run`] of the request generator that saves its whole state (device, cache, generator,
/// counters, series, steady windows) to `ck.path` every `ck.every`, and starts from that file
/// when it is there: a run killed or interrupted goes on from its latest save, and gives the
/// summary and series it would have given uninterrupted, byte for byte. The file is removed
/// when the run ends. A file that is not a save of this run (other config or spec, other
/// ssdlab version, damaged) is set aside and the run starts afresh; a save that fails (a full
/// disk) leaves the previous one and the run goes on; `RunResult::checkpoint` says what
/// happened. Not for data-backed caches or device traces.
pub fn run_checkpointed(device: Config, spec: &RunSpec, ck: &Checkpointing, progress: &mut dyn FnMut(f64) -> bool) -> Result<RunResult> {
    let wall = Instant::now();
    spec.validate()?;
    if spec.device_trace.is_some() {
        return Err(crate::error::CacheError::Config(
            "run: device_trace cannot go with a checkpointed run (the trace file is not part of the save)".into(),
        ));
    }
    let fingerprint = serde_json::to_string(&(CHECKPOINT_VERSION, env!("CARGO_PKG_VERSION"), &device, spec)).expect("config serializes");
    let (mut cache, mut gen, mut st, note) = match load_checkpoint(&ck.path, &fingerprint) {
        Ok(Some((cache, gen, st))) => {
            let note = format!("resumed from {} at {} requests", ck.path.display(), st.reqs);
            (cache, gen, st, note)
        }
        Ok(None) => {
            let (c, g, s) = fresh(device, spec)?;
            (c, g, s, String::new())
        }
        Err(why) => {
            let aside = ck.path.with_extension("unusable");
            std::fs::rename(&ck.path, &aside)?;
            let (c, g, s) = fresh(device, spec)?;
            (c, g, s, format!("started afresh: {why} (moved to {})", aside.display()))
        }
    };
    let mut last = Instant::now();
    let mut saves = 0u64;
    // A save that fails (a full disk, say) does not stop the run: the previous one stays, and
    // the result says so.
    let mut failure: Option<String> = None;
    let interrupted = drive(&mut cache, spec, &mut gen, &mut st, progress, &mut |cache, gen, st| {
        if last.elapsed() < ck.every {
            return Ok(());
        }
        match save_checkpoint(&ck.path, &fingerprint, cache, gen, st, st.wall_before_s + wall.elapsed().as_secs_f64()) {
            Ok(()) => saves += 1,
            Err(e) => {
                let _ = std::fs::remove_file(ck.path.with_extension("tmp"));
                failure.get_or_insert_with(|| format!("a save failed ({e}), the run went on"));
            }
        }
        last = Instant::now();
        Ok(())
    })?;
    progress(1.0);
    let mut r = finish(&cache, spec, st, interrupted, wall.elapsed().as_secs_f64());
    if !interrupted {
        match std::fs::remove_file(&ck.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    let saved = match saves {
        0 => String::new(),
        1 => "saved once".into(),
        n => format!("saved {n} times"),
    };
    r.checkpoint = [note, saved, failure.unwrap_or_default()].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>().join("; ");
    Ok(r)
}

/// Bump when the saved state's layout changes (a save of another layout is set aside).
const CHECKPOINT_VERSION: u32 = 1;
const CHECKPOINT_MAGIC: &[u8; 8] = b"SSDLCKP1";

fn fresh(device: Config, spec: &RunSpec) -> Result<(HybridCache, Generator, LoopState)> {
    let mut cache = HybridCache::new(Device::new(device)?, spec.cache.clone())?;
    let gen = Generator::new(&spec.workload)?;
    let st = LoopState::begin(&mut cache, spec)?;
    Ok((cache, gen, st))
}

fn save_checkpoint(
    path: &Path,
    fingerprint: &str,
    cache: &HybridCache,
    gen: &Generator,
    st: &LoopState,
    wall_s: f64,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        let io = |e: bincode::Error| std::io::Error::other(e.to_string());
        f.write_all(CHECKPOINT_MAGIC)?;
        bincode::serialize_into(&mut f, fingerprint).map_err(io)?;
        bincode::serialize_into(&mut f, cache).map_err(io)?;
        bincode::serialize_into(&mut f, gen).map_err(io)?;
        bincode::serialize_into(&mut f, &(st, wall_s)).map_err(io)?;
        f.flush()?;
        f.get_ref().sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The saved run at `path`: None if there is no file, Err(why) if it cannot be used.
#[allow(clippy::type_complexity)]
fn load_checkpoint(path: &Path, fingerprint: &str) -> std::result::Result<Option<(HybridCache, Generator, LoopState)>, String> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut f = BufReader::with_capacity(1 << 20, f);
    let mut magic = [0u8; 8];
    f.read_exact(&mut magic).map_err(|_| "too short to be a checkpoint".to_string())?;
    if &magic != CHECKPOINT_MAGIC {
        return Err("not an ssdlab cache-run checkpoint".into());
    }
    let bad = |e: bincode::Error| format!("damaged: {e}");
    let fp: String = bincode::deserialize_from(&mut f).map_err(bad)?;
    if fp != fingerprint {
        return Err("a save of another run (config, spec or ssdlab version differ)".into());
    }
    let cache: HybridCache = bincode::deserialize_from(&mut f).map_err(bad)?;
    let gen: Generator = bincode::deserialize_from(&mut f).map_err(bad)?;
    let (mut st, wall_s): (LoopState, f64) = bincode::deserialize_from(&mut f).map_err(bad)?;
    if f.read(&mut [0u8; 1]).map_err(|e| e.to_string())? != 0 {
        return Err("damaged: bytes after the end".into());
    }
    st.wall_before_s = wall_s;
    Ok(Some((cache, gen, st)))
}

/// Everything a run carries from one request to the next besides the cache and the request
/// source: what a checkpoint saves with them.
#[derive(Serialize, Deserialize)]
struct LoopState {
    start: Mark,
    prev: Mark,
    /// The warm-up window (opens after `warmup_fraction` of the run).
    window: Option<WindowStart>,
    steady: Option<Steady>,
    /// Host and NAND bytes where the steady rule started looking.
    steady_base: Option<(u64, u64)>,
    /// With a steady stop, the starts of the latest windows (one more than the rule compares,
    /// so the steady ones are all there).
    windows: VecDeque<WindowStart>,
    csv: String,
    /// Latency histograms at the previous row: a row's percentiles are of the difference.
    #[serde(with = "crate::flash::hist_serde")]
    prev_read: Histogram<u64>,
    #[serde(with = "crate::flash::hist_serde")]
    prev_write: Histogram<u64>,
    next_row: f64,
    reqs: u64,
    last_t: u64,
    next_poll: u64,
    /// Wall seconds of the sessions before this one (a resumed run).
    wall_before_s: f64,
}

impl LoopState {
    /// The state before the first request (the LOC prefilled if the spec says so).
    fn begin(cache: &mut HybridCache, spec: &RunSpec) -> Result<LoopState> {
        let logical = cache.flash.dev.logical_bytes();
        let steady = (spec.stop == StopRule::Steady).then(|| {
            let window = ((spec.steady_window_device_writes * logical as f64) as u64).max(1);
            Steady::new(window, spec.steady_tolerance, spec.steady_windows)
        });
        if spec.prefill_loc {
            cache.loc.prefill(&mut cache.flash)?;
        }
        let warm = spec.warmup_fraction.clamp(0.0, 0.99);
        Ok(LoopState {
            start: mark(cache, 0, 0),
            prev: mark(cache, 0, 0),
            window: (warm == 0.0).then(|| WindowStart::of(cache, 0, 0, 0)),
            steady,
            steady_base: None,
            windows: VecDeque::new(),
            csv: String::from("requests,time_s,device_writes,host_write_bytes,nand_write_bytes,dlwa_interval,dlwa_cumulative,dram_hit_ratio_interval,nvm_hit_ratio_interval,gc_events,erases,read_p99_us_interval,write_p99_us_interval,gets,dram_hits,nvm_hits,flash_item_bytes\n"),
            prev_read: cache.flash.read_ns.clone(),
            prev_write: cache.flash.write_ns.clone(),
            next_row: 1.0 / spec.series_points.max(1) as f64,
            reqs: 0,
            last_t: 0,
            next_poll: 0,
            wall_before_s: 0.0,
        })
    }
}

/// The requests of a run, from where `st` is to the stop limit (or an interruption: the
/// progress callback said no). `save` sees the state at each progress check, between two
/// requests, where resuming from it continues exactly.
fn drive<S: RequestSource + ?Sized>(
    cache: &mut HybridCache,
    spec: &RunSpec,
    src: &mut S,
    st: &mut LoopState,
    progress: &mut dyn FnMut(f64) -> bool,
    save: &mut dyn FnMut(&HybridCache, &S, &LoopState) -> Result<()>,
) -> Result<bool> {
    let logical = cache.flash.dev.logical_bytes();
    let stop_bytes = (spec.stop_device_writes.max(0.0) * logical as f64) as u64;
    let stop_reqs = spec.stop_requests;
    let warm = spec.warmup_fraction.clamp(0.0, 0.99);
    let host0 = st.start.c.host_write_bytes;
    // Progress along whichever limit is set (bytes first).
    let frac = |c: &HybridCache, reqs: u64| -> f64 {
        let b =
            if stop_bytes > 0 { (c.flash.dev.block_device().counters().host_write_bytes - host0) as f64 / stop_bytes as f64 } else { 0.0 };
        let r = if stop_reqs > 0 { reqs as f64 / stop_reqs as f64 } else { 0.0 };
        b.max(r)
    };
    let points = spec.series_points.max(1) as f64;
    // The steady rule sees host and NAND bytes from `steady_start` on (the warm-up excluded);
    // its windows' starts are kept in the run's host bytes.
    let steady_start = spec.steady_start_bytes(logical);
    let keep_windows = spec.steady_windows as usize + 1;
    let start = st.start.clone();
    loop {
        let f = frac(cache, st.reqs);
        if f >= 1.0 {
            break;
        }
        if st.window.is_none() && f >= warm {
            let host = cache.flash.dev.block_device().counters().host_write_bytes - host0;
            st.window = Some(WindowStart::of(cache, host, st.reqs, st.last_t));
        }
        if f >= st.next_row {
            push_row(cache, st, &start, logical, f, points);
        }
        if st.reqs >= st.next_poll {
            st.next_poll = st.reqs + 65_536;
            if !progress(f) {
                return Ok(true);
            }
            save(cache, src, st)?;
        }
        prefetch(cache, src);
        let Some(r) = src.next_request() else { break };
        let r = r?;
        st.last_t = st.last_t.max(r.time_ns);
        st.reqs += 1;
        serve(cache, src, &r)?;
        if st.steady.is_some() && steady_step(cache, st, &start, steady_start, keep_windows) {
            break;
        }
    }
    Ok(false)
}

/// Start loading what the requests ahead will touch: the first stage [`LOOKAHEAD`] ahead,
/// the second [`LOOKAHEAD_SECOND`] ahead, and the next DRAM victim.
fn prefetch<S: RequestSource + ?Sized>(cache: &mut HybridCache, src: &mut S) {
    if let Some(k) = src.upcoming(LOOKAHEAD) {
        cache.prefetch(k);
    }
    if let Some(k) = src.upcoming(LOOKAHEAD_SECOND) {
        cache.prefetch_second(k);
    }
    cache.prefetch_victim();
}

/// One request on the cache (a GET that misses is told to the source).
fn serve<S: RequestSource + ?Sized>(cache: &mut HybridCache, src: &mut S, r: &Request) -> Result<()> {
    match r.op {
        Op::Get => {
            if cache.get(r.key, r.key_bytes, r.time_ns)? == Outcome::Miss {
                src.miss(r);
            }
        }
        Op::Set => cache.set(r.key, r.key_bytes, r.value_bytes, r.ttl_s, r.time_ns)?,
        Op::Delete => {
            cache.delete(r.key, r.time_ns)?;
        }
    }
    Ok(())
}

/// The time series' row at progress `f`: the interval since the previous row and the run so
/// far (from `start`); then the next row's progress.
fn push_row(cache: &HybridCache, st: &mut LoopState, start: &Mark, logical: u64, f: f64, points: f64) {
    let (host0, nand0) = (start.c.host_write_bytes, start.c.nand_write_bytes);
    let m = mark(cache, st.reqs, st.last_t);
    let prev = &st.prev;
    let (dh, dn) = (m.c.host_write_bytes - prev.c.host_write_bytes, m.c.nand_write_bytes - prev.c.nand_write_bytes);
    let gets = m.stats.gets - prev.stats.gets;
    let dram = m.stats.dram_hits - prev.stats.dram_hits;
    let nvm = m.stats.nvm_hits - prev.stats.nvm_hits;
    let p99_us = |now: &Histogram<u64>, before: &mut Histogram<u64>| -> f64 {
        let d = since(now, before);
        *before = now.clone();
        if d.is_empty() {
            0.0
        } else {
            d.value_at_quantile(0.99) as f64 / 1e3
        }
    };
    let rp99 = p99_us(&cache.flash.read_ns, &mut st.prev_read);
    let wp99 = p99_us(&cache.flash.write_ns, &mut st.prev_write);
    st.csv.push_str(&format!(
        "{},{:.3},{:.4},{},{},{:.5},{:.5},{:.5},{:.5},{},{},{:.1},{:.1},{},{},{},{}\n",
        st.reqs,
        st.last_t as f64 / 1e9,
        (m.c.host_write_bytes - host0) as f64 / logical as f64,
        m.c.host_write_bytes - host0,
        m.c.nand_write_bytes - nand0,
        ratio(dn, dh),
        ratio(m.c.nand_write_bytes - nand0, m.c.host_write_bytes - host0),
        ratio(dram, gets),
        ratio(nvm, gets - dram),
        m.c.gc_events - start.c.gc_events,
        m.c.nand_erase_count - start.c.nand_erase_count,
        rp99,
        wp99,
        m.stats.gets - start.stats.gets,
        m.stats.dram_hits - start.stats.dram_hits,
        m.stats.nvm_hits - start.stats.nvm_hits,
        m.stats.flash_item_bytes - start.stats.flash_item_bytes,
    ));
    st.prev = m;
    while st.next_row <= f {
        st.next_row += 1.0 / points;
    }
}

/// The steady rule after a request (a run with a steady stop): it starts looking once the
/// run's host bytes reach `steady_start`, then keeps the latest windows' starts. True when
/// DLWA has settled.
fn steady_step(cache: &HybridCache, st: &mut LoopState, start: &Mark, steady_start: u64, keep_windows: usize) -> bool {
    let (host0, nand0) = (start.c.host_write_bytes, start.c.nand_write_bytes);
    let Some(s) = st.steady.as_mut() else { return false };
    let c = cache.flash.dev.block_device().counters();
    let (host, nand) = (c.host_write_bytes - host0, c.nand_write_bytes - nand0);
    match st.steady_base {
        None if host >= steady_start => {
            st.steady_base = Some((host, nand));
            st.windows.push_back(WindowStart::of(cache, host, st.reqs, st.last_t));
        }
        None => {}
        Some((h0, n0)) => {
            let closed = s.windows_measured();
            let settled = s.observe(host - h0, nand - n0);
            if s.windows_measured() != closed {
                st.windows.push_back(WindowStart::of(cache, host, st.reqs, st.last_t));
                if st.windows.len() > keep_windows {
                    st.windows.pop_front();
                }
            }
            if settled {
                return true;
            }
        }
    }
    false
}

/// The run's result from its final state.
fn finish(cache: &HybridCache, spec: &RunSpec, st: LoopState, interrupted: bool, wall_s: f64) -> RunResult {
    let host0 = st.start.c.host_write_bytes;
    let nand0 = st.start.c.nand_write_bytes;
    // The steady windows when DLWA settled, else the warm-up window.
    let settled_at = st.steady.as_ref().and_then(|s| s.steady_from_host_bytes()).map(|from| from + st.steady_base.map_or(0, |b| b.0));
    let w = match settled_at {
        Some(from) => st.windows.iter().find(|x| x.host == from).expect("the steady windows' start is kept").clone(),
        None => st.window.clone().unwrap_or_else(|| WindowStart::of(cache, 0, 0, 0)),
    };
    let mut summary = summarize(cache, spec, &st.start, &w, st.reqs, st.last_t);
    if let Some(s) = &st.steady {
        let c = cache.flash.dev.block_device().counters();
        let mut sr = s.report(ratio(c.nand_write_bytes - nand0, c.host_write_bytes - host0));
        // The rule's host bytes count from its start; say where that was, and where the steady
        // windows start in the run's own bytes.
        let logical = cache.flash.dev.logical_bytes();
        sr["start_host_bytes"] = json!(spec.steady_start_bytes(logical));
        sr["steady_from_host_bytes"] = json!(settled_at);
        summary["steady"] = sr;
    }
    RunResult { summary, series_csv: st.csv, wall_seconds: st.wall_before_s + wall_s, interrupted, checkpoint: String::new() }
}

/// The summary: the measurement window's figures (since `window`), the run's (since `start`),
/// the paper's models, the cache's and the device's counters.
fn summarize(cache: &HybridCache, spec: &RunSpec, start: &Mark, window: &WindowStart, reqs: u64, last_t: u64) -> Value {
    let w = &window.mark;
    let dev = &cache.flash.dev;
    let cfg = dev.config();
    let g = &cfg.geometry;
    let raw = raw_bytes(g);
    let logical = dev.logical_bytes();
    let c = dev.block_device().counters();
    let s = cache.stats;
    let ws = &w.stats;
    // Window deltas.
    let host = c.host_write_bytes - w.c.host_write_bytes;
    let nand = c.nand_write_bytes - w.c.nand_write_bytes;
    let gets = s.gets - ws.gets;
    let dram = s.dram_hits - ws.dram_hits;
    let nvm = s.nvm_hits - ws.nvm_hits;
    let item_bytes = s.flash_item_bytes - ws.flash_item_bytes;
    let dlwa = ratio(nand, host);
    // Per handle (FDP), since the window opened. The SOC's DLWA counts its own programs and
    // every garbage-collection move of its data: out of its blocks (the handle's figure) and,
    // since relocated data of initially isolated handles continues in a GC stream they share,
    // the moves out of that stream too. Those can include LOC data moved a second time, so
    // the LOC handle's DLWA is reported beside it; the SOC handle's own-blocks figure as well.
    let fdp = if cfg.personality == ssdlab_core::config::Personality::Conventional { dev.ftl().fdp_metrics(&w.streams) } else { None };
    let (soc_dlwa, soc_own, loc_dlwa) = handle_dlwa(cache, fdp.as_ref());
    let soc_bytes = cache.soc.bytes();
    let loc_bytes = cache.loc.bytes();
    let p_soc = model::soc_physical_bytes(raw, loc_bytes);
    let device_gb = if spec.carbon.device_gb > 0.0 { spec.carbon.device_gb } else { raw as f64 / 1e9 };
    let t = &cfg.timing;
    let erases: Vec<u32> = dev.block_device().blocks().iter().map(|b| b.erase_count).collect();
    let erase_max = erases.iter().copied().max().unwrap_or(0);
    let erase_mean = erases.iter().map(|&e| e as f64).sum::<f64>() / erases.len().max(1) as f64;
    let span_ns = last_t.saturating_sub(w.time_ns).max(cache.flash.last_done_ns.saturating_sub(w.time_ns)).max(1);
    let mut doc = json!({
        "requests": reqs,
        "window_requests": reqs - w.requests,
        "workload_seconds": r6(last_t as f64 / 1e9),
        "device": {
            "preset": cfg.preset, "raw_bytes": raw, "logical_bytes": logical, "spare_factor": cfg.ftl.spare_factor,
            "gc_policy": cfg.ftl.gc_policy, "fdp_enabled": cfg.fdp.enabled, "timing": t.enabled,
        },
        "layout": {
            "soc_bytes": soc_bytes, "buckets": cache.soc.buckets, "loc_bytes": loc_bytes, "regions": cache.loc.regions,
            "soc_pid": cache.soc.handle.pid, "loc_pid": cache.loc.handle.pid, "utilization": spec.cache.utilization, "soc_fraction": spec.cache.soc_fraction,
        },
        "dram_hit_ratio": r6(ratio(dram, gets)),
        "nvm_hit_ratio": r6(ratio(nvm, gets - dram)),
        "hit_ratio": r6(ratio(dram + nvm, gets)),
        "alwa": r6(ratio(host, item_bytes)),
        "dlwa": r6(dlwa),
        "dlwa_cumulative": r6(ratio(c.nand_write_bytes - start.c.nand_write_bytes, c.host_write_bytes - start.c.host_write_bytes)),
        "device_writes": r6((c.host_write_bytes - start.c.host_write_bytes) as f64 / logical as f64),
        "host_write_bytes": host,
        "nand_write_bytes": nand,
        "soc_dlwa": soc_dlwa,
        "soc_dlwa_own_blocks": soc_own,
        "loc_dlwa": loc_dlwa,
        "theorem1": theorem1(g, soc_bytes, p_soc),
        "theorem2": {
            "params": spec.carbon, "device_gb": r6(device_gb),
            "embodied_kg_co2e": r6(model::theorem2_embodied_kg(dlwa.max(1.0), device_gb, &spec.carbon)),
        },
        "theorem3": theorem3(t, c, &w.c),
        "throughput_rps_simulated": r6((reqs - w.requests) as f64 / (span_ns as f64 * 1e-9)),
        // Mean share of the window the dies were busy (host and GC work): how close the
        // offered load is to what the device sustains.
        "die_utilization": r6((dev.block_device().timelines().die_busy_ns().iter().sum::<u64>() - w.die_busy_ns) as f64
            / (span_ns as f64 * (g.channels * g.dies_per_channel) as f64)),
        "latency_ns": {"read": lat(&since(&cache.flash.read_ns, &window.read_ns)), "write": lat(&since(&cache.flash.write_ns, &window.write_ns))},
        "gc_events": c.gc_events - w.c.gc_events,
        "erases": c.nand_erase_count - w.c.nand_erase_count,
        "erase_count_max": erase_max,
        "erase_count_mean": r6(erase_mean),
        "cache": cache_json(cache, ws),
        "fdp": fdp,
    });
    // Where the measurement window opened (the steady windows' start, or the warm-up's).
    doc["window_from_device_writes"] = json!(r6(window.host as f64 / logical as f64));
    doc
}

/// The device's raw capacity: every page of every block.
fn raw_bytes(g: &Geometry) -> u64 {
    g.channels as u64
        * g.dies_per_channel as u64
        * g.planes_per_die as u64
        * g.blocks_per_plane as u64
        * g.pages_per_block as u64
        * g.page_bytes as u64
}

/// The SOC's and LOC's DLWA per handle (FDP), since the window opened (null without FDP or
/// a handle): the SOC's with and without the moves out of the shared GC streams, the LOC's.
fn handle_dlwa(cache: &HybridCache, fdp: Option<&Value>) -> (Value, Value, Value) {
    let (mut soc_dlwa, mut soc_own, mut loc_dlwa) = (Value::Null, Value::Null, Value::Null);
    if let Some(f) = fdp {
        let find = |h: u16| f["handles"].as_array().and_then(|a| a.iter().find(|x| x["handle"].as_u64() == Some(h as u64)).cloned());
        if let (Some(sh), Some(_)) = (find(cache.soc.handle.ruh()), cache.soc.handle.pid) {
            let shared_moves: u64 = f["shared_gc_streams"]
                .as_array()
                .map(|a| a.iter().map(|x| x["gc_relocated_out_bytes"].as_u64().unwrap_or(0)).sum())
                .unwrap_or(0);
            let host_b = sh["host_write_bytes"].as_u64().unwrap_or(0);
            let media = sh["media_write_bytes"].as_u64().unwrap_or(0);
            if host_b > 0 {
                soc_dlwa = json!(r6((media + shared_moves) as f64 / host_b as f64));
                soc_own = json!(r6(media as f64 / host_b as f64));
            }
        }
        if let (Some(lh), Some(_)) = (find(cache.loc.handle.ruh()), cache.loc.handle.pid) {
            loc_dlwa = lh["dlwa"].clone();
        }
    }
    (soc_dlwa, soc_own, loc_dlwa)
}

/// Theorem 1: the SOC's DLWA under FIFO from its share `p_soc` of the physical space, and
/// Desnoyers' greedy approximation.
fn theorem1(g: &Geometry, soc_bytes: u64, p_soc: u64) -> Value {
    let t1 = model::theorem1_dlwa(soc_bytes as f64, p_soc as f64);
    let spb = g.pages_per_block as u64 * g.page_bytes as u64 / g.sector_bytes as u64;
    // Desnoyers' greedy approximation dips just below 1 when spare is plentiful: clamp.
    let t1_greedy = (soc_bytes > 0 && p_soc > soc_bytes)
        .then(|| ssdlab_core::analytic::waf_greedy(p_soc as f64 / soc_bytes as f64, spb as u32).max(1.0));
    json!({
        "s_soc_bytes": soc_bytes, "s_p_soc_bytes": p_soc,
        "alpha": if soc_bytes > 0 { r6(p_soc as f64 / soc_bytes as f64) } else { 0.0 },
        "dlwa_fifo": t1.map(r6), "dlwa_greedy_approx": t1_greedy.map(r6),
    })
}

/// Theorem 3: host operations against device migrations in the window (counters `c` now,
/// `w` when it opened), and the dies' busy time for each.
fn theorem3(t: &Timing, c: &Counters, w: &Counters) -> Value {
    let busy = |cc: &Counters| -> f64 {
        (cc.nand_page_reads as f64 * t.page_read_ns as f64
            + cc.nand_page_programs as f64 * t.page_program_ns as f64
            + cc.nand_erase_count as f64 * t.block_erase_ns as f64)
            * 1e-9
    };
    let gc_pages = c.gc_relocated_pages - w.gc_relocated_pages;
    let wc = Counters {
        nand_page_reads: c.nand_page_reads - w.nand_page_reads,
        nand_page_programs: c.nand_page_programs - w.nand_page_programs,
        nand_erase_count: c.nand_erase_count - w.nand_erase_count,
        ..Default::default()
    };
    let migration_busy = gc_pages as f64 * (t.page_read_ns + t.page_program_ns) as f64 * 1e-9;
    json!({
        "host_ops": (c.host_read_cmds - w.host_read_cmds) + (c.host_write_cmds - w.host_write_cmds),
        "device_migrations_pages": gc_pages,
        "media_busy_die_seconds": r6(busy(&wc)),
        "migration_busy_die_seconds": r6(migration_busy),
    })
}

/// The cache's figures: the window's (since stats `ws`), the totals, the SOC's, the LOC's.
fn cache_json(cache: &HybridCache, ws: &CacheStats) -> Value {
    let s = cache.stats;
    let (gets, dram, nvm) = (s.gets - ws.gets, s.dram_hits - ws.dram_hits, s.nvm_hits - ws.nvm_hits);
    let item_bytes = s.flash_item_bytes - ws.flash_item_bytes;
    json!({
        "window": {
            "gets": gets, "dram_hits": dram, "nvm_hits": nvm, "sets": s.sets - ws.sets, "deletes": s.deletes - ws.deletes,
            "flash_items": s.flash_items - ws.flash_items, "flash_item_bytes": item_bytes,
            "soc_items": s.soc_items - ws.soc_items, "loc_items": s.loc_items - ws.loc_items,
        },
        "total": s,
        "soc": {
            "lookups": cache.soc.stats.lookups, "bloom_rejects": cache.soc.stats.bloom_rejects, "hits": cache.soc.stats.hits,
            "inserts": cache.soc.stats.inserts, "evictions": cache.soc.stats.evictions, "removes": cache.soc.stats.removes,
            "bucket_reads": cache.soc.stats.bucket_reads, "bucket_writes": cache.soc.stats.bucket_writes,
        },
        "loc": {
            "lookups": cache.loc.stats.lookups, "hits": cache.loc.stats.hits, "buffer_hits": cache.loc.stats.buffer_hits,
            "inserts": cache.loc.stats.inserts, "regions_flushed": cache.loc.stats.regions_flushed, "regions_evicted": cache.loc.stats.regions_evicted,
            "items_evicted": cache.loc.stats.items_evicted, "reinserted": cache.loc.stats.reinserted, "items": cache.loc.items(),
        },
        "dram_items": cache.dram.len(),
    })
}
