//! The memcached server: a [`ssdlab_server::Protocol`] on ssdlab's async server core (which
//! accepts, limits connections, cuts idle ones when the slots run out, applies the loopback
//! rule and shuts down on SIGINT/SIGTERM), with the data-backed cache behind one lock (the
//! device is one timeline), stats with ssdlab's device figures.
//!
//! Time: the cache and the device follow the wall clock since the server started (a request
//! is submitted at its arrival, and idle dies collect garbage between requests), so a served
//! run is not byte-identical to another; simulations (`ssdlab cache run`) are.

use std::io::{self, ErrorKind};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use ssdlab_cache::cache::cache_seconds;
use ssdlab_cache::hash::key_of;
use ssdlab_cache::item::{Item, ITEM_HEADER_BYTES};
use ssdlab_cache::{CacheError, HybridCache};
use ssdlab_core::ftl::conventional::StreamStats;
use ssdlab_server::{secs_or_never, Conn, ConnEnd, Pace, Refused, Stats};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::proto::{self, Command, MetaKind, Refusal, StoreKind, BINARY_REQUEST_MAGIC, KEY_BYTES_MAX, RELATIVE_EXPTIME_MAX};

/// Reported by `version`: the memcached protocol level spoken, then ssdlab's version.
pub const VERSION: &str = concat!("1.6.0-ssdlab-", env!("CARGO_PKG_VERSION"));

/// Lines other than multi-gets longer than this close the connection (memcached: 2048 bytes
/// buffered without a newline; a legal line is under 300).
pub const SHORT_LINE_MAX: usize = 8 << 10;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: String,
    pub max_connections: usize,
    /// Largest value a client may store (0: the default, 1 MiB or what a LOC region holds).
    pub max_value_bytes: u64,
    /// Longest multi-get line (`get`/`gets`/`gat`/`gats` of many keys); memcached has no
    /// limit, ssdlab bounds a connection's buffer with this.
    pub max_line_bytes: usize,
    /// Cut a connection idle this long (seconds; 0: never, as memcached by default).
    pub idle_timeout_s: f64,
    /// When every slot is taken, a connection idle at least this long (seconds) gives its
    /// slot to a new client (0: never; then new clients are refused).
    pub evict_idle_after_s: f64,
    /// Listen on a non-loopback address (the protocol has no authentication: anyone who
    /// reaches the port reads and writes the cache).
    pub allow_remote: bool,
    pub quiet: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: "127.0.0.1:11211".into(),
            max_connections: 64,
            max_value_bytes: 0,
            max_line_bytes: 8 << 20,
            idle_timeout_s: 0.0,
            evict_idle_after_s: ssdlab_server::DEFAULT_EVICT_IDLE_AFTER.as_secs_f64(),
            allow_remote: false,
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
    opts: ServeOptions,
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
    pub fn new(cache: HybridCache, opts: ServeOptions) -> Result<Arc<Server>, String> {
        if !cache.is_data_backed() {
            return Err("the memcached server needs a data-backed cache (HybridCache::data_backed)".into());
        }
        if opts.max_connections == 0 || opts.max_connections > ssdlab_server::MAX_CONNECTIONS_LIMIT {
            return Err(format!("--max-connections {}: must be in 1..={}", opts.max_connections, ssdlab_server::MAX_CONNECTIONS_LIMIT));
        }
        if opts.max_line_bytes < SHORT_LINE_MAX {
            return Err(format!("max_line_bytes {}: at least {SHORT_LINE_MAX}", opts.max_line_bytes));
        }
        if !(opts.idle_timeout_s >= 0.0 && opts.idle_timeout_s.is_finite()) {
            return Err(format!("--idle-timeout {}: seconds >= 0 (0: never)", opts.idle_timeout_s));
        }
        if !(opts.evict_idle_after_s >= 0.0 && opts.evict_idle_after_s.is_finite()) {
            return Err(format!("--evict-idle-after {}: seconds >= 0 (0: never)", opts.evict_idle_after_s));
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
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
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

    /// The `stats` reply: memcached's general fields, then ssdlab's cache and device figures.
    pub fn stats(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = vec![];
        let mut put = |k: &str, v: String| out.push((k.to_string(), v));
        let core = &self.core;
        put("pid", std::process::id().to_string());
        put("uptime", self.started.elapsed().as_secs().to_string());
        put("time", unix_now_s().to_string());
        put("version", VERSION.to_string());
        put("pointer_size", (8 * std::mem::size_of::<usize>()).to_string());
        put("curr_connections", Stats::get(&core.connections_active).to_string());
        put("total_connections", Stats::get(&core.connections_total).to_string());
        put("rejected_connections", Stats::get(&core.refused).to_string());
        put("evicted_connections", Stats::get(&core.evicted).to_string());
        put("abandoned_connections", Stats::get(&core.abandoned).to_string());
        put("idle_kicks", Stats::get(&core.idle_timeouts).to_string());
        put("request_timeouts", Stats::get(&core.request_timeouts).to_string());
        put("max_connections", self.opts.max_connections.to_string());
        let st = self.state();
        let c = &st.cache;
        let s = c.stats;
        let o = st.ops;
        put("cmd_get", o.cmd_get.to_string());
        put("cmd_set", o.cmd_set.to_string());
        put("cmd_flush", o.cmd_flush.to_string());
        put("cmd_touch", o.cmd_touch.to_string());
        put("get_hits", o.get_hits.to_string());
        put("get_misses", o.get_misses.to_string());
        put("delete_misses", o.delete_misses.to_string());
        put("delete_hits", o.delete_hits.to_string());
        put("incr_misses", o.incr_misses.to_string());
        put("incr_hits", o.incr_hits.to_string());
        put("decr_misses", o.decr_misses.to_string());
        put("decr_hits", o.decr_hits.to_string());
        put("cas_misses", o.cas_misses.to_string());
        put("cas_hits", o.cas_hits.to_string());
        put("cas_badval", o.cas_badval.to_string());
        put("touch_hits", o.touch_hits.to_string());
        put("touch_misses", o.touch_misses.to_string());
        put("store_too_large", o.store_too_large.to_string());
        put("bytes_read", self.bytes_read.load(Ordering::Relaxed).to_string());
        put("bytes_written", self.bytes_written.load(Ordering::Relaxed).to_string());
        put("limit_maxbytes", (c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string());
        put("item_size_max", self.max_value_bytes.to_string());
        let (dram_items, soc_items, loc_items) = c.item_counts();
        put("curr_items", (dram_items + soc_items + loc_items).to_string());
        put("total_items", o.total_items.to_string());
        put("evictions", (c.soc.stats.evictions + c.loc.stats.items_evicted + s.admission_rejected + s.dropped_too_large).to_string());
        put("server_errors", o.server_errors.to_string());
        put("protocol_errors", Stats::get(&core.protocol_errors).to_string());
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
        let secs = |s: f64| if s > 0.0 { s.to_string() } else { "0".into() };
        vec![
            ("maxbytes".into(), self.with_cache(|c| c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string()),
            ("maxconns".into(), self.opts.max_connections.to_string()),
            ("tcpport".into(), self.opts.listen.rsplit(':').next().unwrap_or("").to_string()),
            ("evictions".into(), "on".into()),
            ("cas_enabled".into(), "yes".into()),
            ("flush_enabled".into(), "yes".into()),
            ("binding_protocol".into(), "ascii".into()),
            ("item_size_max".into(), self.max_value_bytes.to_string()),
            ("key_max_length".into(), KEY_BYTES_MAX.to_string()),
            ("max_line_bytes".into(), self.opts.max_line_bytes.to_string()),
            ("idle_timeout".into(), secs(self.opts.idle_timeout_s)),
            ("evict_idle_after".into(), secs(self.opts.evict_idle_after_s)),
            ("listen".into(), self.opts.listen.clone()),
        ]
    }

    /// `stats items`: memcached's per-slab-class lines, one class per tier (1 DRAM, 2 SOC,
    /// 3 LOC).
    fn items(&self) -> Vec<(String, String)> {
        let st = self.state();
        let c = &st.cache;
        let (d, s, l) = c.item_counts();
        let mut v = vec![];
        for (id, n, ev) in [(1, d, 0), (2, s, c.soc.stats.evictions), (3, l, c.loc.stats.items_evicted)] {
            if n > 0 || ev > 0 {
                v.push((format!("items:{id}:number"), n.to_string()));
                v.push((format!("items:{id}:evicted"), ev.to_string()));
            }
        }
        v
    }

    /// `stats slabs`: one "slab class" per tier, with its size.
    fn slabs(&self) -> Vec<(String, String)> {
        let st = self.state();
        let c = &st.cache;
        let (d, s, l) = c.item_counts();
        let mut v = vec![];
        let tiers = [
            (1, c.soc.bucket_bytes as u64, c.cfg.dram_bytes, d),
            (2, c.soc.bucket_bytes as u64, c.soc.bytes(), s),
            (3, c.loc.region_bytes, c.loc.bytes(), l),
        ];
        for (id, chunk, bytes, n) in tiers {
            v.push((format!("{id}:chunk_size"), chunk.to_string()));
            v.push((format!("{id}:total_bytes"), bytes.to_string()));
            v.push((format!("{id}:used_chunks"), n.to_string()));
        }
        v.push(("active_slabs".into(), "3".into()));
        v.push(("total_malloced".into(), (c.cfg.dram_bytes + c.soc.bytes() + c.loc.bytes()).to_string()));
        v
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
            self.failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(m.clone());
            self.shutdown.store(true, Ordering::Relaxed);
            ConnEnd::Protocol(format!("internal error: {m}"))
        })
    }

    /// One key of a get/gets/gat/gats: its VALUE block, if it is there.
    fn get_one(&self, key: &[u8], cas: bool, touch: Option<i64>, out: &mut Vec<u8>) {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let res = match touch {
            None => st.cache.get_item(h, key, now),
            Some(exptime) => st.cache.get_item(h, key, now).and_then(|got| match got {
                Some(c) => {
                    let it =
                        Item { key: c.key.clone(), value: c.value.clone(), flags: c.flags, expiry_s: expiry_s(exptime, now), cas: c.cas };
                    st.cache.set_item(h, it, now).map(|_| Some(c))
                }
                None => Ok(None),
            }),
        };
        let o = &mut st.ops;
        match (&res, touch) {
            (_, Some(_)) => {
                o.cmd_touch += 1;
                if matches!(res, Ok(Some(_))) {
                    o.touch_hits += 1
                } else {
                    o.touch_misses += 1
                }
            }
            (Ok(Some(_)), None) => {
                o.cmd_get += 1;
                o.get_hits += 1;
            }
            (_, None) => {
                o.cmd_get += 1;
                o.get_misses += 1;
            }
        }
        match res {
            Ok(Some(it)) => {
                drop(st);
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                let head = if cas {
                    format!(" {} {} {}\r\n", it.flags, it.value.len(), it.cas)
                } else {
                    format!(" {} {}\r\n", it.flags, it.value.len())
                };
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&it.value);
                out.extend_from_slice(b"\r\n");
            }
            Ok(None) => {}
            Err(e) => {
                let m = self.server_error(&mut st, e);
                line(out, &m);
            }
        }
    }

    /// A meta command (mg, ms, md, ma) with memcached's reply codes: HD (done), VA (a value
    /// follows), EN (miss), NF (not found), NS (not stored), EX (CAS mismatch); the return
    /// flags in the order the request gave them; `q` drops the HD (and mg's EN) replies.
    fn meta(&self, kind: MetaKind, key: &[u8], flags: &[(u8, &[u8])], data: Vec<u8>, out: &mut Vec<u8>) {
        let has = |f: u8| flags.iter().any(|&(g, _)| g == f);
        let token = |f: u8| flags.iter().find(|&&(g, _)| g == f).map(|&(_, t)| t);
        let quiet = has(b'q');
        let now = self.now_ns();
        // The return flags: O and k always; c when there is a CAS to give (an ms gives 0 when
        // nothing was stored); f, s and t from the item, when there is one.
        // An mg's T takes effect where it stands: a t before it gives the old TTL (memcached
        // walks the flags once, in order). `touched`: the expiry T set.
        let ret_touched = |it: Option<&Item>, cas: Option<u64>, touched: Option<u32>| -> String {
            let mut r = String::new();
            let mut expiry = it.map(|i| i.expiry_s);
            for &(f, t) in flags {
                let s = match (f, it, cas) {
                    (b'O', _, _) => format!("O{}", String::from_utf8_lossy(t)),
                    (b'k', _, _) => format!("k{}", String::from_utf8_lossy(key)),
                    (b'c', _, Some(cas)) => format!("c{cas}"),
                    (b'f', Some(i), _) => format!("f{}", i.flags),
                    (b's', Some(i), _) => format!("s{}", i.value.len()),
                    (b'T', Some(_), _) => {
                        expiry = touched.or(expiry);
                        continue;
                    }
                    (b't', Some(_), _) => match expiry {
                        Some(0) | None => "t-1".into(),
                        Some(e) => format!("t{}", e.saturating_sub(cache_seconds(now))),
                    },
                    _ => continue,
                };
                r.push(' ');
                r.push_str(&s);
            }
            r
        };
        let ret = |it: Option<&Item>, cas: Option<u64>| ret_touched(it, cas, None);
        let code = |out: &mut Vec<u8>, code: &str, rest: &str| line(out, &format!("{code}{rest}"));
        let bad_token = "CLIENT_ERROR bad token in command line format";
        match kind {
            MetaKind::Get => {
                let touch = match token(b'T').map(proto::safe_strtol_token) {
                    Some(None) => return line(out, bad_token),
                    t => t.flatten(),
                };
                let mut st = self.state();
                let h = key_of(key);
                let touched = touch.map(|exptime| expiry_s(exptime, now));
                let got = st.cache.get_item(h, key, now).and_then(|got| match (&got, touched) {
                    (Some(c), Some(e)) => st.cache.set_item(h, Item { expiry_s: e, ..(**c).clone() }, now).map(|_| got),
                    _ => Ok(got),
                });
                // As memcached counts an mg: a hit that updates the TTL is a touch, anything
                // else a get.
                let o = &mut st.ops;
                match (&got, touch) {
                    (Ok(Some(_)), Some(_)) => (o.cmd_touch, o.touch_hits) = (o.cmd_touch + 1, o.touch_hits + 1),
                    (Ok(Some(_)), None) => (o.cmd_get, o.get_hits) = (o.cmd_get + 1, o.get_hits + 1),
                    _ => (o.cmd_get, o.get_misses) = (o.cmd_get + 1, o.get_misses + 1),
                }
                if token(b'O').is_some_and(|t| t.len() > proto::META_OPAQUE_MAX) {
                    drop(st);
                    return line(out, "CLIENT_ERROR opaque token too long");
                }
                match got {
                    Ok(Some(it)) => {
                        drop(st);
                        let rest = ret_touched(Some(&it), Some(it.cas), touched);
                        if has(b'v') {
                            code(out, &format!("VA {}", it.value.len()), &rest);
                            out.extend_from_slice(&it.value);
                            out.extend_from_slice(b"\r\n");
                        } else {
                            // `q` hides only the miss (EN) of an mg.
                            code(out, "HD", &rest);
                        }
                    }
                    Ok(None) => {
                        if !quiet {
                            code(out, "EN", &ret(None, None));
                        }
                    }
                    Err(e) => line(out, &self.server_error(&mut st, e)),
                }
            }
            MetaKind::Set => {
                let num = |f: u8| token(f).map(|t| proto::safe_strtol_token(t).ok_or(()));
                let (Ok(fl), Ok(exptime), Ok(compare)) = (
                    token(b'F').map(proto::safe_strtoul_token).map_or(Ok(0), |v| v.ok_or(())),
                    num(b'T').unwrap_or(Ok(0)),
                    token(b'C').map(|t| proto::safe_strtoull(t).ok_or(())).transpose(),
                ) else {
                    return line(out, bad_token);
                };
                let kind = match token(b'M').map(|m| m[0].to_ascii_uppercase()) {
                    Some(b'E') => StoreKind::Add,
                    Some(b'A') => StoreKind::Append,
                    Some(b'P') => StoreKind::Prepend,
                    // With a CAS, set and replace are memcached's cas (add ignores it; append
                    // and prepend compare it themselves).
                    _ if compare.is_some() => StoreKind::Cas,
                    Some(b'R') => StoreKind::Replace,
                    _ => StoreKind::Set,
                };
                self.state().ops.cmd_set += 1;
                let (r, cas) = self.store(kind, key, fl, exptime, data, compare);
                let rest = ret(None, Some(cas));
                match r.as_str() {
                    "STORED" if quiet => {}
                    "STORED" => code(out, "HD", &rest),
                    "NOT_STORED" => code(out, "NS", &rest),
                    "EXISTS" => code(out, "EX", &rest),
                    "NOT_FOUND" => code(out, "NF", &rest),
                    other => line(out, other),
                }
            }
            MetaKind::Delete => {
                let Ok(compare) = token(b'C').map(|t| proto::safe_strtoull(t).ok_or(())).transpose() else {
                    return line(out, bad_token);
                };
                let mut st = self.state();
                let h = key_of(key);
                let r = Self::peek(&mut st, h, key, now).and_then(|cur| match (cur, compare) {
                    (None, _) => Ok("NF"),
                    (Some(c), Some(want)) if c.cas != want => Ok("EX"),
                    (Some(_), _) => st.cache.delete_item(h, key, now).map(|hit| if hit { "HD" } else { "NF" }),
                });
                match r {
                    Ok(c) => {
                        if c == "HD" {
                            st.ops.delete_hits += 1;
                        } else if c == "NF" {
                            st.ops.delete_misses += 1;
                        }
                        drop(st);
                        if !(quiet && c == "HD") {
                            code(out, c, &ret(None, None));
                        }
                    }
                    Err(e) => line(out, &self.server_error(&mut st, e)),
                }
            }
            MetaKind::Arith => {
                let bad = "CLIENT_ERROR invalid or duplicate flag";
                let u = |f: u8, dflt: u64| token(f).map_or(Some(dflt), proto::safe_strtoull);
                let (Some(delta), Some(initial)) = (u(b'D', 1), u(b'J', 0)) else { return line(out, bad) };
                let vivify = match token(b'N').map(proto::safe_strtol_token) {
                    Some(None) => return line(out, bad),
                    n => n.flatten(),
                };
                let incr = match token(b'M') {
                    None | Some(b"I" | b"i" | b"+") => true,
                    Some(b"D" | b"d" | b"-") => false,
                    Some(_) => return line(out, "CLIENT_ERROR invalid mode for ma M token"),
                };
                let h = key_of(key);
                // Autovivify (N): a missing item is created with the initial value (J), which is
                // returned; no miss is counted.
                let vivified = vivify.is_some_and(|exptime| {
                    self.store(StoreKind::Add, key, 0, exptime, initial.to_string().into_bytes(), None).0 == "STORED"
                });
                let r = if vivified { initial.to_string() } else { self.arith(incr, key, delta) };
                if r == "NOT_FOUND" {
                    return code(out, "NF", &ret(None, None));
                }
                if r.starts_with("CLIENT_ERROR") || r.starts_with("SERVER_ERROR") {
                    return line(out, &r);
                }
                let it = {
                    let mut st = self.state();
                    Self::peek(&mut st, h, key, now).ok().flatten()
                };
                let rest = ret(it.as_deref(), it.as_ref().map(|i| i.cas));
                if has(b'v') {
                    code(out, &format!("VA {}", r.len()), &rest);
                    line(out, &r);
                } else if !quiet || vivified {
                    // memcached's q hides the HD of an applied delta, not of a vivified item.
                    code(out, "HD", &rest);
                }
            }
        }
    }

    /// Execute a command other than a get (whose keys are served one by one) or quit; a
    /// storage command's data block (without its CRLF) is `data`.
    fn execute(&self, cmd: Command<'_>, data: Vec<u8>, out: &mut Vec<u8>) {
        match cmd {
            Command::Meta { kind, key, flags, .. } => self.meta(kind, key, &flags, data, out),
            Command::Store { kind, key, flags, exptime, cas_unique, noreply, .. } => {
                let compare = (kind == StoreKind::Cas).then_some(cas_unique);
                self.state().ops.cmd_set += 1;
                let (r, _) = self.store(kind, key, flags, exptime, data, compare);
                reply(out, &r, noreply);
            }
            Command::Arith { incr, key, delta, noreply } => {
                let r = self.arith(incr, key, delta);
                reply(out, &r, noreply);
            }
            Command::Delete { key, noreply } => {
                let mut st = self.state();
                let now = self.now_ns();
                let r = match st.cache.delete_item(key_of(key), key, now) {
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
                reply(out, &r, noreply);
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
                let r = match res {
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
                reply(out, &r, noreply);
            }
            Command::FlushAll { delay, noreply } => {
                let mut st = self.state();
                st.ops.cmd_flush += 1;
                // memcached's realtime(): up to 30 days relative, larger a Unix time.
                let delay_s = if delay <= 0 {
                    0
                } else if delay <= RELATIVE_EXPTIME_MAX {
                    delay as u64
                } else {
                    (delay as u64).saturating_sub(unix_now_s())
                };
                if delay_s == 0 {
                    st.flush_at_ns = None;
                    st.cache.flush_all();
                } else {
                    st.flush_at_ns = Some(self.now_ns() + delay_s * 1_000_000_000);
                }
                drop(st);
                reply(out, "OK", noreply);
            }
            Command::Verbosity { noreply } => reply(out, "OK", noreply),
            Command::Stats { group, arg } => self.stats_command(group, arg, out),
            Command::Version => line(out, &format!("VERSION {VERSION}")),
            Command::MetaNoop => line(out, "MN"),
            Command::Get { .. } | Command::Quit => unreachable!("served by the session"),
        }
    }

    fn stats_command(&self, group: Option<&[u8]>, arg: Option<&[u8]>, out: &mut Vec<u8>) {
        let list = match group {
            None => self.stats(),
            Some(b"settings") => self.settings(),
            Some(b"items") => self.items(),
            Some(b"slabs") => self.slabs(),
            Some(b"sizes") => vec![("sizes_status".into(), "disabled".into())],
            Some(b"conns") => vec![],
            Some(b"reset") => {
                let mut st = self.state();
                st.ops = Ops::default();
                st.cache.stats = Default::default();
                drop(st);
                self.bytes_read.store(0, Ordering::Relaxed);
                self.bytes_written.store(0, Ordering::Relaxed);
                return line(out, "RESET");
            }
            Some(b"detail") => {
                return match arg {
                    Some(b"on") | Some(b"off") => line(out, "OK"),
                    Some(b"dump") => line(out, "END"),
                    _ => line(out, "CLIENT_ERROR usage: stats detail on|off|dump"),
                };
            }
            Some(b"cachedump") => return line(out, "CLIENT_ERROR stats cachedump not allowed"),
            // memcached answers an unknown group (`stats noreply` too) with ERROR.
            Some(_) => return line(out, "ERROR"),
        };
        for (k, v) in list {
            line(out, &format!("STAT {k} {v}"));
        }
        line(out, "END");
    }

    /// An existing item for the read-modify-write commands (no GET counted, no promotion).
    fn peek(st: &mut State, h: u64, key: &[u8], now: u64) -> Result<Option<Arc<Item>>, CacheError> {
        st.cache.peek_item(h, key, now)
    }

    /// set/add/replace/append/prepend/cas under one lock: the check and the store are one step.
    /// Returns the reply and the stored item's CAS unique (0 when nothing was stored).
    /// `compare`: the CAS unique given (cas, ms with C: checked by cas, append and prepend).
    fn store(&self, kind: StoreKind, key: &[u8], flags: u32, exptime: i64, value: Vec<u8>, compare: Option<u64>) -> (String, u64) {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let max = self.max_value_bytes;
        let step = |st: &mut State| -> Result<(&'static str, u64), CacheError> {
            // memcached's do_store_item, in its order: add finds an item, replace / append /
            // prepend find none, cas compares (and counts), append / prepend with a CAS
            // compare it (a replace's CAS is not checked).
            let (value, flags, expiry) = if kind == StoreKind::Set {
                (value, flags, expiry_s(exptime, now))
            } else {
                let cur = Self::peek(st, h, key, now)?;
                match (kind, cur) {
                    (StoreKind::Add, Some(_)) | (StoreKind::Replace | StoreKind::Append | StoreKind::Prepend, None) => {
                        return Ok(("NOT_STORED", 0))
                    }
                    (StoreKind::Cas, None) => {
                        st.ops.cas_misses += 1;
                        return Ok(("NOT_FOUND", 0));
                    }
                    (StoreKind::Cas, Some(c)) if Some(c.cas) != compare => {
                        st.ops.cas_badval += 1;
                        return Ok(("EXISTS", 0));
                    }
                    (StoreKind::Cas, Some(_)) => {
                        st.ops.cas_hits += 1;
                        (value, flags, expiry_s(exptime, now))
                    }
                    (StoreKind::Append | StoreKind::Prepend, Some(c)) if compare.is_some_and(|x| x != c.cas) => {
                        return Ok(("EXISTS", 0));
                    }
                    (StoreKind::Append | StoreKind::Prepend, Some(c)) => {
                        if (c.value.len() + value.len()) as u64 > max {
                            return Ok(("SERVER_ERROR object too large for cache", 0));
                        }
                        // The old item's flags and expiry stay (memcached ignores the new ones).
                        let v = if kind == StoreKind::Append { [&c.value[..], &value].concat() } else { [&value, &c.value[..]].concat() };
                        (v, c.flags, c.expiry_s)
                    }
                    _ => (value, flags, expiry_s(exptime, now)),
                }
            };
            let cas = st.cache.new_cas();
            let it = Item { key: key.into(), value: value.into_boxed_slice(), flags, expiry_s: expiry, cas };
            st.cache.set_item(h, it, now)?;
            st.ops.total_items += 1;
            Ok(("STORED", cas))
        };
        match step(&mut st) {
            Ok((r, cas)) => (r.to_string(), cas),
            Err(e) => (self.server_error(&mut st, e), 0),
        }
    }

    /// incr/decr: memcached's rules. The value must be a decimal number (as C's strtoull reads
    /// it) of at most 64 bits; incr wraps at 2^64, decr stops at 0; a result shorter than the
    /// value is padded with spaces to the value's length (memcached rewrites in place).
    fn arith(&self, incr: bool, key: &[u8], delta: u64) -> String {
        let mut st = self.state();
        let now = self.now_ns();
        let h = key_of(key);
        let step = |st: &mut State| -> Result<String, CacheError> {
            let Some(c) = Self::peek(st, h, key, now)? else {
                if incr {
                    st.ops.incr_misses += 1
                } else {
                    st.ops.decr_misses += 1
                }
                return Ok("NOT_FOUND".into());
            };
            let Some(v) = (!c.value.is_empty()).then(|| proto::safe_strtoull(&c.value)).flatten() else {
                return Ok("CLIENT_ERROR cannot increment or decrement non-numeric value".into());
            };
            let new = if incr { v.wrapping_add(delta) } else { v.saturating_sub(delta) };
            if incr {
                st.ops.incr_hits += 1
            } else {
                st.ops.decr_hits += 1
            }
            let text = new.to_string();
            let mut value = text.clone().into_bytes();
            if value.len() < c.value.len() {
                value.resize(c.value.len(), b' ');
            }
            let cas = st.cache.new_cas();
            let it = Item { key: key.into(), value: value.into_boxed_slice(), flags: c.flags, expiry_s: c.expiry_s, cas };
            st.cache.set_item(h, it, now)?;
            Ok(text)
        };
        match step(&mut st) {
            Ok(r) => r,
            Err(e) => self.server_error(&mut st, e),
        }
    }

    /// A refused line: skip its data block, delete what a failed set must not leave behind.
    fn refused_line(&self, f: &Refusal) {
        if let Some(key) = &f.delete_key {
            let mut st = self.state();
            st.ops.store_too_large += 1;
            let now = self.now_ns();
            if let Err(e) = st.cache.delete_item(key_of(key), key, now) {
                self.server_error(&mut st, e);
            }
        } else if f.skip_bytes > 0 {
            self.state().ops.store_too_large += 1;
        }
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
        format!("SERVER_ERROR too many open connections (--max-connections {})\r\n", self.opts.max_connections).into_bytes()
    }
}

fn core_options(srv: &Server) -> ssdlab_server::Options {
    ssdlab_server::Options {
        name: "ssdlab cache serve".into(),
        listen: srv.opts.listen.clone(),
        max_connections: srv.opts.max_connections,
        idle_timeout: secs_or_never(srv.opts.idle_timeout_s),
        evict_idle_after: secs_or_never(srv.opts.evict_idle_after_s),
        tls_supported: false,
        allow_remote: srv.opts.allow_remote,
        quiet: srv.opts.quiet,
        stats: srv.core.clone(),
        ..ssdlab_server::Options::default()
    }
}

/// Serve on `opts.listen` (loopback unless `allow_remote`: the protocol has no authentication) until
/// SIGINT/SIGTERM or the shutdown flag; returns the final stats.
pub fn serve(srv: Arc<Server>) -> Result<Value, String> {
    run(srv, None)
}

/// Serve on `listener` until the server's shutdown flag is set; returns the final stats.
pub fn serve_on(srv: Arc<Server>, listener: TcpListener) -> Result<Value, String> {
    run(srv, Some(listener))
}

fn run(srv: Arc<Server>, listener: Option<TcpListener>) -> Result<Value, String> {
    let server = ssdlab_server::Server::start(core_options(&srv), listener, srv.clone())?;
    {
        let st = srv.state();
        let c = &st.cache;
        server.log().info(format!(
            "listening on {}: DRAM {} B, SOC {} buckets of {} B (handle {}), LOC {} regions of {} B (handle {}), FDP {}; values up to {} B, {} connections",
            server.local_addr(), c.cfg.dram_bytes, c.soc.buckets, c.soc.bucket_bytes, c.soc.handle.ruh(), c.loc.regions, c.loc.region_bytes, c.loc.handle.ruh(),
            if c.soc.handle.pid.is_some() { "on" } else { "off" }, srv.max_value_bytes, srv.opts.max_connections
        ));
    }
    let flag = srv.shutdown.clone();
    let stop = move || flag.load(Ordering::Relaxed);
    server.run(Some(&stop))?;
    if let Some(f) = srv.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(format!("internal error (a bug in ssdlab; the cache stopped): {f}"));
    }
    // A clean shutdown writes the device's write buffer to NAND, as a drive does on a flush:
    // the final DLWA counts what the buffer held (it would read below 1 otherwise).
    if let Err(e) = srv.state().cache.flash.dev.flush() {
        return Err(format!("flushing the device's write buffer at shutdown failed: {e}"));
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
