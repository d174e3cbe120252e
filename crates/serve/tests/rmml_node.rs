//! The remote-memory node served over TCP (crates/serve's `rmml::node`) with the RMML's client
//! of it (`ssdlab_rmml::node::TcpNode`): reconnects when the node took a connection back, a
//! client that stops reading stalls only itself, the loopback rule, refusals, and a node
//! restart seen by the RMML as a clear error, never stale data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand_pcg::Pcg64;
use ssdlab_rmml::codec::Codec;
use ssdlab_rmml::node::proto::{Request, OP_READ};
use ssdlab_rmml::node::{MemoryNode, TcpNode};
use ssdlab_rmml::{Error, Rmml, SwapDevice, PAGE_BYTES};
use ssdlab_serve::rmml::node::{NodeOptions, NodeServer};
use ssdlab_server::ListenOptions;

#[path = "../../rmml/tests/common/mod.rs"]
mod common;

use common::{cfg, page, P};

fn start_with(opts: NodeOptions) -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let srv = NodeServer::bind(&NodeOptions { quiet: true, ..opts }).unwrap();
    let addr = srv.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    (addr, stop, std::thread::spawn(move || srv.run(&s2).unwrap()))
}

fn start(cap: u64) -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    start_with(NodeOptions { capacity_bytes: cap, ..NodeOptions::default() })
}

#[test]
fn a_client_whose_connection_was_taken_reconnects_transparently() {
    // One slot, taken from whoever has been idle for 100 ms: two clients take it from each
    // other in turn, and each request still succeeds.
    let defaults = NodeOptions::default();
    let opts = NodeOptions {
        capacity_bytes: 1 << 20,
        listen: ListenOptions { max_connections: 1, evict_idle_after: Some(Duration::from_millis(100)), ..defaults.listen.clone() },
        ..defaults
    };
    let (addr, stop, h) = start_with(opts);
    let mut a = TcpNode::connect(&addr, 0).unwrap();
    let r = a.alloc(4096).unwrap();
    a.write(r, 0, b"kept").unwrap();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(150));
        let mut b = TcpNode::connect(&addr, 1).unwrap();
        assert_eq!(b.stat().unwrap().regions, 1);
        std::thread::sleep(Duration::from_millis(150));
        let mut out = [0u8; 4];
        a.read(r, 0, &mut out).unwrap();
        assert_eq!(&out, b"kept");
        a.write(r, 4, b"more").unwrap();
    }
    a.free(r).unwrap();
    assert_eq!(a.stat().unwrap().regions, 0);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn a_client_that_stops_reading_stalls_only_itself() {
    use std::io::Write as _;
    let (addr, stop, h) = start(128 << 20);
    let mut n = TcpNode::connect(&addr, 1).unwrap();
    let r = n.alloc(64 << 20).unwrap();
    // A raw client asks for the whole 64 MiB region, three times, and reads none of it.
    let mut raw = std::net::TcpStream::connect(&addr).unwrap();
    for _ in 0..3 {
        raw.write_all(&Request { op: OP_READ, len: 64 << 20, region: r, offset: 0 }.encode()).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Everyone else is served meanwhile: the node holds no lock while that reply waits.
    let (tx, rx) = std::sync::mpsc::channel();
    let a2 = addr.clone();
    std::thread::spawn(move || {
        let _ = tx.send(TcpNode::connect(&a2, 2).and_then(|mut o| o.stat()).map(|s| s.regions));
    });
    let regions = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("another client's STAT stalled");
    assert_eq!(regions.unwrap(), 1);
    let mut out = [0u8; 8];
    n.write(r, 0, b"still ok").unwrap();
    n.read(r, 0, &mut out).unwrap();
    assert_eq!(&out, b"still ok");
    drop(raw);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn a_non_loopback_listener_needs_the_explicit_flag() {
    let mut o = NodeOptions { quiet: true, ..NodeOptions::default() };
    o.listen.address = "0.0.0.0:0".into();
    let e = NodeServer::bind(&o).err().expect("refused");
    assert!(matches!(e, ssdlab_server::ServeError::Address(_)), "{e:?}");
    assert!(e.to_string().contains("--allow-remote"), "{e}");
    o.listen.allow_remote = true;
    assert!(NodeServer::bind(&o).is_ok());
}

#[test]
fn tcp_round_trip_and_refusals() {
    let (addr, stop, h) = start(1 << 20);
    let mut n = TcpNode::connect(&addr, 3).unwrap();
    let st = n.stat().unwrap();
    assert_eq!((st.capacity_bytes, st.used_bytes), (1 << 20, 0));
    let r = n.alloc(4096).unwrap();
    n.write(r, 10, b"remote").unwrap();
    let mut out = [0u8; 6];
    n.read(r, 10, &mut out).unwrap();
    assert_eq!(&out, b"remote");
    assert!(matches!(n.alloc(2 << 20), Err(Error::NoSpace(_))));
    assert!(matches!(n.read(r, 4095, &mut out), Err(Error::Node { node: 3, .. })));
    n.free(r).unwrap();
    assert!(matches!(n.read(r, 0, &mut out), Err(Error::Lost(_))));
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    // The node is gone: a clear error naming it, not a hang.
    let e = n.stat().unwrap_err().to_string();
    assert!(e.contains(&addr), "{e}");
}

fn start_node(addr: &str, cap: u64) -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let mut opts = NodeOptions { capacity_bytes: cap, quiet: true, ..NodeOptions::default() };
    opts.listen.address = addr.into();
    let srv = NodeServer::bind(&opts).unwrap();
    let a = srv.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    (a, stop, std::thread::spawn(move || srv.run(&s2).unwrap()))
}

#[test]
fn node_restart_is_a_clear_error_never_stale_data() {
    let (a0, stop0, h0) = start_node("127.0.0.1:0", 128 << 20);
    let (a1, stop1, h1) = start_node("127.0.0.1:0", 128 << 20);
    let nodes: Vec<Box<dyn MemoryNode>> = vec![Box::new(TcpNode::connect(&a0, 0).unwrap()), Box::new(TcpNode::connect(&a1, 1).unwrap())];
    let mut c = cfg(Codec::Lz4, 1);
    c.balance_threshold = 1.0;
    let mut dev = Rmml::new(c, nodes).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let pages = (16 << 20) / PAGE_BYTES;
    let mut model = Vec::new();
    let mut now = 0;
    for p in 0..pages {
        let d = page(&mut rng, true);
        now = dev.write(p * PAGE_BYTES, &d, now).unwrap();
        model.push(d);
    }
    now = dev.flush(now).unwrap();
    // Restart node 0 on the same port: it comes back empty with a new instance number.
    stop0.store(true, Ordering::Relaxed);
    h0.join().unwrap();
    let (_, stop0b, h0b) = start_node(&a0, 128 << 20);
    let (mut lost, mut ok) = (0, 0);
    for (p, want) in model.iter().enumerate() {
        let mut out = vec![0u8; P];
        match dev.read(p as u64 * PAGE_BYTES, &mut out, now) {
            Ok(t) => {
                now = t;
                assert_eq!(&out, want, "page {p}: a read that succeeds returns what was written");
                ok += 1;
            }
            Err(Error::Lost(m)) => {
                assert!(m.contains("page") || m.contains("restarted"), "{m}");
                lost += 1;
            }
            Err(e) => panic!("page {p}: unexpected error {e}"),
        }
    }
    assert!(lost > 0 && ok > 0, "lost {lost} ok {ok}: the groups were spread over both nodes");
    dev.check_invariants();
    // Rewriting a lost page makes it readable again; new data goes to both nodes.
    let mut first_lost = None;
    for p in 0..pages {
        let mut out = vec![0u8; P];
        if dev.read(p * PAGE_BYTES, &mut out, now).is_err() {
            first_lost = Some(p);
            break;
        }
    }
    let p = first_lost.unwrap();
    now = dev.write(p * PAGE_BYTES, &model[0], now).unwrap();
    now = dev.flush(now).unwrap();
    let mut out = vec![0u8; P];
    dev.read(p * PAGE_BYTES, &mut out, now).unwrap();
    assert_eq!(out, model[0]);
    // A node that stays down: reads of its data fail with a clear error, no hang.
    stop1.store(true, Ordering::Relaxed);
    h1.join().unwrap();
    let mut errs = 0;
    for p in 0..pages {
        let mut out = vec![0u8; P];
        if let Err(e) = dev.read(p * PAGE_BYTES, &mut out, now) {
            assert!(matches!(e, Error::Lost(_) | Error::Node { .. }), "{e}");
            errs += 1;
        }
    }
    assert!(errs > 0);
    stop0b.store(true, Ordering::Relaxed);
    h0b.join().unwrap();
}
