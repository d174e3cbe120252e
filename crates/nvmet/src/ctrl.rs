//! The NVMe subsystem behind the transport: its controllers (one per host association, made by
//! the admin queue's Connect), their properties (CAP, VS, CC, CSTS), the admin commands
//! (Identify, Get/Set Features, Get Log Page, Keep Alive, Asynchronous Event Request) and the
//! NVM command set on one namespace (NSID 1) backed by an ssdlab [`Disk`]; and the discovery
//! controller of `nqn.2014-08.org.nvmexpress.discovery`, whose log page names the subsystem.
//!
//! Field offsets follow the NVMe Base Specification 2.0 (figures of Identify Controller,
//! Identify Namespace, the SMART / Health log) and the NVMe over Fabrics part of it (Connect,
//! Property Get/Set, the discovery log page); the values are what ssdlab's device is.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};
use ssdlab_core::config::HandleType;
use ssdlab_core::ftl::conventional::Conventional;
use ssdlab_core::ftl::fdp::Fdp;
use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};
use ssdlab_nbd::Disk;

use crate::cmd::{admin, cqe, fabrics, io, Sqe, Status};
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
    pub fn commit_journal(&mut self) -> Result<(), String> {
        match self {
            Ns::Block(d) => d.commit_journal().map_err(|e| e.0),
            Ns::Zoned(z) => z.commit_journal().map_err(|e| e.0),
        }
    }
    pub fn snapshot(&mut self) -> Result<(), String> {
        match self {
            Ns::Block(d) => d.snapshot().map_err(|e| e.0),
            Ns::Zoned(z) => z.snapshot().map_err(|e| e.0),
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
        self.ns.lock().unwrap_or_else(|e| e.into_inner())
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
        self.ctrls.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counters.lock().unwrap_or_else(|e| e.into_inner()));
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
            self.metrics_snapshots.lock().unwrap_or_else(|e| e.into_inner()).remove(&q.cntlid);
        } else if let Some(ctrl) = c.get_mut(&q.cntlid) {
            ctrl.queues = ctrl.queues.saturating_sub(1);
        }
    }

    /// Run one command from queue `q` with its data from the host (`data`: what the SGL
    /// described, all of it).
    pub fn execute(&self, q: &mut Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        self.count(|c| c.commands += 1);
        let out = if sqe.opcode() == admin::FABRICS {
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
                let mut n = self.next_cntlid.lock().unwrap_or_else(|e| e.into_inner());
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

    fn admin(&self, q: &Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        let Some(c) = self.ctrl(q) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        if c.cc & 1 == 0 || c.csts & 1 == 0 {
            return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
        }
        let _ = data;
        match sqe.opcode() {
            admin::IDENTIFY => self.identify(&c, sqe),
            admin::GET_LOG_PAGE => self.get_log_page(&c, sqe),
            admin::SET_FEATURES => self.set_features(q, &c, sqe),
            admin::GET_FEATURES => self.get_features(&c, sqe),
            admin::KEEP_ALIVE => Outcome::ok(),
            admin::ASYNC_EVENT_REQUEST => Outcome { hold: true, ..Outcome::ok() },
            // Commands complete in order of their work; there is nothing to abort (bit 0 of
            // DW0 set: not aborted).
            admin::ABORT => Outcome { dw0: 1, ..Outcome::ok() },
            _ => Outcome::err(Status::INVALID_OPCODE),
        }
    }

    fn identify(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let cns = sqe.dw(10) as u8;
        let csi = (sqe.dw(11) >> 24) as u8;
        let nsid = sqe.nsid();
        let ns_ok = nsid == 1 && !c.discovery;
        let zones = self.zone_info();
        // The namespace's command set: NVM (0) or Zoned Namespace (2).
        let ns_csi = if zones.is_some() { 2 } else { 0 };
        let mut b = vec![0u8; 4096];
        match cns {
            0x00 if ns_ok => self.identify_ns(&mut b),
            0x00 if nsid == 0xFFFF_FFFF => self.identify_ns_common(&mut b),
            0x00 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x01 => self.identify_ctrl(c, &mut b),
            0x02 | 0x07 => {
                // Active namespaces above NSID (CNS 07h: of command set CSI).
                if nsid >= 0xFFFF_FFFE {
                    return Outcome::err(Status::INVALID_NAMESPACE);
                }
                if !c.discovery && nsid < 1 && (cns == 0x02 || csi == ns_csi) {
                    put32(&mut b, 0, 1);
                }
            }
            0x03 if ns_ok => {
                // Namespace identification descriptors: NGUID, then the command set.
                b[0] = 0x02;
                b[1] = 16;
                b[4..20].copy_from_slice(&self.nguid);
                b[20] = 0x04;
                b[21] = 1;
                b[24] = ns_csi;
            }
            0x03 => return Outcome::err(Status::INVALID_NAMESPACE),
            // The NVM command set's own structures: nothing beyond the defaults (no protection
            // information, no extended LBA formats, no extra limits).
            0x05 if ns_ok && csi == 0 => {}
            0x06 if csi == 0 => {}
            0x05 if ns_ok && csi == 2 => match zones {
                Some(z) => {
                    // Zoned Namespace: ZOC 0, OZCS bit 0 (reads may cross zone boundaries),
                    // MAR and MOR (0's based), LBAFE 0: ZSZE, ZDES 0.
                    put16(&mut b, 2, 1);
                    put32(&mut b, 4, z.max_active.max(1) - 1);
                    put32(&mut b, 8, z.max_open.max(1) - 1);
                    put64(&mut b, 2816, z.zone_size);
                }
                None => return Outcome::err(Status::INVALID_FIELD),
            },
            // Zoned Namespace controller: ZASL 0 (zone appends up to MDTS).
            0x06 if csi == 2 && zones.is_some() => {}
            0x05 if csi == 0 || csi == 2 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x08 if ns_ok => {
                // I/O command set independent namespace: NSFEAT, NMIC 0, ..., NSTAT ready.
                b[0] = 1 << 2;
                b[14] = 1;
            }
            0x08 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x1C => {
                // I/O command set combinations: index 0 = NVM and Zoned Namespace.
                put64(&mut b, 0, 1 | 1 << 2);
            }
            _ => return Outcome::err(Status::INVALID_FIELD),
        }
        Outcome::data(b)
    }

    fn identify_ctrl(&self, c: &Ctrl, b: &mut [u8]) {
        put16(b, 0, 0x1b36); // VID: the QEMU/Red Hat PCI vendor id used by emulated NVMe devices
        put16(b, 2, 0x1af4);
        put_str(b, 4, 20, &self.serial);
        put_str(b, 24, 40, &self.model);
        put_str(b, 64, 8, &self.firmware);
        b[72] = 6; // RAB
        b[77] = MDTS;
        put16(b, 78, c.cntlid);
        put32(b, 80, VS);
        put32(b, 92, 1 << 8); // OAES: namespace attribute notices
        let fdp = self.fdp_enabled();
        // CTRATT: 128-bit host identifier; with FDP, endurance groups (bit 4) and FDPS (bit 19).
        put32(b, 96, 1 << 0 | if fdp { 1 << 4 | 1 << 19 } else { 0 });
        put16(b, 340, fdp as u16); // ENDGIDMAX
        b[111] = if c.discovery { 2 } else { 1 }; // CNTRLTYPE
        put16(b, 256, 0); // OACS
        b[258] = 3; // ACL
        b[259] = AER_SLOTS as u8 - 1; // AERL
        b[260] = 1 << 1 | 1; // FRMW: one slot, read-only
        b[261] = 1 << 2 | 1 << 1 | 1; // LPA: per-namespace SMART, command effects log, extended data
        b[262] = 0; // ELPE: one error log entry
        put16(b, 266, 0x157); // WCTEMP 70 C
        put16(b, 268, 0x175); // CCTEMP 100 C
        put16(b, 320, KAS);
        b[512] = 0x66; // SQES
        b[513] = 0x44; // CQES
        put16(b, 514, QUEUE_ENTRIES as u16); // MAXCMD
        put32(b, 516, if c.discovery { 0 } else { 1 }); // NN
        put16(b, 520, 1 << 2 | 1 << 3); // ONCS: Dataset Management, Write Zeroes
        b[525] = 1 | 3 << 1; // VWC present; Flush with broadcast NSID supported
        put32(b, 536, 1 | 1 << 20); // SGLS: SGLs supported; offsets in in-capsule data
        put_nqn(b, 768, if c.discovery { DISCOVERY_NQN } else { &self.nqn });
        // Fabrics (bytes 1792..): IOCCSZ and IORCSZ in 16-byte units, ICDOFF 0, FCATT 0 (dynamic
        // controller model), MSDBD 1.
        put32(b, 1792, (64 + IN_CAPSULE_IO) / 16);
        put32(b, 1796, 1);
        put16(b, 1800, 0);
        b[1802] = 0;
        b[1803] = 1;
        // Power state 0: 25 W, the figure of a typical enterprise drive; entry/exit latency 0.
        put16(b, 2048, 2500);
    }

    fn identify_ns(&self, b: &mut [u8]) {
        put64(b, 0, self.nsze);
        put64(b, 8, self.nsze);
        put64(b, 16, self.nsze);
        b[24] = 1 << 2; // NSFEAT: deallocated blocks read as zeros (DLFEAT holds the value)
        b[25] = 0; // NLBAF: one LBA format
        b[26] = 0; // FLBAS
        b[33] = 1 << 3 | 1; // DLFEAT: deallocated blocks read zeros; Write Zeroes can deallocate
        self.identify_ns_common(b);
        if self.fdp_enabled() {
            put16(b, 102, 1); // ENDGID: the endurance group whose FDP configuration applies
        }
        b[104..120].copy_from_slice(&self.nguid);
    }

    /// What every namespace shares (NSID FFFFFFFFh): the LBA format.
    fn identify_ns_common(&self, b: &mut [u8]) {
        b[128 + 2] = self.lba_shift as u8; // LBAF0: LBADS; no metadata; best performance
    }

    fn get_log_page(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let lid = sqe.dw(10) as u8;
        let numd = ((sqe.dw(11) as u64 & 0xFFFF) << 16 | (sqe.dw(10) as u64 >> 16)) + 1;
        let len = (numd * 4) as usize;
        let offset = (sqe.dw(13) as u64) << 32 | sqe.dw(12) as u64;
        if len > MAX_TRANSFER as usize {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let page: Vec<u8> = match lid {
            0x01 => vec![0u8; 64],
            0x05 if !c.discovery => self.effects_log((sqe.dw(14) >> 24) as u8),
            0x02 if !c.discovery => self.smart_log(),
            0x03 if !c.discovery => {
                let mut b = vec![0u8; 512];
                b[0] = 1; // AFI: slot 1 active
                put_str(&mut b, 8, 8, &self.firmware);
                b
            }
            0x04 if !c.discovery => vec![0u8; 4096],
            0x70 if c.discovery => self.discovery_log(),
            METRICS_LOG if !c.discovery => {
                // One snapshot per controller, taken when a read starts at offset 0, so a page
                // read in pieces is one consistent document.
                let mut snaps = self.metrics_snapshots.lock().unwrap_or_else(|e| e.into_inner());
                if offset == 0 || !snaps.contains_key(&c.cntlid) {
                    let text = serde_json::to_vec_pretty(&self.metrics()).unwrap_or_default();
                    let mut b = (text.len() as u64).to_le_bytes().to_vec();
                    b.extend_from_slice(&text);
                    snaps.insert(c.cntlid, b);
                }
                snaps[&c.cntlid].clone()
            }
            0x20..=0x23 if !c.discovery => {
                if sqe.dw(11) >> 16 != 1 {
                    return Outcome::err(Status::INVALID_FIELD); // LSI: endurance group 1 only
                }
                match self.fdp_log(lid, sqe.dw(10) >> 8 & 1 != 0) {
                    Some(p) => p,
                    None => return Outcome::err(Status::INVALID_LOG_PAGE),
                }
            }
            _ => return Outcome::err(Status::INVALID_LOG_PAGE),
        };
        if !offset.is_multiple_of(4) || offset > page.len() as u64 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let mut out = vec![0u8; len];
        let from = &page[offset as usize..];
        let n = from.len().min(len);
        out[..n].copy_from_slice(&from[..n]);
        Outcome::data(out)
    }

    /// The FDP log pages (TP4146) of endurance group 1: configurations (20h), reclaim unit
    /// handle usage (21h), statistics (22h), events (23h; `controller`: the controller's events
    /// rather than the host's).
    fn fdp_log(&self, lid: u8, controller: bool) -> Option<Vec<u8>> {
        self.with_fdp(|f, ftl, _| match lid {
            0x20 => {
                let mut descs = vec![];
                for (cfg, ru_bytes) in &f.offered {
                    let nruh = cfg.handles as usize;
                    let mut d = vec![0u8; 64 + 4 * nruh];
                    let dsze = d.len() as u16;
                    put16(&mut d, 0, dsze);
                    let rgif = if cfg.reclaim_groups <= 1 { 0 } else { 32 - (cfg.reclaim_groups - 1).leading_zeros() };
                    d[2] = rgif as u8 | 1 << 4 | 1 << 7; // RGIF, FDPVWC, FDPCV (valid)
                    put32(&mut d, 4, cfg.reclaim_groups);
                    put16(&mut d, 8, cfg.handles as u16);
                    put16(&mut d, 10, (cfg.reclaim_groups * cfg.handles - 1) as u16); // MAXPIDS, 0's based
                    put32(&mut d, 12, 0); // NNSS, 0's based: one namespace
                    put64(&mut d, 16, *ru_bytes); // RUNS
                    for h in 0..nruh {
                        d[64 + 4 * h] = match cfg.handle_type(h as u32) {
                            HandleType::InitiallyIsolated => 1,
                            HandleType::PersistentlyIsolated => 2,
                        };
                    }
                    descs.extend_from_slice(&d);
                }
                let mut b = vec![0u8; 16];
                put16(&mut b, 0, f.offered.len().saturating_sub(1) as u16);
                put32(&mut b, 4, (16 + descs.len()) as u32);
                b.extend_from_slice(&descs);
                b
            }
            0x21 => {
                let u = f.usage();
                let mut b = vec![0u8; 8 + 8 * u.len()];
                put16(&mut b, 0, u.len() as u16);
                for (h, s) in u.iter().enumerate() {
                    b[8 + 8 * h] = if *s == "unused" { 0 } else { 1 };
                }
                b
            }
            0x22 => {
                let mut b = vec![0u8; 64];
                if let Ok(st) = ftl.fdp_statistics() {
                    put128(&mut b, 0, st.hbmw as u128);
                    put128(&mut b, 16, st.mbmw as u128);
                    put128(&mut b, 32, st.mbe as u128);
                }
                b
            }
            0x23 => {
                let evs: Vec<_> = f.events().filter(|e| (e.code >= 0x80) == controller).collect();
                let mut b = vec![0u8; 64 + 64 * evs.len()];
                put32(&mut b, 0, evs.len() as u32);
                for (i, e) in evs.iter().enumerate() {
                    let d = &mut b[64 + 64 * i..128 + 64 * i];
                    d[0] = e.code;
                    d[1] = e.pid.is_some() as u8 | 1 << 1; // PIV, NSIDV
                    put16(d, 2, e.pid.unwrap_or(0));
                    put64(d, 4, e.time_ns / 1_000_000); // timestamp: milliseconds
                    put32(d, 12, 1);
                    put16(d, 32, e.reclaim_group);
                }
                b
            }
            _ => vec![],
        })
        .filter(|b| !b.is_empty())
    }

    /// Commands Supported and Effects (05h) of command set `csi`: which admin and I/O commands
    /// the controller takes and which change logical block content. Linux reads it for a zoned
    /// namespace and leaves the namespace out (or read-only) unless Zone Append is listed.
    fn effects_log(&self, csi: u8) -> Vec<u8> {
        const CSUPP: u32 = 1;
        const LBCC: u32 = 1 << 1;
        let mut b = vec![0u8; 4096];
        for op in [
            admin::GET_LOG_PAGE,
            admin::IDENTIFY,
            admin::ABORT,
            admin::SET_FEATURES,
            admin::GET_FEATURES,
            admin::ASYNC_EVENT_REQUEST,
            admin::KEEP_ALIVE,
        ] {
            put32(&mut b, 4 * op as usize, CSUPP);
        }
        let zoned = self.zone_info().is_some();
        let fdp = self.fdp_enabled();
        let mut io_ops: Vec<(u8, u32)> = vec![(io::FLUSH, CSUPP), (io::READ, CSUPP)];
        if (csi == 0 && !zoned) || (csi == 2 && zoned) {
            io_ops.extend([(io::WRITE, CSUPP | LBCC), (io::WRITE_ZEROES, CSUPP | LBCC), (io::DATASET_MANAGEMENT, CSUPP | LBCC)]);
        }
        if csi == 2 && zoned {
            io_ops.extend([(io::ZONE_MGMT_SEND, CSUPP | LBCC), (io::ZONE_MGMT_RECV, CSUPP), (io::ZONE_APPEND, CSUPP | LBCC)]);
        }
        if csi == 0 && fdp {
            io_ops.extend([(io::IO_MGMT_RECV, CSUPP), (io::IO_MGMT_SEND, CSUPP)]);
        }
        for (op, e) in io_ops {
            put32(&mut b, 1024 + 4 * op as usize, e);
        }
        b
    }

    /// SMART / Health Information: ssdlab's bytes and commands since the device was new, its
    /// wear as Percentage Used (mean erase count over the P/E limit) and spare blocks left.
    fn smart_log(&self) -> Vec<u8> {
        let m = self.ns().metrics();
        let life = &m["device_lifetime"];
        let g = |v: &Value| v.as_u64().unwrap_or(0);
        let mut b = vec![0u8; 512];
        b[0] = 0; // critical warning
        put16(&mut b, 1, 273 + 35); // composite temperature (K)
        b[3] = 100; // available spare
        b[4] = 10; // available spare threshold
        let wear = m["erase_count"]["mean"].as_f64().unwrap_or(0.0);
        let limit = m["config"]["media"]["pe_limit"].as_f64().unwrap_or(0.0);
        b[5] = if limit > 0.0 { (100.0 * wear / limit).min(255.0) as u8 } else { 0 };
        // Data units: thousands of 512-byte units, rounded up.
        let units = |bytes: u64| (bytes / 512).div_ceil(1000) as u128;
        put128(&mut b, 32, units(g(&life["host_read_bytes"])));
        put128(&mut b, 48, units(g(&life["host_write_bytes"])));
        let cnt = self.counters.lock().unwrap_or_else(|e| e.into_inner()).clone();
        put128(&mut b, 64, cnt.reads as u128);
        put128(&mut b, 80, cnt.writes as u128);
        put128(&mut b, 112, 1); // power cycles
        put128(&mut b, 128, (self.started.elapsed().as_secs() / 3600) as u128);
        b
    }

    fn discovery_log(&self) -> Vec<u8> {
        let mut b = vec![0u8; 2048];
        put64(&mut b, 0, 1); // GENCTR
        put64(&mut b, 8, 1); // NUMREC
        let e = &mut b[1024..2048];
        e[0] = 3; // TRTYPE: TCP
        e[1] = if self.traddr.contains(':') { 2 } else { 1 }; // ADRFAM: IPv6 / IPv4
        e[2] = 2; // SUBTYPE: an NVM subsystem
        e[3] = 2; // TREQ: secure channel not required
        put16(e, 4, 1); // PORTID
        put16(e, 6, 0xFFFF); // CNTLID: dynamic
        put16(e, 8, 32); // ASQSZ
        put_str(e, 32, 32, &self.trsvcid);
        put_nqn(e, 256, &self.nqn);
        put_str(e, 512, 256, &self.traddr);
        e[768] = 0; // TSAS: no security
                    // TRSVCID and TRADDR are space padded ASCII fields (discovery log entry).
        b
    }

    fn set_features(&self, q: &Queue, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let fid = sqe.dw(10) as u8;
        if sqe.dw(10) >> 31 != 0 {
            return Outcome::err(Status::FEATURE_NOT_SAVEABLE);
        }
        let v = sqe.dw(11);
        let mut ctrls = self.ctrls();
        let Some(cm) = ctrls.get_mut(&q.cntlid) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        match fid {
            0x07 if !c.discovery => {
                if v & 0xFFFF == 0xFFFF || v >> 16 == 0xFFFF {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                if cm.queues > 1 {
                    // Already granted and in use: the number cannot change.
                    let n = (cm.io_queues - 1) as u32;
                    return Outcome { dw0: n | n << 16, status: Some(Status::COMMAND_SEQUENCE_ERROR), ..Default::default() };
                }
                let want = ((v & 0xFFFF).min(v >> 16) + 1) as u16;
                cm.io_queues = want.min(MAX_IO_QUEUES);
                let n = (cm.io_queues - 1) as u32;
                Outcome { dw0: n | n << 16, ..Outcome::ok() }
            }
            0x06 if !c.discovery => {
                cm.write_cache = v & 1 != 0;
                Outcome::ok()
            }
            0x0B => {
                cm.aen_config = v;
                Outcome::ok()
            }
            0x0F => {
                cm.kato_ms = v;
                Outcome::ok()
            }
            // FDP is enabled or not by the device's config; a host cannot change it.
            0x1D | 0x1E if !c.discovery => Outcome::err(Status::FEATURE_NOT_CHANGEABLE),
            0x02 | 0x04 | 0x08 | 0x0A if !c.discovery => Outcome::ok(),
            _ => Outcome::err(Status::INVALID_FIELD),
        }
    }

    fn get_features(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let fid = sqe.dw(10) as u8;
        let dw0 = match fid {
            0x07 if !c.discovery => {
                let n = c.io_queues.max(1) as u32 - 1;
                n | n << 16
            }
            0x06 if !c.discovery => c.write_cache as u32,
            0x0B => c.aen_config,
            0x0F => c.kato_ms,
            0x04 if !c.discovery => 0x157,
            0x1D if !c.discovery => {
                // FDP: FDPE and the configuration index, for endurance group 1.
                if sqe.dw(11) & 0xFFFF != 1 {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                self.with_fdp(|f, _, _| 1 | f.configuration << 8).unwrap_or_default()
            }
            0x02 | 0x08 | 0x0A if !c.discovery => 0,
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        Outcome { dw0, ..Outcome::ok() }
    }

    /// The LBA range of a read or write-like command, checked against the namespace.
    fn range(&self, sqe: &Sqe) -> Result<(u64, u64), Status> {
        let slba = sqe.qw(40);
        let nlb = (sqe.dw(12) & 0xFFFF) as u64 + 1;
        if slba.checked_add(nlb).is_none_or(|end| end > self.nsze) {
            return Err(Status::LBA_OUT_OF_RANGE);
        }
        Ok((slba << self.lba_shift, nlb << self.lba_shift))
    }

    fn io(&self, q: &Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        let _ = q;
        let nsid = sqe.nsid();
        if sqe.opcode() == io::FLUSH {
            if nsid != 1 && nsid != 0xFFFF_FFFF {
                return Outcome::err(Status::INVALID_NAMESPACE);
            }
            self.count(|c| c.flushes += 1);
            return done(self.ns().flush());
        }
        if nsid != 1 {
            return Outcome::err(Status::INVALID_NAMESPACE);
        }
        let mut ns = self.ns();
        let zoned = matches!(&*ns, Ns::Zoned(_));
        match sqe.opcode() {
            io::READ => {
                let (off, len) = match self.range(sqe) {
                    Ok(r) => r,
                    Err(s) => return Outcome::err(s),
                };
                let mut buf = vec![0u8; len as usize];
                let r = match &mut *ns {
                    Ns::Block(d) => d.read(off, &mut buf).map_err(|e| backend_status(&e)),
                    Ns::Zoned(z) => z.read(off, &mut buf).map_err(|e| backend_status(&e)),
                };
                drop(ns);
                let mut out = done(r);
                if out.status() == Status::SUCCESS {
                    out.data = buf;
                    self.count(|c| {
                        c.reads += 1;
                        c.read_bytes += len
                    });
                }
                out
            }
            io::WRITE => {
                let (off, len) = match self.range(sqe) {
                    Ok(r) => r,
                    Err(s) => return Outcome::err(s),
                };
                if data.len() as u64 != len {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                let fua = sqe.dw(12) & (1 << 30) != 0;
                let dtype = (sqe.dw(12) >> 20) & 0xF;
                let placement = match dtype {
                    0 => None,
                    2 => {
                        let pid = (sqe.dw(13) >> 16) as u16;
                        let ok = match &*ns {
                            Ns::Block(d) => d.device().and_then(|dev| dev.ftl().fdp()).is_some_and(|f| f.decode(pid).is_some()),
                            Ns::Zoned(_) => false,
                        };
                        if !ok {
                            return Outcome::err(Status::INVALID_FIELD);
                        }
                        Some(pid)
                    }
                    _ => return Outcome::err(Status::INVALID_FIELD),
                };
                let r = match &mut *ns {
                    Ns::Block(d) => d.write(off, data, fua, placement).map_err(|e| backend_status(&e)),
                    Ns::Zoned(z) => z.write(off, data, fua, None).map_err(|e| backend_status(&e)),
                };
                drop(ns);
                let out = done(r);
                if out.status() == Status::SUCCESS {
                    self.count(|c| {
                        c.writes += 1;
                        c.write_bytes += len
                    });
                }
                out
            }
            io::WRITE_ZEROES => {
                let (off, len) = match self.range(sqe) {
                    Ok(r) => r,
                    Err(s) => return Outcome::err(s),
                };
                let deac = sqe.dw(12) & (1 << 25) != 0;
                let fua = sqe.dw(12) & (1 << 30) != 0;
                done(match &mut *ns {
                    Ns::Block(d) => if deac { d.trim(off, len, fua) } else { d.write_zeroes(off, len, true, fua, None) }
                        .map_err(|_| Status::INTERNAL_ERROR),
                    // A zoned namespace writes the zeros at the write pointer like any write.
                    Ns::Zoned(z) => z.write(off, &vec![0u8; len as usize], fua, None).map_err(|e| backend_status(&e)),
                })
            }
            io::DATASET_MANAGEMENT => {
                let nr = (sqe.dw(10) & 0xFF) as usize + 1;
                if data.len() < nr * 16 {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                if sqe.dw(11) & (1 << 2) == 0 || zoned {
                    // Only the deallocate attribute does anything, and not on zones (a zone
                    // is deallocated by its reset); hints are taken and ignored.
                    return Outcome::ok();
                }
                let mut ranges = Vec::with_capacity(nr);
                for r in data[..nr * 16].chunks_exact(16) {
                    let nlb = u32::from_le_bytes(r[4..8].try_into().expect("4")) as u64;
                    let slba = u64::from_le_bytes(r[8..16].try_into().expect("8"));
                    if slba.checked_add(nlb).is_none_or(|e| e > self.nsze) {
                        return Outcome::err(Status::LBA_OUT_OF_RANGE);
                    }
                    if nlb > 0 {
                        ranges.push((slba << self.lba_shift, nlb << self.lba_shift));
                    }
                }
                let Ns::Block(d) = &mut *ns else { unreachable!("zoned namespaces returned above") };
                let mut t = 0;
                for &(off, len) in &ranges {
                    match d.trim(off, len, false) {
                        Ok(x) => t = t.max(x),
                        Err(_) => return Outcome::err(Status::INTERNAL_ERROR),
                    }
                }
                drop(ns);
                self.count(|c| c.deallocates += ranges.len() as u64);
                done(Ok(t))
            }
            io::IO_MGMT_RECV => {
                drop(ns);
                // Management operation 1: Reclaim Unit Handle Status.
                if sqe.dw(10) as u8 != 1 {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                let len = ((sqe.dw(11) as u64 + 1) * 4).min(MAX_TRANSFER as u64) as usize;
                let Some(st) = self.with_fdp(|f, _, _| f.ruh_status()) else { return Outcome::err(Status::INVALID_OPCODE) };
                let mut b = vec![0u8; (16 + 32 * st.len()).max(len)];
                put16(&mut b, 14, st.len() as u16);
                for (i, r) in st.iter().enumerate() {
                    let d = &mut b[16 + 32 * i..48 + 32 * i];
                    put16(d, 0, r.pid);
                    put16(d, 2, r.ruhid);
                    put64(d, 8, r.ruamw);
                }
                b.truncate(len);
                Outcome::data(b)
            }
            io::IO_MGMT_SEND => {
                // Management operation 1: Reclaim Unit Handle Update of NPID + 1 identifiers.
                if sqe.dw(10) as u8 != 1 {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                let n = (sqe.dw(10) >> 16) as usize + 1;
                if data.len() < 2 * n {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                let pids: Vec<u16> = data[..2 * n].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
                drop(ns);
                match self.with_fdp(|f, _, _| pids.iter().all(|&p| f.decode(p).is_some())) {
                    None => return Outcome::err(Status::INVALID_OPCODE),
                    Some(false) => return Outcome::err(Status::INVALID_PLACEMENT_HANDLE),
                    Some(true) => {}
                }
                let mut ns = self.ns();
                let Ns::Block(d) = &mut *ns else { return Outcome::err(Status::INVALID_OPCODE) };
                done(d.ruh_update(&pids).map_err(|_| Status::INTERNAL_ERROR))
            }
            io::ZONE_APPEND | io::ZONE_MGMT_SEND | io::ZONE_MGMT_RECV if !zoned => Outcome::err(Status::INVALID_OPCODE),
            io::ZONE_APPEND => {
                let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
                let zslba = sqe.qw(40);
                let nlb = (sqe.dw(12) & 0xFFFF) as u64 + 1;
                if zslba >= self.nsze {
                    return Outcome::err(Status::LBA_OUT_OF_RANGE);
                }
                if data.len() as u64 != nlb << self.lba_shift {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                let fua = sqe.dw(12) & (1 << 30) != 0;
                match z.zone_append(zslba, data, fua) {
                    Ok((lba, t)) => {
                        drop(ns);
                        self.count(|c| {
                            c.writes += 1;
                            c.write_bytes += data.len() as u64
                        });
                        Outcome { dw0: lba as u32, dw1: (lba >> 32) as u32, done_ns: Some(t), ..Outcome::ok() }
                    }
                    Err(e) => Outcome::err(backend_status(&e)),
                }
            }
            io::ZONE_MGMT_SEND => {
                let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
                let slba = sqe.qw(40);
                let all = sqe.dw(13) & (1 << 8) != 0;
                let action = match sqe.dw(13) as u8 {
                    1 => ZoneAction::Close,
                    2 => ZoneAction::Finish,
                    3 => ZoneAction::Open,
                    4 => ZoneAction::Reset,
                    5 => ZoneAction::Offline,
                    _ => return Outcome::err(Status::INVALID_FIELD),
                };
                if !all && slba >= self.nsze {
                    return Outcome::err(Status::LBA_OUT_OF_RANGE);
                }
                done(z.zone_action(if all { 0 } else { slba }, action, all).map_err(|e| backend_status(&e)))
            }
            io::ZONE_MGMT_RECV => {
                let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
                let slba = sqe.qw(40);
                let len = ((sqe.dw(12) as u64 + 1) * 4).min(MAX_TRANSFER as u64) as usize;
                let zra = sqe.dw(13) as u8;
                let filter = match (sqe.dw(13) >> 8) as u8 {
                    0 => None,
                    1 => Some(ZoneState::Empty),
                    2 => Some(ZoneState::ImplicitlyOpen),
                    3 => Some(ZoneState::ExplicitlyOpen),
                    4 => Some(ZoneState::Closed),
                    5 => Some(ZoneState::Full),
                    6 => Some(ZoneState::ReadOnly),
                    7 => Some(ZoneState::Offline),
                    _ => return Outcome::err(Status::INVALID_FIELD),
                };
                let partial = sqe.dw(13) & (1 << 16) != 0;
                // Zone descriptor extensions are 0 bytes: the extended report is the report.
                if zra > 1 || len < 64 {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                if slba >= self.nsze {
                    return Outcome::err(Status::LBA_OUT_OF_RANGE);
                }
                let fit = (len - 64) / 64;
                let zs = match z.device().zns().expect("zoned").report(slba, filter, usize::MAX) {
                    Ok(v) => v,
                    Err(e) => return Outcome::err(status_of(&e)),
                };
                let mut b = vec![0u8; len];
                let n = zs.len().min(fit);
                put64(&mut b, 0, if partial { n as u64 } else { zs.len() as u64 });
                for (i, d) in zs.iter().take(n).enumerate() {
                    let e = &mut b[64 + 64 * i..128 + 64 * i];
                    e[0] = d.zone_type.code();
                    e[1] = d.state.code() << 4;
                    put64(e, 8, d.zcap);
                    put64(e, 16, d.zslba);
                    put64(e, 24, d.wp);
                }
                Outcome::data(b)
            }
            _ => Outcome::err(Status::INVALID_OPCODE),
        }
    }

    /// metrics.json: the device's report, the target's counters under `nvme`.
    pub fn metrics(&self) -> Value {
        let mut m = self.ns().metrics();
        let c = self.counters.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
