//! NET: requests between device processes over TCP.
//!
//! A message is an 8-byte header (opcode u8 | flags u8 | status u16 | body length u32,
//! little-endian), an 8-byte tag when flagged, its body, and an 8-byte trailer when flagged;
//! TCP cuts it into segments (the document's NET packetises the record itself; the modelled
//! cost in [`crate::cluster::Links::net`] counts those packets). Requests: put (body = the
//! record DMA built: checksum | key len | value len | key | value, checked on arrival) and get
//! (body = the key); the answer carries a status and, for a get, the value. Each device serves
//! its peers' requests on its own threads, against its UTL.
//!
//! Queue depth: a device keeps one connection per peer and writes its requests there as its
//! controller takes the commands, each tagged with a number of its own (the answer carries it
//! back), without waiting for the answers: a thread per connection reads them and finishes
//! each request by its tag, in whatever order they come. The serving side reads a
//! connection's requests one after another as they arrive, answers each in order and writes
//! the answers out together once no further whole request is waiting.
//!
//! A peer that goes away (restarted, crashed) or does not answer within the timeout costs
//! exactly the requests in flight to it a clear error (status Transient Transport Error, and
//! a line on stderr naming the peer and the cause); the next request reconnects, so a
//! restarted peer serves again without any other step.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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
/// Header byte 1, bit 1: an 8-byte tag (little-endian) follows the header; an answer to a
/// tagged request carries its tag.
const TAGGED: u8 = 2;

/// A message's fields besides its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    pub op: u8,
    pub status: u16,
    pub tag: Option<u64>,
    /// The answering side's simulated service time (answers only).
    pub service_ns: Option<u64>,
}

/// Write one message.
pub fn write_msg(w: &mut impl Write, op: u8, status: u16, body: &[u8]) -> io::Result<()> {
    write_msg_meta(w, Meta { op, status, tag: None, service_ns: None }, body)
}

/// Write one message, with `service_ns` in a trailer when given (see [`TIMED`]).
pub fn write_msg_timed(w: &mut impl Write, op: u8, status: u16, body: &[u8], service_ns: Option<u64>) -> io::Result<()> {
    write_msg_meta(w, Meta { op, status, tag: None, service_ns }, body)
}

/// Write one message with its tag and trailer as `m` says.
pub fn write_msg_meta(w: &mut impl Write, m: Meta, body: &[u8]) -> io::Result<()> {
    let mut h = [0u8; HEADER + 8];
    h[0] = m.op;
    h[1] = if m.service_ns.is_some() { TIMED } else { 0 } | if m.tag.is_some() { TAGGED } else { 0 };
    h[2..4].copy_from_slice(&m.status.to_le_bytes());
    h[4..8].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let head = match m.tag {
        Some(t) => {
            h[8..].copy_from_slice(&t.to_le_bytes());
            &h[..]
        }
        None => &h[..HEADER],
    };
    let trailer = m.service_ns.map(u64::to_le_bytes);
    let trailer: &[u8] = trailer.as_ref().map_or(&[], |t| &t[..]);
    // One write for small messages (one segment on the wire).
    if body.len() <= 4096 {
        let mut b = Vec::with_capacity(head.len() + body.len() + trailer.len());
        b.extend_from_slice(head);
        b.extend_from_slice(body);
        b.extend_from_slice(trailer);
        w.write_all(&b)
    } else {
        w.write_all(head)?;
        w.write_all(body)?;
        w.write_all(trailer)
    }
}

/// Read one message into `body`; returns (opcode, status). The body grows as its bytes arrive:
/// a header declaring 16 MiB costs nothing until they do.
pub fn read_msg(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u8, u16)> {
    read_msg_meta(r, body).map(|m| (m.op, m.status))
}

/// [`read_msg`], also returning the service time of a timed answer.
pub fn read_msg_timed(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u8, u16, Option<u64>)> {
    read_msg_meta(r, body).map(|m| (m.op, m.status, m.service_ns))
}

/// [`read_msg`], returning every field besides the body.
pub fn read_msg_meta(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<Meta> {
    let mut h = [0u8; HEADER];
    r.read_exact(&mut h)?;
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {len} bytes (at most {MAX_BODY})")));
    }
    let mut word = || -> io::Result<u64> {
        let mut t = [0u8; 8];
        r.read_exact(&mut t)?;
        Ok(u64::from_le_bytes(t))
    };
    let tag = if h[1] & TAGGED != 0 { Some(word()?) } else { None };
    body.clear();
    body.reserve(len.min(64 << 10));
    r.take(len as u64).read_to_end(body)?;
    if body.len() != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("a message cut at {} of {len} bytes", body.len())));
    }
    let service_ns = if h[1] & TIMED != 0 {
        let mut t = [0u8; 8];
        r.read_exact(&mut t)?;
        Some(u64::from_le_bytes(t))
    } else {
        None
    };
    Ok(Meta { op: h[0], status: u16::from_le_bytes([h[2], h[3]]), tag, service_ns })
}

/// Whether `buf` starts with a whole message.
fn whole_msg_in(buf: &[u8]) -> bool {
    if buf.len() < HEADER {
        return false;
    }
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    let extra = if buf[1] & TAGGED != 0 { 8 } else { 0 } + if buf[1] & TIMED != 0 { 8 } else { 0 };
    buf.len() >= HEADER + extra + len
}

/// Bind a NET listener on `addr` after ssdlab's loopback rule: another address only with
/// `allow_remote` (NET has no authentication or encryption).
pub fn bind(addr: SocketAddr, allow_remote: bool) -> io::Result<TcpListener> {
    ssdlab_netrules::check_listen(&addr.to_string(), false, false, allow_remote)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.replace("--listen", "--net")))?;
    TcpListener::bind(addr)
}

/// A request's answer: (status, body, the answering side's simulated service time), or
/// Transient Transport Error when the peer could not be reached or went away before answering.
pub type Answer = Result<(u16, Vec<u8>, u64), Status>;
/// What finishes a request: called once, with its answer, on the connection's reader thread
/// (or on the sender's, when the request could not be sent).
pub type Reply = Box<dyn FnOnce(Answer) + Send>;

/// The requests in flight on one connection, by tag; `closed` once its reader has failed them.
#[derive(Default)]
struct InFlight {
    closed: bool,
    waiting: HashMap<u64, (u8, Instant, Reply)>,
}

/// One connection to a peer: its writing end, and what its reader thread finishes.
struct Link {
    w: TcpStream,
    inflight: Arc<Mutex<InFlight>>,
}

/// Connections to the other devices, by device id: requests are sent without waiting for
/// their answers (see the module's text). Shared by reference: every method takes `&self`.
pub struct Peers {
    me: u16,
    addrs: Vec<SocketAddr>,
    links: Vec<Mutex<Option<Link>>>,
    timeout: Duration,
    next_tag: AtomicU64,
    /// Requests failed because their peer was unreachable.
    errors: Arc<AtomicU64>,
}

impl Peers {
    /// `addrs[i]`: device i's NET address (this device's own is not used).
    pub fn new(me: u16, addrs: Vec<SocketAddr>, timeout: Duration) -> Peers {
        let links = addrs.iter().map(|_| Mutex::new(None)).collect();
        Peers { me, addrs, links, timeout, next_tag: AtomicU64::new(1), errors: Arc::new(AtomicU64::new(0)) }
    }

    /// Requests failed so far because their peer was unreachable.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn connect(&self, to: u16) -> io::Result<Link> {
        let addr = self.addrs[to as usize];
        let s = TcpStream::connect_timeout(&addr, self.timeout)?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(self.timeout))?;
        let r = s.try_clone()?;
        let inflight = Arc::new(Mutex::new(InFlight::default()));
        let (f, timeout, errors, me) = (inflight.clone(), self.timeout, self.errors.clone(), self.me);
        std::thread::Builder::new().name(format!("uio-net-peer{to}")).spawn(move || {
            let cause = read_answers(r, &f, timeout);
            let failed = {
                let mut g = lock_store(&f, "NET's requests in flight");
                g.closed = true;
                std::mem::take(&mut g.waiting)
            };
            if !failed.is_empty() {
                errors.fetch_add(failed.len() as u64, Ordering::Relaxed);
                eprintln!("uio device {me}: peer device {to} at {addr} unreachable: {cause} ({} requests in flight failed)", failed.len());
            }
            for (_, (_, _, reply)) in failed {
                reply(Err(Status::TransientTransport));
            }
        })?;
        Ok(Link { w: s, inflight })
    }

    /// Send request `op` with `body` to device `to`; `reply` gets its answer (once). A broken
    /// connection is re-opened once before the request counts as unreachable.
    pub fn send(&self, to: u16, op: u8, body: &[u8], reply: Reply) {
        assert_ne!(to, self.me, "a request to this device itself");
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let mut reply = Some(reply);
        let mut slot = lock_store(&self.links[to as usize], "NET's connections");
        let mut last: Option<io::Error> = None;
        for _ in 0..2 {
            if slot.as_ref().is_none_or(|l| lock_store(&l.inflight, "NET's requests in flight").closed) {
                match self.connect(to) {
                    Ok(l) => *slot = Some(l),
                    Err(e) => {
                        last = Some(e);
                        break;
                    }
                }
            }
            let link = slot.as_mut().expect("connected");
            {
                let mut g = lock_store(&link.inflight, "NET's requests in flight");
                if g.closed {
                    continue; // its reader has just stopped: connect again
                }
                g.waiting.insert(tag, (op, Instant::now(), reply.take().expect("not sent yet")));
            }
            match write_msg_meta(&mut link.w, Meta { op, status: 0, tag: Some(tag), service_ns: None }, body) {
                Ok(()) => return,
                Err(e) => {
                    let _ = link.w.shutdown(std::net::Shutdown::Both);
                    // Taken back unless the reader has failed it already (and so answered it).
                    match lock_store(&link.inflight, "NET's requests in flight").waiting.remove(&tag) {
                        Some((_, _, r)) => reply = Some(r),
                        None => return,
                    }
                    *slot = None;
                    last = Some(e);
                }
            }
        }
        drop(slot);
        self.errors.fetch_add(1, Ordering::Relaxed);
        let cause = last.map_or_else(|| "its connection closed".to_string(), |e| e.to_string());
        eprintln!("uio device {}: peer device {to} at {} unreachable: {cause}", self.me, self.addrs[to as usize]);
        if let Some(r) = reply {
            r(Err(Status::TransientTransport));
        }
    }

    /// Send request `op` with `body` to device `to` and wait for its answer (value in `out`):
    /// (status, the answering side's simulated service time).
    pub fn request(&self, to: u16, op: u8, body: &[u8], out: &mut Vec<u8>) -> Result<(u16, u64), Status> {
        let (tx, rx) = mpsc::channel();
        self.send(to, op, body, Box::new(move |a| drop(tx.send(a))));
        // The reader fails a request unanswered within the timeout; this wait is a backstop.
        let (st, body, service) = rx.recv_timeout(self.timeout * 2 + Duration::from_secs(1)).map_err(|_| Status::TransientTransport)??;
        *out = body;
        Ok((st, service))
    }
}

impl Drop for Peers {
    /// Close the connections: their readers stop, failing what is still in flight.
    fn drop(&mut self) {
        for l in &self.links {
            if let Some(l) = lock_store(l, "NET's connections").as_ref() {
                let _ = l.w.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// How often a connection's reader looks for requests waiting too long.
const READER_TICK: Duration = Duration::from_millis(100);

/// Read answers on `s` and finish their requests by tag until the connection fails, a request
/// waits longer than `timeout`, or the peer breaks the protocol; returns why it stopped.
fn read_answers(s: TcpStream, inflight: &Mutex<InFlight>, timeout: Duration) -> String {
    let mut r = BufReader::with_capacity(64 << 10, s);
    let mut body = Vec::new();
    loop {
        match wait_for_bytes(&mut r, READER_TICK) {
            Ok(true) => {}
            Ok(false) => {
                let g = lock_store(inflight, "NET's requests in flight");
                if g.closed {
                    return "closed".into();
                }
                if g.waiting.values().any(|(_, since, _)| since.elapsed() > timeout) {
                    return format!("no answer within {timeout:?}");
                }
                continue;
            }
            Err(e) => return e.to_string(),
        }
        let m = match read_msg_meta(&mut Deadline::new(&mut r, timeout.max(MESSAGE_DEADLINE)), &mut body) {
            Ok(m) => m,
            Err(e) => return e.to_string(),
        };
        let Some(tag) = m.tag else { return "an answer without a tag".into() };
        let Some((op, _, reply)) = lock_store(inflight, "NET's requests in flight").waiting.remove(&tag) else {
            return format!("an answer to tag {tag}, which no request has");
        };
        if m.op != op {
            reply(Err(Status::TransientTransport));
            return format!("answer to opcode {op} has opcode {}", m.op);
        }
        reply(Ok((m.status, std::mem::take(&mut body), m.service_ns.unwrap_or(0))));
    }
}

/// Wait up to `tick` for bytes on `r` (true when some are buffered); an end of stream is an
/// error.
fn wait_for_bytes(r: &mut BufReader<TcpStream>, tick: Duration) -> io::Result<bool> {
    if !r.buffer().is_empty() {
        return Ok(true);
    }
    r.get_ref().set_read_timeout(Some(tick))?;
    match r.fill_buf() {
        Ok([]) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed")),
        Ok(_) => Ok(true),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(false),
        Err(e) => Err(e),
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

/// Answers waiting to be written go out once they reach this many bytes, whatever follows.
const ANSWERS_FLUSH_BYTES: usize = 256 << 10;

/// One peer's requests, until it closes the connection or `stop` (the device going away
/// closes it, as a process exit would). Requests are served in their order; their answers are
/// written together once no further whole request is waiting (a pipelining peer gets them in
/// few segments).
/// `mark(busy)`: a message's first byte arrived (true) or its answer went out (false).
fn serve_peer<S: Store>(s: TcpStream, store: &Mutex<S>, stop: &AtomicBool, mark: &dyn Fn(bool)) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::with_capacity(64 << 10, s);
    let mut body = Vec::new();
    let mut answers = Vec::new();
    loop {
        // Wait for the next message's first byte, looking at `stop` in between; then read
        // the whole message.
        if r.buffer().is_empty() && !answers.is_empty() {
            w.write_all(&answers)?;
            answers.clear();
            mark(false);
        }
        match wait_for_bytes(&mut r, Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => {
                if stop.load(Ordering::Relaxed) {
                    return w.shutdown(std::net::Shutdown::Both);
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        // The whole message within the deadline, however the bytes trickle in.
        mark(true);
        let m = read_msg_meta(&mut Deadline::new(&mut r, MESSAGE_DEADLINE), &mut body)?;
        let answer = |status: Status, service: Option<u64>| Meta { op: m.op, status: status as u16, tag: m.tag, service_ns: service };
        match m.op {
            OP_PUT => {
                let (status, service) = match decode(&body) {
                    Decoded::Record(rec) if rec.len() == body.len() => {
                        let mut st = lock_store(store, "the device store");
                        let r = st.put(rec.key, rec.value);
                        (r.err().unwrap_or(Status::Success), st.sim_ns())
                    }
                    _ => (Status::DataTransferError, 0),
                };
                write_msg_meta(&mut answers, answer(status, Some(service)), &[])?;
            }
            OP_GET => {
                let (got, service) = {
                    let mut st = lock_store(store, "the device store");
                    let got = st.get(&body);
                    (got, st.sim_ns())
                };
                match got {
                    Ok(Some(v)) => write_msg_meta(&mut answers, answer(Status::Success, Some(service)), &v)?,
                    Ok(None) => write_msg_meta(&mut answers, answer(Status::KeyNotFound, Some(service)), &[])?,
                    Err(st) => write_msg_meta(&mut answers, answer(st, Some(service)), &[])?,
                }
            }
            _ => write_msg_meta(&mut answers, answer(Status::InvalidOpcode, None), &[])?,
        }
        if !whole_msg_in(r.buffer()) || answers.len() >= ANSWERS_FLUSH_BYTES {
            w.write_all(&answers)?;
            answers.clear();
            mark(false);
        }
    }
}

/// A socket read with an overall deadline: each read waits at most until it.
struct Deadline<'a> {
    r: &'a mut BufReader<TcpStream>,
    until: Instant,
}

impl<'a> Deadline<'a> {
    fn new(r: &'a mut BufReader<TcpStream>, d: Duration) -> Deadline<'a> {
        Deadline { r, until: Instant::now() + d }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let late = || io::Error::new(io::ErrorKind::TimedOut, format!("a message not whole {MESSAGE_DEADLINE:?} after its first byte"));
        if self.r.buffer().is_empty() {
            let left = self.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            self.r.get_ref().set_read_timeout(Some(left))?;
        }
        self.r.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => late(),
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
