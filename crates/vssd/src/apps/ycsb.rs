//! YCSB's core workloads A to F (Cooper et al., SoCC'10; the YCSB distribution's
//! workloads/workloada..f), as request mixes over a growing key space:
//!
//! | mix | operations | request distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | zipfian |
//! | B | 95% read, 5% update | zipfian |
//! | C | 100% read | zipfian |
//! | D | 95% read, 5% insert | latest |
//! | E | 95% scan (1 to 100 records), 5% insert | zipfian start keys |
//! | F | 50% read, 50% read-modify-write | zipfian |
//!
//! Zipfian ranks (theta 0.99) come from the fdp-cache study's table-driven sampler and are
//! scrambled onto the key space (YCSB's ScrambledZipfian), so popular keys are spread out;
//! "latest" counts ranks back from the newest insert. Keys are stored hashed, so a scan walks
//! hash order, as YCSB's hashed keys do.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use ssdlab_core::workload::zipf::ZipfTable;

use crate::error::{Result, VssdError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mix {
    A,
    B,
    C,
    D,
    E,
    F,
}

impl Mix {
    pub fn parse(s: &str) -> Option<Mix> {
        match s.to_ascii_uppercase().as_str() {
            "A" => Some(Mix::A),
            "B" => Some(Mix::B),
            "C" => Some(Mix::C),
            "D" => Some(Mix::D),
            "E" => Some(Mix::E),
            "F" => Some(Mix::F),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct YcsbSpec {
    pub mix: Mix,
    /// Records loaded before the run.
    pub records: u64,
    pub value_bytes: u32,
    pub zipf_theta: f64,
    pub scan_max: u32,
}

impl Default for YcsbSpec {
    fn default() -> Self {
        YcsbSpec { mix: Mix::A, records: 100_000, value_bytes: 1024, zipf_theta: 0.99, scan_max: 100 }
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum YcsbOp {
    Read(u64),
    Update(u64),
    Insert(u64),
    Scan(u64, u32),
    ReadModifyWrite(u64),
}

impl YcsbOp {
    /// Index of the operation kind (for latency histograms): read, update, insert, scan, rmw.
    pub fn kind(&self) -> usize {
        match self {
            YcsbOp::Read(_) => 0,
            YcsbOp::Update(_) => 1,
            YcsbOp::Insert(_) => 2,
            YcsbOp::Scan(..) => 3,
            YcsbOp::ReadModifyWrite(_) => 4,
        }
    }
}

pub const KINDS: [&str; 5] = ["read", "update", "insert", "scan", "rmw"];

/// The key stored for key number `n` (a bijection, so distinct numbers never collide).
pub fn key_of(n: u64) -> u64 {
    // splitmix64's finaliser.
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub struct Ycsb {
    spec: YcsbSpec,
    zipf: ZipfTable,
    rng: Pcg64Mcg,
    /// Key numbers in use: 0..inserted.
    inserted: u64,
}

impl Ycsb {
    pub fn new(spec: YcsbSpec, seed: u64) -> Result<Ycsb> {
        if spec.records == 0 || spec.records > 1 << 40 {
            return Err(VssdError::Config(format!("ycsb.records = {}: 1 to 2^40", spec.records)));
        }
        if !(0.0..=5.0).contains(&spec.zipf_theta) || spec.scan_max == 0 {
            return Err(VssdError::Config("ycsb: zipf_theta 0 to 5, scan_max >= 1".into()));
        }
        Ok(Ycsb { zipf: ZipfTable::new(spec.records, spec.zipf_theta), rng: Pcg64Mcg::seed_from_u64(seed), inserted: spec.records, spec })
    }

    pub fn spec(&self) -> &YcsbSpec {
        &self.spec
    }

    /// The keys to load before the run, in order.
    pub fn load_keys(&self) -> impl Iterator<Item = u64> {
        (0..self.spec.records).map(key_of)
    }

    fn zipf_key(&mut self) -> u64 {
        let r = self.zipf.rank(self.rng.gen::<f64>()) - 1;
        // Scramble the rank onto the key numbers in use.
        key_of(key_of(r) % self.inserted)
    }

    fn latest_key(&mut self) -> u64 {
        let r = self.zipf.rank(self.rng.gen::<f64>()) - 1;
        key_of(self.inserted - 1 - r.min(self.inserted - 1))
    }

    fn insert_key(&mut self) -> u64 {
        self.inserted += 1;
        key_of(self.inserted - 1)
    }

    pub fn next_op(&mut self) -> YcsbOp {
        let p: f64 = self.rng.gen();
        match self.spec.mix {
            Mix::A => {
                let k = self.zipf_key();
                if p < 0.5 {
                    YcsbOp::Read(k)
                } else {
                    YcsbOp::Update(k)
                }
            }
            Mix::B => {
                let k = self.zipf_key();
                if p < 0.95 {
                    YcsbOp::Read(k)
                } else {
                    YcsbOp::Update(k)
                }
            }
            Mix::C => YcsbOp::Read(self.zipf_key()),
            Mix::D => {
                if p < 0.95 {
                    YcsbOp::Read(self.latest_key())
                } else {
                    YcsbOp::Insert(self.insert_key())
                }
            }
            Mix::E => {
                if p < 0.95 {
                    let k = self.zipf_key();
                    YcsbOp::Scan(k, self.rng.gen_range(1..=self.spec.scan_max))
                } else {
                    YcsbOp::Insert(self.insert_key())
                }
            }
            Mix::F => {
                let k = self.zipf_key();
                if p < 0.5 {
                    YcsbOp::Read(k)
                } else {
                    YcsbOp::ReadModifyWrite(k)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_have_their_shares_and_skew() {
        let mut y = Ycsb::new(YcsbSpec { mix: Mix::B, records: 10_000, ..Default::default() }, 1).unwrap();
        let mut counts = [0u32; 5];
        let mut hot = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let op = y.next_op();
            counts[op.kind()] += 1;
            if let YcsbOp::Read(k) = op {
                *hot.entry(k).or_insert(0u32) += 1;
            }
        }
        assert!((counts[0] as f64 / 1e5 - 0.95).abs() < 0.01 && counts[2] == 0);
        // Zipfian: the most popular key draws far more than the 1/10000 of a uniform choice.
        assert!(*hot.values().max().unwrap() > 1000);
        let mut d = Ycsb::new(YcsbSpec { mix: Mix::D, records: 1000, ..Default::default() }, 2).unwrap();
        let mut inserts = 0;
        for _ in 0..10_000 {
            if let YcsbOp::Insert(k) = d.next_op() {
                assert_eq!(k, key_of(1000 + inserts));
                inserts += 1;
            }
        }
        assert!(inserts > 400 && inserts < 600);
    }
}
