//! Cache workloads: a synthetic generator (popularity, sizes, op mix, TTL, one-hit wonders,
//! time) with presets modelled on published statistics, deterministic by seed.
//!
//! Sources of the preset numbers are in docs/case-studies/fdp-cache.md.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::error::{CacheError, Result};
use crate::hash::mix64;
use ssdlab_core::workload::zipf::ZipfTable;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// Key lifecycles: every key is born with a SET and requested again a random number of times
/// soon after, instead of requests drawn from a fixed population of keys. The share of keys
/// requested only once and the mean requests per key then hold per key, whatever the run's
/// length (with a fixed population they depend on how many requests a run makes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    /// Share of keys requested once: the SET that creates them (one-hit wonders).
    pub one_hit_keys: f64,
    /// Mean requests per key, the creating SET included.
    pub requests_per_key: f64,
    /// Mean delay (seconds of workload time) from a key's SET to each later request of it,
    /// exponentially distributed.
    pub reaccess_mean_s: f64,
}

impl Lifecycle {
    /// Mean later requests of a key that has any (at least one).
    fn mean_later_if_any(&self) -> f64 {
        (self.requests_per_key - 1.0) / (1.0 - self.one_hit_keys)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadSpec {
    /// Distinct popular keys (Zipf ranks; unused with `lifecycle`).
    pub keys: u64,
    /// Zipf exponent of the popular keys (unused with `lifecycle`).
    pub zipf_alpha: f64,
    pub get_fraction: f64,
    pub set_fraction: f64,
    pub delete_fraction: f64,
    /// Fraction of requests to a fresh key that is never requested again (unused with
    /// `lifecycle`).
    pub one_hit_fraction: f64,
    /// Key lifecycles instead of a fixed key population (see [`Lifecycle`]): `get_fraction`
    /// and `delete_fraction` then apply to the whole stream but fall on later requests only
    /// (a key's first request is its SET).
    pub lifecycle: Option<Lifecycle>,
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
pub const PRESETS: &[&str] = &["kvcache", "kvcache-wo", "kvcache-sizes", "twitter-cluster12"];

/// A named workload preset (see docs/case-studies/fdp-cache.md for the sources).
pub fn preset(name: &str) -> Option<WorkloadSpec> {
    // Meta kvcache: GET:SET = 4:1, Zipf ~0.97; values mostly <= 2 KiB (the three small bins
    // average 338 B), plus a large-object tail (5% of values at 2-64 KiB, ssdlab's choice) so the
    // LOC is busy. CacheLib's kvcache-derived size table (`kvcache-sizes` below) has a mean of
    // 335 B with its tail included: 0.42% of values above 2 KiB, carrying 49% of the bytes.
    let kv = WorkloadSpec {
        keys: 4_000_000,
        zipf_alpha: 0.97,
        get_fraction: 0.8,
        set_fraction: 0.2,
        delete_fraction: 0.0,
        one_hit_fraction: 0.0,
        lifecycle: None,
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
        // `kvcache` with the value sizes of CacheLib's kvcache-derived size table
        // (cachelib/cachebench/test_configs/hit_ratio/kvcache_reg/sizes.json: 7520 discrete sizes
        // of 31 B to 511 KiB with their weights, mean 335 B), binned by powers of two (log-uniform
        // within a bin). Values above 64 KiB (0.05% of values, 41% of the bytes) do not fit the
        // quick device's 128 KiB regions twice, so they are folded into 64 KiB values with their
        // bytes kept (a 512 KiB value counts as eight 64 KiB ones; the last bin). Above 2 KiB:
        // 0.42% of the table's values (0.58% after folding), 49% of the value bytes.
        "kvcache-sizes" => WorkloadSpec {
            value_bins: vec![
                SizeBin { min: 31, max: 63, weight: 0.000754 },
                SizeBin { min: 64, max: 128, weight: 0.371301 },
                SizeBin { min: 129, max: 256, weight: 0.557475 },
                SizeBin { min: 257, max: 512, weight: 0.039268 },
                SizeBin { min: 513, max: 1024, weight: 0.021198 },
                SizeBin { min: 1025, max: 2048, weight: 0.004216 },
                SizeBin { min: 2049, max: 4096, weight: 0.001886 },
                SizeBin { min: 4097, max: 8192, weight: 0.001003 },
                SizeBin { min: 8193, max: 16384, weight: 0.000438 },
                SizeBin { min: 16385, max: 32768, weight: 0.000259 },
                SizeBin { min: 32769, max: 65536, weight: 0.0000937 },
                SizeBin { min: 65536, max: 65536, weight: 0.002112 },
            ],
            ..kv.clone()
        },
        // The same keys and sizes without GETs (the paper's "WO KV Cache").
        "kvcache-wo" => WorkloadSpec { get_fraction: 0.0, set_fraction: 1.0, set_on_miss: false, ..kv },
        // Twitter cluster12 (twitter/cache-trace, stat/2020Mar.md): SET:GET = 4:1, mean value
        // 1030 B, 81.43% of keys requested once, 1.3 requests per key, TTL 300 s, a production
        // miss ratio of 0.58%. Later requests come within the TTL: if expiry alone caused the
        // production misses, P(delay > 300 s) = 0.0058 gives a mean delay of
        // 300 / ln(1 / 0.0058) = 58.2 s.
        "twitter-cluster12" => WorkloadSpec {
            keys: 4_000_000,
            zipf_alpha: 0.30,
            get_fraction: 0.2,
            set_fraction: 0.8,
            delete_fraction: 0.0,
            one_hit_fraction: 0.0,
            lifecycle: Some(Lifecycle { one_hit_keys: 0.8143, requests_per_key: 1.3, reaccess_mean_s: 58.2 }),
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
        if let Some(l) = &self.lifecycle {
            if !(0.0..1.0).contains(&l.one_hit_keys) {
                return bad("lifecycle.one_hit_keys", format!("{} is not in [0, 1)", l.one_hit_keys));
            }
            // Every key that is not a one-hit wonder has at least one later request.
            if !(l.requests_per_key.is_finite() && l.requests_per_key - 1.0 >= 1.0 - l.one_hit_keys) {
                return bad(
                    "lifecycle.requests_per_key",
                    format!(
                        "{} is below 1 + (1 - one_hit_keys) = {}: keys requested more than once have two requests or more",
                        l.requests_per_key,
                        2.0 - l.one_hit_keys
                    ),
                );
            }
            if !(l.reaccess_mean_s > 0.0 && l.reaccess_mean_s.is_finite()) {
                return bad("lifecycle.reaccess_mean_s", format!("{} must be positive", l.reaccess_mean_s));
            }
            let later = 1.0 - 1.0 / l.requests_per_key;
            if self.get_fraction + self.delete_fraction > later + 1e-9 {
                return bad(
                    "get_fraction",
                    format!(
                        "get + delete fractions {} exceed the share of later requests {later:.4} (1 - 1 / requests_per_key): a key's first request is its SET",
                        self.get_fraction + self.delete_fraction
                    ),
                );
            }
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
#[derive(Serialize, Deserialize)]
pub struct Generator {
    spec: WorkloadSpec,
    rng: Pcg64Mcg,
    /// Popular keys' ranks (none with key lifecycles).
    zipf: Option<ZipfTable>,
    cum: Vec<f64>,
    /// ln(max / min) of each value-size bin (log-uniform sizes by one `exp`).
    ln_span: Vec<f64>,
    i: u64,
    fresh: u64,
    salt: u64,
    /// A SET owed after a GET miss (look-aside).
    pending: Option<Request>,
    /// Key lifecycles: later requests owed, as (due time in ns, fresh-key number), earliest
    /// first.
    due: BinaryHeap<Reverse<(u64, u64)>>,
    /// Requests generated ahead of their turn ([`Generator::upcoming`]); the stream is the
    /// same with or without them, as generation never depends on how the cache answers.
    ahead: VecDeque<Request>,
}

impl Generator {
    pub fn new(spec: &WorkloadSpec) -> Result<Generator> {
        spec.validate()?;
        let zipf = spec.lifecycle.is_none().then(|| ZipfTable::new(spec.keys, spec.zipf_alpha));
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
            due: BinaryHeap::new(),
            ahead: VecDeque::new(),
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

    /// The key of fresh key number `n` (apart from the popular keys' ranks).
    fn fresh_key_of(&self, n: u64) -> u64 {
        mix64((1u64 << 63) | n) ^ self.salt
    }

    fn fresh_key(&mut self) -> (u64, u64) {
        self.fresh += 1;
        (self.fresh, self.fresh_key_of(self.fresh))
    }

    pub fn next_request(&mut self) -> Request {
        if let Some(p) = self.pending.take() {
            return p;
        }
        self.ahead.pop_front().unwrap_or_else(|| self.generate())
    }

    /// The key of the request `k` places after the next one the stream gives (a look-aside SET
    /// owed after a miss aside), so a run can start loading what it will touch.
    pub fn upcoming(&mut self, k: usize) -> u64 {
        while self.ahead.len() <= k {
            let r = self.generate();
            self.ahead.push_back(r);
        }
        self.ahead[k].key
    }

    fn generate(&mut self) -> Request {
        let t = (self.i as f64 * 1e9 / self.spec.rate_rps) as u64;
        self.i += 1;
        let (key, op) = match self.spec.lifecycle {
            Some(l) => self.lifecycle_request(&l, t),
            None => {
                let s = &self.spec;
                let key = match &self.zipf {
                    Some(z) if !(s.one_hit_fraction > 0.0 && self.rng.gen::<f64>() < s.one_hit_fraction) => {
                        mix64(z.rank(self.rng.gen()) ^ self.salt)
                    }
                    _ => self.fresh_key().1,
                };
                (key, self.op(0.0))
            }
        };
        let (key_bytes, value_bytes) = self.sizes(key);
        Request { key, op, key_bytes, value_bytes, ttl_s: self.spec.ttl_s, time_ns: t }
    }

    /// The operation of a request; `first` is the share of the stream that is keys' first
    /// requests (SETs) and not this one, as GET and DELETE fractions are of the whole stream.
    fn op(&mut self, first: f64) -> Op {
        let s = &self.spec;
        let u: f64 = self.rng.gen::<f64>() * (1.0 - first);
        if u < s.get_fraction {
            Op::Get
        } else if u >= 1.0 - first - s.delete_fraction {
            Op::Delete
        } else {
            Op::Set
        }
    }

    /// Key lifecycles: a later request that is due, else a new key's SET, which schedules the
    /// key's later requests (none for a one-hit wonder; else 1 + a geometric number, delays
    /// exponential). Later requests make up 1 - 1 / requests_per_key of the stream.
    fn lifecycle_request(&mut self, l: &Lifecycle, t: u64) -> (u64, Op) {
        if let Some(&Reverse((due, n))) = self.due.peek() {
            if due <= t {
                self.due.pop();
                return (self.fresh_key_of(n), self.op(1.0 / l.requests_per_key));
            }
        }
        let (n, key) = self.fresh_key();
        if self.rng.gen::<f64>() >= l.one_hit_keys {
            // 1 + Geometric(p) on {0, 1, ...} with mean 1/p - 1 = mean_later_if_any - 1.
            let p = 1.0 / l.mean_later_if_any();
            let mut later = 1;
            while self.rng.gen::<f64>() >= p {
                later += 1;
            }
            for _ in 0..later {
                let u: f64 = self.rng.gen();
                let delay = -l.reaccess_mean_s * 1e9 * (1.0 - u).ln();
                self.due.push(Reverse((t + delay as u64, n)));
            }
        }
        (key, Op::Set)
    }

    /// Requests given out so far (look-aside SETs excluded).
    pub fn issued(&self) -> u64 {
        self.i - self.ahead.len() as u64
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
        // CacheLib's kvcache size table: mean 335 B, 49% of the value bytes above 2 KiB (the
        // folded 64 KiB bin keeps the bytes of the larger values), over distinct keys' sizes.
        let sz = preset("kvcache-sizes").unwrap();
        let g = Generator::new(&sz).unwrap();
        let v: Vec<u64> = (0..400_000u64).map(|k| g.sizes(k).1 as u64).collect();
        let total: u64 = v.iter().sum();
        let mean = total as f64 / v.len() as f64;
        let above = v.iter().filter(|&&b| b > 2048).sum::<u64>() as f64 / total as f64;
        assert!((mean - 335.0).abs() < 25.0 && (above - 0.49).abs() < 0.05, "mean {mean}, bytes above 2 KiB {above}");
        // The experiment's own tail: three quarters of the bytes above 2 KiB.
        assert!((kv.mean_value_bytes() - 1235.0).abs() < 10.0, "{}", kv.mean_value_bytes());
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

    /// The twitter-cluster12 preset's per-key statistics hold in the stream: the share of keys
    /// requested once, requests per key, the op mix, and every later request within its
    /// scheduled delay of the key's SET.
    #[test]
    fn key_lifecycles_match_the_cluster_statistics_per_key() {
        use std::collections::HashMap;
        let s = preset("twitter-cluster12").unwrap();
        let l = s.lifecycle.unwrap();
        // Delays of a few seconds, so 3 M requests hold many lifetimes; keys born in the last
        // 20 mean delays are left out of the per-key counts (their later requests fall past
        // the end).
        let s = WorkloadSpec { rate_rps: 100_000.0, lifecycle: Some(Lifecycle { reaccess_mean_s: 1.0, ..l }), ..s };
        let mut g = Generator::new(&s).unwrap();
        let n = 3_000_000u64;
        let cutoff = (n as f64 / s.rate_rps - 20.0) * 1e9;
        // key -> (SET time, requests)
        let mut keys: HashMap<u64, (u64, u32)> = HashMap::new();
        // The op mix is counted once later requests are in full flow (after 10 mean delays:
        // a run's first few mean delays hold fewer of them).
        let (mut gets, mut sets, mut delay_sum, mut later) = (0u64, 0u64, 0.0, 0u64);
        for _ in 0..n {
            let r = g.next_request();
            match r.op {
                _ if r.time_ns < 10_000_000_000 => {}
                Op::Get => gets += 1,
                Op::Set => sets += 1,
                Op::Delete => unreachable!("no deletes in the preset"),
            }
            match keys.get_mut(&r.key) {
                Some((born, count)) => {
                    *count += 1;
                    delay_sum += (r.time_ns - *born) as f64;
                    later += 1;
                }
                None => {
                    assert_eq!(r.op, Op::Set, "a key's first request is its SET");
                    keys.insert(r.key, (r.time_ns, 1));
                }
            }
        }
        let counted: Vec<u32> = keys.values().filter(|(born, _)| (*born as f64) < cutoff).map(|k| k.1).collect();
        let once = counted.iter().filter(|&&c| c == 1).count() as f64 / counted.len() as f64;
        let per_key = counted.iter().map(|&c| c as f64).sum::<f64>() / counted.len() as f64;
        assert!((once - l.one_hit_keys).abs() < 0.005, "one-hit keys {once}");
        assert!((per_key - l.requests_per_key).abs() < 0.01, "requests per key {per_key}");
        assert!((gets as f64 / (gets + sets) as f64 - 0.2).abs() < 0.002, "gets {gets} sets {sets}");
        let mean_delay_s = delay_sum / later as f64 / 1e9;
        assert!((mean_delay_s - 1.0).abs() < 0.05, "mean delay {mean_delay_s} s");
        // Deterministic by seed, as the population model is.
        let mut a = Generator::new(&s).unwrap();
        let mut b = Generator::new(&s).unwrap();
        assert!((0..10_000).all(|_| a.next_request() == b.next_request()));
    }

    #[test]
    fn bad_specs_are_rejected_with_the_key_named() {
        let s = WorkloadSpec { get_fraction: 0.5, set_fraction: 0.2, ..preset("kvcache").unwrap() };
        let e = Generator::new(&s).err().unwrap().to_string();
        assert!(e.contains("get_fraction"), "{e}");
        let s = WorkloadSpec { keys: 0, ..preset("kvcache").unwrap() };
        assert!(Generator::new(&s).err().unwrap().to_string().contains("keys"));
        let tw = preset("twitter-cluster12").unwrap();
        let l = tw.lifecycle.unwrap();
        let s = WorkloadSpec { lifecycle: Some(Lifecycle { requests_per_key: 1.1, ..l }), ..tw.clone() };
        assert!(Generator::new(&s).err().unwrap().to_string().contains("lifecycle.requests_per_key"));
        let s = WorkloadSpec { get_fraction: 0.5, set_fraction: 0.5, ..tw.clone() };
        let e = Generator::new(&s).err().unwrap().to_string();
        assert!(e.contains("get_fraction") && e.contains("first request"), "{e}");
        let s = WorkloadSpec { lifecycle: Some(Lifecycle { reaccess_mean_s: 0.0, ..l }), ..tw };
        assert!(Generator::new(&s).err().unwrap().to_string().contains("reaccess_mean_s"));
    }
}
