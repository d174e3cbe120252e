//! The memcached server over real sockets, byte by byte: replies of every command, pipelining,
//! noreply, refusals that keep or drop the connection, the connection limit, shutdown.
//! (tests/test_cache_serve.py drives it with third-party clients.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ssdlab_cache::config::{CacheConfig, RegionEviction};
use ssdlab_cache::HybridCache;
use ssdlab_core::config::StorageMode;
use ssdlab_core::media::presets::preset;
use ssdlab_core::Device;
use ssdlab_memcached::{serve_on, ServeOptions, Server};

fn cache() -> HybridCache {
    let mut c = preset("fdp-ssd").unwrap();
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 2;
    c.geometry.planes_per_die = 2;
    c.geometry.pages_per_block = 16;
    c.geometry.blocks_per_plane = 256;
    c.fdp.handles = 4;
    c.fdp.ru_superblocks = 1;
    c.storage = StorageMode::Data;
    let cfg = CacheConfig {
        dram_bytes: 32 << 10,
        utilization: 0.01,
        soc_fraction: 0.002,
        region_bytes: 256 << 10,
        loc_write_bytes: 64 << 10,
        region_eviction: RegionEviction::Fifo,
        ..CacheConfig::default()
    };
    HybridCache::data_backed(Device::new(c).unwrap(), cfg).unwrap()
}

fn start_result(max_connections: usize) -> (Arc<Server>, String, JoinHandle<Result<serde_json::Value, String>>) {
    let srv =
        Server::new(cache(), ServeOptions { max_connections, max_value_bytes: 100_000, quiet: true, ..ServeOptions::default() }).unwrap();
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
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
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
    c.send(format!("set {} 0 0 1\r\nx\r\nget ok\r\n", "k".repeat(251)).as_bytes());
    assert_eq!(c.line(), "ERROR\r\n");
    assert!(c.line().starts_with("CLIENT_ERROR"));
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR key of 251 bytes is longer than 250\r\n");
    assert_eq!(c.line(), "END\r\n");
    // stats
    c.send(b"stats\r\n");
    let mut stats = std::collections::HashMap::new();
    loop {
        let l = c.line();
        if l == "END\r\n" {
            break;
        }
        let mut p = l.trim_end().splitn(3, ' ');
        assert_eq!(p.next(), Some("STAT"));
        stats.insert(p.next().unwrap().to_string(), p.next().unwrap().to_string());
    }
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
    // a bad data chunk drops this connection only
    let mut d = Client::new(&addr);
    d.send(b"set k 0 0 3\r\nabcdef\r\n");
    assert_eq!(d.line(), "CLIENT_ERROR bad data chunk\r\n");
    assert!(d.closed());
    let mut d = Client::new(&addr);
    d.send(b"set k 0 0 many\r\n");
    assert_eq!(d.line(), "CLIENT_ERROR bad data chunk length\r\n");
    assert!(d.closed());
    let mut d = Client::new(&addr);
    d.send(format!("get {}\r\n", "a ".repeat(40_000)).as_bytes());
    assert!(d.line().starts_with("CLIENT_ERROR line longer than"));
    assert!(d.closed());
    c.send(b"get b\r\n");
    assert_eq!(c.line(), "END\r\n");
    srv.verify_data().unwrap();
    srv.shutdown_flag().store(true, Ordering::Relaxed);
    let m = h.join().unwrap();
    assert!(m["total_connections"].as_u64().unwrap() >= 4);
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
    assert!(err.contains("internal error") && err.contains("SOC bucket"), "{err}");
}
