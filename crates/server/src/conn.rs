//! One client connection as a protocol sees it: an async byte stream (TCP, or TLS once started)
//! plus what the core needs to know about it (handshake done, last activity) and what the
//! protocol may ask of the core (STARTTLS, "are we shutting down?", the rate-limited log).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::Shared;

/// Why the core cut a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cut {
    /// The handshake did not finish within the handshake deadline.
    Handshake = 1,
    /// Nothing was read or written for the idle timeout.
    Idle = 2,
    /// Every slot was taken and a new client took this one's (see `Options::evict_idle_after`).
    Evicted = 3,
    /// The server is shutting down.
    Shutdown = 4,
    /// A request was still being received at the request deadline (a client trickling it).
    Request = 5,
}

impl Cut {
    fn from_u8(v: u8) -> Option<Cut> {
        match v {
            1 => Some(Cut::Handshake),
            2 => Some(Cut::Idle),
            3 => Some(Cut::Evicted),
            4 => Some(Cut::Shutdown),
            5 => Some(Cut::Request),
            0 => None,
            // `Meter::cut` is the only writer and stores a `Cut`'s discriminant.
            _ => unreachable!("cut code {v}: not a Cut"),
        }
    }
}

/// The core's view of a connection, shared between its task, its watchdog and the registry.
pub(crate) struct Meter {
    pub started: Instant,
    established: AtomicBool,
    /// Milliseconds since the server's epoch of the last byte read or written.
    last_io_ms: AtomicU64,
    /// Milliseconds since the server's epoch, plus one, of the first byte of the request being
    /// received now; 0 when no request is in progress (see [`Pace`]).
    request_since_ms: AtomicU64,
    cut: AtomicU8,
    pub kick: Notify,
    /// A connection handed to a blocking thread: the core shuts this socket down to cut it.
    blocking: std::sync::Mutex<Option<std::net::TcpStream>>,
}

impl Meter {
    pub fn new(epoch: Instant) -> Meter {
        let now = Instant::now();
        // The activity clock counts from the server's epoch, taken before it accepted anyone.
        debug_assert!(epoch <= now, "a connection older than its server's epoch");
        Meter {
            started: now,
            established: AtomicBool::new(false),
            last_io_ms: AtomicU64::new(now.duration_since(epoch).as_millis() as u64),
            request_since_ms: AtomicU64::new(0),
            cut: AtomicU8::new(0),
            kick: Notify::new(),
            blocking: std::sync::Mutex::new(None),
        }
    }
    /// Wake a blocking thread that serves this connection (its socket is shut down).
    pub fn shut_blocking(&self) {
        if let Some(s) = crate::lock(&self.blocking).take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
    pub fn established(&self) -> bool {
        self.established.load(Ordering::Acquire)
    }
    pub fn last_io(&self, epoch: Instant) -> Instant {
        epoch + Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed))
    }
    /// When the request being received now started (None: no request in progress).
    pub fn request_since(&self, epoch: Instant) -> Option<Instant> {
        match self.request_since_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(epoch + Duration::from_millis(ms - 1)),
        }
    }
    pub fn cut_reason(&self) -> Option<Cut> {
        Cut::from_u8(self.cut.load(Ordering::Acquire))
    }
    /// Ask the watchdog to cut the connection (first reason wins).
    pub fn cut(&self, why: Cut) {
        let _ = self.cut.compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Acquire);
        self.kick.notify_one();
    }
    fn touch(&self, epoch: Instant) {
        self.last_io_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// A protocol tells the core where its requests begin and end, so that a client trickling a
/// request (a slow-loris: one byte every few seconds, never idle and never done) meets the
/// request deadline (`Options::request_timeout`) and, when every slot is taken, is the first
/// to give its slot up. Cheap: an atomic store per call. [`Pace::none`] for sessions on bytes
/// in memory (fuzzing), where nobody watches.
#[derive(Clone)]
pub struct Pace {
    meter: Option<(Arc<Meter>, Instant)>,
}

impl Pace {
    /// A pace nobody watches.
    pub fn none() -> Pace {
        Pace { meter: None }
    }
    /// The first bytes of a request are here (a no-op while one is already in progress).
    pub fn begin(&self) {
        if let Some((m, epoch)) = &self.meter {
            if m.request_since_ms.load(Ordering::Relaxed) == 0 {
                m.request_since_ms.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
            }
        }
    }
    /// The request is whole (read and parsed): the client owes nothing now.
    pub fn end(&self) {
        if let Some((m, _)) = &self.meter {
            m.request_since_ms.store(0, Ordering::Relaxed);
        }
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// While STARTTLS swaps the plain stream for a TLS one; after a failed TLS handshake it
    /// stays (the socket is gone, and the protocol ends the connection).
    Swapping,
}

/// A client connection handed to [`crate::Protocol::serve`]. It is an `AsyncRead +
/// AsyncWrite` stream; reads and writes count as activity for the idle timeout.
pub struct Conn {
    stream: Stream,
    peer: SocketAddr,
    pub(crate) meter: Arc<Meter>,
    pub(crate) shared: Arc<Shared>,
}

impl Conn {
    pub(crate) fn new(tcp: TcpStream, peer: SocketAddr, meter: Arc<Meter>, shared: Arc<Shared>) -> Conn {
        Conn { stream: Stream::Plain(tcp), peer, meter, shared }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The handshake is over: from now on the idle timeout applies instead of the handshake
    /// deadline. Protocols without a handshake call it at once (or let the core do it:
    /// `Options::handshake` = false).
    pub fn established(&self) {
        self.meter.established.store(true, Ordering::Release);
        self.meter.touch(self.shared.epoch);
        self.meter.kick.notify_one();
    }

    /// The handle that marks where requests begin and end (see [`Pace`]).
    pub fn pace(&self) -> Pace {
        Pace { meter: Some((self.meter.clone(), self.shared.epoch)) }
    }

    /// Whether the server has TLS configured (so STARTTLS can be offered).
    pub fn tls_available(&self) -> bool {
        self.shared.tls.is_some()
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }

    /// Upgrade the connection to TLS (a protocol's STARTTLS). Bytes the client sent after its
    /// STARTTLS request and before the TLS handshake must not have been read yet.
    pub async fn start_tls(&mut self) -> io::Result<()> {
        // `Swapping` outlives a call only if the TLS handshake failed, and that ends the
        // connection: a protocol that tries again is using a connection that has no socket.
        debug_assert!(!matches!(self.stream, Stream::Swapping), "STARTTLS on a connection whose upgrade failed");
        let Some(cfg) = self.shared.tls.clone() else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "TLS is not configured"));
        };
        let tcp = match std::mem::replace(&mut self.stream, Stream::Swapping) {
            Stream::Plain(t) => t,
            other => {
                self.stream = other;
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS is already running"));
            }
        };
        let tls = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await?;
        self.stream = Stream::Tls(Box::new(tls));
        self.meter.touch(self.shared.epoch);
        Ok(())
    }

    /// True once the server started shutting down (protocols may refuse new work politely;
    /// the core cuts the connection shortly after anyway).
    pub fn shutting_down(&self) -> bool {
        self.shared.shutdown.is_triggered()
    }

    /// The server's rate-limited log.
    pub fn log(&self) -> &crate::log::RateLog {
        &self.shared.log
    }

    fn touch(&self) {
        self.meter.touch(self.shared.epoch);
    }

    /// The connection as a blocking std socket, for a protocol whose sessions are strict
    /// request-response ping-pong with one client (serprog): a thread blocked in `read` answers
    /// a round trip with two system calls where the event loop needs three (`epoll_wait`
    /// too). The core still enforces the deadlines, evictions and shutdown: it shuts the
    /// socket down, which ends the blocking `read`. Run the session with
    /// `tokio::task::spawn_blocking`. Plain TCP only (Err with TLS).
    pub fn into_blocking(self) -> io::Result<BlockingConn> {
        let Stream::Plain(tcp) = self.stream else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "a TLS connection cannot be served blocking"));
        };
        let std = tcp.into_std()?;
        std.set_nonblocking(false)?;
        let earlier = crate::lock(&self.meter.blocking).replace(std.try_clone()?);
        // One Conn per meter, and this consumes it: a second socket here would be one the core
        // can no longer shut down to cut its connection.
        assert!(earlier.is_none(), "connection {} handed to a blocking thread twice", self.peer);
        // Cut while converting: the watchdog may already have fired.
        if self.meter.cut_reason().is_some() || self.shared.shutdown.is_triggered() {
            self.meter.shut_blocking();
        }
        Ok(BlockingConn { tcp: std, peer: self.peer, meter: self.meter, epoch: self.shared.epoch })
    }
}

/// A connection served from a blocking thread (see [`Conn::into_blocking`]); reads and writes
/// count as activity.
pub struct BlockingConn {
    tcp: std::net::TcpStream,
    peer: SocketAddr,
    meter: Arc<Meter>,
    epoch: Instant,
}

impl BlockingConn {
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
    /// See [`Conn::pace`].
    pub fn pace(&self) -> Pace {
        Pace { meter: Some((self.meter.clone(), self.epoch)) }
    }
    /// See [`Conn::established`].
    pub fn established(&self) {
        self.meter.established.store(true, Ordering::Release);
        self.meter.touch(self.epoch);
        self.meter.kick.notify_one();
    }
}

impl std::io::Read for BlockingConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        if n > 0 {
            self.meter.touch(self.epoch);
        }
        Ok(n)
    }
}

impl std::io::Write for BlockingConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.tcp.write(buf)?;
        if n > 0 {
            self.meter.touch(self.epoch);
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        debug_assert!(!matches!(self.stream, Stream::Swapping), "{}: read after a failed STARTTLS", self.peer);
        let before = buf.filled().len();
        let r = match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Swapping => Poll::Ready(Err(io::Error::other("read during STARTTLS"))),
        };
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        debug_assert!(!matches!(self.stream, Stream::Swapping), "{}: write after a failed STARTTLS", self.peer);
        let r = match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Swapping => Poll::Ready(Err(io::Error::other("write during STARTTLS"))),
        };
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        debug_assert!(!matches!(self.stream, Stream::Swapping), "{}: write after a failed STARTTLS", self.peer);
        let r = match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Swapping => Poll::Ready(Err(io::Error::other("write during STARTTLS"))),
        };
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Swapping => false,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Swapping => Poll::Ready(Ok(())),
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Swapping => Poll::Ready(Ok(())),
        }
    }
}
