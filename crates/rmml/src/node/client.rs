//! The RMML's side of a node connection: one TCP stream, requests in turn, one reconnect when
//! the stream breaks. The node may cut a connection that sat idle (to make room for a newcomer
//! when every slot is taken, or after its idle timeout): before a request the stream is checked
//! and, if the node closed it, replaced by a fresh one, so nothing is sent into a dead stream;
//! a request that fails on the stream anyway is sent once more on a fresh one (READ, WRITE and
//! STAT are idempotent; a repeated FREE finding its region already gone counts as done). A node
//! that came back with a new instance number lost every region it held: requests on those
//! regions fail with [`Error::Lost`], new allocations go on.

use std::io::{BufReader, BufWriter, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::proto::*;
use super::store::Refusal;
use super::{MemoryNode, NodeStat};
use crate::error::{Error, Result};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(20);

pub struct TcpNode {
    addr: String,
    index: usize,
    conn: Option<(BufReader<TcpStream>, BufWriter<TcpStream>)>,
    /// The node's instance as of the last HELLO (0 before the first).
    instance: u32,
}

impl TcpNode {
    /// Connect to the node at `addr` (HOST:PORT); `index` names it in errors.
    pub fn connect(addr: &str, index: usize) -> Result<TcpNode> {
        let mut n = TcpNode { addr: addr.to_string(), index, conn: None, instance: 0 };
        n.reconnect()?;
        Ok(n)
    }

    pub fn instance(&self) -> u32 {
        self.instance
    }

    fn down(&self, msg: impl std::fmt::Display) -> Error {
        Error::Node { node: self.index, addr: self.addr.clone(), msg: msg.to_string() }
    }

    fn reconnect(&mut self) -> Result<()> {
        self.conn = None;
        let sa = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.down(format!("bad address: {e}")))?
            .next()
            .ok_or_else(|| self.down("address resolves to nothing"))?;
        let s = TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT).map_err(|e| self.down(format!("cannot connect: {e}")))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        let r = s.try_clone()?;
        self.conn = Some((BufReader::with_capacity(1 << 16, r), BufWriter::with_capacity(1 << 16, s)));
        let mut out = Vec::new();
        self.exchange(Request { op: OP_HELLO, len: 0, region: 0, offset: 0 }, &[], &mut out)?;
        let st = decode_stat(&out).ok_or_else(|| self.down("not an RMML memory node (bad HELLO reply)"))?;
        self.instance = st.instance;
        Ok(())
    }

    /// Whether the node closed the current connection (or sent something unasked): one
    /// non-blocking peek, no byte taken.
    fn closed_by_node(&self) -> bool {
        let Some((r, _)) = &self.conn else { return true };
        if !r.buffer().is_empty() {
            return true;
        }
        let mut b = 0u8;
        // SAFETY: a one-byte peek into a byte we own, on a socket we own.
        let n = unsafe { libc::recv(r.get_ref().as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted);
        }
        true // end of stream (0), or bytes nobody asked for
    }

    /// One request and its reply on the current connection. Refusals are errors; a broken
    /// stream is an `io::Error` wrapped in `Error::Io`.
    fn exchange(&mut self, q: Request, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let (r, w) = self.conn.as_mut().ok_or_else(|| Error::Io(std::io::ErrorKind::NotConnected.into()))?;
        w.write_all(&q.encode())?;
        w.write_all(data)?;
        w.flush()?;
        let (status, len) = read_reply_header(r)?;
        if len > MAX_IO_BYTES {
            return Err(Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("reply of {len} bytes"))));
        }
        out.resize(len as usize, 0);
        std::io::Read::read_exact(r, out)?;
        if status != 0 {
            return Err(Refusal::error_of(status, String::from_utf8_lossy(out).into_owned(), self.index, &self.addr));
        }
        Ok(())
    }

    /// A request with one reconnect on a broken stream. A request on a region of an earlier
    /// life of the node is not retried: that region is gone.
    fn call(&mut self, q: Request, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        if self.closed_by_node() {
            self.fresh_connection(q)?;
        }
        match self.exchange(q, data, out) {
            Err(Error::Io(first)) => {
                self.reconnect().map_err(|e| self.down(format!("{first}; reconnect failed: {e}")))?;
                self.check_instance(q)?;
                match self.exchange(q, data, out) {
                    // The first FREE was carried out; only its answer was lost.
                    Err(Error::Lost(_)) if q.op == OP_FREE => Ok(()),
                    Err(Error::Io(e)) => Err(self.down(e)),
                    r => r,
                }
            }
            r => r,
        }
    }

    /// A new connection in place of one the node closed, before `q` is sent.
    fn fresh_connection(&mut self, q: Request) -> Result<()> {
        self.reconnect().map_err(|e| self.down(format!("the node closed the connection; reconnect failed: {e}")))?;
        self.check_instance(q)
    }

    /// A request on a region of an earlier life of the node is not sent: that region is gone.
    fn check_instance(&self, q: Request) -> Result<()> {
        if q.region != 0 && (q.region >> 32) as u32 != self.instance {
            return Err(Error::Lost(format!("node {} ({}) restarted: region {:#x} is gone", self.index, self.addr, q.region)));
        }
        Ok(())
    }
}

impl MemoryNode for TcpNode {
    fn addr(&self) -> String {
        self.addr.clone()
    }
    fn stat(&mut self) -> Result<NodeStat> {
        let mut out = Vec::new();
        self.call(Request { op: OP_STAT, len: 0, region: 0, offset: 0 }, &[], &mut out)?;
        let st = decode_stat(&out).ok_or_else(|| self.down("bad STAT reply"))?;
        self.instance = st.instance;
        Ok(st)
    }
    fn alloc(&mut self, len: u64) -> Result<u64> {
        let mut out = Vec::new();
        self.call(Request { op: OP_ALLOC, len: 0, region: 0, offset: len }, &[], &mut out)?;
        let h: [u8; 8] = out.as_slice().try_into().map_err(|_| self.down("bad ALLOC reply"))?;
        Ok(u64::from_le_bytes(h))
    }
    fn free(&mut self, region: u64) -> Result<()> {
        self.call(Request { op: OP_FREE, len: 0, region, offset: 0 }, &[], &mut Vec::new())
    }
    fn write(&mut self, region: u64, offset: u64, data: &[u8]) -> Result<()> {
        let len = u32::try_from(data.len()).ok().filter(|&l| l <= MAX_IO_BYTES).ok_or_else(|| self.down("write too large"))?;
        self.call(Request { op: OP_WRITE, len, region, offset }, data, &mut Vec::new())
    }
    fn read(&mut self, region: u64, offset: u64, out: &mut [u8]) -> Result<()> {
        let len = u32::try_from(out.len()).ok().filter(|&l| l <= MAX_IO_BYTES).ok_or_else(|| self.down("read too large"))?;
        let mut buf = Vec::with_capacity(out.len());
        self.call(Request { op: OP_READ, len, region, offset }, &[], &mut buf)?;
        if buf.len() != out.len() {
            return Err(self.down(format!("read returned {} bytes, asked {}", buf.len(), out.len())));
        }
        out.copy_from_slice(&buf);
        Ok(())
    }
}
