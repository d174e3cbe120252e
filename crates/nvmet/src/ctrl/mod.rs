//! The NVMe subsystem behind the transport: its controllers (one per host association, made by
//! the admin queue's Connect), their properties (CAP, VS, CC, CSTS), the admin commands
//! (Identify, Get/Set Features, Get Log Page, Keep Alive, Asynchronous Event Request) and the
//! NVM command set on one namespace (NSID 1) backed by an ssdlab [`Disk`]; and the discovery
//! controller of `nqn.2014-08.org.nvmexpress.discovery`, whose log page names the subsystem.
//!
//! Field offsets follow the NVMe Base Specification 2.0 (figures of Identify Controller,
//! Identify Namespace, the SMART / Health log) and the NVMe over Fabrics part of it (Connect,
//! Property Get/Set, the discovery log page); the values are what ssdlab's device is.
//!
//! This file holds the types, the subsystem, command dispatch, the fabrics commands (Connect,
//! properties) and metrics; `admin.rs` the admin commands, `logs.rs` the log pages, `io.rs` the
//! NVM and zoned I/O commands.

mod admin;
mod io;
mod logs;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};
use ssdlab_core::ftl::conventional::Conventional;
use ssdlab_core::ftl::fdp::Fdp;
use ssdlab_nbd::{BackendError, Disk};

use crate::cmd::{self, cqe, fabrics, Sqe, Status};
use crate::pdu::CQE_BYTES;
use ssdlab_nbd::Backend;

/// The namespace's storage: a block device (conventional or FDP, through the NBD server's
/// journaled image) or a zoned one.
pub enum Ns {
    Block(Box<dyn Disk>),
    Zoned(Box<Backend>),
}

impl Ns {
    pub fn logical_bytes(&self) -> u64 {
        match self {
            Ns::Block(d) => d.logical_bytes(),
            Ns::Zoned(z) => z.logical_bytes(),
        }
    }
    pub fn wall_of(&self, t: u64) -> Instant {
        match self {
            Ns::Block(d) => d.wall_of(t),
            Ns::Zoned(z) => z.wall_of(t),
        }
    }
    pub fn commit_journal(&mut self) -> Result<(), BackendError> {
        match self {
            Ns::Block(d) => d.commit_journal(),
            Ns::Zoned(z) => z.commit_journal(),
        }
    }
    pub fn snapshot(&mut self) -> Result<(), BackendError> {
        match self {
            Ns::Block(d) => d.snapshot(),
            Ns::Zoned(z) => z.snapshot(),
        }
    }
    pub fn metrics(&mut self) -> Value {
        match self {
            Ns::Block(d) => d.metrics(),
            Ns::Zoned(z) => z.metrics(),
        }
    }
    pub fn series_csv(&self) -> String {
        match self {
            Ns::Block(d) => d.series_csv(),
            Ns::Zoned(z) => z.series_csv(),
        }
    }
    pub fn flush(&mut self) -> Result<u64, Status> {
        match self {
            Ns::Block(d) => d.flush().map_err(|e| backend_status(&e)),
            Ns::Zoned(z) => z.flush().map_err(|e| backend_status(&e)),
        }
    }
}

/// The NVMe status of a failed device command: the device's own status when it refused the
/// command (zone and FDP rules), else an internal error (the image or journal failed).
pub fn backend_status(e: &ssdlab_nbd::BackendError) -> Status {
    match e.status() {
        Some(s) => {
            let (sct, sc) = s.code();
            Status { sct, sc, dnr: true }
        }
        None => Status::INTERNAL_ERROR,
    }
}

/// The NVMe status of an error of the device model.
pub fn status_of(e: &ssdlab_core::Error) -> Status {
    use ssdlab_core::Error as E;
    match e {
        E::Nvme(s, _) => {
            let (sct, sc) = s.code();
            Status { sct, sc, dnr: true }
        }
        E::Command(_) => Status::INVALID_FIELD,
        E::WornOut(_) => Status::CAPACITY_EXCEEDED,
        _ => Status::INTERNAL_ERROR,
    }
}

pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Entries per queue (CAP.MQES + 1).
pub const QUEUE_ENTRIES: u32 = 128;
/// I/O queues a controller grants at most.
pub const MAX_IO_QUEUES: u16 = 8;
/// MDTS: the largest data transfer is 2^MDTS pages of 4 KiB (512 KiB).
pub const MDTS: u8 = 7;
pub const MAX_TRANSFER: u32 = 4096 << MDTS;
/// In-capsule data a command capsule may carry on an I/O queue (IOCCSZ) and on the admin queue
/// (where Linux sends up to 8 KiB in capsule).
pub const IN_CAPSULE_IO: u32 = 8192;
pub const IN_CAPSULE_ADMIN: u32 = 8192;
/// Asynchronous event requests a controller holds (AERL + 1).
pub const AER_SLOTS: usize = 4;
/// The vendor-specific log page with the target's live metrics: an 8-byte length, then
/// metrics.json's text (`ssdlab nvme stats`, or `nvme get-log --log-id=0xc0` on a host).
pub const METRICS_LOG: u8 = 0xC0;
/// Keep Alive granularity: KAS in units of 100 ms.
pub const KAS: u16 = 10;

/// A controller: one host association.
#[derive(Debug, Clone)]
pub struct Ctrl {
    pub cntlid: u16,
    pub discovery: bool,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub cc: u32,
    pub csts: u32,
    pub kato_ms: u32,
    pub io_queues: u16,
    pub aen_config: u32,
    pub write_cache: bool,
    /// Queues connected (the admin queue included).
    pub queues: u16,
}

/// What a command produced: status, the completion's dwords, data for the host, the device's
/// completion time (None: no device work) and whether the completion is held (AER).
#[derive(Debug, Default)]
pub struct Outcome {
    pub status: Option<Status>,
    pub dw0: u32,
    pub dw1: u32,
    pub data: Vec<u8>,
    pub done_ns: Option<u64>,
    pub hold: bool,
}

impl Outcome {
    fn ok() -> Outcome {
        Outcome { status: Some(Status::SUCCESS), ..Default::default() }
    }
    pub fn err(s: Status) -> Outcome {
        Outcome { status: Some(s), ..Default::default() }
    }
    fn data(d: Vec<u8>) -> Outcome {
        Outcome { data: d, ..Outcome::ok() }
    }
    pub fn status(&self) -> Status {
        self.status.unwrap_or(Status::SUCCESS)
    }
    /// The completion queue entry for command `cid` on queue `qid` at submission head `sqhd`.
    pub fn cqe(&self, sqhd: u16, qid: u16, cid: u16) -> [u8; CQE_BYTES] {
        cqe(self.dw0, self.dw1, sqhd, qid, cid, self.status())
    }
}

/// The state of one queue (one TCP connection), set by its Connect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Queue {
    pub connected: bool,
    pub qid: u16,
    pub cntlid: u16,
    /// Entries of the queue (SQSIZE + 1).
    pub entries: u32,
    pub sqhd: u16,
}

impl Queue {
    /// Advance the submission queue head past one command (what completions report).
    pub fn consume(&mut self) -> u16 {
        if self.entries > 0 {
            self.sqhd = ((self.sqhd as u32 + 1) % self.entries) as u16;
        }
        self.sqhd
    }
}

/// Counters for metrics.json's `nvme` section.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Counters {
    pub commands: u64,
    pub admin_commands: u64,
    pub io_commands: u64,
    pub errors: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub deallocates: u64,
    pub flushes: u64,
    pub controllers_created: u64,
}

/// The subsystem: its namespace's disk and its controllers.
pub struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    ns: Mutex<Ns>,
    lba_shift: u32,
    nsze: u64,
    /// The namespace's NGUID (derived from the serial: stable across restarts of one image).
    nguid: [u8; 16],
    ctrls: Mutex<HashMap<u16, Ctrl>>,
    /// The metrics log page as a controller last started reading it.
    metrics_snapshots: Mutex<HashMap<u16, Vec<u8>>>,
    next_cntlid: Mutex<u16>,
    pub counters: Mutex<Counters>,
    /// Where hosts reach it (the discovery log page's entry).
    pub traddr: String,
    pub trsvcid: String,
    pub started: Instant,
}

fn put_str(b: &mut [u8], at: usize, len: usize, s: &str) {
    // ASCII, space padded (Identify's SN, MN, FR).
    let f = &mut b[at..at + len];
    f.fill(b' ');
    for (d, c) in f.iter_mut().zip(s.bytes().filter(|c| c.is_ascii_graphic() || *c == b' ')) {
        *d = c;
    }
}

fn put_nqn(b: &mut [u8], at: usize, s: &str) {
    // NUL-terminated UTF-8 in 256 bytes.
    let n = s.len().min(255);
    b[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn put128(b: &mut [u8], at: usize, v: u128) {
    b[at..at + 16].copy_from_slice(&v.to_le_bytes());
}

fn nqn_of(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// CAP: MQES, CQR, TO (10 s), CSS (NVM command set and I/O command sets), MPSMIN/MPSMAX 4 KiB.
pub const CAP: u64 = (QUEUE_ENTRIES as u64 - 1) | 1 << 16 | 20 << 24 | 1 << 37 | 1 << 43;
/// VS: 2.0.0.
pub const VS: u32 = 0x0002_0000;

impl Subsystem {
    pub fn new(ns: Ns, lba_bytes: u32, nqn: String, serial: String) -> Subsystem {
        let lba_shift = lba_bytes.trailing_zeros();
        let nsze = ns.logical_bytes() >> lba_shift;
        let mut nguid = [0u8; 16];
        let h = crate::pdu::crc32c(serial.as_bytes());
        nguid[..4].copy_from_slice(&h.to_be_bytes());
        nguid[4..8].copy_from_slice(b"sdlb");
        nguid[8..12].copy_from_slice(&crate::pdu::crc32c(nqn.as_bytes()).to_be_bytes());
        nguid[15] = 1;
        Subsystem {
            nqn,
            serial,
            model: "ssdlab emulated SSD".into(),
            firmware: "ssdlab01".into(),
            ns: Mutex::new(ns),
            lba_shift,
            nsze,
            nguid,
            ctrls: Mutex::new(HashMap::new()),
            metrics_snapshots: Mutex::new(HashMap::new()),
            next_cntlid: Mutex::new(1),
            counters: Mutex::new(Counters::default()),
            traddr: String::new(),
            trsvcid: String::new(),
            started: Instant::now(),
        }
    }

    pub fn ns(&self) -> std::sync::MutexGuard<'_, Ns> {
        ssdlab_server::lock(&self.ns)
    }

    /// `f` on the device's FDP state and FTL, if the namespace is an FDP device.
    fn with_fdp<R>(&self, f: impl FnOnce(&Fdp, &Conventional, &ssdlab_core::Device) -> R) -> Option<R> {
        let ns = self.ns();
        let Ns::Block(d) = &*ns else { return None };
        let dev = d.device()?;
        if !matches!(dev.config().personality, ssdlab_core::config::Personality::Conventional) {
            return None;
        }
        let ftl = dev.ftl();
        ftl.fdp().map(|fdp| f(fdp, ftl, dev))
    }

    pub fn fdp_enabled(&self) -> bool {
        self.with_fdp(|_, _, _| ()).is_some()
    }

    /// Whether the subsystem says it may hold several controllers (CMIC) sharing namespace 1
    /// (NMIC). True of the dynamic controller model, and what makes Linux's host put the
    /// namespace behind its multipath node, which requeues I/O a lost connection failed until
    /// the host has reconnected (the kernel's own target says so too). Not for a zoned
    /// namespace: Linux 6.1's multipath node is bio-based, so the zone write ordering of the
    /// path's mq-deadline scheduler no longer applies (zoned writes then fail out of order).
    pub fn shared_namespace(&self) -> bool {
        !matches!(&*self.ns(), Ns::Zoned(_))
    }

    /// The zone geometry of a zoned namespace.
    pub fn zone_info(&self) -> Option<crate::ZoneInfo> {
        match &*self.ns() {
            Ns::Zoned(z) => z.device().zns().map(|z| crate::ZoneInfo {
                zones: z.zone_count(),
                zone_size: z.zone_size(),
                zone_capacity: z.zone_capacity(),
                max_open: z.max_open(),
                max_active: z.max_active(),
            }),
            Ns::Block(_) => None,
        }
    }

    fn ctrls(&self) -> std::sync::MutexGuard<'_, HashMap<u16, Ctrl>> {
        ssdlab_server::lock(&self.ctrls)
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut ssdlab_server::lock(&self.counters));
    }

    pub fn lba_bytes(&self) -> u32 {
        1 << self.lba_shift
    }

    pub fn controllers(&self) -> usize {
        self.ctrls().len()
    }

    /// The wall-clock instant of the device's modelled time `t_ns`.
    pub fn wall_of(&self, t_ns: u64) -> Instant {
        self.ns().wall_of(t_ns)
    }

    /// A queue's connection ended: the controller goes with its admin queue.
    pub fn disconnect(&self, q: &Queue) {
        if !q.connected {
            return;
        }
        let mut c = self.ctrls();
        if q.qid == 0 {
            c.remove(&q.cntlid);
            ssdlab_server::lock(&self.metrics_snapshots).remove(&q.cntlid);
        } else if let Some(ctrl) = c.get_mut(&q.cntlid) {
            ctrl.queues = ctrl.queues.saturating_sub(1);
        }
    }

    /// Run one command from queue `q` with its data from the host (`data`: what the SGL
    /// described, all of it).
    pub fn execute(&self, q: &mut Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        self.count(|c| c.commands += 1);
        let out = if sqe.opcode() == cmd::admin::FABRICS {
            self.fabrics(q, sqe, data)
        } else if !q.connected {
            Outcome::err(Status::COMMAND_SEQUENCE_ERROR)
        } else if q.qid == 0 {
            self.count(|c| c.admin_commands += 1);
            self.admin(q, sqe, data)
        } else {
            self.count(|c| c.io_commands += 1);
            self.io(q, sqe, data)
        };
        if out.status() != Status::SUCCESS {
            self.count(|c| c.errors += 1);
        }
        out
    }

    fn fabrics(&self, q: &mut Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        match sqe.fctype() {
            fabrics::CONNECT => self.connect(q, sqe, data),
            fabrics::PROPERTY_GET | fabrics::PROPERTY_SET if !q.connected || q.qid != 0 => Outcome::err(Status::COMMAND_SEQUENCE_ERROR),
            fabrics::PROPERTY_GET => self.property_get(q, sqe),
            fabrics::PROPERTY_SET => self.property_set(q, sqe),
            fabrics::DISCONNECT => Outcome::ok(),
            _ => Outcome::err(Status::INVALID_OPCODE),
        }
    }

    fn connect(&self, q: &mut Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        if q.connected {
            return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
        }
        let invalid = |byte: u32, dw0_is_data: bool| {
            Outcome {
                // IATTR (bit 16): 1 = the parameter is in the Connect data; IPO: its byte offset.
                dw0: (dw0_is_data as u32) << 16,
                dw1: 0,
                ..Outcome::err(Status::CONNECT_INVALID_PARAMETERS)
            }
            .with_ipo(byte)
        };
        let recfmt = sqe.u16_at(40);
        if recfmt != 0 {
            return Outcome::err(Status { sct: 1, sc: 0x80, dnr: true });
        }
        if data.len() < 1024 {
            return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let qid = sqe.u16_at(42);
        let sqsize = sqe.u16_at(44) as u32;
        let kato = sqe.dw(12);
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&data[..16]);
        let cntlid = u16::from_le_bytes([data[16], data[17]]);
        let subnqn = nqn_of(&data[256..512]);
        let hostnqn = nqn_of(&data[512..768]);
        let discovery = subnqn == DISCOVERY_NQN;
        if !discovery && subnqn != self.nqn {
            return invalid(256, true);
        }
        if sqsize == 0 || sqsize >= QUEUE_ENTRIES {
            return Outcome::err(Status::CONNECT_INVALID_PARAMETERS).with_ipo(44);
        }
        if hostnqn.is_empty() {
            return invalid(512, true);
        }
        let mut ctrls = self.ctrls();
        if qid == 0 {
            if cntlid != 0xFFFF && cntlid != 0xFFFE {
                return invalid(16, true);
            }
            let id = {
                let mut n = ssdlab_server::lock(&self.next_cntlid);
                // Controller ids 1..=0xFFEF; skip ids still in use after a wrap.
                let mut id = *n;
                for _ in 0..0xFFEF {
                    if !ctrls.contains_key(&id) {
                        break;
                    }
                    id = if id >= 0xFFEF { 1 } else { id + 1 };
                }
                if ctrls.contains_key(&id) {
                    return Outcome::err(Status::CONNECT_CONTROLLER_BUSY);
                }
                *n = if id >= 0xFFEF { 1 } else { id + 1 };
                id
            };
            ctrls.insert(
                id,
                Ctrl {
                    cntlid: id,
                    discovery,
                    hostnqn,
                    hostid,
                    cc: 0,
                    csts: 0,
                    kato_ms: kato,
                    io_queues: 0,
                    aen_config: 0,
                    write_cache: true,
                    queues: 1,
                },
            );
            drop(ctrls);
            self.count(|c| c.controllers_created += 1);
            *q = Queue { connected: true, qid: 0, cntlid: id, entries: sqsize + 1, sqhd: 0 };
            return Outcome { dw0: id as u32, ..Outcome::ok() };
        }
        let Some(c) = ctrls.get_mut(&cntlid) else { return invalid(16, true) };
        if c.hostnqn != hostnqn || c.hostid != hostid {
            return Outcome::err(Status::CONNECT_INVALID_HOST);
        }
        if c.discovery || c.cc & 1 == 0 || qid > c.io_queues {
            return invalid(42, false);
        }
        c.queues += 1;
        *q = Queue { connected: true, qid, cntlid, entries: sqsize + 1, sqhd: 0 };
        Outcome { dw0: cntlid as u32, ..Outcome::ok() }
    }

    fn property_get(&self, q: &Queue, sqe: &Sqe) -> Outcome {
        let size8 = sqe.0[40] & 7 == 1;
        let ofst = sqe.dw(11);
        let ctrls = self.ctrls();
        let Some(c) = ctrls.get(&q.cntlid) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        let v: u64 = match (ofst, size8) {
            (0x00, true) => CAP,
            (0x08, false) => VS as u64,
            (0x14, false) => c.cc as u64,
            (0x1C, false) => c.csts as u64,
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        Outcome { dw0: v as u32, dw1: (v >> 32) as u32, ..Outcome::ok() }
    }

    fn property_set(&self, q: &Queue, sqe: &Sqe) -> Outcome {
        let size8 = sqe.0[40] & 7 == 1;
        let ofst = sqe.dw(11);
        let value = sqe.qw(48);
        if ofst != 0x14 || size8 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let v = value as u32;
        let shutdown = (v >> 14) & 3 != 0;
        if shutdown {
            // A clean shutdown: what the host wrote is made durable first.
            if let Err(st) = self.ns().flush() {
                return Outcome::err(st);
            }
        }
        let mut ctrls = self.ctrls();
        let Some(c) = ctrls.get_mut(&q.cntlid) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        let en = v & 1 != 0;
        if en && c.cc & 1 == 0 {
            // IOSQES 6 (64-byte entries) and IOCQES 4 (16-byte) are the only sizes.
            let (iosqes, iocqes) = ((v >> 16) & 0xF, (v >> 20) & 0xF);
            if !c.discovery && (iosqes != 6 || iocqes != 4) {
                c.csts |= 1 << 1; // CFS: a fatal controller status for an enable it cannot honour
                return Outcome::ok();
            }
            c.csts |= 1;
        } else if !en {
            c.csts &= !1;
            c.io_queues = 0;
        }
        if shutdown {
            c.csts = (c.csts & !(3 << 2)) | 2 << 2;
        } else {
            c.csts &= !(3 << 2);
        }
        c.cc = v;
        Outcome::ok()
    }

    fn ctrl(&self, q: &Queue) -> Option<Ctrl> {
        self.ctrls().get(&q.cntlid).cloned()
    }

    /// metrics.json: the device's report, the target's counters under `nvme`.
    pub fn metrics(&self) -> Value {
        let mut m = self.ns().metrics();
        let c = ssdlab_server::lock(&self.counters).clone();
        m["nvme"] = json!({
            "subsystem_nqn": self.nqn,
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "controllers": self.controllers(),
            "counters": c,
        });
        m
    }
}

impl Outcome {
    /// Connect's invalid-parameter completions name the offending field's byte (IPO, bits
    /// 15:0 of DW0).
    fn with_ipo(mut self, byte: u32) -> Outcome {
        self.dw0 = (self.dw0 & 0xFFFF_0000) | byte & 0xFFFF;
        self
    }
}

/// A command's outcome from the device's completion time or its status.
fn done(r: Result<u64, Status>) -> Outcome {
    match r {
        Ok(t) => Outcome { done_ns: Some(t), ..Outcome::ok() },
        Err(s) => Outcome::err(s),
    }
}
