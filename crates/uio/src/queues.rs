//! Both ends of the queue interface over shared memory.
//!
//! - [`Controller`]: the device side. It reads the admin queue's place from the BAR (AQA, ASQ,
//!   ACQ), then arbitrates round robin over its submission queues, taking at most `burst`
//!   commands from one before moving to the next (the document: one priority level, polling
//!   with a burst limit), runs admin commands itself (create/delete I/O SQ and CQ, with a CQ
//!   required before an SQ that posts to it) and I/O commands (put/get) on a [`Store`], checks
//!   each I/O queue's permissions, and posts 16-byte completions with phase tags, never
//!   overrunning a CQ the host has not consumed (its head doorbell).
//! - [`Host`]: the driver side. It lays out queues and buffers in the host memory region,
//!   writes commands and rings tail doorbells, reaps completions by phase tag and rings head
//!   doorbells.
//!
//! Addresses in commands (adr1, adr2, queue bases) are offsets in the host memory region, the
//! way a device sees bus addresses of host memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::layout::{admin, bar, io, queue_fields, Command, Completion, Status, CQE_BYTES, SQE_BYTES};
use crate::shm::Region;

/// Largest key and value a put or get may carry.
pub const KEY_MAX_BYTES: u64 = 1 << 16;
pub const VALUE_MAX_BYTES: u64 = 1 << 24;

/// Queue ids: 0 is the admin pair; I/O queues take 1..MAX_QUEUES.
pub const MAX_QUEUES: u16 = 64;
pub const MAX_QUEUE_ENTRIES: u32 = 4096;

/// What an I/O submission queue may do (cdw12 of create-SQ: bit 0 denies put, bit 1 denies get;
/// 0 allows both). The document requires a per-queue permission check without giving its form;
/// this one is ssdlab's (assumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perm {
    pub deny_put: bool,
    pub deny_get: bool,
}

impl Perm {
    pub fn bits(self) -> u32 {
        self.deny_put as u32 | (self.deny_get as u32) << 1
    }
    pub fn from_bits(b: u32) -> Perm {
        Perm { deny_put: b & 1 != 0, deny_get: b & 2 != 0 }
    }
}

/// Where put and get land: the UTL on flash, a remote device over NET, or a map in tests.
pub trait Store {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status>;
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status>;
    /// A put whose host named the device that holds the key (`dest`, from cdw13: device id +
    /// 1, 0 for none; the traditional path, where hosts route in software). By default the
    /// name is ignored.
    fn put_to(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), Status> {
        let _ = dest;
        self.put(key, value)
    }
    /// A get whose host named the device that holds the key (see [`Store::put_to`]).
    fn get_from(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        let _ = dest;
        self.get(key)
    }
    /// The simulated latency (ns) of the last put or get as this store accounts it (0: it
    /// models no time); the controller puts it in the command's completion.
    fn sim_ns(&self) -> u64 {
        0
    }
    /// Start a put or get for the controller: finished at once (Some), or later (None: it is
    /// handed to [`Store::finished`] under `tag`, as a remote one is when its answer comes), so
    /// the controller takes further commands meanwhile. By default it runs to its end here.
    fn start(&mut self, tag: u64, dest: Option<u16>, op: Op<'_>) -> Option<Finished> {
        let result = match op {
            Op::Put { key, value } => self.put_to(dest, key, value).map(|()| None),
            Op::Get { key } => self.get_from(dest, key),
        };
        Some(Finished { tag, result, sim_ns: self.sim_ns() })
    }
    /// Append the operations started earlier that have finished since the last call.
    fn finished(&mut self, _out: &mut Vec<Finished>) {}
}

/// A put or get as the controller hands it to [`Store::start`].
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Get { key: &'a [u8] },
}

/// A put or get that has finished: its tag (from [`Store::start`]), its result (a get's value,
/// None when the key is not there; None for a put) and its simulated latency in ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub tag: u64,
    pub result: Result<Option<Vec<u8>>, Status>,
    pub sim_ns: u64,
}

/// A command the store finishes later: where its completion goes and its get buffer.
#[derive(Debug, Clone)]
struct Started {
    sq_id: u16,
    cqid: u16,
    cid: u16,
    opcode: u8,
    buf: (u64, u64),
}

#[derive(Debug, Clone)]
struct Sq {
    base: u64,
    entries: u32,
    head: u32,
    cqid: u16,
    perm: Perm,
}

#[derive(Debug, Clone)]
struct Cq {
    base: u64,
    entries: u32,
    tail: u32,
    phase: bool,
    /// SQs posting here.
    sqs: u32,
    /// Entries kept for commands started and not finished yet.
    reserved: u32,
}

/// The destination device a host named in cdw13 (device id + 1; 0: none).
fn dest_of(c: &Command) -> Option<u16> {
    c.cdw[3].checked_sub(1).map(|d| d as u16)
}

/// The device's side of the queues.
pub struct Controller<S: Store> {
    bar: Arc<Region>,
    mem: Arc<Region>,
    sqs: BTreeMap<u16, Sq>,
    cqs: BTreeMap<u16, Cq>,
    /// The SQ ids in order (kept beside `sqs`: polling reads it without allocating).
    ids: Vec<u16>,
    /// Round-robin position: the queue id served last.
    last: u16,
    burst: u32,
    pub store: S,
    pub processed: u64,
    /// Commands the store finishes later, by the tag they were started under.
    started: HashMap<u64, Started>,
    next_tag: u64,
    finished: Vec<Finished>,
}

impl<S: Store> Controller<S> {
    /// Enable the controller: the admin queues are where the BAR says.
    /// On failure the store comes back with the reason.
    pub fn enable(bar: Arc<Region>, mem: Arc<Region>, burst: u32, store: S) -> Result<Controller<S>, (String, S)> {
        assert!(burst > 0, "a burst of at least one command");
        let (asq_n, acq_n) = bar::aqa_fields(bar.load32(bar::AQA as u64));
        let (asq, acq) = (bar.load64(bar::ASQ as u64), bar.load64(bar::ACQ as u64));
        for (what, base, n, size) in [("ASQ", asq, asq_n, SQE_BYTES), ("ACQ", acq, acq_n, CQE_BYTES)] {
            if !mem.contains(base, n as u64 * size as u64) {
                return Err((format!("{what} at {base:#x} ({n} entries) is outside host memory ({} bytes)", mem.len()), store));
            }
        }
        let mut c = Controller {
            bar,
            mem,
            sqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            ids: vec![0],
            last: 0,
            burst,
            store,
            processed: 0,
            started: HashMap::new(),
            next_tag: 0,
            finished: Vec::new(),
        };
        c.cqs.insert(0, Cq { base: acq, entries: acq_n, tail: 0, phase: true, sqs: 1, reserved: 0 });
        c.sqs.insert(0, Sq { base: asq, entries: asq_n, head: 0, cqid: 0, perm: Perm::default() });
        Ok(c)
    }

    /// The store, once the host is gone.
    pub fn into_store(self) -> S {
        self.store
    }

    /// Serve the queues once round: from each non-empty SQ (in id order from after the last
    /// one served) at most `burst` commands. Returns the commands run.
    pub fn poll(&mut self) -> u32 {
        let mut done = self.complete_finished();
        let len = self.ids.len();
        if len == 0 {
            return done;
        }
        let start = self.ids.iter().position(|&q| q > self.last).unwrap_or(0);
        for k in 0..len {
            // An admin command may create or delete queues meanwhile: ids is re-read.
            let Some(&qid) = self.ids.get((start + k) % self.ids.len().max(1)) else { break };
            let mut n = 0;
            while n < self.burst && self.sqs.contains_key(&qid) && self.serve_one(qid) {
                n += 1;
            }
            if n > 0 {
                self.last = qid;
            }
            done += n;
        }
        done
    }

    /// Commands started earlier that the store has finished since: their completions.
    /// Returns how many.
    fn complete_finished(&mut self) -> u32 {
        if self.started.is_empty() {
            return 0;
        }
        let mut done = std::mem::take(&mut self.finished);
        self.store.finished(&mut done);
        let n = done.len() as u32;
        for f in done.drain(..) {
            let Some(s) = self.started.remove(&f.tag) else { continue };
            if let Some(cq) = self.cqs.get_mut(&s.cqid) {
                cq.reserved -= 1;
            }
            let (status, specific) = self.outcome(s.opcode, s.buf, f.result);
            let head = self.sqs.get(&s.sq_id).map_or(0, |q| q.head);
            let sim_ns = f.sim_ns.min(u32::MAX as u64) as u32;
            self.post(
                s.cqid,
                Completion { specific, sim_ns, sq_head: head as u16, sq_id: s.sq_id, cid: s.cid, phase: false, status: status as u16 },
            );
            self.processed += 1;
        }
        self.finished = done;
        n
    }

    /// Commands started and not finished yet (remote ones waiting for their answers).
    pub fn in_flight(&self) -> usize {
        self.started.len()
    }

    /// Run the command at `qid`'s head, if there is one and its CQ has room (an entry for it
    /// besides those kept for commands not finished yet).
    fn serve_one(&mut self, qid: u16) -> bool {
        let sq = &self.sqs[&qid];
        let tail = self.bar.load32(bar::sq_tail(qid) as u64);
        if tail >= sq.entries || tail == sq.head {
            return false; // empty (a tail past the end is ignored, as a bad doorbell write)
        }
        let cq = &self.cqs[&sq.cqid];
        let cq_head = self.bar.load32(bar::cq_head(sq.cqid) as u64) % cq.entries;
        let used = (cq.tail + cq.entries - cq_head) % cq.entries;
        if used + cq.reserved + 1 >= cq.entries {
            return false; // the CQ is full: wait for the host
        }
        let mut raw = [0u8; SQE_BYTES];
        self.mem.read(sq.base + sq.head as u64 * SQE_BYTES as u64, &mut raw);
        let cmd = Command::decode(&raw);
        let sq = self.sqs.get_mut(&qid).expect("queue");
        sq.head = (sq.head + 1) % sq.entries;
        let (head, cqid) = (sq.head, sq.cqid);
        let (status, specific, sim_ns) = if qid == 0 {
            let (st, sp) = self.admin(&cmd);
            (st, sp, 0)
        } else {
            match self.io(qid, &cmd) {
                Some(done) => done,
                None => {
                    // Finished later: its CQ entry is kept for it meanwhile.
                    self.cqs.get_mut(&cqid).expect("an SQ's CQ exists").reserved += 1;
                    return true;
                }
            }
        };
        self.post(
            cqid,
            Completion { specific, sim_ns, sq_head: head as u16, sq_id: qid, cid: cmd.cid, phase: false, status: status as u16 },
        );
        self.processed += 1;
        true
    }

    fn post(&mut self, cqid: u16, mut c: Completion) {
        let Some(cq) = self.cqs.get_mut(&cqid) else { return }; // deleted with this command
        c.phase = cq.phase;
        let b = c.encode();
        let at = cq.base + cq.tail as u64 * CQE_BYTES as u64;
        // Everything but the phase word first, then the word with the phase tag (release).
        self.mem.write(at, &b[..12]);
        self.mem.store32(at + 12, u32::from_le_bytes(b[12..16].try_into().unwrap()));
        cq.tail += 1;
        if cq.tail == cq.entries {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
    }

    fn admin(&mut self, c: &Command) -> (Status, u32) {
        let (qid, entries, cqid, _prio) = queue_fields(c);
        let bad_id = qid == 0 || qid >= MAX_QUEUES;
        let st = match c.opcode {
            admin::CREATE_CQ | admin::CREATE_SQ if bad_id || self.sqs.contains_key(&qid) && c.opcode == admin::CREATE_SQ => {
                Status::InvalidQueueIdentifier
            }
            admin::CREATE_CQ if self.cqs.contains_key(&qid) => Status::InvalidQueueIdentifier,
            admin::CREATE_CQ | admin::CREATE_SQ if !(2..=MAX_QUEUE_ENTRIES).contains(&entries) => Status::InvalidQueueSize,
            admin::CREATE_CQ | admin::CREATE_SQ
                if !self.mem.contains(c.adr2, entries as u64 * if c.opcode == admin::CREATE_SQ { SQE_BYTES } else { CQE_BYTES } as u64) =>
            {
                Status::DataTransferError
            }
            admin::CREATE_CQ => {
                self.cqs.insert(qid, Cq { base: c.adr2, entries, tail: 0, phase: true, sqs: 0, reserved: 0 });
                self.bar.store32(bar::cq_head(qid) as u64, 0);
                Status::Success
            }
            // The CQ must exist first (and not be the admin CQ).
            admin::CREATE_SQ => match self.cqs.get_mut(&cqid) {
                Some(cq) if cqid != 0 => {
                    cq.sqs += 1;
                    let perm = Perm::from_bits(c.cdw[2]);
                    self.sqs.insert(qid, Sq { base: c.adr2, entries, head: 0, cqid, perm });
                    self.ids = self.sqs.keys().copied().collect();
                    self.bar.store32(bar::sq_tail(qid) as u64, 0);
                    Status::Success
                }
                _ => Status::CompletionQueueInvalid,
            },
            admin::DELETE_SQ => match self.sqs.remove(&qid).filter(|_| !bad_id) {
                None => Status::InvalidQueueIdentifier,
                Some(sq) => {
                    self.ids = self.sqs.keys().copied().collect();
                    self.cqs.get_mut(&sq.cqid).expect("an SQ's CQ exists").sqs -= 1;
                    Status::Success
                }
            },
            admin::DELETE_CQ => match self.cqs.get(&qid) {
                None => Status::InvalidQueueIdentifier,
                Some(_) if bad_id => Status::InvalidQueueIdentifier,
                Some(cq) if cq.sqs > 0 => Status::InvalidQueueDeletion,
                Some(_) => {
                    self.cqs.remove(&qid);
                    Status::Success
                }
            },
            _ => Status::InvalidOpcode,
        };
        (st, 0)
    }

    /// (status, command-specific word, simulated latency in ns saturated to 32 bits); None
    /// when the store finishes the command later (see [`Store::start`]).
    fn io(&mut self, qid: u16, c: &Command) -> Option<(Status, u32, u32)> {
        let perm = self.sqs[&qid].perm;
        let refused = |st: Status| Some((st, 0, 0));
        if c.nsid != 0 {
            return refused(Status::InvalidNamespace);
        }
        match c.opcode {
            io::PUT | io::GET if c.len1 == 0 || c.len1 > KEY_MAX_BYTES || !self.mem.contains(c.adr1, c.len1) => {
                refused(Status::InvalidField)
            }
            io::PUT if perm.deny_put => refused(Status::AccessDenied),
            io::GET if perm.deny_get => refused(Status::AccessDenied),
            io::PUT if c.len2 > VALUE_MAX_BYTES || !self.mem.contains(c.adr2, c.len2) => refused(Status::InvalidField),
            io::GET if !self.mem.contains(c.adr2, c.len2) => refused(Status::DataTransferError),
            io::PUT | io::GET => {
                let mut key = vec![0u8; c.len1 as usize];
                self.mem.read(c.adr1, &mut key);
                let mut value = vec![];
                if c.opcode == io::PUT {
                    value = vec![0u8; c.len2 as usize];
                    self.mem.read(c.adr2, &mut value);
                }
                let op = if c.opcode == io::PUT { Op::Put { key: &key, value: &value } } else { Op::Get { key: &key } };
                let tag = self.next_tag;
                self.next_tag += 1;
                let buf = (c.adr2, c.len2);
                match self.store.start(tag, dest_of(c), op) {
                    Some(f) => {
                        let (st, specific) = self.outcome(c.opcode, buf, f.result);
                        Some((st, specific, f.sim_ns.min(u32::MAX as u64) as u32))
                    }
                    None => {
                        let cqid = self.sqs[&qid].cqid;
                        self.started.insert(tag, Started { sq_id: qid, cqid, cid: c.cid, opcode: c.opcode, buf });
                        None
                    }
                }
            }
            _ => refused(Status::InvalidOpcode),
        }
    }

    /// A finished put or get's status and command-specific word; a get's value goes into the
    /// host's buffer `buf` (address, length).
    fn outcome(&self, opcode: u8, buf: (u64, u64), result: Result<Option<Vec<u8>>, Status>) -> (Status, u32) {
        match (opcode, result) {
            (_, Err(s)) => (s, 0),
            (io::GET, Ok(None)) => (Status::KeyNotFound, 0),
            // The value's length in the command-specific word (also when it does not fit).
            (io::GET, Ok(Some(v))) if v.len() as u64 > buf.1 => (Status::BufferTooSmall, v.len() as u32),
            (io::GET, Ok(Some(v))) => {
                self.mem.write(buf.0, &v);
                (Status::Success, v.len() as u32)
            }
            (_, Ok(_)) => (Status::Success, 0),
        }
    }
}

/// The host's side of one queue pair.
#[derive(Debug, Clone)]
struct HostSq {
    base: u64,
    entries: u32,
    tail: u32,
    /// The device's head as its last completion for this queue reported it.
    head: u32,
    cqid: u16,
}

#[derive(Debug, Clone)]
struct HostCq {
    base: u64,
    entries: u32,
    head: u32,
    phase: bool,
}

/// The driver: queues and buffers laid out in host memory from `next_free` on.
pub struct Host {
    pub bar: Arc<Region>,
    pub mem: Arc<Region>,
    sqs: BTreeMap<u16, HostSq>,
    cqs: BTreeMap<u16, HostCq>,
    next_free: u64,
    next_cid: u16,
}

impl Host {
    /// Lay out the admin queues (`admin_entries` each) and program AQA, ASQ and ACQ.
    pub fn new(bar: Arc<Region>, mem: Arc<Region>, admin_entries: u16) -> Host {
        let mut h = Host { bar, mem, sqs: BTreeMap::new(), cqs: BTreeMap::new(), next_free: 0, next_cid: 0 };
        let asq = h.alloc(admin_entries as u64 * SQE_BYTES as u64);
        let acq = h.alloc(admin_entries as u64 * CQE_BYTES as u64);
        h.bar.store32(bar::AQA as u64, bar::aqa(admin_entries, admin_entries));
        h.bar.store64(bar::ASQ as u64, asq);
        h.bar.store64(bar::ACQ as u64, acq);
        h.sqs.insert(0, HostSq { base: asq, entries: admin_entries as u32, tail: 0, head: 0, cqid: 0 });
        h.cqs.insert(0, HostCq { base: acq, entries: admin_entries as u32, head: 0, phase: true });
        h
    }

    /// `len` bytes of host memory, 64-byte aligned (queues, keys, values, get buffers).
    pub fn alloc(&mut self, len: u64) -> u64 {
        let at = self.next_free.next_multiple_of(64);
        assert!(self.mem.contains(at, len), "host memory exhausted: {len} bytes at {at:#x}");
        self.next_free = at + len;
        at
    }

    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Write `cmd` at `qid`'s tail and ring its doorbell. Err if the queue is full.
    pub fn submit(&mut self, qid: u16, cmd: &Command) -> Result<(), String> {
        let sq = self.sqs.get_mut(&qid).ok_or_else(|| format!("no submission queue {qid}"))?;
        let next = (sq.tail + 1) % sq.entries;
        if next == sq.head {
            return Err(format!("submission queue {qid} is full ({} entries): reap completions first", sq.entries));
        }
        let at = sq.base + sq.tail as u64 * SQE_BYTES as u64;
        self.mem.write(at, &cmd.encode());
        sq.tail = next;
        self.bar.store32(bar::sq_tail(qid) as u64, next);
        Ok(())
    }

    /// The next completion on `cqid`, if the device has posted one (phase tag), and ring the
    /// CQ head doorbell for it.
    pub fn reap(&mut self, cqid: u16) -> Option<Completion> {
        let cq = self.cqs.get_mut(&cqid)?;
        let at = cq.base + cq.head as u64 * CQE_BYTES as u64;
        let dw3 = self.mem.load32(at + 12);
        if (dw3 >> 16 & 1 == 1) != cq.phase {
            return None;
        }
        let mut b = [0u8; CQE_BYTES];
        self.mem.read(at, &mut b[..12]);
        b[12..].copy_from_slice(&dw3.to_le_bytes());
        cq.head += 1;
        if cq.head == cq.entries {
            cq.head = 0;
            cq.phase = !cq.phase;
        }
        self.bar.store32(bar::cq_head(cqid) as u64, cq.head);
        let c = Completion::decode(&b);
        if let Some(sq) = self.sqs.get_mut(&c.sq_id) {
            sq.head = c.sq_head as u32 % sq.entries;
        }
        Some(c)
    }

    /// Record an I/O queue pair the admin commands created, for submit and reap.
    pub fn add_queues(&mut self, sqid: u16, sq: (u64, u32), cqid: u16, cq: (u64, u32)) {
        self.cqs.entry(cqid).or_insert(HostCq { base: cq.0, entries: cq.1, head: 0, phase: true });
        self.sqs.insert(sqid, HostSq { base: sq.0, entries: sq.1, tail: 0, head: 0, cqid });
    }

    /// Run admin command `cmd`: submit it, call `device` (the device's poll, or a pause when it
    /// runs elsewhere) until its completion arrives, and return the completion.
    /// `device` returns false to give up (the device does not answer).
    pub fn admin(&mut self, cmd: &Command, mut device: impl FnMut() -> bool) -> Result<Completion, String> {
        self.submit(0, cmd)?;
        loop {
            let go_on = device();
            if let Some(c) = self.reap(0) {
                return Ok(c);
            }
            if !go_on {
                return Err("the device did not answer the admin command".into());
            }
        }
    }

    /// Create I/O CQ `cqid` and SQ `sqid` posting to it, `entries` entries each, with the SQ's
    /// permissions, through the admin queue (see [`Host::admin`] for `device`). Err: the
    /// status the device answered.
    pub fn create_io_pair(
        &mut self,
        sqid: u16,
        cqid: u16,
        entries: u16,
        perm: Perm,
        mut device: impl FnMut() -> bool,
    ) -> Result<(), Status> {
        let cq = self.alloc(entries as u64 * CQE_BYTES as u64);
        let sq = self.alloc(entries as u64 * SQE_BYTES as u64);
        let status = |c: Completion| Status::from_bits(c.status).unwrap_or(Status::InternalError);
        let cid = self.cid();
        let c = self.admin(&Command::create_cq(cid, cqid, entries, cq), &mut device).map_err(|_| Status::InternalError)?;
        if c.status != 0 {
            return Err(status(c));
        }
        let mut cmd = Command::create_sq(self.cid(), sqid, entries, sq, cqid, 0);
        cmd.cdw[2] = perm.bits();
        let c = self.admin(&cmd, &mut device).map_err(|_| Status::InternalError)?;
        if c.status != 0 {
            return Err(status(c));
        }
        self.add_queues(sqid, (sq, entries as u32), cqid, (cq, entries as u32));
        Ok(())
    }

    pub fn cq_of(&self, sqid: u16) -> Option<u16> {
        self.sqs.get(&sqid).map(|s| s.cqid)
    }
}
