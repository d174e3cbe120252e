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

use crate::layout::Status;
use crate::queues::Store;
use crate::record::{decode, Decoded};

pub const OP_PUT: u8 = 1;
pub const OP_GET: u8 = 2;
const HEADER: usize = 8;
/// Largest body a peer accepts (a 16 MiB value and its header).
pub const MAX_BODY: usize = (16 << 20) + 4096;

/// Write one message.
pub fn write_msg(w: &mut impl Write, op: u8, status: u16, body: &[u8]) -> io::Result<()> {
    let mut h = [0u8; HEADER];
    h[0] = op;
    h[2..4].copy_from_slice(&status.to_le_bytes());
    h[4..8].copy_from_slice(&(body.len() as u32).to_le_bytes());
    // One write for small messages (one segment on the wire).
    if body.len() <= 4096 {
        let mut m = Vec::with_capacity(HEADER + body.len());
        m.extend_from_slice(&h);
        m.extend_from_slice(body);
        w.write_all(&m)
    } else {
        w.write_all(&h)?;
        w.write_all(body)
    }
}

/// Read one message into `body`; returns (opcode, status).
pub fn read_msg(r: &mut impl Read, body: &mut Vec<u8>) -> io::Result<(u8, u16)> {
    let mut h = [0u8; HEADER];
    r.read_exact(&mut h)?;
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {len} bytes (at most {MAX_BODY})")));
    }
    body.resize(len, 0);
    r.read_exact(body)?;
    Ok((h[0], u16::from_le_bytes([h[2], h[3]])))
}

/// Connections to the other devices, by device id.
pub struct Peers {
    me: u16,
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<TcpStream>>,
    timeout: Duration,
    pub errors: u64,
}

impl Peers {
    /// `addrs[i]`: device i's NET address (this device's own is not used).
    pub fn new(me: u16, addrs: Vec<SocketAddr>, timeout: Duration) -> Peers {
        let conns = addrs.iter().map(|_| None).collect();
        Peers { me, addrs, conns, timeout, errors: 0 }
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
        let (rop, status) = read_msg(s, out)?;
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

/// Serve peers' requests on `listener` against `store` (a device's UTL; on the traditional
/// path, a host's device behind its queues) until `stop`; one thread per peer. The returned
/// thread ends once every peer connection is closed.
pub fn serve<S: Store + Send + 'static>(listener: TcpListener, store: Arc<Mutex<S>>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    listener.set_nonblocking(true).expect("non-blocking listener");
    std::thread::spawn(move || {
        let mut peers = vec![];
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    let (store, stop) = (store.clone(), stop.clone());
                    peers.retain(|p: &std::thread::JoinHandle<()>| !p.is_finished());
                    peers.push(std::thread::spawn(move || {
                        let _ = serve_peer(s, &store, &stop);
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        drop(listener);
        for p in peers {
            let _ = p.join();
        }
    })
}

/// One peer's requests, until it closes the connection or `stop` (the device going away
/// closes it, as a process exit would).
fn serve_peer<S: Store>(mut s: TcpStream, store: &Mutex<S>, stop: &AtomicBool) -> io::Result<()> {
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
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let (op, _) = read_msg(&mut s, &mut body)?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        match op {
            OP_PUT => {
                let status = match decode(&body) {
                    Decoded::Record(r) if r.len() == body.len() => match store.lock().expect("store").put(r.key, r.value) {
                        Ok(()) => Status::Success,
                        Err(st) => st,
                    },
                    _ => Status::DataTransferError,
                };
                write_msg(&mut s, op, status as u16, &[])?;
            }
            OP_GET => {
                let got = store.lock().expect("store").get(&body);
                match got {
                    Ok(Some(v)) => write_msg(&mut s, op, Status::Success as u16, &v)?,
                    Ok(None) => write_msg(&mut s, op, Status::KeyNotFound as u16, &[])?,
                    Err(st) => write_msg(&mut s, op, st as u16, &[])?,
                }
            }
            _ => write_msg(&mut s, op, Status::InvalidOpcode as u16, &[])?,
        }
    }
}
