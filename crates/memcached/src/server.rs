//! The memcached server: a [`ssdlab_server::Protocol`] on ssdlab's async server core (which
//! accepts, limits connections, cuts idle ones when the slots run out, applies the loopback
//! rule and shuts down on SIGINT/SIGTERM), with the data-backed cache behind one lock (the
//! device is one timeline), stats with ssdlab's device figures.
//!
//! Time: the cache and the device follow the wall clock since the server started (a request
//! is submitted at its arrival, and idle dies collect garbage between requests), so a served
//! run is not byte-identical to another; simulations (`ssdlab cache run`) are.
//!
//! Beside this file (the settings, the shared state, the session loop, serving): `exec.rs`
//! the text commands against the cache, `meta.rs` the meta commands, `stats.rs` the stats.

mod exec;
mod meta;
mod stats;

use std::io::{self, ErrorKind};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use ssdlab_cache::cache::cache_seconds;
use ssdlab_cache::item::ITEM_HEADER_BYTES;
use ssdlab_cache::{CacheError, HybridCache};
use ssdlab_core::ftl::conventional::StreamStats;
use ssdlab_server::{Conn, ConnEnd, ListenOptions, Pace, Refused, ServeError, Stats};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::proto::{self, Command, MetaKind, BINARY_REQUEST_MAGIC, KEY_BYTES_MAX, RELATIVE_EXPTIME_MAX};

/// Reported by `version`: the memcached protocol level spoken, then ssdlab's version.
pub const VERSION: &str = concat!("1.6.0-ssdlab-", env!("CARGO_PKG_VERSION"));

/// Lines other than multi-gets longer than this close the connection (memcached: 2048 bytes
/// buffered without a newline; a legal line is under 300).
pub const SHORT_LINE_MAX: usize = 8 << 10;

/// Server settings: the listener's (shared by every ssdlab server) and memcached's own.
#[derive(Debug, Clone)]
pub struct MemcachedOptions {
    /// Address, loopback opt-in (the protocol has no authentication: anyone who reaches the
    /// port reads and writes the cache), connection limit and deadlines. By default no idle
    /// timeout, as memcached.
    pub listen: ListenOptions,
    /// Largest value a client may store (0: the default, 1 MiB or what a LOC region holds).
    pub max_value_bytes: u64,
    /// Longest multi-get line (`get`/`gets`/`gat`/`gats` of many keys); memcached has no
    /// limit, ssdlab bounds a connection's buffer with this.
    pub max_line_bytes: usize,
    pub quiet: bool,
}

/// memcached's port and a connection limit for a lab's clients.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:11211";
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

impl Default for MemcachedOptions {
    fn default() -> Self {
        MemcachedOptions {
            listen: ListenOptions::on(DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS),
            max_value_bytes: 0,
            max_line_bytes: 8 << 20,
            quiet: false,
        }
    }
}

pub const DEFAULT_MAX_VALUE_BYTES: u64 = 1 << 20;

/// Counters kept under the cache lock (memcached's names and meanings).
#[derive(Default, Clone, Copy)]
struct Ops {
    cmd_get: u64,
    get_hits: u64,
    get_misses: u64,
    cmd_set: u64,
    cmd_touch: u64,
    cmd_flush: u64,
    total_items: u64,
    delete_hits: u64,
    delete_misses: u64,
    incr_hits: u64,
    incr_misses: u64,
    decr_hits: u64,
    decr_misses: u64,
    cas_hits: u64,
    cas_misses: u64,
    cas_badval: u64,
    touch_hits: u64,
    touch_misses: u64,
    store_too_large: u64,
    server_errors: u64,
}

struct State {
    cache: HybridCache,
    ops: Ops,
    /// FDP stream counters at start (per-handle DLWA is since then).
    streams0: Vec<StreamStats>,
    /// A delayed `flush_all`: when (server nanoseconds) everything stored before goes.
    flush_at_ns: Option<u64>,
}

/// State shared by the connections.
pub struct Server {
    state: Mutex<State>,
    opts: MemcachedOptions,
    max_value_bytes: u64,
    shutdown: Arc<AtomicBool>,
    core: Arc<Stats>,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    started: Instant,
    /// A broken invariant seen by a connection (a panic): the server stops and reports it.
    pub(crate) failure: Mutex<Option<String>>,
}

/// When an item expires, in cache seconds (memcached's rules: 0 never; negative at once; up
/// to 30 days relative; larger values are Unix times).
fn expiry_s(exptime: i64, now_ns: u64) -> u32 {
    let now_s = cache_seconds(now_ns);
    let rel = if exptime == 0 {
        return 0;
    } else if exptime < 0 {
        0
    } else if exptime <= RELATIVE_EXPTIME_MAX {
        exptime
    } else {
        (exptime - unix_now_s() as i64).max(0)
    };
    // `now_s` itself is already expired (expiry <= now): a negative or past time.
    now_s.saturating_add(rel.min(u32::MAX as i64) as u32).min(u32::MAX - 1)
}

fn unix_now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A ratio to 6 decimals, 0 when nothing was asked (the stats' hit ratios and DLWA).
fn ratio(a: u64, b: u64) -> f64 {
    ssdlab_core::metrics::round6(ssdlab_core::metrics::ratio(a, b))
}

fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A reply line unless the client said `noreply` (which memcached honours for errors too).
fn reply(out: &mut Vec<u8>, s: &str, noreply: bool) {
    if !noreply {
        line(out, s);
    }
}

impl Server {
    /// A server for `cache` (built with `HybridCache::data_backed`). Checks the limits.
    pub fn new(cache: HybridCache, opts: MemcachedOptions) -> Result<Arc<Server>, ServeError> {
        let bad = |m: String| Err(ServeError::BadOption(m));
        if !cache.is_data_backed() {
            return bad("the memcached server needs a data-backed cache (HybridCache::data_backed)".into());
        }
        opts.listen.check()?;
        if opts.max_line_bytes < SHORT_LINE_MAX {
            return bad(format!("max_line_bytes {}: at least {SHORT_LINE_MAX}", opts.max_line_bytes));
        }
        // A value must fit a LOC region with the longest key and the item header.
        let region = cache.loc.region_bytes;
        let room = region.saturating_sub(KEY_BYTES_MAX as u64 + ITEM_HEADER_BYTES as u64);
        let max_value_bytes = if opts.max_value_bytes == 0 { DEFAULT_MAX_VALUE_BYTES.min(room) } else { opts.max_value_bytes };
        if max_value_bytes > room {
            return bad(format!(
                "--max-value-bytes {max_value_bytes}: an item (value + key of up to {KEY_BYTES_MAX} bytes + {ITEM_HEADER_BYTES}-byte header) must fit a LOC region of {region} bytes, so at most {room}; lower it or raise cache.region_bytes"
            ));
        }
        if max_value_bytes == 0 {
            return bad(format!("cache.region_bytes {region} leaves no room for values"));
        }
        let dev = &cache.flash.dev;
        let streams0 =
            if dev.config().personality == ssdlab_core::config::Personality::Conventional { dev.ftl().stream_stats() } else { vec![] };
        Ok(Arc::new(Server {
            state: Mutex::new(State { cache, ops: Ops::default(), streams0, flush_at_ns: None }),
            max_value_bytes,
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            core: Arc::new(Stats::default()),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            started: Instant::now(),
            failure: Mutex::new(None),
        }))
    }

    /// The cache, with a due delayed `flush_all` applied.
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in one connection (a broken invariant, reported there) must not stop the
        // others from being answered or the server from shutting down.
        let mut st = ssdlab_server::lock(&self.state);
        if st.flush_at_ns.is_some_and(|t| self.now_ns() >= t) {
            st.flush_at_ns = None;
            st.cache.flush_all();
        }
        st
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    pub fn max_value_bytes(&self) -> u64 {
        self.max_value_bytes
    }

    /// Simulated time now: nanoseconds of wall clock since the server started.
    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Run `f` on the cache under the server's lock (tests, embedding).
    pub fn with_cache<R>(&self, f: impl FnOnce(&mut HybridCache) -> R) -> R {
        f(&mut self.state().cache)
    }

    /// Verify that the cache's index and the bytes on the device agree (tests).
    pub fn verify_data(&self) -> Result<(u64, u64, u64), CacheError> {
        self.state().cache.verify_data()
    }

    fn server_error(&self, st: &mut State, e: CacheError) -> String {
        st.ops.server_errors += 1;
        let msg = e.to_string().replace(['\r', '\n'], " ");
        if !self.opts.quiet {
            eprintln!("ssdlab cache serve: {msg}");
        }
        format!("SERVER_ERROR {msg}")
    }

    /// Run `f` (cache work) catching a panic: a broken invariant (e.g. device bytes that
    /// disagree with the index) means the cache can no longer be trusted, so the server stops
    /// loudly, and this connection ends without an answer.
    fn guarded<R>(&self, f: impl FnOnce() -> R) -> Result<R, ConnEnd> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
            let m = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            eprintln!("ssdlab cache serve: internal error, shutting down: {m}");
            ssdlab_server::lock(&self.failure).get_or_insert(m.clone());
            self.shutdown.store(true, Ordering::Relaxed);
            ConnEnd::Protocol(format!("internal error: {m}"))
        })
    }

    async fn session(&self, conn: Conn) -> Result<(), ConnEnd> {
        // memcached has no handshake: the idle rules apply from the first byte.
        conn.established();
        let pace = conn.pace();
        self.session_on(conn, &pace).await
    }

    /// A client's session on any byte stream (a connection, or bytes in memory when fuzzing);
    /// `pace` is told where each command begins and ends.
    pub(crate) async fn session_on<S: AsyncRead + AsyncWrite + Unpin>(&self, stream: S, pace: &Pace) -> Result<(), ConnEnd> {
        let mut r = BufReader::with_capacity(16 << 10, stream);
        let mut out: Vec<u8> = Vec::with_capacity(4096);
        let mut line_buf: Vec<u8> = Vec::with_capacity(256);
        let res = self.commands(&mut r, &mut out, &mut line_buf, pace).await;
        // Whatever was answered goes out, also before a close.
        let flushed = if out.is_empty() { Ok(()) } else { self.send(&mut r, &mut out).await };
        res?;
        flushed.map_err(ConnEnd::from)
    }

    async fn send<S: AsyncRead + AsyncWrite + Unpin>(&self, r: &mut BufReader<S>, out: &mut Vec<u8>) -> io::Result<()> {
        r.get_mut().write_all(out).await?;
        self.bytes_written.fetch_add(out.len() as u64, Ordering::Relaxed);
        out.clear();
        Ok(())
    }

    async fn commands<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        r: &mut BufReader<S>,
        out: &mut Vec<u8>,
        line_buf: &mut Vec<u8>,
        pace: &Pace,
    ) -> Result<(), ConnEnd> {
        loop {
            pace.end();
            // Replies go out before waiting for bytes: when nothing more is buffered, or only
            // part of the next command line (its sender may be slow; the answers to the
            // commands before it are owed now).
            if !out.is_empty() && !r.buffer().contains(&b'\n') {
                self.send(r, out).await?;
            }
            let first = match r.fill_buf().await?.first() {
                None => return Ok(()),
                Some(&b) => b,
            };
            pace.begin();
            if first == BINARY_REQUEST_MAGIC {
                let mut header = [0u8; 24];
                // A binary header is 24 bytes; answer with what arrives within a second.
                let n = tokio::time::timeout(Duration::from_secs(1), r.read_exact(&mut header)).await.map_or(1, |x| x.map_or(1, |_| 24));
                out.extend_from_slice(&proto::binary_refusal(&header[..n]));
                return Err(ConnEnd::Protocol("a binary-protocol request (this server speaks the text protocol)".into()));
            }
            match self.read_line(r, line_buf).await {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::InvalidData => {
                    let msg = e.to_string();
                    line(out, &msg);
                    return Err(ConnEnd::Protocol(msg));
                }
                Err(e) => return Err(e.into()),
            }
            self.bytes_read.fetch_add(line_buf.len() as u64 + 1, Ordering::Relaxed);
            match proto::parse(line_buf, self.max_value_bytes) {
                Ok(Command::Quit) => return Ok(()),
                Ok(Command::Get { keys, cas, touch, bad_key }) => {
                    for key in keys {
                        self.guarded(|| self.get_one(key, cas, touch, out))?;
                        if out.len() >= 256 << 10 {
                            self.send(r, out).await?;
                        }
                    }
                    line(out, if bad_key { "CLIENT_ERROR bad command line format" } else { "END" });
                }
                Ok(cmd) => {
                    let mut data = vec![];
                    let block = match cmd {
                        Command::Store { bytes, noreply, .. } => Some((bytes, noreply)),
                        Command::Meta { kind: MetaKind::Set, datalen, .. } => Some((datalen, false)),
                        _ => None,
                    };
                    if let Some((bytes, noreply)) = block {
                        if !out.is_empty() && r.buffer().len() < bytes as usize + 2 {
                            // The data block is not all here: answer what came before it first.
                            self.send(r, out).await?;
                        }
                        // Grown as the bytes arrive: a declared length costs no memory before
                        // the client sends it.
                        let want = bytes as u64 + 2;
                        data.reserve_exact(want.min(r.buffer().len() as u64 + (64 << 10)) as usize);
                        (&mut *r).take(want).read_to_end(&mut data).await?;
                        if data.len() as u64 != want {
                            return Err(ConnEnd::Closed); // the client left in the middle of the block
                        }
                        self.bytes_read.fetch_add(data.len() as u64, Ordering::Relaxed);
                        if !data.ends_with(b"\r\n") {
                            self.state().ops.cmd_set += 1;
                            reply(out, "CLIENT_ERROR bad data chunk", noreply);
                            continue;
                        }
                        data.truncate(bytes as usize);
                    }
                    self.guarded(|| self.execute(cmd, data, out))?;
                }
                Err(f) => {
                    if f.skip_bytes > 0 {
                        let n = tokio::io::copy(&mut (&mut *r).take(f.skip_bytes), &mut tokio::io::sink()).await?;
                        self.bytes_read.fetch_add(n, Ordering::Relaxed);
                        if n < f.skip_bytes {
                            return Ok(());
                        }
                    }
                    self.guarded(|| self.refused_line(&f))?;
                    if f.close {
                        if !f.reply.is_empty() {
                            line(out, &f.reply);
                        }
                        return Err(ConnEnd::Protocol(if f.reply.is_empty() { "an HTTP request".into() } else { f.reply }));
                    }
                    reply(out, &f.reply, f.noreply);
                }
            }
        }
    }

    /// Read a line (up to `\n`, `\r` stripped) into `out`. Ok(false) at a clean end of stream;
    /// an error of kind InvalidData for an over-long line (only multi-gets may be long).
    async fn read_line<S: AsyncRead + Unpin>(&self, r: &mut BufReader<S>, out: &mut Vec<u8>) -> io::Result<bool> {
        out.clear();
        loop {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                return if out.is_empty() { Ok(false) } else { Err(io::Error::new(ErrorKind::UnexpectedEof, "partial line")) };
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            let len = out.len() + take;
            if len > SHORT_LINE_MAX || len > self.opts.max_line_bytes {
                let mut head = out[..out.len().min(16)].to_vec();
                head.extend_from_slice(&buf[..take.min(16)]);
                if !proto::is_get_line(&head) || len > self.opts.max_line_bytes {
                    let max = if proto::is_get_line(&head) { self.opts.max_line_bytes } else { SHORT_LINE_MAX };
                    return Err(io::Error::new(
                        ErrorKind::InvalidData,
                        format!("CLIENT_ERROR line longer than {max} bytes (only get/gets/gat/gats lines may be long)"),
                    ));
                }
            }
            out.extend_from_slice(&buf[..take]);
            r.consume(take + done as usize);
            if done {
                if out.last() == Some(&b'\r') {
                    out.pop();
                }
                return Ok(true);
            }
        }
    }
}

impl ssdlab_server::Protocol for Server {
    async fn serve(self: Arc<Self>, conn: Conn) -> ConnEnd {
        match self.session(conn).await {
            Ok(()) => ConnEnd::Closed,
            Err(e) => e,
        }
    }

    fn refusal(&self, _why: Refused) -> Vec<u8> {
        format!("SERVER_ERROR too many open connections (--max-connections {})\r\n", self.opts.listen.max_connections).into_bytes()
    }
}

fn core_options(srv: &Server) -> ssdlab_server::Options {
    srv.opts.listen.apply(ssdlab_server::Options {
        name: "ssdlab cache serve".into(),
        tls_supported: false,
        quiet: srv.opts.quiet,
        stats: srv.core.clone(),
        ..ssdlab_server::Options::default()
    })
}

/// Serve on `opts.listen` (loopback unless `allow_remote`: the protocol has no authentication) until
/// SIGINT/SIGTERM or the shutdown flag; returns the final stats.
pub fn serve(srv: Arc<Server>) -> Result<Value, ServeError> {
    run(srv, None)
}

/// Serve on `listener` until the server's shutdown flag is set; returns the final stats.
pub fn serve_on(srv: Arc<Server>, listener: TcpListener) -> Result<Value, ServeError> {
    run(srv, Some(listener))
}

fn run(srv: Arc<Server>, listener: Option<TcpListener>) -> Result<Value, ServeError> {
    let server = ssdlab_server::Server::start(core_options(&srv), listener, srv.clone())?;
    {
        let st = srv.state();
        let c = &st.cache;
        server.log().info(format!(
            "listening on {}: DRAM {} B, SOC {} buckets of {} B (handle {}), LOC {} regions of {} B (handle {}), FDP {}; values up to {} B, {} connections",
            server.local_addr(), c.cfg.dram_bytes, c.soc.buckets, c.soc.bucket_bytes, c.soc.handle.ruh(), c.loc.regions, c.loc.region_bytes, c.loc.handle.ruh(),
            if c.soc.handle.pid.is_some() { "on" } else { "off" }, srv.max_value_bytes, srv.opts.listen.max_connections
        ));
    }
    let flag = srv.shutdown.clone();
    let stop = move || flag.load(Ordering::Relaxed);
    server.run(Some(&stop))?;
    if let Some(f) = ssdlab_server::lock(&srv.failure).take() {
        return Err(ServeError::Failed(format!("internal error (a bug in ssdlab; the cache stopped): {f}")));
    }
    // A clean shutdown writes the device's write buffer to NAND, as a drive does on a flush:
    // the final DLWA counts what the buffer held (it would read below 1 otherwise).
    if let Err(e) = srv.state().cache.flash.dev.flush() {
        return Err(ServeError::Failed(format!("flushing the device's write buffer at shutdown failed: {e}")));
    }
    let m = srv.summary();
    if !srv.opts.quiet {
        eprintln!(
            "ssdlab cache serve: served {} connections: {} gets (DRAM hit ratio {}, NVM hit ratio {}), {} stores; items DRAM {} SOC {} LOC {}; device host writes {} B, media writes {} B: DLWA {}, ALWA {}",
            m["total_connections"], m["cmd_get"], m["dram_hit_ratio"], m["nvm_hit_ratio"], m["cmd_set"], m["dram_items"], m["soc_items"], m["loc_items"],
            m["device_host_write_bytes"], m["device_media_write_bytes"], m["dlwa"], m["alwa"]
        );
    }
    Ok(m)
}
