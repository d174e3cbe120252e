//! The node service: a [`Store`] behind TCP, a thread per connection (the RMML and the
//! baselines open one or two each), until a stop flag is raised.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::proto::*;
use super::store::{Refusal, Store};

/// Connections served at once; more are refused (closed at once).
pub const MAX_CONNECTIONS: usize = 64;

pub struct NodeServer {
    listener: TcpListener,
    store: Arc<Mutex<Store>>,
    pub requests: Arc<AtomicU64>,
}

impl NodeServer {
    /// Bind `listen` (HOST:PORT; port 0 picks a free one) with `capacity_bytes` to lend.
    pub fn bind(listen: &str, capacity_bytes: u64) -> std::io::Result<NodeServer> {
        let listener = TcpListener::bind(listen)?;
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
                buf.resize(q.len as usize, 0);
                if r.read_exact(&mut buf).is_err() {
                    return;
                }
                store.lock().expect("node store").write(q.region, q.offset, &buf).map(|_| Vec::new())
            }
            OP_READ => {
                buf.resize(q.len as usize, 0);
                match store.lock().expect("node store").read(q.region, q.offset, &mut buf) {
                    Ok(()) => {
                        if write_reply(&mut w, 0, &buf).and_then(|_| w.flush()).is_err() {
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

/// `ssdlab rmml node`: serve until SIGINT/SIGTERM; `ready` is told the bound address first.
pub fn serve_until_signal(listen: &str, capacity_bytes: u64, ready: impl FnOnce(SocketAddr)) -> std::io::Result<super::NodeStat> {
    let srv = NodeServer::bind(listen, capacity_bytes)?;
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
