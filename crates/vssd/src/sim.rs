//! Timed multi-tenant runs: tenants (a KV store under a YCSB mix, a fio-like job or a trace on
//! a log-structured disk) each on its own vSSD, closed loop (a number of threads) or open loop
//! (Poisson arrivals or trace timestamps), soft-plane tenants behind their token buckets,
//! optionally a channel swap started at a given time. Events run in simulated-time order, so
//! every operation is placed on the dies' and channels' timelines in the order it happens and
//! tenants sharing a die or a channel delay each other exactly where they compete.
//!
//! Phases: each tenant loads its data (KV records, or a sequential fill of its disk), then
//! optionally ages it (random overwrites of `age_writes` times its vSSD's capacity, so
//! compaction is always active), one tenant after another; the run starts when the device is
//! idle again, warms up for `warmup_ms` and is measured for `duration_ms`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::config::WorkloadConfig;
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::metrics::{latency_histogram as hist, latency_summary, ratio, LatencyShape, MeanRounding};
use ssdlab_core::workload::trace::{TraceFormat, TraceReader};
use ssdlab_core::workload::{Cmd, Op, Source, Synthetic};
use ssdlab_core::Config;

use crate::apps::ycsb::KINDS as YCSB_KINDS;
use crate::apps::{
    KvStore, LevelKv, LevelKvConfig, LogDisk, LogKv, LogKvConfig, Put, Value as KvValue, WriteTicket, Ycsb, YcsbOp, YcsbSpec,
};
use crate::config::FlashBloxConfig;
use crate::error::{Result, VssdError};
use crate::flashblox::{BlockApi, FlashBlox, VssdIo};
use crate::limiter::{nominal, Capacity, Limiter, TokenBucket};
use crate::resources::{Isolation, Placement};

const MS: f64 = 1e6;

/// What a tenant runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AppSpec {
    /// A key-value store under a YCSB mix: the log-structured one (`store = "log"`, its
    /// settings in `kv`) or the LevelDB-like one (`store = "leveldb"`, settings in `leveldb`).
    Ycsb {
        #[serde(default)]
        ycsb: YcsbSpec,
        #[serde(default)]
        store: StoreKind,
        #[serde(default)]
        kv: LogKvConfig,
        #[serde(default)]
        leveldb: LevelKvConfig,
    },
    /// A fio-like job (ssdlab's workload keys: pattern, read_fraction, block_bytes, ...) on a
    /// log-structured disk of `disk_fraction` of the vSSD, filled sequentially first.
    Disk {
        #[serde(default)]
        io: WorkloadConfig,
        #[serde(default = "default_disk_fraction")]
        disk_fraction: f64,
    },
    /// A block trace (its own timestamps, open loop, sped up by `speed`) on such a disk.
    Trace {
        path: PathBuf,
        format: String,
        #[serde(default = "default_disk_fraction")]
        disk_fraction: f64,
        #[serde(default = "one")]
        speed: f64,
    },
}

/// The key-value store a YCSB tenant runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Log,
    Leveldb,
}

fn default_disk_fraction() -> f64 {
    0.75
}
fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantSpec {
    pub name: String,
    pub level: Isolation,
    pub tput_level: u32,
    pub capacity_bytes: u64,
    pub placement: Placement,
    /// Soft-plane vSSDs: the tenant's share of its dies' nominal capacity (token bucket);
    /// 0 = no limiter.
    pub weight: f64,
    /// Bucket depth in ms of the region's time.
    pub burst_ms: f64,
    /// Closed loop: operations in flight.
    pub threads: u32,
    /// Open loop: Poisson arrivals per second (0 = closed loop).
    pub rate_ops: f64,
    /// Random overwrites before the run, in multiples of the vSSD's capacity.
    pub age_writes: f64,
    pub app: AppSpec,
}

impl Default for TenantSpec {
    fn default() -> Self {
        TenantSpec {
            name: "tenant".into(),
            level: Isolation::Channel,
            tput_level: 0,
            capacity_bytes: 0,
            placement: Placement::default(),
            weight: 0.0,
            burst_ms: 1.0,
            threads: 8,
            rate_ops: 0.0,
            age_writes: 0.0,
            app: AppSpec::Ycsb {
                ycsb: YcsbSpec::default(),
                store: StoreKind::Log,
                kv: LogKvConfig::default(),
                leveldb: LevelKvConfig::default(),
            },
        }
    }
}

/// A swap forced at a given time (the migration experiment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForcedSwap {
    /// Milliseconds after the measured window opens.
    pub at_ms: f64,
    pub channels: (u32, u32),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub flashblox: FlashBloxConfig,
    pub tenants: Vec<TenantSpec>,
    pub warmup_ms: f64,
    pub duration_ms: f64,
    /// Rows of the per-tenant time series (interval throughput and p99).
    pub series_ms: f64,
    pub swap: Option<ForcedSwap>,
    /// Limited tenants lend each other the tokens they cannot use (see `limiter.rs`).
    pub limiter_borrow: bool,
    pub seed: u64,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            flashblox: FlashBloxConfig::default(),
            tenants: vec![],
            warmup_ms: 200.0,
            duration_ms: 1000.0,
            series_ms: 0.0,
            swap: None,
            limiter_borrow: true,
            seed: 42,
        }
    }
}

enum App {
    Kv {
        kv: Box<dyn KvStore>,
        gen: Ycsb,
        value_bytes: u32,
    },
    Disk {
        disk: LogDisk,
        gen: Synthetic,
    },
    Trace {
        disk: LogDisk,
        reader: TraceReader<std::io::BufReader<std::fs::File>>,
        speed: f64,
        next: Option<Cmd>,
        queue: VecDeque<Cmd>,
        base_ns: u64,
    },
}

struct Tenant {
    spec: TenantSpec,
    id: u32,
    app: App,
    kinds: &'static [&'static str],
    hists: Vec<Histogram<u64>>,
    all: Histogram<u64>,
    interval: Histogram<u64>,
    ops: u64,
    app_read_bytes: u64,
    app_write_bytes: u64,
    cap: Capacity,
    limiter_wait_ns: u64,
    rng: Pcg64Mcg,
    series: Vec<(f64, u64, u64)>,
    interval_ops: u64,
    /// When this tenant's next background event is queued (a store with background work).
    bg_at: Option<u64>,
}

impl Tenant {
    /// The time to queue a background event for, if the store has work due before the one
    /// queued (at or after `t`).
    fn background_due(&mut self, t: u64) -> Option<u64> {
        let App::Kv { kv, .. } = &self.app else { return None };
        let at = kv.next_background()?.max(t);
        if self.bg_at.is_some_and(|b| b <= at) {
            return None;
        }
        self.bg_at = Some(at);
        Some(at)
    }
}

/// A key-value operation part way: a read-modify-write's write, or a write held by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    op: YcsbOp,
    /// What remains is the write.
    write: bool,
    ticket: WriteTicket,
}

/// What an operation came to: done (kind index, completion), or to go on at a time.
enum Outcome {
    Done(usize, u64),
    Again(u64, Pending),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A tenant's operation: (tenant, arrival time, its state if it is part way).
    Op(usize, u64, Option<Pending>),
    /// A tenant's store has background work due.
    Background(usize),
    /// The next Poisson arrival of an open-loop tenant.
    Arrive(usize),
    Migrate,
    SwapStart,
    Sample,
}

/// The result of a run: summary (deterministic) and wall seconds.
pub struct RunResult {
    pub summary: Value,
    pub wall_seconds: f64,
    pub interrupted: bool,
}

/// How far a run is, for `stop`: the simulated time reached over the time the whole run will
/// take. Simulated time starts at 0 with the tenants' set-up (loading and ageing, one tenant
/// after the other, its length estimated from the share of their writes done so far); the
/// measured run then ends at a known time.
struct Progress<'a> {
    stop: &'a mut dyn FnMut(f64) -> bool,
    /// Warm-up and measured run, ns.
    run_ns: f64,
    tenants: usize,
    /// The tenant being set up.
    tenant: usize,
    /// Writes of the set-up, to ask `stop` every so many.
    writes: u64,
}

impl Progress<'_> {
    /// The tenant being set up has done `frac` of its writes, at simulated time `t`; false
    /// stops the run.
    fn setup(&mut self, frac: f64, t: u64) -> bool {
        self.writes += 1;
        if !self.writes.is_multiple_of(4096) {
            return true;
        }
        let done = (self.tenant as f64 + frac.clamp(0.0, 1.0)) / self.tenants as f64;
        let setup_ns = if done > 0.0 { t as f64 / done } else { f64::INFINITY };
        (self.stop)(t as f64 / (setup_ns + self.run_ns))
    }
}

fn interrupted_in_setup(wall: Instant) -> RunResult {
    RunResult { summary: json!({"interrupted": true, "phase": "setup"}), wall_seconds: wall.elapsed().as_secs_f64(), interrupted: true }
}

/// A timed run of `spec`'s tenants on `device`. `stop` hears how far the run is (0..1, see
/// `Progress`) every few thousand operations; false stops it (`interrupted` in the result).
pub fn run(device: &Config, spec: &RunSpec, stop: &mut dyn FnMut(f64) -> bool) -> Result<RunResult> {
    let wall = Instant::now();
    check_spec(device, spec)?;
    let mut fb = FlashBlox::new(device, spec.flashblox.clone())?;
    let Some((tenants, t_ready)) = setup_tenants(&mut fb, device, spec, stop)? else {
        return Ok(interrupted_in_setup(wall));
    };
    let mut sim = Sim::new(spec, fb, tenants, t_ready);
    sim.first_events();
    let interrupted = sim.events(stop)?;
    let summary = sim.summary(interrupted);
    Ok(RunResult { summary, wall_seconds: wall.elapsed().as_secs_f64(), interrupted })
}

/// What a timed run needs of its spec and device.
fn check_spec(device: &Config, spec: &RunSpec) -> Result<()> {
    if spec.tenants.is_empty() {
        return Err(VssdError::Config("run: no tenants".into()));
    }
    if !(spec.duration_ms > 0.0) || spec.warmup_ms < 0.0 {
        return Err(VssdError::Config("run: duration_ms > 0 and warmup_ms >= 0".into()));
    }
    if !device.timing.enabled {
        return Err(VssdError::Config("run: timed runs need timing.enabled = true".into()));
    }
    Ok(())
}

/// Set up every tenant, one after the other; returns them and when the last one's loading
/// finished (None: `stop` stopped the set-up).
fn setup_tenants(
    fb: &mut FlashBlox,
    device: &Config,
    spec: &RunSpec,
    stop: &mut dyn FnMut(f64) -> bool,
) -> Result<Option<(Vec<Tenant>, u64)>> {
    let mut tenants = Vec::with_capacity(spec.tenants.len());
    let mut t_ready = 0u64;
    let mut progress =
        Progress { stop: &mut *stop, run_ns: (spec.warmup_ms + spec.duration_ms) * MS, tenants: spec.tenants.len(), tenant: 0, writes: 0 };
    for (i, ts) in spec.tenants.iter().enumerate() {
        progress.tenant = i;
        let Some((t, ready)) = setup(fb, device, ts, spec.seed.wrapping_add(i as u64 * 0x9e37_79b9), t_ready, &mut progress)? else {
            return Ok(None);
        };
        t_ready = t_ready.max(ready);
        tenants.push(t);
    }
    Ok(Some((tenants, t_ready)))
}

/// The event queue in simulated-time order; events at the same time in the order queued.
struct Events {
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
}

impl Events {
    fn push(&mut self, t: u64, e: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, e)));
    }
}

/// A run after set-up: the layer, the tenants, their token buckets, the event queue and the
/// measured window.
struct Sim<'s> {
    spec: &'s RunSpec,
    fb: FlashBlox,
    tenants: Vec<Tenant>,
    limiter: Limiter,
    queue: Events,
    start: u64,
    measure: u64,
    end: u64,
    series_ns: u64,
    /// Each physical die's busy time before the measured window opens (what was booked then
    /// but lies later counts in the window, as it should).
    busy_at_measure: Option<Vec<u64>>,
    migrate_pending: bool,
    swap_window: Option<(u64, u64)>,
}

impl<'s> Sim<'s> {
    /// The run starts when the tenants are set up and the device is idle.
    fn new(spec: &'s RunSpec, fb: FlashBlox, tenants: Vec<Tenant>, t_ready: u64) -> Sim<'s> {
        let limiter = Limiter::new(
            spec.tenants.iter().map(|t| (t.weight > 0.0).then(|| TokenBucket::new(t.weight, t.burst_ms * MS))).collect(),
            spec.limiter_borrow,
        );
        let start = t_ready.max(fb.device().timelines().horizon_ns());
        let measure = start + (spec.warmup_ms * MS) as u64;
        let end = measure + (spec.duration_ms * MS) as u64;
        Sim {
            spec,
            fb,
            tenants,
            limiter,
            queue: Events { heap: BinaryHeap::new(), seq: 0 },
            start,
            measure,
            end,
            series_ns: 0,
            busy_at_measure: None,
            migrate_pending: false,
            swap_window: None,
        }
    }

    /// Queue each tenant's first arrivals or threads (and background work), the forced swap
    /// and the first time-series sample.
    fn first_events(&mut self) {
        let start = self.start;
        for (i, t) in self.tenants.iter_mut().enumerate() {
            match &mut t.app {
                App::Trace { next, base_ns, speed, .. } => {
                    *base_ns = start;
                    let at = start + (next.expect("first command").at_ns.unwrap_or(0) as f64 / *speed) as u64;
                    self.queue.push(at, Ev::Arrive(i));
                }
                _ if t.spec.rate_ops > 0.0 => self.queue.push(start, Ev::Arrive(i)),
                _ => {
                    for _ in 0..t.spec.threads.max(1) {
                        self.queue.push(start, Ev::Op(i, start, None));
                    }
                }
            }
            if let Some(at) = t.background_due(start) {
                self.queue.push(at, Ev::Background(i));
            }
        }
        if let Some(sw) = &self.spec.swap {
            self.queue.push(self.measure + (sw.at_ms * MS) as u64, Ev::SwapStart);
        }
        self.series_ns = (self.spec.series_ms * MS) as u64;
        if self.series_ns > 0 {
            self.queue.push(self.measure + self.series_ns, Ev::Sample);
        }
    }

    /// Run events in time order until the end of the measured window; returns whether `stop`
    /// interrupted the run.
    fn events(&mut self, stop: &mut dyn FnMut(f64) -> bool) -> Result<bool> {
        let mut events = 0u64;
        while let Some(Reverse((t, _, ev))) = self.queue.heap.pop() {
            if t >= self.end {
                break;
            }
            events += 1;
            if events.is_multiple_of(4096) && !stop(t as f64 / self.end as f64) {
                return Ok(true);
            }
            if self.busy_at_measure.is_none() && t >= self.measure {
                self.busy_at_measure = Some(self.fb.device().timelines().die_busy_before_ns(self.measure));
            }
            self.fb.device_mut().set_now(t);
            let ran = match ev {
                Ev::Op(i, arrival, pending) => self.op(t, i, arrival, pending)?,
                Ev::Background(i) => self.background(t, i)?,
                Ev::Arrive(i) => self.arrive(t, i)?,
                Ev::Migrate => {
                    self.migrate_pending = false;
                    self.fb.migration_step(t)?;
                    if !self.fb.swapping() {
                        if let Some(w) = self.swap_window.as_mut() {
                            w.1 = t;
                        }
                    }
                    true
                }
                Ev::SwapStart => {
                    let sw = self.spec.swap.as_ref().expect("forced swap");
                    self.fb.start_swap(sw.channels.0, sw.channels.1, t)?;
                    self.swap_window = Some((t, u64::MAX));
                    true
                }
                Ev::Sample => self.sample(t),
            };
            if !ran {
                continue;
            }
            if self.fb.swapping() && !self.migrate_pending {
                let at = self.fb.migration_next_ns().unwrap_or(t).max(t);
                self.queue.push(at, Ev::Migrate);
                self.migrate_pending = true;
            }
        }
        Ok(false)
    }

    /// One operation of tenant `i` (arrived at `arrival`), once its token bucket lets it go;
    /// false: it waits for the bucket (nothing else happens at this event).
    fn op(&mut self, t: u64, i: usize, arrival: u64, pending: Option<Pending>) -> Result<bool> {
        let tn = &mut self.tenants[i];
        let ready = self.limiter.ready(i, t);
        if ready > t {
            tn.limiter_wait_ns += ready - t;
            self.queue.push(ready, Ev::Op(i, arrival, pending));
            return Ok(false);
        }
        let outcome = charged(&mut self.fb, &mut self.limiter, i, tn, t, |fb, tn| do_op(fb, tn, t, pending))?;
        match outcome {
            Outcome::Again(at, p) => self.queue.push(at.max(t), Ev::Op(i, arrival, Some(p))),
            Outcome::Done(kind, done) => {
                if arrival >= self.measure {
                    let lat = (done - arrival).max(1);
                    tn.hists[kind].record(lat).expect("latency in range");
                    tn.all.record(lat).expect("latency in range");
                    tn.interval.record(lat).expect("latency in range");
                    tn.ops += 1;
                    tn.interval_ops += 1;
                }
                if tn.spec.rate_ops <= 0.0 && !matches!(tn.app, App::Trace { .. }) {
                    self.queue.push(done.max(t), Ev::Op(i, done.max(t), None));
                }
            }
        }
        if let Some(at) = tn.background_due(t) {
            self.queue.push(at, Ev::Background(i));
        }
        Ok(true)
    }

    /// Tenant `i`'s store runs its background work; false: the event was superseded by an
    /// earlier one.
    fn background(&mut self, t: u64, i: usize) -> Result<bool> {
        let tn = &mut self.tenants[i];
        if tn.bg_at != Some(t) {
            return Ok(false); // superseded by an earlier one
        }
        tn.bg_at = None;
        charged(&mut self.fb, &mut self.limiter, i, tn, t, |fb, tn| match &mut tn.app {
            App::Kv { kv, .. } => kv.run_background(&mut VssdIo { fb, id: tn.id }, t),
            _ => Ok(()),
        })?;
        if let Some(at) = tn.background_due(t) {
            self.queue.push(at, Ev::Background(i));
        }
        Ok(true)
    }

    /// An open-loop arrival of tenant `i`: its operation now, and the next arrival (the
    /// trace's next command, starting the trace over at its end, or a Poisson gap).
    fn arrive(&mut self, t: u64, i: usize) -> Result<bool> {
        let tn = &mut self.tenants[i];
        self.queue.push(t, Ev::Op(i, t, None));
        let next_at = match &mut tn.app {
            App::Trace { reader, speed, next, queue, base_ns, disk } => {
                queue.push_back(next.take().expect("an arrived command"));
                let sectors = disk.sectors();
                let mut c = reader.next_cmd().transpose()?;
                if c.is_none() {
                    // The trace starts over.
                    *base_ns = t + 1;
                    *reader = TraceReader::open(reader_path(&tn.spec), reader.format(), self.fb.geo().sector_bytes, sectors)?;
                    c = reader.next_cmd().transpose()?;
                }
                *next = c;
                c.map(|c| (*base_ns + (c.at_ns.unwrap_or(0) as f64 / *speed) as u64).max(t))
            }
            _ => {
                let gap = -(1.0 - tn.rng.gen::<f64>()).ln() / tn.spec.rate_ops * 1e9;
                Some(t + gap.max(1.0) as u64)
            }
        };
        if let Some(n) = next_at {
            self.queue.push(n, Ev::Arrive(i));
        }
        Ok(true)
    }

    /// A row of every tenant's time series (interval throughput and p99), and the next sample.
    fn sample(&mut self, t: u64) -> bool {
        for tn in self.tenants.iter_mut() {
            let p99 = if tn.interval.is_empty() { 0 } else { tn.interval.value_at_quantile(0.99) };
            tn.series.push(((t - self.measure) as f64 / MS, tn.interval_ops, p99));
            tn.interval.reset();
            tn.interval_ops = 0;
        }
        self.queue.push(t + self.series_ns, Ev::Sample);
        true
    }

    /// The run's summary: window, tenants, the layer, the swap window, the device's work and
    /// its dies' utilisation over the measured window.
    fn summary(&self, interrupted: bool) -> Value {
        let (start, measure, end) = (self.start, self.measure, self.end);
        let fb = &self.fb;
        let secs = self.spec.duration_ms / 1e3;
        let busy = fb.device().timelines().die_busy_before_ns(end);
        let from = self.busy_at_measure.clone().unwrap_or_else(|| busy.clone());
        let die_utilization: Vec<f64> = busy.iter().zip(&from).map(|(b, a)| (b - a) as f64 / (end - measure) as f64).collect();
        let tenants_json: Vec<Value> =
            self.tenants.iter().enumerate().map(|(i, t)| tenant_json(fb, t, secs, self.limiter.bucket(i))).collect();
        let c = fb.device().counters().clone();
        json!({
            "start_ns": start,
            "measure_ns": measure,
            "end_ns": end,
            "duration_s": secs,
            "tenants": tenants_json,
            "flashblox": fb.summary(),
            "swap_window_ms": self.swap_window.map(|(a, b)| [(a as f64 - measure as f64) / MS, if b == u64::MAX { f64::NAN } else { (b as f64 - measure as f64) / MS }]),
            "device": {"nand_write_bytes": c.nand_write_bytes, "nand_read_bytes": c.nand_read_bytes, "nand_erase_count": c.nand_erase_count,
                       "die_busy_fraction": busy.iter().sum::<u64>() as f64 / (end as f64 * fb.geo().dies as f64),
                       "die_utilization": die_utilization},
            "interrupted": interrupted,
        })
    }
}

/// Run `f` (tenant `i`'s work at `t`) and charge the tenant's token bucket for the device
/// reads and writes it issued on its vSSD.
fn charged<R>(
    fb: &mut FlashBlox,
    limiter: &mut Limiter,
    i: usize,
    tn: &mut Tenant,
    t: u64,
    f: impl FnOnce(&mut FlashBlox, &mut Tenant) -> Result<R>,
) -> Result<R> {
    let before = fb.vssd(tn.id)?.stats;
    let r = f(fb, tn)?;
    let after = fb.vssd(tn.id)?.stats;
    limiter.charge(i, t, tn.cap.cost_ns(after.read_bytes - before.read_bytes, after.write_bytes - before.write_bytes));
    Ok(r)
}

fn reader_path(spec: &TenantSpec) -> &std::path::Path {
    match &spec.app {
        AppSpec::Trace { path, .. } => path,
        _ => unreachable!("a trace tenant"),
    }
}

/// Allocate the tenant's vSSD, build its application, load (and age) its data from `t0`;
/// returns the tenant and when its loading finished (None: `progress` stopped it).
fn setup(
    fb: &mut FlashBlox,
    device: &Config,
    ts: &TenantSpec,
    seed: u64,
    t0: u64,
    progress: &mut Progress<'_>,
) -> Result<Option<(Tenant, u64)>> {
    let id = fb.alloc_virtual_ssd(ts.level, ts.tput_level, ts.capacity_bytes.max(1), &ts.placement)?;
    let g = *fb.geo();
    let ldies = fb.vssd(id)?.ldies();
    let chans = {
        let mut c: Vec<u32> = ldies.iter().map(|d| d / g.dies_per_channel).collect();
        c.dedup();
        c.len() as u32
    };
    let cap = nominal(device, ldies.len() as u32, chans);
    if ts.weight < 0.0 || ts.weight > 1.0 || !(ts.burst_ms >= 0.0) {
        return Err(VssdError::Config(format!("tenant {}: weight {} must be in [0, 1] and burst_ms >= 0", ts.name, ts.weight)));
    }
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut io = VssdIo { fb, id };
    let cap_sectors = io.blocks() as u64 * io.block_sectors() as u64;
    let mut t = t0;
    let (app, kinds): (App, &'static [&'static str]) = match &ts.app {
        AppSpec::Ycsb { ycsb, store, kv, leveldb } => {
            let mut store: Box<dyn KvStore> = match store {
                StoreKind::Log => Box::new(LogKv::new(&io, kv.clone())?),
                StoreKind::Leveldb => Box::new(LevelKv::new(&io, leveldb.clone())?),
            };
            let gen = Ycsb::new(ycsb.clone(), seed)?;
            let value = KvValue::Len(ycsb.value_bytes);
            // The set-up's writes: loading (a value per record), then ageing (device bytes).
            let age_bytes = (ts.age_writes.max(0.0) * cap_sectors as f64 * io.sector_bytes() as f64) as u64;
            let load_bytes = ycsb.records as f64 * ycsb.value_bytes as f64;
            let total = (load_bytes + age_bytes as f64).max(1.0);
            for (n, k) in gen.load_keys().enumerate() {
                t = store.put(&mut io, k, value, t)?;
                if !progress.setup(n as f64 * ycsb.value_bytes as f64 / total, t) {
                    return Ok(None);
                }
            }
            let aged_from = store.stats().device_write_bytes;
            let target = aged_from + age_bytes;
            while store.stats().device_write_bytes < target {
                let k = crate::apps::ycsb::key_of(rng.gen_range(0..ycsb.records));
                t = store.put(&mut io, k, value, t)?;
                if !progress.setup((load_bytes + (store.stats().device_write_bytes - aged_from) as f64) / total, t) {
                    return Ok(None);
                }
            }
            (App::Kv { kv: store, gen, value_bytes: ycsb.value_bytes }, &YCSB_KINDS)
        }
        AppSpec::Disk { io: w, disk_fraction } => {
            let mut disk = LogDisk::new(&io, (cap_sectors as f64 * disk_fraction) as u64, 2, 8)?;
            let age_sectors = ts.age_writes.max(0.0) * cap_sectors as f64;
            let total = disk.sectors() as f64 + age_sectors;
            let Some(filled) = fill(&mut disk, &mut io, t, &mut |n, t| progress.setup(n / total, t))? else {
                return Ok(None);
            };
            t = filled;
            let fill_sectors = disk.sectors() as f64;
            match age(&mut disk, &mut io, &mut rng, age_sectors, t, &mut |n, t| progress.setup((fill_sectors + n) / total, t))? {
                Some(aged) => t = aged,
                None => return Ok(None),
            }
            let gen = Synthetic::new(w, disk.sectors(), g.sector_bytes, seed).map_err(VssdError::Device)?;
            (App::Disk { disk, gen }, &["read", "write", "trim", "flush"])
        }
        AppSpec::Trace { path, format, disk_fraction, speed } => {
            let fmt = TraceFormat::parse(format)
                .ok_or_else(|| VssdError::Config(format!("tenant {}: unknown trace format {format:?}", ts.name)))?;
            if !(*speed > 0.0) {
                return Err(VssdError::Config(format!("tenant {}: speed must be > 0", ts.name)));
            }
            let mut disk = LogDisk::new(&io, (cap_sectors as f64 * disk_fraction) as u64, 2, 8)?;
            let total = disk.sectors() as f64;
            match fill(&mut disk, &mut io, t, &mut |n, t| progress.setup(n / total, t))? {
                Some(filled) => t = filled,
                None => return Ok(None),
            }
            let mut reader = TraceReader::open(path, fmt, g.sector_bytes, disk.sectors())?;
            let next = reader.next_cmd().transpose()?;
            if next.is_none() {
                return Err(VssdError::Config(format!("{}: the trace has no commands", path.display())));
            }
            (App::Trace { disk, reader, speed: *speed, next, queue: VecDeque::new(), base_ns: 0 }, &["read", "write", "trim", "flush"])
        }
    };
    let n = kinds.len();
    Ok(Some((
        Tenant {
            spec: ts.clone(),
            id,
            app,
            kinds,
            hists: (0..n).map(|_| hist()).collect(),
            all: hist(),
            interval: hist(),
            ops: 0,
            app_read_bytes: 0,
            app_write_bytes: 0,
            cap,
            limiter_wait_ns: 0,
            rng,
            series: vec![],
            interval_ops: 0,
            bg_at: None,
        },
        t,
    )))
}

/// Write the whole disk once, in order (1 MiB requests); `go` hears the sectors written and the
/// time after each request (false stops: None).
fn fill(disk: &mut LogDisk, io: &mut VssdIo<'_>, mut t: u64, go: &mut dyn FnMut(f64, u64) -> bool) -> Result<Option<u64>> {
    let step = (1 << 20) / io.sector_bytes() as u64;
    let mut lba = 0;
    while lba < disk.sectors() {
        let n = step.min(disk.sectors() - lba) as u32;
        t = disk.write(io, lba, n, None, t)?;
        lba += n as u64;
        if !go(lba as f64, t) {
            return Ok(None);
        }
    }
    Ok(Some(t))
}

/// Random 64 KiB overwrites of `sectors` sectors in all; `go` as for `fill`.
fn age(
    disk: &mut LogDisk,
    io: &mut VssdIo<'_>,
    rng: &mut Pcg64Mcg,
    sectors: f64,
    mut t: u64,
    go: &mut dyn FnMut(f64, u64) -> bool,
) -> Result<Option<u64>> {
    let n = ((64 << 10) / io.sector_bytes()).min(disk.sectors() as u32);
    let mut done = 0.0;
    while done < sectors {
        let lba = rng.gen_range(0..=disk.sectors() - n as u64);
        t = disk.write(io, lba, n, None, t)?;
        done += n as f64;
        if !go(done, t) {
            return Ok(None);
        }
    }
    Ok(Some(t))
}

/// One operation of tenant `tn` at `t` (or the rest of one part way).
fn do_op(fb: &mut FlashBlox, tn: &mut Tenant, t: u64, pending: Option<Pending>) -> Result<Outcome> {
    let mut io = VssdIo { fb, id: tn.id };
    let sb = io.sector_bytes() as u64;
    match &mut tn.app {
        App::Kv { kv, gen, value_bytes } => {
            let mut p = pending.unwrap_or_else(|| Pending { op: gen.next_op(), write: false, ticket: WriteTicket::default() });
            let v = KvValue::Len(*value_bytes);
            let done = match p.op {
                YcsbOp::Read(k) => {
                    tn.app_read_bytes += *value_bytes as u64;
                    kv.get(&mut io, k, None, t)?.1
                }
                YcsbOp::Scan(k, n) => kv.scan(&mut io, k, n, t)?.1,
                // A read-modify-write's write is issued when its read completes.
                YcsbOp::ReadModifyWrite(k) if !p.write => {
                    tn.app_read_bytes += *value_bytes as u64;
                    let (_, r) = kv.get(&mut io, k, None, t)?;
                    return Ok(Outcome::Again(r.max(t), Pending { write: true, ..p }));
                }
                YcsbOp::Update(k) | YcsbOp::Insert(k) | YcsbOp::ReadModifyWrite(k) => match kv.try_put(&mut io, k, v, t, &mut p.ticket)? {
                    Put::Done(done) => {
                        tn.app_write_bytes += *value_bytes as u64;
                        done
                    }
                    Put::Held(at) => return Ok(Outcome::Again(at, Pending { write: true, ..p })),
                },
            };
            Ok(Outcome::Done(p.op.kind(), done))
        }
        App::Disk { disk, gen } => {
            let c = gen.generate();
            disk_op(disk, &mut io, c, t, sb, &mut tn.app_read_bytes, &mut tn.app_write_bytes)
        }
        App::Trace { disk, queue, .. } => {
            let c = queue.pop_front().expect("an arrived trace command");
            disk_op(disk, &mut io, c, t, sb, &mut tn.app_read_bytes, &mut tn.app_write_bytes)
        }
    }
}

fn disk_op(disk: &mut LogDisk, io: &mut VssdIo<'_>, c: Cmd, t: u64, sb: u64, rb: &mut u64, wb: &mut u64) -> Result<Outcome> {
    let n = c.sectors.min((disk.sectors() - c.lba.min(disk.sectors() - 1)) as u32);
    if n == 0 && c.op != Op::Flush {
        return Ok(Outcome::Done(c.op as usize, t));
    }
    let (kind, done) = match c.op {
        Op::Read => {
            *rb += n as u64 * sb;
            (0, disk.read(io, c.lba, n, None, t)?)
        }
        Op::Write => {
            *wb += n as u64 * sb;
            (1, disk.write(io, c.lba, n, None, t)?)
        }
        Op::Trim => {
            disk.trim(c.lba, n)?;
            (2, t)
        }
        Op::Flush => (3, t),
    };
    Ok(Outcome::Done(kind, done))
}

fn lat_json(h: &Histogram<u64>) -> Value {
    const SHAPE: LatencyShape =
        LatencyShape { quantiles: &[0.5, 0.99, 0.999], unit: "_us", mean: MeanRounding::Exact, min: false, empty_is_count: true };
    Value::Object(latency_summary(h, &SHAPE))
}

fn tenant_json(fb: &FlashBlox, t: &Tenant, secs: f64, bucket: Option<&TokenBucket>) -> Value {
    let v = fb.vssd(t.id).expect("live vSSD");
    let g = fb.geo();
    let app = match &t.app {
        App::Kv { kv, .. } => {
            let s = kv.stats();
            json!({"kind": "kv", "stats": s, "details": kv.details(),
                   "app_write_amplification": ratio(s.device_write_bytes, s.app_write_bytes)})
        }
        App::Disk { disk, .. } | App::Trace { disk, .. } => {
            let s = disk.stats();
            json!({"kind": "disk", "stats": s, "utilization": disk.utilization(),
                   "app_write_amplification": ratio(s.device_write_bytes, s.host_write_bytes)})
        }
    };
    let mut lat = serde_json::Map::new();
    for (k, h) in t.kinds.iter().zip(&t.hists) {
        if !h.is_empty() {
            lat.insert(k.to_string(), lat_json(h));
        }
    }
    lat.insert("all".into(), lat_json(&t.all));
    json!({
        "name": t.spec.name,
        "level": t.spec.level,
        "vssd": t.id,
        "slots": v.slots.len(),
        "logical_dies": v.ldies(),
        "physical_dies": fb.physical_dies(t.id).expect("live vSSD"),
        "capacity_bytes": v.capacity(g),
        "ops": t.ops,
        "ops_per_s": t.ops as f64 / secs,
        "read_mb_per_s": t.app_read_bytes as f64 / secs / 1e6,
        "write_mb_per_s": t.app_write_bytes as f64 / secs / 1e6,
        "latency": lat,
        "app": app,
        "vssd_stats": v.stats,
        "limiter": bucket.map(|b| json!({"weight": b.rate, "wait_ms": t.limiter_wait_ns as f64 / MS})),
        "series": t.series.iter().map(|s| json!([s.0, s.1, s.2 as f64 / 1e3])).collect::<Vec<_>>(),
        "pattern": match &t.spec.app { AppSpec::Disk { io, .. } => json!({"pattern": io.pattern, "read_fraction": io.read_fraction, "block_bytes": io.block_bytes}), _ => Value::Null },
    })
}
