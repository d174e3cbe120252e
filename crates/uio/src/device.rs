//! A UIO device as its own process (the host library that attaches to it is [`crate::host`]).
//!
//! The device owns its UTL (on its own emulated flash), GME's map and NET (a TCP listener for
//! its peers' requests, connections to theirs). A host attaches over a Unix socket by passing
//! two memfds, the BAR and its memory (as a driver maps a PCIe BAR and hands the device DMA
//! addresses), with their sizes; the device maps both, enables a controller on them (the admin
//! queues from AQA/ASQ/ACQ) and polls its queues until the host goes away. Several hosts (a
//! host's applications, or a host's client and its daemon on the traditional path) may be
//! attached at once, each with its own queues; the device serves them in turn. Put and
//! get commands run the document's path: DMA (the key and value read from host memory), GME
//! (route by key hash), then the local UTL or a peer over NET; a get's value is written into
//! the host's buffer.
//!
//! Queue depth: the controller runs a local command to its end and hands a remote one to NET,
//! which sends it to the key's device at once and finishes it when the answer comes (in any
//! order); its completion is posted then, and the controller takes further commands meanwhile.
//!
//! Threads: the polling loop (commands from the hosts), one per peer connection served
//! (requests from other devices) and one per connection to a peer (reading its answers). The
//! UTL is shared under a lock, never held while a remote request waits. The loop spins while
//! commands come or a remote one is in flight; with several in flight and nothing else to do
//! it spins briefly, then parks until an answer wakes it (at most 0.1 ms, to look at the host
//! queues again); after about a tenth of a millisecond with neither, it sleeps 20 us at a
//! time, so idle devices leave the CPU to others.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use sendfd::RecvWithFd;
use serde::{Deserialize, Serialize};
use ssdlab_core::Config;
use ssdlab_netrules::lock_store;

pub use crate::host::{
    host_daemon, host_daemon_until_signal, HostDevice, Reply, Request, TraditionalHost, HOST_MEMORY_BYTES, HOST_QUEUE_DEPTH,
    HOST_VALUE_BYTES,
};

use crate::cluster::{Gme, Links, Path as DataPath};
use crate::layout::{bar, Status};
use crate::net::{self, Peers, OP_GET, OP_PUT};
use crate::queues::{Controller, Finished, Op, Store};
use crate::record::encode;
use crate::shm::Region;
use crate::utl::{Utl, UtlConfig};

/// What a device process has done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStats {
    pub hosts_attached: u64,
    pub local_puts: u64,
    pub local_gets: u64,
    pub remote_puts: u64,
    pub remote_gets: u64,
    /// Remote operations that failed because their peer was unreachable.
    pub remote_errors: u64,
}

/// A device's UTL with its simulated clock: each operation starts once the previous one has
/// finished on the flash (commands reach the UTL one at a time) plus the legs before it, and
/// takes the flash's time (none with NAND timing off). What NET serves peers from.
pub struct SimUtl {
    pub utl: Utl,
    clock_ns: u64,
    /// The last operation's time in the UTL.
    last_ns: u64,
}

impl SimUtl {
    pub fn new(utl: Utl) -> SimUtl {
        SimUtl { utl, clock_ns: 0, last_ns: 0 }
    }

    /// Put after `before` ns of legs; returns the UTL's time.
    fn put_after(&mut self, key: &[u8], value: &[u8], before: u64) -> Result<u64, Status> {
        let start = self.clock_ns + before;
        let done = self.utl.put(key, value, start).map_err(|_| Status::InternalError)?;
        self.clock_ns = done;
        self.last_ns = done - start;
        Ok(self.last_ns)
    }

    fn get_after(&mut self, key: &[u8], before: u64) -> Result<(Option<Vec<u8>>, u64), Status> {
        let start = self.clock_ns + before;
        let (v, done) = self.utl.get(key, start).map_err(|_| Status::InternalError)?;
        self.clock_ns = done;
        self.last_ns = done - start;
        Ok((v, self.last_ns))
    }
}

/// A peer's request reaches the UTL from NET (the legs around it are the requester's to add).
impl Store for SimUtl {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.put_after(key, value, 0).map(|_| ())
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.get_after(key, 0).map(|(v, _)| v)
    }
    fn sim_ns(&self) -> u64 {
        self.last_ns
    }
}

/// The device's modules behind its queues: GME, the UTL, NET.
pub struct DeviceStore {
    id: u16,
    /// The traditional path's device: no GME (the host names remote keys' devices; the rest
    /// is local), and peers' requests are relayed to this device's host.
    traditional: bool,
    gme: Gme,
    utl: Arc<Mutex<SimUtl>>,
    peers: Peers,
    links: Links,
    /// The polling loop's thread: a remote command's answer wakes it (see [`run`]).
    poller: std::thread::Thread,
    /// The last local command's simulated latency: its legs (`links`, the same formulas as
    /// [`crate::cluster`]) plus the UTL's time. A remote command's is computed when its answer
    /// comes, with the remote device's time (see [`DeviceStore::start_with`]).
    last_ns: u64,
    pub stats: DeviceStats,
}

impl DeviceStore {
    fn status(st: u16) -> Status {
        Status::from_bits(st).unwrap_or(Status::InternalError)
    }

    fn path(&self) -> DataPath {
        if self.traditional {
            DataPath::Traditional
        } else {
            DataPath::Uio
        }
    }

    fn local_put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.stats.local_puts += 1;
        let (before, after) = self.links.put_legs(self.path(), false, key.len(), value.len());
        let utl = lock_store(&self.utl, "the device's UTL").put_after(key, value, before)?;
        self.last_ns = before + utl + after;
        Ok(())
    }

    fn local_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.stats.local_gets += 1;
        let before = self.links.get_legs_before(self.path(), false, key.len());
        let (v, utl) = lock_store(&self.utl, "the device's UTL").get_after(key, before)?;
        self.last_ns = before + utl + self.links.get_legs_after(self.path(), false, v.as_ref().map_or(0, |v| v.len()));
        Ok(v)
    }

    /// Where a command goes: UIO routes by GME; the traditional device goes where the host
    /// said (here when it said nothing).
    fn target(&self, dest: Option<u16>, key: &[u8]) -> u16 {
        if self.traditional {
            dest.unwrap_or(self.id)
        } else {
            self.gme.route(key)
        }
    }

    /// Start a put or get: a local one runs to its end here (Some); a remote one is sent to
    /// its device over NET (None) and `done` gets it, finished, when the answer comes. Its
    /// simulated latency is its legs plus the time the remote device answers with (its UTL's;
    /// on the traditional path, the time of the command its host submitted back, legs
    /// excluded).
    fn start_with(&mut self, tag: u64, dest: Option<u16>, op: Op<'_>, done: &mpsc::Sender<Finished>) -> Option<Finished> {
        let key = match op {
            Op::Put { key, .. } | Op::Get { key } => key,
        };
        let to = self.target(dest, key);
        if to == self.id {
            let result = match op {
                Op::Put { key, value } => self.local_put(key, value).map(|()| None),
                Op::Get { key } => self.local_get(key),
            };
            return Some(Finished { tag, result, sim_ns: self.last_ns });
        }
        let (path, links, done, poller) = (self.path(), self.links, done.clone(), self.poller.clone());
        match op {
            Op::Put { key, value } => {
                self.stats.remote_puts += 1;
                let mut rec = Vec::with_capacity(16 + key.len() + value.len());
                encode(key, value, &mut rec);
                let (before, after) = links.put_legs(path, true, key.len(), value.len());
                let finish = move |a: net::Answer| {
                    let (result, service) = match a {
                        Ok((0, _, service)) => (Ok(None), service),
                        Ok((st, _, service)) => (Err(Self::status(st)), service),
                        Err(e) => (Err(e), 0),
                    };
                    let _ = done.send(Finished { tag, result, sim_ns: before + service + after });
                    poller.unpark();
                };
                self.peers.send(to, OP_PUT, &rec, Box::new(finish));
            }
            Op::Get { key } => {
                self.stats.remote_gets += 1;
                let before = links.get_legs_before(path, true, key.len());
                let finish = move |a: net::Answer| {
                    let (result, service) = match a {
                        Ok((0, v, service)) => (Ok(Some(v)), service),
                        Ok((st, _, service)) if st == Status::KeyNotFound as u16 => (Ok(None), service),
                        Ok((st, _, service)) => (Err(Self::status(st)), service),
                        Err(e) => (Err(e), 0),
                    };
                    let found = result.as_ref().map_or(0, |v| v.as_ref().map_or(0, Vec::len));
                    let sim_ns = before + service + links.get_legs_after(path, true, found);
                    let _ = done.send(Finished { tag, result, sim_ns });
                    poller.unpark();
                };
                self.peers.send(to, OP_GET, key, Box::new(finish));
            }
        }
        None
    }

    /// Run `op` to its end (a remote one waits for its answer).
    fn run_op(&mut self, dest: Option<u16>, op: Op<'_>) -> Result<Option<Vec<u8>>, Status> {
        let (tx, rx) = mpsc::channel();
        let f = match self.start_with(0, dest, op, &tx) {
            Some(f) => f,
            // NET finishes every request it took: answered, failed, or timed out.
            None => rx.recv().map_err(|_| Status::TransientTransport)?,
        };
        self.last_ns = f.sim_ns;
        f.result
    }

    /// What the device has done so far.
    fn stats(&self) -> DeviceStats {
        DeviceStats { remote_errors: self.peers.errors(), ..self.stats.clone() }
    }
}

impl Store for DeviceStore {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.put_to(None, key, value)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.get_from(None, key)
    }
    fn put_to(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.run_op(dest, Op::Put { key, value }).map(|_| ())
    }
    fn get_from(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.run_op(dest, Op::Get { key })
    }
    fn sim_ns(&self) -> u64 {
        self.last_ns
    }
}

/// The traditional device's NET side: a peer's request goes to this device's host (its
/// daemon at `relay`), which lands it in host memory and submits it back to the device.
struct Relay {
    daemon: Peers,
    rec: Vec<u8>,
    out: Vec<u8>,
    /// What the daemon answered last: its command's UTL time (the daemon removes the legs).
    service_ns: u64,
}

impl Relay {
    fn new(daemon: SocketAddr, timeout: Duration) -> Relay {
        // The daemon is peer 0 of a one-peer table (this end is "device 1").
        Relay { daemon: Peers::new(1, vec![daemon], timeout), rec: Vec::new(), out: Vec::new(), service_ns: 0 }
    }

    fn request(&mut self, op: u8, body: &[u8]) -> Result<u16, Status> {
        let (st, service) = self.daemon.request(0, op, body, &mut self.out)?;
        self.service_ns = service;
        Ok(st)
    }
}

impl Store for Relay {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        let mut rec = std::mem::take(&mut self.rec);
        rec.clear();
        encode(key, value, &mut rec);
        let r = self.request(OP_PUT, &rec);
        self.rec = rec;
        match r? {
            0 => Ok(()),
            st => Err(DeviceStore::status(st)),
        }
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        match self.request(OP_GET, key)? {
            0 => Ok(Some(std::mem::take(&mut self.out))),
            st if st == Status::KeyNotFound as u16 => Ok(None),
            st => Err(DeviceStore::status(st)),
        }
    }
    fn sim_ns(&self) -> u64 {
        self.service_ns
    }
}

/// Where a device process listens and who its peers are.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// This device's id (its index in `net`).
    pub id: u16,
    /// Every device's NET address, by id; this device listens on its own.
    pub net: Vec<SocketAddr>,
    /// The Unix socket hosts attach on.
    pub socket: PathBuf,
    /// Commands taken from one queue before the next (round robin).
    pub burst: u32,
    /// How long a peer may take to connect or answer.
    pub peer_timeout: Duration,
    /// The traditional path's device: hosts name remote keys' devices (cdw13) and everything
    /// else is local (GME bypass); peers' requests go to this host's daemon at this address,
    /// which re-submits them through its queues. None: a UIO device.
    pub relay: Option<SocketAddr>,
    /// Listen for NET on a non-loopback address (NET has no authentication).
    pub allow_remote: bool,
    /// Keep the flash in `DIR/flash.img` and recover it at start (see [`crate::image`]); None:
    /// the flash lives in the process and a restarted device starts empty.
    pub data: Option<PathBuf>,
    /// The legs the device accounts in simulated time per command (with its flash's time when
    /// its configuration has NAND timing on); each completion carries the command's total.
    pub links: Links,
}

/// Empty polls before the loop dozes (about a tenth of a millisecond): a host running commands
/// back to back finds the device spinning; an idle device wakes every 20 us and costs little CPU.
const SPIN_POLLS: u32 = 20_000;

/// Empty polls, with several remote commands in flight, before the loop parks until an answer
/// comes.
const WAIT_SPINS: u32 = 2_000;
/// How long a parked loop waits at most before it polls the host queues again.
const WAIT_PARK: Duration = Duration::from_micros(100);

/// The attach message: BAR bytes, host memory bytes (u64 each), with the two memfds.
pub(crate) const ATTACH_BYTES: usize = 16;
/// How long a connection may take to send its attach message before it is dropped.
const ATTACH_WAIT: Duration = Duration::from_secs(5);
/// Connections waiting to send their attach message at most; the oldest goes beyond that.
const ATTACH_PENDING: usize = 64;

/// The device's UTL: new, or recovered from `--data`'s flash image (saying what it found).
fn open_utl(opts: &DeviceOptions, dev_cfg: &Config, utl_cfg: UtlConfig) -> io::Result<Utl> {
    let bad = |e: crate::utl::UtlError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    Ok(match &opts.data {
        None => Utl::new(dev_cfg, utl_cfg).map_err(bad)?,
        Some(dir) => {
            let (u, r) = Utl::open(dev_cfg, utl_cfg, dir).map_err(bad)?;
            if r.blocks > 0 {
                eprintln!(
                    "uio device {}: recovered {} keys from {} records in {} blocks of {}",
                    opts.id,
                    r.keys,
                    r.records,
                    r.blocks,
                    dir.join("flash.img").display()
                );
            }
            u
        }
    })
}

/// Run a device until `stop`: NET for the peers, hosts one after another on the socket.
/// `ready` gets the NET address and the socket path once both listen.
pub fn run(
    opts: &DeviceOptions,
    dev_cfg: &Config,
    utl_cfg: UtlConfig,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(SocketAddr, &Path),
) -> io::Result<DeviceStats> {
    let n = opts.net.len();
    if n == 0 || opts.id as usize >= n {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("device id {} with {n} NET addresses", opts.id)));
    }
    let utl = Arc::new(Mutex::new(SimUtl::new(open_utl(opts, dev_cfg, utl_cfg)?)));
    let listener = net::bind(opts.net[opts.id as usize], opts.allow_remote)?;
    let addr = listener.local_addr()?;
    let net_thread = match opts.relay {
        None => net::serve(listener, utl.clone(), stop.clone()),
        Some(daemon) => net::serve(listener, Arc::new(Mutex::new(Relay::new(daemon, opts.peer_timeout))), stop.clone()),
    };
    if opts.socket.exists() {
        std::fs::remove_file(&opts.socket)?;
    }
    let ux = UnixListener::bind(&opts.socket)?;
    ux.set_nonblocking(true)?;
    ready(addr, &opts.socket);
    let store = Arc::new(Mutex::new(DeviceStore {
        id: opts.id,
        traditional: opts.relay.is_some(),
        gme: Gme::uniform(n as u16, 1024),
        utl,
        peers: Peers::new(opts.id, opts.net.clone(), opts.peer_timeout),
        links: opts.links,
        poller: std::thread::current(),
        last_ns: 0,
        stats: DeviceStats::default(),
    }));
    let mut hosts: Vec<Attached> = vec![];
    // Connections accepted whose attach message has not arrived yet: waited for without
    // blocking, so one that sends nothing delays no attached host and no other connection.
    let mut pending: Vec<(UnixStream, Instant)> = vec![];
    let mut idle = 0u32;
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        let mut busy = 0;
        for h in hosts.iter_mut() {
            busy += h.ctl.poll();
        }
        if busy > 0 {
            idle = 0;
            continue;
        }
        idle += 1;
        if keep_polling(idle, &hosts) {
            continue;
        }
        // Idle: take new connections and the hosts whose attach message arrived, drop those
        // that went away, then doze.
        match ux.accept() {
            Ok((s, _)) => {
                if let Err(e) = s.set_nonblocking(true) {
                    eprintln!("uio device {}: host attach refused: {e}", opts.id);
                } else {
                    if pending.len() >= ATTACH_PENDING {
                        pending.remove(0);
                        eprintln!("uio device {}: more than {ATTACH_PENDING} connections waiting to attach; the oldest dropped", opts.id);
                    }
                    pending.push((s, Instant::now()));
                }
                idle = 0;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match attach(&mut pending[i].0, Shared::new(store.clone()), opts.burst) {
                Ok(None) if pending[i].1.elapsed() < ATTACH_WAIT => i += 1,
                Ok(None) => {
                    eprintln!("uio device {}: host attach refused: nothing sent within {ATTACH_WAIT:?}", opts.id);
                    pending.swap_remove(i);
                }
                Ok(Some(ctl)) => {
                    lock_store(&store, "the device store").stats.hosts_attached += 1;
                    hosts.push(Attached { sock: pending.swap_remove(i).0, ctl });
                    idle = 0;
                }
                Err(e) => {
                    eprintln!("uio device {}: host attach refused: {e}", opts.id);
                    pending.swap_remove(i);
                }
            }
        }
        // A host is gone when its socket reads end-of-file or fails.
        hosts.retain_mut(|h| match h.sock.read(&mut [0u8; 1]) {
            Ok(n) => n > 0,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        });
        std::thread::sleep(Duration::from_micros(if hosts.is_empty() && pending.is_empty() { 5_000 } else { 20 }));
    }
    drop(hosts);
    stop.store(true, Ordering::Relaxed);
    let _ = net_thread.join();
    let _ = std::fs::remove_file(&opts.socket);
    let stats = lock_store(&store, "the device store").stats();
    result.map(|_| stats)
}

/// After `idle` empty rounds: wait for the hosts' next commands (true) or go on to look for new
/// hosts and doze (false). Remote commands in flight keep the loop for their answers (it looks
/// for new hosts once every SPIN_POLLS rounds): spinning; with several, spinning a little, then
/// parked until an answer comes (NET's reader wakes it) or WAIT_PARK has passed, leaving the
/// cores to the threads the answers need. One alone is spun for: at depth 1 the wake-up would
/// add to every remote command.
fn keep_polling(idle: u32, hosts: &[Attached]) -> bool {
    let in_flight: usize = hosts.iter().map(|h| h.ctl.in_flight()).sum();
    if in_flight > 1 && idle >= WAIT_SPINS && !idle.is_multiple_of(SPIN_POLLS) {
        std::thread::park_timeout(WAIT_PARK);
        return true;
    }
    if !hosts.is_empty() && (idle < SPIN_POLLS || in_flight > 0 && !idle.is_multiple_of(SPIN_POLLS)) {
        std::hint::spin_loop();
        return true;
    }
    false
}

/// The device's modules shared by every attached host's controller; each controller's remote
/// commands come back finished on its own channel.
struct Shared {
    store: Arc<Mutex<DeviceStore>>,
    tx: mpsc::Sender<Finished>,
    rx: mpsc::Receiver<Finished>,
}

impl Shared {
    fn new(store: Arc<Mutex<DeviceStore>>) -> Shared {
        let (tx, rx) = mpsc::channel();
        Shared { store, tx, rx }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, DeviceStore> {
        lock_store(&self.store, "the device store")
    }
}

impl Store for Shared {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.lock().put(key, value)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.lock().get(key)
    }
    fn put_to(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.lock().put_to(dest, key, value)
    }
    fn get_from(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.lock().get_from(dest, key)
    }
    fn sim_ns(&self) -> u64 {
        self.lock().sim_ns()
    }
    fn start(&mut self, tag: u64, dest: Option<u16>, op: Op<'_>) -> Option<Finished> {
        let tx = self.tx.clone();
        self.lock().start_with(tag, dest, op, &tx)
    }
    fn finished(&mut self, out: &mut Vec<Finished>) {
        out.extend(self.rx.try_iter());
    }
}

/// A host attached: its socket (closed when it goes away) and the controller on its memory.
struct Attached {
    sock: UnixStream,
    ctl: Controller<Shared>,
}

/// Run `f` with a flag that SIGINT or SIGTERM sets (the handlers are removed afterwards).
pub(crate) fn until_signal<R>(f: impl FnOnce(Arc<AtomicBool>) -> io::Result<R>) -> io::Result<R> {
    let stop = Arc::new(AtomicBool::new(false));
    let ids = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .iter()
        .map(|&s| signal_hook::flag::register(s, stop.clone()))
        .collect::<io::Result<Vec<_>>>()?;
    let r = f(stop);
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    r
}

/// [`run`] until SIGINT or SIGTERM.
pub fn run_until_signal(
    opts: &DeviceOptions,
    dev_cfg: &Config,
    utl_cfg: UtlConfig,
    ready: impl FnOnce(SocketAddr, &Path),
) -> io::Result<DeviceStats> {
    until_signal(|stop| run(opts, dev_cfg, utl_cfg, stop, ready))
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// A host attaching on non-blocking `s`: receive its BAR and memory memfds, map them, enable
/// a controller on them (its admin queues where its BAR says), and acknowledge. None: nothing
/// has arrived yet.
fn attach(s: &mut UnixStream, store: Shared, burst: u32) -> io::Result<Option<Controller<Shared>>> {
    let mut hdr = [0u8; ATTACH_BYTES];
    let mut fds: [RawFd; 2] = [-1; 2];
    let (nb, nfd) = match s.recv_with_fd(&mut hdr, &mut fds) {
        Ok((0, 0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before attaching")),
        Ok(got) => got,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: the descriptors just received are ours to own and close.
    let owned: Vec<OwnedFd> = fds[..nfd].iter().map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }).collect();
    if nb != ATTACH_BYTES || owned.len() != 2 {
        return Err(invalid(format!("attach message of {nb} bytes with {} descriptors (expected {ATTACH_BYTES} and 2)", owned.len())));
    }
    let bar_len = u64::from_le_bytes(hdr[..8].try_into().expect("8 bytes")) as usize;
    let mem_len = u64::from_le_bytes(hdr[8..].try_into().expect("8 bytes")) as usize;
    if bar_len < bar::bytes(1) || mem_len == 0 || bar_len > 1 << 20 || mem_len > 1 << 34 {
        return Err(invalid(format!("BAR of {bar_len} bytes, host memory of {mem_len}")));
    }
    let mut it = owned.into_iter();
    let bar_r = Region::map(it.next().expect("fd"), bar_len)?;
    let mem = Region::map(it.next().expect("fd"), mem_len)?;
    let ctl = match Controller::enable(Arc::new(bar_r), Arc::new(mem), burst, store) {
        Ok(c) => c,
        Err((e, _)) => {
            let _ = s.write_all(&[0]);
            return Err(invalid(e));
        }
    };
    s.write_all(&[1])?;
    Ok(Some(ctl))
}
