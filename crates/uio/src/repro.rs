//! The uio-kv reproduction's measurements: latency against value size on each path (the
//! document's figures 10-13), the overhead ratios a and b fitted from them, and the expected
//! overhead model u' = (N-1)/N (1-a) + 1/N (1+b) (its equation 1) checked against measured
//! mixes of N devices.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use ssdlab_core::config::{Personality, StorageMode};
use ssdlab_core::media::presets::preset;
pub use ssdlab_core::metrics::latency_histogram;
use ssdlab_core::Config;

use crate::cluster::{Cluster, Links, Path, Profile};
use crate::msgq::MsgqCosts;
use crate::utl::{Result, UtlConfig, UtlError};

/// Names accepted by [`device_config`].
pub const DEVICES: &[&str] = &["paper", "quick"];

/// A UIO card's flash: the document's UTL defaults (4 kB pages with 128 B of ECC, 64 pages a
/// block) on FEMU's black-box SSD timings (read 40 us, program 200 us, erase 2 ms; the
/// `femu-bbssd` preset), one plane per die. `paper`: 8 channels x 2 dies x 512 blocks (2 GiB;
/// the document gives no capacity); `quick`: 2 x 2 x 128 (128 MiB).
pub fn device_config(name: &str) -> Option<Config> {
    let mut c = preset("femu-bbssd").expect("femu-bbssd preset");
    c.personality = Personality::Ocssd;
    c.storage = StorageMode::Data;
    c.geometry.pages_per_block = 64;
    c.geometry.planes_per_die = 1;
    let (channels, dies, blocks) = match name {
        "paper" => (8, 2, 512),
        "quick" => (2, 2, 128),
        _ => return None,
    };
    c.geometry.channels = channels;
    c.geometry.dies_per_channel = dies;
    c.geometry.blocks_per_plane = blocks;
    c.preset = "femu-bbssd".into();
    Some(c)
}

/// What the reproduction measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LatencyPlan {
    /// `paper` or `quick` (see [`device_config`]).
    pub device: String,
    /// Devices in the latency sweep (the requests come from device 0's host).
    pub devices: u16,
    pub key_bytes: usize,
    /// Value sizes (the document: 4 B to 16 kB).
    pub value_bytes: Vec<usize>,
    /// Operations per (value size, locality, path, put/get).
    pub ops: usize,
    /// Device counts of the mixed runs that check the overhead model.
    pub mix_devices: Vec<u16>,
    /// Put/get pairs per mixed run.
    pub mix_ops: usize,
    /// NAND timing settings to measure: off (media in RAM, the flash untimed), on.
    pub timings: Vec<bool>,
    pub seed: u64,
    /// `hardware`: the legs are `links`; `document-simulator`: every leg from a System V
    /// message queue hop and the copy rates measured on this machine when the plan runs
    /// ([`crate::msgq`], [`Links::document_simulator`]); `links` is then not used.
    pub profile: Profile,
    /// Round trips of each message queue ping-pong (document-simulator profile).
    pub msgq_rounds: u32,
    pub links: Links,
    pub utl: UtlConfig,
}

impl Default for LatencyPlan {
    fn default() -> Self {
        LatencyPlan {
            device: "quick".into(),
            devices: 2,
            key_bytes: 16,
            value_bytes: vec![4, 16, 64, 256, 1024, 4096, 16384],
            ops: 500,
            mix_devices: vec![2, 4, 8],
            mix_ops: 2000,
            timings: vec![false, true],
            seed: 1,
            profile: Profile::Hardware,
            msgq_rounds: 10_000,
            links: Links::default(),
            utl: UtlConfig::default(),
        }
    }
}

/// Latency of one (timing, value size, operation, locality, path) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRow {
    /// NAND timing modelled (false: media in RAM, the flash untimed).
    pub nand_timing: bool,
    pub value_bytes: usize,
    /// "put" or "get".
    pub op: String,
    pub remote: bool,
    pub path: Path,
    pub ops: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
}

impl LatencyRow {
    /// The put and the get row of one (timing, value size, locality, path) point.
    pub fn pair(
        nand_timing: bool,
        value_bytes: usize,
        remote: bool,
        path: Path,
        put: &Histogram<u64>,
        get: &Histogram<u64>,
    ) -> [LatencyRow; 2] {
        let row = |op: &str, h: &Histogram<u64>| LatencyRow {
            nand_timing,
            value_bytes,
            op: op.into(),
            remote,
            path,
            ops: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
        };
        [row("put", put), row("get", get)]
    }
}

/// A mixed run of N devices: measured mean latency on both paths and the model's prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixRow {
    pub nand_timing: bool,
    pub devices: u16,
    pub ops: u64,
    pub remote_fraction: f64,
    pub uio_mean_ns: f64,
    pub traditional_mean_ns: f64,
    /// uio / traditional, measured.
    pub measured_ratio: f64,
    /// Equation 1 with a and b fitted from the latency sweep.
    pub model_ratio: f64,
    /// Equation 1 with remote and local operations weighted by their share of the
    /// traditional path's time instead of their count: (R (1-a) + L (1+b)) / (R + L).
    pub weighted_model_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub plan: LatencyPlan,
    pub rows: Vec<LatencyRow>,
    /// Fitted per timing setting: (nand_timing, a, b): a = mean over value sizes and put/get
    /// of 1 - uio/traditional for remote operations, b = the same mean of uio/bypass - 1 for
    /// local ones.
    pub fits: Vec<(bool, f64, f64)>,
    pub mixes: Vec<MixRow>,
    /// The legs this run used (the plan's, or the document-simulator profile's measured ones).
    pub links: Links,
    /// The document-simulator profile's measured constants (None: hardware profile).
    pub msgq: Option<MsgqCosts>,
}

/// Key number `i` as letters ('a'..'z', base 26), padded with 'a' to `len` bytes.
pub fn letter_key(mut i: u64, len: usize) -> Vec<u8> {
    let mut k = vec![b'a'; len];
    for b in k.iter_mut().rev() {
        *b = b'a' + (i % 26) as u8;
        i /= 26;
    }
    k
}

/// A value of `len` letters.
pub fn letter_value(len: usize, salt: u64) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((j as u64 + salt) % 26) as u8).collect()
}

impl LatencyPlan {
    fn device(&self, timing: bool) -> Result<Config> {
        let mut c = device_config(&self.device).ok_or_else(|| UtlError::Config(format!("unknown device {:?}", self.device)))?;
        c.timing.enabled = timing;
        c.seed = self.seed;
        Ok(c)
    }

    fn cluster(&self, n: u16, timing: bool, path: Path) -> Result<Cluster> {
        Cluster::new(n, &self.device(timing)?, self.utl, self.links, path)
    }

    /// The plan with its profile's legs in `links`: for the document-simulator profile,
    /// measured now; returns the measured constants too.
    pub fn with_profile_links(&self) -> Result<(LatencyPlan, Option<MsgqCosts>)> {
        match self.profile {
            Profile::Hardware => Ok((self.clone(), None)),
            Profile::DocumentSimulator => {
                let m = crate::msgq::measure(self.msgq_rounds, self.links.packet_payload_bytes)
                    .map_err(|e| UtlError::Config(format!("profile = \"document-simulator\": measuring System V message queues: {e}")))?;
                Ok((LatencyPlan { links: Links::document_simulator(&m), ..self.clone() }, Some(m)))
            }
        }
    }

    /// Refuse a plan that cannot run, saying which key is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(UtlError::Config(m));
        if device_config(&self.device).is_none() {
            return bad(format!("device = {:?}: expected one of {}", self.device, DEVICES.join(", ")));
        }
        if self.devices < 2 {
            return bad(format!("devices = {}: the latency sweep needs a remote device (>= 2)", self.devices));
        }
        if self.key_bytes == 0 || self.key_bytes > crate::record::MAX_KEY_BYTES {
            return bad(format!("key_bytes = {}: expected 1 to {}", self.key_bytes, crate::record::MAX_KEY_BYTES));
        }
        if self.value_bytes.is_empty() || self.ops == 0 || self.timings.is_empty() {
            return bad("value_bytes, ops and timings must not be empty or zero".into());
        }
        if self.msgq_rounds == 0 || self.msgq_rounds > 1_000_000 {
            return bad(format!("msgq_rounds = {}: expected 1 to 1000000", self.msgq_rounds));
        }
        if self.links.packet_payload_bytes == 0 || self.links.packet_payload_bytes > 8192 {
            return bad(format!(
                "links.packet_payload_bytes = {}: expected 1 to 8192 (a message queue's default msgmax)",
                self.links.packet_payload_bytes
            ));
        }
        if self.mix_devices.iter().any(|&n| n == 0 || n > 64) {
            return bad(format!("mix_devices = {:?}: expected 1 to 64 devices each", self.mix_devices));
        }
        self.utl.validate()
    }

    /// Run every measurement; `progress` gets a line per finished part.
    pub fn run(&self, progress: &mut dyn FnMut(&str)) -> Result<LatencyReport> {
        self.validate()?;
        let (plan, msgq) = self.with_profile_links()?;
        if let Some(m) = &msgq {
            progress(&format!("document-simulator profile: a message queue hop takes {} ns on this machine", m.hop_ns));
        }
        let mut r = plan.run_links(progress)?;
        r.plan = self.clone();
        r.msgq = msgq;
        Ok(r)
    }

    fn run_links(&self, progress: &mut dyn FnMut(&str)) -> Result<LatencyReport> {
        let mut rows = vec![];
        let mut fits = vec![];
        let mut mixes = vec![];
        for &timing in &self.timings {
            let before = rows.len();
            for &vb in &self.value_bytes {
                for path in [Path::Uio, Path::Traditional] {
                    rows.extend(self.sweep_point(timing, vb, path)?);
                }
                progress(&format!("latency: nand timing {}, {vb} B values", if timing { "on" } else { "off" }));
            }
            let (a, b) = fit(&rows[before..]);
            fits.push((timing, a, b));
            for &n in &self.mix_devices {
                mixes.push(self.mix(timing, n, a, b)?);
                progress(&format!("mix: nand timing {}, {n} devices", if timing { "on" } else { "off" }));
            }
        }
        Ok(LatencyReport { plan: self.clone(), rows, fits, mixes, links: self.links, msgq: None })
    }

    /// Keys from device 0's host: `ops` that GME sends to device 0 and `ops` it sends
    /// elsewhere, letter-filled.
    pub(crate) fn keys(&self, gme: &crate::cluster::Gme, salt: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut local, mut remote) = (vec![], vec![]);
        let mut i = salt << 32;
        while local.len() < self.ops || remote.len() < self.ops {
            let k = letter_key(i, self.key_bytes);
            i += 1;
            let v = if gme.route(&k) == 0 { &mut local } else { &mut remote };
            if v.len() < self.ops {
                v.push(k);
            }
        }
        (local, remote)
    }

    fn sweep_point(&self, timing: bool, vb: usize, path: Path) -> Result<Vec<LatencyRow>> {
        let mut c = self.cluster(self.devices, timing, path)?;
        let (local, remote) = self.keys(c.gme(), vb as u64);
        let value = letter_value(vb, vb as u64);
        let mut out = Vec::new();
        let mut now = 0u64;
        let mut rows = vec![];
        for (remote_keys, keys) in [(false, &local), (true, &remote)] {
            let (mut put, mut get) = (latency_histogram(), latency_histogram());
            for k in keys {
                let d = c.put(0, k, &value, now)?;
                debug_assert_eq!(d.remote, remote_keys);
                put.record(d.latency_ns.max(1)).expect("in range");
                now += d.latency_ns;
            }
            for k in keys {
                let (found, d) = c.get(0, k, &mut out, now)?;
                assert!(found && out == value, "a get returned something other than its put");
                get.record(d.latency_ns.max(1)).expect("in range");
                now += d.latency_ns;
            }
            rows.extend(LatencyRow::pair(timing, vb, remote_keys, path, &put, &get));
        }
        Ok(rows)
    }

    /// N devices, keys spread by GME, value sizes in turn, each key put then read back, from
    /// device 0's host; mean latency on both paths.
    fn mix(&self, timing: bool, n: u16, a: f64, b: f64) -> Result<MixRow> {
        let mut means = [0.0; 2];
        let mut remote_fraction = 0.0;
        // The traditional path's time in remote and in local operations.
        let (mut trad_remote, mut trad_local) = (0u64, 0u64);
        for (slot, path) in [Path::Uio, Path::Traditional].into_iter().enumerate() {
            let mut c = self.cluster(n, timing, path)?;
            let (mut total, mut remote, mut now) = (0u64, 0u64, 0u64);
            let mut out = Vec::new();
            for i in 0..self.mix_ops as u64 {
                let k = letter_key((7u64 << 40) + i, self.key_bytes);
                let vb = self.value_bytes[i as usize % self.value_bytes.len()];
                let value = letter_value(vb, i);
                let p = c.put(0, &k, &value, now)?;
                now += p.latency_ns;
                let (found, g) = c.get(0, &k, &mut out, now)?;
                assert!(found && out == value);
                now += g.latency_ns;
                total += p.latency_ns + g.latency_ns;
                remote += p.remote as u64;
                if path == Path::Traditional {
                    *if p.remote { &mut trad_remote } else { &mut trad_local } += p.latency_ns + g.latency_ns;
                }
            }
            means[slot] = total as f64 / (2 * self.mix_ops) as f64;
            remote_fraction = remote as f64 / self.mix_ops as f64;
        }
        Ok(MixRow {
            nand_timing: timing,
            devices: n,
            ops: 2 * self.mix_ops as u64,
            remote_fraction,
            uio_mean_ns: means[0],
            traditional_mean_ns: means[1],
            measured_ratio: means[0] / means[1],
            model_ratio: model_ratio(n, a, b),
            weighted_model_ratio: (trad_remote as f64 * (1.0 - a) + trad_local as f64 * (1.0 + b)) / (trad_remote + trad_local) as f64,
        })
    }
}

/// The document's equation 1: u' = (N-1)/N (1-a) + 1/N (1+b).
pub fn model_ratio(n: u16, a: f64, b: f64) -> f64 {
    let n = n as f64;
    (n - 1.0) / n * (1.0 - a) + (1.0 + b) / n
}

/// a and b from the rows of one timing setting (see [`LatencyReport::fits`]).
pub fn fit(rows: &[LatencyRow]) -> (f64, f64) {
    let ratio = |remote: bool| {
        let uio: Vec<&LatencyRow> = rows.iter().filter(|r| r.remote == remote && r.path == Path::Uio).collect();
        let rs: Vec<f64> = uio
            .iter()
            .map(|u| {
                let t = rows
                    .iter()
                    .find(|r| r.remote == remote && r.path == Path::Traditional && r.op == u.op && r.value_bytes == u.value_bytes)
                    .expect("both paths measured");
                u.mean_ns / t.mean_ns
            })
            .collect();
        rs.iter().sum::<f64>() / rs.len() as f64
    };
    (1.0 - ratio(true), ratio(false) - 1.0)
}
