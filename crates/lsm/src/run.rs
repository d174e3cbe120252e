//! A measured run: a store on a ZNS device, workload phases (generated, or read from files
//! in the K-V workload generator's format), simulated time, and one JSON summary with the
//! write amplification at every layer, deletion persistence against D_th, tombstone-file
//! lifetimes, read latencies per phase and the NAND audit; plus a time series (CSV).
//!
//! Nothing wall-clock goes into the summary, so a spec and seed give byte-identical output.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_core::metrics::{latency_histogram, latency_summary, ratio, LatencyShape, MeanRounding};

use crate::config::LsmConfig;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::workload::{Generator, Op, PhaseSpec, Reader};
use crate::zonefs;

/// What to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub lsm: LsmConfig,
    pub phases: Vec<PhaseSpec>,
    pub seed: u64,
    /// Open-loop arrival rate in operations per simulated second (0: closed loop, each
    /// operation issued when the previous one completed).
    pub ops_per_s: f64,
    /// When > 0, D_th = this share of the planned run time (operations / rate), as the
    /// document states it ("16% of the run"); overrides lsm.delete_threshold_ns.
    pub delete_threshold_fraction: f64,
    pub series_points: u32,
    /// Search the NAND for deleted values at the end (needs lsm.track_deletes).
    pub audit: bool,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            lsm: LsmConfig { track_deletes: true, ..Default::default() },
            phases: vec![],
            seed: 42,
            ops_per_s: 20_000.0,
            delete_threshold_fraction: 0.0,
            series_points: 100,
            audit: false,
        }
    }
}

pub struct RunResult {
    pub summary: Value,
    pub series_csv: String,
    pub wall_seconds: f64,
    pub interrupted: bool,
}

/// A latency histogram's figures. `erase_ns`: the device's block erase time; the share of
/// operations that took at least that long (for reads on a die without erase suspend: the
/// reads that waited for an erase in progress) says how many of them the tail is made of.
fn hist_json(h: &Histogram<u64>, erase_ns: u64) -> Value {
    const SHAPE: LatencyShape =
        LatencyShape { quantiles: &[0.5, 0.9, 0.99, 0.999], unit: "", mean: MeanRounding::Whole, min: false, empty_is_count: true };
    let mut figures = latency_summary(h, &SHAPE);
    if !h.is_empty() {
        let slow = if erase_ns > 0 { h.count_between(erase_ns, h.max().max(erase_ns)) } else { 0 };
        figures.insert("at_least_erase".into(), json!(slow as f64 / h.len() as f64));
    }
    Value::Object(figures)
}

const CLASSES: [&str; 4] = ["put", "delete", "get", "scan"];

struct PhaseStats {
    name: String,
    ops: u64,
    start_ns: u64,
    end_ns: u64,
    lat: [Histogram<u64>; 4],
    counters_start: Value,
}

/// Counters that the figures compare, at a moment.
fn counters(s: &Store) -> Value {
    let st = s.stats();
    let fs = &s.fs().stats;
    let dev = s.fs().device_counters();
    json!({
        "app_write_bytes": st.app_write_bytes,
        "wal_write_bytes": st.wal_write_bytes,
        "flush_write_bytes": st.flush_write_bytes,
        "compaction_write_bytes": st.compaction_write_bytes,
        "compaction_read_bytes": st.compaction_read_bytes,
        "gc_migrated_bytes": fs.gc_migrated_bytes,
        "zone_write_bytes": fs.zone_write_bytes,
        "host_write_bytes": dev.host_write_bytes,
        "nand_write_bytes": dev.nand_write_bytes,
        "nand_read_bytes": dev.nand_read_bytes,
        "nand_erase_count": dev.nand_erase_count,
        "zone_resets": fs.zone_resets,
    })
}

fn delta(a: &Value, b: &Value) -> Value {
    let mut o = serde_json::Map::new();
    for (k, v) in b.as_object().unwrap() {
        o.insert(k.clone(), json!(v.as_u64().unwrap_or(0) - a[k].as_u64().unwrap_or(0)));
    }
    Value::Object(o)
}

/// Check `spec` as a run of `planned_ops` operations would, and return the store's config with
/// D_th resolved (a share of the run when `delete_threshold_fraction` > 0).
pub fn resolve(spec: &RunSpec, planned_ops: u64) -> Result<LsmConfig> {
    for (i, p) in spec.phases.iter().enumerate() {
        p.validate(i)?;
    }
    if !(spec.ops_per_s >= 0.0 && spec.ops_per_s <= 1e9) {
        return Err(Error::Config(format!("ops_per_s: {} is outside 0..1e9", spec.ops_per_s)));
    }
    if planned_ops == 0 {
        return Err(Error::Config("the run has no operations: give phases (or workload files)".into()));
    }
    let mut lsm = spec.lsm.clone();
    if spec.delete_threshold_fraction > 0.0 {
        if spec.ops_per_s == 0.0 {
            return Err(Error::Config(
                "delete_threshold_fraction needs an open-loop ops_per_s > 0 (the run's length is then known)".into(),
            ));
        }
        lsm.delete_threshold_ns = (spec.delete_threshold_fraction * planned_ops as f64 / spec.ops_per_s * 1e9) as u64;
    }
    if spec.audit && !lsm.track_deletes {
        return Err(Error::Config("audit needs lsm.track_deletes = true".into()));
    }
    lsm.validate()?;
    Ok(lsm)
}

/// Check a run of `spec`'s generated phases on `device` as running it would, and estimate its
/// peak memory: the data-backed device (its maps and every sector it may hold) plus the
/// store's own (memtables, the tracker's records, the series).
pub fn sizing(device: &ssdlab_core::Config, spec: &RunSpec) -> Result<u64> {
    let planned: u64 = spec.phases.iter().map(|p| p.ops()).sum();
    let lsm = resolve(spec, planned)?;
    zonefs::check_device(device)?;
    let mut dev = device.clone();
    dev.storage = ssdlab_core::config::StorageMode::Data;
    let s = ssdlab_core::sizing::sizing(&dev)?;
    // Per operation at most one tracked record or live-set entry (~100 B each); two memtables.
    let store = 2 * lsm.memtable_bytes + planned * 100;
    Ok(s.memory_bytes + s.physical_bytes + store)
}

/// The planned length of the run (D_th may be a share of it): the operations in `files`, or
/// those of the spec's phases.
fn planned_ops(spec: &RunSpec, files: Option<&[PathBuf]>) -> Result<u64> {
    Ok(match files {
        Some(fs) => {
            let mut n = 0u64;
            for f in fs {
                let mut r = Reader::open(f)?;
                while r.next_op()?.is_some() {
                    n += 1;
                }
            }
            n
        }
        None => spec.phases.iter().map(|p| p.ops()).sum(),
    })
}

/// Apply one operation to the store, keeping the live key set (key -> key and value bytes)
/// and its bytes; returns when the device completed it.
fn apply(store: &mut Store, op: Op, live: &mut HashMap<Vec<u8>, u32>, live_bytes: &mut u64) -> Result<u64> {
    Ok(match op {
        Op::Insert(k, v) | Op::Update(k, v) => {
            let d = store.put(&k, &v)?;
            let n = (k.len() + v.len()) as u32;
            *live_bytes += n as u64;
            if let Some(old) = live.insert(k, n) {
                *live_bytes -= old as u64;
            }
            d
        }
        Op::Delete(k) => {
            let d = store.delete(&k)?;
            if let Some(old) = live.remove(&k) {
                *live_bytes -= old as u64;
            }
            d
        }
        Op::RangeDelete(a, b) => {
            // No range tombstones: the keys found are deleted one by one.
            let (keys, mut d) = store.scan(&a, Some(&b), usize::MAX)?;
            store.advance_to(d)?;
            for (k, _) in keys {
                d = d.max(store.delete(&k)?);
                if let Some(old) = live.remove(&k) {
                    *live_bytes -= old as u64;
                }
            }
            d
        }
        Op::Get(k) => store.get(&k)?.done_ns,
        Op::Scan(a, b) => store.scan(&a, Some(&b), usize::MAX)?.1,
    })
}

/// The time series' header line.
const SERIES_HEADER: &str =
    "ops,time_s,sst_bytes,live_user_bytes,wal_lsm_write_bytes,compaction_write_bytes,gc_migrated_bytes,nand_write_bytes,free_zones,tombstones_in_ssts,deletes_pending_lsm\n";

/// One line of the time series, after `done_ops` operations.
fn series_row(store: &Store, done_ops: u64, live_bytes: u64) -> String {
    let st = store.stats();
    let fs = store.fs();
    format!(
        "{},{:.6},{},{},{},{},{},{},{},{},{}\n",
        done_ops,
        store.now_ns() as f64 / 1e9,
        store.sst_bytes(),
        live_bytes,
        st.wal_write_bytes + st.flush_write_bytes + st.compaction_write_bytes,
        st.compaction_write_bytes,
        fs.stats.gc_migrated_bytes,
        fs.device_counters().nand_write_bytes,
        fs.free_zones(),
        store.sst_tombstones(),
        store.deletes_pending_lsm(),
    )
}

/// Run `spec` on a ZNS device of `device`. With `files`, phase i replays files[i] (the
/// spec's phases then only name them); otherwise the phases are generated.
pub fn run(device: ssdlab_core::Config, spec: &RunSpec, files: Option<&[PathBuf]>, stop: &mut dyn FnMut(f64) -> bool) -> Result<RunResult> {
    let wall = Instant::now();
    let erase_ns = if device.timing.enabled { device.timing.block_erase_ns } else { 0 };
    let planned_ops = planned_ops(spec, files)?;
    let lsm = resolve(spec, planned_ops)?;
    let mut store = Store::new(device, lsm.clone())?;
    let gap_ns = if spec.ops_per_s > 0.0 { 1e9 / spec.ops_per_s } else { 0.0 };
    let series_every = (planned_ops / spec.series_points.max(1) as u64).max(1);
    let mut series = String::from(SERIES_HEADER);
    let mut live: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut live_bytes: u64 = 0;
    let mut phases: Vec<PhaseStats> = vec![];
    let mut gen = Generator::new(spec.seed);
    let mut done_ops = 0u64;
    let mut t_next = 0.0f64;
    let mut interrupted = false;
    let nphases = match files {
        Some(f) => f.len(),
        None => spec.phases.len(),
    };
    for pi in 0..nphases {
        let name = spec.phases.get(pi).map(|p| p.name.clone()).filter(|n| !n.is_empty()).unwrap_or_else(|| format!("phase{}", pi + 1));
        phases.push(PhaseStats {
            name,
            ops: 0,
            start_ns: store.now_ns(),
            end_ns: 0,
            lat: [latency_histogram(), latency_histogram(), latency_histogram(), latency_histogram()],
            counters_start: counters(&store),
        });
        let mut exec = |op: Op| -> Result<()> {
            if interrupted {
                return Ok(());
            }
            let t = t_next.round() as u64;
            store.advance_to(t)?;
            let class = op.class();
            let done = apply(&mut store, op, &mut live, &mut live_bytes)?;
            let ph = phases.last_mut().unwrap();
            let ci = CLASSES.iter().position(|c| *c == class).unwrap();
            ph.lat[ci].saturating_record(done.saturating_sub(t).max(1));
            ph.ops += 1;
            done_ops += 1;
            t_next = if gap_ns > 0.0 { t_next + gap_ns } else { done.max(t) as f64 };
            if done_ops.is_multiple_of(series_every) {
                series.push_str(&series_row(&store, done_ops, live_bytes));
                if !stop(done_ops as f64 / planned_ops as f64) {
                    interrupted = true;
                }
            }
            Ok(())
        };
        match files {
            Some(f) => {
                let mut r = Reader::open(&f[pi])?;
                while let Some(op) = r.next_op()? {
                    exec(op)?;
                }
            }
            None => gen.phase(&spec.phases[pi], &mut exec)?,
        }
        let ph = phases.last_mut().unwrap();
        ph.end_ns = store.now_ns();
        if interrupted {
            break;
        }
    }
    let end_ns = store.now_ns();
    let audit = if spec.audit && !interrupted { Some(store.audit()?) } else { None };
    let summary = summarize(&store, &lsm, spec, &phases, end_ns, live_bytes, live.len(), audit, planned_ops, done_ops, erase_ns);
    Ok(RunResult { summary, series_csv: series, wall_seconds: wall.elapsed().as_secs_f64(), interrupted })
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    s: &Store,
    lsm: &LsmConfig,
    spec: &RunSpec,
    phases: &[PhaseStats],
    end_ns: u64,
    live_bytes: u64,
    live_keys: usize,
    audit: Option<crate::persist::Audit>,
    planned_ops: u64,
    done_ops: u64,
    erase_ns: u64,
) -> Value {
    let c = counters(s);
    let d_th = lsm.delete_threshold_ns;
    let phase_json: Vec<Value> = phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let next = phases.get(i + 1).map(|n| n.counters_start.clone()).unwrap_or_else(|| c.clone());
            let mut lat = serde_json::Map::new();
            for (ci, name) in CLASSES.iter().enumerate() {
                lat.insert(name.to_string(), hist_json(&p.lat[ci], erase_ns));
            }
            json!({
                "name": p.name, "ops": p.ops, "start_s": p.start_ns as f64 / 1e9, "end_s": p.end_ns as f64 / 1e9,
                "latency_ns": lat, "counters": delta(&p.counters_start, &next),
            })
        })
        .collect();
    let persistence = if lsm.track_deletes { deletion_persistence(s, d_th, end_ns) } else { Value::Null };
    let lives = s.tomb_file_lives();
    let step = (lives.len() / 3000).max(1);
    let tomb_lives: Vec<Value> =
        lives.iter().step_by(step).map(|l| json!([l.deletes_issued, l.lifetime_ns as f64 / 1e9, l.level, l.tombstones])).collect();
    let shape: Vec<Value> = s.level_shape().iter().map(|(n, b)| json!({"files": n, "bytes": b})).collect();
    let sst = s.sst_bytes();
    json!({
        "policy": lsm.policy.name(),
        "delete_threshold_ns": d_th,
        "ops_per_s": spec.ops_per_s,
        "planned_ops": planned_ops,
        "ops": done_ops,
        "sim_seconds": end_ns as f64 / 1e9,
        "lsm": s.stats(),
        "zones": s.fs().stats,
        "counters": c,
        "write_amplification": write_amplification(&c),
        "space": {
            "sst_bytes": sst, "live_user_bytes": live_bytes, "live_keys": live_keys,
            "space_amplification": ratio(sst, live_bytes),
            "zone_occupied_bytes": s.fs().occupied_bytes(), "zone_live_bytes": s.fs().live_bytes(),
            "free_zones": s.fs().free_zones(), "zones": s.fs().zone_count(),
            "zone_capacity_bytes": s.fs().zone_capacity_bytes(), "levels": shape,
        },
        "phases": phase_json,
        "deletion_persistence": persistence,
        "tombstone_file_lifetimes": {"columns": ["deletes_issued", "lifetime_s", "level", "tombstones"], "rows": tomb_lives},
        "audit": audit,
        "lsm_config": lsm,
    })
}

/// How long deletes took to persist, at the LSM level (no live copy in the tree) and at the
/// erase level (no copy on the NAND), over the deletes issued at least `d_th` before `end_ns`.
pub fn deletion_persistence(s: &Store, d_th: u64, end_ns: u64) -> Value {
    let recs = s.delete_records();
    let superseded = recs.iter().filter(|r| r.superseded).count();
    let eligible: Vec<_> = recs.iter().filter(|r| !r.superseded && r.at_ns + d_th <= end_ns).collect();
    let lat = |f: &dyn Fn(&crate::persist::DeleteRecord) -> Option<u64>| -> Value {
        let mut v: Vec<Option<u64>> = eligible.iter().map(|r| f(r).map(|t| t.saturating_sub(r.at_ns))).collect();
        // Not persisted by the end: longer than anything measured (censored).
        v.sort_by_key(|x| x.unwrap_or(u64::MAX));
        let n = v.len();
        let within = v.iter().filter(|x| x.is_some_and(|t| t <= d_th)).count();
        let persisted = v.iter().filter(|x| x.is_some()).count();
        let q = |p: f64| -> Value {
            if n == 0 {
                return Value::Null;
            }
            let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            v[i].map_or(Value::Null, |t| json!(t))
        };
        let cdf: Vec<Value> = (0..=100).map(|p| q(p as f64 / 100.0)).collect();
        json!({
            "eligible": n, "persisted": persisted, "within_threshold": within,
            "fraction_within_threshold": if n > 0 { within as f64 / n as f64 } else { 0.0 },
            "not_persisted_by_end": n - persisted,
            "p50_ns": q(0.5), "p90_ns": q(0.9), "p99_ns": q(0.99), "max_ns": q(1.0),
            "cdf_ns": cdf,
        })
    };
    json!({
        "deletes": recs.len(),
        "superseded": superseded,
        "eligible_rule": "deletes issued at least D_th before the end of the run, not followed by a write of the same key",
        "lsm_level": lat(&|r| r.lsm_ns),
        "erase_level": lat(&|r| r.erase_ns),
        "pending_at_end": {"lsm": s.deletes_pending_lsm()},
    })
}

/// Write amplification at each layer, from [`counters`].
fn write_amplification(c: &Value) -> Value {
    let g = |k: &str| c[k].as_u64().unwrap_or(0);
    let lsm_bytes = g("wal_write_bytes") + g("flush_write_bytes") + g("compaction_write_bytes");
    json!({
        "lsm": ratio(lsm_bytes, g("app_write_bytes")),
        "compaction_per_app_byte": ratio(g("compaction_write_bytes"), g("app_write_bytes")),
        "zone_layer": ratio(g("zone_write_bytes"), lsm_bytes),
        "device_dlwa": ratio(g("nand_write_bytes"), g("host_write_bytes")),
        "total": ratio(g("nand_write_bytes"), g("app_write_bytes")),
    })
}

/// The figures of a store served to clients (`ssdlab kv serve`): counters, write
/// amplification, and deletion persistence when deletes are tracked.
pub fn served_summary(s: &Store) -> Value {
    let c = counters(s);
    let lsm = s.config();
    let end_ns = s.now_ns();
    json!({
        "policy": lsm.policy.name(),
        "sim_seconds": end_ns as f64 / 1e9,
        "lsm": s.stats(),
        "zones": s.fs().stats,
        "write_amplification": write_amplification(&c),
        "counters": c,
        "deletion_persistence": if lsm.track_deletes { deletion_persistence(s, lsm.delete_threshold_ns, end_ns) } else { Value::Null },
    })
}
