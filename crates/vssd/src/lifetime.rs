//! Block-level wear studies: tenants write whole blocks (or replay block traces through a
//! log-structured disk) at rates given in weeks, on a device without timing, until the device
//! loses a die's worth of reserve to worn-out blocks or the time is up. Wear-levelling swaps
//! run as they would (migrations are carried out at once: the study is about wear, and a swap
//! takes minutes of weeks).
//!
//! Rates are fractions of M, the erase rate at which a perfectly levelled device lasts
//! `ideal_years`: M = (good chunks x P/E limit x chunk bytes) / ideal weeks. A tenant with
//! `write_share` 1 writes M bytes a week (the document's worst case: all writes on one
//! channel); cold tenants hold data and write nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::workload::trace::{TraceFormat, TraceReader};
use ssdlab_core::workload::{Cmd, Op, Source};
use ssdlab_core::Config;

use crate::analysis::WEEKS_PER_YEAR;
use crate::apps::LogDisk;
use crate::config::FlashBloxConfig;
use crate::error::{Result, VssdError};
use crate::flashblox::{FlashBlox, VssdIo};
use crate::resources::{Isolation, Placement};

pub const WEEK_NS: u64 = 7 * 24 * 3600 * 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceTenant {
    pub path: PathBuf,
    pub format: String,
    /// Simulated time per second of trace time (the trace is sped up or slowed down to the
    /// study's weeks), and the trace repeats when it ends.
    pub weeks_per_trace_second: f64,
    /// The disk's size as a share of the vSSD (the rest is cleaning room).
    pub disk_fraction: f64,
}

impl Default for TraceTenant {
    fn default() -> Self {
        TraceTenant { path: PathBuf::new(), format: "msr".into(), weeks_per_trace_second: 0.001, disk_fraction: 0.8 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifetimeTenant {
    pub name: String,
    pub level: Isolation,
    pub tput_level: u32,
    pub capacity_bytes: u64,
    pub placement: Placement,
    /// Bytes written a week, as a share of M.
    pub write_share: f64,
    /// Share of the vSSD's blocks holding data (the oldest block is freed to make room).
    pub fill: f64,
    /// Replay a block trace instead (through a log-structured disk on the vSSD).
    pub trace: Option<TraceTenant>,
}

impl Default for LifetimeTenant {
    fn default() -> Self {
        LifetimeTenant {
            name: "tenant".into(),
            level: Isolation::Channel,
            tput_level: 0,
            capacity_bytes: 0,
            placement: Placement::default(),
            write_share: 0.0,
            fill: 1.0,
            trace: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifetimeSpec {
    pub flashblox: FlashBloxConfig,
    pub tenants: Vec<LifetimeTenant>,
    /// Sets M (see the module docs).
    pub ideal_years: f64,
    /// Stop here if the device lives that long.
    pub max_weeks: f64,
    /// Time-series interval.
    pub sample_weeks: f64,
    pub seed: u64,
}

impl Default for LifetimeSpec {
    fn default() -> Self {
        LifetimeSpec {
            flashblox: FlashBloxConfig::default(),
            tenants: vec![],
            ideal_years: 5.0,
            max_weeks: 400.0,
            sample_weeks: 1.0,
            seed: 42,
        }
    }
}

/// The erase budget of a device (bytes it can erase before every good block is worn out).
pub fn erase_budget_bytes(fb: &FlashBlox, pe_limit: u32) -> f64 {
    let good = (0..fb.device().chunks()).filter(|&c| fb.device().chunk(c).state != ssdlab_core::ftl::ocssd::ChunkState::Offline).count();
    good as f64 * pe_limit as f64 * fb.geo().chunk_bytes as f64
}

#[allow(clippy::large_enum_variant)] // one per tenant, a handful per study
enum Work {
    Log {
        live: VecDeque<u32>,
        keep: u32,
        interval_ns: f64,
        next: f64,
    },
    Trace {
        disk: LogDisk,
        reader: TraceReader<std::io::BufReader<std::fs::File>>,
        spec: TraceTenant,
        base_ns: u64,
        pending: Option<(u64, Cmd)>,
    },
}

struct Tenant {
    id: u32,
    work: Work,
    written_bytes: u64,
}

/// One study; returns the summary (deterministic) and the wall seconds it took, of which the
/// migrations' share is in the summary's `cpu` section only as a fraction.
pub fn run(device: Config, spec: &LifetimeSpec, stop: &mut dyn FnMut(f64) -> bool) -> Result<(Value, f64)> {
    let wall = Instant::now();
    if spec.tenants.is_empty() || !(spec.ideal_years > 0.0) || !(spec.max_weeks > 0.0) || !(spec.sample_weeks > 0.0) {
        return Err(VssdError::Config("lifetime: tenants, and positive ideal_years, max_weeks, sample_weeks".into()));
    }
    let mut dev = device;
    dev.timing.enabled = false;
    let pe = dev.media.pe_limit;
    let mut fb = FlashBlox::new(&dev, spec.flashblox.clone())?;
    let budget = erase_budget_bytes(&fb, pe);
    let ideal_weeks_at_m = spec.ideal_years * WEEKS_PER_YEAR;
    let m_bytes_per_week = budget / ideal_weeks_at_m;
    let mut tenants = vec![];
    for t in &spec.tenants {
        tenants.push(setup_tenant(&mut fb, t, m_bytes_per_week)?);
    }
    let end = simulate(&mut fb, &mut tenants, spec, stop)?;
    Ok(summary(&fb, spec, &tenants, m_bytes_per_week, budget, end, wall))
}

/// Allocate tenant `t`'s vSSD and set up its work: fill it with cold data and write a block
/// every so often, or open its trace on a log-structured disk.
fn setup_tenant(fb: &mut FlashBlox, t: &LifetimeTenant, m_bytes_per_week: f64) -> Result<Tenant> {
    let g = *fb.geo();
    let id = fb.alloc_virtual_ssd(t.level, t.tput_level, t.capacity_bytes.max(1), &t.placement)?;
    let v = fb.vssd(id)?;
    let block_bytes = v.block_sectors(&g) as u64 * g.sector_bytes as u64;
    let blocks = v.blocks;
    let work = match &t.trace {
        None => {
            if !(0.0..=1.0).contains(&t.fill) {
                return Err(VssdError::Config(format!("tenant {}: fill {} is out of range 0 to 1", t.name, t.fill)));
            }
            let keep = ((blocks as f64 * t.fill).round() as u32).clamp(1, blocks.saturating_sub(1).max(1));
            let rate = t.write_share * m_bytes_per_week / block_bytes as f64; // blocks a week
            let interval_ns = if rate > 0.0 { WEEK_NS as f64 / rate } else { f64::INFINITY };
            // Fill with (cold) data first.
            let mut live = VecDeque::new();
            for _ in 0..keep {
                let b = fb.alloc_block(id)?;
                fb.write_data(id, b, 0, v_sectors(fb, id), None, 0)?;
                live.push_back(b);
            }
            Work::Log { live, keep, interval_ns, next: interval_ns }
        }
        Some(ts) => {
            let fmt = TraceFormat::parse(&ts.format)
                .ok_or_else(|| VssdError::Config(format!("tenant {}: unknown trace format {:?}", t.name, ts.format)))?;
            let io = VssdIo { fb: &mut *fb, id };
            let total = blocks as u64 * io_sectors(&io);
            let disk = LogDisk::new(&io, ((total as f64 * ts.disk_fraction) as u64).max(1), 2, 8)?;
            let mut reader = TraceReader::open(&ts.path, fmt, g.sector_bytes, disk.sectors())?;
            let mut base_ns = 0;
            let first = next_cmd(&mut reader, ts, &mut base_ns, g.sector_bytes, disk.sectors(), 0)?;
            Work::Trace { disk, reader, spec: ts.clone(), base_ns, pending: Some(first) }
        }
    };
    Ok(Tenant { id, work, written_bytes: 0 })
}

/// How a study ended: when, why the device died (if it did), the time series, and the wall
/// seconds spent in swaps.
struct Ending {
    now: u64,
    death: Option<(u64, String)>,
    series: Vec<Value>,
    mig_wall: f64,
}

/// Run the tenants' writes in time order until a die runs out of reserve (a worn-out error)
/// or `max_weeks`, sampling every `sample_weeks`; `stop` false interrupts (an error).
fn simulate(fb: &mut FlashBlox, tenants: &mut [Tenant], spec: &LifetimeSpec, stop: &mut dyn FnMut(f64) -> bool) -> Result<Ending> {
    let week = WEEK_NS as f64;
    let max_ns = (spec.max_weeks * week) as u64;
    let sample_ns = (spec.sample_weeks * week) as u64;
    let mut series: Vec<Value> = vec![];
    let mut next_sample = 0u64;
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    for (i, t) in tenants.iter_mut().enumerate() {
        if let Some(at) = next_time(t)? {
            heap.push(Reverse((at, i)));
        }
    }
    let mut death: Option<(u64, String)> = None;
    let mut now = 0u64;
    let mut mig_wall = 0.0f64;
    while let Some(Reverse((at, i))) = heap.pop() {
        if at > max_ns {
            now = max_ns;
            break;
        }
        now = at;
        while next_sample <= now {
            series.push(sample(fb, next_sample, tenants));
            next_sample += sample_ns;
            if !stop(next_sample as f64 / max_ns as f64) {
                return Err(VssdError::Api("interrupted".into()));
            }
        }
        let swaps_before = fb.migration().swaps;
        let t0 = Instant::now();
        let r = step(fb, &mut tenants[i], now);
        if fb.migration().swaps != swaps_before {
            mig_wall += t0.elapsed().as_secs_f64();
        }
        match r {
            Ok(()) => {}
            Err(VssdError::WornOut(m)) => {
                death = Some((now, m));
                break;
            }
            Err(e) => return Err(e),
        }
        if let Some(at) = next_time(&mut tenants[i])? {
            heap.push(Reverse((at, i)));
        }
    }
    series.push(sample(fb, now, tenants));
    Ok(Ending { now, death, series, mig_wall })
}

/// The study's summary (lifetime against the ideal, amplification by swaps, wear) and the
/// wall seconds.
fn summary(
    fb: &FlashBlox,
    spec: &LifetimeSpec,
    tenants: &[Tenant],
    m_bytes_per_week: f64,
    budget: f64,
    end: Ending,
    wall: Instant,
) -> (Value, f64) {
    let Ending { now, death, series, mig_wall } = end;
    let week = WEEK_NS as f64;
    let host: u64 = tenants.iter().map(|t| t.written_bytes).sum();
    let lifetime_weeks = now as f64 / week;
    // The ideal life spends the whole erase budget at the tenants' write rate with no amplification:
    // the configured shares, or for trace-driven tenants (no share) the rate they actually wrote.
    let configured_rate: f64 = spec.tenants.iter().map(|t| t.write_share).sum::<f64>() * m_bytes_per_week;
    let rate = if configured_rate > 0.0 {
        configured_rate
    } else if lifetime_weeks > 0.0 {
        host as f64 / lifetime_weeks
    } else {
        0.0
    };
    let ideal_weeks = if rate > 0.0 { budget / rate } else { f64::INFINITY };
    let (ch, die) = fb.wear();
    let mig = fb.migration();
    let total_wall = wall.elapsed().as_secs_f64();
    let summary = json!({
        "dead": death.is_some(),
        "death": death.as_ref().map(|d| d.1.clone()),
        "lifetime_weeks": lifetime_weeks,
        "ideal_weeks": ideal_weeks,
        "lifetime_fraction": if ideal_weeks.is_finite() { lifetime_weeks / ideal_weeks } else { 0.0 },
        "m_bytes_per_week": m_bytes_per_week,
        "erase_budget_bytes": budget,
        "host_write_bytes": host,
        "migrated_bytes": mig.bytes_moved,
        "write_amplification_swaps": if host > 0 { (host + mig.bytes_moved) as f64 / host as f64 } else { 1.0 },
        "swaps": mig.swaps,
        "swap_period_weeks_mean": if mig.swaps > 0 { lifetime_weeks / mig.swaps as f64 } else { 0.0 },
        "migration_erases": mig.erases,
        "channel_erases": ch,
        "die_erases": die,
        "series": series,
        "swap_log": fb.summary()["swaps"].clone(),
    });
    (json!({"summary": summary, "migration_wall_fraction": if total_wall > 0.0 { mig_wall / total_wall } else { 0.0 }}), total_wall)
}

fn v_sectors(fb: &FlashBlox, id: u32) -> u32 {
    fb.vssd(id).expect("live").block_sectors(fb.geo())
}

fn io_sectors(io: &VssdIo<'_>) -> u64 {
    crate::flashblox::BlockApi::block_sectors(io) as u64
}

/// When the tenant's next write happens (None: it never writes).
fn next_time(t: &mut Tenant) -> Result<Option<u64>> {
    Ok(match &t.work {
        Work::Log { interval_ns, next, .. } => interval_ns.is_finite().then_some(*next as u64),
        Work::Trace { pending, .. } => pending.map(|p| p.0),
    })
}

/// The trace's next command and its time in the study; the trace starts over (at `now`) when
/// it ends.
fn next_cmd(
    reader: &mut TraceReader<std::io::BufReader<std::fs::File>>,
    spec: &TraceTenant,
    base_ns: &mut u64,
    sector_bytes: u32,
    sectors: u64,
    now: u64,
) -> Result<(u64, Cmd)> {
    let scale = spec.weeks_per_trace_second * WEEK_NS as f64 / 1e9;
    let cmd = match reader.next_cmd() {
        Some(c) => c?,
        None => {
            *base_ns = now + 1;
            *reader = TraceReader::open(&spec.path, reader.format(), sector_bytes, sectors)?;
            match reader.next_cmd() {
                Some(c) => c?,
                None => return Err(VssdError::Config(format!("{}: the trace has no commands", spec.path.display()))),
            }
        }
    };
    Ok((*base_ns + (cmd.at_ns.unwrap_or(0) as f64 * scale) as u64, cmd))
}

fn step(fb: &mut FlashBlox, t: &mut Tenant, now: u64) -> Result<()> {
    let id = t.id;
    let sb = fb.geo().sector_bytes;
    match &mut t.work {
        Work::Log { live, keep, interval_ns, next } => {
            let bs = v_sectors(fb, id);
            if live.len() as u32 >= *keep {
                let old = live.pop_front().expect("a live block");
                fb.free_block(id, old, now)?;
            }
            let b = fb.alloc_block(id)?;
            fb.write_data(id, b, 0, bs, None, now)?;
            live.push_back(b);
            t.written_bytes += bs as u64 * sb as u64;
            *next += *interval_ns;
            Ok(())
        }
        Work::Trace { disk, reader, spec, base_ns, pending } => {
            let (_, cmd) = pending.take().expect("a pending command");
            let mut io = VssdIo { fb, id };
            let n = cmd.sectors.min((disk.sectors() - cmd.lba.min(disk.sectors() - 1)) as u32);
            match cmd.op {
                Op::Write if n > 0 => {
                    disk.write(&mut io, cmd.lba, n, None, now)?;
                    t.written_bytes += n as u64 * sb as u64;
                }
                Op::Trim if n > 0 => disk.trim(cmd.lba, n)?,
                _ => {}
            }
            let sectors = disk.sectors();
            *pending = Some(next_cmd(reader, spec, base_ns, sb, sectors, now)?);
            Ok(())
        }
    }
}

fn sample(fb: &FlashBlox, now: u64, tenants: &[Tenant]) -> Value {
    let (ch, _) = fb.wear();
    let avg = ch.iter().sum::<u64>() as f64 / ch.len() as f64;
    let max = *ch.iter().max().expect("channels") as f64;
    json!({
        "week": now as f64 / WEEK_NS as f64,
        "channel_erases": ch,
        "imbalance": if avg > 0.0 { max / avg } else { 1.0 },
        "swaps": fb.migration().swaps,
        "host_write_bytes": tenants.iter().map(|t| t.written_bytes).sum::<u64>(),
    })
}
