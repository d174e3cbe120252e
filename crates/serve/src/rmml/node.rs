//! The node service: a [`Store`] behind TCP, a [`ssdlab_server::Protocol`] on ssdlab's server
//! core. The core gives it what every ssdlab server has: a connection cap where the longest-idle
//! connection yields its slot to a newcomer (`evict_idle_after`), handshake and idle deadlines,
//! the loopback rule (another address only with `--allow-remote`: the protocol has no
//! authentication), SIGINT/SIGTERM shutdown and rate-limited logs of dropped peers.
//!
//! A peer is not trusted: the store's lock is never held across a network send or receive (a
//! client that stops reading stalls only itself), a connection's memory grows only with the
//! bytes it has sent (a WRITE is received before it is stored, its buffer growing as bytes
//! arrive, never allocated from its declared length) and a READ is sent in pieces of at most
//! [`PIECE_BYTES`]; a request that breaks the protocol (a length past [`MAX_IO_BYTES`]) is
//! answered with a refusal and the connection dropped.

pub mod fuzzing;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ssdlab_server::{Conn, ConnEnd, ListenOptions, ServeError, Stats};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use ssdlab_rmml::node::proto::*;
use ssdlab_rmml::node::{NodeStat, Refusal, Store};

/// Connections served at once by default (the RMML opens one per node and process).
pub const MAX_CONNECTIONS: usize = 64;
/// When every slot is taken, a connection idle this long gives its slot to a newcomer (a
/// client of the node reconnects transparently when its connection was taken).
pub const EVICT_IDLE_AFTER: Duration = Duration::from_secs(1);
/// The largest piece of a READ reply copied out of the store, or of a WRITE copied into it, at
/// a time (the lock is held for one piece).
pub const PIECE_BYTES: usize = 1 << 20;
/// A connection keeps at most this much of its receive buffer between requests.
const KEEP_BUFFER_BYTES: usize = 4 * PIECE_BYTES;

/// How a node serves: where, for how many, with which deadlines.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Address (port 0 picks a free one; loopback unless `allow_remote`: the node protocol
    /// has no authentication), connection limit and deadlines.
    pub listen: ListenOptions,
    pub capacity_bytes: u64,
    /// No log lines (refusals, dropped peers).
    pub quiet: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            listen: ListenOptions { evict_idle_after: Some(EVICT_IDLE_AFTER), ..ListenOptions::on("127.0.0.1:0", MAX_CONNECTIONS) },
            capacity_bytes: 1 << 30,
            quiet: false,
        }
    }
}

/// The node's state, shared by its connections.
pub struct Node {
    store: Mutex<Store>,
    /// Requests received (every header read, refused ones included).
    pub requests: AtomicU64,
    /// The core's counters: connections, refusals, evictions, dropped peers.
    pub core: Arc<Stats>,
}

impl Node {
    pub fn new(capacity_bytes: u64, instance: u32) -> Arc<Node> {
        Arc::new(Node { store: Mutex::new(Store::new(capacity_bytes, instance)), requests: AtomicU64::new(0), core: Arc::default() })
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // The store's methods leave it consistent at every return: a poisoned lock (a panic
        // elsewhere while it was held) still guards a usable store.
        ssdlab_server::lock(&self.store)
    }

    pub fn stat(&self) -> NodeStat {
        self.store().stat()
    }

    /// One client's requests on any byte stream (a connection, or bytes in memory when
    /// fuzzing), until it leaves or breaks the protocol.
    pub async fn session_on<S: AsyncRead + AsyncWrite + Unpin>(&self, mut conn: S) -> Result<(), ConnEnd> {
        let mut buf: Vec<u8> = Vec::new();
        let mut out: Vec<u8> = Vec::with_capacity(REPLY_BYTES + STAT_BYTES);
        loop {
            let mut h = [0u8; REQUEST_BYTES];
            match conn.read_exact(&mut h[..1]).await {
                Ok(_) => {}
                // Gone between requests: a goodbye.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            read_rest(&mut conn, &mut h[1..], "request header").await?;
            let q = Request::decode(&h);
            self.requests.fetch_add(1, Ordering::Relaxed);
            out.clear();
            if q.len > MAX_IO_BYTES {
                // The stream cannot be resynchronised after a length we will not read: answer, drop.
                let why = format!("request of {} bytes: at most {MAX_IO_BYTES}", q.len);
                reply(&mut out, Refusal::BadRequest(why.clone()).code(), why.as_bytes());
                conn.write_all(&out).await?;
                return Err(ConnEnd::Protocol(why));
            }
            let res: Result<Vec<u8>, Refusal> = match q.op {
                OP_HELLO | OP_STAT => Ok(encode_stat(&self.stat()).to_vec()),
                OP_ALLOC => self.store().alloc(q.offset).map(|h| h.to_le_bytes().to_vec()),
                OP_FREE => self.store().free(q.region).map(|_| Vec::new()),
                OP_WRITE => {
                    // Received first (the buffer grows with what arrives), stored after.
                    buf.clear();
                    let n = (&mut conn).take(q.len as u64).read_to_end(&mut buf).await?;
                    if n != q.len as usize {
                        return Err(ConnEnd::Protocol(format!("WRITE of {} bytes ended after {n}", q.len)));
                    }
                    let stored = self.write_pieces(&q, &buf);
                    if buf.capacity() > KEEP_BUFFER_BYTES {
                        buf = Vec::new();
                    }
                    stored.map(|_| Vec::new())
                }
                OP_READ => {
                    // The lock is let go before the reply is sent (a scrutinee's guard would live
                    // through the whole match).
                    let checked = self.store().check(q.region, q.offset, q.len as usize);
                    match checked {
                        Ok(()) => {
                            self.send_read(&mut conn, &q, &mut buf).await?;
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                op => Err(Refusal::BadRequest(format!("unknown op {op}"))),
            };
            match res {
                Ok(p) => reply(&mut out, 0, &p),
                Err(e) => reply(&mut out, e.code(), e.message().as_bytes()),
            }
            conn.write_all(&out).await?;
        }
    }

    /// A WRITE's data into the store a piece at a time, the lock held for one copy. The whole
    /// range is checked first; a region freed meanwhile refuses the rest.
    fn write_pieces(&self, q: &Request, data: &[u8]) -> Result<(), Refusal> {
        self.store().check(q.region, q.offset, data.len())?;
        for (i, piece) in data.chunks(PIECE_BYTES).enumerate() {
            self.store().write(q.region, q.offset + (i * PIECE_BYTES) as u64, piece)?;
        }
        Ok(())
    }

    /// A READ's reply, its payload copied out of the store a piece at a time with the lock held
    /// for the copy only. A region freed between pieces ends the connection (the reply's status
    /// has gone already).
    async fn send_read<S: AsyncWrite + Unpin>(&self, conn: &mut S, q: &Request, buf: &mut Vec<u8>) -> Result<(), ConnEnd> {
        let mut h = [0u8; REPLY_BYTES];
        h[4..8].copy_from_slice(&q.len.to_le_bytes());
        conn.write_all(&h).await?;
        let mut at = 0usize;
        while at < q.len as usize {
            let n = PIECE_BYTES.min(q.len as usize - at);
            buf.resize(n, 0);
            let got = self.store().read(q.region, q.offset + at as u64, &mut buf[..n]);
            got.map_err(|e| ConnEnd::Protocol(format!("READ cut short: {}", e.message())))?;
            conn.write_all(&buf[..n]).await?;
            at += n;
        }
        Ok(())
    }
}

/// `buf.len()` more bytes of something begun; its end is a broken request, not a goodbye.
async fn read_rest<S: AsyncRead + Unpin>(conn: &mut S, buf: &mut [u8], what: &str) -> Result<(), ConnEnd> {
    match conn.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ConnEnd::Protocol(format!("connection closed inside a {what}"))),
        Err(e) => Err(e.into()),
    }
}

/// A reply (header and payload) appended to `out`.
fn reply(out: &mut Vec<u8>, status: u8, payload: &[u8]) {
    write_reply(out, status, payload).expect("writing to a Vec");
}

impl ssdlab_server::Protocol for Node {
    async fn serve(self: Arc<Self>, conn: Conn) -> ConnEnd {
        // No handshake: the idle rules apply from the first byte.
        conn.established();
        match self.session_on(conn).await {
            Ok(()) => ConnEnd::Closed,
            Err(e) => e,
        }
    }
}

/// A node bound to its address, ready to serve.
pub struct NodeServer {
    server: ssdlab_server::Server<Node>,
    node: Arc<Node>,
}

impl NodeServer {
    /// Bind `opts.listen` (the loopback rule applies) for a server stopped by the `stop` flag
    /// given to [`NodeServer::run`] (no signal handlers: tests, embedding).
    pub fn bind(opts: &NodeOptions) -> Result<NodeServer, ServeError> {
        Self::bind_with(opts, false)
    }

    fn bind_with(opts: &NodeOptions, signals: bool) -> Result<NodeServer, ServeError> {
        if opts.capacity_bytes == 0 {
            return Err(ServeError::BadOption("--capacity: expected a positive size".into()));
        }
        // The instance number only has to differ between lives of a node: time and pid do.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let instance = ((t as u64 ^ (t >> 64) as u64 ^ ((std::process::id() as u64) << 16)) as u32).max(1);
        let node = Node::new(opts.capacity_bytes, instance);
        let core = opts.listen.apply(ssdlab_server::Options {
            name: "ssdlab rmml node".into(),
            tls_supported: false,
            quiet: opts.quiet,
            signals,
            stats: node.core.clone(),
            ..ssdlab_server::Options::default()
        });
        let server = ssdlab_server::Server::bind(core, node.clone())?;
        Ok(NodeServer { server, node })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The node's state (its store and counters), still there after [`NodeServer::run`].
    pub fn node(&self) -> Arc<Node> {
        self.node.clone()
    }

    /// Serve until `stop` is set; open connections are cut on the way out.
    pub fn run(self, stop: &AtomicBool) -> Result<(), ServeError> {
        self.server.run(Some(&|| stop.load(Ordering::Relaxed)))
    }
}

/// `ssdlab rmml node`: serve until SIGINT/SIGTERM; `ready` is told the bound address first.
/// Returns the node's final stat.
pub fn serve_until_signal(opts: &NodeOptions, ready: impl FnOnce(SocketAddr)) -> Result<NodeStat, ServeError> {
    let srv = NodeServer::bind_with(opts, true)?;
    let node = srv.node();
    ready(srv.local_addr());
    srv.server.run(None)?;
    Ok(node.stat())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(node: &Node, data: &[u8]) -> Vec<u8> {
        ssdlab_server::fuzzing::run_session(data, |s| async move {
            let _ = node.session_on(s).await;
        })
    }

    #[test]
    fn a_declared_length_allocates_nothing_before_the_bytes_arrive() {
        let node = Node::new(1 << 20, 7);
        let mut data = Request { op: OP_ALLOC, len: 0, region: 0, offset: 4096 }.encode().to_vec();
        // A WRITE declaring 200 MiB with 10 bytes after it: the session ends, the store is untouched.
        data.extend(Request { op: OP_WRITE, len: 200 << 20, region: (7 << 32) | 1, offset: 0 }.encode());
        data.extend(b"0123456789");
        let out = session(&node, &data);
        assert_eq!(out.len(), REPLY_BYTES + 8, "the ALLOC answered, the WRITE not");
        let mut r = [0u8; 4];
        node.store().read((7 << 32) | 1, 0, &mut r).unwrap();
        assert_eq!(r, [0; 4]);
    }

    #[test]
    fn an_oversized_length_is_refused_and_ends_the_session() {
        let node = Node::new(1 << 20, 7);
        let mut data = Request { op: OP_WRITE, len: MAX_IO_BYTES + 1, region: 0, offset: 0 }.encode().to_vec();
        data.extend(Request { op: OP_STAT, len: 0, region: 0, offset: 0 }.encode());
        let out = session(&node, &data);
        assert_eq!(out[0], Refusal::BadRequest(String::new()).code());
        let len = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
        assert_eq!(out.len(), REPLY_BYTES + len, "nothing after the refusal: the STAT was not read");
    }

    #[test]
    fn pieces_of_a_large_write_and_read_meet_exactly() {
        let node = Node::new(8 << 20, 3);
        let region = node.store().alloc(3 * PIECE_BYTES as u64 + 5).unwrap();
        let payload: Vec<u8> = (0..3 * PIECE_BYTES + 5).map(|i| (i * 7 % 251) as u8).collect();
        let mut data = Request { op: OP_WRITE, len: payload.len() as u32, region, offset: 0 }.encode().to_vec();
        data.extend(&payload);
        data.extend(Request { op: OP_READ, len: payload.len() as u32, region, offset: 0 }.encode());
        let out = session(&node, &data);
        assert_eq!(&out[..REPLY_BYTES], &[0u8; REPLY_BYTES]);
        let read = &out[REPLY_BYTES..];
        assert_eq!(&read[..REPLY_BYTES], &[0, 0, 0, 0, 5, 0, 0x30, 0]);
        assert!(read[REPLY_BYTES..] == payload[..]);
    }
}
