//! Zipf-distributed ranks, P(k) ∝ k^-alpha over 1..=n: the one place ssdlab draws them. There
//! are three samplers, not one, because they draw different streams from the same seed and
//! every stream feeds pinned digests and report figures (a run is reproduced by its seed):
//!
//! - [`Zipf`]: rand_distr's rejection-inversion (Hörmann and Derflinger), exact for any
//!   exponent, two or three transcendental calls per sample: the core's synthetic `zipf`
//!   pattern and the LSM workloads' key choice;
//! - [`ZipfTable`]: inverse transform over a tabulated CDF, one uniform variate and no `pow`
//!   per sample, the tail within 0.1%: fdp-cache's key popularity and flashblox's YCSB;
//! - [`YcsbZipf`]: YCSB's own generator (Gray et al.), exponent below 1, rank 0 the most
//!   popular: dpuswap's key-value workload, as YCSB draws it.
//!
//! # The table
//!
//! Sampling is an inverse transform over the CDF tabulated at "knots": every rank up to
//! [`EXACT_RANKS`], then ranks growing by a factor (1 + 1/[`KNOTS_PER_E`]·e-fold) up to n. A
//! uniform variate picks the knot interval through a guide table (Chen and Asau's indexed
//! search, so the lookup is a couple of probes instead of a binary search), then a rank
//! uniformly inside the interval. The head is exact; inside a tail interval the true
//! probabilities differ by at most (1 + 1/1024)^alpha - 1 (0.1% at alpha = 1), which is the
//! only approximation. One uniform variate per sample and no `pow`: rejection-inversion
//! (`rand_distr::Zipf`) costs two or three transcendental calls per sample, which was a tenth
//! of a simulated cache request.
//!
//! The CDF needs the generalised harmonic numbers H(k) = sum_{i<=k} i^-alpha: summed exactly
//! up to [`EXACT_SUM`], beyond by Euler-Maclaurin from there (relative error far below 1e-12).

use rand::Rng;
use rand_distr::Distribution;
use serde::{Deserialize, Serialize};

/// Rejection-inversion sampling (rand_distr's `Zipf`): exact, for any exponent > 0.
#[derive(Debug, Clone, Copy)]
pub struct Zipf(rand_distr::Zipf<f64>);

impl Zipf {
    /// The distribution over 1..=n with exponent `alpha`; an error for n = 0 or alpha <= 0.
    pub fn new(n: u64, alpha: f64) -> Result<Zipf, rand_distr::ZipfError> {
        rand_distr::Zipf::new(n, alpha).map(Zipf)
    }

    /// A rank in 1..=n.
    #[inline]
    pub fn rank<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.0.sample(rng) as u64
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases"): ranks 0..n, rank 0 the most popular.
#[derive(Debug, Clone)]
pub struct YcsbZipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl YcsbZipf {
    pub fn new(n: u64, theta: f64) -> YcsbZipf {
        assert!(n >= 2 && (0.0..1.0).contains(&theta), "zipf over {n} items, theta {theta}");
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let (zetan, zeta2) = (zeta(n), zeta(2));
        YcsbZipf { n, theta, zetan, alpha: 1.0 / (1.0 - theta), eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan) }
    }

    /// A rank in 0..n, from one uniform variate of `rng`.
    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n - 1)
    }
}

/// Ranks below this are knots of their own (exact probabilities).
const EXACT_RANKS: u64 = 1024;
/// Beyond the exact head, knots are spaced by a factor 1 + 1/KNOTS_PER_E.
const KNOTS_PER_E: f64 = 1024.0;
/// H(k) is summed term by term up to this rank.
const EXACT_SUM: u64 = 1 << 16;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZipfTable {
    n: u64,
    /// Last rank of each interval (increasing); interval j is (knots[j-1], knots[j]].
    knots: Vec<u64>,
    /// P(rank <= knots[j]).
    cdf: Vec<f64>,
    /// guide[g] = first interval whose CDF exceeds g / guide.len().
    guide: Vec<u32>,
}

/// Euler-Maclaurin tail: H(b) - H(a) for a < b (both >= 1), to the alpha(alpha+1)(alpha+2)
/// term.
fn harmonic_between(a: f64, b: f64, alpha: f64) -> f64 {
    let integral = if (alpha - 1.0).abs() < 1e-12 { (b / a).ln() } else { (b.powf(1.0 - alpha) - a.powf(1.0 - alpha)) / (1.0 - alpha) };
    let f = |x: f64| x.powf(-alpha);
    let d1 = |x: f64| -alpha * x.powf(-alpha - 1.0);
    let d3 = |x: f64| -alpha * (alpha + 1.0) * (alpha + 2.0) * x.powf(-alpha - 3.0);
    integral + (f(b) - f(a)) / 2.0 + (d1(b) - d1(a)) / 12.0 - (d3(b) - d3(a)) / 720.0
}

impl ZipfTable {
    /// The distribution over 1..=n (n >= 1) with exponent `alpha` >= 0.
    pub fn new(n: u64, alpha: f64) -> ZipfTable {
        assert!(n >= 1 && alpha >= 0.0 && alpha.is_finite(), "Zipf over 1..={n} with alpha {alpha}");
        let mut knots = Vec::new();
        let mut k = 1u64;
        while k <= n {
            knots.push(k);
            k = if k < EXACT_RANKS { k + 1 } else { (k + 1).max((k as f64 * (1.0 + 1.0 / KNOTS_PER_E)) as u64) };
        }
        if *knots.last().expect("n >= 1") != n {
            knots.push(n);
        }
        // H at every knot: exact sums while cheap, then Euler-Maclaurin from the last exact one.
        let mut h = Vec::with_capacity(knots.len());
        let (mut sum, mut i) = (0.0f64, 0u64);
        let mut base = (0u64, 0.0f64);
        for &k in &knots {
            if k <= EXACT_SUM {
                while i < k {
                    i += 1;
                    sum += (i as f64).powf(-alpha);
                }
                base = (k, sum);
                h.push(sum);
            } else {
                h.push(base.1 + harmonic_between(base.0 as f64, k as f64, alpha));
            }
        }
        let total = *h.last().expect("knots");
        let mut cdf: Vec<f64> = h.iter().map(|x| x / total).collect();
        *cdf.last_mut().expect("knots") = 1.0;
        let g = (knots.len() * 2).next_power_of_two().max(64);
        let mut guide = Vec::with_capacity(g);
        let mut j = 0usize;
        for x in 0..g {
            let u = x as f64 / g as f64;
            while cdf[j] <= u {
                j += 1;
            }
            guide.push(j as u32);
        }
        ZipfTable { n, knots, cdf, guide }
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    /// Rank in 1..=n for a uniform variate `u` in [0, 1).
    #[inline]
    pub fn rank(&self, u: f64) -> u64 {
        let mut j = self.guide[((u * self.guide.len() as f64) as usize).min(self.guide.len() - 1)] as usize;
        while self.cdf[j] <= u && j + 1 < self.cdf.len() {
            j += 1;
        }
        let (lo_rank, lo_cdf) = if j == 0 { (0, 0.0) } else { (self.knots[j - 1], self.cdf[j - 1]) };
        let width = self.knots[j] - lo_rank;
        if width == 1 {
            return self.knots[j];
        }
        let frac = (u - lo_cdf) / (self.cdf[j] - lo_cdf);
        (lo_rank + 1 + (frac * width as f64) as u64).min(self.knots[j])
    }

    /// P(rank <= k), from the table (exact at knots).
    pub fn cdf_at(&self, k: u64) -> f64 {
        match self.knots.binary_search(&k) {
            Ok(j) => self.cdf[j],
            Err(0) => 0.0,
            Err(j) if j >= self.knots.len() => 1.0,
            Err(j) => {
                let (a, b) = (self.knots[j - 1], self.knots[j]);
                self.cdf[j - 1] + (self.cdf[j] - self.cdf[j - 1]) * (k - a) as f64 / (b - a) as f64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64Mcg;

    fn exact_h(n: u64, alpha: f64) -> f64 {
        (1..=n).map(|i| (i as f64).powf(-alpha)).sum()
    }

    #[test]
    fn harmonic_numbers_agree_with_direct_sums() {
        for &alpha in &[0.0, 0.3, 0.97, 1.0, 1.5] {
            let n = 3_000_000u64;
            let t = ZipfTable::new(n, alpha);
            for &k in &[1u64, 2, 1000, 70_000, 1_000_000] {
                let want = exact_h(k, alpha) / exact_h(n, alpha);
                let got = t.cdf_at(k);
                // Exact at knots; between knots within the interval's share.
                assert!((got - want).abs() <= 2e-4 * want, "alpha {alpha} k {k}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn samples_follow_the_distribution() {
        let (n, alpha) = (100_000u64, 0.97);
        let t = ZipfTable::new(n, alpha);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let draws = 2_000_000;
        let mut counts = [0u64; 11];
        let mut tail = 0u64;
        for _ in 0..draws {
            let r = t.rank(rng.gen());
            assert!((1..=n).contains(&r));
            if r <= 10 {
                counts[r as usize] += 1;
            }
            if r > 50_000 {
                tail += 1;
            }
        }
        let h = exact_h(n, alpha);
        for k in 1..=10u64 {
            let p = (k as f64).powf(-alpha) / h;
            let sd = (draws as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (counts[k as usize] as f64 - draws as f64 * p).abs() < 5.0 * sd,
                "rank {k}: {} vs {}",
                counts[k as usize],
                draws as f64 * p
            );
        }
        let p_tail = 1.0 - exact_h(50_000, alpha) / h;
        let sd = (draws as f64 * p_tail).sqrt();
        assert!((tail as f64 - draws as f64 * p_tail).abs() < 5.0 * sd, "tail {tail} vs {}", draws as f64 * p_tail);
    }

    #[test]
    fn ycsb_ranks_are_skewed_and_in_range() {
        let z = YcsbZipf::new(1000, 0.99);
        let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
        let mut c = vec![0u32; 1000];
        for _ in 0..100_000 {
            c[z.next(&mut rng) as usize] += 1;
        }
        assert!(c[0] > c[10] && c[10] > c[500]);
        assert!(c[0] as f64 / 100_000.0 > 0.1);
    }

    #[test]
    fn edges() {
        let t = ZipfTable::new(1, 0.97);
        assert_eq!((t.rank(0.0), t.rank(0.999_999)), (1, 1));
        let t = ZipfTable::new(5, 0.0);
        let mut seen = [0u32; 6];
        for i in 0..1000 {
            seen[t.rank(i as f64 / 1000.0) as usize] += 1;
        }
        assert_eq!(&seen[1..], &[200, 200, 200, 200, 200]);
        let t = ZipfTable::new(u32::MAX as u64 * 4, 1.2);
        assert_eq!(t.rank(0.0), 1);
        assert!(t.rank(1.0 - 1e-12) <= u32::MAX as u64 * 4);
    }
}
