//! A UIO device as its own process, and the host library that attaches to it.
//!
//! The device owns its UTL (on its own emulated flash), GME's map and NET (a TCP listener for
//! its peers' requests, connections to theirs). A host attaches over a Unix socket by passing
//! two memfds, the BAR and its memory (as a driver maps a PCIe BAR and hands the device DMA
//! addresses), with their sizes; the device maps both, enables its controller on them
//! (the admin queues from AQA/ASQ/ACQ) and polls the queues until the host goes away. Put and
//! get commands run the document's path: DMA (the key and value read from host memory), GME
//! (route by key hash), then the local UTL or a peer over NET; a get's value is written into
//! the host's buffer.
//!
//! Threads: the polling loop (commands from the host) and one per peer connection (requests
//! from other devices) share the UTL under a lock, never held while a remote request waits.
//! The loop spins while commands come and sleeps 20 us at a time once idle, so idle devices
//! leave the CPU to others.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sendfd::{RecvWithFd, SendWithFd};
use serde::{Deserialize, Serialize};
use ssdlab_core::Config;

use crate::cluster::Gme;
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

/// The device's modules behind its queues: GME, the UTL, NET.
pub struct DeviceStore {
    id: u16,
    gme: Gme,
    utl: Arc<Mutex<Utl>>,
    peers: Peers,
    rec: Vec<u8>,
    out: Vec<u8>,
    pub stats: DeviceStats,
}

impl DeviceStore {
    fn status(st: u16) -> Status {
        Status::from_bits(st).unwrap_or(Status::InternalError)
    }
}

impl Store for DeviceStore {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        let to = self.gme.route(key);
        if to == self.id {
            self.stats.local_puts += 1;
            return self.utl.lock().expect("utl").put(key, value, 0).map(|_| ()).map_err(|_| Status::InternalError);
        }
        self.stats.remote_puts += 1;
        self.rec.clear();
        encode(key, value, &mut self.rec);
        let r = self.peers.request(to, OP_PUT, &self.rec, &mut self.out);
        self.stats.remote_errors = self.peers.errors;
        match r? {
            0 => Ok(()),
            st => Err(Self::status(st)),
        }
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        let to = self.gme.route(key);
        if to == self.id {
            self.stats.local_gets += 1;
            return self.utl.lock().expect("utl").get(key, 0).map(|(v, _)| v).map_err(|_| Status::InternalError);
        }
        self.stats.remote_gets += 1;
        let r = self.peers.request(to, OP_GET, key, &mut self.out);
        self.stats.remote_errors = self.peers.errors;
        match r? {
            0 => Ok(Some(self.out.clone())),
            st if st == Status::KeyNotFound as u16 => Ok(None),
            st => Err(Self::status(st)),
        }
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
}

/// The attach message: BAR bytes, host memory bytes (u64 each), with the two memfds.
const ATTACH_BYTES: usize = 16;

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
    let utl = Utl::new(dev_cfg, utl_cfg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let utl = Arc::new(Mutex::new(utl));
    let listener = TcpListener::bind(opts.net[opts.id as usize])?;
    let addr = listener.local_addr()?;
    let net_thread = net::serve(listener, utl.clone(), stop.clone());
    if opts.socket.exists() {
        std::fs::remove_file(&opts.socket)?;
    }
    let ux = UnixListener::bind(&opts.socket)?;
    ux.set_nonblocking(true)?;
    ready(addr, &opts.socket);
    let mut store = DeviceStore {
        id: opts.id,
        gme: Gme::uniform(n as u16, 1024),
        utl,
        peers: Peers::new(opts.id, opts.net.clone(), opts.peer_timeout),
        rec: Vec::new(),
        out: Vec::new(),
        stats: DeviceStats::default(),
    };
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        match ux.accept() {
            Ok((s, _)) => {
                let (st, refused) = serve_host(s, store, opts.burst, &stop);
                store = st;
                if let Some(e) = refused {
                    eprintln!("uio device {}: host attach refused: {e}", opts.id);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = net_thread.join();
    let _ = std::fs::remove_file(&opts.socket);
    result.map(|_| store.stats)
}

/// [`run`] until SIGINT or SIGTERM.
pub fn run_until_signal(
    opts: &DeviceOptions,
    dev_cfg: &Config,
    utl_cfg: UtlConfig,
    ready: impl FnOnce(SocketAddr, &Path),
) -> io::Result<DeviceStats> {
    let stop = Arc::new(AtomicBool::new(false));
    let ids = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .iter()
        .map(|&s| signal_hook::flag::register(s, stop.clone()))
        .collect::<io::Result<Vec<_>>>()?;
    let r = run(opts, dev_cfg, utl_cfg, stop, ready);
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    r
}

fn refuse(e: impl std::fmt::Display, store: DeviceStore) -> (DeviceStore, Option<io::Error>) {
    (store, Some(io::Error::new(io::ErrorKind::InvalidData, e.to_string())))
}

/// Serve one host: map its memfds, enable the controller, poll until the host closes the
/// socket or `stop`. Gives the store back, with the reason when the attach was refused.
fn serve_host(mut s: UnixStream, mut store: DeviceStore, burst: u32, stop: &AtomicBool) -> (DeviceStore, Option<io::Error>) {
    let mut hdr = [0u8; ATTACH_BYTES];
    let mut fds: [RawFd; 2] = [-1; 2];
    if let Err(e) = s.set_nonblocking(false).and_then(|_| s.set_read_timeout(Some(Duration::from_secs(5)))) {
        return refuse(e, store);
    }
    let (nb, nfd) = match s.recv_with_fd(&mut hdr, &mut fds) {
        Ok(x) => x,
        Err(e) => return refuse(e, store),
    };
    // SAFETY: the descriptors just received are ours to own and close.
    let owned: Vec<OwnedFd> = fds[..nfd].iter().map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }).collect();
    if nb != ATTACH_BYTES || owned.len() != 2 {
        return refuse(format!("attach message of {nb} bytes with {} descriptors (expected {ATTACH_BYTES} and 2)", owned.len()), store);
    }
    let bar_len = u64::from_le_bytes(hdr[..8].try_into().expect("8 bytes")) as usize;
    let mem_len = u64::from_le_bytes(hdr[8..].try_into().expect("8 bytes")) as usize;
    let mut it = owned.into_iter();
    let regions = (|| -> io::Result<(Region, Region)> {
        if bar_len < bar::bytes(1) || mem_len == 0 || bar_len > 1 << 20 || mem_len > 1 << 34 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("BAR of {bar_len} bytes, host memory of {mem_len}")));
        }
        Ok((Region::map(it.next().expect("fd"), bar_len)?, Region::map(it.next().expect("fd"), mem_len)?))
    })();
    let (bar_r, mem) = match regions {
        Ok(r) => r,
        Err(e) => return refuse(e, store),
    };
    store.stats.hosts_attached += 1;
    let mut ctl = match Controller::enable(Arc::new(bar_r), Arc::new(mem), burst, store) {
        Ok(c) => c,
        Err((e, st)) => {
            let _ = s.write_all(&[0]);
            return refuse(e, st);
        }
    };
    let alive = s.write_all(&[1]).and_then(|_| s.set_nonblocking(true));
    let mut idle = 0u32;
    while alive.is_ok() && !stop.load(Ordering::Relaxed) {
        if ctl.poll() > 0 {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < 20_000 {
            std::hint::spin_loop();
            continue;
        }
        // Idle: check the host is still there, then doze.
        match s.read(&mut [0u8; 1]) {
            Ok(0) => break,
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => break,
            _ => {}
        }
        std::thread::sleep(Duration::from_micros(20));
        idle = 19_000;
    }
    (ctl.into_store(), None)
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
        Ok(HostDevice { host, sock, mem, key_at, val_at, timeout, puts: 0, gets: 0 })
    }

    fn run(&mut self, cmd: Command) -> Result<Completion, String> {
        self.host.submit(1, &cmd)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(c) = self.host.reap(1) {
                return Ok(c);
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
        Self::check_sizes(key, value.len() as u64)?;
        self.mem.write(self.key_at, key);
        self.mem.write(self.val_at, value);
        let cid = self.host.cid();
        let c = self.run(Command::put(cid, (self.key_at, key.len() as u64), (self.val_at, value.len() as u64)))?;
        self.puts += 1;
        match Status::from_bits(c.status) {
            Some(Status::Success) => Ok(()),
            _ => Err(format!("put failed: {}", status_text(c.status))),
        }
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Self::check_sizes(key, 0)?;
        self.mem.write(self.key_at, key);
        let cid = self.host.cid();
        let c = self.run(Command::get(cid, (self.key_at, key.len() as u64), (self.val_at, HOST_VALUE_BYTES)))?;
        self.gets += 1;
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

/// Wait a little for the device (spin, then yield); false once `deadline` has passed.
fn backoff(deadline: Instant) -> bool {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
    Instant::now() < deadline
}
