//! ssdlab's server core: one async (tokio) accept loop and connection supervisor that every
//! network front-end (NBD, serprog, memcached, RESP, ...) plugs a [`Protocol`] into.
//!
//! What the core does, so that no protocol has to:
//! - listens on one address, after checking the **loopback rule** ([`check_listen`]): a
//!   non-loopback address only with TLS, or with the explicit opt-in `allow_remote`;
//! - limits connections (`max_connections`); a client arriving when every slot is taken takes
//!   the slot of the connection that has been in its handshake longest (a well-behaved client
//!   finishes its handshake in milliseconds; one admitted less than `EVICT_GRACE` ago is left
//!   alone), else of the one that has been receiving a request longest, if for `SLOW_REQUEST`
//!   or more (a client trickling a request), else of the one idle longest, if for
//!   `evict_idle_after` or more; otherwise it
//!   waits up to `ADMIT_WAIT` (0.5 s) for a slot to be given back (a client that just left may
//!   still hold one for a moment), then is refused ([`Protocol::refused`]); a client that hung up
//!   without sending anything before it was accepted (or while it waited) takes no slot and is
//!   counted as abandoned;
//! - cuts a connection whose **whole handshake** takes longer than `handshake_timeout` (a client
//!   trickling one byte every few seconds cannot hold a slot), after the handshake one whose
//!   **request** is still being received `request_timeout` after its first byte (the protocol
//!   marks requests with [`Pace`]), and one **idle** (no byte read or written) for
//!   `idle_timeout`;
//! - runs TLS (rustls) either from the first byte ([`TlsMode::Implicit`]) or when the protocol
//!   asks ([`Conn::start_tls`], for STARTTLS);
//! - shuts down cleanly on SIGINT/SIGTERM (or [`Shutdown::trigger`], or a polled stop
//!   function): stops accepting, cuts the connections, waits for their tasks, then calls
//!   [`Protocol::on_shutdown`] (where front-ends write their metrics); SIGUSR1 calls
//!   [`Protocol::on_usr1`];
//! - logs refusals, timeouts and dropped connections at most once per kind and interval
//!   ([`log::RateLog`]), with counts of what it held back.
//!
//! Every front-end's options hold the listener settings as one [`ListenOptions`] (address,
//! loopback opt-in, TLS files, connection limit, deadlines), checked in one place and turned
//! into the core's [`Options`] by [`ListenOptions::apply`]; setting up or running a server
//! fails with a [`ServeError`].
//!
//! Connections are tasks on a small multi-threaded runtime (at most 4 worker threads): ten
//! thousand idle connections cost memory for their buffers, not threads.

pub mod conn;
pub mod delayed;
pub mod fuzzing;
mod listen;
pub mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::task::JoinSet;

use conn::Meter;
pub use conn::{BlockingConn, Conn, Cut, Pace};
pub use listen::{never_if_zero, ListenOptions, ServeError, MAX_TIMEOUT};
// The rate-limited log is shared with blocking servers (crates/netrules).
pub use ssdlab_netrules::{lock, lock_store, log, RateLog};

/// How a connection ended, as the protocol reports it.
#[derive(Debug)]
pub enum ConnEnd {
    /// The client left (its goodbye, or EOF).
    Closed,
    /// The client broke the protocol; the connection was dropped.
    Protocol(String),
    Io(io::Error),
}

impl From<io::Error> for ConnEnd {
    fn from(e: io::Error) -> Self {
        use io::ErrorKind::*;
        if matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted) {
            ConnEnd::Closed
        } else {
            ConnEnd::Io(e)
        }
    }
}

/// Why a client was refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is taken by connections that may not be evicted.
    Full { max_connections: usize },
}

/// A network protocol served by the core.
pub trait Protocol: Send + Sync + 'static {
    /// Serve one connection until it ends. The core may drop this future at any await point
    /// (deadline, eviction, shutdown); state that must survive goes to the protocol's shared
    /// state before the await that follows it. A panic in it ends this connection only: the
    /// core catches it, logs it and gives the slot back.
    fn serve(self: Arc<Self>, conn: Conn) -> impl Future<Output = ConnEnd> + Send;

    /// Bytes sent to a refused client before the connection is closed (e.g. memcached's
    /// `SERVER_ERROR` line). None by default: the connection is just closed.
    fn refusal(&self, _why: Refused) -> Vec<u8> {
        Vec::new()
    }

    /// Talk to a refused client before it is closed, for protocols whose clients need more
    /// than a fixed message to report a refusal well (serprog: flashrom dies of SIGPIPE on a
    /// closed socket, but prints a clear error when told the bus is unusable). By default it
    /// sends [`Protocol::refusal`]. The core cuts it after `REFUSAL_SECONDS` and runs at most
    /// `REFUSALS_AT_ONCE` of them; beyond that refused clients are just closed.
    fn refused(self: Arc<Self>, mut conn: Conn, why: Refused) -> impl Future<Output = ()> + Send {
        async move {
            let bytes = self.refusal(why);
            if !bytes.is_empty() {
                let _ = conn.write_all(&bytes).await;
            }
            let _ = conn.shutdown().await;
        }
    }

    /// SIGUSR1 arrived (e.g. write the metrics now).
    fn on_usr1(&self) {}

    /// Every connection has ended and the server is stopping: write metrics, save state.
    fn on_shutdown(&self) -> Result<(), ServeError> {
        Ok(())
    }
}

/// Where TLS starts, if the server has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// From the first byte (the client starts with a TLS ClientHello).
    Implicit,
    /// When the protocol calls [`Conn::start_tls`] (NBD's STARTTLS).
    StartTls,
}

/// Counters the core keeps; front-ends put them into their metrics.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_total: AtomicU64,
    pub connections_active: AtomicU64,
    pub refused: AtomicU64,
    pub evicted: AtomicU64,
    /// Clients that hung up before the server got to them (or while they waited for a slot):
    /// neither served nor refused.
    pub abandoned: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub request_timeouts: AtomicU64,
    pub idle_timeouts: AtomicU64,
    pub protocol_errors: AtomicU64,
}

impl Stats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// How long a client arriving when every slot is taken waits for one to be given back before
/// it is refused (a client that just left may still hold its slot for a moment). Short: a
/// refused flashrom must be answered within the second it waits before synchronising.
pub const ADMIT_WAIT: Duration = Duration::from_millis(500);
/// A connection in its handshake for less than this (or half the handshake timeout, if that is
/// shorter) is not evicted: in a burst of connects, the clients admitted a moment ago (whose
/// tasks may not have run yet) keep their slots and the burst waits or is refused. A slow
/// handshake is evicted after it, and cut at the handshake timeout either way.
pub const EVICT_GRACE: Duration = Duration::from_millis(200);
/// A request still being received this long after its first byte marks its client as a slow
/// sender: when every slot is taken, it gives its slot to a new client. A request arrives in
/// microseconds to milliseconds on any network a client of ssdlab uses; a slow-loris client
/// trickles one byte every few seconds.
pub const SLOW_REQUEST: Duration = Duration::from_secs(1);
/// Most clients waiting for a slot at once (a flood is refused without waiting).
pub const WAITERS_AT_ONCE: usize = 64;

/// Longest conversation with a refused client.
pub const REFUSAL_SECONDS: u64 = 10;
/// Most refused clients talked to at once (a flood is closed without a word).
pub const REFUSALS_AT_ONCE: usize = 64;

/// Defaults shared by the front-ends (each may choose its own idle policy).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request must be whole this long after its first byte (a value of many megabytes over a
/// slow link included).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// When every slot is taken, a connection idle this long gives its slot to a new client: idle
/// clients cannot lock a good one out, and a connection in use (a pause of a second is long
/// for a client that is working) keeps its slot.
pub const DEFAULT_EVICT_IDLE_AFTER: Duration = Duration::from_secs(1);
/// The most connections any server accepts (file descriptors and buffers are the limit).
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Log prefix and name in messages, e.g. "ssdlab serve".
    pub name: String,
    /// HOST:PORT (port 0 picks a free port).
    pub listen: String,
    pub max_connections: usize,
    /// The whole handshake (from accept until the protocol calls [`Conn::established`]).
    pub handshake_timeout: Duration,
    /// After the handshake: cut a connection whose request (as marked with [`Pace`]) is not
    /// whole this long after its first byte.
    pub request_timeout: Option<Duration>,
    /// After the handshake: cut a connection with no byte read or written for this long.
    pub idle_timeout: Option<Duration>,
    /// When every slot is taken: a connection idle at least this long gives its slot to a new
    /// client. None: established connections are never evicted.
    pub evict_idle_after: Option<Duration>,
    /// PEM certificate chain and key.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub tls_mode: TlsMode,
    /// Whether the protocol can do TLS at all (for the loopback rule's message).
    pub tls_supported: bool,
    /// Non-loopback addresses without TLS (the explicit, documented opt-in).
    pub allow_remote: bool,
    pub quiet: bool,
    /// Handle SIGINT/SIGTERM (shutdown) and SIGUSR1 ([`Protocol::on_usr1`]).
    pub signals: bool,
    /// Worker threads of the runtime (0: the cores, at most 4; 1: a single-threaded runtime on
    /// the thread that calls [`Server::run`]).
    pub worker_threads: usize,
    /// Interval of the rate-limited log.
    pub log_interval: Duration,
    pub stats: Arc<Stats>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: "ssdlab".into(),
            listen: "127.0.0.1:0".into(),
            max_connections: 16,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            idle_timeout: None,
            evict_idle_after: Some(DEFAULT_EVICT_IDLE_AFTER),
            tls: None,
            tls_mode: TlsMode::StartTls,
            tls_supported: true,
            allow_remote: false,
            quiet: false,
            signals: true,
            worker_threads: 0,
            log_interval: Duration::from_secs(5),
            stats: Arc::new(Stats::default()),
        }
    }
}

/// Parse `listen` and apply the loopback rule (crates/netrules' [`ssdlab_netrules::check_listen`],
/// the one rule for async and blocking listeners) as a [`ServeError::Address`].
pub fn check_listen(listen: &str, tls: bool, tls_supported: bool, allow_remote: bool) -> Result<SocketAddr, ServeError> {
    ssdlab_netrules::check_listen(listen, tls, tls_supported, allow_remote).map_err(ServeError::Address)
}

/// A handle that stops a running server from any thread.
#[derive(Clone)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Shutdown {
    fn new() -> Shutdown {
        Shutdown(Arc::new(watch::channel(false).0))
    }
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
    fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// What connections share with the core.
pub(crate) struct Shared {
    pub epoch: Instant,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub shutdown: Shutdown,
    pub log: RateLog,
    /// Refused clients being talked to now.
    pub refusing: std::sync::atomic::AtomicUsize,
    /// Clients waiting for a slot now, and the signal that one was given back.
    pub waiting: std::sync::atomic::AtomicUsize,
    pub slot_freed: tokio::sync::Notify,
}

/// Live connections, for eviction.
struct Registry {
    next_id: u64,
    live: HashMap<u64, Arc<Meter>>,
}

/// A bound server, ready to run.
pub struct Server<P: Protocol> {
    proto: Arc<P>,
    opts: Options,
    listener: std::net::TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl<P: Protocol> Server<P> {
    /// Check the options (limits that leave the server unusable are refused), apply the
    /// loopback rule, load TLS and bind.
    pub fn bind(opts: Options, proto: Arc<P>) -> Result<Server<P>, ServeError> {
        Self::with_listener(opts, None, proto)
    }

    /// A command's server (`listener` None: bind `opts.listen` and stop on SIGINT/SIGTERM), or
    /// one on a listener the caller bound (tests, embedding: no signal handlers; it stops when
    /// the stop function given to [`Server::run`] says so).
    pub fn start(opts: Options, listener: Option<std::net::TcpListener>, proto: Arc<P>) -> Result<Server<P>, ServeError> {
        match listener {
            None => Self::bind(Options { signals: true, ..opts }, proto),
            Some(l) => Self::on_listener(Options { signals: false, ..opts }, l, proto),
        }
    }

    /// On `listener`, bound by the caller (tests: a port the OS picked): made non-blocking,
    /// and `opts.listen` set to its address.
    pub fn on_listener(mut opts: Options, listener: std::net::TcpListener, proto: Arc<P>) -> Result<Server<P>, ServeError> {
        listener.set_nonblocking(true)?;
        opts.listen = listener.local_addr()?.to_string();
        Self::with_listener(opts, Some(listener), proto)
    }

    /// As [`Server::bind`], on a listener bound earlier with [`bind_listener`] (a front-end
    /// that reports its address before it builds its protocol state).
    pub fn with_listener(opts: Options, listener: Option<std::net::TcpListener>, proto: Arc<P>) -> Result<Server<P>, ServeError> {
        listen::check_limits(opts.max_connections, opts.handshake_timeout, opts.request_timeout, opts.idle_timeout, opts.evict_idle_after)?;
        if opts.tls.is_some() && !opts.tls_supported {
            return Err(ServeError::BadOption(format!(
                "{}: this protocol has no TLS (--tls-cert and --tls-key are not for it)",
                opts.name
            )));
        }
        let tls = match &opts.tls {
            Some((cert, key)) => Some(tls::server_config(cert, key).map_err(ServeError::Tls)?),
            None => None,
        };
        let addr = check_listen(&opts.listen, tls.is_some(), opts.tls_supported, opts.allow_remote)?;
        let listener = match listener {
            Some(l) => l,
            None => listen(addr).map_err(|source| ServeError::Bind { addr, source })?,
        };
        let addr = listener.local_addr().map_err(|e| ServeError::Failed(format!("{addr}: {e}")))?;
        // The rule was checked on `opts.listen`; the socket served must be one it allows (a
        // caller's listener bound elsewhere than its options say would slip past it). A socket
        // handed in from outside is input, so a refused one is an error, not an assertion.
        if ssdlab_netrules::check_listen(&addr.to_string(), tls.is_some(), opts.tls_supported, opts.allow_remote).is_err() {
            return Err(ServeError::BadOption(format!(
                "{}: listening on {addr}, which the loopback rule refuses (--listen {})",
                opts.name, opts.listen
            )));
        }
        let shared = Arc::new(Shared {
            epoch: Instant::now(),
            tls,
            shutdown: Shutdown::new(),
            log: RateLog::new(&opts.name, opts.quiet, opts.log_interval),
            refusing: std::sync::atomic::AtomicUsize::new(0),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            slot_freed: tokio::sync::Notify::new(),
        });
        Ok(Server { proto, opts, listener, addr, shared })
    }

    /// The bound address (the real port when the options said port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn shutdown_handle(&self) -> Shutdown {
        self.shared.shutdown.clone()
    }

    pub fn log(&self) -> &RateLog {
        &self.shared.log
    }

    pub fn tls_enabled(&self) -> bool {
        self.shared.tls.is_some()
    }

    /// Serve until SIGINT/SIGTERM (with `signals`), [`Shutdown::trigger`], or `stop()`
    /// returning true (polled every 100 ms on this thread: e.g. Python's signal check). Then
    /// cut the connections, wait for them, and call [`Protocol::on_shutdown`].
    pub fn run(self, stop: Option<&dyn Fn() -> bool>) -> Result<(), ServeError> {
        raise_fd_limit(self.opts.max_connections);
        let workers = if self.opts.worker_threads > 0 {
            self.opts.worker_threads
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).min(4)
        };
        // One worker: everything on the calling thread (no cross-thread wake-ups, the lowest
        // latency per round trip, which is what a one-client protocol like serprog needs).
        let mut builder =
            if workers == 1 { tokio::runtime::Builder::new_current_thread() } else { tokio::runtime::Builder::new_multi_thread() };
        if workers > 1 {
            builder.worker_threads(workers);
        }
        let rt = builder
            .thread_name(format!("{}-io", self.opts.name.replace(' ', "-")))
            .enable_all()
            .build()
            .map_err(|e| ServeError::Failed(format!("cannot start the server runtime: {e}")))?;
        let proto = self.proto.clone();
        let shared = self.shared.clone();
        let res = rt.block_on(self.accept_loop(stop));
        // The protocol's shutdown work runs only once the server is stopping.
        assert!(res.is_err() || shared.shutdown.is_triggered(), "the accept loop ended without a shutdown");
        // Tasks stuck in a blocking call must not hold the process.
        rt.shutdown_timeout(Duration::from_secs(2));
        shared.log.flush();
        res?;
        proto.on_shutdown()
    }

    async fn accept_loop(self, stop: Option<&dyn Fn() -> bool>) -> Result<(), ServeError> {
        let Server { proto, opts, listener, shared, .. } = self;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| ServeError::Failed(e.to_string()))?;
        let stats = opts.stats.clone();
        let registry = Arc::new(Mutex::new(Registry { next_id: 0, live: HashMap::new() }));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut shutdown = shared.shutdown.subscribe();
        use tokio::signal::unix::{signal, SignalKind};
        let mut sigs = if opts.signals {
            let mk = |k| signal(k).map_err(|e| ServeError::Failed(format!("cannot handle signals: {e}")));
            Some((mk(SignalKind::interrupt())?, mk(SignalKind::terminate())?, mk(SignalKind::user_defined1())?))
        } else {
            None
        };
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks = 0u64;
        // Connection tasks that panicked (that connection's end; it gave nothing back).
        let mut panicked = 0usize;
        loop {
            let signal_fut = async {
                match sigs.as_mut() {
                    Some((int, term, usr1)) => tokio::select! {
                        _ = int.recv() => Some(false),
                        _ = term.recv() => Some(false),
                        _ = usr1.recv() => Some(true),
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                acc = listener.accept() => match acc {
                    Ok((tcp, peer)) => admit(&proto, &opts, &shared, &stats, &registry, &mut tasks, tcp, peer),
                    Err(e) => {
                        // Out of file descriptors and the like: keep serving the others.
                        shared.log.event("accept failures", format!("accept failed: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                s = signal_fut => match s {
                    Some(true) => proto.on_usr1(),
                    _ => shared.shutdown.trigger(),
                },
                _ = shutdown.changed() => {}
                _ = tick.tick() => {
                    ticks += 1;
                    if stop.is_some_and(|f| f()) {
                        shared.shutdown.trigger();
                    }
                    if ticks.is_multiple_of(50) {
                        shared.log.tick();
                    }
                    while let Some(r) = tasks.try_join_next() {
                        panicked += usize::from(r.is_err());
                    }
                }
            }
            if shared.shutdown.is_triggered() {
                break;
            }
        }
        drop(listener);
        shared.log.info("shutting down");
        // Every watchdog sees the shutdown and cuts its connection; wait for them all.
        let wait = async {
            while let Some(r) = tasks.join_next().await {
                panicked += usize::from(r.is_err());
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), wait).await.is_err() {
            shared.log.error("some connections did not end within 10 s of the shutdown");
        } else if panicked == 0 {
            // Every task ran to its end, so each gave back what it took: its slot, its place
            // among the waiters or the refused. Debug builds only: at this point a leak has
            // done its harm, and a release server still writes its metrics.
            debug_assert!(crate::lock(&registry).live.is_empty(), "connections left in the registry after they all ended");
            debug_assert_eq!(shared.waiting.load(Ordering::Acquire), 0, "clients still counted as waiting after shutdown");
            debug_assert_eq!(shared.refusing.load(Ordering::Acquire), 0, "refusals still counted after shutdown");
        }
        Ok(())
    }
}

fn evict_grace(opts: &Options) -> Duration {
    EVICT_GRACE.min(opts.handshake_timeout / 2)
}

/// A slot for a new client now, evicting if the rules allow; None if every slot is taken.
fn take_slot(registry: &Mutex<Registry>, opts: &Options, shared: &Shared, stats: &Stats, meter: &Arc<Meter>) -> Option<u64> {
    let mut reg = crate::lock(registry);
    // A client takes one slot: one that has a slot does not ask again (it would evict itself).
    // O(live), debug builds only.
    debug_assert!(!reg.live.values().any(|m| Arc::ptr_eq(m, meter)), "a client asked for a second slot");
    if reg.live.len() >= opts.max_connections {
        let victim = pick_victim(&reg.live, opts, shared.epoch)?;
        let m = reg.live.remove(&victim).expect("victim is live");
        m.cut(Cut::Evicted);
        stats.evicted.fetch_add(1, Ordering::Relaxed);
    }
    let id = reg.next_id;
    reg.next_id += 1;
    let reused = reg.live.insert(id, meter.clone());
    assert!(reused.is_none(), "connection id {id} handed out twice");
    assert!(reg.live.len() <= opts.max_connections, "{} live connections, {} slots", reg.live.len(), opts.max_connections);
    Some(id)
}

/// A new client: give it a slot (evicting if the rules allow), or let it wait up to
/// `ADMIT_WAIT` for one (a client that just said goodbye may not have given its slot back
/// yet), or refuse it.
#[allow(clippy::too_many_arguments)]
fn admit<P: Protocol>(
    proto: &Arc<P>,
    opts: &Options,
    shared: &Arc<Shared>,
    stats: &Arc<Stats>,
    registry: &Arc<Mutex<Registry>>,
    tasks: &mut JoinSet<()>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    if peer_gone(&tcp) {
        // Connected and hung up before we got to it (a flood of connect-and-close): nobody
        // to serve or to refuse, and it must not take a slot or a place in the queue.
        stats.abandoned.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let _ = tcp.set_nodelay(true);
    let meter = Arc::new(Meter::new(shared.epoch));
    let slot = take_slot(registry, opts, shared, stats, &meter);
    if slot.is_none() && shared.waiting.fetch_add(1, Ordering::AcqRel) >= WAITERS_AT_ONCE {
        // A flood: refuse without waiting.
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        refuse(proto, opts, shared, stats, tasks, Conn::new(tcp, peer, meter, shared.clone()));
        return;
    }
    // Only this loop adds waiters; their tasks only leave.
    debug_assert!(shared.waiting.load(Ordering::Acquire) <= WAITERS_AT_ONCE, "more clients waiting than WAITERS_AT_ONCE");
    let (proto, shared, stats, registry, opts) = (proto.clone(), shared.clone(), stats.clone(), registry.clone(), opts.clone());
    tasks.spawn(async move {
        let id = match slot {
            Some(id) => id,
            None => {
                // Some(id): a slot; None: the client hung up while it waited.
                let wait = async {
                    loop {
                        let freed = shared.slot_freed.notified();
                        tokio::pin!(freed);
                        freed.as_mut().enable();
                        if peer_gone(&tcp) {
                            return None;
                        }
                        if let Some(id) = take_slot(&registry, &opts, &shared, &stats, &meter) {
                            return Some(id);
                        }
                        // A slot comes back, or a handshake outgrows its grace and may be evicted.
                        tokio::select! {
                            _ = freed.as_mut() => {}
                            _ = tokio::time::sleep(evict_grace(&opts) / 4) => {}
                        }
                    }
                };
                // A client still waiting when the server stops is refused (and counted so).
                let mut shutdown = shared.shutdown.subscribe();
                let got = tokio::select! {
                    got = tokio::time::timeout(ADMIT_WAIT, wait) => got.ok(),
                    _ = shutdown.wait_for(|&s| s) => None,
                };
                let was = shared.waiting.fetch_sub(1, Ordering::AcqRel);
                // This task was counted when the accept loop let it wait.
                debug_assert!(was > 0, "the waiter count went below zero");
                match got {
                    Some(Some(id)) => id,
                    Some(None) => {
                        // Hung up while it waited: dropping the socket closes it.
                        stats.abandoned.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    None => {
                        refused_conversation(&proto, &opts, &shared, &stats, Conn::new(tcp, peer, meter, shared.clone())).await;
                        return;
                    }
                }
            }
        };
        serve_conn(proto, &opts, shared, stats, registry, tcp, peer, meter, id).await;
    });
}

/// Whether the client has already hung up (its FIN or RST is here and it sent nothing): one
/// non-blocking peek. A peek cannot tell a close from a half-close: a client that sent bytes
/// and then closed is admitted as usual (and a client-first protocol serves a request sent
/// with a half-close); one that half-closed without a byte is taken as gone, greeting or not.
fn peer_gone(tcp: &tokio::net::TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match socket2::SockRef::from(tcp).peek(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
    }
}

/// Refuse a client from a task of its own.
fn refuse<P: Protocol>(proto: &Arc<P>, opts: &Options, shared: &Arc<Shared>, stats: &Arc<Stats>, tasks: &mut JoinSet<()>, conn: Conn) {
    let (proto, opts, shared, stats) = (proto.clone(), opts.clone(), shared.clone(), stats.clone());
    tasks.spawn(async move { refused_conversation(&proto, &opts, &shared, &stats, conn).await });
}

/// Count and log a refusal, then let the protocol tell the client (bounded in time and in
/// how many at once; beyond that the connection is just closed).
async fn refused_conversation<P: Protocol>(proto: &Arc<P>, opts: &Options, shared: &Arc<Shared>, stats: &Arc<Stats>, conn: Conn) {
    stats.refused.fetch_add(1, Ordering::Relaxed);
    shared
        .log
        .event("refused connections", format!("refused {}: {} connections open (--max-connections)", conn.peer(), opts.max_connections));
    if shared.refusing.fetch_add(1, Ordering::AcqRel) >= REFUSALS_AT_ONCE {
        shared.refusing.fetch_sub(1, Ordering::AcqRel);
        return; // dropping the socket closes it
    }
    let why = Refused::Full { max_connections: opts.max_connections };
    let mut shutdown = shared.shutdown.subscribe();
    tokio::select! {
        // A panic here would otherwise keep its place among the refusals for good.
        _ = CatchUnwind(Box::pin(proto.clone().refused(conn, why))) => {}
        _ = tokio::time::sleep(Duration::from_secs(REFUSAL_SECONDS)) => {}
        _ = shutdown.wait_for(|&s| s) => {}
    }
    let was = shared.refusing.fetch_sub(1, Ordering::AcqRel);
    // This conversation was counted above; a count already at zero means one left twice.
    debug_assert!(was > 0, "the refusal count went below zero");
}

/// Serve an admitted connection under its watchdog, then give its slot back.
#[allow(clippy::too_many_arguments)]
async fn serve_conn<P: Protocol>(
    proto: Arc<P>,
    opts: &Options,
    shared: Arc<Shared>,
    stats: Arc<Stats>,
    registry: Arc<Mutex<Registry>>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    meter: Arc<Meter>,
    id: u64,
) {
    // The meter is the one `admit` made for this client: its handshake deadline counts from
    // then, and only the Conn made below may mark the handshake done.
    debug_assert!(!meter.established(), "connection {id} established before it was served");
    stats.connections_total.fetch_add(1, Ordering::Relaxed);
    stats.connections_active.fetch_add(1, Ordering::Relaxed);
    let implicit_tls = opts.tls_mode == TlsMode::Implicit && shared.tls.is_some();
    let limits = Limits { handshake: opts.handshake_timeout, request: opts.request_timeout, idle: opts.idle_timeout };
    let mut conn = Conn::new(tcp, peer, meter.clone(), shared.clone());
    let work = async move {
        if implicit_tls {
            if let Err(e) = conn.start_tls().await {
                return ConnEnd::Protocol(format!("TLS handshake failed: {e}"));
            }
        }
        proto.serve(conn).await
    };
    let end = tokio::select! {
        biased;
        cut = watchdog(&meter, &shared, limits) => Err(cut),
        end = CatchUnwind(Box::pin(work)) => Ok(end),
    };
    // A session on a blocking thread (Conn::into_blocking) ends when its socket does.
    meter.shut_blocking();
    let left = crate::lock(&registry).live.remove(&id);
    // Eviction (the only cut a connection is sent) takes it out of the registry; else it leaves now.
    assert_eq!(left.is_none(), meter.cut_reason() == Some(Cut::Evicted), "connection {id} left the registry twice or never");
    let was = stats.connections_active.fetch_sub(1, Ordering::Relaxed);
    debug_assert!(was > 0, "connection {id} left, but no connection was counted active");
    // A connection counts in the total before it counts as active.
    debug_assert!(
        Stats::get(&stats.connections_active) <= Stats::get(&stats.connections_total),
        "more active connections than ever opened"
    );
    shared.slot_freed.notify_waiters();
    let log = &shared.log;
    match end {
        Ok(Ok(ConnEnd::Closed)) | Err(Cut::Shutdown) => {}
        Ok(Err(panic)) => log.event("internal errors", format!("{peer}: dropped: a bug in ssdlab: {panic}")),
        Ok(Ok(ConnEnd::Protocol(m))) => {
            stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            log.event("dropped connections", format!("{peer}: dropped: {m}"));
        }
        Ok(Ok(ConnEnd::Io(e))) => log.event("connection errors", format!("{peer}: {e}")),
        Err(Cut::Handshake) => {
            stats.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
            log.event("handshake timeouts", format!("{peer}: cut: handshake not finished within {:?}", limits.handshake));
        }
        Err(Cut::Request) => {
            // The watchdog cuts only for the deadlines the options set.
            debug_assert!(limits.request.is_some(), "cut for a request deadline that is off");
            stats.request_timeouts.fetch_add(1, Ordering::Relaxed);
            log.event(
                "request timeouts",
                format!("{peer}: cut: a request still incomplete {:?} after its first byte", limits.request.unwrap_or_default()),
            );
        }
        Err(Cut::Idle) => {
            debug_assert!(limits.idle.is_some(), "cut for an idle timeout that is off");
            stats.idle_timeouts.fetch_add(1, Ordering::Relaxed);
            log.event("idle timeouts", format!("{peer}: cut: idle for {:?}", limits.idle.unwrap_or_default()));
        }
        Err(Cut::Evicted) => log.event("evictions", format!("{peer}: cut to make room for a new client (every slot taken)")),
    }
}

/// A connection's future with its panic caught. A bug in a protocol ends that connection (the
/// panic message is returned), and the core still takes it out of the registry and the active
/// count; uncaught, the panic would end the task there and its slot would stay taken until an
/// eviction rule happened to pick it (never, for a busy or never-evicted one).
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let fut = &mut self.0;
        // What a protocol shares with other connections is locked under the lock-poisoning
        // policy (crates/netrules), as when tokio caught the panic at the task's edge; this
        // future is not polled again after its panic.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(poll) => poll.map(Ok),
            Err(payload) => {
                let m = payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
                std::task::Poll::Ready(Err(m.unwrap_or_else(|| "a panic".into())))
            }
        }
    }
}

/// Who gives up a slot: the connection longest in its handshake, else the one receiving a
/// request for longest (if for `SLOW_REQUEST` or more), else (with `evict_idle_after`) the one
/// idle longest if it has been idle that long.
fn pick_victim(live: &HashMap<u64, Arc<Meter>>, opts: &Options, epoch: Instant) -> Option<u64> {
    // Called for a new client only when every slot is taken: nobody gives a slot up for nothing.
    debug_assert!(live.len() >= opts.max_connections, "eviction with {} of {} slots taken", live.len(), opts.max_connections);
    let now = Instant::now();
    let grace = evict_grace(opts);
    let in_handshake = live
        .iter()
        .filter(|(_, m)| !m.established() && now.saturating_duration_since(m.started) >= grace)
        .min_by_key(|(id, m)| (m.started, **id));
    if let Some((&id, _)) = in_handshake {
        return Some(id);
    }
    let slowest = live
        .iter()
        .filter_map(|(&id, m)| Some((m.request_since(epoch)?, id)))
        .filter(|&(since, _)| now.saturating_duration_since(since) >= SLOW_REQUEST)
        .min();
    if let Some((_, id)) = slowest {
        return Some(id);
    }
    let after = opts.evict_idle_after?;
    live.iter()
        .map(|(&id, m)| (now.saturating_duration_since(m.last_io(epoch)), id))
        .filter(|&(idle, _)| idle >= after)
        .max()
        .map(|(_, id)| id)
}

/// A connection's deadlines.
#[derive(Clone, Copy)]
struct Limits {
    handshake: Duration,
    request: Option<Duration>,
    idle: Option<Duration>,
}

impl Limits {
    /// The first deadline the connection must meet now, and what missing it means.
    fn next(&self, m: &Meter, epoch: Instant) -> Option<(Instant, Cut)> {
        // The options were checked at bind (`check_limits`), so the sums below cannot overflow.
        debug_assert!(
            self.handshake <= MAX_TIMEOUT && self.request.is_none_or(|d| d <= MAX_TIMEOUT) && self.idle.is_none_or(|d| d <= MAX_TIMEOUT),
            "deadlines beyond MAX_TIMEOUT reached a connection"
        );
        if !m.established() {
            return Some((m.started + self.handshake, Cut::Handshake));
        }
        let request = self.request.zip(m.request_since(epoch)).map(|(d, since)| (since + d, Cut::Request));
        let idle = self.idle.map(|d| (m.last_io(epoch) + d, Cut::Idle));
        match (request, idle) {
            (Some(r), Some(i)) => Some(if r.0 <= i.0 { r } else { i }),
            (r, i) => r.or(i),
        }
    }
}

/// Resolves when the connection must be cut, and why.
async fn watchdog(m: &Meter, sh: &Shared, limits: Limits) -> Cut {
    let mut shutdown = sh.shutdown.subscribe();
    loop {
        if *shutdown.borrow_and_update() {
            return Cut::Shutdown;
        }
        if let Some(c) = m.cut_reason() {
            // Eviction is the only cut sent to a connection (the others are this watchdog's
            // own); `serve_conn` relies on it to tell who took the connection out of the registry.
            debug_assert_eq!(c, Cut::Evicted, "a connection was sent a cut other than eviction");
            return c;
        }
        let deadline = limits.next(m, sh.epoch).map(|(d, _)| d);
        // A request that begins later is not announced (marking one is an atomic store, no
        // wake-up): look again every half request deadline, so a trickled request is cut
        // within 1.5 deadlines of its first byte.
        let look_again = limits.request.map(|d| Instant::now() + d / 2);
        let wake = match (deadline, look_again) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = async {
            match wake {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {
                // The deadline may have moved (activity, handshake done, request done): check again.
                if let Some((d, why)) = limits.next(m, sh.epoch) {
                    if Instant::now() >= d {
                        return why;
                    }
                }
            }
            _ = m.kick.notified() => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Run `f` (which may fsync, or hold a device lock for long) from a connection's task without
/// stalling the other connections of its worker thread: `block_in_place` on the core's
/// multi-threaded runtime, a plain call elsewhere (tests and fuzzing run on one thread).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Bind `listen_on` after the loopback rule (see [`check_listen`]); for [`Server::with_listener`].
pub fn bind_listener(listen_on: &str, tls: bool, tls_supported: bool, allow_remote: bool) -> Result<std::net::TcpListener, ServeError> {
    let addr = check_listen(listen_on, tls, tls_supported, allow_remote)?;
    listen(addr).map_err(|source| ServeError::Bind { addr, source })
}

/// A listening socket with a backlog for bursts of clients (std's 128 makes a burst of
/// connects wait for SYN retransmits) and SO_REUSEADDR (a restarted server gets its port back).
fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Connections need file descriptors: raise the soft limit towards the hard one.
fn raise_fd_limit(max_connections: usize) {
    let mut lim = libc_rlimit();
    let want = (max_connections as u64).saturating_mul(2).saturating_add(256);
    if lim.0 < want && lim.0 < lim.1 {
        lim.0 = want.min(lim.1);
        set_libc_rlimit(lim);
    }
}

fn libc_rlimit() -> (u64, u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return (u64::MAX, u64::MAX);
    }
    (r.rlim_cur, r.rlim_max)
}

fn set_libc_rlimit((cur, max): (u64, u64)) {
    let r = libc::rlimit { rlim_cur: cur, rlim_max: max };
    // SAFETY: setrlimit reads the struct; failure leaves the limit as it was.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_the_loopback_rule_refuses_is_an_address_error() {
        assert!(check_listen("127.0.0.1:0", false, true, false).is_ok());
        let e = check_listen("0.0.0.0:2222", false, false, false).unwrap_err();
        assert!(matches!(e, ServeError::Address(ref m) if m.contains("--allow-remote")), "{e:?}");
    }
}
