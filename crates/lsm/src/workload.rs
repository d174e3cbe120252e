//! Workloads in the format of the K-V workload generator that Lethe's experiments use
//! (BU-DiSC/K-V-Workload-Generator): one operation a line,
//!
//! ```text
//! I <key> <value>     insert          U <key> <value>   update
//! D <key>             point delete    R <start> <end>   range delete
//! Q <key>             point lookup    S <start> <end>   range lookup
//! ```
//!
//! Keys are unsigned 32-bit integers written in decimal (the generator's default; the store
//! keeps them as 4 big-endian bytes so that byte order is numeric order) or, when a token is
//! not a number, strings taken as they are; values are alphanumeric strings. This module
//! generates such workloads phase by phase (ssdlab's own generator, following the same
//! rules: inserts use keys never used before, updates and lookups pick existing keys by a
//! distribution, deletes remove existing keys, zero-result lookups use keys never inserted,
//! operations are interleaved in proportion to what is left of each kind) and reads them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, Write};

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use ssdlab_core::workload::zipf::Zipf;

use crate::error::{Error, Result};

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Update(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    RangeDelete(Vec<u8>, Vec<u8>),
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>),
}

impl Op {
    /// The operation's class for measurements.
    pub fn class(&self) -> &'static str {
        match self {
            Op::Insert(..) | Op::Update(..) => "put",
            Op::Delete(_) | Op::RangeDelete(..) => "delete",
            Op::Get(_) => "get",
            Op::Scan(..) => "scan",
        }
    }
}

/// How existing keys are chosen (the generator's 0: uniform, 1: normal, 3: zipf).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum KeyDist {
    Uniform,
    /// Normal over the key pool's positions: mean at `mean` (fraction), `stddev` (fraction).
    Normal {
        mean: f64,
        stddev: f64,
    },
    /// Zipf over the pool's positions with exponent `alpha` (position 0 hottest).
    Zipf {
        alpha: f64,
    },
}

/// One phase: how many operations of each kind (the generator's -I -U -D -R -Q -S).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhaseSpec {
    pub name: String,
    pub inserts: u64,
    pub updates: u64,
    pub point_deletes: u64,
    pub range_deletes: u64,
    /// Share of the live keys a range delete covers (-y).
    pub range_delete_selectivity: f64,
    pub point_lookups: u64,
    /// Share of point lookups for keys never inserted (-Z).
    pub zero_result_lookup_fraction: f64,
    pub range_lookups: u64,
    /// Share of the live keys a range lookup covers (-Y).
    pub range_lookup_selectivity: f64,
    /// Key plus value bytes (-E); keys are 4 bytes.
    pub entry_bytes: u32,
    pub update_distribution: KeyDist,
    pub lookup_distribution: KeyDist,
}

impl Default for PhaseSpec {
    fn default() -> Self {
        PhaseSpec {
            name: String::new(),
            inserts: 0,
            updates: 0,
            point_deletes: 0,
            range_deletes: 0,
            range_delete_selectivity: 0.0,
            point_lookups: 0,
            zero_result_lookup_fraction: 0.0,
            range_lookups: 0,
            range_lookup_selectivity: 0.0,
            entry_bytes: 1024,
            update_distribution: KeyDist::Uniform,
            lookup_distribution: KeyDist::Uniform,
        }
    }
}

impl PhaseSpec {
    pub fn ops(&self) -> u64 {
        self.inserts + self.updates + self.point_deletes + self.range_deletes + self.point_lookups + self.range_lookups
    }

    pub fn validate(&self, i: usize) -> Result<()> {
        let bad = |k: &str, m: String| Error::Config(format!("phases[{i}].{k}: {m}"));
        if !(8..=1 << 20).contains(&self.entry_bytes) {
            return Err(bad("entry_bytes", format!("{} is outside 8..1 MiB (keys take 4)", self.entry_bytes)));
        }
        for (k, v) in [
            ("range_delete_selectivity", self.range_delete_selectivity),
            ("zero_result_lookup_fraction", self.zero_result_lookup_fraction),
            ("range_lookup_selectivity", self.range_lookup_selectivity),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(bad(k, format!("{v} is outside 0..1")));
            }
        }
        for (k, d) in [("update_distribution", &self.update_distribution), ("lookup_distribution", &self.lookup_distribution)] {
            match d {
                KeyDist::Zipf { alpha } if !(*alpha > 0.0 && *alpha < 100.0) => {
                    return Err(bad(k, format!("zipf alpha {alpha} is outside (0, 100)")))
                }
                KeyDist::Normal { mean, stddev } if !((0.0..=1.0).contains(mean) && *stddev > 0.0) => {
                    return Err(bad(k, format!("normal mean {mean} / stddev {stddev}: mean in 0..1, stddev > 0")))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The store-side form of a key token.
pub fn key_bytes(tok: &str) -> Vec<u8> {
    match tok.parse::<u32>() {
        Ok(k) => k.to_be_bytes().to_vec(),
        Err(_) => tok.as_bytes().to_vec(),
    }
}

/// The file form of a store key.
pub fn key_token(k: &[u8]) -> String {
    match <[u8; 4]>::try_from(k) {
        Ok(b) => u32::from_be_bytes(b).to_string(),
        Err(_) => String::from_utf8_lossy(k).into_owned(),
    }
}

/// The reference generator's value alphabet (letters; its digits are commented out).
const LETTERS: &[u8; 52] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Generates operations phase by phase; the live key pool carries over between phases.
pub struct Generator {
    rng: Pcg64Mcg,
    /// Keys ever inserted (inserts never reuse one; zero-result lookups avoid them).
    used: HashSet<u32>,
    /// Live keys: a vector for positional choice, a position map, and an ordered set for
    /// ranges.
    pool: Vec<u32>,
    pos: HashMap<u32, usize>,
    sorted: BTreeSet<u32>,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x6b76_5f67_656e),
            used: HashSet::new(),
            pool: vec![],
            pos: HashMap::new(),
            sorted: BTreeSet::new(),
        }
    }

    pub fn live_keys(&self) -> usize {
        self.pool.len()
    }

    fn value(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let r: u64 = self.rng.gen();
            for i in 0..10 {
                if v.len() == len {
                    break;
                }
                v.push(LETTERS[((r >> (i * 6)) & 63) as usize % 52]);
            }
        }
        v
    }

    fn fresh_key(&mut self) -> u32 {
        loop {
            let k: u32 = self.rng.gen();
            if !self.used.contains(&k) {
                return k;
            }
        }
    }

    fn add(&mut self, k: u32) {
        self.used.insert(k);
        self.pos.insert(k, self.pool.len());
        self.pool.push(k);
        self.sorted.insert(k);
    }

    fn remove(&mut self, k: u32) {
        let i = self.pos.remove(&k).expect("live key");
        self.pool.swap_remove(i);
        if i < self.pool.len() {
            self.pos.insert(self.pool[i], i);
        }
        self.sorted.remove(&k);
    }

    fn pick(&mut self, d: &KeyDist) -> u32 {
        let n = self.pool.len();
        debug_assert!(n > 0);
        let i = match d {
            KeyDist::Uniform => self.rng.gen_range(0..n),
            KeyDist::Normal { mean, stddev } => {
                let x: f64 = Normal::new(mean * n as f64, stddev * n as f64).unwrap().sample(&mut self.rng);
                (x.max(0.0) as usize).min(n - 1)
            }
            KeyDist::Zipf { alpha } => (Zipf::new(n as u64, *alpha).unwrap().rank(&mut self.rng) as usize - 1).min(n - 1),
        };
        self.pool[i]
    }

    /// `n` live keys from a random live key on, in key order (for range operations).
    fn range(&mut self, selectivity: f64) -> Option<(u32, u32, Vec<u32>)> {
        let n = ((selectivity * self.pool.len() as f64).floor() as usize).max(1);
        if self.pool.is_empty() {
            return None;
        }
        let start = self.pool[self.rng.gen_range(0..self.pool.len())];
        let mut keys: Vec<u32> = self.sorted.range(start..).take(n).copied().collect();
        if keys.len() < n {
            // Near the end: take the range ending at the last key instead.
            keys = self.sorted.iter().rev().take(n).copied().collect();
            keys.reverse();
        }
        Some((keys[0], *keys.last().unwrap(), keys))
    }

    /// Every operation of a phase, in order (streamed to `f`).
    pub fn phase(&mut self, p: &PhaseSpec, mut f: impl FnMut(Op) -> Result<()>) -> Result<()> {
        let vlen = (p.entry_bytes - 4) as usize;
        let mut left = [p.inserts, p.updates, p.point_deletes, p.range_deletes, p.point_lookups, p.range_lookups];
        let mut inserted = 0u64;
        let zero_lookups = (p.point_lookups as f64 * p.zero_result_lookup_fraction).round() as u64;
        let mut zero_done = 0u64;
        loop {
            let total: u64 = left.iter().sum();
            if total == 0 {
                return Ok(());
            }
            // Choose in proportion to what is left; kinds that need live keys wait for the
            // pool (and for 10% of the phase's inserts, 75% for range deletes), as the
            // reference generator does.
            let mut c = {
                let mut r = self.rng.gen_range(0..total);
                let mut c = 0;
                while r >= left[c] {
                    r -= left[c];
                    c += 1;
                }
                c
            };
            let ready = |c: usize, pool: usize| -> bool {
                if left[c] == 0 {
                    return false;
                }
                if c == 0 {
                    return true;
                }
                let frac = if c == 3 { 0.75 } else { 0.1 };
                pool > 0 && (p.inserts == 0 || inserted as f64 >= frac * p.inserts as f64)
            };
            while !ready(c, self.pool.len()) {
                if c == 0 {
                    break;
                }
                c -= 1;
            }
            if !ready(c, self.pool.len()) {
                // Nothing can run: only operations needing live keys are left and none exist.
                return Err(Error::Config(format!(
                    "phase {:?}: {} operations need live keys but none are left (add inserts)",
                    p.name,
                    left[1..].iter().sum::<u64>()
                )));
            }
            left[c] -= 1;
            let op = match c {
                0 => {
                    let k = self.fresh_key();
                    self.add(k);
                    inserted += 1;
                    Op::Insert(k.to_be_bytes().to_vec(), self.value(vlen))
                }
                1 => {
                    let k = self.pick(&p.update_distribution);
                    Op::Update(k.to_be_bytes().to_vec(), self.value(vlen))
                }
                2 => {
                    let k = self.pool[self.rng.gen_range(0..self.pool.len())];
                    self.remove(k);
                    Op::Delete(k.to_be_bytes().to_vec())
                }
                3 => {
                    let (a, b, keys) = self.range(p.range_delete_selectivity).expect("pool is not empty");
                    for k in keys {
                        self.remove(k);
                    }
                    Op::RangeDelete(a.to_be_bytes().to_vec(), b.to_be_bytes().to_vec())
                }
                4 => {
                    if zero_done < zero_lookups && self.rng.gen_bool(p.zero_result_lookup_fraction.clamp(0.0, 1.0)) {
                        zero_done += 1;
                        let k = self.fresh_key();
                        Op::Get(k.to_be_bytes().to_vec())
                    } else {
                        let k = self.pick(&p.lookup_distribution);
                        Op::Get(k.to_be_bytes().to_vec())
                    }
                }
                _ => {
                    let (a, b, _) = self.range(p.range_lookup_selectivity).expect("pool is not empty");
                    Op::Scan(a.to_be_bytes().to_vec(), b.to_be_bytes().to_vec())
                }
            };
            f(op)?;
        }
    }
}

/// Write one operation as a line of the generator's format.
pub fn write_op(w: &mut impl Write, op: &Op) -> std::io::Result<()> {
    let s = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    match op {
        Op::Insert(k, v) => writeln!(w, "I {} {}", key_token(k), s(v)),
        Op::Update(k, v) => writeln!(w, "U {} {}", key_token(k), s(v)),
        Op::Delete(k) => writeln!(w, "D {}", key_token(k)),
        Op::RangeDelete(a, b) => writeln!(w, "R {} {}", key_token(a), key_token(b)),
        Op::Get(k) => writeln!(w, "Q {}", key_token(k)),
        Op::Scan(a, b) => writeln!(w, "S {} {}", key_token(a), key_token(b)),
    }
}

/// Reads a workload file line by line.
pub struct Reader<R: BufRead> {
    r: R,
    file: String,
    line: u64,
    buf: String,
}

impl Reader<std::io::BufReader<std::fs::File>> {
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let f = std::fs::File::open(path).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        Ok(Reader::new(std::io::BufReader::with_capacity(1 << 20, f), &path.display().to_string()))
    }
}

impl<R: BufRead> Reader<R> {
    pub fn new(r: R, file: &str) -> Self {
        Reader { r, file: file.to_string(), line: 0, buf: String::new() }
    }

    fn err(&self, msg: String) -> Error {
        Error::Workload { file: self.file.clone(), line: self.line, msg }
    }

    /// The next operation, None at the end.
    pub fn next_op(&mut self) -> Result<Option<Op>> {
        loop {
            self.buf.clear();
            let n = self.r.read_line(&mut self.buf).map_err(|e| self.err(e.to_string()))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let line = self.buf.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let mut it = line.split(' ').filter(|t| !t.is_empty());
            let code = it.next().unwrap();
            let a = it.next().map(str::to_string);
            let b = it.next().map(str::to_string);
            let extra = it.next().is_some();
            let need = |n: usize, what: &str| -> Result<()> {
                let got = a.is_some() as usize + b.is_some() as usize;
                if got != n || extra {
                    return Err(self.err(format!("{code} takes {what}; the line has {} fields after it", got + extra as usize)));
                }
                Ok(())
            };
            let op = match code {
                "I" | "U" => {
                    need(2, "a key and a value")?;
                    let (k, v) = (key_bytes(a.as_deref().unwrap()), b.unwrap().into_bytes());
                    if code == "I" {
                        Op::Insert(k, v)
                    } else {
                        Op::Update(k, v)
                    }
                }
                "D" => {
                    need(1, "a key")?;
                    Op::Delete(key_bytes(a.as_deref().unwrap()))
                }
                "Q" => {
                    need(1, "a key")?;
                    Op::Get(key_bytes(a.as_deref().unwrap()))
                }
                "R" | "S" => {
                    need(2, "a start and an end key")?;
                    let (s, e) = (key_bytes(a.as_deref().unwrap()), key_bytes(b.as_deref().unwrap()));
                    if s > e {
                        return Err(self.err(format!("range start {} is after its end {}", a.unwrap(), b.unwrap())));
                    }
                    if code == "R" {
                        Op::RangeDelete(s, e)
                    } else {
                        Op::Scan(s, e)
                    }
                }
                other => return Err(self.err(format!("unknown operation {other:?}: expected I, U, D, R, Q or S"))),
            };
            return Ok(Some(op));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_phases_round_trip_through_the_file_format() {
        let mut g = Generator::new(7);
        let p1 = PhaseSpec { name: "load".into(), inserts: 2000, entry_bytes: 64, ..Default::default() };
        let p2 = PhaseSpec {
            name: "mixed".into(),
            inserts: 500,
            updates: 500,
            point_deletes: 300,
            range_deletes: 5,
            range_delete_selectivity: 0.01,
            point_lookups: 600,
            zero_result_lookup_fraction: 0.2,
            range_lookups: 20,
            range_lookup_selectivity: 0.005,
            entry_bytes: 64,
            update_distribution: KeyDist::Zipf { alpha: 0.99 },
            ..Default::default()
        };
        let mut ops = vec![];
        g.phase(&p1, |o| {
            ops.push(o);
            Ok(())
        })
        .unwrap();
        g.phase(&p2, |o| {
            ops.push(o);
            Ok(())
        })
        .unwrap();
        assert_eq!(ops.len() as u64, p1.ops() + p2.ops());
        let count = |c: &str| ops.iter().filter(|o| o.class() == c).count();
        assert_eq!(count("delete"), 305);
        assert_eq!(count("scan"), 20);
        let mut text = vec![];
        for o in &ops {
            write_op(&mut text, o).unwrap();
        }
        let mut r = Reader::new(&text[..], "mem");
        let mut back = vec![];
        while let Some(o) = r.next_op().unwrap() {
            back.push(o);
        }
        assert_eq!(back, ops);
        // Deleted keys are never written again (as in the reference generator).
        let mut deleted = HashSet::new();
        for o in &ops {
            match o {
                Op::Delete(k) => {
                    deleted.insert(k.clone());
                }
                Op::Insert(k, v) | Op::Update(k, v) => {
                    assert!(!deleted.contains(k));
                    assert_eq!(v.len(), 60);
                    assert!(v.iter().all(u8::is_ascii_alphanumeric));
                }
                _ => {}
            }
        }
        // Reference-generator lines parse, errors name the line.
        let mut r = Reader::new(&b"I 12 abc\nD 12 \nQ 99\nS 1 5\nX 1\n"[..], "w.txt");
        for _ in 0..4 {
            r.next_op().unwrap().unwrap();
        }
        let e = r.next_op().unwrap_err().to_string();
        assert!(e.starts_with("w.txt:5: unknown operation"), "{e}");
        assert_eq!(key_token(&key_bytes("4294967295")), "4294967295");
    }
}
