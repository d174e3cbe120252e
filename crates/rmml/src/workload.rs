//! The workloads: a YCSB-style key-value store and an in-memory sort that live in a paged
//! region, and fio-style random reads and writes straight on a swap device.
//!
//! Computation is charged to the modelled clock at a stated cost per operation (`op_cpu_ns`,
//! `sort_ns_per_element_level`), so the same config and seed give the same numbers; faults add
//! what the paging runtime models for them.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use serde_json::json;
use ssdlab_core::metrics::{latency_summary, LatencyShape};
use ssdlab_core::workload::zipf::YcsbZipf;

use crate::device::{SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::paging::Paged;

/// Words of the text-like part of values (compressible the way text and small integers are).
const WORDS: [&[u8]; 32] = [
    b"the ",
    b"of ",
    b"and ",
    b"memory ",
    b"remote ",
    b"page ",
    b"swap ",
    b"block ",
    b"node ",
    b"cache ",
    b"user ",
    b"id=",
    b"0 ",
    b"1 ",
    b"2 ",
    b"null ",
    b"true ",
    b"false ",
    b"name ",
    b"value ",
    b"key ",
    b"field ",
    b"{\"a\": ",
    b"}, ",
    b"time ",
    b"2024 ",
    b"status ",
    b"ok ",
    b"error ",
    b"count ",
    b"data ",
    b"size ",
];

/// Fill `out` with bytes of which a fraction `compressibility` is text-like (words of a small
/// vocabulary) and the rest random, in runs of 16 bytes, from `seed`.
pub fn fill_value(out: &mut [u8], compressibility: f64, seed: u64) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut i = 0;
    while i < out.len() {
        let end = (i + 16).min(out.len());
        if rng.gen::<f64>() < compressibility {
            while i < end {
                let w = WORDS[rng.gen_range(0..WORDS.len())];
                let n = w.len().min(out.len() - i);
                out[i..i + n].copy_from_slice(&w[..n]);
                i += n;
            }
        } else {
            rng.fill(&mut out[i..end]);
            i = end;
        }
    }
}

use crate::latency_histogram as hist;

/// The workloads' latency figures: [`crate::LATENCY`] with `_ns` keys.
fn lat(h: &Histogram<u64>) -> serde_json::Value {
    const SHAPE: LatencyShape = LatencyShape { unit: "_ns", ..crate::LATENCY };
    serde_json::Value::Object(latency_summary(h, &SHAPE))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KvConfig {
    pub records: u64,
    /// Bytes per record: an 8-byte key, an 8-byte version, the value.
    pub record_bytes: u32,
    /// Operations measured after the load phase.
    pub ops: u64,
    pub read_fraction: f64,
    pub zipf_theta: f64,
    /// Fraction of each value that is text-like (the rest is random bytes).
    pub compressibility: f64,
    /// Computation per operation (ns): hashing, copying, the request's own work.
    pub op_cpu_ns: u64,
    /// Check every read against the value last written.
    pub verify: bool,
    pub seed: u64,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            records: 65536,
            record_bytes: 1024,
            ops: 200_000,
            read_fraction: 0.5,
            zipf_theta: 0.99,
            compressibility: 0.7,
            op_cpu_ns: 2_000,
            verify: true,
            seed: 42,
        }
    }
}

impl KvConfig {
    pub fn region_bytes(&self) -> u64 {
        self.records * self.record_bytes as u64
    }
    pub fn validate(&self) -> Result<()> {
        if self.records < 16 || self.record_bytes < 64 || self.record_bytes as u64 > PAGE_BYTES || !self.record_bytes.is_power_of_two() {
            return Err(Error::Config(format!(
                "kv: records {} (at least 16) and record_bytes {} (a power of two, 64..=4096)",
                self.records, self.record_bytes
            )));
        }
        if !(0.0..=1.0).contains(&self.read_fraction)
            || !(0.0..1.0).contains(&self.zipf_theta)
            || !(0.0..=1.0).contains(&self.compressibility)
        {
            return Err(Error::Config("kv: read_fraction and compressibility in 0..=1, zipf_theta in 0..1".into()));
        }
        Ok(())
    }
}

fn value_seed(seed: u64, key: u64, version: u64) -> u64 {
    // SplitMix64 of the three: distinct values for distinct (key, version).
    let mut z = seed ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where key `k` lives: a fixed permutation of the slots, so popular keys are spread over the
/// region as a hash table spreads them.
fn slot_of(k: u64, n: u64) -> u64 {
    // An odd multiplier coprime with n (n need not be a power of two: search one).
    let mut a = (0x9E37_79B9u64 % n) | 1;
    while gcd(a, n) != 1 {
        a += 2;
    }
    (k * a + n / 3) % n
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn write_record(rec: &mut [u8], key: u64, version: u64, c: &KvConfig) {
    rec[0..8].copy_from_slice(&key.to_le_bytes());
    rec[8..16].copy_from_slice(&version.to_le_bytes());
    fill_value(&mut rec[16..], c.compressibility, value_seed(c.seed, key, version));
}

/// The key-value workload: load every record, then `ops` reads and updates with Zipfian keys.
/// Returns the run phase's figures.
pub fn run_kv(mem: &mut Paged, c: &KvConfig, progress: &mut dyn FnMut(f64) -> bool) -> Result<serde_json::Value> {
    c.validate()?;
    let rb = c.record_bytes as usize;
    let n = c.records;
    let mut versions = vec![0u64; n as usize];
    let mut scratch = vec![0u8; rb];
    for k in 0..n {
        let s = slot_of(k, n) as usize;
        write_record(&mut mem.mem()[s * rb..(s + 1) * rb], k, 0, c);
        if let Some(e) = mem.failed() {
            return Err(Error::Lost(e));
        }
    }
    let zipf = YcsbZipf::new(n, c.zipf_theta);
    let mut rng = Pcg64::seed_from_u64(c.seed ^ 0x5EED);
    let mut h = hist();
    let (mut reads, mut updates, mut mismatches) = (0u64, 0u64, 0u64);
    let t0 = mem.now_ns();
    let f0 = mem.fault_ns();
    for i in 0..c.ops {
        let k = zipf.next(&mut rng);
        let s = slot_of(k, n) as usize;
        let start = mem.now_ns();
        mem.advance(c.op_cpu_ns);
        if rng.gen::<f64>() < c.read_fraction {
            reads += 1;
            let rec = &mem.mem()[s * rb..(s + 1) * rb];
            if c.verify {
                write_record(&mut scratch, k, versions[k as usize], c);
                if rec != &scratch[..] {
                    mismatches += 1;
                }
            } else {
                std::hint::black_box(rec.iter().map(|&b| b as u64).sum::<u64>());
            }
        } else {
            updates += 1;
            versions[k as usize] += 1;
            write_record(&mut mem.mem()[s * rb..(s + 1) * rb], k, versions[k as usize], c);
        }
        if let Some(e) = mem.failed() {
            return Err(Error::Lost(e));
        }
        h.record((mem.now_ns() - start).max(1)).expect("histogram range");
        if i % 4096 == 0 && !progress(i as f64 / c.ops as f64) {
            return Err(Error::Request("interrupted".into()));
        }
    }
    if mismatches > 0 {
        return Err(Error::Corrupt(format!("kv: {mismatches} reads returned something else than the value last written")));
    }
    let run_ns = mem.now_ns() - t0;
    Ok(json!({
        "kind": "kv", "ops": c.ops, "reads": reads, "updates": updates, "verified": c.verify,
        "completion_ns": run_ns, "fault_ns": mem.fault_ns() - f0,
        "throughput_ops_per_s": c.ops as f64 / (run_ns as f64 / 1e9),
        "latency": lat(&h),
    }))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SortConfig {
    pub elements: u64,
    /// Keys are drawn from 0..elements * key_spread: a small spread leaves the high bytes of
    /// each 8-byte key zero (compressible), as sort keys of real data often are.
    pub key_spread: u64,
    /// Computation per element per level of the sort (n log2 n of them), ns.
    pub ns_per_element_level: u64,
    pub seed: u64,
}

impl Default for SortConfig {
    fn default() -> Self {
        SortConfig { elements: 8 << 20, key_spread: 16, ns_per_element_level: 2, seed: 42 }
    }
}

impl SortConfig {
    pub fn region_bytes(&self) -> u64 {
        self.elements * 8
    }
}

/// Fill the region with keys, sort them in place (pdqsort from the standard library), check the
/// result is the sorted permutation.
pub fn run_sort(mem: &mut Paged, c: &SortConfig) -> Result<serde_json::Value> {
    if c.elements < 2 || c.key_spread == 0 {
        return Err(Error::Config("sort: elements at least 2, key_spread at least 1".into()));
    }
    let mut rng = Pcg64::seed_from_u64(c.seed);
    let n = c.elements as usize;
    let max = c.elements.saturating_mul(c.key_spread);
    let (mut sum, mut xor) = (0u64, 0u64);
    {
        let m = mem.mem();
        // SAFETY: the region is page-aligned and at least n * 8 bytes.
        let keys = unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr() as *mut u64, n) };
        for k in keys.iter_mut() {
            *k = rng.gen_range(0..max);
            sum = sum.wrapping_add(*k);
            xor ^= *k;
        }
    }
    if let Some(e) = mem.failed() {
        return Err(Error::Lost(e));
    }
    let t0 = mem.now_ns();
    let f0 = mem.fault_ns();
    {
        let m = mem.mem();
        // SAFETY: as above.
        let keys = unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr() as *mut u64, n) };
        keys.sort_unstable();
    }
    let levels = (n as f64).log2().ceil() as u64;
    mem.advance(c.elements * levels * c.ns_per_element_level);
    // Verification reads everything again: not part of the measured time.
    let run_ns = mem.now_ns() - t0;
    let fault_ns = mem.fault_ns() - f0;
    let m = mem.mem();
    // SAFETY: as above.
    let keys = unsafe { std::slice::from_raw_parts(m.as_ptr() as *const u64, n) };
    let ok = keys.windows(2).all(|w| w[0] <= w[1]);
    let (s2, x2) = keys.iter().fold((0u64, 0u64), |(s, x), &k| (s.wrapping_add(k), x ^ k));
    if let Some(e) = mem.failed() {
        return Err(Error::Lost(e));
    }
    if !ok || s2 != sum || x2 != xor {
        return Err(Error::Corrupt(format!("sort: result not the sorted input (ordered {ok}, sum {}, xor {})", s2 == sum, x2 == xor)));
    }
    Ok(json!({
        "kind": "sort", "elements": c.elements, "completion_ns": run_ns, "fault_ns": fault_ns,
        "throughput_elements_per_s": c.elements as f64 / (run_ns as f64 / 1e9),
    }))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FioConfig {
    /// Bytes of the device the job covers (written once before it starts).
    pub span_bytes: u64,
    pub block_bytes: u64,
    pub ops: u64,
    /// "randread" or "randwrite".
    pub rw: String,
    pub compressibility: f64,
    pub seed: u64,
}

impl Default for FioConfig {
    fn default() -> Self {
        FioConfig { span_bytes: 256 << 20, block_bytes: 4096, ops: 50_000, rw: "randread".into(), compressibility: 0.5, seed: 42 }
    }
}

/// fio-style: fill the span sequentially (not measured), then `ops` random requests of
/// `block_bytes` at queue depth 1. Reads are checked against what was written.
pub fn run_fio(dev: &mut dyn SwapDevice, c: &FioConfig) -> Result<serde_json::Value> {
    if c.block_bytes == 0
        || !c.block_bytes.is_multiple_of(PAGE_BYTES)
        || c.span_bytes < c.block_bytes
        || c.span_bytes > dev.capacity_bytes()
    {
        return Err(Error::Config(format!(
            "fio: block_bytes {} (pages) and span_bytes {} (within the device)",
            c.block_bytes, c.span_bytes
        )));
    }
    let write = match c.rw.as_str() {
        "randread" => false,
        "randwrite" => true,
        other => return Err(Error::Config(format!("fio.rw = {other:?}: expected \"randread\" or \"randwrite\""))),
    };
    let chunk = (1u64 << 20).min(c.span_bytes) / c.block_bytes * c.block_bytes;
    let mut buf = vec![0u8; chunk as usize];
    let mut t = 0;
    let mut off = 0;
    while off < c.span_bytes {
        let n = chunk.min(c.span_bytes - off);
        // Each block from its own seed, so a read is checked by regenerating that block alone.
        for (i, piece) in buf[..n as usize].chunks_mut(c.block_bytes as usize).enumerate() {
            fill_value(piece, c.compressibility, c.seed ^ (off + i as u64 * c.block_bytes));
        }
        t = dev.write(off, &buf[..n as usize], t)?;
        off += n;
    }
    t = dev.flush(t)?;
    let blocks = c.span_bytes / c.block_bytes;
    let mut rng = Pcg64::seed_from_u64(c.seed ^ 0xF10);
    let mut h = hist();
    let mut io = vec![0u8; c.block_bytes as usize];
    let mut want = vec![0u8; c.block_bytes as usize];
    let t0 = t;
    for _ in 0..c.ops {
        let b = rng.gen_range(0..blocks);
        let at = b * c.block_bytes;
        let start = t;
        if write {
            fill_value(&mut io, c.compressibility, c.seed ^ at ^ 0xABCD);
            t = dev.write(at, &io, t)?;
        } else {
            t = dev.read(at, &mut io, t)?;
        }
        h.record((t - start).max(1)).expect("histogram range");
        if !write {
            fill_value(&mut want, c.compressibility, c.seed ^ at);
            if want != io {
                return Err(Error::Corrupt(format!("fio: read at {at} differs from what was written")));
            }
        }
    }
    let run_ns = t - t0;
    Ok(json!({
        "kind": "fio", "rw": c.rw, "block_bytes": c.block_bytes, "ops": c.ops, "completion_ns": run_ns,
        "bandwidth_bytes_per_s": (c.ops * c.block_bytes) as f64 / (run_ns as f64 / 1e9),
        "iops": c.ops as f64 / (run_ns as f64 / 1e9), "latency": lat(&h),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_permutation() {
        for n in [16u64, 1000, 65536] {
            let mut seen = vec![false; n as usize];
            for k in 0..n {
                let s = slot_of(k, n) as usize;
                assert!(!seen[s]);
                seen[s] = true;
            }
        }
    }

    #[test]
    fn values_compress_as_stated() {
        let mut c = crate::codec::Coder::new(crate::codec::Codec::Lz4, 1, 1 << 20).unwrap();
        let mut v = vec![0u8; 1 << 20];
        let mut ratios = Vec::new();
        for comp in [0.0, 0.5, 1.0] {
            fill_value(&mut v, comp, 1);
            ratios.push((1 << 20) as f64 / c.compress(&v).unwrap().1.len() as f64);
        }
        assert!(ratios[0] <= 1.0 && ratios[1] > 1.2 && ratios[2] > ratios[1], "{ratios:?}");
    }
}
