//! Device processes' logic on threads: hosts attached over Unix sockets and memfds, NET between
//! devices over TCP, a peer's restart.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use ssdlab_uio::cluster::{Cluster, Gme, Links, Path};
use ssdlab_uio::device::{self, DeviceOptions, DeviceStats, HostDevice, TraditionalHost};
use ssdlab_uio::repro::{device_config, letter_key, letter_value};
use ssdlab_uio::UtlConfig;

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

struct Dev {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<std::io::Result<DeviceStats>>,
    socket: PathBuf,
}

fn start(id: u16, net: &[SocketAddr], dir: &std::path::Path) -> Dev {
    start_as(id, net, dir, None)
}

/// The devices' flash (as `start_as` configures it).
fn flash() -> ssdlab_core::Config {
    let mut cfg = device_config("quick").unwrap();
    cfg.geometry.blocks_per_plane = 16;
    cfg.timing.enabled = false;
    cfg
}

fn start_as(id: u16, net: &[SocketAddr], dir: &std::path::Path, relay: Option<SocketAddr>) -> Dev {
    let stop = Arc::new(AtomicBool::new(false));
    let socket = dir.join(format!("dev{id}.sock"));
    let opts = DeviceOptions {
        id,
        net: net.to_vec(),
        socket: socket.clone(),
        burst: 16,
        peer_timeout: Duration::from_secs(2),
        relay,
        allow_remote: false,
        data: None,
        links: ssdlab_uio::Links::default(),
    };
    let cfg = flash();
    let (tx, rx) = mpsc::channel();
    let s = stop.clone();
    let thread = std::thread::spawn(move || device::run(&opts, &cfg, UtlConfig::default(), s, |_, _| tx.send(()).unwrap()));
    rx.recv_timeout(Duration::from_secs(10)).expect("device ready");
    Dev { stop, thread, socket }
}

impl Dev {
    fn stop(self) -> DeviceStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap()
    }
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tempdir(name: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("ssdlab-uio-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

#[test]
fn hosts_on_two_devices_see_one_key_space_across_net() {
    let dir = tempdir("two");
    let net = [free_addr(), free_addr()];
    let d0 = start(0, &net, &dir.0);
    let d1 = start(1, &net, &dir.0);
    let t = Duration::from_secs(5);
    let mut h0 = HostDevice::attach(&d0.socket, t).unwrap();
    let mut h1 = HostDevice::attach(&d1.socket, t).unwrap();
    let gme = Gme::uniform(2, 1024);
    // The same commands in the in-process model: each completion's simulated latency is the
    // model's, leg for leg (NAND timing off: no flash time on either side).
    let mut model = Cluster::new(2, &flash(), UtlConfig::default(), Links::default(), Path::Uio).unwrap();
    let mut out = vec![];
    // Model time runs on from command to command, as a device's clock does.
    let mut now = 0;
    let mut remote = 0;
    for i in 0..400u64 {
        let k = letter_key(i, 16);
        let v = letter_value(1 + (i as usize * 37) % 9000, i);
        h0.put(&k, &v).unwrap();
        let m = model.put(0, &k, &v, now).unwrap();
        assert_eq!(h0.last_sim_ns, m.latency_ns, "put {i}: {} bytes, remote {}", v.len(), m.remote);
        now += m.latency_ns;
        remote += (gme.route(&k) != 0) as u64;
    }
    for i in 0..400u64 {
        let k = letter_key(i, 16);
        let v = letter_value(1 + (i as usize * 37) % 9000, i);
        // Whichever host asks, the key lives on the device GME names.
        assert_eq!(h1.get(&k).unwrap().as_deref(), Some(&v[..]));
        let g = model.get(1, &k, &mut out, now).unwrap().1.latency_ns;
        assert_eq!(h1.last_sim_ns, g);
        now += g;
        assert_eq!(h0.get(&k).unwrap().as_deref(), Some(&v[..]));
        let g = model.get(0, &k, &mut out, now).unwrap().1.latency_ns;
        assert_eq!(h0.last_sim_ns, g);
        now += g;
    }
    assert_eq!(h1.get(b"never stored").unwrap(), None);
    assert!(h0.put(b"", b"x").unwrap_err().contains("key of 0 bytes"));
    drop((h0, h1));
    let (s0, s1) = (d0.stop(), d1.stop());
    assert_eq!(s0.remote_puts, remote);
    assert_eq!(s0.local_puts, 400 - remote);
    assert_eq!(s0.remote_gets + s0.local_gets, 400);
    assert_eq!(s1.remote_gets + s1.local_gets, 401);
    assert_eq!((s0.hosts_attached, s1.hosts_attached, s0.remote_errors), (1, 1, 0));
}

#[test]
fn a_peer_restart_costs_a_clear_error_then_remote_operations_resume() {
    let dir = tempdir("restart");
    let net = [free_addr(), free_addr()];
    let d0 = start(0, &net, &dir.0);
    let d1 = start(1, &net, &dir.0);
    let mut h0 = HostDevice::attach(&d0.socket, Duration::from_secs(10)).unwrap();
    let gme = Gme::uniform(2, 1024);
    let remote_key = (0..).map(|i| letter_key(i, 12)).find(|k| gme.route(k) == 1).unwrap();
    h0.put(&remote_key, b"before").unwrap();
    d1.stop();
    let e = h0.put(&remote_key, b"during").unwrap_err();
    assert!(e.contains("0x22") && e.contains("unreachable"), "{e}");
    assert!(h0.get(&remote_key).unwrap_err().contains("unreachable"));
    // Local keys are not affected.
    let local_key = (0..).map(|i| letter_key(i, 12)).find(|k| gme.route(k) == 0).unwrap();
    h0.put(&local_key, b"here").unwrap();
    // The peer comes back (its flash starts empty: the emulated NAND lives in the process).
    let d1 = start(1, &net, &dir.0);
    assert_eq!(h0.get(&remote_key).unwrap(), None);
    h0.put(&remote_key, b"after").unwrap();
    assert_eq!(h0.get(&remote_key).unwrap().as_deref(), Some(&b"after"[..]));
    assert_eq!(h0.get(&local_key).unwrap().as_deref(), Some(&b"here"[..]));
    drop(h0);
    assert_eq!(d0.stop().remote_errors, 2);
    d1.stop();
}

#[test]
fn a_second_host_attaches_after_the_first_leaves_and_sees_its_data() {
    let dir = tempdir("reattach");
    let net = [free_addr()];
    let d = start(0, &net, &dir.0);
    let mut h = HostDevice::attach(&d.socket, Duration::from_secs(5)).unwrap();
    h.put(b"k", b"v1").unwrap();
    drop(h);
    let mut h = HostDevice::attach(&d.socket, Duration::from_secs(5)).unwrap();
    assert_eq!(h.get(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    drop(h);
    assert_eq!(d.stop().hosts_attached, 2);
}

#[test]
fn the_traditional_path_lands_remote_keys_in_the_remote_hosts_memory_first() {
    let dir = tempdir("traditional");
    let net = [free_addr(), free_addr()];
    let daemons = [free_addr(), free_addr()];
    let d0 = start_as(0, &net, &dir.0, Some(daemons[0]));
    let d1 = start_as(1, &net, &dir.0, Some(daemons[1]));
    // Each host's daemon, attached to its device beside the host's client.
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![];
    for (i, sock) in [&d0.socket, &d1.socket].into_iter().enumerate() {
        let (sock, stop, addr) = (sock.clone(), stop.clone(), daemons[i]);
        let (tx, rx) = mpsc::channel();
        threads.push(std::thread::spawn(move || device::host_daemon(&sock, addr, false, stop, |_| tx.send(()).unwrap()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10)).expect("daemon ready");
    }
    let t = Duration::from_secs(5);
    let mut h0 = TraditionalHost::new(0, 2, HostDevice::attach(&d0.socket, t).unwrap());
    let gme = Gme::uniform(2, 1024);
    // Each command's simulated latency, accounted across the two devices and host 1's daemon,
    // is the in-process model's traditional path, leg for leg.
    let mut model = Cluster::new(2, &flash(), UtlConfig::default(), Links::default(), Path::Traditional).unwrap();
    let (mut remote, mut now) = (0, 0);
    for i in 0..300u64 {
        let k = letter_key(i, 16);
        let v = letter_value(1 + i as usize * 13, i);
        h0.put(&k, &v).unwrap();
        let m = model.put(0, &k, &v, now).unwrap().latency_ns;
        assert_eq!(h0.last_sim_ns(), m);
        now += m;
        remote += (gme.route(&k) == 1) as u64;
    }
    for i in 0..300u64 {
        let k = letter_key(i, 16);
        assert_eq!(h0.get(&k).unwrap().unwrap(), letter_value(1 + i as usize * 13, i));
        let g = model.get(0, &k, &mut vec![], now).unwrap().1.latency_ns;
        assert_eq!(h0.last_sim_ns(), g);
        now += g;
    }
    drop(h0);
    stop.store(true, Ordering::Relaxed);
    let forwarded: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // Host 1's daemon got every remote put and get from its device and submitted it back;
    // host 0's daemon had nothing to do.
    assert_eq!(forwarded, vec![0, 2 * remote]);
    let (s0, s1) = (d0.stop(), d1.stop());
    assert_eq!((s0.remote_puts, s0.remote_gets, s0.local_puts), (remote, remote, 300 - remote));
    assert_eq!((s1.remote_puts, s1.local_puts, s1.local_gets), (0, remote, remote));
    assert_eq!(s1.hosts_attached, 1);
}

/// Keys GME sends to device 0 (local to host 0) and to device 1 (remote), alternating.
fn mixed_keys(n: usize) -> Vec<Vec<u8>> {
    let gme = Gme::uniform(2, 1024);
    let (mut local, mut remote) = (vec![], vec![]);
    for i in 0.. {
        let k = letter_key(i, 16);
        if gme.route(&k) == 0 { &mut local } else { &mut remote }.push(k);
        if local.len() >= n / 2 && remote.len() >= n / 2 {
            break;
        }
    }
    local.into_iter().zip(remote).flat_map(|(a, b)| [a, b]).take(n).collect()
}

#[test]
fn pipelined_commands_through_two_devices_answer_in_order_with_remote_keys_mixed_in() {
    use ssdlab_uio::device::{Reply, Request};
    let dir = tempdir("pipelined");
    let net = [free_addr(), free_addr()];
    let d0 = start(0, &net, &dir.0);
    let d1 = start(1, &net, &dir.0);
    let mut h0 = HostDevice::attach(&d0.socket, Duration::from_secs(5)).unwrap();
    let keys = mixed_keys(200);
    let value = |i: usize, round: u64| letter_value(1 + (i * 53) % 7000, i as u64 + 1000 * round);
    // 200 puts in one batch (more than the queue's depth), half of them remote.
    let vals: Vec<Vec<u8>> = (0..keys.len()).map(|i| value(i, 0)).collect();
    let puts: Vec<Request> = keys.iter().zip(&vals).map(|(k, v)| Request::Put { dest: None, key: k, value: v }).collect();
    assert!(h0.run_batch(&puts).iter().all(|r| r == &Ok(Reply::Stored)));
    // Gets, overwrites and gets of the overwritten keys in one batch: each answer is its
    // command's, and a get after a put of its key sees the new value.
    let newer: Vec<Vec<u8>> = (0..keys.len()).map(|i| value(i, 1)).collect();
    let mut reqs = vec![];
    let mut want = vec![];
    for i in 0..keys.len() {
        reqs.push(Request::Get { dest: None, key: &keys[i] });
        want.push(Ok(Reply::Value(Some(vals[i].clone()))));
        if i % 3 == 0 {
            reqs.push(Request::Put { dest: None, key: &keys[i], value: &newer[i] });
            want.push(Ok(Reply::Stored));
            reqs.push(Request::Get { dest: None, key: &keys[i] });
            want.push(Ok(Reply::Value(Some(newer[i].clone()))));
        }
    }
    reqs.push(Request::Get { dest: None, key: b"never stored" });
    want.push(Ok(Reply::Value(None)));
    reqs.push(Request::Put { dest: None, key: b"", value: b"x" });
    let got = h0.run_batch(&reqs);
    assert!(got.last().unwrap().as_ref().unwrap_err().contains("key of 0 bytes"));
    assert_eq!(&got[..got.len() - 1], &want[..]);
    // Submitted together and waited for in reverse: each completion carries its own command's
    // simulated latency, the in-process model's (NAND timing off: no flash time).
    let mut model = Cluster::new(2, &flash(), UtlConfig::default(), Links::default(), Path::Uio).unwrap();
    for (i, k) in keys.iter().enumerate() {
        model.put(0, k, if i % 3 == 0 { &newer[i] } else { &vals[i] }, 0).unwrap();
    }
    let mut out = vec![];
    let cids: Vec<u16> = keys[..16].iter().map(|k| h0.submit(Request::Get { dest: None, key: k }).unwrap()).collect();
    assert_eq!(h0.in_flight(), 16);
    for (i, &cid) in cids.iter().enumerate().rev() {
        let want = if i % 3 == 0 { &newer[i] } else { &vals[i] };
        assert_eq!(h0.wait(cid).unwrap(), Reply::Value(Some(want.clone())));
        assert_eq!(h0.last_sim_ns, model.get(0, &keys[i], &mut out, 0).unwrap().1.latency_ns, "get {i}");
    }
    drop(h0);
    let s0 = d0.stop();
    d1.stop();
    assert_eq!((s0.remote_puts, s0.local_puts), (100 + 33, 100 + 34));
    assert_eq!(s0.remote_errors, 0);
}

/// What a fake peer received: each request's opcode and body.
type Received = Vec<(u8, Vec<u8>)>;
/// A fake peer's answer's body for a request's body.
type Answerer = fn(&[u8]) -> Vec<u8>;

/// A peer at `addr` that reads `n` requests, then answers them with `answer` in reverse order
/// (out of order: NET matches answers by tag) or, with `answer` None, closes the connection
/// with them in flight. Returns the requests' opcodes and bodies.
fn fake_peer(addr: SocketAddr, n: usize, answer: Option<Answerer>) -> JoinHandle<Received> {
    use ssdlab_uio::net::{read_msg_meta, write_msg_meta, Meta};
    let listener = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        drop(listener); // a reconnection is refused
        let mut got = vec![];
        let mut metas = vec![];
        for _ in 0..n {
            let mut body = vec![];
            let m = read_msg_meta(&mut s, &mut body).unwrap();
            metas.push(m);
            got.push((m.op, body));
        }
        if let Some(f) = answer {
            for (m, (_, body)) in metas.iter().zip(&got).rev() {
                let a = Meta { op: m.op, status: 0, tag: m.tag, service_ns: Some(0) };
                write_msg_meta(&mut s, a, &f(body)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        got
    })
}

#[test]
fn a_peer_that_dies_with_requests_in_flight_fails_exactly_those_commands() {
    use ssdlab_uio::device::{Reply, Request};
    let dir = tempdir("dies");
    let net = [free_addr(), free_addr()];
    let d0 = start(0, &net, &dir.0);
    let keys = mixed_keys(16);
    let peer = fake_peer(net[1], 8, None);
    let mut h0 = HostDevice::attach(&d0.socket, Duration::from_secs(10)).unwrap();
    let reqs: Vec<Request> = keys.iter().map(|k| Request::Put { dest: None, key: k, value: b"v" }).collect();
    let t = std::time::Instant::now();
    let got = h0.run_batch(&reqs);
    // Local keys (even places) are stored; the 8 remote ones were in flight when the peer
    // went away: each fails with the peer's error, none waits for the timeout.
    for (i, r) in got.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(r, &Ok(Reply::Stored), "local put {i}");
        } else {
            let e = r.as_ref().unwrap_err();
            assert!(e.contains("0x22") && e.contains("unreachable"), "remote put {i}: {e}");
        }
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(peer.join().unwrap().len(), 8);
    assert_eq!(h0.get(&keys[0]).unwrap().as_deref(), Some(&b"v"[..]));
    drop(h0);
    let s0 = d0.stop();
    assert_eq!((s0.remote_puts, s0.remote_errors, s0.local_puts), (8, 8, 8));
}

#[test]
fn answers_that_come_out_of_order_finish_their_own_commands() {
    use ssdlab_uio::device::{Reply, Request};
    let dir = tempdir("reorder");
    let net = [free_addr(), free_addr()];
    let d0 = start(0, &net, &dir.0);
    let gme = Gme::uniform(2, 1024);
    let remote: Vec<Vec<u8>> = (0..).map(|i| letter_key(i, 12)).filter(|k| gme.route(k) == 1).take(8).collect();
    // The peer answers each get with its key reversed, the last request first.
    let peer = fake_peer(net[1], 8, Some(|k: &[u8]| k.iter().rev().copied().collect()));
    let mut h0 = HostDevice::attach(&d0.socket, Duration::from_secs(10)).unwrap();
    let reqs: Vec<Request> = remote.iter().map(|k| Request::Get { dest: None, key: k }).collect();
    let got = h0.run_batch(&reqs);
    for (k, r) in remote.iter().zip(got) {
        assert_eq!(r, Ok(Reply::Value(Some(k.iter().rev().copied().collect()))));
    }
    let sent: Vec<Vec<u8>> = peer.join().unwrap().into_iter().map(|(_, b)| b).collect();
    assert_eq!(sent, remote, "the requests went out in their commands' order");
    drop(h0);
    assert_eq!(d0.stop().remote_errors, 0);
}
