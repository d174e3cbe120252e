//! The RESP server loop with an in-memory store: requests split across reads at every byte,
//! pipelines, QUIT, protocol errors closing the connection, the refusal at the connection limit.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use ssdlab_resp::{serve_on, Backend, MemoryStore, RespOptions, Server, StoreError};
use ssdlab_server::{ListenOptions, ServeError};

struct Running {
    addr: std::net::SocketAddr,
    srv: Arc<Server>,
    thread: Option<std::thread::JoinHandle<Result<serde_json::Value, ServeError>>>,
}

fn start(max_connections: usize) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let srv = Server::new(
        Box::new(MemoryStore::default()),
        RespOptions { listen: ListenOptions { max_connections, ..RespOptions::default().listen }, quiet: true, ..RespOptions::default() },
    );
    let s = srv.clone();
    let thread = Some(std::thread::spawn(move || serve_on(s, listener)));
    Running { addr, srv, thread }
}

impl Running {
    fn finish(mut self) -> serde_json::Value {
        self.srv.stop();
        self.thread.take().unwrap().join().unwrap().unwrap()
    }
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Read until `n` bytes came or the server closed.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    let mut have = 0;
    while have < n {
        match s.read(&mut got[have..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => have += k,
        }
    }
    got.truncate(have);
    got
}

/// The server closed the connection (EOF or reset) before the read timeout, with nothing more
/// to read.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn requests_split_at_every_byte_get_the_same_replies() {
    let run = start(8);
    let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\n\0x\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
    let want = b"+OK\r\n$5\r\nv\r\n\0x\r\n+PONG\r\n";
    for cut in 1..req.len() {
        let mut s = connect(run.addr);
        s.write_all(&req[..cut]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        s.write_all(&req[cut..]).unwrap();
        assert_eq!(read_n(&mut s, want.len()), want, "cut at {cut}");
    }
    run.finish();
}

#[test]
fn a_long_pipeline_is_answered_in_order_and_quit_closes() {
    let run = start(8);
    let mut s = connect(run.addr);
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..5000 {
        let (k, v) = (format!("key{i}"), format!("value{i}"));
        req.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).as_bytes());
        req.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).as_bytes());
        want.extend_from_slice(format!("+OK\r\n${}\r\n{v}\r\n", v.len()).as_bytes());
    }
    req.extend_from_slice(b"*1\r\n$4\r\nQUIT\r\nPING\r\n");
    want.extend_from_slice(b"+OK\r\n");
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&req))
    };
    assert_eq!(read_n(&mut s, want.len()), want);
    assert!(closed(&mut s), "QUIT closes; the PING after it is not answered");
    writer.join().unwrap().unwrap();
    let m = run.finish();
    assert_eq!(m["store"]["keys"], 5000);
    assert_eq!(m["total_commands_processed"], 10001);
}

#[test]
fn a_protocol_error_is_answered_then_the_connection_closes() {
    let run = start(8);
    let mut s = connect(run.addr);
    s.write_all(b"PING\r\n*1\r\n$x\r\nPING\r\n").unwrap();
    let want = b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n";
    assert_eq!(read_n(&mut s, want.len()), want);
    assert!(closed(&mut s));
    let m = run.finish();
    assert_eq!(m["protocol_errors"], 1);
}

#[test]
fn clients_past_the_limit_are_told_as_redis_tells_them() {
    let run = start(1);
    let mut first = connect(run.addr);
    first.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_n(&mut first, 7), b"+PONG\r\n");
    // The only slot is busy (not idle long enough to give way): the next client is refused.
    let mut second = connect(run.addr);
    let want = b"-ERR max number of clients reached\r\n";
    assert_eq!(read_n(&mut second, want.len()), want);
    assert!(closed(&mut second));
    drop(first);
    run.finish();
}

#[test]
fn keys_past_their_time_are_deleted_by_the_timer_with_no_client_reading_them() {
    let run = start(8);
    let mut s = connect(run.addr);
    let mut req = Vec::new();
    for i in 0..30 {
        req.extend_from_slice(format!("*5\r\n$3\r\nSET\r\n$3\r\nk{i:02}\r\n$1\r\nv\r\n$2\r\nPX\r\n$2\r\n50\r\n").as_bytes());
    }
    req.extend_from_slice(b"SET keep v EX 1000\r\n");
    s.write_all(&req).unwrap();
    assert_eq!(read_n(&mut s, 31 * 5), b"+OK\r\n".repeat(31));
    drop(s);
    std::thread::sleep(Duration::from_millis(400));
    let m = run.finish();
    assert_eq!(m["expired_keys"], 30);
    assert_eq!(m["store"]["keys"], 1);
}

/// A store behind a slow device: every lookup and every removal takes `per_key`.
struct SlowStore {
    mem: MemoryStore,
    per_key: Duration,
}

impl SlowStore {
    fn with_keys(n: usize, per_key: Duration) -> SlowStore {
        let mut mem = MemoryStore::default();
        for i in 0..n {
            mem.map.insert(format!("k{i:06}").into_bytes(), b"\0v".to_vec());
        }
        SlowStore { mem, per_key }
    }
    fn work(&self, keys: usize) {
        let t = std::time::Instant::now();
        while t.elapsed() < self.per_key * keys as u32 {
            std::hint::spin_loop();
        }
    }
}

impl Backend for SlowStore {
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.work(1);
        self.mem.get(k)
    }
    fn set(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
        self.mem.set(k, v)
    }
    fn del(&mut self, k: &[u8]) -> Result<bool, StoreError> {
        self.work(1);
        self.mem.del(k)
    }
    fn key_count(&mut self) -> Result<u64, StoreError> {
        self.mem.key_count()
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        self.work(self.mem.map.len());
        self.mem.clear()
    }
    fn clear_some(&mut self, limit: usize) -> Result<bool, StoreError> {
        self.work(limit.min(self.mem.map.len()));
        self.mem.clear_some(limit)
    }
    fn max_value_bytes(&self) -> usize {
        self.mem.max_value_bytes()
    }
    fn metrics(&mut self) -> serde_json::Value {
        self.mem.metrics()
    }
}

fn start_with(store: Box<dyn Backend>) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let srv = Server::new(store, RespOptions { quiet: true, ..RespOptions::default() });
    let s = srv.clone();
    let thread = Some(std::thread::spawn(move || serve_on(s, listener)));
    Running { addr, srv, thread }
}

/// How long a PING from another client takes while `long` runs on the first one; and `long`'s
/// whole reply, read to its end (`reply_bytes` of it).
fn ping_during(addr: std::net::SocketAddr, long: &[u8], reply_bytes: usize) -> (Duration, Vec<u8>) {
    let mut a = connect(addr);
    let mut b = connect(addr);
    b.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_n(&mut b, 7), b"+PONG\r\n");
    a.write_all(long).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // the long command is under way
    let t = std::time::Instant::now();
    b.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_n(&mut b, 7), b"+PONG\r\n");
    let waited = t.elapsed();
    let reply = read_n(&mut a, reply_bytes);
    println!("{}: another client's PING waited {waited:?}", String::from_utf8_lossy(&long[..long.len().min(16)]).escape_debug());
    (waited, reply)
}

#[test]
fn a_long_mget_or_flushall_does_not_stop_other_clients() {
    // 20 000 keys at 50 us each: one second of store time for the MGET and for the FLUSHALL.
    let n = 20_000;
    let r = start_with(Box::new(SlowStore::with_keys(n, Duration::from_micros(50))));
    let mut mget = format!("*{}\r\n$4\r\nMGET\r\n", n + 1).into_bytes();
    for i in 0..n {
        mget.extend_from_slice(format!("$7\r\nk{i:06}\r\n").as_bytes());
    }
    let head = format!("*{n}\r\n");
    let (waited, reply) = ping_during(r.addr, &mget, head.len() + n * 7);
    assert!(reply.starts_with(head.as_bytes()) && reply[head.len()..].chunks(7).all(|v| v == b"$1\r\nv\r\n"), "MGET's reply");
    assert!(waited < Duration::from_millis(400), "a PING waited {waited:?} behind an MGET of {n} keys");

    let (waited, reply) = ping_during(r.addr, b"FLUSHALL\r\n", 5);
    assert_eq!(reply, b"+OK\r\n");
    assert!(waited < Duration::from_millis(400), "a PING waited {waited:?} behind a FLUSHALL of {n} keys");
    let mut c = connect(r.addr);
    c.write_all(b"DBSIZE\r\n").unwrap();
    assert_eq!(read_n(&mut c, 4), b":0\r\n");
    r.finish();
}

#[test]
fn appends_to_a_long_value_cost_what_they_append() {
    // Sixty 1 MiB APPENDs to one key: a copy of the whole value per APPEND made this quadratic.
    let r = start(4);
    let mut c = connect(r.addr);
    let chunk = vec![b'x'; 1 << 20];
    let mut req = format!("*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n${}\r\n", chunk.len()).into_bytes();
    req.extend_from_slice(&chunk);
    req.extend_from_slice(b"\r\n");
    let t = std::time::Instant::now();
    for i in 1..=60 {
        c.write_all(&req).unwrap();
        let want = format!(":{}\r\n", i << 20);
        assert_eq!(read_n(&mut c, want.len()), want.as_bytes());
    }
    let took = t.elapsed();
    println!("60 APPENDs of 1 MiB: {took:?}");
    c.write_all(b"STRLEN k\r\n").unwrap();
    assert_eq!(read_n(&mut c, 11), b":62914560\r\n");
    assert!(took < Duration::from_secs(2), "60 APPENDs of 1 MiB took {took:?}");
    r.finish();
}
