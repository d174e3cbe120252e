//! The host library: attach to a device process (see [`crate::device`]) and run put and get
//! commands through one I/O queue pair, up to [`HOST_QUEUE_DEPTH`] of them in flight, each
//! with its own key and value buffers in host memory; completions are reaped by command id
//! in whatever order the device posts them. The one-command calls ([`HostDevice::put`],
//! [`HostDevice::get`]) submit and wait. Also: a traditional host's daemon and client.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sendfd::SendWithFd;
use ssdlab_netrules::lock_store;

use crate::cluster::{Gme, Links, Path as DataPath};
use crate::device::{until_signal, ATTACH_BYTES};
use crate::layout::{bar, Command, Completion, Status};
use crate::net;
use crate::queues::{Host, Perm, Store, KEY_MAX_BYTES};
use crate::shm::Region;

/// Largest value the host library moves (the queues allow more; a UTL record must fit one
/// flash block, 256 KiB on the case study's devices).
pub const HOST_VALUE_BYTES: u64 = 16 << 20;
/// Commands a host keeps in flight at most, each with its own buffers (a slot).
pub const HOST_QUEUE_DEPTH: usize = 32;
/// A slot's value buffer. A larger value (up to [`HOST_VALUE_BYTES`]) goes through the one
/// large buffer, one command at a time; a get whose value does not fit its slot is run again
/// there.
pub const SLOT_VALUE_BYTES: u64 = 256 << 10;
const SLOT_BYTES: u64 = KEY_MAX_BYTES + SLOT_VALUE_BYTES;
/// Bytes of host memory the host library maps: queues, the slots, the large buffer.
pub const HOST_MEMORY_BYTES: usize = (1 << 20) + HOST_QUEUE_DEPTH * SLOT_BYTES as usize + (KEY_MAX_BYTES + HOST_VALUE_BYTES) as usize;
const IO_ENTRIES: u16 = 64;

/// A put or get for [`HostDevice::submit`]. `dest` names the device that holds the key (the
/// traditional path's host routing, cdw13); None for UIO, whose devices route by GME.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    Put { dest: Option<u16>, key: &'a [u8], value: &'a [u8] },
    Get { dest: Option<u16>, key: &'a [u8] },
}

impl Request<'_> {
    fn key(&self) -> &[u8] {
        match self {
            Request::Put { key, .. } | Request::Get { key, .. } => key,
        }
    }
    fn value_len(&self) -> u64 {
        match self {
            Request::Put { value, .. } => value.len() as u64,
            Request::Get { .. } => 0,
        }
    }
}

/// A command's answer: a put stored, or a get's value (None: the key is not there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Stored,
    Value(Option<Vec<u8>>),
}

/// Where a command's key and value lie in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buf {
    Slot(usize),
    Large,
}

/// A command submitted and not yet handed back.
#[derive(Debug, Clone)]
struct Pending {
    buf: Buf,
    get: bool,
    dest: Option<u16>,
    key_len: usize,
    /// Its wait gave up: its buffers stay taken until the device posts its completion.
    abandoned: bool,
}

/// The host side: attach to a device process and run put/get commands, several in flight.
pub struct HostDevice {
    host: Host,
    sock: UnixStream,
    mem: Arc<Region>,
    slots: Vec<u64>,
    free: Vec<usize>,
    large_at: u64,
    large_busy: bool,
    pending: HashMap<u16, Pending>,
    /// Completions reaped before their command's wait asked for them.
    done: HashMap<u16, Completion>,
    timeout: Duration,
    pub puts: u64,
    pub gets: u64,
    /// The last command's simulated latency, from its completion (0: the device models none).
    pub last_sim_ns: u64,
    /// The legs a traditional daemon removes from its commands' simulated latency, so what it
    /// answers a relaying device is the UTL's time alone (see [`Store::sim_ns`] below).
    pub links: Links,
    last_utl_ns: u64,
}

impl HostDevice {
    /// Attach to the device listening on `socket`; `timeout` bounds every command's wait.
    pub fn attach(socket: &Path, timeout: Duration) -> io::Result<HostDevice> {
        let bar_r = Arc::new(Region::new("uio-bar", bar::bytes(4))?);
        let mem = Arc::new(Region::new("uio-host", HOST_MEMORY_BYTES)?);
        let mut host = Host::new(bar_r.clone(), mem.clone(), 16);
        let mut sock = UnixStream::connect(socket).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", socket.display())))?;
        let mut hdr = [0u8; ATTACH_BYTES];
        hdr[..8].copy_from_slice(&(bar_r.len() as u64).to_le_bytes());
        hdr[8..].copy_from_slice(&(mem.len() as u64).to_le_bytes());
        sock.send_with_fd(&hdr, &[bar_r.fd().as_raw_fd(), mem.fd().as_raw_fd()])?;
        sock.set_read_timeout(Some(timeout))?;
        let mut ack = [0u8; 1];
        sock.read_exact(&mut ack)?;
        if ack[0] != 1 {
            return Err(io::Error::new(io::ErrorKind::ConnectionRefused, "the device refused the attach (see its log)"));
        }
        let deadline = Instant::now() + timeout;
        host.create_io_pair(1, 1, IO_ENTRIES, Perm::default(), || backoff(deadline))
            .map_err(|s| io::Error::other(format!("creating the I/O queues: status {s:?}")))?;
        let slots: Vec<u64> = (0..HOST_QUEUE_DEPTH).map(|_| host.alloc(SLOT_BYTES)).collect();
        let large_at = host.alloc(KEY_MAX_BYTES + HOST_VALUE_BYTES);
        Ok(HostDevice {
            host,
            sock,
            mem,
            free: (0..slots.len()).rev().collect(),
            slots,
            large_at,
            large_busy: false,
            pending: HashMap::new(),
            done: HashMap::new(),
            timeout,
            puts: 0,
            gets: 0,
            last_sim_ns: 0,
            links: Links::default(),
            last_utl_ns: 0,
        })
    }

    /// Commands in flight at most.
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Commands submitted and not yet handed back by [`HostDevice::wait`].
    pub fn in_flight(&self) -> usize {
        self.pending.values().filter(|p| !p.abandoned).count()
    }

    fn check_sizes(key: &[u8], value_len: u64) -> Result<(), String> {
        if key.is_empty() || key.len() as u64 > KEY_MAX_BYTES || value_len > HOST_VALUE_BYTES {
            return Err(format!(
                "key of {} bytes (1 to {KEY_MAX_BYTES}), value of {value_len} bytes (at most {HOST_VALUE_BYTES})",
                key.len()
            ));
        }
        Ok(())
    }

    /// The key's and value's addresses of buffer `b`.
    fn addrs(&self, b: Buf) -> (u64, u64) {
        let at = match b {
            Buf::Slot(i) => self.slots[i],
            Buf::Large => self.large_at,
        };
        (at, at + KEY_MAX_BYTES)
    }

    fn release(&mut self, b: Buf) {
        match b {
            Buf::Slot(i) => self.free.push(i),
            Buf::Large => self.large_busy = false,
        }
    }

    /// Submit `req` without waiting for it; returns its command id, for [`HostDevice::wait`].
    /// Err: bad sizes, or no room (as many commands in flight as the depth: wait for one).
    pub fn submit(&mut self, req: Request<'_>) -> Result<u16, String> {
        self.try_submit(req, false)?.ok_or_else(|| format!("{} commands in flight: wait for one first", self.in_flight()))
    }

    /// [`HostDevice::submit`]; Ok(None) when there is no room. `large`: in the large buffer.
    fn try_submit(&mut self, req: Request<'_>, large: bool) -> Result<Option<u16>, String> {
        let key = req.key();
        Self::check_sizes(key, req.value_len())?;
        let buf = if large || req.value_len() > SLOT_VALUE_BYTES {
            if self.large_busy {
                return Ok(None);
            }
            Buf::Large
        } else {
            match self.free.last() {
                Some(&i) => Buf::Slot(i),
                None => return Ok(None),
            }
        };
        let (key_at, val_at) = self.addrs(buf);
        let room = if buf == Buf::Large { HOST_VALUE_BYTES } else { SLOT_VALUE_BYTES };
        self.mem.write(key_at, key);
        let (cmd, dest, get) = match req {
            Request::Put { dest, value, .. } => {
                self.mem.write(val_at, value);
                (Command::put(0, (key_at, key.len() as u64), (val_at, value.len() as u64)), dest, false)
            }
            Request::Get { dest, .. } => (Command::get(0, (key_at, key.len() as u64), (val_at, room)), dest, true),
        };
        let cid = self.next_cid();
        let mut cmd = routed(cmd, dest);
        cmd.cid = cid;
        self.host.submit(1, &cmd)?;
        match buf {
            Buf::Slot(_) => drop(self.free.pop()),
            Buf::Large => self.large_busy = true,
        }
        self.pending.insert(cid, Pending { buf, get, dest, key_len: key.len(), abandoned: false });
        Ok(Some(cid))
    }

    /// A command id no command in flight has.
    fn next_cid(&mut self) -> u16 {
        loop {
            let c = self.host.cid();
            if !self.pending.contains_key(&c) && !self.done.contains_key(&c) {
                return c;
            }
        }
    }

    /// Take one completion off the CQ, if there is one: kept for its wait, or dropped with its
    /// buffers freed if its wait gave up.
    fn reap_one(&mut self) -> bool {
        let Some(c) = self.host.reap(1) else { return false };
        match self.pending.get(&c.cid) {
            Some(p) if p.abandoned => {
                let b = p.buf;
                self.pending.remove(&c.cid);
                self.release(b);
            }
            Some(_) => {
                self.done.insert(c.cid, c);
            }
            None => {}
        }
        true
    }

    /// Reap until `ready` holds or the timeout passes (false).
    fn reap_until(&mut self, mut ready: impl FnMut(&Self) -> bool) -> bool {
        let deadline = Instant::now() + self.timeout;
        loop {
            if ready(self) {
                return true;
            }
            if self.reap_one() {
                continue;
            }
            if !backoff(deadline) {
                return ready(self);
            }
        }
    }

    /// Wait for command `cid`'s completion; hands back its answer. A get whose value is larger
    /// than its slot runs again in the large buffer.
    pub fn wait(&mut self, cid: u16) -> Result<Reply, String> {
        let (c, p, v) = self.wait_raw(cid)?;
        match (p.get, Status::from_bits(c.status)) {
            (false, Some(Status::Success)) => Ok(Reply::Stored),
            (false, _) => Err(format!("put failed: {}", status_text(c.status))),
            (true, Some(Status::Success)) => Ok(Reply::Value(v)),
            (true, Some(Status::KeyNotFound)) => Ok(Reply::Value(None)),
            (true, _) => Err(format!("get failed: {}", status_text(c.status))),
        }
    }

    /// [`HostDevice::wait`] with the completion, the command and a get's value as they are.
    fn wait_raw(&mut self, cid: u16) -> Result<(Completion, Pending, Option<Vec<u8>>), String> {
        if self.pending.get(&cid).is_none_or(|p| p.abandoned) {
            return Err(format!("no command {cid} in flight"));
        }
        if !self.reap_until(|h| h.done.contains_key(&cid)) {
            self.pending.get_mut(&cid).expect("in flight").abandoned = true;
            return Err(format!("the device did not answer within {:?}", self.timeout));
        }
        let c = self.done.remove(&cid).expect("reaped");
        let p = self.pending.remove(&cid).expect("in flight");
        let (key_at, val_at) = self.addrs(p.buf);
        let status = Status::from_bits(c.status);
        if p.get && status == Some(Status::BufferTooSmall) && p.buf != Buf::Large && c.specific as u64 <= HOST_VALUE_BYTES {
            // The key is still in its slot: the get again, in the large buffer.
            let mut key = vec![0u8; p.key_len];
            self.mem.read(key_at, &mut key);
            self.release(p.buf);
            let req = Request::Get { dest: p.dest, key: &key };
            if !self.reap_until(|h| !h.large_busy) {
                return Err(format!("the device did not answer within {:?}", self.timeout));
            }
            let cid = self.try_submit(req, true)?.expect("the large buffer is free");
            return self.wait_raw(cid);
        }
        let v = (p.get && status == Some(Status::Success)).then(|| {
            let mut v = vec![0u8; c.specific as usize];
            self.mem.read(val_at, &mut v);
            v
        });
        self.release(p.buf);
        if p.get {
            self.gets += 1;
        } else {
            self.puts += 1;
        }
        self.last_sim_ns = c.sim_ns as u64;
        Ok((c, p, v))
    }

    /// Run `reqs`, keeping up to the depth of them in flight; their answers in their order.
    /// Commands on one key take effect in their order (the device runs a queue's local
    /// commands in order, and a peer's in the order they were sent); [`HostDevice::last_sim_ns`]
    /// is then the last one's.
    pub fn run_batch(&mut self, reqs: &[Request<'_>]) -> Vec<Result<Reply, String>> {
        let mut out: Vec<Option<Result<Reply, String>>> = vec![None; reqs.len()];
        let mut order: VecDeque<(usize, u16)> = VecDeque::new();
        for (i, &req) in reqs.iter().enumerate() {
            out[i] = loop {
                match self.try_submit(req, false) {
                    Err(e) => break Some(Err(e)),
                    Ok(Some(cid)) => {
                        order.push_back((i, cid));
                        break None;
                    }
                    // No room: the oldest command's answer first (or, with none of this
                    // batch's in flight, room from commands whose waits gave up).
                    Ok(None) => match order.pop_front() {
                        Some((j, c)) => out[j] = Some(self.wait(c)),
                        None => {
                            let large = req.value_len() > SLOT_VALUE_BYTES;
                            if !self.reap_until(|h| if large { !h.large_busy } else { !h.free.is_empty() }) {
                                break Some(Err(format!("the device did not answer within {:?}", self.timeout)));
                            }
                        }
                    },
                }
            };
        }
        for (j, c) in order {
            out[j] = Some(self.wait(c));
        }
        out.into_iter().map(|r| r.expect("every request answered")).collect()
    }

    /// Submit one command and wait for it.
    fn run_one(&mut self, req: Request<'_>) -> Result<Reply, String> {
        let cid = match self.try_submit(req, false)? {
            Some(c) => c,
            None => {
                let large = req.value_len() > SLOT_VALUE_BYTES;
                if !self.reap_until(|h| if large { !h.large_busy } else { !h.free.is_empty() }) {
                    return Err(format!("the device did not answer within {:?}", self.timeout));
                }
                self.try_submit(req, false)?.ok_or("no room in the queue")?
            }
        };
        self.wait(cid)
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.put_routed(None, key, value)
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.get_routed(None, key)
    }

    /// A put naming the device that holds the key (a traditional device forwards it there).
    pub fn put_routed(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.run_one(Request::Put { dest, key, value }).map(|_| ())
    }

    /// A get naming the device that holds the key (see [`HostDevice::put_routed`]).
    pub fn get_routed(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self.run_one(Request::Get { dest, key })? {
            Reply::Value(v) => Ok(v),
            Reply::Stored => unreachable!("a get's reply is a value"),
        }
    }

    fn status_of(c: &Completion) -> Status {
        Status::from_bits(c.status).unwrap_or(Status::InternalError)
    }

    /// Whether the device process still holds the attach socket open.
    pub fn connected(&mut self) -> bool {
        self.sock.set_nonblocking(true).is_ok()
            && !matches!(self.sock.read(&mut [0u8; 1]), Ok(0))
            && self.sock.set_nonblocking(false).is_ok()
    }
}

/// cdw13 of a command naming device `dest` (the traditional path's host routing).
fn routed(mut c: Command, dest: Option<u16>) -> Command {
    c.cdw[3] = dest.map_or(0, |d| d as u32 + 1);
    c
}

fn status_text(bits: u16) -> String {
    match Status::from_bits(bits) {
        Some(Status::TransientTransport) => format!("device status {bits:#x} (the key's device is unreachable)"),
        Some(s) => format!("device status {bits:#x} ({s:?})"),
        None => format!("device status {bits:#x}"),
    }
}

/// A host's device as a store: what a traditional host's daemon forwards remote requests to
/// (the device's status comes back as it is).
impl Store for HostDevice {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        Self::check_sizes(key, value.len() as u64).map_err(|_| Status::InvalidField)?;
        let cid = self.submit(Request::Put { dest: None, key, value }).map_err(|_| Status::InternalError)?;
        let (c, _, _) = self.wait_raw(cid).map_err(|_| Status::InternalError)?;
        // A local command on its (traditional) device: its legs are the relaying device's to add.
        let (before, after) = self.links.put_legs(DataPath::Traditional, false, key.len(), value.len());
        self.last_utl_ns = self.last_sim_ns.saturating_sub(before + after);
        match Self::status_of(&c) {
            Status::Success => Ok(()),
            st => Err(st),
        }
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        Self::check_sizes(key, 0).map_err(|_| Status::InvalidField)?;
        let cid = self.submit(Request::Get { dest: None, key }).map_err(|_| Status::InternalError)?;
        let (c, _, v) = self.wait_raw(cid).map_err(|_| Status::InternalError)?;
        let vlen = v.as_ref().map_or(0, Vec::len);
        let legs = self.links.get_legs_before(DataPath::Traditional, false, key.len())
            + self.links.get_legs_after(DataPath::Traditional, false, vlen);
        self.last_utl_ns = self.last_sim_ns.saturating_sub(legs);
        match Self::status_of(&c) {
            Status::Success => Ok(v),
            Status::KeyNotFound => Ok(None),
            st => Err(st),
        }
    }
    /// The UTL's time of the last command (its total less a local command's legs).
    fn sim_ns(&self) -> u64 {
        self.last_utl_ns
    }
}

/// A traditional host's daemon until SIGINT/SIGTERM (see [`host_daemon`]).
pub fn host_daemon_until_signal(attach: &Path, listen: SocketAddr, allow_remote: bool, ready: impl FnOnce(SocketAddr)) -> io::Result<u64> {
    until_signal(|stop| host_daemon(attach, listen, allow_remote, stop, ready))
}

/// A traditional host's daemon until `stop`: attached to its device (in traditional mode), it
/// takes the requests the device relays from its peers on `listen`, in this host's memory, and
/// submits them back to the device through its queues.
/// Returns the commands it forwarded.
pub fn host_daemon(
    attach: &Path,
    listen: SocketAddr,
    allow_remote: bool,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<u64> {
    let listener = net::bind(listen, allow_remote)?;
    let dev = Arc::new(Mutex::new(HostDevice::attach(attach, Duration::from_secs(10))?));
    let addr = listener.local_addr()?;
    let t = net::serve(listener, dev.clone(), stop.clone());
    ready(addr);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = t.join();
    let d = lock_store(&dev, "the host device");
    Ok(d.puts + d.gets)
}

/// The traditional path's client: the host routes each key in software (the same map GME
/// uses) and names the key's device in each command (cdw13); its device, in traditional mode,
/// stores local keys directly and sends the others over the network, where the key's device
/// hands them to its host's daemon (host memory) to be submitted back to it.
pub struct TraditionalHost {
    me: u16,
    gme: Gme,
    dev: HostDevice,
}

impl TraditionalHost {
    /// Host `me` of a system of `devices`, with its device `dev`.
    pub fn new(me: u16, devices: u16, dev: HostDevice) -> TraditionalHost {
        TraditionalHost { me, gme: Gme::uniform(devices, 1024), dev }
    }

    fn dest(&self, key: &[u8]) -> Option<u16> {
        Some(self.gme.route(key)).filter(|&d| d != self.me)
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let d = self.dest(key);
        self.dev.put_routed(d, key, value)
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let d = self.dest(key);
        self.dev.get_routed(d, key)
    }

    /// The last command's simulated latency (see [`HostDevice::last_sim_ns`]).
    pub fn last_sim_ns(&self) -> u64 {
        self.dev.last_sim_ns
    }
}

/// Wait a little for the device (spin, then yield); false once `deadline` has passed.
fn backoff(deadline: Instant) -> bool {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
    Instant::now() < deadline
}
