//! Measurements: one schema (`metrics.json` + `timeseries.csv`) for every run and personality.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::Config;
use crate::ftl::{BlockDevice, Counters};
use crate::media::BlockState;
use crate::workload::Op;

/// Bumped when a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

const OPS: [Op; 3] = [Op::Read, Op::Write, Op::Trim];

/// A latency histogram in ns: 1 ns to an hour, 3 significant digits (every run's and every case
/// study's latencies).
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// One row of the time series.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesRow {
    pub sim_time_ns: u64,
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub nand_write_bytes: u64,
    pub nand_erase_count: u64,
    pub gc_events: u64,
    pub free_blocks: u32,
    pub dlwa_cumulative: f64,
    pub dlwa_interval: f64,
    pub write_latency_ns_mean_interval: f64,
    pub read_latency_ns_mean_interval: f64,
}

/// Steady state of DLWA, judged over windows of host writes: the run has settled when the
/// DLWA of each of the last `windows` windows lies within `tolerance` (relative) of their mean.
/// The steady figure is the DLWA over those windows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Steady {
    window_bytes: u64,
    tolerance: f64,
    windows: usize,
    /// Host bytes (since the run's start) where the current window ends.
    next: u64,
    /// Host and NAND bytes where the current window began.
    start: (u64, u64),
    /// The latest windows: (host bytes at its start, host bytes, NAND bytes).
    recent: std::collections::VecDeque<(u64, u64, u64)>,
    seen: u64,
    /// Once reached: the steady windows' start and their host and NAND bytes.
    reached: Option<(u64, u64, u64)>,
}

impl Steady {
    pub fn new(window_bytes: u64, tolerance: f64, windows: u32) -> Steady {
        let window_bytes = window_bytes.max(1);
        Steady {
            window_bytes,
            tolerance,
            windows: windows.max(2) as usize,
            next: window_bytes,
            start: (0, 0),
            recent: Default::default(),
            seen: 0,
            reached: None,
        }
    }

    /// Account host and NAND bytes written since the run's start; true once steady.
    #[inline]
    pub fn observe(&mut self, host: u64, nand: u64) -> bool {
        if host < self.next || self.reached.is_some() {
            return self.reached.is_some();
        }
        debug_assert!(host >= self.start.0 && nand >= self.start.1, "byte counters went backwards");
        self.recent.push_back((self.start.0, host - self.start.0, nand - self.start.1));
        self.seen += 1;
        if self.recent.len() > self.windows {
            self.recent.pop_front();
        }
        self.start = (host, nand);
        self.next = host + self.window_bytes;
        if self.recent.len() == self.windows {
            let d: Vec<f64> = self.recent.iter().map(|&(_, h, n)| ratio(n, h)).collect();
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            debug_assert_eq!(self.recent.len(), self.windows, "steady state judged over its windows");
            if d.iter().all(|x| (x - mean).abs() <= self.tolerance * mean) {
                let (h, n) = self.recent.iter().fold((0, 0), |a, &(_, h, n)| (a.0 + h, a.1 + n));
                self.reached = Some((self.recent[0].0, h, n));
            }
        }
        self.reached.is_some()
    }

    /// Windows closed so far (callers that keep per-window state watch it change).
    pub fn windows_measured(&self) -> u64 {
        self.seen
    }

    /// Once steady: the host bytes (since the run's start) where the steady windows begin.
    pub fn steady_from_host_bytes(&self) -> Option<u64> {
        self.reached.map(|r| r.0)
    }

    /// The `steady` section of metrics.json.
    pub fn report(&self, whole_run_dlwa: f64) -> Value {
        debug_assert!(self.reached.is_none() || self.seen >= self.windows as u64, "steady before enough windows were measured");
        let (from, dlwa) = match self.reached {
            Some((from, h, n)) => (json!(from), json!(round6(ratio(n, h)))),
            None => (Value::Null, Value::Null),
        };
        json!({
            "metric": "dlwa",
            "window_host_bytes": self.window_bytes,
            "tolerance": self.tolerance,
            "windows": self.windows,
            "windows_measured": self.seen,
            "reached": self.reached.is_some(),
            "steady_from_host_bytes": from,
            "dlwa": dlwa,
            "dlwa_whole_run": round6(whole_run_dlwa),
        })
    }
}

/// Collects latencies and the time series during a run; turns device counters into the report.
pub struct Recorder {
    hist: [Histogram<u64>; 3],
    base: Counters,
    base_busy_die: Vec<u64>,
    base_busy_chan: Vec<u64>,
    base_personality: Value,
    start_ns: u64,
    pub end_ns: u64,
    series: Vec<SeriesRow>,
    interval_ns: u64,
    interval_bytes: u64,
    next_ns: u64,
    next_bytes: u64,
    last: (u64, u64),
    lat_sum: [(u128, u64); 2],
    timing: bool,
    steady: Option<Steady>,
}

impl Recorder {
    /// Start measuring `dev` from now on (`start_ns` = simulated time of the first command).
    pub fn new(dev: &dyn BlockDevice, start_ns: u64, interval_ns: u64, interval_bytes: u64) -> Recorder {
        let tl = dev.timelines();
        let mut r = Recorder {
            hist: [latency_histogram(), latency_histogram(), latency_histogram()],
            base: dev.counters().clone(),
            base_busy_die: tl.die_busy_ns().to_vec(),
            base_busy_chan: tl.channel_busy_ns().to_vec(),
            base_personality: dev.personality_baseline(),
            start_ns,
            end_ns: start_ns,
            series: Vec::new(),
            interval_ns: if tl.enabled { interval_ns } else { 0 },
            interval_bytes,
            next_ns: start_ns.saturating_add(interval_ns),
            next_bytes: interval_bytes,
            last: (0, 0),
            lat_sum: [(0, 0); 2],
            timing: tl.enabled,
            steady: None,
        };
        r.sample(dev, start_ns);
        r
    }

    /// Watch for steady state (a run with `stop = "steady"`).
    pub fn watch_steady(&mut self, steady: Steady) {
        self.steady = Some(steady);
    }

    /// Whether the watched run has reached steady state.
    #[inline]
    pub fn steady(&mut self, dev: &dyn BlockDevice) -> bool {
        match self.steady.as_mut() {
            None => false,
            Some(s) => {
                let c = dev.counters();
                s.observe(c.host_write_bytes - self.base.host_write_bytes, c.nand_write_bytes - self.base.nand_write_bytes)
            }
        }
    }

    #[inline]
    pub fn record(&mut self, op: Op, latency_ns: u64) {
        let i = op as usize;
        if i < 3 && self.timing {
            self.hist[i].saturating_record(latency_ns.max(1));
            if i < 2 {
                self.lat_sum[i].0 += latency_ns as u128;
                self.lat_sum[i].1 += 1;
            }
        }
    }

    /// Called after each command with its completion time; samples the series when due.
    #[inline]
    pub fn tick(&mut self, dev: &dyn BlockDevice, now_ns: u64, done_ns: u64) {
        debug_assert!(done_ns >= now_ns, "a command completed at {done_ns}, before its submission at {now_ns}");
        if done_ns > self.end_ns {
            self.end_ns = done_ns;
        }
        let due_time = self.interval_ns > 0 && now_ns >= self.next_ns;
        let due_bytes = self.interval_bytes > 0 && dev.counters().host_write_bytes - self.base.host_write_bytes >= self.next_bytes;
        if due_time || due_bytes {
            if due_time {
                while self.next_ns <= now_ns {
                    self.next_ns += self.interval_ns;
                }
            }
            if due_bytes {
                self.next_bytes += self.interval_bytes;
            }
            self.sample(dev, now_ns);
        }
    }

    fn sample(&mut self, dev: &dyn BlockDevice, now_ns: u64) {
        let c = dev.counters();
        let hw = c.host_write_bytes - self.base.host_write_bytes;
        let nw = c.nand_write_bytes - self.base.nand_write_bytes;
        let (lhw, lnw) = self.last;
        debug_assert!(hw >= lhw && nw >= lnw, "byte counters went backwards");
        debug_assert!(c.consistent(dev.layout().page_bytes), "device counters disagree: {c:?}");
        let mean = |s: (u128, u64)| if s.1 == 0 { 0.0 } else { s.0 as f64 / s.1 as f64 };
        self.series.push(SeriesRow {
            sim_time_ns: now_ns - self.start_ns,
            host_write_bytes: hw,
            host_read_bytes: c.host_read_bytes - self.base.host_read_bytes,
            nand_write_bytes: nw,
            nand_erase_count: c.nand_erase_count - self.base.nand_erase_count,
            gc_events: c.gc_events - self.base.gc_events,
            free_blocks: dev.free_blocks(),
            dlwa_cumulative: ratio(nw, hw),
            dlwa_interval: ratio(nw - lnw, hw - lhw),
            write_latency_ns_mean_interval: mean(self.lat_sum[1]),
            read_latency_ns_mean_interval: mean(self.lat_sum[0]),
        });
        self.last = (hw, nw);
        self.lat_sum = [(0, 0); 2];
    }

    /// The time series as CSV text.
    pub fn series_csv(&self) -> String {
        let mut out = String::from("sim_time_ns,host_write_bytes,host_read_bytes,nand_write_bytes,nand_erase_count,gc_events,free_blocks,dlwa_cumulative,dlwa_interval,write_latency_ns_mean_interval,read_latency_ns_mean_interval\n");
        for r in &self.series {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{:.6},{:.6},{:.1},{:.1}\n",
                r.sim_time_ns,
                r.host_write_bytes,
                r.host_read_bytes,
                r.nand_write_bytes,
                r.nand_erase_count,
                r.gc_events,
                r.free_blocks,
                r.dlwa_cumulative,
                r.dlwa_interval,
                r.write_latency_ns_mean_interval,
                r.read_latency_ns_mean_interval
            ));
        }
        out
    }

    pub fn series(&self) -> &[SeriesRow] {
        &self.series
    }

    /// Close the series and build the metrics document.
    pub fn finish(&mut self, dev: &dyn BlockDevice, cfg: &Config, interrupted: bool) -> Value {
        let end = self.end_ns;
        let last_t = self.series.last().map(|r| r.sim_time_ns + self.start_ns);
        let last_bytes = self.series.last().map(|r| r.host_write_bytes);
        let hw_now = dev.counters().host_write_bytes - self.base.host_write_bytes;
        if last_t != Some(end) || last_bytes != Some(hw_now) {
            self.sample(dev, end.max(last_t.unwrap_or(0)));
        }
        let c = dev.counters();
        let b = &self.base;
        assert!(c.consistent(dev.layout().page_bytes), "device counters disagree: {c:?}");
        assert!(end >= self.start_ns, "the run ends before it starts");
        let d = |x: u64, y: u64| x - y;
        let sim_ns = end - self.start_ns;
        let secs = sim_ns as f64 / 1e9;
        let per_s = |x: u64| if self.timing && sim_ns > 0 { x as f64 / secs } else { 0.0 };
        let host_w = d(c.host_write_bytes, b.host_write_bytes);
        let host_r = d(c.host_read_bytes, b.host_read_bytes);
        let nand_w = d(c.nand_write_bytes, b.nand_write_bytes);
        let cmds = d(c.host_read_cmds, b.host_read_cmds) + d(c.host_write_cmds, b.host_write_cmds) + d(c.host_trim_cmds, b.host_trim_cmds);
        let lay = dev.layout();
        let mut lat = serde_json::Map::new();
        let mut cdf = serde_json::Map::new();
        for op in OPS {
            let h = &self.hist[op as usize];
            lat.insert(op.name().into(), Value::Object(latency_summary(h, &RUN_LATENCY)));
            cdf.insert(op.name().into(), hist_cdf(h));
        }
        let tl = dev.timelines();
        let busy = |now: &[u64], base: &[u64]| -> Vec<f64> {
            now.iter().zip(base).map(|(n, b)| if sim_ns == 0 { 0.0 } else { round6((n - b) as f64 / sim_ns as f64) }).collect()
        };
        let blocks = dev.blocks();
        let erase: Vec<u32> = blocks.iter().filter(|m| !m.factory_bad).map(|m| m.erase_count).collect();
        let mut doc = json!({
            "schema": SCHEMA_VERSION,
            "ssdlab_version": env!("CARGO_PKG_VERSION"),
            "interrupted": interrupted,
            "seed": cfg.seed,
            "device": {
                "preset": cfg.preset,
                "storage": cfg.storage,
                "logical_bytes": dev.logical_sectors() * lay.sector_bytes as u64,
                "physical_bytes": lay.physical_sectors * lay.sector_bytes as u64,
                "sector_bytes": lay.sector_bytes,
                "page_bytes": lay.page_bytes,
                "spare_factor": cfg.ftl.spare_factor,
                "gc_policy": cfg.ftl.gc_policy,
                "timing": tl.enabled,
            },
            "host_read_bytes": host_r,
            "host_write_bytes": host_w,
            "host_trim_bytes": d(c.host_trim_bytes, b.host_trim_bytes),
            "host_read_cmds": d(c.host_read_cmds, b.host_read_cmds),
            "host_write_cmds": d(c.host_write_cmds, b.host_write_cmds),
            "host_trim_cmds": d(c.host_trim_cmds, b.host_trim_cmds),
            "host_flush_cmds": d(c.host_flush_cmds, b.host_flush_cmds),
            "nand_read_bytes": d(c.nand_read_bytes, b.nand_read_bytes),
            "nand_write_bytes": nand_w,
            "nand_erase_count": d(c.nand_erase_count, b.nand_erase_count),
            "gc_relocated_pages": d(c.gc_relocated_pages, b.gc_relocated_pages),
            "gc_relocated_sectors": d(c.gc_relocated_sectors, b.gc_relocated_sectors),
            "gc_events": d(c.gc_events, b.gc_events),
            "gc_foreground_events": d(c.gc_foreground_events, b.gc_foreground_events),
            "gc_background_events": d(c.gc_background_events, b.gc_background_events),
            "wl_static_moves": d(c.wl_static_moves, b.wl_static_moves),
            "pad_sectors": d(c.pad_sectors, b.pad_sectors),
            "dlwa": round6(ratio(nand_w, host_w)),
            "sim_time_ns": sim_ns,
            "throughput": {
                "host_write_bytes_per_s": round6(per_s(host_w)),
                "host_read_bytes_per_s": round6(per_s(host_r)),
                "iops": round6(per_s(cmds)),
            },
            "latency_ns": lat,
            "latency_cdf_ns": cdf,
            "erase_count": erase_summary(&erase),
            "blocks": {
                "total": blocks.len(),
                "free": dev.free_blocks(),
                "bad_factory": blocks.iter().filter(|m| m.factory_bad).count(),
                "bad_grown": blocks.iter().filter(|m| m.state == BlockState::Bad && !m.factory_bad).count(),
            },
            "busy_fraction": {
                "die": busy(tl.die_busy_ns(), &self.base_busy_die),
                "channel": busy(tl.channel_busy_ns(), &self.base_busy_chan),
            },
            "mapped_bytes": dev.mapped_sectors() * lay.sector_bytes as u64,
            "series_csv": "timeseries.csv",
            "config": cfg,
        });
        if let Some(s) = &self.steady {
            doc["steady"] = s.report(ratio(nand_w, host_w));
        }
        for (name, section) in dev.personality_metrics(&self.base_personality) {
            doc[name] = section;
        }
        doc
    }
}

/// Ratio that is 0 (not NaN) when nothing was written.
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// `x` to 6 decimals (ratios and means in reports).
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// How a mean is rounded in a latency summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeanRounding {
    Exact,
    /// To whole units.
    Whole,
    /// To 6 decimals ([`round6`]).
    Six,
}

/// The shape of a latency summary: which figures, under which keys, in which unit. Each report
/// keeps the shape its readers (and pinned outputs) know; the figures come from one place.
#[derive(Debug, Clone, Copy)]
pub struct LatencyShape {
    /// Quantiles, each under `p` and its digits: 0.5 is `p50`, 0.999 `p999`.
    pub quantiles: &'static [f64],
    /// Suffix of every key but `count`: `""` or `"_ns"` (nanoseconds, integers but the mean) or
    /// `"_us"` (microseconds, floats).
    pub unit: &'static str,
    pub mean: MeanRounding,
    /// `min` as well as `max`.
    pub min: bool,
    /// An empty histogram is `{"count": 0}` alone (otherwise its figures, all zero).
    pub empty_is_count: bool,
}

/// The summary of every run's per-operation latencies in metrics.json.
pub const RUN_LATENCY: LatencyShape =
    LatencyShape { quantiles: &[0.5, 0.9, 0.99, 0.999, 0.9999], unit: "", mean: MeanRounding::Six, min: true, empty_is_count: true };

/// A latency histogram (in ns) summarised in `shape`: count, mean, quantiles, max (and min).
pub fn latency_summary(h: &Histogram<u64>, shape: &LatencyShape) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("count".into(), json!(h.len()));
    if h.is_empty() && shape.empty_is_count {
        return m;
    }
    let us = match shape.unit {
        "" | "_ns" => false,
        "_us" => true,
        u => panic!("latency unit {u:?}: expected \"\", \"_ns\" or \"_us\""),
    };
    let value = |v: u64| if us { json!(v as f64 / 1e3) } else { json!(v) };
    let key = |name: &str| format!("{name}{}", shape.unit);
    let mean = if us { h.mean() / 1e3 } else { h.mean() };
    let mean = match shape.mean {
        MeanRounding::Exact => mean,
        MeanRounding::Whole => mean.round(),
        MeanRounding::Six => round6(mean),
    };
    m.insert(key("mean"), json!(mean));
    for &q in shape.quantiles {
        m.insert(key(&quantile_name(q)), value(h.value_at_quantile(q)));
    }
    m.insert(key("max"), value(h.max()));
    if shape.min {
        m.insert(key("min"), value(h.min()));
    }
    m
}

/// `p` and the quantile's digits, at least two: 0.5 -> p50, 0.99 -> p99, 0.9999 -> p9999.
fn quantile_name(q: f64) -> String {
    assert!(q > 0.0 && q < 1.0, "quantile {q}");
    let text = q.to_string();
    let digits = text.strip_prefix("0.").expect("a quantile below 1");
    format!("p{digits:0<2}")
}

/// A compact CDF: latency at quantiles spaced evenly in -log10(1 - q), up to 0.99999.
fn hist_cdf(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!([]);
    }
    let mut pts = vec![];
    for i in 0..=50 {
        let q = 1.0 - 10f64.powf(-(i as f64) / 10.0);
        let q = q.clamp(0.0, 0.99999);
        pts.push(json!([h.value_at_quantile(q), round6(q)]));
    }
    pts.push(json!([h.max(), 1.0]));
    Value::Array(pts)
}

fn erase_summary(e: &[u32]) -> Value {
    if e.is_empty() {
        return json!({});
    }
    let n = e.len() as f64;
    let min = *e.iter().min().unwrap();
    let max = *e.iter().max().unwrap();
    let mean = e.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = e.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let bins = ((max - min + 1) as usize).min(50);
    let width = ((max - min + 1) as f64 / bins as f64).ceil() as u32;
    let mut counts = vec![0u64; bins];
    for &x in e {
        counts[(((x - min) / width) as usize).min(bins - 1)] += 1;
    }
    let edges: Vec<u32> = (0..=bins as u32).map(|i| min + i * width).collect();
    debug_assert!(edges[bins] > max, "the bins cover every erase count");
    json!({
        "min": min, "mean": round6(mean), "max": max, "stddev": round6(var.sqrt()),
        "histogram": {"bin_edges": edges, "counts": counts},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summaries_name_quantiles_by_their_digits_in_the_shape_asked() {
        assert_eq!([0.5, 0.9, 0.99, 0.999, 0.9999].map(quantile_name), ["p50", "p90", "p99", "p999", "p9999"]);
        let mut h = latency_histogram();
        for v in [100u64, 200, 300, 400] {
            h.record(v).unwrap();
        }
        let s = latency_summary(&h, &RUN_LATENCY);
        assert_eq!(
            (s["count"].as_u64(), s["min"].as_u64(), s["max"].as_u64(), s["p50"].as_u64()),
            (Some(4), Some(100), Some(400), Some(200))
        );
        let us = LatencyShape { quantiles: &[0.99], unit: "_us", mean: MeanRounding::Exact, min: false, empty_is_count: true };
        let s = latency_summary(&h, &us);
        assert_eq!((s["mean_us"].as_f64(), s["p99_us"].as_f64(), s.get("min_us")), (Some(0.25), Some(0.4), None));
        assert_eq!(Value::Object(latency_summary(&latency_histogram(), &us)), json!({"count": 0}));
    }
}
