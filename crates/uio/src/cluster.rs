//! UIO devices side by side with the data path between them: GME routing, the modelled cost
//! of each leg (host <-> device DMA, GME, NIC to NIC, the receiving host's software and memory
//! copy on the traditional path), and the UTLs of the devices.
//!
//! The data really moves: a put's key and value are copied from the caller into a record in
//! the device's DRAM (DMA), the record is appended to the target device's UTL on its flash; on
//! the traditional path the record also goes through a buffer standing for the remote host's
//! memory. The simulated time of an operation is the sum of its legs' modelled costs plus the
//! UTL's flash time (NAND timing on) or nothing (media in RAM, no NAND timing, as the document's functional simulator).
//!
//! The paths (the document's sections 3.5 and 4.1.2; legs in order):
//!
//! | operation | UIO | traditional |
//! |---|---|---|
//! | local put | DMA k+v, GME, UTL put | DMA k+v, UTL put (GME bypass) |
//! | local get | DMA k, GME, UTL get, DMA v | DMA k, UTL get, DMA v |
//! | remote put | DMA k+v, GME, NET record, remote UTL put, NET status | DMA k+v (NIC reads host A), NET record, DMA k+v (NIC B writes host B), host B software + copy, DMA k+v (host B to its SSD), UTL put, NET status |
//! | remote get | DMA k, GME, NET key, remote UTL get, NET value, DMA v | DMA k, NET key, DMA k, host B software, DMA k, UTL get, DMA v (SSD to host B), DMA v (host B to NIC), NET value, DMA v |

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
        }
    }
}

#[inline]
fn at_rate(bytes: usize, per_s: f64) -> u64 {
    (bytes as f64 * 1e9 / per_s).round() as u64
}

impl Links {
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
        self.net_ns + at_rate(bytes + packets * self.packet_header_bytes as usize, self.net_bytes_per_s)
    }
    pub fn host(&self, bytes: usize) -> u64 {
        self.host_stack_ns + at_rate(bytes, self.host_copy_bytes_per_s)
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
        let l = self.links;
        let target = self.gme.route(key);
        let remote = target != origin;
        let kv = key.len() + value.len();
        // DMA: the host's key and value become a record in device DRAM.
        self.record.clear();
        encode(key, value, &mut self.record);
        let mut t = now + l.dma(kv);
        if self.path == Path::Uio {
            t += l.gme(key.len());
        }
        if remote {
            t += l.net(self.record.len());
            if self.path == Path::Traditional {
                // NIC B writes the record into host B's memory; host B's software copies it
                // and submits it to its SSD, whose DMA reads it back.
                t += l.dma(kv);
                self.host_mem.clear();
                self.host_mem.extend_from_slice(&self.record);
                t += l.host(kv) + l.dma(kv);
            }
        }
        let done = {
            let rec = if self.path == Path::Traditional && remote { &self.host_mem } else { &self.record };
            let (k, v) = (&rec[HEADER_BYTES..HEADER_BYTES + key.len()], &rec[HEADER_BYTES + key.len()..]);
            self.devs[target as usize].put(k, v, t)?
        };
        let mut end = done;
        if remote {
            end += l.net(0);
        }
        Ok(Done { target, remote, latency_ns: end - now })
    }

    /// Get from the host of device `origin` at simulated time `now`; the value lands in `out`
    /// (cleared; None: not stored).
    pub fn get(&mut self, origin: u16, key: &[u8], out: &mut Vec<u8>, now: u64) -> Result<(bool, Done)> {
        let l = self.links;
        let target = self.gme.route(key);
        let remote = target != origin;
        let mut t = now + l.dma(key.len());
        if self.path == Path::Uio {
            t += l.gme(key.len());
        }
        if remote {
            t += l.net(key.len());
            if self.path == Path::Traditional {
                t += l.dma(key.len()) + l.host(key.len()) + l.dma(key.len());
            }
        }
        let (value, done) = self.devs[target as usize].get(key, t)?;
        let vlen = value.as_ref().map_or(0, |v| v.len());
        let mut end = done;
        if remote {
            if self.path == Path::Traditional {
                // SSD B to host B's memory, then host B to its NIC.
                end += l.dma(vlen);
                self.host_mem.clear();
                self.host_mem.extend_from_slice(value.as_deref().unwrap_or_default());
                end += l.dma(vlen);
            }
            end += l.net(vlen);
        }
        // The value to the requesting host's buffer.
        end += l.dma(vlen);
        out.clear();
        if let Some(v) = value.as_deref() {
            out.extend_from_slice(if self.path == Path::Traditional && remote { &self.host_mem } else { v });
        }
        Ok((value.is_some(), Done { target, remote, latency_ns: end - now }))
    }

    /// Record bytes of a key/value pair (what NET carries for a put).
    pub fn record_bytes(key: usize, value: usize) -> usize {
        encoded_len(key, value)
    }
}
