//! UIO devices side by side with the data path between them: GME routing, the modelled cost
//! of each leg (host <-> device DMA, GME, NIC to NIC, the receiving host's software and memory
//! copy on the traditional path), and the UTLs of the devices.
//!
//! The data really moves: a put's key and value are copied from the caller into a record in
//! the device's DRAM (DMA), the record is appended to the target device's UTL on its flash; on
//! the traditional path the record also goes through a buffer standing for the remote host's
//! memory. The simulated time of an operation is the sum of its legs' modelled costs plus the
//! UTL's flash time (NAND timing on) or nothing (NAND timing off: media in RAM, the flash
//! untimed).
//!
//! The paths (the document's sections 3.5 and 4.1.2; legs in order; "hop": one module handing
//! the request to the next, [`Links::hop_ns`]):
//!
//! | operation | UIO | traditional |
//! |---|---|---|
//! | local put | DMA k+v, GME, hop, UTL put | DMA k+v, hop, UTL put (GME bypass) |
//! | local get | DMA k, GME, hop, UTL get, DMA v | DMA k, hop, UTL get, DMA v |
//! | remote put | DMA k+v, GME, hop, NET record, hop, remote UTL put, hop, NET status | host A send, DMA k+v (NIC reads host A), hop, NET record, DMA k+v (NIC B writes host B), host B software + copy, DMA k+v (host B to its SSD), hop, UTL put, host B reply, NET status |
//! | remote get | DMA k, GME, hop, NET key, hop, remote UTL get, hop, NET value, DMA v | host A send, DMA k, hop, NET key, DMA k, host B software, DMA k, hop, UTL get, DMA v (SSD to host B), host B reply, DMA v (host B to NIC), NET value, DMA v |
//!
//! Two sets of leg costs ([`Profile`]): hardware-like ([`Links::default`]) and the document's
//! simulator, measured on this machine ([`Links::document_simulator`]).

use serde::{Deserialize, Serialize};

use crate::record::{encode, encoded_len, HEADER_BYTES};
use crate::utl::{Result, Utl, UtlConfig};
use ssdlab_core::Config;

/// Modelled cost of each leg of the data path. Defaults and where they come from are in
/// docs/case-studies/uio-kv.md.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Links {
    /// One host <-> device DMA transfer: fixed cost (ns) and bandwidth (bytes/s).
    pub dma_ns: u64,
    pub dma_bytes_per_s: f64,
    /// GME: fixed cost of a route (hash and map lookup) and the hashing rate.
    pub gme_ns: u64,
    pub gme_bytes_per_s: f64,
    /// NIC to NIC: one-way latency, bandwidth, payload and header bytes of one packet.
    pub net_ns: u64,
    pub net_bytes_per_s: f64,
    pub packet_payload_bytes: u32,
    pub packet_header_bytes: u32,
    /// Traditional path: the receiving host's software between its NIC and its SSD (interrupt,
    /// network stack, NVMe submission) and its memory copy rate.
    pub host_stack_ns: u64,
    pub host_copy_bytes_per_s: f64,
    /// Traditional path: host A's software sending a remote request to its NIC, and host B's
    /// software sending the reply back once its SSD completes.
    pub host_send_ns: u64,
    pub host_reply_ns: u64,
    /// One module handing a request to the next inside a device (to UTL, to NET, NET to UTL,
    /// UTL to NET); 0 where modules are wired and their fixed costs sit in the legs above.
    pub hop_ns: u64,
    /// Fixed cost of each NET packet beyond `net_ns`.
    pub packet_ns: u64,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            dma_ns: 700,
            dma_bytes_per_s: 3.2e9,
            gme_ns: 100,
            gme_bytes_per_s: 2e9,
            net_ns: 3_000,
            net_bytes_per_s: 3.125e9,
            packet_payload_bytes: 4096,
            packet_header_bytes: 66,
            host_stack_ns: 3_000,
            host_copy_bytes_per_s: 10e9,
            host_send_ns: 3_000,
            host_reply_ns: 3_000,
            hop_ns: 0,
            packet_ns: 0,
        }
    }
}

/// The two link profiles the reproduction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Hardware-like legs: a PCIe device, RDMA-class NICs, a host's kernel software
    /// ([`Links::default`], or the plan's `links`).
    Hardware,
    /// The document's simulator: every module a thread, every hop a System V message queue
    /// send and receive with the receiving thread's wake-up, measured on this machine
    /// ([`Links::document_simulator`]).
    DocumentSimulator,
}

#[inline]
fn at_rate(bytes: usize, per_s: f64) -> u64 {
    (bytes as f64 * 1e9 / per_s).round() as u64
}

impl Links {
    /// The document's simulator's legs from costs measured on this machine (see
    /// [`crate::msgq`]); docs/case-studies/uio-kv.md lists each leg with its source.
    /// - DMA: the interpreter's request to the DMA thread (a hop), then a memory copy;
    /// - GME: DMA's request to the GME thread (a hop), then the key's hash;
    /// - module to module (to UTL, to NET, NET to UTL, UTL to NET): a hop;
    /// - NET: the programs exchange packets through message queues: a hop per packet, the
    ///   queue's copy rate for the bytes, no further wire latency;
    /// - traditional path: the NET thread hands the record to its host thread (a hop), whose
    ///   copy is a memory copy; the host thread hands its reply to NET (a hop); host A writes the
    ///   same command on both paths (the document's traditional mode is the same simulator,
    ///   §4.1.2), so its send side costs nothing extra.
    pub fn document_simulator(m: &crate::msgq::MsgqCosts) -> Links {
        let d = Links::default();
        Links {
            dma_ns: m.hop_ns,
            dma_bytes_per_s: m.memcpy_bytes_per_s,
            gme_ns: m.hop_ns,
            gme_bytes_per_s: m.hash_bytes_per_s,
            net_ns: 0,
            net_bytes_per_s: m.msgq_bytes_per_s,
            packet_payload_bytes: m.packet_bytes,
            packet_header_bytes: d.packet_header_bytes,
            host_stack_ns: m.hop_ns,
            host_copy_bytes_per_s: m.memcpy_bytes_per_s,
            host_send_ns: 0,
            host_reply_ns: m.hop_ns,
            hop_ns: m.hop_ns,
            packet_ns: m.hop_ns,
        }
    }

    pub fn dma(&self, bytes: usize) -> u64 {
        self.dma_ns + at_rate(bytes, self.dma_bytes_per_s)
    }
    pub fn gme(&self, key_bytes: usize) -> u64 {
        self.gme_ns + at_rate(key_bytes, self.gme_bytes_per_s)
    }
    /// One message of `bytes` (plus a request header) from one NIC to another, packetised.
    pub fn net(&self, bytes: usize) -> u64 {
        let bytes = bytes + HEADER_BYTES;
        let packets = bytes.div_ceil(self.packet_payload_bytes as usize).max(1);
        self.net_ns + packets as u64 * self.packet_ns + at_rate(bytes + packets * self.packet_header_bytes as usize, self.net_bytes_per_s)
    }
    pub fn host(&self, bytes: usize) -> u64 {
        self.host_stack_ns + at_rate(bytes, self.host_copy_bytes_per_s)
    }

    /// A put's legs on `path` around the key's UTL (the table in the module docs): the time
    /// before the UTL starts it and after the UTL is done, for a `key`/`value` pair.
    pub fn put_legs(&self, path: Path, remote: bool, key: usize, value: usize) -> (u64, u64) {
        let trad = path == Path::Traditional;
        let kv = key + value;
        let mut before = 0;
        if trad && remote {
            // Host A's software sends the request to its NIC.
            before += self.host_send_ns;
        }
        before += self.dma(kv);
        if !trad {
            before += self.gme(key);
        }
        if remote {
            // To NET and the record over.
            before += self.hop_ns + self.net(encoded_len(key, value));
            if trad {
                // NIC B writes the record into host B's memory; host B's software copies it
                // and submits it to its SSD, whose DMA reads it back.
                before += self.dma(kv) + self.host(kv) + self.dma(kv);
            }
        }
        // To UTL (on UIO's remote path: NET B to its UTL).
        before += self.hop_ns;
        let mut after = 0;
        if remote {
            // UTL B's status to NET B (UIO), or host B's software sending the reply; then over.
            after += if trad { self.host_reply_ns } else { self.hop_ns };
            after += self.net(0);
        }
        (before, after)
    }

    /// A get's legs on `path` before the key's UTL starts it.
    pub fn get_legs_before(&self, path: Path, remote: bool, key: usize) -> u64 {
        let trad = path == Path::Traditional;
        let mut t = if trad && remote { self.host_send_ns } else { 0 };
        t += self.dma(key);
        if !trad {
            t += self.gme(key);
        }
        if remote {
            t += self.hop_ns + self.net(key);
            if trad {
                t += self.dma(key) + self.host(key) + self.dma(key);
            }
        }
        t + self.hop_ns
    }

    /// A get's legs on `path` after the key's UTL read `value` bytes.
    pub fn get_legs_after(&self, path: Path, remote: bool, value: usize) -> u64 {
        let mut t = 0;
        if remote {
            if path == Path::Traditional {
                // SSD B to host B's memory, host B's software sends the reply, host B to its NIC.
                t += self.dma(value) + self.host_reply_ns + self.dma(value);
            } else {
                // UTL B to NET B.
                t += self.hop_ns;
            }
            t += self.net(value);
        }
        // The value to the requesting host's buffer.
        t + self.dma(value)
    }
}

/// Which data path the devices take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    /// UIO: GME routes every command; remote records go device to device.
    Uio,
    /// The document's baselines: local commands bypass GME, remote ones land in the remote
    /// host's memory and are re-sent to its SSD.
    Traditional,
}

/// GME's map: key hash -> device id, through `buckets` entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gme {
    map: Vec<u16>,
}

impl Gme {
    /// Buckets dealt to `devices` in turn (every device gets an equal share of the keys).
    pub fn uniform(devices: u16, buckets: u32) -> Gme {
        assert!(devices > 0 && buckets >= devices as u32);
        Gme { map: (0..buckets).map(|b| (b % devices as u32) as u16).collect() }
    }

    /// A map given bucket by bucket (a configuration file's table).
    pub fn from_map(map: Vec<u16>) -> Gme {
        assert!(!map.is_empty());
        Gme { map }
    }

    #[inline]
    pub fn route(&self, key: &[u8]) -> u16 {
        self.map[crc32fast::hash(key) as usize % self.map.len()]
    }
}

/// How one operation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// The device that holds the key.
    pub target: u16,
    pub remote: bool,
    /// Simulated latency (ns).
    pub latency_ns: u64,
}

/// N devices and the links between them. See the module docs.
pub struct Cluster {
    devs: Vec<Utl>,
    gme: Gme,
    links: Links,
    path: Path,
    /// Device DRAM record buffer (DMA lands here) and the remote host's memory (traditional).
    record: Vec<u8>,
    host_mem: Vec<u8>,
}

impl Cluster {
    /// `n` devices of `dev` with UTL settings `utl`, keys spread uniformly.
    pub fn new(n: u16, dev: &Config, utl: UtlConfig, links: Links, path: Path) -> Result<Cluster> {
        let devs = (0..n)
            .map(|i| {
                let mut c = dev.clone();
                c.seed = dev.seed.wrapping_add(i as u64);
                Utl::new(&c, utl)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Cluster { devs, gme: Gme::uniform(n, 1024), links, path, record: Vec::new(), host_mem: Vec::new() })
    }

    pub fn devices(&self) -> &[Utl] {
        &self.devs
    }

    pub fn gme(&self) -> &Gme {
        &self.gme
    }

    pub fn set_path(&mut self, path: Path) {
        self.path = path;
    }

    /// Put from the host of device `origin` at simulated time `now`.
    pub fn put(&mut self, origin: u16, key: &[u8], value: &[u8], now: u64) -> Result<Done> {
        let target = self.gme.route(key);
        let remote = target != origin;
        // DMA: the host's key and value become a record in device DRAM; on the traditional
        // path a remote record also lands in host B's memory, from which its SSD reads it.
        self.record.clear();
        encode(key, value, &mut self.record);
        let trad = self.path == Path::Traditional;
        if trad && remote {
            self.host_mem.clear();
            self.host_mem.extend_from_slice(&self.record);
        }
        let (before, after) = self.links.put_legs(self.path, remote, key.len(), value.len());
        let done = {
            let rec = if trad && remote { &self.host_mem } else { &self.record };
            let (k, v) = (&rec[HEADER_BYTES..HEADER_BYTES + key.len()], &rec[HEADER_BYTES + key.len()..]);
            self.devs[target as usize].put(k, v, now + before)?
        };
        Ok(Done { target, remote, latency_ns: done + after - now })
    }

    /// Get from the host of device `origin` at simulated time `now`; the value lands in `out`
    /// (cleared; None: not stored).
    pub fn get(&mut self, origin: u16, key: &[u8], out: &mut Vec<u8>, now: u64) -> Result<(bool, Done)> {
        let target = self.gme.route(key);
        let remote = target != origin;
        let trad = self.path == Path::Traditional;
        let before = self.links.get_legs_before(self.path, remote, key.len());
        let (value, done) = self.devs[target as usize].get(key, now + before)?;
        let vlen = value.as_ref().map_or(0, |v| v.len());
        if trad && remote {
            // SSD B to host B's memory, from which its NIC sends it.
            self.host_mem.clear();
            self.host_mem.extend_from_slice(value.as_deref().unwrap_or_default());
        }
        out.clear();
        if let Some(v) = value.as_deref() {
            out.extend_from_slice(if trad && remote { &self.host_mem } else { v });
        }
        let end = done + self.links.get_legs_after(self.path, remote, vlen);
        Ok((value.is_some(), Done { target, remote, latency_ns: end - now }))
    }

    /// Record bytes of a key/value pair (what NET carries for a put).
    pub fn record_bytes(key: usize, value: usize) -> usize {
        encoded_len(key, value)
    }
}
