//! The NBD server: fixed newstyle handshake, transmission with simple or structured replies,
//! several exports of one emulated device, latency modes, limits, clean shutdown.
//!
//! The server is a [`ssdlab_server::Protocol`]: the core (crates/server) accepts, limits, times
//! out and shuts down; this module speaks NBD. A connection is an async task that reads
//! requests and executes them on the shared [`Disk`] (one lock: the device is one
//! timeline). Replies are collected while more requests are waiting and sent together when
//! the client has nothing more queued; right before they go out, the journal records of the
//! requests they acknowledge are written with one `write(2)` (group commit), so every reply
//! still follows its journal record. In `emulated` latency mode a writer task per connection
//! sends each reply at the wall-clock moment the emulated SSD completes the command (FEMU's
//! approach), so clients measure the device's latency distribution.
//!
//! Beside this file (settings, the shared state, transmission, serving): `handshake.rs` the
//! greeting and the option haggling.

mod handshake;

use std::io::{self, ErrorKind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use ssdlab_server::{Conn, ListenOptions, Pace, ServeError, Stats};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::disk::Disk;
use crate::proto::*;

pub use ssdlab_server::ConnEnd;

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

/// Server settings: the listener's (shared by every ssdlab server; with TLS every client must
/// STARTTLS, the protocol's FORCEDTLS mode, and non-loopback addresses are allowed) and NBD's
/// own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NbdOptions {
    /// Address, loopback opt-in, TLS files, connection limit and deadlines (no idle timeout by
    /// default: an idle guest keeps its disk).
    #[serde(flatten)]
    pub listen: ListenOptions,
    pub exports: Vec<Export>,
    pub latency: Latency,
    /// Largest read or write payload accepted (bytes).
    pub max_request: u32,
    /// Where metrics.json goes at exit and on SIGUSR1 (None: only on request).
    pub metrics_out: Option<PathBuf>,
    pub quiet: bool,
    /// The command's name in log lines ("ssdlab serve").
    #[serde(default = "default_name")]
    pub name: String,
}

fn default_name() -> String {
    "ssdlab serve".into()
}

/// NBD's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

impl NbdOptions {
    /// Options for tests and embedders: loopback, port 0, default limits, quiet.
    pub fn new(exports: Vec<Export>) -> NbdOptions {
        NbdOptions {
            listen: ListenOptions::default(),
            exports,
            latency: Latency::None,
            max_request: 32 << 20,
            metrics_out: None,
            quiet: true,
            name: default_name(),
        }
    }
}

/// Smallest and largest accepted `--max-request`: one sector, and 2^31 - 1 bytes (the length
/// field of a request is 32 bits; replies carry the payload in one chunk).
pub const MAX_REQUEST_MIN: u32 = 512;
pub const MAX_REQUEST_MAX: u32 = i32::MAX as u32;

/// The read-only export whose contents are the live metrics.json.
pub const METRICS_EXPORT: &str = "ssdlab-metrics";

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    errors: AtomicU64,
}

/// The NBD protocol and the disk it serves, shared by all connections.
pub struct Server {
    backend: Mutex<Box<dyn Disk>>,
    opts: NbdOptions,
    /// TLS configured: every client must STARTTLS (the core holds the certificate).
    tls: bool,
    shutdown: Arc<AtomicBool>,
    counters: Counters,
    /// The core's connection counters (connections, refusals, timeouts, protocol errors).
    core: Arc<Stats>,
    started: Instant,
}

fn proto_err(e: ProtoError) -> ConnEnd {
    ConnEnd::Protocol(e.0)
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

async fn read_exact_or_closed<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<(), ConnEnd> {
    r.read_exact(buf).await.map(|_| ()).map_err(ConnEnd::from)
}

/// Read and drop `n` bytes (a payload the server refuses), without allocating it.
async fn discard<R: AsyncRead + Unpin>(r: &mut R, mut n: u64) -> Result<(), ConnEnd> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        read_exact_or_closed(r, &mut buf[..k]).await?;
        n -= k as u64;
    }
    Ok(())
}

impl Server {
    pub fn new(backend: impl Disk + 'static, opts: NbdOptions) -> Result<Arc<Server>, ServeError> {
        let bad = |m: String| Err(ServeError::BadOption(m));
        let size = backend.logical_bytes();
        for e in &opts.exports {
            if e.name == METRICS_EXPORT {
                return bad(format!("export name {METRICS_EXPORT:?} is reserved for the live metrics"));
            }
            if e.size == 0 || e.offset.checked_add(e.size).is_none_or(|end| end > size) {
                return bad(format!(
                    "export {:?}: bytes {}..{} are not inside the device's {size} bytes",
                    e.name,
                    e.offset,
                    e.offset.saturating_add(e.size)
                ));
            }
            if e.name.len() > 4096 {
                return bad("export names are at most 4096 bytes".into());
            }
        }
        if opts.exports.is_empty() {
            return bad("no exports".into());
        }
        let mut names: Vec<&str> = opts.exports.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return bad("export names must be unique".into());
        }
        if !(MAX_REQUEST_MIN..=MAX_REQUEST_MAX).contains(&opts.max_request) {
            return bad(format!(
                "--max-request {}: must be in {MAX_REQUEST_MIN}..={MAX_REQUEST_MAX} bytes (no client could read or write a sector otherwise)",
                opts.max_request
            ));
        }
        opts.listen.check()?;
        Ok(Arc::new(Server {
            backend: Mutex::new(Box::new(backend)),
            tls: opts.listen.tls.is_some(),
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            counters: Counters::default(),
            core: Arc::new(Stats::default()),
            started: Instant::now(),
        }))
    }

    fn backend(&self) -> MutexGuard<'_, Box<dyn Disk>> {
        // A panic elsewhere must not take every connection down with it.
        ssdlab_server::lock(&self.backend)
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// metrics.json now: the device's report plus the server's own figures.
    pub fn metrics(&self) -> Value {
        let mut m = self.backend().metrics();
        m["nbd"] = json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "connections_total": Stats::get(&self.core.connections_total),
            "connections_active": Stats::get(&self.core.connections_active),
            "connections_refused": Stats::get(&self.core.refused),
            "connections_evicted": Stats::get(&self.core.evicted),
            "connections_abandoned": Stats::get(&self.core.abandoned),
            "handshake_timeouts": Stats::get(&self.core.handshake_timeouts),
            "idle_timeouts": Stats::get(&self.core.idle_timeouts),
            "request_timeouts": Stats::get(&self.core.request_timeouts),
            "requests": self.counters.requests.load(Ordering::Relaxed),
            "request_errors": self.counters.errors.load(Ordering::Relaxed),
            "protocol_errors": Stats::get(&self.core.protocol_errors),
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
}

/// Replies larger than this bypass the reply buffer (after it is sent).
const REPLY_BUFFER_BYTES: usize = 256 * 1024;

/// Where replies go. Replies wait in `buf` (or, with emulated latency, in `due`) until
/// [`Replies::send`]: it first commits the journal records of everything executed so far
/// (one `write(2)` for all the requests in flight), then hands the replies to the socket, or
/// to the writer task that sends each at its emulated completion time.
struct Replies<W: AsyncWrite + Unpin + Send + 'static> {
    w: Option<W>,
    buf: Vec<u8>,
    delayed: Option<Delayed>,
}

struct Delayed {
    tx: Option<tokio::sync::mpsc::UnboundedSender<(Instant, u64, Vec<u8>)>>,
    seq: u64,
    due: Vec<(Instant, Vec<u8>)>,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Replies<W> {
    fn new(w: W, latency: Latency) -> Self {
        match latency {
            Latency::None => Replies { w: Some(w), buf: Vec::with_capacity(REPLY_BUFFER_BYTES), delayed: None },
            Latency::Emulated => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let task = tokio::spawn(ssdlab_server::delayed::writer(w, rx));
                Replies { w: None, buf: Vec::new(), delayed: Some(Delayed { tx: Some(tx), seq: 0, due: vec![], task: Some(task) }) }
            }
        }
    }

    /// Queue `head` then `data` as one reply, due at `due`.
    async fn push(&mut self, srv: &Server, due: Instant, head: &[u8], data: &[u8]) -> Result<(), ConnEnd> {
        if let Some(d) = self.delayed.as_mut() {
            let mut v = Vec::with_capacity(head.len() + data.len());
            v.extend_from_slice(head);
            v.extend_from_slice(data);
            d.due.push((due, v));
            return Ok(());
        }
        if self.buf.len() + head.len() + data.len() > REPLY_BUFFER_BYTES {
            self.send(srv).await?;
            if head.len() + data.len() > REPLY_BUFFER_BYTES {
                // A large read: straight to the socket (reads need no journal record, and
                // the records of earlier requests were committed by send()).
                let w = self.w.as_mut().expect("direct replies have a writer");
                w.write_all(head).await?;
                w.write_all(data).await?;
                return Ok(());
            }
        }
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// Commit the journal, then let the queued replies go.
    async fn send(&mut self, srv: &Server) -> Result<(), ConnEnd> {
        srv.backend().commit_journal().map_err(|e| ConnEnd::Io(io::Error::other(format!("journal: {e}"))))?;
        if let Some(d) = self.delayed.as_mut() {
            let tx = d.tx.as_ref().expect("open until finish");
            for (due, bytes) in d.due.drain(..) {
                d.seq += 1;
                tx.send((due, d.seq, bytes)).map_err(|_| io::Error::new(ErrorKind::BrokenPipe, "reply writer ended"))?;
            }
            return Ok(());
        }
        let w = self.w.as_mut().expect("direct replies have a writer");
        if !self.buf.is_empty() {
            w.write_all(&self.buf).await?;
            self.buf.clear();
        }
        w.flush().await?;
        Ok(())
    }

    /// Send what is queued and wait for pending delayed replies.
    async fn finish(&mut self, srv: &Server) -> Result<(), ConnEnd> {
        self.send(srv).await?;
        if let Some(d) = self.delayed.as_mut() {
            drop(d.tx.take());
            if let Some(t) = d.task.take() {
                t.await.map_err(|_| io::Error::other("reply writer panicked"))??;
            }
        }
        Ok(())
    }
}

impl Server {
    /// A whole session on a stream without TLS: handshake, then transmission (tests and
    /// embedders; the network path is [`ssdlab_server::Protocol::serve`]).
    pub async fn session<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, mut s: S) -> Result<(), ConnEnd> {
        match self.handshake(&mut s).await? {
            Some(sess) => self.transmission(s, &sess, &Pace::none()).await,
            None => Ok(()),
        }
    }

    /// The transmission phase of one session, until the client disconnects.
    pub async fn transmission<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        &self,
        s: S,
        sess: &Session,
        pace: &Pace,
    ) -> Result<(), ConnEnd> {
        let (r, w) = tokio::io::split(s);
        let mut r = BufReader::with_capacity(256 * 1024, r);
        let mut out = Replies::new(w, self.opts.latency);
        let res = self.transmission_loop(&mut r, &mut out, sess, pace).await;
        let fin = out.finish(self).await;
        res?;
        fin
    }

    async fn transmission_loop<R: AsyncRead + Unpin, W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        r: &mut BufReader<R>,
        out: &mut Replies<W>,
        sess: &Session,
        pace: &Pace,
    ) -> Result<(), ConnEnd> {
        let mut hdr = [0u8; REQUEST_BYTES];
        let mut buf: Vec<u8> = Vec::new();
        let mut head: Vec<u8> = Vec::with_capacity(64);
        let max = self.opts.max_request;
        loop {
            pace.end();
            if r.buffer().is_empty() {
                // The client has nothing more queued: journal, then replies.
                out.send(self).await?;
            }
            if r.fill_buf().await?.is_empty() {
                return Err(ConnEnd::Closed);
            }
            pace.begin();
            read_exact_or_closed(r, &mut hdr).await?;
            let req = parse_request(&hdr).map_err(proto_err)?;
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            if req.kind == CMD_DISC {
                return Ok(());
            }
            head.clear();
            // A write's payload is always consumed, accepted or not.
            let mut oversize = false;
            if req.kind == CMD_WRITE {
                if req.len > max {
                    discard(r, req.len as u64).await?;
                    oversize = true;
                } else {
                    // Grown as the bytes arrive: a declared length costs no memory before the
                    // client sends it.
                    buf.clear();
                    buf.reserve(req.len.min(r.buffer().len() as u32 + (256 << 10)) as usize);
                    (&mut *r).take(req.len as u64).read_to_end(&mut buf).await?;
                    if buf.len() != req.len as usize {
                        return Err(ConnEnd::Closed); // the client left in the middle of the payload
                    }
                }
            }
            let outcome = if oversize {
                Err((EINVAL, format!("write of {} bytes exceeds the {max}-byte limit", req.len)))
            } else if req.kind == CMD_FLUSH || req.flags & CMD_FLAG_FUA != 0 {
                ssdlab_server::blocking(|| self.execute(&req, sess, &mut buf))
            } else {
                self.execute(&req, sess, &mut buf)
            };
            let now = Instant::now();
            match outcome {
                Ok((done, data_len)) => {
                    let due = match (self.opts.latency, done) {
                        (Latency::Emulated, Some(t)) => self.backend().wall_of(t),
                        _ => now,
                    };
                    if req.kind == CMD_READ && data_len == 0 {
                        // Nothing to send: an empty data chunk is not allowed.
                        if sess.structured {
                            chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_NONE, req.cookie, 0);
                        } else {
                            simple_reply(&mut head, 0, req.cookie);
                        }
                        out.push(self, due, &head, &[]).await?;
                    } else if req.kind == CMD_READ {
                        if sess.structured {
                            chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, req.cookie, 8 + data_len as u32);
                            head.extend_from_slice(&req.offset.to_be_bytes());
                        } else {
                            simple_reply(&mut head, 0, req.cookie);
                        }
                        out.push(self, due, &head, &buf[..data_len]).await?;
                    } else if req.kind == CMD_BLOCK_STATUS {
                        chunk_header(&mut head, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, req.cookie, data_len as u32);
                        out.push(self, due, &head, &buf[..data_len]).await?;
                    } else {
                        simple_reply(&mut head, 0, req.cookie);
                        out.push(self, due, &head, &[]).await?;
                    }
                }
                Err((code, msg)) => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    if sess.structured {
                        error_chunk(&mut head, req.cookie, code, &msg);
                    } else {
                        simple_reply(&mut head, code, req.cookie);
                    }
                    out.push(self, now, &head, &[]).await?;
                }
            }
        }
    }

    /// Execute one request (a write's payload is in `buf`). Ok((completion time, bytes of
    /// reply data in `buf`)); Err((NBD error, message)).
    #[allow(clippy::type_complexity)]
    fn execute(&self, req: &Request, sess: &Session, buf: &mut Vec<u8>) -> Result<(Option<u64>, usize), (u32, String)> {
        let max = self.opts.max_request;
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
        let io = |x: crate::disk::BackendError| (EIO, x.0);
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

impl ssdlab_server::Protocol for Server {
    async fn serve(self: Arc<Self>, mut conn: Conn) -> ConnEnd {
        let end = async {
            let mut st = self.greeting(&mut conn).await?;
            let sess = match self.options(&mut conn, false, &mut st).await? {
                Haggle::Closed => return Ok(()),
                Haggle::Go(sess) => sess,
                Haggle::StartTls => {
                    conn.start_tls().await.map_err(|e| ConnEnd::Protocol(format!("TLS: {e}")))?;
                    match self.options(&mut conn, true, &mut st).await? {
                        Haggle::Go(sess) => sess,
                        _ => return Ok(()),
                    }
                }
            };
            // In transmission an idle client (a guest with nothing to do) is fine.
            conn.established();
            let pace = conn.pace();
            self.transmission(conn, &sess, &pace).await
        };
        match end.await {
            Ok(()) => ConnEnd::Closed,
            Err(e) => e,
        }
    }

    fn on_usr1(&self) {
        let log = |m: String| eprintln!("{}: {m}", self.opts.name);
        match self.dump_metrics() {
            Ok(Some(p)) => {
                if !self.opts.quiet {
                    log(format!("wrote {}", p.display()))
                }
            }
            Ok(None) => {
                if !self.opts.quiet {
                    log("SIGUSR1: no --metrics-out directory; use `ssdlab stats HOST:PORT`".into())
                }
            }
            Err(e) => log(format!("writing metrics failed: {e}")),
        }
    }

    fn on_shutdown(&self) -> Result<(), ServeError> {
        self.shutdown.store(true, Ordering::Relaxed);
        self.backend().snapshot().map_err(|e| ServeError::Failed(format!("saving the device state failed: {e}")))?;
        match self.dump_metrics() {
            Ok(Some(p)) if !self.opts.quiet => eprintln!("{}: wrote {}", self.opts.name, p.display()),
            Ok(_) => {}
            Err(e) => return Err(ServeError::Failed(format!("writing metrics to {:?} failed: {e}", self.opts.metrics_out))),
        }
        Ok(())
    }
}

/// Serve until SIGINT/SIGTERM (or `stop` returns true, polled every 100 ms). SIGUSR1 writes
/// metrics.json. Returns the final metrics.
pub fn serve(srv: Arc<Server>, stop: Option<&dyn Fn() -> bool>) -> Result<Value, ServeError> {
    let core_opts = srv.opts.listen.apply(ssdlab_server::Options {
        name: srv.opts.name.clone(),
        request_timeout: Some(ssdlab_server::DEFAULT_REQUEST_TIMEOUT),
        tls_mode: ssdlab_server::TlsMode::StartTls,
        tls_supported: true,
        quiet: srv.opts.quiet,
        signals: true,
        worker_threads: 0,
        log_interval: Duration::from_secs(5),
        stats: srv.core.clone(),
        ..ssdlab_server::Options::default()
    });
    let server = ssdlab_server::Server::bind(core_opts, srv.clone())?;
    {
        let b = srv.backend();
        server.log().info(format!("device ready ({}): {}", human(b.logical_bytes()), b.describe()));
    }
    let names: Vec<String> = srv
        .opts
        .exports
        .iter()
        .map(|e| format!("{} ({}{})", e.name, human(e.size), e.placement.map(|p| format!(", placement {p}")).unwrap_or_default()))
        .collect();
    server.log().info(format!(
        "listening on {} (latency {:?}{}); exports: {}, {METRICS_EXPORT}",
        server.local_addr(),
        srv.opts.latency,
        if srv.tls { ", TLS required" } else { "" },
        names.join(", ")
    ));
    server.run(stop)?;
    Ok(srv.metrics())
}
