//! The NBD server: fixed newstyle handshake, transmission with simple or structured replies,
//! several exports of one emulated device, latency modes, limits, clean shutdown.
//!
//! One thread per connection reads requests and executes them on the shared [`Backend`]
//! (one lock: the device is one timeline). Replies are buffered and flushed whenever the
//! client has no further request waiting, so a deep queue costs few system calls. In
//! `emulated` latency mode a second thread per connection sends each reply at the wall-clock
//! moment the emulated SSD completes the command (FEMU's approach), so clients measure the
//! device's latency distribution.

use std::collections::{BinaryHeap, HashMap};
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::proto::*;

/// One export: a byte range of the device, written with an optional FDP placement identifier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    pub name: String,
    pub offset: u64,
    pub size: u64,
    pub placement: Option<u16>,
    pub read_only: bool,
    pub description: String,
}

/// When replies are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Latency {
    /// As soon as the work is done.
    None,
    /// At the emulated SSD's completion time of the command.
    Emulated,
}

/// Server settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeOptions {
    pub listen: String,
    pub exports: Vec<Export>,
    pub latency: Latency,
    pub max_connections: usize,
    /// Largest read or write payload accepted (bytes).
    pub max_request: u32,
    /// Where metrics.json goes at exit and on SIGUSR1 (None: only on request).
    pub metrics_out: Option<PathBuf>,
    pub quiet: bool,
    /// PEM certificate chain and private key: TLS is then required of every client
    /// (NBD_OPT_STARTTLS, the protocol's FORCEDTLS mode), and non-loopback addresses allowed.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// Build the TLS server configuration from PEM files.
pub fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let open = |p: &std::path::Path| std::fs::File::open(p).map(io::BufReader::new).map_err(|e| format!("{}: {e}", p.display()));
    let certs: Vec<_> =
        rustls_pemfile::certs(&mut open(cert)?).collect::<Result<_, _>>().map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", cert.display()));
    }
    let key_der = rustls_pemfile::private_key(&mut open(key)?)
        .map_err(|e| format!("{}: {e}", key.display()))?
        .ok_or_else(|| format!("{}: no PEM private key in it", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map(Arc::new)
        .map_err(|e| format!("TLS certificate/key: {e}"))
}

/// Longest wait for each read of the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The read-only export whose contents are the live metrics.json.
pub const METRICS_EXPORT: &str = "ssdlab-metrics";

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    protocol_errors: AtomicU64,
}

/// State shared by the accept loop and the connections.
pub struct Server {
    backend: Mutex<Backend>,
    opts: ServeOptions,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: Arc<AtomicBool>,
    active: AtomicUsize,
    counters: Counters,
    started: Instant,
}

/// How a connection ended (for logs; never fatal to the server).
#[derive(Debug)]
pub enum ConnEnd {
    /// The client disconnected (NBD_CMD_DISC, NBD_OPT_ABORT or EOF).
    Closed,
    /// The client broke the protocol; the connection was dropped.
    Protocol(String),
    Io(io::Error),
}

impl From<io::Error> for ConnEnd {
    fn from(e: io::Error) -> Self {
        if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) {
            ConnEnd::Closed
        } else if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            ConnEnd::Protocol("the client went silent during the handshake".into())
        } else {
            ConnEnd::Io(e)
        }
    }
}

impl From<ProtoError> for ConnEnd {
    fn from(e: ProtoError) -> Self {
        ConnEnd::Protocol(e.0)
    }
}

/// What the handshake settled on.
#[derive(Debug, Clone)]
pub struct Session {
    pub export: usize,
    pub structured: bool,
    pub meta: bool,
    /// Contents of the metrics export, frozen when it was opened.
    pub frozen: Option<Arc<Vec<u8>>>,
    pub tls: bool,
}

/// Negotiation state carried across STARTTLS.
#[derive(Debug, Clone)]
pub struct Negotiation {
    no_zeroes: bool,
    structured: bool,
    meta: bool,
    options: u32,
}

/// How option haggling ended.
pub enum Haggle {
    Go(Session),
    StartTls,
    Closed,
}

fn read_exact_or_closed<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<(), ConnEnd> {
    r.read_exact(buf).map_err(ConnEnd::from)
}

/// Read and drop `n` bytes (a payload the server refuses), without allocating it.
fn discard<R: Read>(r: &mut R, mut n: u64) -> Result<(), ConnEnd> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        read_exact_or_closed(r, &mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

impl Server {
    pub fn new(backend: Backend, opts: ServeOptions) -> Result<Arc<Server>, String> {
        let size = backend.logical_bytes();
        for e in &opts.exports {
            if e.name == METRICS_EXPORT {
                return Err(format!("export name {METRICS_EXPORT:?} is reserved for the live metrics"));
            }
            if e.size == 0 || e.offset.checked_add(e.size).is_none_or(|end| end > size) {
                return Err(format!(
                    "export {:?}: bytes {}..{} are not inside the device's {size} bytes",
                    e.name,
                    e.offset,
                    e.offset.saturating_add(e.size)
                ));
            }
            if e.name.len() > 4096 {
                return Err("export names are at most 4096 bytes".into());
            }
        }
        if opts.exports.is_empty() {
            return Err("no exports".into());
        }
        let mut names: Vec<&str> = opts.exports.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err("export names must be unique".into());
        }
        let tls = match &opts.tls {
            Some((cert, key)) => Some(tls_config(cert, key)?),
            None => None,
        };
        Ok(Arc::new(Server {
            backend: Mutex::new(backend),
            tls,
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            active: AtomicUsize::new(0),
            counters: Counters::default(),
            started: Instant::now(),
        }))
    }

    fn backend(&self) -> MutexGuard<'_, Backend> {
        // A panic elsewhere must not take every connection down with it.
        self.backend.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// metrics.json now: the device's report plus the server's own figures.
    pub fn metrics(&self) -> Value {
        let mut m = self.backend().metrics();
        m["nbd"] = json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "connections_total": self.counters.connections.load(Ordering::Relaxed),
            "connections_active": self.active.load(Ordering::Relaxed),
            "requests": self.counters.requests.load(Ordering::Relaxed),
            "request_errors": self.counters.errors.load(Ordering::Relaxed),
            "protocol_errors": self.counters.protocol_errors.load(Ordering::Relaxed),
            "latency_mode": self.opts.latency,
            "exports": self.opts.exports,
        });
        m
    }

    /// Write metrics.json and timeseries.csv to `metrics_out` (if set).
    pub fn dump_metrics(&self) -> io::Result<Option<PathBuf>> {
        let Some(dir) = &self.opts.metrics_out else { return Ok(None) };
        std::fs::create_dir_all(dir)?;
        let m = self.metrics();
        let text = serde_json::to_string_pretty(&m).map_err(io::Error::other)?;
        let tmp = dir.join("metrics.json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join("metrics.json"))?;
        std::fs::write(dir.join("timeseries.csv"), self.backend().series_csv())?;
        Ok(Some(dir.join("metrics.json")))
    }

    fn frozen_metrics(&self) -> Arc<Vec<u8>> {
        let mut v = serde_json::to_vec_pretty(&self.metrics()).unwrap_or_default();
        v.push(b'\n');
        // Pad to whole 512-byte blocks with spaces (still valid JSON).
        v.resize(v.len().div_ceil(512) * 512, b' ');
        Arc::new(v)
    }

    fn export_flags(&self, e: Option<&Export>) -> u16 {
        let mut f = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_DF | FLAG_CAN_MULTI_CONN;
        match e {
            Some(e) if !e.read_only => f |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO,
            _ => f |= FLAG_READ_ONLY,
        }
        f
    }

    /// (index, export) of a name: "" is the first export; the metrics export is usize::MAX.
    fn find(&self, name: &str) -> Option<usize> {
        if name == METRICS_EXPORT {
            return Some(usize::MAX);
        }
        if name.is_empty() {
            return Some(0);
        }
        self.opts.exports.iter().position(|e| e.name == name)
    }

    fn size_of(&self, idx: usize, frozen: &Option<Arc<Vec<u8>>>) -> u64 {
        if idx == usize::MAX {
            frozen.as_ref().map_or(0, |f| f.len() as u64)
        } else {
            self.opts.exports[idx].size
        }
    }

    /// The handshake without TLS, up to the transmission phase. Returns None if the client
    /// left (or asked for TLS, which the caller must then start: see [`Server::options`]).
    pub fn handshake<S: Read + Write>(&self, s: &mut S) -> Result<Option<Session>, ConnEnd> {
        let mut st = self.greeting(s)?;
        match self.options(s, false, &mut st)? {
            Haggle::Go(sess) => Ok(Some(sess)),
            Haggle::StartTls | Haggle::Closed => Ok(None),
        }
    }

    /// Send the greeting and read the client's flags.
    pub fn greeting<S: Read + Write>(&self, s: &mut S) -> Result<Negotiation, ConnEnd> {
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
        hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        s.write_all(&hello)?;
        s.flush()?;
        let mut cf = [0u8; 4];
        read_exact_or_closed(s, &mut cf)?;
        let cflags = u32::from_be_bytes(cf);
        if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(ConnEnd::Protocol(format!("unknown client flags {cflags:#x}")));
        }
        Ok(Negotiation { no_zeroes: cflags & FLAG_C_NO_ZEROES != 0, structured: false, meta: false, options: 0 })
    }

    /// Option haggling, until the client picks an export, asks for TLS or leaves. With TLS
    /// configured, every option but STARTTLS and ABORT is refused until TLS is running.
    pub fn options<S: Read + Write>(&self, s: &mut S, tls_active: bool, st: &mut Negotiation) -> Result<Haggle, ConnEnd> {
        let no_zeroes = st.no_zeroes;
        let mut frozen: Option<Arc<Vec<u8>>> = None;
        let tls_required = self.tls.is_some() && !tls_active;
        while st.options < 1024 {
            st.options += 1;
            let (structured, meta) = (st.structured, st.meta);
            let mut h = [0u8; 16];
            read_exact_or_closed(s, &mut h)?;
            let oh = parse_option_header(&h)?;
            if oh.len > MAX_OPTION_BYTES {
                discard(s, oh.len as u64)?;
                self.reply(
                    s,
                    oh.option,
                    REP_ERR_TOO_BIG,
                    format!("option data of {} bytes; at most {MAX_OPTION_BYTES}", oh.len).as_bytes(),
                )?;
                continue;
            }
            let mut data = vec![0u8; oh.len as usize];
            read_exact_or_closed(s, &mut data)?;
            if self.shutdown.load(Ordering::Relaxed) && oh.option != OPT_ABORT {
                if oh.option == OPT_EXPORT_NAME {
                    return Ok(Haggle::Closed);
                }
                self.reply(s, oh.option, REP_ERR_SHUTDOWN, b"the server is shutting down")?;
                continue;
            }
            if tls_required && !matches!(oh.option, OPT_STARTTLS | OPT_ABORT) {
                if oh.option == OPT_EXPORT_NAME {
                    return Err(ConnEnd::Protocol("NBD_OPT_EXPORT_NAME without TLS on a TLS-only server".into()));
                }
                self.reply(s, oh.option, REP_ERR_TLS_REQD, b"this server requires TLS: send NBD_OPT_STARTTLS first")?;
                continue;
            }
            match oh.option {
                OPT_EXPORT_NAME => {
                    let Ok(name) = String::from_utf8(data) else { return Err(ConnEnd::Protocol("export name is not UTF-8".into())) };
                    // No way to return an error here: the session ends.
                    let Some(idx) = self.find(&name) else { return Err(ConnEnd::Protocol(format!("unknown export {name:?}"))) };
                    if idx == usize::MAX {
                        frozen = Some(self.frozen_metrics());
                    }
                    let mut r = Vec::with_capacity(134);
                    r.extend_from_slice(&self.size_of(idx, &frozen).to_be_bytes());
                    r.extend_from_slice(&self.flags_for(idx, structured).to_be_bytes());
                    if !no_zeroes {
                        r.extend_from_slice(&[0u8; 124]);
                    }
                    s.write_all(&r)?;
                    s.flush()?;
                    return Ok(Haggle::Go(Session { export: idx, structured, meta, frozen, tls: tls_active }));
                }
                OPT_ABORT => {
                    let _ = self.reply(s, oh.option, REP_ACK, &[]);
                    return Ok(Haggle::Closed);
                }
                OPT_LIST => {
                    if !data.is_empty() {
                        self.reply(s, oh.option, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data")?;
                        continue;
                    }
                    for name in self.opts.exports.iter().map(|e| e.name.as_str()).chain([METRICS_EXPORT]) {
                        let mut p = (name.len() as u32).to_be_bytes().to_vec();
                        p.extend_from_slice(name.as_bytes());
                        self.reply(s, oh.option, REP_SERVER, &p)?;
                    }
                    self.reply(s, oh.option, REP_ACK, &[])?;
                }
                OPT_STARTTLS => {
                    if !data.is_empty() {
                        self.reply(s, oh.option, REP_ERR_INVALID, b"NBD_OPT_STARTTLS takes no data")?;
                    } else if tls_active {
                        self.reply(s, oh.option, REP_ERR_INVALID, b"TLS is already running")?;
                    } else if self.tls.is_none() {
                        self.reply(s, oh.option, REP_ERR_POLICY, b"TLS is not configured on this server (--tls-cert, --tls-key)")?;
                    } else {
                        self.reply(s, oh.option, REP_ACK, &[])?;
                        return Ok(Haggle::StartTls);
                    }
                }
                OPT_INFO | OPT_GO => {
                    let go = match parse_go(&data) {
                        Ok(g) => g,
                        Err(e) => {
                            self.reply(s, oh.option, REP_ERR_INVALID, e.0.as_bytes())?;
                            continue;
                        }
                    };
                    let Some(idx) = self.find(&go.name) else {
                        self.reply(
                            s,
                            oh.option,
                            REP_ERR_UNKNOWN,
                            format!("no export named {:?}; NBD_OPT_LIST shows them", go.name).as_bytes(),
                        )?;
                        continue;
                    };
                    if idx == usize::MAX {
                        frozen = Some(self.frozen_metrics());
                    }
                    let mut p = INFO_EXPORT.to_be_bytes().to_vec();
                    p.extend_from_slice(&self.size_of(idx, &frozen).to_be_bytes());
                    p.extend_from_slice(&self.flags_for(idx, structured).to_be_bytes());
                    self.reply(s, oh.option, REP_INFO, &p)?;
                    let mut p = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                    for v in [1u32, 4096, self.opts.max_request] {
                        p.extend_from_slice(&v.to_be_bytes());
                    }
                    self.reply(s, oh.option, REP_INFO, &p)?;
                    for &i in &go.infos {
                        let text = match i {
                            INFO_NAME => {
                                Some(if idx == usize::MAX { METRICS_EXPORT.to_string() } else { self.opts.exports[idx].name.clone() })
                            }
                            INFO_DESCRIPTION => Some(if idx == usize::MAX {
                                "live metrics.json of this ssdlab server".to_string()
                            } else {
                                self.opts.exports[idx].description.clone()
                            }),
                            _ => None,
                        };
                        if let Some(t) = text {
                            let mut p = i.to_be_bytes().to_vec();
                            p.extend_from_slice(t.as_bytes());
                            self.reply(s, oh.option, REP_INFO, &p)?;
                        }
                    }
                    self.reply(s, oh.option, REP_ACK, &[])?;
                    if oh.option == OPT_GO {
                        return Ok(Haggle::Go(Session { export: idx, structured, meta, frozen, tls: tls_active }));
                    }
                }
                OPT_STRUCTURED_REPLY => {
                    if !data.is_empty() {
                        self.reply(s, oh.option, REP_ERR_INVALID, b"NBD_OPT_STRUCTURED_REPLY takes no data")?;
                    } else {
                        st.structured = true;
                        self.reply(s, oh.option, REP_ACK, &[])?;
                    }
                }
                OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                    if !structured {
                        self.reply(s, oh.option, REP_ERR_INVALID, b"negotiate structured replies first")?;
                        continue;
                    }
                    let m = match parse_meta(&data) {
                        Ok(m) => m,
                        Err(e) => {
                            self.reply(s, oh.option, REP_ERR_INVALID, e.0.as_bytes())?;
                            continue;
                        }
                    };
                    if self.find(&m.name).is_none() {
                        self.reply(s, oh.option, REP_ERR_UNKNOWN, format!("no export named {:?}", m.name).as_bytes())?;
                        continue;
                    }
                    let list = oh.option == OPT_LIST_META_CONTEXT;
                    let wanted = if list && m.queries.is_empty() {
                        true
                    } else {
                        m.queries.iter().any(|q| q == BASE_ALLOCATION || (list && q == "base:"))
                    };
                    if !list {
                        st.meta = wanted;
                    }
                    if wanted {
                        let mut p = (if list { 0 } else { BASE_ALLOCATION_ID }).to_be_bytes().to_vec();
                        p.extend_from_slice(BASE_ALLOCATION.as_bytes());
                        self.reply(s, oh.option, REP_META_CONTEXT, &p)?;
                    }
                    self.reply(s, oh.option, REP_ACK, &[])?;
                }
                other => {
                    self.reply(s, other, REP_ERR_UNSUP, b"option not supported by ssdlab")?;
                }
            }
        }
        Err(ConnEnd::Protocol("more than 1024 options in one handshake".into()))
    }

    fn flags_for(&self, idx: usize, structured: bool) -> u16 {
        let e = (idx != usize::MAX).then(|| &self.opts.exports[idx]);
        let f = self.export_flags(e);
        if structured {
            f
        } else {
            f & !FLAG_SEND_DF
        }
    }

    fn reply<S: Write>(&self, s: &mut S, option: u32, kind: u32, payload: &[u8]) -> io::Result<()> {
        s.write_all(&option_reply(option, kind, payload))?;
        s.flush()
    }
}

/// Where replies go: straight into the socket buffer, or to a thread that sends each at its
/// emulated completion time.
enum Sink<W: Write + Send + 'static> {
    Direct(BufWriter<W>),
    Delayed { tx: Option<mpsc::Sender<(Instant, u64, Vec<u8>)>>, seq: u64, handle: Option<JoinHandle<io::Result<()>>> },
}

impl<W: Write + Send + 'static> Sink<W> {
    fn new(w: W, latency: Latency) -> Self {
        match latency {
            Latency::None => Sink::Direct(BufWriter::with_capacity(256 * 1024, w)),
            Latency::Emulated => {
                let (tx, rx) = mpsc::channel::<(Instant, u64, Vec<u8>)>();
                let handle = std::thread::spawn(move || delayed_writer(w, rx));
                Sink::Delayed { tx: Some(tx), seq: 0, handle: Some(handle) }
            }
        }
    }

    /// Send `head` then `data` as one reply, due at `due`.
    fn send(&mut self, due: Instant, head: &[u8], data: &[u8]) -> io::Result<()> {
        match self {
            Sink::Direct(w) => {
                w.write_all(head)?;
                w.write_all(data)
            }
            Sink::Delayed { tx, seq, .. } => {
                let mut v = Vec::with_capacity(head.len() + data.len());
                v.extend_from_slice(head);
                v.extend_from_slice(data);
                *seq += 1;
                tx.as_ref().expect("open").send((due, *seq, v)).map_err(|_| io::Error::new(ErrorKind::BrokenPipe, "reply thread ended"))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Direct(w) => w.flush(),
            Sink::Delayed { .. } => Ok(()),
        }
    }

    /// Flush everything and wait for pending replies.
    fn finish(&mut self) -> io::Result<()> {
        match self {
            Sink::Direct(w) => w.flush(),
            Sink::Delayed { tx, handle, .. } => {
                drop(tx.take());
                match handle.take().map(|h| h.join()) {
                    Some(Ok(r)) => r,
                    Some(Err(_)) => Err(io::Error::other("reply thread panicked")),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Send each reply when due (earliest first); flush when nothing else is due yet.
fn delayed_writer<W: Write>(w: W, rx: mpsc::Receiver<(Instant, u64, Vec<u8>)>) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(256 * 1024, w);
    let mut heap: BinaryHeap<std::cmp::Reverse<(Instant, u64, Vec<u8>)>> = BinaryHeap::new();
    let mut open = true;
    while open || !heap.is_empty() {
        let now = Instant::now();
        while heap.peek().is_some_and(|r| r.0 .0 <= now) {
            let std::cmp::Reverse((_, _, bytes)) = heap.pop().expect("peeked");
            w.write_all(&bytes)?;
        }
        w.flush()?;
        let wait = heap.peek().map(|r| r.0 .0.saturating_duration_since(now));
        if !open {
            if let Some(d) = wait {
                std::thread::sleep(d);
            }
            continue;
        }
        let got = match wait {
            Some(d) => rx.recv_timeout(d),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(item) => {
                heap.push(std::cmp::Reverse(item));
                while let Ok(item) = rx.try_recv() {
                    heap.push(std::cmp::Reverse(item));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
        }
    }
    w.flush()
}

impl Server {
    /// The transmission phase of one session, until the client disconnects.
    pub fn transmission<R: Read, W: Write + Send + 'static>(&self, r: R, w: W, sess: &Session) -> Result<(), ConnEnd> {
        let mut r = BufReader::with_capacity(256 * 1024, r);
        // A TLS stream has one owner, so its replies cannot come from a second thread: emulated
        // latency is then served by waiting before each reply (no pipelining across the wait).
        let mode = if sess.tls { Latency::None } else { self.opts.latency };
        let mut sink = Sink::new(w, mode);
        let res = self.transmission_loop(&mut r, &mut sink, sess);
        let fin = sink.finish();
        res?;
        fin.map_err(ConnEnd::from)
    }

    fn transmission_loop<R: Read, W: Write + Send + 'static>(
        &self,
        r: &mut BufReader<R>,
        sink: &mut Sink<W>,
        sess: &Session,
    ) -> Result<(), ConnEnd> {
        let mut hdr = [0u8; REQUEST_BYTES];
        let mut buf: Vec<u8> = Vec::new();
        let mut head: Vec<u8> = Vec::with_capacity(64);
        loop {
            if r.buffer().is_empty() {
                sink.flush()?;
            }
            read_exact_or_closed(r, &mut hdr)?;
            let req = parse_request(&hdr)?;
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            if req.kind == CMD_DISC {
                return Ok(());
            }
            head.clear();
            let outcome = self.execute(r, &req, sess, &mut buf);
            let now = Instant::now();
            match outcome {
                Ok((done, data_len)) => {
                    let due = match (self.opts.latency, done) {
                        (Latency::Emulated, Some(t)) => self.backend().wall_of(t),
                        _ => now,
                    };
                    if sess.tls && due > now {
                        sink.flush()?;
                        std::thread::sleep(due - now);
                    }
                    if req.kind == CMD_READ && data_len == 0 {
                        // Nothing to send: an empty data chunk is not allowed.
                        if sess.structured {
                            chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_NONE, req.cookie, 0);
                        } else {
                            simple_reply(&mut head, 0, req.cookie);
                        }
                        sink.send(due, &head, &[])?;
                    } else if req.kind == CMD_READ {
                        if sess.structured {
                            chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, req.cookie, 8 + data_len as u32);
                            head.extend_from_slice(&req.offset.to_be_bytes());
                        } else {
                            simple_reply(&mut head, 0, req.cookie);
                        }
                        sink.send(due, &head, &buf[..data_len])?;
                    } else if req.kind == CMD_BLOCK_STATUS {
                        chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, req.cookie, data_len as u32);
                        sink.send(due, &head, &buf[..data_len])?;
                    } else {
                        simple_reply(&mut head, 0, req.cookie);
                        sink.send(due, &head, &[])?;
                    }
                }
                Err((code, msg)) => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    if sess.structured {
                        error_chunk(&mut head, req.cookie, code, &msg);
                    } else {
                        simple_reply(&mut head, code, req.cookie);
                    }
                    sink.send(now, &head, &[])?;
                }
            }
        }
    }

    /// Execute one request. Ok((completion time, bytes of reply data in `buf`)); Err((NBD
    /// error, message)). A write's payload is always consumed, accepted or not.
    #[allow(clippy::type_complexity)]
    fn execute<R: Read>(&self, r: &mut R, req: &Request, sess: &Session, buf: &mut Vec<u8>) -> Result<(Option<u64>, usize), (u32, String)> {
        let max = self.opts.max_request;
        if req.kind == CMD_WRITE {
            if req.len > max {
                discard(r, req.len as u64).map_err(|_| (EIO, "connection lost".to_string()))?;
                return Err((EINVAL, format!("write of {} bytes exceeds the {max}-byte limit", req.len)));
            }
            buf.resize(req.len as usize, 0);
            read_exact_or_closed(r, &mut buf[..]).map_err(|_| (EIO, "connection lost reading the payload".to_string()))?;
        }
        let allowed = match req.kind {
            CMD_READ => CMD_FLAG_FUA | CMD_FLAG_DF,
            CMD_WRITE | CMD_TRIM | CMD_FLUSH => CMD_FLAG_FUA,
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
            _ => return Err((EINVAL, format!("command {} is not supported", req.kind))),
        };
        if req.flags & !allowed != 0 {
            return Err((EINVAL, format!("flags {:#x} are not valid for command {}", req.flags, req.kind)));
        }
        if req.flags & CMD_FLAG_DF != 0 && !sess.structured {
            return Err((EINVAL, "NBD_CMD_FLAG_DF needs structured replies".into()));
        }
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let size = self.size_of(sess.export, &sess.frozen);
        if req.kind != CMD_FLUSH {
            let end = req.offset.checked_add(req.len as u64);
            if end.is_none_or(|e| e > size) {
                let code = if matches!(req.kind, CMD_WRITE | CMD_WRITE_ZEROES) { ENOSPC } else { EINVAL };
                return Err((code, format!("bytes {}..+{} are beyond the export's {size} bytes", req.offset, req.len)));
            }
        }
        // The metrics export is read-only and served from its frozen contents.
        if sess.export == usize::MAX {
            let f = sess.frozen.as_ref().expect("frozen metrics");
            return match req.kind {
                CMD_READ => {
                    buf.clear();
                    buf.extend_from_slice(&f[req.offset as usize..(req.offset + req.len as u64) as usize]);
                    Ok((None, req.len as usize))
                }
                CMD_FLUSH => Ok((None, 0)),
                CMD_BLOCK_STATUS if sess.meta => Ok((None, block_status(buf, &[(req.len as u64, false)]))),
                CMD_BLOCK_STATUS => Err((EINVAL, "no metadata context was negotiated".into())),
                _ => Err((EPERM, "the metrics export is read-only".into())),
            };
        }
        let e = &self.opts.exports[sess.export];
        if e.read_only && matches!(req.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES) {
            return Err((EPERM, format!("export {:?} is read-only", e.name)));
        }
        if req.len == 0 && matches!(req.kind, CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES) {
            return Ok((None, 0)); // a zero-length request touches nothing
        }
        let at = e.offset + req.offset;
        let io = |x: crate::backend::BackendError| (EIO, x.0);
        match req.kind {
            CMD_READ => {
                if req.len > max {
                    return Err((EINVAL, format!("read of {} bytes exceeds the {max}-byte limit", req.len)));
                }
                buf.resize(req.len as usize, 0);
                let done = self.backend().read(at, &mut buf[..]).map_err(io)?;
                Ok((Some(done), req.len as usize))
            }
            CMD_WRITE => {
                let done = self.backend().write(at, &buf[..], fua, e.placement).map_err(io)?;
                Ok((Some(done), 0))
            }
            CMD_TRIM => Ok((Some(self.backend().trim(at, req.len as u64, fua).map_err(io)?), 0)),
            CMD_WRITE_ZEROES => {
                let no_hole = req.flags & CMD_FLAG_NO_HOLE != 0;
                Ok((Some(self.backend().write_zeroes(at, req.len as u64, no_hole, fua, e.placement).map_err(io)?), 0))
            }
            CMD_FLUSH => Ok((Some(self.backend().flush().map_err(io)?), 0)),
            CMD_BLOCK_STATUS => {
                if !sess.meta {
                    return Err((EINVAL, "no metadata context was negotiated".into()));
                }
                let max_ext = if req.flags & CMD_FLAG_REQ_ONE != 0 { 1 } else { 512 };
                let ext = self.backend().extents(at, req.len as u64, max_ext).map_err(io)?;
                Ok((None, block_status(buf, &ext)))
            }
            _ => Err((EINVAL, format!("command {} is not supported", req.kind))),
        }
    }
}

/// Encode a base:allocation block status payload into `buf`; returns its length.
fn block_status(buf: &mut Vec<u8>, extents: &[(u64, bool)]) -> usize {
    buf.clear();
    buf.extend_from_slice(&BASE_ALLOCATION_ID.to_be_bytes());
    for &(len, hole) in extents {
        buf.extend_from_slice(&(len.min(u32::MAX as u64) as u32).to_be_bytes());
        buf.extend_from_slice(&(if hole { STATE_HOLE | STATE_ZERO } else { 0 }).to_be_bytes());
    }
    buf.len()
}

fn log(quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("ssdlab serve: {msg}");
    }
}

fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u < units.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", units[u])
}

/// Serve until SIGINT/SIGTERM (or `stop` becomes true). SIGUSR1 writes metrics.json.
/// Returns the final metrics.
pub fn serve(srv: Arc<Server>, stop: Option<Arc<AtomicBool>>) -> Result<Value, String> {
    let addr: SocketAddr =
        srv.opts.listen.parse().map_err(|e| format!("--listen {:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:10809)", srv.opts.listen))?;
    if !addr.ip().is_loopback() && srv.tls.is_none() {
        return Err(format!("--listen {addr}: a non-loopback address needs TLS (--tls-cert and --tls-key): NBD traffic is otherwise unencrypted and unauthenticated"));
    }
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let dump = Arc::new(AtomicBool::new(false));
    let mut sig_ids = vec![];
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        sig_ids.push(signal_hook::flag::register(sig, srv.shutdown.clone()).map_err(|e| e.to_string())?);
    }
    sig_ids.push(signal_hook::flag::register(signal_hook::consts::SIGUSR1, dump.clone()).map_err(|e| e.to_string())?);
    {
        let b = srv.backend();
        let rc = &b.recovery;
        log(
            srv.opts.quiet,
            &format!(
                "device ready ({}): {} in {:.3} s{}",
                human(b.logical_bytes()),
                rc.source,
                rc.seconds,
                if rc.journal_records_replayed > 0 || rc.imported_bytes > 0 {
                    format!(
                        " ({} journal records replayed, {} torn dropped, {} imported)",
                        rc.journal_records_replayed,
                        rc.torn_records_dropped,
                        human(rc.imported_bytes)
                    )
                } else {
                    String::new()
                }
            ),
        );
    }
    let names: Vec<String> = srv
        .opts
        .exports
        .iter()
        .map(|e| format!("{} ({}{})", e.name, human(e.size), e.placement.map(|p| format!(", placement {p}")).unwrap_or_default()))
        .collect();
    log(
        srv.opts.quiet,
        &format!(
            "listening on {} (latency {:?}{}); exports: {}, {METRICS_EXPORT}",
            listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            srv.opts.latency,
            if srv.tls.is_some() { ", TLS required" } else { "" },
            names.join(", ")
        ),
    );
    let conns: Arc<Mutex<HashMap<u64, TcpStream>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut threads: Vec<JoinHandle<()>> = vec![];
    let mut next_id = 0u64;
    while !srv.shutdown.load(Ordering::Relaxed) && !stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
        if dump.swap(false, Ordering::Relaxed) {
            match srv.dump_metrics() {
                Ok(Some(p)) => log(srv.opts.quiet, &format!("wrote {}", p.display())),
                Ok(None) => log(srv.opts.quiet, "SIGUSR1: no --metrics-out directory; use `ssdlab stats HOST:PORT`"),
                Err(e) => log(false, &format!("writing metrics failed: {e}")),
            }
        }
        match listener.accept() {
            Ok((s, peer)) => {
                threads.retain(|t| !t.is_finished());
                if srv.active.load(Ordering::Relaxed) >= srv.opts.max_connections {
                    log(srv.opts.quiet, &format!("refused {peer}: {} connections open (--max-connections)", srv.opts.max_connections));
                    drop(s);
                    continue;
                }
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                let id = next_id;
                next_id += 1;
                if let Ok(c) = s.try_clone() {
                    conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, c);
                }
                srv.active.fetch_add(1, Ordering::Relaxed);
                srv.counters.connections.fetch_add(1, Ordering::Relaxed);
                let (srv2, conns2) = (srv.clone(), conns.clone());
                threads.push(std::thread::spawn(move || {
                    let end = connection(&srv2, s);
                    match end {
                        ConnEnd::Closed => {}
                        ConnEnd::Protocol(m) => {
                            srv2.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                            log(srv2.opts.quiet, &format!("{peer}: dropped: {m}"));
                        }
                        ConnEnd::Io(e) => log(srv2.opts.quiet, &format!("{peer}: {e}")),
                    }
                    conns2.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    srv2.active.fetch_sub(1, Ordering::Relaxed);
                }));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                log(false, &format!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    srv.shutdown.store(true, Ordering::Relaxed);
    log(srv.opts.quiet, "shutting down");
    for (_, c) in conns.lock().unwrap_or_else(|e| e.into_inner()).drain() {
        let _ = c.shutdown(std::net::Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    srv.backend().snapshot().map_err(|e| format!("saving the device state failed: {e}"))?;
    if let Ok(Some(p)) = srv.dump_metrics() {
        log(srv.opts.quiet, &format!("wrote {}", p.display()));
    }
    Ok(srv.metrics())
}

fn connection(srv: &Server, mut s: TcpStream) -> ConnEnd {
    let mut run = || -> Result<(), ConnEnd> {
        // A client that connects and says nothing must not hold a connection slot forever;
        // once in transmission, idle clients (a guest with nothing to do) are fine.
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let mut st = srv.greeting(&mut s)?;
        match srv.options(&mut s, false, &mut st)? {
            Haggle::Closed => Ok(()),
            Haggle::Go(sess) => {
                s.set_read_timeout(None)?;
                let r = s.try_clone()?;
                srv.transmission(r, s.try_clone()?, &sess)
            }
            Haggle::StartTls => {
                let cfg = srv.tls.clone().expect("STARTTLS is only accepted with TLS configured");
                let conn = rustls::ServerConnection::new(cfg).map_err(|e| ConnEnd::Protocol(format!("TLS: {e}")))?;
                let tls = Arc::new(Mutex::new(rustls::StreamOwned::new(conn, s.try_clone()?)));
                let mut io = TlsIo(tls);
                match srv.options(&mut io, true, &mut st)? {
                    Haggle::Go(sess) => {
                        s.set_read_timeout(None)?;
                        srv.transmission(io.clone(), io, &sess)
                    }
                    _ => Ok(()),
                }
            }
        }
    };
    match run() {
        Ok(()) => ConnEnd::Closed,
        Err(e) => e,
    }
}

/// A TLS stream shared by the reading and the writing side of one connection thread.
#[derive(Clone)]
struct TlsIo(Arc<Mutex<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>>);

impl Read for TlsIo {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).read(b)
    }
}

impl Write for TlsIo {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}
