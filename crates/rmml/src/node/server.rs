//! The node service: a [`Store`] behind TCP, a thread per connection (the RMML and the
//! baselines open one or two each), until a stop flag is raised.
//!
//! A peer is not trusted: the store's lock is never held across a network send or receive (a
//! client that stops reading stalls only itself), a connection's memory grows only with the
//! bytes it has sent (a WRITE is received before it is stored, never allocated from its
//! declared length) and a READ is sent in pieces of at most [`PIECE_BYTES`]; the listener is
//! loopback unless remote peers are explicitly allowed.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::proto::*;
use super::store::{Refusal, Store};

/// Connections served at once; more are refused (closed at once).
pub const MAX_CONNECTIONS: usize = 64;
/// The largest piece of a READ reply copied out of the store at a time.
pub const PIECE_BYTES: usize = 1 << 20;

pub struct NodeServer {
    listener: TcpListener,
    store: Arc<Mutex<Store>>,
    pub requests: Arc<AtomicU64>,
}

impl NodeServer {
    /// Bind `listen` (HOST:PORT; port 0 picks a free one) with `capacity_bytes` to lend; a
    /// non-loopback address only with `allow_remote` (the protocol has no authentication).
    pub fn bind(listen: &str, capacity_bytes: u64, allow_remote: bool) -> std::io::Result<NodeServer> {
        let addrs: Vec<SocketAddr> = listen.to_socket_addrs()?.collect();
        if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()).filter(|_| !allow_remote) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("--listen {a}: a non-loopback address needs --allow-remote; the node protocol has no authentication, so anyone who can reach the port can read and write the memory it lends"),
            ));
        }
        let listener = TcpListener::bind(&addrs[..])?;
        listener.set_nonblocking(true)?;
        // The instance number only has to differ between lives of a node: time and pid do.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let instance = ((t as u64 ^ (t >> 64) as u64 ^ ((std::process::id() as u64) << 16)) as u32).max(1);
        Ok(NodeServer {
            listener,
            store: Arc::new(Mutex::new(Store::new(capacity_bytes, instance))),
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener")
    }

    pub fn stat(&self) -> super::NodeStat {
        self.store.lock().expect("node store").stat()
    }

    /// Serve until `stop` is set; open connections are shut down on the way out.
    pub fn run(&self, stop: &AtomicBool) -> std::io::Result<()> {
        let mut conns: Vec<(TcpStream, std::thread::JoinHandle<()>)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            conns.retain(|(_, h)| !h.is_finished());
            match self.listener.accept() {
                Ok((s, _)) => {
                    if conns.len() >= MAX_CONNECTIONS {
                        drop(s);
                        continue;
                    }
                    s.set_nonblocking(false)?;
                    s.set_nodelay(true)?;
                    let keep = s.try_clone()?;
                    let store = self.store.clone();
                    let requests = self.requests.clone();
                    conns.push((keep, std::thread::spawn(move || serve_conn(s, &store, &requests))));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(e),
            }
        }
        for (s, h) in conns {
            let _ = s.shutdown(Shutdown::Both);
            let _ = h.join();
        }
        Ok(())
    }
}

fn serve_conn(s: TcpStream, store: &Mutex<Store>, requests: &AtomicU64) {
    let Ok(rs) = s.try_clone() else { return };
    let mut r = BufReader::with_capacity(1 << 16, rs);
    let mut w = BufWriter::with_capacity(1 << 16, s);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let mut h = [0u8; REQUEST_BYTES];
        if r.read_exact(&mut h).is_err() {
            return;
        }
        let q = Request::decode(&h);
        requests.fetch_add(1, Ordering::Relaxed);
        if q.len > MAX_IO_BYTES {
            // The stream cannot be resynchronised after a length we will not read: answer, close.
            let _ = write_reply(&mut w, 4, format!("request of {} bytes: at most {MAX_IO_BYTES}", q.len).as_bytes());
            let _ = w.flush();
            return;
        }
        let res: Result<Vec<u8>, Refusal> = match q.op {
            OP_HELLO | OP_STAT => Ok(encode_stat(&store.lock().expect("node store").stat()).to_vec()),
            OP_ALLOC => store.lock().expect("node store").alloc(q.offset).map(|h| h.to_le_bytes().to_vec()),
            OP_FREE => store.lock().expect("node store").free(q.region).map(|_| Vec::new()),
            OP_WRITE => {
                // Received first (the buffer grows with what arrives), stored under the lock after.
                buf.clear();
                match (&mut r).take(q.len as u64).read_to_end(&mut buf) {
                    Ok(n) if n == q.len as usize => {}
                    _ => return,
                }
                let stored = store.lock().expect("node store").write(q.region, q.offset, &buf);
                stored.map(|_| Vec::new())
            }
            OP_READ => {
                let checked = store.lock().expect("node store").check(q.region, q.offset, q.len as usize);
                match checked {
                    Ok(()) => {
                        if send_read(&mut w, store, &q, &mut buf).and_then(|_| w.flush()).is_err() {
                            return;
                        }
                        continue;
                    }
                    Err(e) => Err(e),
                }
            }
            op => Err(Refusal::BadRequest(format!("unknown op {op}"))),
        };
        let ok = match res {
            Ok(p) => write_reply(&mut w, 0, &p),
            Err(e) => write_reply(&mut w, e.code(), e.message().as_bytes()),
        };
        if ok.and_then(|_| w.flush()).is_err() {
            return;
        }
    }
}

/// A READ's reply, its payload copied out of the store a piece at a time with the lock held
/// for the copy only. A region freed between pieces ends the connection (the reply's status
/// has gone already).
fn send_read(w: &mut impl Write, store: &Mutex<Store>, q: &Request, buf: &mut Vec<u8>) -> std::io::Result<()> {
    write_reply_header(w, 0, q.len)?;
    let mut at = 0usize;
    while at < q.len as usize {
        let n = PIECE_BYTES.min(q.len as usize - at);
        buf.resize(n, 0);
        let got = store.lock().expect("node store").read(q.region, q.offset + at as u64, &mut buf[..n]);
        got.map_err(|e| std::io::Error::other(e.message()))?;
        w.write_all(&buf[..n])?;
        at += n;
    }
    Ok(())
}

/// `ssdlab rmml node`: serve until SIGINT/SIGTERM; `ready` is told the bound address first.
pub fn serve_until_signal(
    listen: &str,
    capacity_bytes: u64,
    allow_remote: bool,
    ready: impl FnOnce(SocketAddr),
) -> std::io::Result<super::NodeStat> {
    let srv = NodeServer::bind(listen, capacity_bytes, allow_remote)?;
    let stop = Arc::new(AtomicBool::new(false));
    let ids = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .iter()
        .map(|&s| signal_hook::flag::register(s, stop.clone()))
        .collect::<std::io::Result<Vec<_>>>()?;
    ready(srv.local_addr());
    let res = srv.run(&stop);
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    res.map(|_| srv.stat())
}
