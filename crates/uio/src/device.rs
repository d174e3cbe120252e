//! A UIO device as its own process, and the host library that attaches to it.
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
//! Threads: the polling loop (commands from the hosts) and one per peer connection (requests
//! from other devices) share the UTL under a lock, never held while a remote request waits.
//! The loop spins while commands come and, after about a tenth of a millisecond without any,
//! sleeps 20 us at a time, so idle devices leave the CPU to others.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sendfd::{RecvWithFd, SendWithFd};
use serde::{Deserialize, Serialize};
use ssdlab_core::Config;
use ssdlab_netrules::lock_store;

use crate::cluster::{Gme, Links, Path as DataPath};
use crate::layout::{bar, Command, Completion, Status};
use crate::net::{self, Peers, OP_GET, OP_PUT};
use crate::queues::{Controller, Host, Perm, Store, KEY_MAX_BYTES};
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
    rec: Vec<u8>,
    out: Vec<u8>,
    /// The last command's simulated latency: its legs (`links`, the same formulas as
    /// [`crate::cluster`]) plus the UTL's time, its own or the remote device's.
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

    /// The remote device answers with its UTL's time (on the traditional path, the time of
    /// the command its host submitted back, legs excluded); the legs are added here.
    fn remote_put(&mut self, to: u16, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.stats.remote_puts += 1;
        self.rec.clear();
        encode(key, value, &mut self.rec);
        let r = self.peers.request(to, OP_PUT, &self.rec, &mut self.out);
        self.stats.remote_errors = self.peers.errors;
        let (before, after) = self.links.put_legs(self.path(), true, key.len(), value.len());
        self.last_ns = before + self.peers.last_service_ns + after;
        match r? {
            0 => Ok(()),
            st => Err(Self::status(st)),
        }
    }

    fn remote_get(&mut self, to: u16, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.stats.remote_gets += 1;
        let r = self.peers.request(to, OP_GET, key, &mut self.out);
        self.stats.remote_errors = self.peers.errors;
        let found = matches!(r, Ok(0));
        self.last_ns = self.links.get_legs_before(self.path(), true, key.len())
            + self.peers.last_service_ns
            + self.links.get_legs_after(self.path(), true, if found { self.out.len() } else { 0 });
        match r? {
            0 => Ok(Some(self.out.clone())),
            st if st == Status::KeyNotFound as u16 => Ok(None),
            st => Err(Self::status(st)),
        }
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
}

impl Store for DeviceStore {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.put_to(None, key, value)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.get_from(None, key)
    }
    fn put_to(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), Status> {
        match self.target(dest, key) {
            to if to == self.id => self.local_put(key, value),
            to => self.remote_put(to, key, value),
        }
    }
    fn get_from(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        match self.target(dest, key) {
            to if to == self.id => self.local_get(key),
            to => self.remote_get(to, key),
        }
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
}

/// What the daemon answered: its command's UTL time (the daemon removes the legs).
impl Relay {
    fn service_ns(&self) -> u64 {
        self.daemon.last_service_ns
    }
}

impl Relay {
    fn new(daemon: SocketAddr, timeout: Duration) -> Relay {
        // The daemon is peer 0 of a one-peer table (this end is "device 1").
        Relay { daemon: Peers::new(1, vec![daemon], timeout), rec: Vec::new(), out: Vec::new() }
    }
}

impl Store for Relay {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.rec.clear();
        encode(key, value, &mut self.rec);
        match self.daemon.request(0, OP_PUT, &self.rec, &mut self.out)? {
            0 => Ok(()),
            st => Err(DeviceStore::status(st)),
        }
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        match self.daemon.request(0, OP_GET, key, &mut self.out)? {
            0 => Ok(Some(self.out.clone())),
            st if st == Status::KeyNotFound as u16 => Ok(None),
            st => Err(DeviceStore::status(st)),
        }
    }
    fn sim_ns(&self) -> u64 {
        self.service_ns()
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

/// The attach message: BAR bytes, host memory bytes (u64 each), with the two memfds.
const ATTACH_BYTES: usize = 16;
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
        rec: Vec::new(),
        out: Vec::new(),
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
        if idle < SPIN_POLLS && !hosts.is_empty() {
            std::hint::spin_loop();
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
            match attach(&mut pending[i].0, Shared(store.clone()), opts.burst) {
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
    let stats = lock_store(&store, "the device store").stats.clone();
    result.map(|_| stats)
}

/// The device's modules shared by every attached host's controller.
struct Shared(Arc<Mutex<DeviceStore>>);

impl Store for Shared {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        lock_store(&self.0, "the device store").put(key, value)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        lock_store(&self.0, "the device store").get(key)
    }
    fn put_to(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), Status> {
        lock_store(&self.0, "the device store").put_to(dest, key, value)
    }
    fn get_from(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        lock_store(&self.0, "the device store").get_from(dest, key)
    }
    fn sim_ns(&self) -> u64 {
        lock_store(&self.0, "the device store").sim_ns()
    }
}

/// A host attached: its socket (closed when it goes away) and the controller on its memory.
struct Attached {
    sock: UnixStream,
    ctl: Controller<Shared>,
}

/// Run `f` with a flag that SIGINT or SIGTERM sets (the handlers are removed afterwards).
fn until_signal<R>(f: impl FnOnce(Arc<AtomicBool>) -> io::Result<R>) -> io::Result<R> {
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

/// Bytes of host memory the host library maps: queues, one key and one value buffer.
pub const HOST_MEMORY_BYTES: usize = (16 << 20) + (1 << 20);
/// Largest value the host library moves (the queues allow more; a UTL record must fit one
/// flash block, 256 KiB on the case study's devices).
pub const HOST_VALUE_BYTES: u64 = 16 << 20;
const IO_ENTRIES: u16 = 64;

/// The host side: attach to a device process and run put/get one at a time.
pub struct HostDevice {
    host: Host,
    sock: UnixStream,
    mem: Arc<Region>,
    key_at: u64,
    val_at: u64,
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
        let key_at = host.alloc(KEY_MAX_BYTES);
        let val_at = host.alloc(HOST_VALUE_BYTES);
        Ok(HostDevice {
            host,
            sock,
            mem,
            key_at,
            val_at,
            timeout,
            puts: 0,
            gets: 0,
            last_sim_ns: 0,
            links: Links::default(),
            last_utl_ns: 0,
        })
    }

    fn run_status(&mut self, cmd: Command) -> Result<Completion, Status> {
        self.run(cmd).map_err(|_| Status::InternalError)
    }

    /// Submit `cmd` and wait for its completion. A completion of an earlier command that timed
    /// out (another command id) is dropped.
    fn run(&mut self, cmd: Command) -> Result<Completion, String> {
        self.host.submit(1, &cmd)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(c) = self.host.reap(1) {
                if c.cid == cmd.cid {
                    return Ok(c);
                }
                continue;
            }
            if !backoff(deadline) {
                return Err(format!("the device did not answer within {:?}", self.timeout));
            }
        }
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

    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.put_routed(None, key, value)
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.get_routed(None, key)
    }

    /// cdw13 of a command naming device `dest` (the traditional path's host routing).
    fn routed(mut c: Command, dest: Option<u16>) -> Command {
        c.cdw[3] = dest.map_or(0, |d| d as u32 + 1);
        c
    }

    /// A put naming the device that holds the key (a traditional device forwards it there).
    pub fn put_routed(&mut self, dest: Option<u16>, key: &[u8], value: &[u8]) -> Result<(), String> {
        Self::check_sizes(key, value.len() as u64)?;
        self.mem.write(self.key_at, key);
        self.mem.write(self.val_at, value);
        let cid = self.host.cid();
        let c = self.run(Self::routed(Command::put(cid, (self.key_at, key.len() as u64), (self.val_at, value.len() as u64)), dest))?;
        self.puts += 1;
        self.last_sim_ns = c.sim_ns as u64;
        match Status::from_bits(c.status) {
            Some(Status::Success) => Ok(()),
            _ => Err(format!("put failed: {}", status_text(c.status))),
        }
    }

    /// A get naming the device that holds the key (see [`HostDevice::put_routed`]).
    pub fn get_routed(&mut self, dest: Option<u16>, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Self::check_sizes(key, 0)?;
        self.mem.write(self.key_at, key);
        let cid = self.host.cid();
        let c = self.run(Self::routed(Command::get(cid, (self.key_at, key.len() as u64), (self.val_at, HOST_VALUE_BYTES)), dest))?;
        self.gets += 1;
        self.last_sim_ns = c.sim_ns as u64;
        match Status::from_bits(c.status) {
            Some(Status::Success) => {
                let mut v = vec![0u8; c.specific as usize];
                self.mem.read(self.val_at, &mut v);
                Ok(Some(v))
            }
            Some(Status::KeyNotFound) => Ok(None),
            _ => Err(format!("get failed: {}", status_text(c.status))),
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
        self.mem.write(self.key_at, key);
        self.mem.write(self.val_at, value);
        let cid = self.host.cid();
        let c = self.run_status(Command::put(cid, (self.key_at, key.len() as u64), (self.val_at, value.len() as u64)))?;
        self.puts += 1;
        self.last_sim_ns = c.sim_ns as u64;
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
        self.mem.write(self.key_at, key);
        let cid = self.host.cid();
        let c = self.run_status(Command::get(cid, (self.key_at, key.len() as u64), (self.val_at, HOST_VALUE_BYTES)))?;
        self.gets += 1;
        self.last_sim_ns = c.sim_ns as u64;
        let vlen = if Self::status_of(&c) == Status::Success { c.specific as usize } else { 0 };
        let legs = self.links.get_legs_before(DataPath::Traditional, false, key.len())
            + self.links.get_legs_after(DataPath::Traditional, false, vlen);
        self.last_utl_ns = self.last_sim_ns.saturating_sub(legs);
        match Self::status_of(&c) {
            Status::Success => {
                let mut v = vec![0u8; c.specific as usize];
                self.mem.read(self.val_at, &mut v);
                Ok(Some(v))
            }
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
