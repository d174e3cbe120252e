//! The server core against hostile clients: slow-loris handshakes, idle connections, floods.
//! A small line protocol stands in for the real ones: the client's "HELLO\n" is the handshake,
//! then every line is echoed back; "BYE\n" ends the session.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ssdlab_server::{Conn, ConnEnd, Options, Protocol, Refused, ServeError, Server, Shutdown, Stats, EVICT_GRACE};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as TokioBufReader};

#[derive(Default)]
struct Echo {
    shutdowns: AtomicU64,
}

impl Protocol for Echo {
    async fn serve(self: Arc<Self>, conn: Conn) -> ConnEnd {
        let mut r = TokioBufReader::new(conn);
        let mut line = String::new();
        match r.read_line(&mut line).await {
            Ok(0) => return ConnEnd::Closed,
            Ok(_) if line == "HELLO\n" => {}
            // A bug in a protocol, after the handshake (so only eviction of an idle client could
            // take the slot back): its connection ends, the server goes on.
            Ok(_) if line == "HELLO PANIC\n" => {
                r.get_ref().established();
                panic!("the echo protocol's bug");
            }
            Ok(_) => return ConnEnd::Protocol(format!("bad greeting {line:?}")),
            Err(e) => return e.into(),
        }
        r.get_ref().established();
        if r.get_mut().write_all(b"WELCOME\n").await.is_err() {
            return ConnEnd::Closed;
        }
        // A line is a request: it begins with its first byte and ends with its newline.
        let pace = r.get_ref().pace();
        loop {
            line.clear();
            pace.end();
            match r.fill_buf().await {
                Ok([]) => return ConnEnd::Closed,
                Ok(_) => pace.begin(),
                Err(e) => return e.into(),
            }
            match r.read_line(&mut line).await {
                Ok(0) => return ConnEnd::Closed,
                Ok(_) if line == "BYE\n" => return ConnEnd::Closed,
                Ok(_) => {
                    if let Err(e) = r.get_mut().write_all(line.as_bytes()).await {
                        return e.into();
                    }
                }
                Err(e) => return e.into(),
            }
        }
    }
    fn refusal(&self, _: Refused) -> Vec<u8> {
        b"BUSY\n".to_vec()
    }
    fn on_shutdown(&self) -> Result<(), ServeError> {
        self.shutdowns.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

struct Running {
    addr: SocketAddr,
    stop: Shutdown,
    stats: Arc<Stats>,
    proto: Arc<Echo>,
    thread: Option<std::thread::JoinHandle<Result<(), ServeError>>>,
}

impl Running {
    fn start(opts: Options) -> Running {
        let stats = opts.stats.clone();
        let proto = Arc::new(Echo::default());
        let srv = Server::bind(Options { signals: false, quiet: true, ..opts }, proto.clone()).unwrap();
        let (addr, stop) = (srv.local_addr(), srv.shutdown_handle());
        let thread = Some(std::thread::spawn(move || srv.run(None)));
        Running { addr, stop, stats, proto, thread }
    }
    fn finish(mut self) {
        self.stop.trigger();
        self.thread.take().unwrap().join().unwrap().unwrap();
        assert_eq!(self.proto.shutdowns.load(Ordering::Relaxed), 1, "on_shutdown runs once");
        assert_eq!(Stats::get(&self.stats.connections_active), 0);
    }
}

/// A good client: handshake, one echo, goodbye. Err if refused or cut.
fn good_client(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"HELLO\nping\n").map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).map_err(|e| e.to_string())?;
    if l != "WELCOME\n" {
        return Err(format!("greeted with {l:?}"));
    }
    l.clear();
    r.read_line(&mut l).map_err(|e| e.to_string())?;
    if l != "ping\n" {
        return Err(format!("echo {l:?}"));
    }
    s.write_all(b"BYE\n").map_err(|e| e.to_string())?;
    Ok(())
}

/// True once the server closed the connection (EOF or reset on read).
fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn slow_loris_handshakes_are_cut_and_good_clients_served_meanwhile() {
    let srv = Running::start(Options { max_connections: 4, handshake_timeout: Duration::from_millis(800), ..Options::default() });
    // Four clients that trickle their greeting one byte at a time hold every slot...
    let mut loris: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(srv.addr).unwrap()).collect();
    let t0 = Instant::now();
    for round in 0..3 {
        for s in &mut loris {
            let _ = s.write_all(&b"HEL"[round..round + 1]);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // ...yet a good client is served at once: it takes the slot of the oldest handshake.
    good_client(srv.addr).unwrap();
    // The trickling clients are cut at the handshake deadline even though bytes kept coming.
    for s in &mut loris {
        assert!(closed_by_server(s, Duration::from_secs(3)), "slow-loris client still connected");
    }
    assert!(t0.elapsed() < Duration::from_secs(4));
    good_client(srv.addr).unwrap();
    // The server counts a cut after closing the socket: give the count a moment to land (a
    // loaded machine ran this assertion between the close and the count).
    let cut = || Stats::get(&srv.stats.handshake_timeouts) + Stats::get(&srv.stats.evicted);
    let deadline = Instant::now() + Duration::from_secs(2);
    while cut() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(cut() >= 4, "{} cut", cut());
    srv.finish();
}

#[test]
fn idle_connections_time_out_and_give_way_when_full() {
    let srv = Running::start(Options {
        max_connections: 3,
        idle_timeout: Some(Duration::from_millis(1500)),
        evict_idle_after: Some(Duration::from_millis(300)),
        ..Options::default()
    });
    // Three clients finish the handshake and then say nothing.
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr).unwrap();
            s.write_all(b"HELLO\n").unwrap();
            let mut l = String::new();
            BufReader::new(s.try_clone().unwrap()).read_line(&mut l).unwrap();
            assert_eq!(l, "WELCOME\n");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    // Every slot is taken, but by connections idle longer than evict_idle_after: served.
    good_client(srv.addr).unwrap();
    assert_eq!(Stats::get(&srv.stats.evicted), 1);
    // The others are cut by the idle timeout.
    let cut = idle.iter_mut().map(|s| closed_by_server(s, Duration::from_secs(4))).filter(|&c| c).count();
    assert_eq!(cut, 3);
    // Counted right after the socket is closed.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Stats::get(&srv.stats.idle_timeouts) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(Stats::get(&srv.stats.idle_timeouts) >= 2);
    srv.finish();
}

#[test]
fn busy_established_clients_are_not_evicted_and_newcomers_get_the_refusal() {
    let srv = Running::start(Options { max_connections: 1, evict_idle_after: Some(Duration::from_secs(60)), ..Options::default() });
    let mut first = TcpStream::connect(srv.addr).unwrap();
    first.write_all(b"HELLO\n").unwrap();
    let mut r = BufReader::new(first.try_clone().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    // A second client is refused at once with the protocol's refusal, not left hanging.
    let mut second = TcpStream::connect(srv.addr).unwrap();
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = String::new();
    second.read_to_string(&mut got).unwrap();
    assert_eq!(got, "BUSY\n");
    assert_eq!(Stats::get(&srv.stats.refused), 1);
    // The first one is still served.
    first.write_all(b"still here\n").unwrap();
    l.clear();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "still here\n");
    first.write_all(b"BYE\n").unwrap();
    srv.finish();
}

#[test]
fn a_connection_whose_protocol_panics_gives_its_slot_back() {
    // One slot, never evicted: a slot the panicked connection kept would lock everyone out.
    let srv = Running::start(Options { max_connections: 1, evict_idle_after: None, ..Options::default() });
    for _ in 0..2 {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.write_all(b"HELLO PANIC\n").unwrap();
        assert!(closed_by_server(&mut s, Duration::from_secs(5)), "the connection outlived its protocol's panic");
    }
    good_client(srv.addr).unwrap();
    assert_eq!(Stats::get(&srv.stats.refused), 0);
    assert_eq!(Stats::get(&srv.stats.connections_total), 3);
    // finish() checks that no connection is still counted active.
    srv.finish();
}

/// Threads of this process named `name` (other tests run their own servers meanwhile).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

#[test]
fn a_flood_of_connections_needs_no_thread_per_connection() {
    let srv = Running::start(Options {
        name: "flood test".into(),
        max_connections: 3000,
        handshake_timeout: Duration::from_secs(30),
        worker_threads: 2,
        ..Options::default()
    });
    let mut held = vec![];
    for _ in 0..2500 {
        held.push(TcpStream::connect(srv.addr).unwrap());
    }
    // All accepted and waiting in their handshake, on the same few threads.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Stats::get(&srv.stats.connections_active) < 2500 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(Stats::get(&srv.stats.connections_active), 2500);
    // The runtime's two workers (named after the server), however many connections.
    assert_eq!(threads_named("flood-test-io"), 2);
    good_client(srv.addr).unwrap();
    // Past the limit: the oldest handshakes make room (once they are past the eviction grace:
    // stuck, not just admitted); nobody is refused.
    std::thread::sleep(EVICT_GRACE);
    for _ in 0..600 {
        held.push(TcpStream::connect(srv.addr).unwrap());
    }
    good_client(srv.addr).unwrap();
    drop(held);
    srv.finish();
}

#[test]
fn unusable_limits_are_refused() {
    let p = Arc::new(Echo::default());
    for (opts, want) in [
        (Options { max_connections: 0, ..Options::default() }, "--max-connections 0"),
        (Options { handshake_timeout: Duration::ZERO, ..Options::default() }, "--handshake-timeout"),
        (Options { idle_timeout: Some(Duration::ZERO), ..Options::default() }, "--idle-timeout"),
        (Options { listen: "0.0.0.0:0".into(), ..Options::default() }, "non-loopback"),
        (Options { listen: "127.0.0.1".into(), ..Options::default() }, "HOST:PORT"),
    ] {
        let e = Server::bind(opts, p.clone()).err().unwrap();
        assert!(matches!(e, ServeError::BadOption(_) | ServeError::Address(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn shutdown_cuts_connections_and_runs_the_hook() {
    let srv = Running::start(Options::default());
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"HELLO\n").unwrap();
    let mut l = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut l).unwrap();
    let t0 = Instant::now();
    srv.finish();
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(closed_by_server(&mut s, Duration::from_secs(2)));
}

#[test]
fn tls_from_the_first_byte_or_never() {
    // Missing or bad PEM files are named in the error.
    let dir = std::env::temp_dir().join(format!("ssdlab-server-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cert.pem"), "not a certificate").unwrap();
    let opts = Options { tls: Some((dir.join("cert.pem"), dir.join("key.pem"))), ..Options::default() };
    let e = Server::bind(opts, Arc::new(Echo::default())).err().unwrap();
    assert!(matches!(e, ServeError::Tls(_)), "{e:?}");
    assert!(e.to_string().contains("cert.pem"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_burst_of_connects_does_not_evict_a_client_admitted_a_moment_ago() {
    let srv = Running::start(Options { max_connections: 1, handshake_timeout: Duration::from_secs(5), ..Options::default() });
    // A good client takes the only slot and says hello a little later than at once...
    let mut good = TcpStream::connect(srv.addr).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // ...while a burst of silent connects arrives: they wait for a slot, then are refused.
    let burst: Vec<TcpStream> = (0..30).map(|_| TcpStream::connect(srv.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(40));
    good.write_all(b"HELLO\nping\n").unwrap();
    let mut r = BufReader::new(good.try_clone().unwrap());
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "WELCOME\n", "the client admitted first was evicted by the burst");
    l.clear();
    r.read_line(&mut l).unwrap();
    assert_eq!(l, "ping\n");
    good.write_all(b"BYE\n").unwrap();
    drop((r, good, burst));
    assert_eq!(Stats::get(&srv.stats.evicted), 0);
    srv.finish();
}

#[test]
fn clients_that_hung_up_before_being_accepted_take_no_slot_and_are_not_refused() {
    // Bind, let 120 clients connect and hang up while nothing accepts yet (a connect-and-close
    // flood ahead of the accept loop; fewer than the kernel's smallest accept queue, 128), then
    // a good client: it is behind all of them, and without the peek it would find the 4 slots
    // and the 64 places to wait taken by clients that have gone.
    let opts = Options { max_connections: 4, worker_threads: 1, signals: false, quiet: true, ..Options::default() };
    let stats = opts.stats.clone();
    let srv = Server::bind(opts, Arc::new(Echo::default())).unwrap();
    let (addr, stop) = (srv.local_addr(), srv.shutdown_handle());
    for _ in 0..120 {
        drop(TcpStream::connect(addr).unwrap());
    }
    let good = std::thread::spawn(move || good_client(addr));
    std::thread::sleep(Duration::from_millis(50));
    let thread = std::thread::spawn(move || srv.run(None));
    good.join().unwrap().unwrap();
    assert_eq!(Stats::get(&stats.refused), 0, "clients that had left were counted as refused");
    assert_eq!(Stats::get(&stats.abandoned), 120);
    assert_eq!(Stats::get(&stats.connections_total), 1);
    stop.trigger();
    thread.join().unwrap().unwrap();
}

#[test]
fn clients_trickling_requests_give_their_slots_to_a_good_client_and_meet_the_request_deadline() {
    let srv = Running::start(Options {
        max_connections: 4,
        request_timeout: Some(Duration::from_millis(1500)),
        evict_idle_after: None,
        ..Options::default()
    });
    // Four clients finish the handshake, then trickle a request one byte every 200 ms: never
    // idle, never done, every slot theirs.
    let mut loris: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(srv.addr).unwrap()).collect();
    for s in &mut loris {
        s.write_all(b"HELLO\n").unwrap();
    }
    let t0 = Instant::now();
    while t0.elapsed() < ssdlab_server::SLOW_REQUEST + Duration::from_millis(200) {
        for s in &mut loris {
            let _ = s.write_all(b"x");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A good client takes the slot of the slowest request at once (no eviction of idle
    // connections is configured: it is the trickling that gives the slot up).
    let t = Instant::now();
    good_client(srv.addr).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "served after {:?}", t.elapsed());
    assert!(Stats::get(&srv.stats.evicted) >= 1);
    // The others are cut at the request deadline (1.5 deadlines at most) though bytes keep coming.
    let trickle = std::thread::spawn({
        let mut socks: Vec<TcpStream> = loris.iter().map(|s| s.try_clone().unwrap()).collect();
        move || {
            for _ in 0..15 {
                for s in &mut socks {
                    let _ = s.write_all(b"x");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    for s in &mut loris {
        assert!(closed_by_server(s, Duration::from_secs(4)), "a trickling client is still connected");
    }
    trickle.join().unwrap();
    assert!(Stats::get(&srv.stats.request_timeouts) >= 1, "no request deadline met");
    // A client that pauses between whole requests is not cut by the request deadline.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"HELLO\n").unwrap();
    for _ in 0..4 {
        s.write_all(b"ping\n").unwrap();
        std::thread::sleep(Duration::from_millis(600));
    }
    assert!(!closed_by_server(&mut s, Duration::from_millis(100)), "a client pausing between requests was cut");
    srv.finish();
}

#[test]
fn idle_clients_at_the_cap_yield_to_a_good_client_by_default() {
    // The defaults: a connection idle for DEFAULT_EVICT_IDLE_AFTER gives its slot when all are taken.
    let srv = Running::start(Options { max_connections: 8, ..Options::default() });
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr).unwrap();
            let _ = s.write_all(b"HELLO\n");
            s
        })
        .collect();
    std::thread::sleep(ssdlab_server::DEFAULT_EVICT_IDLE_AFTER + Duration::from_millis(300));
    let t = Instant::now();
    good_client(srv.addr).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "served after {:?}", t.elapsed());
    drop(idle);
    srv.finish();
}
