//! The memcached server over real sockets, byte by byte: replies of every command, pipelining,
//! noreply, refusals that keep or drop the connection, the connection limit, shutdown.
//! (tests/test_cache_serve.py drives it with third-party clients.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ssdlab_memcached::fuzzing::small_cache;
use ssdlab_memcached::{serve_on, MemcachedOptions, Server};
use ssdlab_server::{ListenOptions, ServeError};

fn start_result(max_connections: usize) -> (Arc<Server>, String, JoinHandle<Result<serde_json::Value, ServeError>>) {
    start_opts(MemcachedOptions { listen: listen(max_connections), max_value_bytes: 100_000, quiet: true, ..MemcachedOptions::default() })
}

/// The default listener with `max_connections` (the tests bind their own port).
fn listen(max_connections: usize) -> ListenOptions {
    ListenOptions { max_connections, ..MemcachedOptions::default().listen }
}

fn start_opts(opts: MemcachedOptions) -> (Arc<Server>, String, JoinHandle<Result<serde_json::Value, ServeError>>) {
    let srv = Server::new(small_cache(), opts).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let s2 = srv.clone();
    (srv, addr, std::thread::spawn(move || serve_on(s2, l)))
}

fn start(max_connections: usize) -> (Arc<Server>, String, JoinHandle<serde_json::Value>) {
    let (srv, addr, h) = start_result(max_connections);
    (srv, addr, std::thread::spawn(move || h.join().unwrap().unwrap()))
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn new(addr: &str) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { r: BufReader::new(s.try_clone().unwrap()), w: s }
    }
    fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).unwrap();
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
    /// The general `stats`, by name.
    fn stats(&mut self) -> std::collections::HashMap<String, String> {
        self.send(b"stats\r\n");
        let mut stats = std::collections::HashMap::new();
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return stats;
            }
            let mut p = l.trim_end().splitn(3, ' ');
            assert_eq!(p.next(), Some("STAT"));
            stats.insert(p.next().unwrap().to_string(), p.next().unwrap().to_string());
        }
    }
    /// The server closed the connection (EOF or reset) before the read timeout, with nothing
    /// more to read.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.r.read(&mut b) {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }
}

#[test]
fn protocol_end_to_end() {
    let (srv, addr, h) = start(4);
    let mut c = Client::new(&addr);
    c.send(b"set a 5 0 3\r\nxyz\r\nget a b\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    assert_eq!(c.line(), "VALUE a 5 3\r\n");
    assert_eq!(c.line(), "xyz\r\n");
    assert_eq!(c.line(), "END\r\n");
    // add / replace
    c.send(b"add a 0 0 1\r\nq\r\nadd b 0 0 1\r\nq\r\nreplace zz 0 0 1\r\nq\r\nreplace b 7 0 2\r\nqq\r\n");
    for want in ["NOT_STORED", "STORED", "NOT_STORED", "STORED"] {
        assert_eq!(c.line(), format!("{want}\r\n"));
    }
    // gets / cas
    c.send(b"gets b\r\n");
    let v = c.line();
    let cas: u64 = v.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v.starts_with("VALUE b 7 2 "), "{v}");
    assert_eq!((c.line(), c.line()), ("qq\r\n".into(), "END\r\n".into()));
    c.send(format!("cas b 1 0 1 {}\r\nA\r\ncas b 1 0 1 {cas}\r\nB\r\ncas nope 0 0 1 1\r\nC\r\n", cas + 1000).as_bytes());
    assert_eq!(c.line(), "EXISTS\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    assert_eq!(c.line(), "NOT_FOUND\r\n");
    // touch keeps the value and CAS; a negative exptime expires at once
    c.send(b"touch b 100\r\ntouch nope 1\r\ngets b\r\n");
    assert_eq!(c.line(), "TOUCHED\r\n");
    assert_eq!(c.line(), "NOT_FOUND\r\n");
    assert!(c.line().starts_with("VALUE b 1 1 "));
    assert_eq!((c.line(), c.line()), ("B\r\n".into(), "END\r\n".into()));
    c.send(b"touch b -1\r\nget b\r\n");
    assert_eq!((c.line(), c.line()), ("TOUCHED\r\n".into(), "END\r\n".into()));
    // delete, noreply (no reply lines at all), version
    c.send(b"delete a\r\ndelete a\r\nset n 0 0 1 noreply\r\nn\r\ndelete n noreply\r\nversion\r\n");
    assert_eq!(c.line(), "DELETED\r\n");
    assert_eq!(c.line(), "NOT_FOUND\r\n");
    assert!(c.line().starts_with("VERSION 1.6.0-ssdlab-"));
    // refusals that keep the connection
    c.send(b"bogus\r\nget\r\nset k 0 0 200000\r\n");
    c.send(&vec![b'x'; 200_002]);
    // memcached reads the data block of a line refused for its format as the next command.
    c.send(format!("set {} 0 0 1\r\nx\r\nget ok\r\n", "k".repeat(251)).as_bytes());
    assert_eq!(c.line(), "ERROR\r\n");
    assert_eq!(c.line(), "ERROR\r\n");
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR bad command line format\r\n");
    assert_eq!(c.line(), "ERROR\r\n");
    assert_eq!(c.line(), "END\r\n");
    // stats
    let stats = c.stats();
    for k in [
        "pid",
        "uptime",
        "curr_items",
        "get_hits",
        "get_misses",
        "cmd_get",
        "cmd_set",
        "dlwa",
        "alwa",
        "dram_hit_ratio",
        "nvm_hit_ratio",
        "device_host_write_bytes",
        "device_media_write_bytes",
    ] {
        assert!(stats.contains_key(k), "stats lacks {k}");
    }
    assert_eq!(stats["pid"], std::process::id().to_string());
    assert_eq!(stats["cas_badval"], "1");
    // a bad data chunk: memcached's reply, and the stream goes on after the declared bytes
    let mut d = Client::new(&addr);
    d.send(b"set k 0 0 3\r\nabcdef\r\nset k 0 0 many\r\nversion\r\n");
    assert_eq!(d.line(), "CLIENT_ERROR bad data chunk\r\n");
    assert_eq!(d.line(), "ERROR\r\n"); // "f"
    assert_eq!(d.line(), "CLIENT_ERROR bad command line format\r\n");
    assert!(d.line().starts_with("VERSION "));
    // multi-get lines may be long (memcslap's 2000-key mget); other long lines close
    d.send(format!("get {}\r\n", "a ".repeat(40_000)).as_bytes());
    assert_eq!(d.line(), "END\r\n");
    d.send(format!("set {}\r\n", "a ".repeat(5_000)).as_bytes());
    assert!(d.line().starts_with("CLIENT_ERROR line longer than 8192"));
    assert!(d.closed());
    c.send(b"get b\r\n");
    assert_eq!(c.line(), "END\r\n");
    srv.verify_data().unwrap();
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    let m = h.join().unwrap();
    assert!(m["total_connections"].as_u64().unwrap() >= 2);
    assert!(c.closed(), "shutdown closes open connections");
}

#[test]
fn values_spill_to_flash_and_come_back_exact() {
    let (srv, addr, h) = start(4);
    let mut c = Client::new(&addr);
    let sizes = [10usize, 1024, 2000, 2100, 9000, 65536, 99_000];
    let val = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|j| ((i * 7919 + j * 31) % 251) as u8).collect() };
    for round in 0..30 {
        for (i, &n) in sizes.iter().enumerate() {
            let mut m = format!("set k{round}-{i} {i} 0 {n}\r\n").into_bytes();
            m.extend(val(round * 10 + i, n));
            m.extend(b"\r\n");
            c.send(&m);
            assert_eq!(c.line(), "STORED\r\n");
        }
    }
    let mut hits = 0;
    for round in 0..30 {
        for (i, &n) in sizes.iter().enumerate() {
            c.send(format!("get k{round}-{i}\r\n").as_bytes());
            let l = c.line();
            if l == "END\r\n" {
                continue; // evicted from every tier: a miss, never wrong data
            }
            assert_eq!(l, format!("VALUE k{round}-{i} {i} {n}\r\n"));
            let mut v = vec![0u8; n + 2];
            c.r.read_exact(&mut v).unwrap();
            assert_eq!(&v[..n], &val(round * 10 + i, n)[..], "k{round}-{i}");
            assert_eq!(c.line(), "END\r\n");
            hits += 1;
        }
    }
    let m = srv.summary();
    assert!(hits > 20 && m["nvm_hits"].as_u64().unwrap() > 10, "{hits} {m}");
    assert!(m["soc_items"].as_u64().unwrap() > 0 && m["loc_regions_evicted"].as_u64().unwrap() > 0, "{m}");
    // (DLWA can sit just below 1 while the device write buffer holds unprogrammed data.)
    assert!(m["dlwa"].as_f64().unwrap() > 0.5 && m["alwa"].as_f64().unwrap() > 1.0, "{m}");
    srv.verify_data().unwrap();
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn extra_connections_are_refused_and_the_slot_comes_back() {
    let (srv, addr, h) = start(2);
    let mut a = Client::new(&addr);
    let mut b = Client::new(&addr);
    a.send(b"version\r\n");
    b.send(b"version\r\n");
    assert!(a.line().starts_with("VERSION") && b.line().starts_with("VERSION"));
    let mut c = Client::new(&addr);
    assert_eq!(c.line(), "SERVER_ERROR too many open connections (--max-connections 2)\r\n");
    assert!(c.closed());
    a.send(b"quit\r\n");
    assert!(a.closed());
    std::thread::sleep(Duration::from_millis(200));
    let mut d = Client::new(&addr);
    d.send(b"version\r\n");
    assert!(d.line().starts_with("VERSION"));
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    let m = h.join().unwrap();
    assert_eq!(m["rejected_connections"], 1);
}

#[test]
fn device_bytes_that_disagree_with_the_index_stop_the_server_loudly() {
    let (srv, addr, h) = start_result(4);
    let mut c = Client::new(&addr);
    // "a" and the filler go from the 32 KiB DRAM tier to SOC buckets.
    c.send(b"set a 0 0 3\r\nabc\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    for i in 0..60 {
        c.send(format!("set f{i} 0 0 1000\r\n{}\r\n", "x".repeat(1000)).as_bytes());
        assert_eq!(c.line(), "STORED\r\n");
    }
    // Overwrite the whole SOC on the device behind the cache's back.
    srv.with_cache(|cache| {
        let n = cache.soc.bytes() as usize;
        cache.flash.dev.write(cache.soc.start_byte, &vec![0xA5; n], false).unwrap();
    });
    c.send(b"get a\r\n");
    assert!(c.closed(), "the request that hit the corruption gets no answer");
    let err = h.join().unwrap().unwrap_err();
    assert!(matches!(err, ServeError::Failed(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("internal error") && err.contains("SOC bucket"), "{err}");
}

/// Send `req` and read `n` reply lines.
fn ask(c: &mut Client, req: &str, n: usize) -> Vec<String> {
    c.send(req.as_bytes());
    (0..n).map(|_| c.line().trim_end_matches("\r\n").to_string()).collect()
}

#[test]
fn the_rest_of_the_text_protocol() {
    let (srv, addr, h) = start(4);
    let mut c = Client::new(&addr);
    // incr/decr: 64-bit wrap on incr, floor at 0 on decr, shorter results space-padded
    assert_eq!(
        ask(&mut c, "set n 3 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nget n\r\n", 6),
        ["STORED", "15", "0", "VALUE n 3 2", "0 ", "END"]
    );
    assert_eq!(ask(&mut c, "set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\nincr n 18446744073709551615\r\n", 3), ["STORED", "1", "0"]);
    assert_eq!(
        ask(&mut c, "incr nope 1\r\nset t 0 0 3\r\nabc\r\nincr t 1\r\nincr n x\r\nincr n 1 noreply\r\nget n\r\n", 7),
        [
            "NOT_FOUND",
            "STORED",
            "CLIENT_ERROR cannot increment or decrement non-numeric value",
            "CLIENT_ERROR invalid numeric delta argument",
            "VALUE n 0 20",
            "1                   ",
            "END"
        ]
    );
    // append/prepend keep flags and expiry; missing keys are NOT_STORED
    assert_eq!(
        ask(&mut c, "set a 9 0 2\r\nbc\r\nappend a 1 0 1\r\nd\r\nprepend a 1 0 1\r\na\r\nappend zz 0 0 1\r\nx\r\nget a\r\n", 7),
        ["STORED", "STORED", "STORED", "NOT_STORED", "VALUE a 9 4", "abcd", "END"]
    );
    // gat/gats return the value and set a new expiry; touch/gat with a negative time expire it
    let r = ask(&mut c, "gats 0 a\r\n", 3);
    assert!(r[0].starts_with("VALUE a 9 4 ") && r[1] == "abcd" && r[2] == "END", "{r:?}");
    assert_eq!(ask(&mut c, "gat -1 a zz\r\nget a\r\n", 4), ["VALUE a 9 4", "abcd", "END", "END"]);
    // flush_all now and later; verbosity; version and stats as memcached answers them
    assert_eq!(ask(&mut c, "set f 0 0 1\r\nx\r\nflush_all\r\nget f\r\n", 3), ["STORED", "OK", "END"]);
    assert_eq!(ask(&mut c, "set f 0 0 1\r\nx\r\nflush_all 1\r\nget f\r\n", 5), ["STORED", "OK", "VALUE f 0 1", "x", "END"]);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(ask(&mut c, "get f\r\nset g 0 0 1\r\ny\r\nget g\r\n", 5), ["END", "STORED", "VALUE g 0 1", "y", "END"]);
    assert_eq!(
        ask(&mut c, "flush_all noreply\r\nflush_all 0\r\nflush_all x\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity\r\n", 4),
        ["OK", "CLIENT_ERROR invalid exptime argument", "OK", "ERROR"]
    );
    let v = ask(&mut c, "version foo bar\r\nversion noreply\r\nstats noreply\r\nstats detail\r\nstats reset\r\nmn\r\n", 6);
    assert!(v[0].starts_with("VERSION ") && v[1] == v[0], "{v:?}");
    assert_eq!(&v[2..], ["ERROR", "CLIENT_ERROR usage: stats detail on|off|dump", "RESET", "MN"]);
    for group in ["settings", "items", "slabs", "sizes"] {
        c.send(format!("stats {group}\r\n").as_bytes());
        loop {
            let l = c.line();
            if l == "END\r\n" {
                break;
            }
            assert!(l.starts_with("STAT "), "stats {group}: {l}");
        }
    }
    // delete's forms
    assert_eq!(
        ask(&mut c, "set d 0 0 1\r\nx\r\ndelete d 0\r\ndelete d noreply\r\ndelete d 5\r\ndelete d\r\n", 4),
        ["STORED", "DELETED", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", "NOT_FOUND"]
    );
    // a too-large set also removes the old value, as in memcached
    c.send(b"set big 0 0 1\r\nx\r\nset big 0 0 200000\r\n");
    c.send(&vec![b'x'; 200_002]);
    assert_eq!(ask(&mut c, "get big\r\n", 3), ["STORED", "SERVER_ERROR object too large for cache", "END"]);
    // binary-protocol clients get a binary error reply at once, then the connection closes
    let mut b = Client::new(&addr);
    let mut req = [0u8; 24];
    req[0] = 0x80;
    req[1] = 0x0b;
    b.send(&req);
    let mut resp = [0u8; 24];
    b.r.read_exact(&mut resp).unwrap();
    assert_eq!((resp[0], resp[1], u16::from_be_bytes([resp[6], resp[7]])), (0x81, 0x0b, 0x83));
    let mut msg = vec![0u8; u32::from_be_bytes(resp[8..12].try_into().unwrap()) as usize];
    b.r.read_exact(&mut msg).unwrap();
    assert!(String::from_utf8_lossy(&msg).contains("text protocol"));
    assert!(b.closed());
    srv.verify_data().unwrap();
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    h.join().unwrap();
}

fn closed_within(c: &mut Client, secs: u64) -> bool {
    c.w.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    c.closed()
}

#[test]
fn idle_clients_give_their_slots_to_new_ones_and_floods_do_not_lock_out() {
    let opts = MemcachedOptions {
        listen: ListenOptions { evict_idle_after: Some(Duration::from_millis(500)), ..listen(8) },
        quiet: true,
        ..MemcachedOptions::default()
    };
    let (srv, addr, h) = start_opts(opts);
    let h = std::thread::spawn(move || h.join().unwrap().unwrap());
    // Every slot taken by clients that then go idle.
    let mut idle: Vec<Client> = (0..8).map(|_| Client::new(&addr)).collect();
    for c in &mut idle {
        assert!(ask(c, "version\r\n", 1)[0].starts_with("VERSION"));
    }
    std::thread::sleep(Duration::from_millis(700));
    // Good clients get in (and stay): an idle one gives way to each, and is told by a close.
    let mut good: Vec<Client> = (0..3)
        .map(|_| {
            let mut g = Client::new(&addr);
            assert_eq!(ask(&mut g, "set k 0 0 1\r\nv\r\n", 1), ["STORED"]);
            g
        })
        .collect();
    assert_eq!(good[0].stats()["evicted_connections"], "3");
    std::thread::sleep(Duration::from_millis(300));
    let mut closed = 0;
    for c in &mut idle {
        c.w.set_nonblocking(true).unwrap();
        closed += usize::from(c.closed());
    }
    assert_eq!(closed, 3, "the idle clients that gave way are closed, the others are not");
    drop(good);
    // A trickling client keeps its slot only while it keeps talking; a flood of connections
    // opened and dropped leaves the server serving.
    for _ in 0..2000 {
        drop(TcpStream::connect(&addr));
    }
    // Connections that hung up before the server got to them take no slot, but the flood's
    // last ones may have been accepted before they hung up and hold slots for a moment (or
    // wait for them, past 64 waiters the server refuses at once): a client then may be
    // refused; once they are gone it is served, as a client that retries finds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refusals = 0;
    loop {
        let mut g = Client::new(&addr);
        let r = ask(&mut g, "get k\r\n", 3);
        if r == ["VALUE k 0 1", "v", "END"] {
            break;
        }
        assert!(r[0].starts_with("SERVER_ERROR too many open connections") && Instant::now() < deadline, "{r:?} after {refusals} refusals");
        refusals += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    let m = h.join().unwrap();
    assert!(m["evicted_connections"].as_u64().unwrap() >= 3, "{m}");
}

#[test]
fn idle_timeout_cuts_idle_clients() {
    let opts = MemcachedOptions {
        listen: ListenOptions { idle_timeout: Some(Duration::from_millis(500)), ..listen(4) },
        quiet: true,
        ..MemcachedOptions::default()
    };
    let (srv, addr, h) = start_opts(opts);
    let mut c = Client::new(&addr);
    assert!(ask(&mut c, "version\r\n", 1)[0].starts_with("VERSION"));
    let t = Instant::now();
    assert!(closed_within(&mut c, 5));
    assert!(t.elapsed() >= Duration::from_millis(400) && t.elapsed() < Duration::from_secs(4));
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    let m = h.join().unwrap().unwrap();
    assert_eq!(m["idle_kicks"], 1);
}
