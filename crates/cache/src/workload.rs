//! Cache workloads: a synthetic generator (popularity, sizes, op mix, TTL, one-hit wonders,
//! time) with presets modelled on published statistics, deterministic by seed.
//!
//! Sources of the preset numbers are in docs/case-studies/fdp-cache.md.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::error::{CacheError, Result};
use crate::hash::mix64;
use crate::zipf::ZipfTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Get,
    Set,
    Delete,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Set => "set",
            Op::Delete => "delete",
        }
    }
}

/// One cache request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub key: u64,
    pub op: Op,
    pub key_bytes: u32,
    pub value_bytes: u32,
    /// Time to live in seconds (0 = none).
    pub ttl_s: u32,
    /// Arrival time in workload nanoseconds.
    pub time_ns: u64,
}

/// Value sizes: log-uniform within each bin, bins chosen by weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeBin {
    pub min: u32,
    pub max: u32,
    pub weight: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadSpec {
    /// Distinct popular keys (Zipf ranks).
    pub keys: u64,
    pub zipf_alpha: f64,
    pub get_fraction: f64,
    pub set_fraction: f64,
    pub delete_fraction: f64,
    /// Fraction of requests to a fresh key that is never requested again.
    pub one_hit_fraction: f64,
    pub key_bytes_min: u32,
    pub key_bytes_max: u32,
    pub value_bins: Vec<SizeBin>,
    pub ttl_s: u32,
    /// Requests per second of workload time (arrivals are evenly spaced).
    pub rate_rps: f64,
    /// A GET miss is followed by a SET of the key (look-aside caching, as CacheBench does).
    pub set_on_miss: bool,
    pub seed: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        preset("kvcache").expect("kvcache preset")
    }
}

/// Names of the workload presets.
pub const PRESETS: &[&str] = &["kvcache", "kvcache-wo", "twitter-cluster12"];

/// A named workload preset (see docs/case-studies/fdp-cache.md for the sources).
pub fn preset(name: &str) -> Option<WorkloadSpec> {
    // Meta kvcache: GET:SET = 4:1, Zipf ~0.97; values mostly <= 2 KiB with mean ~335 B (the
    // three small bins average 338 B), plus a large-object tail (2-64 KiB) so the LOC is busy.
    let kv = WorkloadSpec {
        keys: 4_000_000,
        zipf_alpha: 0.97,
        get_fraction: 0.8,
        set_fraction: 0.2,
        delete_fraction: 0.0,
        one_hit_fraction: 0.0,
        key_bytes_min: 16,
        key_bytes_max: 48,
        value_bins: vec![
            SizeBin { min: 16, max: 128, weight: 0.30 },
            SizeBin { min: 128, max: 512, weight: 0.50 },
            SizeBin { min: 512, max: 2000, weight: 0.15 },
            SizeBin { min: 2049, max: 65536, weight: 0.05 },
        ],
        ttl_s: 0,
        rate_rps: 50_000.0,
        set_on_miss: true,
        seed: 42,
    };
    Some(match name {
        "kvcache" => kv,
        // The same keys and sizes without GETs (the paper's "WO KV Cache").
        "kvcache-wo" => WorkloadSpec { get_fraction: 0.0, set_fraction: 1.0, set_on_miss: false, ..kv },
        // Twitter cluster12: SET:GET = 4:1, Zipf 0.30, mean value ~1030 B, ~81% one-hit
        // wonders, TTL 300 s.
        "twitter-cluster12" => WorkloadSpec {
            keys: 4_000_000,
            zipf_alpha: 0.30,
            get_fraction: 0.2,
            set_fraction: 0.8,
            delete_fraction: 0.0,
            one_hit_fraction: 0.5,
            key_bytes_min: 20,
            key_bytes_max: 60,
            value_bins: vec![
                SizeBin { min: 64, max: 512, weight: 0.40 },
                SizeBin { min: 512, max: 2000, weight: 0.52 },
                SizeBin { min: 2049, max: 8192, weight: 0.08 },
            ],
            ttl_s: 300,
            rate_rps: 50_000.0,
            set_on_miss: false,
            seed: 42,
        },
        _ => return None,
    })
}

impl WorkloadSpec {
    pub fn validate(&self) -> Result<()> {
        let bad = |k: &str, m: String| Err(CacheError::Config(format!("workload.{k}: {m}")));
        if self.keys == 0 || self.keys > 1 << 62 {
            return bad("keys", format!("{} is not in 1..=2^62", self.keys));
        }
        if !(self.zipf_alpha >= 0.0 && self.zipf_alpha.is_finite()) {
            return bad("zipf_alpha", format!("{} must be >= 0", self.zipf_alpha));
        }
        let fr = [self.get_fraction, self.set_fraction, self.delete_fraction];
        if fr.iter().any(|f| !(*f >= 0.0)) || (fr.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
            return bad("get_fraction", format!("get + set + delete fractions must be >= 0 and sum to 1, got {fr:?}"));
        }
        if !(0.0..1.0).contains(&self.one_hit_fraction) {
            return bad("one_hit_fraction", format!("{} is not in [0, 1)", self.one_hit_fraction));
        }
        if self.key_bytes_min == 0 || self.key_bytes_min > self.key_bytes_max || self.key_bytes_max > 250 {
            return bad(
                "key_bytes_min",
                format!("key sizes {}..{} must satisfy 1 <= min <= max <= 250", self.key_bytes_min, self.key_bytes_max),
            );
        }
        if self.value_bins.is_empty()
            || self.value_bins.iter().any(|b| b.min == 0 || b.min > b.max || !(b.weight >= 0.0))
            || self.value_bins.iter().map(|b| b.weight).sum::<f64>() <= 0.0
        {
            return bad("value_bins", "need at least one bin with 1 <= min <= max and non-negative weights summing above 0".into());
        }
        if !(self.rate_rps > 0.0 && self.rate_rps.is_finite()) {
            return bad("rate_rps", format!("{} must be positive", self.rate_rps));
        }
        Ok(())
    }

    /// Mean value size (bytes) of the size distribution.
    pub fn mean_value_bytes(&self) -> f64 {
        let tw: f64 = self.value_bins.iter().map(|b| b.weight).sum();
        self.value_bins
            .iter()
            .map(|b| {
                let (lo, hi) = (b.min as f64, b.max as f64);
                let m = if hi > lo { (hi - lo) / (hi / lo).ln() } else { lo };
                b.weight / tw * m
            })
            .sum()
    }
}

/// The synthetic request stream. A key's sizes are a function of the key (the same key keeps
/// its size), so the generator needs no per-key state.
pub struct Generator {
    spec: WorkloadSpec,
    rng: Pcg64Mcg,
    zipf: ZipfTable,
    cum: Vec<f64>,
    /// ln(max / min) of each value-size bin (log-uniform sizes by one `exp`).
    ln_span: Vec<f64>,
    i: u64,
    fresh: u64,
    salt: u64,
    /// A SET owed after a GET miss (look-aside).
    pending: Option<Request>,
}

impl Generator {
    pub fn new(spec: &WorkloadSpec) -> Result<Generator> {
        spec.validate()?;
        let zipf = ZipfTable::new(spec.keys, spec.zipf_alpha);
        let ln_span = spec.value_bins.iter().map(|b| (b.max as f64 / b.min as f64).ln()).collect();
        let tw: f64 = spec.value_bins.iter().map(|b| b.weight).sum();
        let mut acc = 0.0;
        let cum = spec
            .value_bins
            .iter()
            .map(|b| {
                acc += b.weight / tw;
                acc
            })
            .collect();
        Ok(Generator {
            rng: Pcg64Mcg::seed_from_u64(spec.seed),
            zipf,
            cum,
            ln_span,
            i: 0,
            fresh: 0,
            salt: mix64(spec.seed ^ 0x6b79_6b79),
            pending: None,
            spec: spec.clone(),
        })
    }

    /// Key and value sizes of `key`.
    pub fn sizes(&self, key: u64) -> (u32, u32) {
        let h = mix64(key ^ self.salt);
        let s = &self.spec;
        let kb = s.key_bytes_min + (h % (s.key_bytes_max - s.key_bytes_min + 1) as u64) as u32;
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let bin = self.cum.iter().position(|&c| u < c).unwrap_or(self.cum.len() - 1);
        let b = &s.value_bins[bin];
        let v = mix64(h ^ 0x9e37) >> 11;
        let f = v as f64 / (1u64 << 53) as f64;
        let vb = if b.max > b.min { (b.min as f64 * (f * self.ln_span[bin]).exp()) as u32 } else { b.min };
        (kb, vb.clamp(b.min, b.max))
    }

    /// Tell the generator how the last GET went (drives look-aside SETs).
    pub fn feedback_miss(&mut self, r: &Request) {
        if self.spec.set_on_miss && r.op == Op::Get {
            self.pending = Some(Request { op: Op::Set, ..*r });
        }
    }

    pub fn next_request(&mut self) -> Request {
        if let Some(p) = self.pending.take() {
            return p;
        }
        let t = (self.i as f64 * 1e9 / self.spec.rate_rps) as u64;
        self.i += 1;
        let s = &self.spec;
        let key = if s.one_hit_fraction > 0.0 && self.rng.gen::<f64>() < s.one_hit_fraction {
            self.fresh += 1;
            mix64((1u64 << 63) | self.fresh) ^ self.salt
        } else {
            let rank = self.zipf.rank(self.rng.gen());
            mix64(rank ^ self.salt)
        };
        let u: f64 = self.rng.gen();
        let op = if u < s.get_fraction {
            Op::Get
        } else if u < s.get_fraction + s.set_fraction {
            Op::Set
        } else {
            Op::Delete
        };
        let (key_bytes, value_bytes) = self.sizes(key);
        Request { key, op, key_bytes, value_bytes, ttl_s: s.ttl_s, time_ns: t }
    }

    /// Requests generated so far (look-aside SETs excluded).
    pub fn issued(&self) -> u64 {
        self.i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_their_published_shape() {
        let kv = preset("kvcache").unwrap();
        let small = WorkloadSpec { value_bins: kv.value_bins[..3].to_vec(), ..kv.clone() };
        assert!((small.mean_value_bytes() - 335.0).abs() < 15.0, "{}", small.mean_value_bytes());
        let tw = preset("twitter-cluster12").unwrap();
        assert!((tw.mean_value_bytes() - 1030.0).abs() < 50.0, "{}", tw.mean_value_bytes());
        let mut g = Generator::new(&kv).unwrap();
        let n = 100_000;
        let gets = (0..n).filter(|_| g.next_request().op == Op::Get).count();
        assert!((gets as f64 / n as f64 - 0.8).abs() < 0.01);
    }

    #[test]
    fn deterministic_by_seed_and_sizes_follow_the_key() {
        let s = preset("twitter-cluster12").unwrap();
        let a: Vec<Request> = {
            let mut g = Generator::new(&s).unwrap();
            (0..1000).map(|_| g.next_request()).collect()
        };
        let b: Vec<Request> = {
            let mut g = Generator::new(&s).unwrap();
            (0..1000).map(|_| g.next_request()).collect()
        };
        assert_eq!(a, b);
        let g = Generator::new(&s).unwrap();
        for r in &a {
            assert_eq!(g.sizes(r.key), (r.key_bytes, r.value_bytes));
            assert!(r.value_bytes >= 64 && r.value_bytes <= 8192);
        }
        let c: Vec<Request> = {
            let mut g = Generator::new(&WorkloadSpec { seed: 7, ..s }).unwrap();
            (0..1000).map(|_| g.next_request()).collect()
        };
        assert_ne!(a, c);
    }

    #[test]
    fn bad_specs_are_rejected_with_the_key_named() {
        let s = WorkloadSpec { get_fraction: 0.5, set_fraction: 0.2, ..preset("kvcache").unwrap() };
        let e = Generator::new(&s).err().unwrap().to_string();
        assert!(e.contains("get_fraction"), "{e}");
        let s = WorkloadSpec { keys: 0, ..preset("kvcache").unwrap() };
        assert!(Generator::new(&s).err().unwrap().to_string().contains("keys"));
    }
}
