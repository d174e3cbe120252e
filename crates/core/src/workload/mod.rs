//! Workloads: synthetic generators and trace replay, both producing host commands.

pub mod trace;
pub mod zipf;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::config::{MixOrder, Pattern, WorkloadConfig};
use crate::error::{Error, Result};
use zipf::Zipf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read = 0,
    Write = 1,
    Trim = 2,
    Flush = 3,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim => "trim",
            Op::Flush => "flush",
        }
    }
}

/// One host command. Addresses in logical sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cmd {
    pub op: Op,
    pub lba: u64,
    pub sectors: u32,
    /// Arrival time for open-loop replay (ns from the start of the trace).
    pub at_ns: Option<u64>,
    /// Placement identifier of a write (FDP), if any.
    pub placement: Option<u16>,
}

/// Anything that yields host commands.
pub trait Source {
    /// The next command, None at the end, or an error (bad trace line).
    fn next_cmd(&mut self) -> Option<Result<Cmd>>;
}

/// A synthetic workload (see `WorkloadConfig`).
pub struct Synthetic {
    pattern: Pattern,
    read_fraction: f64,
    trim_fraction: f64,
    sizes: Vec<u32>,
    cum_weights: Vec<f64>,
    /// First sector of the range and its length.
    base: u64,
    span: u64,
    placement: Option<u16>,
    hot_space: f64,
    hot_writes: f64,
    next_seq: u64,
    zipf: Option<(Zipf, u64)>,
    rng: Pcg64Mcg,
}

impl Synthetic {
    /// A generator over `span` of `logical_sectors` starting at `offset` (fractions).
    pub fn new(cfg: &WorkloadConfig, logical_sectors: u64, sector_bytes: u32, seed: u64) -> Result<Synthetic> {
        let base = (logical_sectors as f64 * cfg.offset).floor() as u64;
        let span = ((logical_sectors as f64 * cfg.span).floor() as u64).clamp(1, logical_sectors - base.min(logical_sectors - 1));
        let sizes: Vec<u32> = cfg.block_bytes.iter().map(|&b| (b / sector_bytes as u64) as u32).collect();
        if let Some(&big) = sizes.iter().max() {
            if big as u64 > span {
                return Err(Error::config(
                    "workload.block_bytes",
                    format!("requests of {big} sectors do not fit the span of {span} sectors"),
                ));
            }
        }
        let total: f64 = cfg.block_weights.iter().sum();
        let mut acc = 0.0;
        let cum_weights = cfg.block_weights.iter().map(|w| {
            acc += w / total;
            acc
        });
        let zipf = if cfg.pattern == Pattern::Zipf {
            // Ranks are drawn for the smallest request size; larger requests round down.
            let n = span / *sizes.iter().min().unwrap() as u64;
            let z = Zipf::new(n, cfg.zipf_theta).map_err(|e| Error::config("workload.zipf_theta", format!("{e}")))?;
            Some((z, coprime_stride(n)))
        } else {
            None
        };
        Ok(Synthetic {
            pattern: cfg.pattern,
            read_fraction: cfg.read_fraction,
            trim_fraction: cfg.trim_fraction,
            sizes,
            cum_weights: cum_weights.collect(),
            base,
            span,
            placement: if cfg.placement >= 0 { Some(cfg.placement as u16) } else { None },
            hot_space: cfg.hot_space,
            hot_writes: cfg.hot_writes,
            next_seq: 0,
            zipf,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x3017_c0de),
        })
    }

    fn size(&mut self) -> u32 {
        if self.sizes.len() == 1 {
            return self.sizes[0];
        }
        let r: f64 = self.rng.gen();
        let i = self.cum_weights.iter().position(|&c| r < c).unwrap_or(self.sizes.len() - 1);
        self.sizes[i]
    }

    /// Next command (synthetic workloads never end by themselves).
    #[inline]
    pub fn generate(&mut self) -> Cmd {
        let op = if self.read_fraction == 0.0 && self.trim_fraction == 0.0 {
            Op::Write
        } else {
            let r: f64 = self.rng.gen();
            if r < self.read_fraction {
                Op::Read
            } else if r < self.read_fraction + self.trim_fraction {
                Op::Trim
            } else {
                Op::Write
            }
        };
        let k = self.size();
        let slots = self.span / k as u64;
        let slot = match self.pattern {
            Pattern::Sequential => {
                let s = self.next_seq % slots;
                self.next_seq = s + 1;
                s
            }
            Pattern::Uniform => self.rng.gen_range(0..slots),
            Pattern::Zipf => {
                let (z, stride) = self.zipf.as_ref().unwrap();
                let n = self.span / *self.sizes.iter().min().unwrap() as u64;
                let rank = z.rank(&mut self.rng) - 1;
                // Scatter ranks over the span so hot sectors are not all adjacent.
                let scattered = ((rank as u128 * *stride as u128) % n as u128) as u64;
                (scattered * self.sizes.iter().min().copied().unwrap() as u64 / k as u64).min(slots - 1)
            }
            Pattern::Hotcold => {
                let hot = ((slots as f64 * self.hot_space) as u64).clamp(1, slots);
                if self.rng.gen::<f64>() < self.hot_writes || hot == slots {
                    self.rng.gen_range(0..hot)
                } else {
                    self.rng.gen_range(hot..slots)
                }
            }
        };
        Cmd { op, lba: self.base + slot * k as u64, sectors: k, at_ns: None, placement: self.placement }
    }
}

impl Source for Synthetic {
    fn next_cmd(&mut self) -> Option<Result<Cmd>> {
        Some(Ok(self.generate()))
    }
}

/// Several synthetic workloads interleaved (e.g. a sequential stream on one FDP handle and
/// random overwrites on another): with [`MixOrder::Random`] each command comes from workload i
/// with probability weight_i / sum of weights; with [`MixOrder::Even`] by smooth weighted
/// round-robin, so workload i's commands are spread evenly, one every sum / weight_i.
pub struct Mix {
    parts: Vec<Synthetic>,
    cum: Vec<f64>,
    rng: Pcg64Mcg,
    /// Even order: each part's weight share, and its credit (the part with the most goes next,
    /// then gives up 1).
    even: Option<(Vec<f64>, Vec<f64>)>,
}

impl Mix {
    pub fn new(parts: Vec<(Synthetic, f64)>, seed: u64, order: MixOrder) -> Result<Mix> {
        let total: f64 = parts.iter().map(|p| p.1).sum();
        if parts.is_empty() || !(total > 0.0) || parts.iter().any(|p| !(p.1 >= 0.0)) {
            return Err(Error::config("mix", "needs at least one workload and weights >= 0 with a positive sum"));
        }
        let mut acc = 0.0;
        let cum = parts
            .iter()
            .map(|p| {
                acc += p.1 / total;
                acc
            })
            .collect();
        let even = (order == MixOrder::Even).then(|| (parts.iter().map(|p| p.1 / total).collect(), vec![0.0; parts.len()]));
        Ok(Mix { parts: parts.into_iter().map(|p| p.0).collect(), cum, rng: Pcg64Mcg::seed_from_u64(seed ^ 0x6d69_7800), even })
    }
}

impl Source for Mix {
    fn next_cmd(&mut self) -> Option<Result<Cmd>> {
        let i = match &mut self.even {
            None => {
                let r: f64 = self.rng.gen();
                self.cum.iter().position(|&c| r < c).unwrap_or(self.parts.len() - 1)
            }
            Some((share, credit)) => {
                let mut best = 0;
                for j in 0..credit.len() {
                    credit[j] += share[j];
                    if credit[j] > credit[best] {
                        best = j;
                    }
                }
                credit[best] -= 1.0;
                best
            }
        };
        Some(Ok(self.parts[i].generate()))
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A multiplier coprime with `n`, near n times the golden ratio, so rank -> rank * s mod n is a
/// permutation that spreads neighbours far apart.
fn coprime_stride(n: u64) -> u64 {
    if n <= 2 {
        return 1;
    }
    let mut s = ((n as f64 * 0.618_033_988_75) as u64).max(1) | 1;
    while gcd(s, n) != 1 {
        s += 2;
    }
    s % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stride_is_a_permutation() {
        for n in [1u64, 2, 3, 10, 64, 1000, 4097] {
            let s = coprime_stride(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                seen[((r * s) % n) as usize] = true;
            }
            assert!(seen.iter().all(|&x| x), "n={n}");
        }
    }

    /// The gaps between consecutive commands of the mix's second part (a 64 KiB stream among
    /// 4 KiB writes, weights 3 : 1).
    fn gaps(order: MixOrder) -> Vec<usize> {
        let w = |b: u64| WorkloadConfig { block_bytes: vec![b], ..Default::default() };
        let parts =
            vec![(Synthetic::new(&w(4096), 1 << 20, 4096, 1).unwrap(), 3.0), (Synthetic::new(&w(65536), 1 << 20, 4096, 2).unwrap(), 1.0)];
        let mut m = Mix::new(parts, 5, order).unwrap();
        let big: Vec<usize> = (0..4000).filter(|_| m.next_cmd().unwrap().unwrap().sectors == 16).collect();
        big.windows(2).map(|p| p[1] - p[0]).collect()
    }

    #[test]
    fn an_even_mix_spaces_each_part_by_its_weight_and_a_random_one_by_chance() {
        let even = gaps(MixOrder::Even);
        assert_eq!(even.len(), 999);
        assert!(even.iter().all(|&g| g == 4), "{even:?}");
        let random = gaps(MixOrder::Random);
        let mean = random.iter().sum::<usize>() as f64 / random.len() as f64;
        assert!((mean - 4.0).abs() < 0.3, "mean gap {mean}");
        assert!(random.contains(&1) && random.iter().any(|&g| g >= 12), "random gaps vary: {random:?}");
    }

    #[test]
    fn hotcold_sends_the_configured_share_to_the_hot_space() {
        let cfg = WorkloadConfig { pattern: Pattern::Hotcold, hot_space: 0.1, hot_writes: 0.9, ..Default::default() };
        let mut g = Synthetic::new(&cfg, 100_000, 4096, 1).unwrap();
        let n = 100_000;
        let hot = (0..n).filter(|_| g.generate().lba < 10_000).count();
        let share = hot as f64 / n as f64;
        assert!((share - 0.9).abs() < 0.01, "{share}");
    }

    #[test]
    fn requests_are_aligned_and_inside_the_span() {
        let cfg =
            WorkloadConfig { block_bytes: vec![4096, 16384, 65536], block_weights: vec![1.0, 1.0, 1.0], span: 0.5, ..Default::default() };
        let mut g = Synthetic::new(&cfg, 10_000, 4096, 7).unwrap();
        for _ in 0..10_000 {
            let c = g.generate();
            assert_eq!(c.lba % c.sectors as u64, 0);
            assert!(c.lba + c.sectors as u64 <= 5_000);
        }
    }

    #[test]
    fn zipf_concentrates_on_few_addresses() {
        let cfg = WorkloadConfig { pattern: Pattern::Zipf, zipf_theta: 1.2, ..Default::default() };
        let mut g = Synthetic::new(&cfg, 100_000, 4096, 3).unwrap();
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *counts.entry(g.generate().lba).or_insert(0u32) += 1;
        }
        let mut v: Vec<u32> = counts.into_values().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let top100: u32 = v.iter().take(100).sum();
        assert!(top100 > 50_000, "top 100 addresses got {top100} of 100000");
    }
}
