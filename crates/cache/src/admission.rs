//! Admission policies: which items evicted from DRAM are written to flash.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::config::{AdmissionConfig, AdmissionKind};

#[derive(Serialize, Deserialize)]
pub struct Admission {
    kind: AdmissionKind,
    probability: f64,
    rate: f64,
    tokens: f64,
    last_ns: u64,
    rng: Pcg64Mcg,
    pub admitted: u64,
    pub rejected: u64,
}

impl Admission {
    pub fn new(cfg: &AdmissionConfig, seed: u64) -> Admission {
        Admission {
            kind: cfg.kind,
            probability: cfg.probability,
            rate: cfg.rate_bytes_per_s,
            tokens: cfg.rate_bytes_per_s,
            last_ns: 0,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0xad31_5510_u64),
            admitted: 0,
            rejected: 0,
        }
    }

    /// Decide for an item of `bytes` leaving DRAM at workload time `now_ns`.
    pub fn admit(&mut self, bytes: u32, now_ns: u64) -> bool {
        let ok = match self.kind {
            AdmissionKind::AcceptAll => true,
            AdmissionKind::Random => self.rng.gen::<f64>() < self.probability,
            AdmissionKind::Rate => {
                let dt = now_ns.saturating_sub(self.last_ns) as f64 * 1e-9;
                self.last_ns = self.last_ns.max(now_ns);
                self.tokens = (self.tokens + dt * self.rate).min(self.rate);
                if self.tokens >= bytes as f64 {
                    self.tokens -= bytes as f64;
                    true
                } else {
                    false
                }
            }
        };
        if ok {
            self.admitted += 1
        } else {
            self.rejected += 1
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_admit_what_they_promise() {
        let mut all = Admission::new(&AdmissionConfig::default(), 1);
        assert!((0..100).all(|_| all.admit(100, 0)));
        let mut half = Admission::new(&AdmissionConfig { kind: AdmissionKind::Random, probability: 0.5, rate_bytes_per_s: 0.0 }, 7);
        let n = (0..10_000).filter(|_| half.admit(100, 0)).count();
        assert!((4_700..5_300).contains(&n), "{n}");
        // 1000 B/s: over 10 s of 100-byte items every 10 ms (10 kB/s offered), about 10% pass.
        let mut rate = Admission::new(&AdmissionConfig { kind: AdmissionKind::Rate, probability: 1.0, rate_bytes_per_s: 1000.0 }, 1);
        let n = (1..=1000u64).filter(|i| rate.admit(100, i * 10_000_000)).count();
        assert!((100..=111).contains(&n), "{n}");
    }
}
