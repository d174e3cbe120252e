//! The memcached server: one thread per connection, the data-backed cache behind one lock
//! (the device is one timeline), limits on keys, values, line length and connections, stats
//! with ssdlab's device figures, clean shutdown on SIGINT/SIGTERM.
//!
//! Time: the cache and the device follow the wall clock since the server started (a request
//! is submitted at its arrival, and idle dies collect garbage between requests), so a served
//! run is not byte-identical to another; simulations (`ssdlab cache run`) are.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use ssdlab_cache::cache::cache_seconds;
use ssdlab_cache::hash::key_of;
use ssdlab_cache::item::{Item, ITEM_HEADER_BYTES};
use ssdlab_cache::{CacheError, HybridCache};
use ssdlab_core::ftl::conventional::StreamStats;

use crate::proto::{self, Command, Refusal, StoreKind, KEY_BYTES_MAX, RELATIVE_EXPTIME_MAX};

/// Reported by `version`: the memcached protocol level spoken, then ssdlab's version.
pub const VERSION: &str = concat!("1.6.0-ssdlab-", env!("CARGO_PKG_VERSION"));

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: String,
    pub max_connections: usize,
    /// Largest value a client may store (0: the default, 1 MiB or what a LOC region holds).
    pub max_value_bytes: u64,
    /// Longest command line (a `get` of many keys is one line).
    pub max_line_bytes: usize,
    pub quiet: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { listen: "127.0.0.1:11211".into(), max_connections: 64, max_value_bytes: 0, max_line_bytes: 64 << 10, quiet: false }
    }
}

pub const DEFAULT_MAX_VALUE_BYTES: u64 = 1 << 20;

/// Counters kept under the cache lock (memcached's names).
#[derive(Default, Clone, Copy)]
struct Ops {
    cmd_set: u64,
    cmd_touch: u64,
    total_items: u64,
    delete_hits: u64,
    delete_misses: u64,
    cas_hits: u64,
    cas_misses: u64,
    cas_badval: u64,
    touch_hits: u64,
    touch_misses: u64,
    server_errors: u64,
}

struct State {
    cache: HybridCache,
    ops: Ops,
    /// FDP stream counters at start (per-handle DLWA is since then).
    streams0: Vec<StreamStats>,
}

#[derive(Default)]
struct ConnCounters {
    total: AtomicU64,
    rejected: AtomicU64,
    protocol_errors: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// State shared by the accept loop and the connections.
pub struct Server {
    state: Mutex<State>,
    opts: ServeOptions,
    max_value_bytes: u64,
    shutdown: Arc<AtomicBool>,
    active: AtomicUsize,
    conns: ConnCounters,
    started: Instant,
    /// A broken invariant seen by a connection (a panic): the server stops and reports it.
    failure: Mutex<Option<String>>,
}

/// How a connection ended (for logs; never fatal to the server).
enum ConnEnd {
    Closed,
    Protocol(String),
    Io(io::Error),
}

impl From<io::Error> for ConnEnd {
    fn from(e: io::Error) -> Self {
        if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted)
        {
            ConnEnd::Closed
        } else {
            ConnEnd::Io(e)
        }
    }
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
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        (exptime - unix).max(0)
    };
    // `now_s` itself is already expired (expiry <= now): a negative or past time.
    now_s.saturating_add(rel.min(u32::MAX as i64) as u32).min(u32::MAX - 1)
}

/// A storage or delete/touch reply line; `noreply` silences all but server errors.
fn send_reply<W: Write>(w: &mut W, reply: &str, noreply: bool) -> io::Result<()> {
    if !noreply || reply.starts_with("SERVER_ERROR") {
        w.write_all(reply.as_bytes())?;
        w.write_all(b"\r\n")?;
    }
    Ok(())
}

fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        r6(a as f64 / b as f64)
    }
}

impl Server {
    /// A server for `cache` (built with `HybridCache::data_backed`). Checks the limits.
    pub fn new(cache: HybridCache, opts: ServeOptions) -> Result<Arc<Server>, String> {
        if !cache.is_data_backed() {
            return Err("the memcached server needs a data-backed cache (HybridCache::data_backed)".into());
        }
        if opts.max_connections == 0 || opts.max_connections > 4096 {
            return Err(format!("--max-connections {}: must be in 1..=4096", opts.max_connections));
        }
        if opts.max_line_bytes < 1024 {
            return Err(format!("max_line_bytes {}: at least 1024", opts.max_line_bytes));
        }
        // A value must fit a LOC region with the longest key and the item header.
        let region = cache.loc.region_bytes;
        let room = region.saturating_sub(KEY_BYTES_MAX as u64 + ITEM_HEADER_BYTES as u64);
        let max_value_bytes = if opts.max_value_bytes == 0 { DEFAULT_MAX_VALUE_BYTES.min(room) } else { opts.max_value_bytes };
        if max_value_bytes > room {
            return Err(format!(
                "--max-value-bytes {max_value_bytes}: an item (value + key of up to {KEY_BYTES_MAX} bytes + {ITEM_HEADER_BYTES}-byte header) must fit a LOC region of {region} bytes, so at most {room}; lower it or raise cache.region_bytes"
            ));
        }
        if max_value_bytes == 0 {
            return Err(format!("cache.region_bytes {region} leaves no room for values"));
        }
        let dev = &cache.flash.dev;
        let streams0 =
            if dev.config().personality == ssdlab_core::config::Personality::Conventional { dev.ftl().stream_stats() } else { vec![] };
        Ok(Arc::new(Server {
            state: Mutex::new(State { cache, ops: Ops::default(), streams0 }),
            max_value_bytes,
            opts,
            shutdown: Arc::new(AtomicBool::new(false)),
            active: AtomicUsize::new(0),
            conns: ConnCounters::default(),
            started: Instant::now(),
            failure: Mutex::new(None),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in one connection (a broken invariant, reported there) must not stop the
        // others from being answered or the server from shutting down.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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

    /// The `stats` reply: memcached's general fields, then ssdlab's cache and device figures.
    pub fn stats(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = vec![];
        let mut put = |k: &str, v: String| out.push((k.to_string(), v));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        put("pid", std::process::id().to_string());
        put("uptime", self.started.elapsed().as_secs().to_string());
        put("time", now.to_string());
        put("version", VERSION.to_string());
        put("pointer_size", (8 * std::mem::size_of::<usize>()).to_string());
        put("curr_connections", self.active.load(Ordering::Relaxed).to_string());
        put("total_connections", self.conns.total.load(Ordering::Relaxed).to_string());
        put("rejected_connections", self.conns.rejected.load(Ordering::Relaxed).to_string());
        put("max_connections", self.opts.max_connections.to_string());
        let st = self.state();
        let c = &st.cache;
        let s = c.stats;
        let o = st.ops;
        put("cmd_get", s.gets.to_string());
        put("cmd_set", o.cmd_set.to_string());
        put("cmd_touch", o.cmd_touch.to_string());
        put("get_hits", (s.dram_hits + s.nvm_hits).to_string());
        put("get_misses", s.misses.to_string());
        put("delete_hits", o.delete_hits.to_string());
        put("delete_misses", o.delete_misses.to_string());
        put("cas_hits", o.cas_hits.to_string());
        put("cas_misses", o.cas_misses.to_string());
        put("cas_badval", o.cas_badval.to_string());
        put("touch_hits", o.touch_hits.to_string());
        put("touch_misses", o.touch_misses.to_string());
        put("bytes_read", self.conns.bytes_read.load(Ordering::Relaxed).to_string());
        put("bytes_written", self.conns.bytes_written.load(Ordering::Relaxed).to_string());
        put("limit_maxbytes", (c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string());
        put("item_size_max", self.max_value_bytes.to_string());
        let (dram_items, soc_items, loc_items) = c.item_counts();
        put("curr_items", (dram_items + soc_items + loc_items).to_string());
        put("total_items", o.total_items.to_string());
        put("evictions", (c.soc.stats.evictions + c.loc.stats.items_evicted + s.admission_rejected + s.dropped_too_large).to_string());
        put("server_errors", o.server_errors.to_string());
        put("protocol_errors", self.conns.protocol_errors.load(Ordering::Relaxed).to_string());
        // ssdlab: the tiers.
        put("dram_items", dram_items.to_string());
        put("soc_items", soc_items.to_string());
        put("loc_items", loc_items.to_string());
        put("dram_bytes_used", c.dram.used_bytes().to_string());
        put("dram_bytes", c.cfg.dram_bytes.to_string());
        put("soc_bytes", c.soc.bytes().to_string());
        put("loc_bytes", c.loc.bytes().to_string());
        put("dram_hits", s.dram_hits.to_string());
        put("nvm_hits", s.nvm_hits.to_string());
        put("hit_ratio", ratio(s.dram_hits + s.nvm_hits, s.gets).to_string());
        put("dram_hit_ratio", ratio(s.dram_hits, s.gets).to_string());
        put("nvm_hit_ratio", ratio(s.nvm_hits, s.gets - s.dram_hits).to_string());
        put("flash_items_admitted", s.flash_items.to_string());
        put("flash_item_bytes", s.flash_item_bytes.to_string());
        put("admission_rejected", s.admission_rejected.to_string());
        put("soc_bucket_reads", c.soc.stats.bucket_reads.to_string());
        put("soc_bucket_writes", c.soc.stats.bucket_writes.to_string());
        put("soc_evictions", c.soc.stats.evictions.to_string());
        put("loc_regions_flushed", c.loc.stats.regions_flushed.to_string());
        put("loc_regions_evicted", c.loc.stats.regions_evicted.to_string());
        put("loc_items_evicted", c.loc.stats.items_evicted.to_string());
        // ssdlab: the device. ALWA = device host writes / item bytes admitted to flash;
        // DLWA = media writes / host writes, overall and per reclaim unit handle.
        let dev = &c.flash.dev;
        let cn = dev.block_device().counters();
        put("alwa", ratio(cn.host_write_bytes, s.flash_item_bytes).to_string());
        put("dlwa", ratio(cn.nand_write_bytes, cn.host_write_bytes).to_string());
        put("soc_handle", c.soc.handle.ruh().to_string());
        put("loc_handle", c.loc.handle.ruh().to_string());
        if dev.config().personality == ssdlab_core::config::Personality::Conventional {
            if let Some(f) = dev.ftl().fdp_metrics(&st.streams0) {
                for h in f["handles"].as_array().into_iter().flatten() {
                    if h["reclaim_group"].as_u64() == Some(0) && h["host_write_bytes"].as_u64().unwrap_or(0) > 0 {
                        put(&format!("dlwa_handle_{}", h["handle"]), h["dlwa"].to_string());
                    }
                }
            }
        }
        put("device_host_write_bytes", cn.host_write_bytes.to_string());
        put("device_media_write_bytes", cn.nand_write_bytes.to_string());
        put("device_host_read_bytes", cn.host_read_bytes.to_string());
        put("device_gc_events", cn.gc_events.to_string());
        put("device_erases", cn.nand_erase_count.to_string());
        put("device_logical_bytes", dev.logical_bytes().to_string());
        put("device_fdp", (c.soc.handle.pid.is_some()).to_string());
        put("device_time_ns", dev.now_ns().to_string());
        drop(st);
        out
    }

    /// `stats settings`: the limits.
    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("maxconns".into(), self.opts.max_connections.to_string()),
            ("item_size_max".into(), self.max_value_bytes.to_string()),
            ("key_max_length".into(), KEY_BYTES_MAX.to_string()),
            ("max_line_bytes".into(), self.opts.max_line_bytes.to_string()),
            ("listen".into(), self.opts.listen.clone()),
        ]
    }

    /// The stats as JSON (numbers where they are numbers): the final summary.
    pub fn summary(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in self.stats() {
            let j = if let Ok(i) = v.parse::<u64>() {
                json!(i)
            } else if let Ok(f) = v.parse::<f64>() {
                json!(f)
            } else if let Ok(b) = v.parse::<bool>() {
                json!(b)
            } else {
                json!(v)
            };
            m.insert(k, j);
        }
        Value::Object(m)
    }

    /// Run `f` on the cache under the server's lock (tests, embedding).
    pub fn with_cache<R>(&self, f: impl FnOnce(&mut HybridCache) -> R) -> R {
        f(&mut self.state().cache)
    }

    /// Verify that the cache's index and the bytes on the device agree (tests).
    pub fn verify_data(&self) -> Result<(u64, u64, u64), CacheError> {
        self.state().cache.verify_data()
    }
}

/// Read a line (up to `\n`, `\r` stripped) of at most `max` bytes into `out`. Ok(false) at a
/// clean end of stream; an error of kind InvalidData for an over-long line.
fn read_line<R: BufRead>(r: &mut R, out: &mut Vec<u8>, max: usize) -> io::Result<bool> {
    out.clear();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return if out.is_empty() { Ok(false) } else { Err(io::Error::new(ErrorKind::UnexpectedEof, "partial line")) };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if out.len() + take > max {
            return Err(io::Error::new(ErrorKind::InvalidData, format!("CLIENT_ERROR line longer than {max} bytes")));
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

/// Read and drop `n` bytes.
fn skip<R: Read>(r: &mut R, mut n: u64) -> io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        r.read_exact(&mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Counts bytes through a reader or writer.
struct Counted<T> {
    inner: T,
    n: u64,
}

impl<T: Read> Read for Counted<T> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(b)?;
        self.n += k as u64;
        Ok(k)
    }
}

impl<T: Write> Write for Counted<T> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(b)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Server {
    /// Serve one client until it quits, disconnects, or breaks the protocol beyond repair.
    fn connection(&self, s: TcpStream) -> ConnEnd {
        let rd = match s.try_clone() {
            Ok(r) => r,
            Err(e) => return ConnEnd::Io(e),
        };
        let mut r = BufReader::with_capacity(64 * 1024, Counted { inner: rd, n: 0 });
        let mut w = BufWriter::with_capacity(64 * 1024, Counted { inner: s, n: 0 });
        let end = self.session(&mut r, &mut w);
        let _ = w.flush();
        if let ConnEnd::Protocol(_) = end {
            // Let the error line arrive: closing with unread input would reset the connection
            // and the client could lose the reply. Stop sending, then drain briefly.
            let s = &w.get_ref().inner;
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 16 * 1024];
            let mut left = 4usize << 20;
            while left > 0 {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => left = left.saturating_sub(k),
                }
            }
        }
        self.conns.bytes_read.fetch_add(r.get_ref().n, Ordering::Relaxed);
        self.conns.bytes_written.fetch_add(w.get_ref().n, Ordering::Relaxed);
        end
    }

    fn session<R: Read, W: Write>(&self, r: &mut BufReader<R>, w: &mut W) -> ConnEnd {
        let mut line = Vec::with_capacity(256);
        loop {
            if r.buffer().is_empty() {
                if let Err(e) = w.flush() {
                    return e.into();
                }
            }
            match read_line(r, &mut line, self.opts.max_line_bytes) {
                Ok(true) => {}
                Ok(false) => return ConnEnd::Closed,
                Err(e) if e.kind() == ErrorKind::InvalidData => {
                    let msg = e.to_string();
                    let _ = w.write_all(format!("{msg}\r\n").as_bytes());
                    return ConnEnd::Protocol(msg);
                }
                Err(e) => return e.into(),
            }
            let res = match proto::parse(&line, self.max_value_bytes) {
                Ok(cmd) => self.execute(cmd, r, w),
                Err(refusal) => self.refuse(refusal, r, w),
            };
            match res {
                Ok(true) => {}
                Ok(false) => return ConnEnd::Closed,
                Err(e) => return e,
            }
        }
    }

    fn refuse<R: Read, W: Write>(&self, f: Refusal, r: &mut R, w: &mut W) -> Result<bool, ConnEnd> {
        if f.skip_bytes > 0 {
            skip(r, f.skip_bytes)?;
        }
        if !f.noreply || f.close {
            w.write_all(f.reply.as_bytes())?;
            w.write_all(b"\r\n")?;
        }
        if f.close {
            return Err(ConnEnd::Protocol(f.reply));
        }
        Ok(true)
    }

    fn server_error(&self, st: &mut State, e: CacheError) -> String {
        st.ops.server_errors += 1;
        let msg = e.to_string().replace(['\r', '\n'], " ");
        if !self.opts.quiet {
            eprintln!("ssdlab cache serve: {msg}");
        }
        format!("SERVER_ERROR {msg}")
    }

    /// Execute one command; Ok(false) = the client quit.
    fn execute<R: Read, W: Write>(&self, cmd: Command<'_>, r: &mut R, w: &mut W) -> Result<bool, ConnEnd> {
        match cmd {
            Command::Get { keys, cas } => {
                for key in keys {
                    let got = {
                        let mut st = self.state();
                        let now = self.now_ns();
                        match st.cache.get_item(key_of(key), key, now) {
                            Ok(g) => g,
                            Err(e) => {
                                let m = self.server_error(&mut st, e);
                                drop(st);
                                w.write_all(m.as_bytes())?;
                                w.write_all(b"\r\n")?;
                                return Ok(true);
                            }
                        }
                    };
                    if let Some(it) = got {
                        w.write_all(b"VALUE ")?;
                        w.write_all(key)?;
                        if cas {
                            write!(w, " {} {} {}\r\n", it.flags, it.value.len(), it.cas)?;
                        } else {
                            write!(w, " {} {}\r\n", it.flags, it.value.len())?;
                        }
                        w.write_all(&it.value)?;
                        w.write_all(b"\r\n")?;
                    }
                }
                w.write_all(b"END\r\n")?;
            }
            Command::Store { kind, key, flags, exptime, bytes, cas_unique, noreply } => {
                let mut value = vec![0u8; bytes as usize];
                r.read_exact(&mut value)?;
                let mut crlf = [0u8; 2];
                r.read_exact(&mut crlf)?;
                if crlf != *b"\r\n" {
                    w.write_all(b"CLIENT_ERROR bad data chunk\r\n")?;
                    return Err(ConnEnd::Protocol(format!("data block of {bytes} bytes not followed by \\r\\n")));
                }
                let reply = self.store(kind, key, flags, exptime, value.into_boxed_slice(), cas_unique);
                send_reply(w, &reply, noreply)?;
            }
            Command::Delete { key, noreply } => {
                let mut st = self.state();
                let now = self.now_ns();
                let reply = match st.cache.delete_item(key_of(key), key, now) {
                    Ok(true) => {
                        st.ops.delete_hits += 1;
                        "DELETED".to_string()
                    }
                    Ok(false) => {
                        st.ops.delete_misses += 1;
                        "NOT_FOUND".to_string()
                    }
                    Err(e) => self.server_error(&mut st, e),
                };
                drop(st);
                send_reply(w, &reply, noreply)?;
            }
            Command::Touch { key, exptime, noreply } => {
                let mut st = self.state();
                let now = self.now_ns();
                st.ops.cmd_touch += 1;
                let h = key_of(key);
                let res = st.cache.peek_item(h, key, now).and_then(|cur| match cur {
                    None => Ok(false),
                    Some(c) => {
                        let it = Item {
                            key: c.key.clone(),
                            value: c.value.clone(),
                            flags: c.flags,
                            expiry_s: expiry_s(exptime, now),
                            cas: c.cas,
                        };
                        st.cache.set_item(h, it, now).map(|_| true)
                    }
                });
                let reply = match res {
                    Ok(true) => {
                        st.ops.touch_hits += 1;
                        "TOUCHED".to_string()
                    }
                    Ok(false) => {
                        st.ops.touch_misses += 1;
                        "NOT_FOUND".to_string()
                    }
                    Err(e) => self.server_error(&mut st, e),
                };
                drop(st);
                send_reply(w, &reply, noreply)?;
            }
            Command::Stats { group } => {
                let list = match group {
                    None => self.stats(),
                    Some(b"settings") => self.settings(),
                    Some(g) => {
                        write!(
                            w,
                            "CLIENT_ERROR unknown stats group {:?}; this server has `stats` and `stats settings`\r\n",
                            String::from_utf8_lossy(g)
                        )?;
                        return Ok(true);
                    }
                };
                for (k, v) in list {
                    write!(w, "STAT {k} {v}\r\n")?;
                }
                w.write_all(b"END\r\n")?;
            }
            Command::Version => write!(w, "VERSION {VERSION}\r\n")?,
            Command::Quit => return Ok(false),
        }
        Ok(true)
    }

    /// set/add/replace/cas under one lock: the check and the store are one step.
    fn store(&self, kind: StoreKind, key: &[u8], flags: u32, exptime: i64, value: Box<[u8]>, cas_unique: u64) -> String {
        let mut st = self.state();
        let now = self.now_ns();
        st.ops.cmd_set += 1;
        let h = key_of(key);
        let step = || -> Result<&'static str, CacheError> {
            if kind != StoreKind::Set {
                let cur = st.cache.peek_item(h, key, now)?;
                match (kind, cur) {
                    (StoreKind::Add, Some(_)) | (StoreKind::Replace, None) => return Ok("NOT_STORED"),
                    (StoreKind::Cas, None) => {
                        st.ops.cas_misses += 1;
                        return Ok("NOT_FOUND");
                    }
                    (StoreKind::Cas, Some(c)) if c.cas != cas_unique => {
                        st.ops.cas_badval += 1;
                        return Ok("EXISTS");
                    }
                    (StoreKind::Cas, Some(_)) => st.ops.cas_hits += 1,
                    _ => {}
                }
            }
            let cas = st.cache.new_cas();
            let it = Item { key: key.into(), value, flags, expiry_s: expiry_s(exptime, now), cas };
            st.cache.set_item(h, it, now)?;
            st.ops.total_items += 1;
            Ok("STORED")
        };
        match step() {
            Ok(r) => r.to_string(),
            Err(e) => self.server_error(&mut st, e),
        }
    }
}

fn log(quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("ssdlab cache serve: {msg}");
    }
}

/// Bind `opts.listen` (loopback only: the protocol has no authentication).
pub fn bind(srv: &Server) -> Result<TcpListener, String> {
    let addr: SocketAddr =
        srv.opts.listen.parse().map_err(|e| format!("--listen {:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:11211)", srv.opts.listen))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--listen {addr}: only loopback addresses (127.0.0.1, ::1): the memcached protocol has no authentication or encryption"
        ));
    }
    TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Serve until SIGINT/SIGTERM; returns the final stats.
pub fn serve(srv: Arc<Server>) -> Result<Value, String> {
    let listener = bind(&srv)?;
    let mut ids = vec![];
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        ids.push(signal_hook::flag::register(sig, srv.shutdown.clone()).map_err(|e| e.to_string())?);
    }
    let r = serve_on(srv, listener);
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    r
}

/// Serve on `listener` until the server's shutdown flag is set; returns the final stats.
pub fn serve_on(srv: Arc<Server>, listener: TcpListener) -> Result<Value, String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    {
        let st = srv.state();
        let c = &st.cache;
        log(srv.opts.quiet, &format!(
            "listening on {local}: DRAM {} B, SOC {} buckets of {} B (handle {}), LOC {} regions of {} B (handle {}), FDP {}; values up to {} B, {} connections",
            c.cfg.dram_bytes, c.soc.buckets, c.soc.bucket_bytes, c.soc.handle.ruh(), c.loc.regions, c.loc.region_bytes, c.loc.handle.ruh(),
            if c.soc.handle.pid.is_some() { "on" } else { "off" }, srv.max_value_bytes, srv.opts.max_connections
        ));
    }
    let conns: Arc<Mutex<HashMap<u64, TcpStream>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut threads: Vec<JoinHandle<()>> = vec![];
    let mut next_id = 0u64;
    while !srv.shutdown.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut s, peer)) => {
                threads.retain(|t| !t.is_finished());
                let _ = s.set_nonblocking(false);
                if srv.active.load(Ordering::Relaxed) >= srv.opts.max_connections {
                    srv.conns.rejected.fetch_add(1, Ordering::Relaxed);
                    log(srv.opts.quiet, &format!("refused {peer}: {} connections open (--max-connections)", srv.opts.max_connections));
                    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = s.write_all(
                        format!("SERVER_ERROR too many open connections (--max-connections {})\r\n", srv.opts.max_connections).as_bytes(),
                    );
                    continue;
                }
                let _ = s.set_nodelay(true);
                let id = next_id;
                next_id += 1;
                if let Ok(c) = s.try_clone() {
                    conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, c);
                }
                srv.active.fetch_add(1, Ordering::Relaxed);
                srv.conns.total.fetch_add(1, Ordering::Relaxed);
                let (srv2, conns2) = (srv.clone(), conns.clone());
                threads.push(std::thread::spawn(move || {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| srv2.connection(s))) {
                        Ok(ConnEnd::Closed) => {}
                        Ok(ConnEnd::Protocol(m)) => {
                            srv2.conns.protocol_errors.fetch_add(1, Ordering::Relaxed);
                            log(srv2.opts.quiet, &format!("{peer}: dropped: {m}"));
                        }
                        Ok(ConnEnd::Io(e)) => log(srv2.opts.quiet, &format!("{peer}: {e}")),
                        Err(p) => {
                            // A broken invariant (e.g. device bytes that disagree with the
                            // index): the cache can no longer be trusted. Stop loudly.
                            let m = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            log(false, &format!("{peer}: internal error, shutting down: {m}"));
                            srv2.failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(m);
                            srv2.shutdown.store(true, Ordering::Relaxed);
                        }
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
    log(srv.opts.quiet, "shutting down");
    for (_, c) in conns.lock().unwrap_or_else(|e| e.into_inner()).drain() {
        let _ = c.shutdown(std::net::Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
    if let Some(f) = srv.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(format!("internal error (a bug in ssdlab; the cache stopped): {f}"));
    }
    let m = srv.summary();
    log(srv.opts.quiet, &format!(
        "served {} connections: {} gets (DRAM hit ratio {}, NVM hit ratio {}), {} stores; items DRAM {} SOC {} LOC {}; device host writes {} B, media writes {} B: DLWA {}, ALWA {}",
        m["total_connections"], m["cmd_get"], m["dram_hit_ratio"], m["nvm_hit_ratio"], m["cmd_set"], m["dram_items"], m["soc_items"], m["loc_items"],
        m["device_host_write_bytes"], m["device_media_write_bytes"], m["dlwa"], m["alwa"]
    ));
    Ok(m)
}
