//! The RESP server: a [`ssdlab_server::Protocol`] that reads pipelined requests into a buffer,
//! runs every complete one against the [`Backend`] (one lock, taken once per batch), and writes
//! the batch's replies at once. A long command (a big MGET, FLUSHALL) gives the lock up between
//! its chunks to the clients waiting for it. Consecutive plain GETs and SETs of a batch
//! (`GET key`, `SET key value`) reach the store as two [`Backend::batch`] calls, their reads
//! first and their writes after them (see [`Staged`]), so a store that keeps several
//! operations in flight overlaps them.
//!
//! Time: before each batch the store's clock is moved to the wall-clock time since the server
//! started ([`Backend::tick`]), then the expiry housekeeping runs ([`commands::housekeeping`]:
//! keys past their time deleted through the store); a timer does the same every 100 ms while
//! housekeeping has work, so keys expire with no client sending commands. Commands see the
//! wall-clock unix time ([`unix_us`]) for expiry times and TIME.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ssdlab_server::{Conn, ConnEnd, ListenOptions, Pace, Refused, ServeError, Stats};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::commands::{self, execute, resume, Counters, Ctx, Db, Flow, Long, Session};
use crate::proto::{self, reply, Args, BULK_MAX_BYTES};
use crate::{Backend, BatchDone, BatchOp, Entries, StoreError};

/// Reported as `redis_version` by INFO: the Redis protocol level answered, then ssdlab's.
pub const VERSION: &str = concat!("7.0.0-ssdlab-", env!("CARGO_PKG_VERSION"));

/// Server settings: the listener's (shared by every ssdlab server) and the RESP server's own.
#[derive(Debug, Clone)]
pub struct RespOptions {
    /// Who the server is in logs: "ssdlab kv serve".
    pub name: String,
    /// Address, loopback opt-in, connection limit and deadlines. By default no idle timeout,
    /// as redis-server.
    pub listen: ListenOptions,
    pub quiet: bool,
}

/// redis-server's port and its connection limit for a lab's clients.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:6379";
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;

impl Default for RespOptions {
    fn default() -> Self {
        RespOptions { name: "ssdlab kv serve".into(), listen: ListenOptions::on(DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS), quiet: false }
    }
}

struct State {
    store: Box<dyn Backend>,
    counters: Counters,
    db: Db,
}

/// The wall-clock unix time in microseconds.
pub fn unix_us() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_micros() as i64
}

/// How often the timer runs the expiry housekeeping.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(100);

/// State shared by the connections.
pub struct Server {
    state: Mutex<State>,
    /// Threads blocked on `state` right now: a long command lets them in between its chunks.
    waiting: AtomicUsize,
    opts: RespOptions,
    core: Arc<Stats>,
    started: Instant,
    next_client: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Server {
    pub fn new(store: Box<dyn Backend>, opts: RespOptions) -> Arc<Server> {
        Arc::new(Server {
            state: Mutex::new(State { store, counters: Counters::default(), db: Db::default() }),
            waiting: AtomicUsize::new(0),
            opts,
            core: Arc::new(Stats::default()),
            started: Instant::now(),
            next_client: AtomicU64::new(1),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        })
    }

    /// Ask a running server to stop (as SIGTERM does).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic inside a store call poisons the lock; the store is then not to be trusted,
        // but INFO and the shutdown metrics still read it.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let st = ssdlab_server::lock(&self.state);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        st
    }

    /// Between two chunks of a long command (the lock released): wait until the threads that
    /// were waiting for the lock have had it (a mutex does not hand itself over: the thread
    /// that releases it would otherwise take it straight back). At most a few milliseconds.
    fn let_waiters_in(&self) {
        let since = Instant::now();
        while self.waiting.load(Ordering::SeqCst) > 0 && since.elapsed() < Duration::from_millis(5) {
            std::thread::yield_now();
        }
    }

    /// Finish a long command chunk by chunk, taking the lock for each.
    fn run_long(&self, mut long: Long, session: &mut Session, out: &mut Vec<u8>) {
        let info = || self.info_head();
        loop {
            self.let_waiters_in();
            let mut st = self.state();
            let State { store, counters, db } = &mut *st;
            let mut ctx = Ctx::new(store.as_mut(), session, counters, out, &info, db, unix_us());
            if resume(&mut ctx, &mut long) {
                return;
            }
        }
    }

    /// Move the store's clock to now, then run the expiry housekeeping if it has work
    /// (`only_if_work`: the clock too only then, as the timer does).
    fn tick(&self, st: &mut State, only_if_work: bool) {
        let now_us = unix_us();
        let work = st.db.expiries.pending(now_us.div_euclid(1000));
        if only_if_work && !work {
            return;
        }
        let now = self.started.elapsed().as_nanos() as u64;
        if let Err(e) = st.store.tick(now) {
            eprintln!("{}: store clock: {e}", self.opts.name);
        }
        if work {
            let State { store, counters, db } = st;
            if let Err(e) = commands::housekeeping(store.as_mut(), counters, db, now_us) {
                eprintln!("{}: expiry: {e}", self.opts.name);
            }
        }
    }

    fn info_head(&self) -> String {
        format!(
            "# Server\r\nredis_version:{VERSION}\r\nredis_mode:standalone\r\nssdlab_server:{}\r\nuptime_in_seconds:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n",
            self.opts.name,
            self.started.elapsed().as_secs(),
            Stats::get(&self.core.connections_active)
        )
    }

    /// The final figures: the front-end's counters and the store's metrics.
    pub fn summary(&self) -> Value {
        let mut st = self.state();
        let c = st.counters;
        json!({
            "total_connections_received": Stats::get(&self.core.connections_total),
            "rejected_connections": Stats::get(&self.core.refused),
            "abandoned_connections": Stats::get(&self.core.abandoned),
            "evicted_connections": Stats::get(&self.core.evicted),
            "request_timeouts": Stats::get(&self.core.request_timeouts),
            "total_commands_processed": c.commands,
            "keyspace_hits": c.keyspace_hits,
            "keyspace_misses": c.keyspace_misses,
            "rejected_commands": c.rejected_commands,
            "command_errors": c.errors,
            "expired_keys": c.expired_keys,
            "protocol_errors": Stats::get(&self.core.protocol_errors),
            "bytes_read": self.bytes_read.load(Ordering::Relaxed),
            "bytes_written": self.bytes_written.load(Ordering::Relaxed),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "store": st.store.metrics(),
        })
    }

    /// Run every complete request at the front of `buf`; returns the bytes used, whether to
    /// close, and a protocol error's text if the next request is malformed.
    fn run_batch(&self, buf: &[u8], session: &mut Session, out: &mut Vec<u8>) -> (usize, Flow, Option<String>) {
        let mut used = 0;
        let mut guard = None;
        let info = || self.info_head();
        loop {
            match proto::parse(&buf[used..], BULK_MAX_BYTES) {
                Ok(None) => return (used, Flow::Continue, None),
                Err(e) => return (used, Flow::Close, Some(e.0)),
                Ok(Some((mut args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    let st: &mut MutexGuard<'_, State> = guard.get_or_insert_with(|| {
                        let mut st = self.state();
                        self.tick(&mut st, false);
                        st
                    });
                    if plain(&args).is_some() {
                        // The plain GETs and SETs that follow, already received, go as one run.
                        let mut run = vec![args];
                        let mut next = used;
                        while run.len() < PIPELINE_RUN {
                            match proto::parse(&buf[next..], BULK_MAX_BYTES) {
                                Ok(Some((a, n))) if plain(&a).is_some() => {
                                    run.push(a);
                                    next += n;
                                }
                                _ => break,
                            }
                        }
                        if run.len() > 1 {
                            used = next;
                            self.run_pipelined(st, session, out, &run);
                            if out.len() >= 1 << 20 {
                                return (used, Flow::Continue, None);
                            }
                            continue;
                        }
                        args = run.pop().expect("one request");
                    }
                    let State { store, counters, db } = &mut **st;
                    let mut ctx = Ctx::new(store.as_mut(), session, counters, out, &info, db, unix_us());
                    let flow = execute(&mut ctx, &args);
                    if let Some(long) = ctx.long.take() {
                        guard = None; // the rest runs in chunks, the lock taken for each
                        long_running(|| self.run_long(long, session, out));
                    }
                    if flow == Flow::Close {
                        return (used, Flow::Close, None);
                    }
                    // Big replies go out before more requests run.
                    if out.len() >= 1 << 20 {
                        return (used, Flow::Continue, None);
                    }
                }
            }
        }
    }

    /// Run `run`, a connection's consecutive plain GETs and SETs (see [`plain`]), through
    /// [`Staged`]: their reads in one [`Backend::batch`] first, then each command as usual,
    /// then their writes in another. A write that failed turns its SET's reply into the error
    /// that SET would have answered on its own.
    fn run_pipelined(&self, st: &mut State, session: &mut Session, out: &mut Vec<u8>, run: &[Args]) {
        let info = || self.info_head();
        let State { store, counters, db } = st;
        let inner = std::mem::replace(store, Box::new(crate::MemoryStore::default()));
        let mut lent = Lent { place: store, staged: Staged::new(inner) };
        let staged = &mut lent.staged;
        let gets: Vec<BatchOp<'_>> = run.iter().filter_map(|a| plain(a).filter(|&set| !set).map(|_| BatchOp::Get(&a[1]))).collect();
        staged.prefetch(&gets);
        let mut starts = Vec::with_capacity(run.len() + 1);
        for (i, args) in run.iter().enumerate() {
            starts.push(out.len());
            (staged.cmd, staged.hold) = (i, plain(args) == Some(true));
            let mut ctx = Ctx::new(staged, session, counters, out, &info, db, unix_us());
            execute(&mut ctx, args);
        }
        starts.push(out.len());
        staged.hold = false;
        staged.flush();
        let failed = std::mem::take(&mut staged.failed);
        if failed.is_empty() {
            return;
        }
        let replies = out.split_off(starts[0]);
        for (i, args) in run.iter().enumerate() {
            match failed.iter().find(|(j, _)| *j == i) {
                None => out.extend_from_slice(&replies[starts[i] - starts[0]..starts[i + 1] - starts[0]]),
                Some((_, e)) => {
                    // The SET again, on a store whose write fails as this one did (counted once).
                    staged.fail_set = Some(e.clone());
                    counters.commands -= 1;
                    let mut ctx = Ctx::new(staged, session, counters, out, &info, db, unix_us());
                    execute(&mut ctx, args);
                    staged.fail_set = None;
                }
            }
        }
    }

    async fn session(&self, conn: Conn) -> Result<(), ConnEnd> {
        // RESP has no handshake: the idle rules apply from the first byte.
        conn.established();
        let pace = conn.pace();
        self.session_on(conn, &pace).await
    }

    /// A client's session on any byte stream (a connection, or bytes in memory when fuzzing);
    /// `pace` is told when a command is partly received and when none is.
    pub(crate) async fn session_on<S: AsyncRead + AsyncWrite + Unpin>(&self, mut conn: S, pace: &Pace) -> Result<(), ConnEnd> {
        let mut session = Session { id: self.next_client.fetch_add(1, Ordering::Relaxed), name: None };
        let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
        let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
        loop {
            let (used, flow, perr) = self.run_batch(&buf, &mut session, &mut out);
            buf.drain(..used);
            // A command completed restarts the clock; bytes left over are the next one's start.
            if used > 0 || buf.is_empty() {
                pace.end();
            }
            if !buf.is_empty() {
                pace.begin();
            }
            if let Some(e) = &perr {
                reply::error(&mut out, &format!("ERR {e}"));
            }
            if !out.is_empty() {
                conn.write_all(&out).await?;
                self.bytes_written.fetch_add(out.len() as u64, Ordering::Relaxed);
                out.clear();
            }
            if let Some(e) = perr {
                return Err(ConnEnd::Protocol(e));
            }
            if flow == Flow::Close {
                return Ok(());
            }
            if used > 0 && !buf.is_empty() {
                continue; // a batch stopped early for a big reply: the rest first
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(buf.len().max(16 << 10));
            }
            let n = conn.read_buf(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// Plain GETs and SETs run together at most (see [`Server::run_pipelined`]).
const PIPELINE_RUN: usize = 256;

/// `GET key` (Some(false)) or `SET key value` without options (Some(true)): the commands a
/// pipelined run is made of.
fn plain(args: &Args) -> Option<bool> {
    match args.len() {
        2 if args[0].eq_ignore_ascii_case(b"get") => Some(false),
        3 if args[0].eq_ignore_ascii_case(b"set") => Some(true),
        _ => None,
    }
}

/// The store as a pipelined run's commands see it: the keys their GETs read, fetched
/// beforehand in one [`Backend::batch`]; their SETs' writes held back (while `hold`) and sent
/// in another by [`Staged::flush`], which runs before anything that could see them (a read of
/// a held key, any other call). So the run's commands see what they would see one by one.
struct Staged {
    inner: Box<dyn Backend>,
    fetched: HashMap<Vec<u8>, Result<Option<Vec<u8>>, StoreError>>,
    /// Writes held back: key, stored bytes, and the index of their command in the run.
    held: Vec<(Vec<u8>, Vec<u8>, usize)>,
    /// The running command is a plain SET: its write may be held back.
    hold: bool,
    cmd: usize,
    /// Held-back writes that failed: their command's index and the store's error.
    failed: Vec<(usize, StoreError)>,
    /// Writes fail with this error (a failed SET run again for its reply).
    fail_set: Option<StoreError>,
}

/// The store lent to a [`Staged`] for a run, put back in its place however the run ends.
struct Lent<'a> {
    place: &'a mut Box<dyn Backend>,
    staged: Staged,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        std::mem::swap(self.place, &mut self.staged.inner);
    }
}

impl Staged {
    fn new(inner: Box<dyn Backend>) -> Staged {
        Staged { inner, fetched: HashMap::new(), held: vec![], hold: false, cmd: 0, failed: vec![], fail_set: None }
    }

    fn prefetch(&mut self, gets: &[BatchOp<'_>]) {
        let got = self.inner.batch(gets);
        for (op, r) in gets.iter().zip(got) {
            if let BatchOp::Get(k) = op {
                let r = r.and_then(|d| match d {
                    BatchDone::Got(v) => Ok(v),
                    other => Err(StoreError(format!("the store answered a read with {other:?}"))),
                });
                self.fetched.insert(k.to_vec(), r);
            }
        }
    }

    /// Send the held-back writes; the keys they wrote are read from the store from now on.
    fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        let ops: Vec<BatchOp<'_>> = held.iter().map(|(k, v, _)| BatchOp::Set(k, v)).collect();
        let done = self.inner.batch(&ops);
        for ((k, _, i), r) in held.iter().zip(done) {
            self.fetched.remove(k);
            if let Err(e) = r {
                self.failed.push((*i, e));
            }
        }
    }

    /// Before a call that reads or changes `key` in the store itself.
    fn direct(&mut self, key: Option<&[u8]>) {
        self.flush();
        match key {
            Some(k) => drop(self.fetched.remove(k)),
            None => self.fetched.clear(),
        }
    }
}

impl Backend for Staged {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if self.held.iter().any(|(k, _, _)| k == key) {
            self.flush();
        }
        match self.fetched.get(key) {
            Some(r) => r.clone(),
            None => {
                self.flush();
                self.inner.get(key)
            }
        }
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        if let Some(e) = &self.fail_set {
            return Err(e.clone());
        }
        if self.hold {
            self.held.push((key.to_vec(), value.to_vec(), self.cmd));
            return Ok(());
        }
        self.direct(Some(key));
        self.inner.set(key, value)
    }
    fn del(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.direct(Some(key));
        self.inner.del(key)
    }
    fn exists(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.flush();
        self.inner.exists(key)
    }
    fn key_count(&mut self) -> Result<u64, StoreError> {
        self.flush();
        self.inner.key_count()
    }
    fn keys_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        self.flush();
        self.inner.keys_after(after, limit)
    }
    fn entries_after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Entries, StoreError> {
        self.flush();
        self.inner.entries_after(after, limit)
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        self.direct(None);
        self.inner.clear()
    }
    fn clear_some(&mut self, limit: usize) -> Result<bool, StoreError> {
        self.direct(None);
        self.inner.clear_some(limit)
    }
    fn update(&mut self, key: &[u8], f: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.direct(Some(key));
        self.inner.update(key, f)
    }
    fn max_value_bytes(&self) -> usize {
        self.inner.max_value_bytes()
    }
    fn tick(&mut self, now_ns: u64) -> Result<(), StoreError> {
        self.flush();
        self.inner.tick(now_ns)
    }
    fn batch(&mut self, ops: &[BatchOp<'_>]) -> Vec<Result<BatchDone, StoreError>> {
        self.direct(None);
        self.inner.batch(ops)
    }
    fn metrics(&mut self) -> Value {
        self.flush();
        self.inner.metrics()
    }
    fn closing(&mut self) -> Result<Value, StoreError> {
        self.flush();
        self.inner.closing()
    }
}

/// Run `f`, which blocks this thread for long (a long command), telling a multi-threaded
/// runtime first so that it moves this worker's other connections to another thread.
fn long_running(f: impl FnOnce()) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
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
        // What redis-server says at maxclients.
        b"-ERR max number of clients reached\r\n".to_vec()
    }
}

fn core_options(srv: &Server) -> ssdlab_server::Options {
    srv.opts.listen.apply(ssdlab_server::Options {
        name: srv.opts.name.clone(),
        tls_supported: false,
        quiet: srv.opts.quiet,
        stats: srv.core.clone(),
        ..ssdlab_server::Options::default()
    })
}

/// Serve on `opts.listen` until SIGINT/SIGTERM or [`Server::stop`]; returns the final figures.
pub fn serve(srv: Arc<Server>) -> Result<Value, ServeError> {
    run(srv, None)
}

/// Serve on `listener` (tests: a port picked by the OS) until [`Server::stop`].
pub fn serve_on(srv: Arc<Server>, listener: TcpListener) -> Result<Value, ServeError> {
    run(srv, Some(listener))
}

fn run(srv: Arc<Server>, listener: Option<TcpListener>) -> Result<Value, ServeError> {
    let server = ssdlab_server::Server::start(core_options(&srv), listener, srv.clone())?;
    server.log().info(format!("listening on {} (RESP), {} connections", server.local_addr(), srv.opts.listen.max_connections));
    let flag = srv.stop.clone();
    let stop = move || flag.load(Ordering::Relaxed);
    // The expiry housekeeping's timer, for keys that expire while no client sends commands.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let timer = {
        let (srv, done) = (srv.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(HOUSEKEEPING_EVERY);
                let mut st = srv.state();
                srv.tick(&mut st, true);
            }
        })
    };
    let ran = server.run(Some(&stop));
    done.store(true, Ordering::Relaxed);
    let _ = timer.join();
    ran?;
    let mut m = srv.summary();
    m["closing"] = srv.state().store.closing().map_err(|e| ServeError::Failed(e.to_string()))?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    /// A memory store that refuses writes to keys starting with "bad" and counts its batches.
    struct Picky {
        mem: MemoryStore,
        batches: Arc<AtomicUsize>,
    }

    impl Backend for Picky {
        fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.mem.get(k)
        }
        fn set(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
            if k.starts_with(b"bad") {
                return Err("no writes to bad keys".into());
            }
            self.mem.set(k, v)
        }
        fn del(&mut self, k: &[u8]) -> Result<bool, StoreError> {
            self.mem.del(k)
        }
        fn key_count(&mut self) -> Result<u64, StoreError> {
            self.mem.key_count()
        }
        fn clear(&mut self) -> Result<(), StoreError> {
            self.mem.clear()
        }
        fn max_value_bytes(&self) -> usize {
            self.mem.max_value_bytes()
        }
        fn batch(&mut self, ops: &[BatchOp<'_>]) -> Vec<Result<BatchDone, StoreError>> {
            self.batches.fetch_add(1, Ordering::Relaxed);
            crate::one_by_one(self, ops)
        }
        fn metrics(&mut self) -> Value {
            Value::Null
        }
    }

    #[test]
    fn pipelined_gets_and_sets_answer_as_one_by_one_failed_writes_included() {
        let batches = Arc::new(AtomicUsize::new(0));
        let store = Picky { mem: MemoryStore::default(), batches: batches.clone() };
        let srv = Server::new(Box::new(store), RespOptions { quiet: true, ..RespOptions::default() });
        let srv = &*srv;
        let run = |data: &'static [u8]| {
            let out = ssdlab_server::fuzzing::run_session(data, |s| async move {
                let _ = srv.session_on(s, &Pace::none()).await;
            });
            String::from_utf8_lossy(&out).into_owned()
        };
        let out = run(b"SET a 1\r\nSET bad 2\r\nGET a\r\nGET bad\r\nSET a 3\r\nGET a\r\nGET nothere\r\nSET a 4 XX GET\r\nGET a\r\n");
        assert_eq!(out, "+OK\r\n-ERR no writes to bad keys\r\n$1\r\n1\r\n$-1\r\n+OK\r\n$1\r\n3\r\n$-1\r\n$1\r\n3\r\n$1\r\n4\r\n");
        assert!(batches.load(Ordering::Relaxed) >= 2, "the run's reads and writes went as batches");
        // The counters as one by one: 9 commands, 1 error.
        let m = srv.summary();
        assert_eq!((m["total_commands_processed"].as_u64(), m["command_errors"].as_u64()), (Some(9), Some(1)));
    }
}
