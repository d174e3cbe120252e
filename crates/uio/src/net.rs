//! NET: requests between device processes over TCP.
//!
//! A message is an 8-byte header (opcode u8 | reserved u8 | status u16 | body length u32,
//! little-endian) and its body; TCP cuts it into segments (the document's NET packetises the
//! record itself; the modelled cost in [`crate::cluster::Links::net`] counts those packets).
//! Requests: put (body = the record DMA built: checksum | key len | value len | key | value,
//! checked on arrival) and get (body = the key); the answer carries a status and, for a get, the
//! value. Each device serves its peers' requests on its own threads, against its UTL.
//!
//! A peer that goes away (restarted, crashed) costs the requests that need it a clear error
//! (status Transient Transport Error, and a line on stderr naming the peer and the cause); the
//! next request reconnects, so a restarted peer serves again without any other step.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ssdlab_netrules::lock_store;

use crate::layout::Status;
use crate::queues::Store;
use crate::record::{decode, Decoded};

pub const OP_PUT: u8 = 1;
pub const OP_GET: u8 = 2;
const HEADER: usize = 8;
/// Largest body a peer accepts (a 16 MiB value and its header).
pub const MAX_BODY: usize = (16 << 20) + 4096;

/// Header byte 1, bit 0: an 8-byte trailer after the body holds the answering side's
/// simulated service time (ns, little-endian; answers only).
const TIMED: u8 = 1;

/// Write one message.
pub fn write_msg(w: &mut impl Write, op: u8, status: u16, body: &[u8]) -> io::Result<()> {
    write_msg_timed(w, op, status, body, None)
}

/// Write one message, with `service_ns` in a trailer when given (see [`TIMED`]).
pub fn write_msg_timed(w: &mut impl Write, op: u8, status: u16, body: &[u8], service_ns: Option<u64>) -> io::Result<()> {
    let mut h = [0u8; HEADER];
    h[0] = op;
    h[1] = if service_ns.is_some() { TIMED } else { 0 };
    h[2..4].copy_from_slice(&status.to_le_bytes());
    h[4..8].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let trailer = service_ns.map(u64::to_le_bytes);
    let trailer: &[u8] = trailer.as_ref().map_or(&[], |t| &t[..]);
    // One write for small messages (one segment on the wire).
    if body.len() <= 4096 {
        let mut m = Vec::with_capacity(HEADER + body.len() + trailer.len());
        m.extend_from_slice(&h);
        m.extend_from_slice(body);
        m.extend_from_slice(trailer);
        w.write_all(&m)
    } else {
        w.write_all(&h)?;
        w.write_all(body)?;
        w.write_all(trailer)
    }
}

/// Read one message into `body`; returns (opcode, status). The body grows as its bytes arrive:
/// a header declaring 16 MiB costs nothing until they do.
pub fn read_msg(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u8, u16)> {
    read_msg_timed(r, body).map(|(op, st, _)| (op, st))
}

/// [`read_msg`], also returning the service time of a timed answer.
pub fn read_msg_timed(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u8, u16, Option<u64>)> {
    let mut h = [0u8; HEADER];
    r.read_exact(&mut h)?;
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {len} bytes (at most {MAX_BODY})")));
    }
    body.clear();
    body.reserve(len.min(64 << 10));
    r.take(len as u64).read_to_end(body)?;
    if body.len() != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("a message cut at {} of {len} bytes", body.len())));
    }
    let service = if h[1] & TIMED != 0 {
        let mut t = [0u8; 8];
        r.read_exact(&mut t)?;
        Some(u64::from_le_bytes(t))
    } else {
        None
    };
    Ok((h[0], u16::from_le_bytes([h[2], h[3]]), service))
}

/// Bind a NET listener on `addr` after ssdlab's loopback rule: another address only with
/// `allow_remote` (NET has no authentication or encryption).
pub fn bind(addr: SocketAddr, allow_remote: bool) -> io::Result<TcpListener> {
    ssdlab_netrules::check_listen(&addr.to_string(), false, false, allow_remote)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.replace("--listen", "--net")))?;
    TcpListener::bind(addr)
}

/// Connections to the other devices, by device id.
pub struct Peers {
    me: u16,
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<TcpStream>>,
    timeout: Duration,
    pub errors: u64,
    /// The simulated service time the last answer carried (0: none).
    pub last_service_ns: u64,
}

impl Peers {
    /// `addrs[i]`: device i's NET address (this device's own is not used).
    pub fn new(me: u16, addrs: Vec<SocketAddr>, timeout: Duration) -> Peers {
        let conns = addrs.iter().map(|_| None).collect();
        Peers { me, addrs, conns, timeout, errors: 0, last_service_ns: 0 }
    }

    fn connect_to(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(s)
    }

    fn exchange(&mut self, to: u16, op: u8, body: &[u8], out: &mut Vec<u8>) -> io::Result<u16> {
        let s = match &mut self.conns[to as usize] {
            Some(s) => s,
            slot => slot.insert(Self::connect_to(self.addrs[to as usize], self.timeout)?),
        };
        write_msg(s, op, 0, body)?;
        let (rop, status, service) = read_msg_timed(s, out)?;
        self.last_service_ns = service.unwrap_or(0);
        if rop != op {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("answer to opcode {op} has opcode {rop}")));
        }
        Ok(status)
    }

    /// Send request `op` with `body` to device `to` and wait for its answer (value in `out`).
    /// A broken connection is re-opened once; if that fails too the peer is unreachable.
    pub fn request(&mut self, to: u16, op: u8, body: &[u8], out: &mut Vec<u8>) -> Result<u16, Status> {
        assert_ne!(to, self.me, "a request to this device itself");
        let mut last = None;
        for _ in 0..2 {
            match self.exchange(to, op, body, out) {
                Ok(st) => return Ok(st),
                Err(e) => {
                    self.conns[to as usize] = None;
                    last = Some(e);
                }
            }
        }
        self.errors += 1;
        eprintln!("uio device {}: peer device {to} at {} unreachable: {}", self.me, self.addrs[to as usize], last.expect("an error"));
        Err(Status::TransientTransport)
    }
}

/// Most peer connections served at once (a device has at most 63 peers, each with one
/// connection; a host daemon has one device).
pub const MAX_PEER_CONNECTIONS: usize = 64;
/// A message must be whole this long after its first byte (a peer trickling one is cut).
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(10);
/// When every slot is taken, a connection in the middle of a message for this long, or idle
/// for this long, gives its slot to the newcomer (a peer reconnects by itself: its request is
/// retried once on a fresh connection).
pub const YIELD_AFTER: Duration = Duration::from_secs(1);

/// A served connection as the accept loop sees it: for eviction and shutdown.
struct Slot {
    sock: TcpStream,
    /// Milliseconds since `epoch` of the last byte read or written.
    last_io_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Milliseconds since `epoch`, plus one, of the first byte of the message being read (0: none).
    busy_since_ms: Arc<std::sync::atomic::AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

/// Serve peers' requests on `listener` against `store` (a device's UTL; on the traditional
/// path, a host's device behind its queues) until `stop`; one thread per peer connection, at
/// most [`MAX_PEER_CONNECTIONS`]. A newcomer finding every slot taken takes the slot of the
/// connection longest in the middle of a message, else of the one idle longest, if for
/// [`YIELD_AFTER`] or more; otherwise it is closed. A peer that breaks the protocol is dropped
/// with a log line (rate-limited) and no effect on the others. The returned thread ends once
/// every peer connection is closed.
pub fn serve<S: Store + Send + 'static>(listener: TcpListener, store: Arc<Mutex<S>>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    serve_capped(listener, store, stop, MAX_PEER_CONNECTIONS)
}

/// [`serve`] with another connection cap (tests).
pub fn serve_capped<S: Store + Send + 'static>(
    listener: TcpListener,
    store: Arc<Mutex<S>>,
    stop: Arc<AtomicBool>,
    cap: usize,
) -> std::thread::JoinHandle<()> {
    use std::sync::atomic::AtomicU64;
    listener.set_nonblocking(true).expect("non-blocking listener");
    let log = Arc::new(ssdlab_netrules::RateLog::new("uio NET", false, Duration::from_secs(5)));
    let epoch = std::time::Instant::now();
    let ms = move || epoch.elapsed().as_millis() as u64;
    std::thread::spawn(move || {
        let mut slots: Vec<Slot> = vec![];
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, peer)) => {
                    slots.retain(|p| !p.thread.is_finished());
                    if slots.len() >= cap {
                        let now = ms();
                        let age = |a: &AtomicU64| now.saturating_sub(a.load(Ordering::Relaxed));
                        let slow = slots
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.busy_since_ms.load(Ordering::Relaxed) > 0)
                            .map(|(i, p)| (now.saturating_sub(p.busy_since_ms.load(Ordering::Relaxed) - 1), i))
                            .max();
                        let idle = slots
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.busy_since_ms.load(Ordering::Relaxed) == 0)
                            .map(|(i, p)| (age(&p.last_io_ms), i))
                            .max();
                        let victim = slow.or(idle).filter(|&(t, _)| t >= YIELD_AFTER.as_millis() as u64).map(|(_, i)| i);
                        match victim {
                            Some(i) => {
                                let v = slots.swap_remove(i);
                                let _ = v.sock.shutdown(std::net::Shutdown::Both);
                                log.event(
                                    "evictions",
                                    format!("{peer}: took the slot of a slow or idle connection (every one of {cap} taken)"),
                                );
                            }
                            None => {
                                log.event("refusals", format!("{peer}: refused: {cap} peer connections open and busy"));
                                continue; // dropping `s` closes it
                            }
                        }
                    }
                    let Ok(sock) = s.try_clone() else { continue };
                    let last_io_ms = Arc::new(AtomicU64::new(ms()));
                    let busy_since_ms = Arc::new(AtomicU64::new(0));
                    let (store, stop, log) = (store.clone(), stop.clone(), log.clone());
                    let (l, b) = (last_io_ms.clone(), busy_since_ms.clone());
                    let thread = std::thread::spawn(move || {
                        // The accept loop holds a clone of the socket (to evict it): the end of
                        // a session shuts it down, so the peer sees the close at once.
                        let end = s.try_clone();
                        let r = serve_peer(s, &store, &stop, &|busy: bool| {
                            let t = ms();
                            l.store(t, Ordering::Relaxed);
                            b.store(if busy { t + 1 } else { 0 }, Ordering::Relaxed);
                        });
                        if let Ok(end) = end {
                            let _ = end.shutdown(std::net::Shutdown::Both);
                        }
                        if let Err(e) = r {
                            if !matches!(
                                e.kind(),
                                io::ErrorKind::UnexpectedEof
                                    | io::ErrorKind::ConnectionReset
                                    | io::ErrorKind::BrokenPipe
                                    | io::ErrorKind::NotConnected
                            ) {
                                log.event("dropped peers", format!("{peer}: dropped: {e}"));
                            }
                        }
                    });
                    slots.push(Slot { sock, last_io_ms, busy_since_ms, thread });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        drop(listener);
        for p in slots {
            let _ = p.thread.join();
        }
    })
}

/// One peer's requests, until it closes the connection or `stop` (the device going away
/// closes it, as a process exit would).
/// `mark(busy)`: a message's first byte arrived (true) or its answer went out (false).
fn serve_peer<S: Store>(mut s: TcpStream, store: &Mutex<S>, stop: &AtomicBool, mark: &dyn Fn(bool)) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut body = Vec::new();
    loop {
        // Wait for the next message's first byte, looking at `stop` in between; then read
        // the whole message.
        match s.peek(&mut [0u8; 1]) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    return s.shutdown(std::net::Shutdown::Both);
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        // The whole message within the deadline, however the bytes trickle in.
        mark(true);
        let (op, _) = read_msg(&mut Deadline::new(&mut s, MESSAGE_DEADLINE), &mut body)?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        // The store's simulated time for this request, answered in the reply's trailer.
        let mut service = 0u64;
        match op {
            OP_PUT => {
                let status = match decode(&body) {
                    Decoded::Record(r) if r.len() == body.len() => {
                        let mut st = lock_store(store, "the device store");
                        let r = st.put(r.key, r.value);
                        service = st.sim_ns();
                        match r {
                            Ok(()) => Status::Success,
                            Err(st) => st,
                        }
                    }
                    _ => Status::DataTransferError,
                };
                write_msg_timed(&mut s, op, status as u16, &[], Some(service))?;
            }
            OP_GET => {
                let got = {
                    let mut st = lock_store(store, "the device store");
                    let got = st.get(&body);
                    service = st.sim_ns();
                    got
                };
                match got {
                    Ok(Some(v)) => write_msg_timed(&mut s, op, Status::Success as u16, &v, Some(service))?,
                    Ok(None) => write_msg_timed(&mut s, op, Status::KeyNotFound as u16, &[], Some(service))?,
                    Err(st) => write_msg_timed(&mut s, op, st as u16, &[], Some(service))?,
                }
            }
            _ => write_msg(&mut s, op, Status::InvalidOpcode as u16, &[])?,
        }
        mark(false);
    }
}

/// A socket read with an overall deadline: each read waits at most until it.
struct Deadline<'a> {
    s: &'a mut TcpStream,
    until: std::time::Instant,
}

impl<'a> Deadline<'a> {
    fn new(s: &'a mut TcpStream, d: Duration) -> Deadline<'a> {
        Deadline { s, until: std::time::Instant::now() + d }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("a message not whole {MESSAGE_DEADLINE:?} after its first byte")));
        }
        self.s.set_read_timeout(Some(left))?;
        self.s.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                io::Error::new(io::ErrorKind::TimedOut, format!("a message not whole {MESSAGE_DEADLINE:?} after its first byte"))
            }
            _ => e,
        })
    }
}

/// The fuzz target's entry point (fuzz/fuzz_targets/uio_net.rs): messages read from `data`
/// one after another as a peer's stream, a put's record decoded as its server would.
pub fn fuzz_one(data: &[u8]) {
    let mut r = data;
    let mut body = Vec::new();
    while let Ok((op, _)) = read_msg(&mut r, &mut body) {
        assert!(body.len() <= MAX_BODY);
        if op == OP_PUT {
            if let Decoded::Record(rec) = decode(&body) {
                assert!(rec.len() <= body.len());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Map(HashMap<Vec<u8>, Vec<u8>>);

    impl Store for Map {
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Status> {
            self.0.insert(key.to_vec(), value.to_vec());
            Ok(())
        }
        fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
            Ok(self.0.get(key).cloned())
        }
    }

    #[test]
    fn a_declared_length_costs_no_memory_before_its_bytes_arrive() {
        let mut h = vec![OP_GET, 0, 0, 0];
        h.extend_from_slice(&(16u32 << 20).to_le_bytes());
        h.extend_from_slice(b"only a few bytes");
        let mut body = Vec::new();
        let e = read_msg(&mut &h[..], &mut body).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert!(body.capacity() <= 64 << 10, "{} bytes reserved for a 16-byte body", body.capacity());
    }

    #[test]
    fn a_non_loopback_address_needs_allow_remote() {
        let e = bind("0.0.0.0:0".parse().unwrap(), false).unwrap_err();
        assert!(e.to_string().contains("--allow-remote") && e.to_string().contains("--net"), "{e}");
        assert!(bind("127.0.0.1:0".parse().unwrap(), false).is_ok());
    }

    fn get(addr: SocketAddr, key: &[u8]) -> io::Result<(u16, Vec<u8>)> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write_msg(&mut s, OP_GET, 0, key)?;
        let mut out = vec![];
        let (_, st) = read_msg(&mut s, &mut out)?;
        Ok((st, out))
    }

    #[test]
    fn idle_or_trickling_peers_at_the_cap_yield_to_a_good_one_and_garbage_drops_only_its_sender() {
        let listener = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut m = Map::default();
        m.put(b"k", b"v").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let t = serve_capped(listener, Arc::new(Mutex::new(m)), stop.clone(), 4);
        for trickle in [false, true] {
            let mut hold: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let t0 = std::time::Instant::now();
            while t0.elapsed() < YIELD_AFTER + Duration::from_millis(300) {
                if trickle {
                    for s in &mut hold {
                        let _ = s.write_all(&[OP_GET]);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let t1 = std::time::Instant::now();
            assert_eq!(get(addr, b"k").unwrap(), (Status::Success as u16, b"v".to_vec()), "trickle {trickle}");
            assert!(t1.elapsed() < Duration::from_secs(2));
            drop(hold);
        }
        // A peer sending a message past the limit is dropped; the next one is served.
        let mut bad = TcpStream::connect(addr).unwrap();
        bad.write_all(&[OP_PUT, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]).unwrap();
        bad.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        match bad.read(&mut [0u8; 8]) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("the bad peer is not closed: {other:?}"),
        }
        assert_eq!(get(addr, b"k").unwrap().0, Status::Success as u16);
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}
