//! flashrom's serprog protocol (interface version 1) in front of the emulated SPI NOR chip
//! (crates/spi's [`Flash`]), over TCP.
//!
//! Answers what flashrom's serprog driver uses for an SPI chip: NOP, Q_IFACE, Q_CMDMAP,
//! Q_PGMNAME, Q_SERBUF, Q_BUSTYPE, Q_OPBUF, Q_WRNMAXLEN, Q_RDNMAXLEN, O_INIT, O_DELAY, O_EXEC,
//! SYNCNOP, S_BUSTYPE, O_SPIOP, S_SPI_FREQ, S_PIN_STATE. O_DELAY advances the chip's simulated
//! clock when the operation buffer executes, so a host's busy-polling delays cost no real time.
//! Everything else, and anything malformed or over a limit, gets NAK; parameters of the known
//! parallel-bus commands are consumed first so the stream stays in step. The server runs on the
//! async core (crates/server): one client has the chip at a time, a second one is refused at
//! once unless the first has been idle for a while (then it takes over), the address is
//! loopback unless explicitly opened up; a disconnect ends the session, not the server.

use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ssdlab_server::{BlockingConn, Conn, ConnEnd, ListenOptions};

use ssdlab_spi::Flash;

/// Why the serprog server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The chip refused (the stand-in chip, writing the image back).
    #[error(transparent)]
    Chip(#[from] ssdlab_spi::Error),
    /// The server could not listen (address, loopback rule, bind, a bad limit) or failed while
    /// serving.
    #[error(transparent)]
    Serve(#[from] ssdlab_server::ServeError),
    /// The socket, or writing the image back during a session.
    #[error("{0}")]
    Io(String),
}

pub const ACK: u8 = 0x06;
pub const NAK: u8 = 0x15;

pub const NOP: u8 = 0x00;
pub const Q_IFACE: u8 = 0x01;
pub const Q_CMDMAP: u8 = 0x02;
pub const Q_PGMNAME: u8 = 0x03;
pub const Q_SERBUF: u8 = 0x04;
pub const Q_BUSTYPE: u8 = 0x05;
pub const Q_CHIPSIZE: u8 = 0x06;
pub const Q_OPBUF: u8 = 0x07;
pub const Q_WRNMAXLEN: u8 = 0x08;
pub const R_BYTE: u8 = 0x09;
pub const R_NBYTES: u8 = 0x0A;
pub const O_INIT: u8 = 0x0B;
pub const O_WRITEB: u8 = 0x0C;
pub const O_WRITEN: u8 = 0x0D;
pub const O_DELAY: u8 = 0x0E;
pub const O_EXEC: u8 = 0x0F;
pub const SYNCNOP: u8 = 0x10;
pub const Q_RDNMAXLEN: u8 = 0x11;
pub const S_BUSTYPE: u8 = 0x12;
pub const O_SPIOP: u8 = 0x13;
pub const S_SPI_FREQ: u8 = 0x14;
pub const S_PIN_STATE: u8 = 0x15;

pub const BUS_SPI: u8 = 0x08;
pub const PROGRAMMER_NAME: &[u8; 16] = b"ssdlab-spi\0\0\0\0\0\0";
/// Limits we advertise and enforce (bytes).
pub const MAX_WRITE_N: u32 = 64 * 1024;
pub const MAX_READ_N: u32 = 1024 * 1024;
pub const OPBUF_BYTES: u16 = 4096;
pub const SERBUF_BYTES: u16 = 0xFFFF; // TCP has flow control

const SUPPORTED: [u8; 17] = [
    NOP,
    Q_IFACE,
    Q_CMDMAP,
    Q_PGMNAME,
    Q_SERBUF,
    Q_BUSTYPE,
    Q_OPBUF,
    Q_WRNMAXLEN,
    O_INIT,
    O_DELAY,
    O_EXEC,
    SYNCNOP,
    Q_RDNMAXLEN,
    S_BUSTYPE,
    O_SPIOP,
    S_SPI_FREQ,
    S_PIN_STATE,
];

/// The 256-bit command map.
pub fn command_map() -> [u8; 32] {
    let mut m = [0u8; 32];
    for c in SUPPORTED {
        m[c as usize / 8] |= 1 << (c % 8);
    }
    m
}

/// Per-connection protocol state.
#[derive(Debug, Default)]
pub struct Session {
    /// Delay queued in the operation buffer (microseconds) and buffer bytes used.
    opbuf_delay_us: u64,
    opbuf_used: u32,
    pub commands: u64,
    pub naks: u64,
}

fn u24(b: &[u8]) -> u32 {
    b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16
}

fn skip<R: Read>(input: &mut R, n: u64) -> io::Result<()> {
    let got = io::copy(&mut input.take(n), &mut io::sink())?;
    if got < n {
        return Err(io::Error::new(ErrorKind::UnexpectedEof, "stream ended inside a command"));
    }
    Ok(())
}

/// Read one command from `input` and write its answer to `output`. Ok(false) when the stream
/// ended cleanly between commands; an error when it ended inside one or an I/O error occurred.
pub fn serve_one<R: Read, W: Write>(flash: &mut Flash, s: &mut Session, input: &mut R, output: &mut W) -> io::Result<bool> {
    let mut cmd = [0u8; 1];
    match input.read(&mut cmd) {
        Ok(0) => return Ok(false),
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(true),
        Err(e) => return Err(e),
    }
    s.commands += 1;
    let nak = |s: &mut Session, out: &mut W| {
        s.naks += 1;
        out.write_all(&[NAK])
    };
    match cmd[0] {
        NOP | O_INIT => {
            if cmd[0] == O_INIT {
                s.opbuf_delay_us = 0;
                s.opbuf_used = 0;
            }
            output.write_all(&[ACK])?;
        }
        Q_IFACE => output.write_all(&[ACK, 0x01, 0x00])?,
        Q_CMDMAP => {
            output.write_all(&[ACK])?;
            output.write_all(&command_map())?;
        }
        Q_PGMNAME => {
            output.write_all(&[ACK])?;
            output.write_all(PROGRAMMER_NAME)?;
        }
        Q_SERBUF => output.write_all(&[ACK, SERBUF_BYTES as u8, (SERBUF_BYTES >> 8) as u8])?,
        Q_BUSTYPE => output.write_all(&[ACK, BUS_SPI])?,
        Q_OPBUF => output.write_all(&[ACK, OPBUF_BYTES as u8, (OPBUF_BYTES >> 8) as u8])?,
        Q_WRNMAXLEN => output.write_all(&[ACK, MAX_WRITE_N as u8, (MAX_WRITE_N >> 8) as u8, (MAX_WRITE_N >> 16) as u8])?,
        Q_RDNMAXLEN => output.write_all(&[ACK, MAX_READ_N as u8, (MAX_READ_N >> 8) as u8, (MAX_READ_N >> 16) as u8])?,
        SYNCNOP => output.write_all(&[NAK, ACK])?,
        O_DELAY => {
            let mut p = [0u8; 4];
            input.read_exact(&mut p)?;
            if s.opbuf_used + 5 > OPBUF_BYTES as u32 {
                nak(s, output)?;
            } else {
                s.opbuf_used += 5;
                s.opbuf_delay_us += u32::from_le_bytes(p) as u64;
                output.write_all(&[ACK])?;
            }
        }
        O_EXEC => {
            // The buffer only ever holds delays (no parallel bus): they pass in simulated time.
            if s.opbuf_delay_us > 0 {
                flash.advance(s.opbuf_delay_us.saturating_mul(1000));
            }
            s.opbuf_delay_us = 0;
            s.opbuf_used = 0;
            output.write_all(&[ACK])?;
        }
        S_BUSTYPE => {
            let mut p = [0u8; 1];
            input.read_exact(&mut p)?;
            if p[0] & BUS_SPI != 0 {
                output.write_all(&[ACK])?;
            } else {
                nak(s, output)?;
            }
        }
        S_PIN_STATE => {
            let mut p = [0u8; 1];
            input.read_exact(&mut p)?;
            output.write_all(&[ACK])?;
        }
        S_SPI_FREQ => {
            let mut p = [0u8; 4];
            input.read_exact(&mut p)?;
            let want = u32::from_le_bytes(p);
            if want == 0 {
                nak(s, output)?;
            } else {
                let hz = want.min(flash.part().max_clock_hz);
                // hz > 0 here, so this cannot fail.
                let _ = flash.set_clock_hz(hz);
                output.write_all(&[ACK])?;
                output.write_all(&hz.to_le_bytes())?;
            }
        }
        O_SPIOP => {
            let mut p = [0u8; 6];
            input.read_exact(&mut p)?;
            let (slen, rlen) = (u24(&p[0..3]), u24(&p[3..6]));
            if slen > MAX_WRITE_N || rlen > MAX_READ_N {
                skip(input, slen as u64)?;
                nak(s, output)?;
            } else {
                let mut data = vec![0u8; slen as usize];
                input.read_exact(&mut data)?;
                let mut out = Vec::with_capacity(rlen as usize + 1);
                out.push(ACK);
                flash.transfer_write_read(&data, rlen as usize, &mut out);
                output.write_all(&out)?;
            }
        }
        // Parallel-bus commands: consume their parameters, then refuse.
        Q_CHIPSIZE => nak(s, output)?,
        R_BYTE => {
            skip(input, 3)?;
            nak(s, output)?;
        }
        R_NBYTES | O_WRITEB => {
            skip(input, if cmd[0] == R_NBYTES { 6 } else { 4 })?;
            nak(s, output)?;
        }
        O_WRITEN => {
            let mut p = [0u8; 6];
            input.read_exact(&mut p)?;
            skip(input, u24(&p[0..3]) as u64)?;
            nak(s, output)?;
        }
        _ => nak(s, output)?,
    }
    Ok(true)
}

/// Run a whole byte stream through the protocol (tests and fuzzing): the answers, in order.
pub fn respond(flash: &mut Flash, input: &[u8]) -> Vec<u8> {
    let mut s = Session::default();
    let mut r = input;
    let mut out = Vec::new();
    while let Ok(true) = serve_one(flash, &mut s, &mut r, &mut out) {}
    out
}

/// Fuzzing entry point (fuzz/fuzz_targets/serprog.rs and the suite's corpus run): `data` as a
/// client's byte stream. Never panics; every answer starts with ACK or NAK; [`frame_len`] says
/// exactly what [`serve_one`] consumes; a refused client's answers are as long as a served one's
/// would be for the queries it may make.
pub fn fuzz_one(flash: &mut Flash, data: &[u8]) {
    let out = respond(flash, data);
    assert!(out.first().is_none_or(|&b| b == ACK || b == NAK));
    let mut s = Session::default();
    let mut at = 0;
    while let Some(n) = frame_len(&data[at..]) {
        let mut r = &data[at..];
        let whole = data.len() - at >= n;
        let mut busy = Vec::new();
        match serve_one(flash, &mut s, &mut r, &mut Vec::new()) {
            Ok(true) if whole => assert_eq!(data.len() - at - r.len(), n, "frame_len of {:#04x}", data[at]),
            Err(_) if !whole => break,
            other => panic!("{other:?} for a {} frame of {n} bytes", if whole { "whole" } else { "partial" }),
        }
        busy_answer(&data[at..at + n], &mut busy);
        assert!(!busy.is_empty());
        at += n;
    }
}

/// How many bytes the command at the start of `buf` takes, parameters and data included;
/// None while `buf` is too short to tell. [`serve_one`] consumes exactly this many bytes of a
/// complete command (the property tests check it), so the server hands it whole commands only.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let &cmd = buf.first()?;
    let u24_at = |i: usize| buf.get(i..i + 3).map(u24);
    Some(match cmd {
        R_BYTE => 4,
        R_NBYTES => 7,
        O_WRITEB => 5,
        O_WRITEN => 7 + u24_at(1)? as usize,
        O_DELAY => 5,
        S_BUSTYPE | S_PIN_STATE => 2,
        S_SPI_FREQ => 5,
        O_SPIOP => 7 + u24_at(1)? as usize,
        _ => 1,
    })
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ServeSummary {
    pub clients: u64,
    pub commands: u64,
    pub naks: u64,
    pub refused: u64,
    pub evicted: u64,
    /// Clients that hung up before they were accepted (or while they waited for the chip).
    pub abandoned: u64,
    pub timeouts: u64,
}

/// Settings of the serprog server: the listener's (shared by every ssdlab server; serprog has
/// no TLS, and one client has the chip at a time) and serprog's own.
#[derive(Debug, Clone)]
pub struct SerprogOptions {
    /// Address (loopback unless `allow_remote`) and deadlines: a new client must send its
    /// first command within the handshake timeout; one idle for `evict_idle_after` gives the
    /// chip to a new client that wants it; `idle_timeout` closes an idle client even if
    /// nobody waits. `max_connections` is 1 whatever it says (a chip has one bus).
    pub listen: ListenOptions,
    pub quiet: bool,
    /// Handle SIGINT/SIGTERM itself (Python callers poll their own signals instead).
    pub signals: bool,
}

/// Defaults: a client idle for 5 s yields the chip to a newcomer; nobody else is cut.
pub const DEFAULT_EVICT_IDLE: Duration = Duration::from_secs(5);

impl SerprogOptions {
    pub fn new(listen: &str) -> SerprogOptions {
        SerprogOptions {
            listen: ListenOptions { evict_idle_after: Some(DEFAULT_EVICT_IDLE), ..ListenOptions::on(listen, 1) },
            quiet: true,
            signals: false,
        }
    }
}

/// The chip behind the protocol: one client at a time (a chip has one bus).
struct Serprog {
    flash: Mutex<Flash>,
    clients: AtomicU64,
    commands: AtomicU64,
    naks: AtomicU64,
    /// A write-through or trace error (reported when the server stops).
    flush_error: Mutex<Option<String>>,
}

impl Serprog {
    fn flash(&self) -> std::sync::MutexGuard<'_, Flash> {
        ssdlab_server::lock(&self.flash)
    }
}

/// Largest buffered command: O_SPIOP's 24-bit length plus its header.
const FRAME_MAX: usize = 7 + 0xFF_FFFF;

impl Serprog {
    /// One session on a blocking thread: read what the client sent, answer every whole
    /// command, send the answers together, then write the image ranges those commands changed
    /// (while the client reads the answer), and read again.
    fn session(&self, mut c: BlockingConn) -> ConnEnd {
        let mut input: Vec<u8> = Vec::with_capacity(1 << 16);
        let mut out: Vec<u8> = Vec::with_capacity(1 << 16);
        let mut chunk = vec![0u8; 1 << 16];
        let mut s = Session::default();
        let mut first = true;
        let pace = c.pace();
        let end = loop {
            let mut pos = 0;
            {
                let mut flash = self.flash();
                // The previous answer is out: its programs and erases go to the image now,
                // before this batch is answered.
                flash.write_back();
                while let Some(n) = frame_len(&input[pos..]) {
                    if input.len() - pos < n {
                        break;
                    }
                    let mut frame = &input[pos..pos + n];
                    // A whole frame never runs short, and writes to a Vec do not fail.
                    let more = serve_one(&mut flash, &mut s, &mut frame, &mut out).expect("a whole serprog frame");
                    assert!(more && frame.is_empty(), "serve_one consumes exactly frame_len bytes");
                    pos += n;
                }
            }
            if pos > 0 && first {
                first = false;
                c.established();
            }
            input.drain(..pos);
            debug_assert!(input.len() < FRAME_MAX);
            // A whole command restarts the request clock; a partial frame left is the next one's.
            if pos > 0 || input.is_empty() {
                pace.end();
            }
            if !input.is_empty() {
                pace.begin();
            }
            if !out.is_empty() {
                if let Err(e) = c.write_all(&out) {
                    break ConnEnd::from(e);
                }
                out.clear();
                self.flash().write_back();
            }
            match c.read(&mut chunk) {
                Ok(0) => break ConnEnd::Closed,
                Ok(n) => input.extend_from_slice(&chunk[..n]),
                Err(e) => break ConnEnd::from(e),
            }
        };
        self.commands.fetch_add(s.commands, Ordering::Relaxed);
        self.naks.fetch_add(s.naks, Ordering::Relaxed);
        // A frame cut by a disconnect ends there (CS# high); the image and trace reach the OS.
        let mut flash = self.flash();
        flash.end();
        if let Err(e) = flash.flush() {
            *ssdlab_server::lock(&self.flush_error) = Some(e.to_string());
        }
        end
    }
}

impl ssdlab_server::Protocol for Serprog {
    async fn serve(self: Arc<Self>, conn: Conn) -> ConnEnd {
        self.clients.fetch_add(1, Ordering::Relaxed);
        self.flash().set_source(&format!("serprog {}", conn.peer()));
        let c = match conn.into_blocking() {
            Ok(c) => c,
            Err(e) => return ConnEnd::from(e),
        };
        let me = self.clone();
        match tokio::task::spawn_blocking(move || me.session(c)).await {
            Ok(end) => end,
            Err(_) => ConnEnd::Io(io::Error::other("the serprog session panicked")),
        }
    }

    async fn refused(self: Arc<Self>, mut conn: Conn, _why: ssdlab_server::Refused) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut input: Vec<u8> = Vec::with_capacity(256);
        let mut out = Vec::with_capacity(256);
        loop {
            let mut pos = 0;
            while let Some(n) = frame_len(&input[pos..]) {
                if input.len() - pos < n {
                    break;
                }
                busy_answer(&input[pos..pos + n], &mut out);
                pos += n;
            }
            input.drain(..pos);
            if !out.is_empty() && conn.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            // A refused client gets small commands only.
            if input.len() > 4096 || !matches!(conn.read_buf(&mut input).await, Ok(n) if n > 0) {
                return;
            }
        }
    }
}

/// The programmer name a refused client sees (flashrom prints it).
pub const BUSY_NAME: &[u8; 16] = b"BUSY:chip in use";

/// The answer to one whole command from a client refused because another one has the chip:
/// enough of the protocol for flashrom to synchronise and read the programmer name (which says
/// the chip is in use), then no usable bus, so it stops with an error instead of hanging or
/// dying of SIGPIPE on a closed socket.
pub fn busy_answer(frame: &[u8], out: &mut Vec<u8>) {
    match frame.first() {
        Some(&NOP) => out.push(ACK),
        Some(&SYNCNOP) => out.extend_from_slice(&[NAK, ACK]),
        Some(&Q_IFACE) => out.extend_from_slice(&[ACK, 0x01, 0x00]),
        Some(&Q_CMDMAP) => {
            out.push(ACK);
            out.extend_from_slice(&command_map());
        }
        Some(&Q_PGMNAME) => {
            out.push(ACK);
            out.extend_from_slice(BUSY_NAME);
        }
        Some(&Q_BUSTYPE) => out.extend_from_slice(&[ACK, 0x00]),
        _ => out.push(NAK),
    }
}

/// A serprog TCP server: bind first (to learn the port), then [`Server::run`] with a chip.
pub struct Server {
    listener: std::net::TcpListener,
    opts: SerprogOptions,
}

impl Server {
    /// Bind `addr` (loopback only) with the default limits.
    pub fn bind(addr: &str) -> Result<Server, Error> {
        Server::bind_with(SerprogOptions::new(addr))
    }

    /// Bind with `opts` (the loopback rule: non-loopback only with `allow_remote`).
    pub fn bind_with(opts: SerprogOptions) -> Result<Server, Error> {
        let listener = ssdlab_server::bind_listener(&opts.listen.address, false, false, opts.listen.allow_remote)?;
        Ok(Server { listener, opts })
    }

    pub fn local_addr(&self) -> Result<std::net::SocketAddr, Error> {
        self.listener.local_addr().map_err(|e| Error::Io(e.to_string()))
    }

    /// Serve clients until `stop` returns true (checked every 100 ms) or, with
    /// `opts.signals`, SIGINT/SIGTERM. One client has the chip at a time: another one is
    /// refused at once, unless the first has been idle for `evict_idle_after` (then the
    /// newcomer takes over). Each program/erase is already in the image file; the image and
    /// the trace are flushed per client and at the end.
    pub fn run(self, flash: &mut Flash, stop: &dyn Fn() -> bool) -> Result<ServeSummary, Error> {
        // The protocol owns the chip while serving; a small stand-in keeps `flash` valid.
        let standin = Flash::new(ssdlab_spi::parts::w25q16jv(), None, Default::default())?;
        flash.set_deferred_write_through(true);
        let proto = Arc::new(Serprog {
            flash: Mutex::new(std::mem::replace(flash, standin)),
            clients: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            naks: AtomicU64::new(0),
            flush_error: Mutex::new(None),
        });
        let stats = Arc::new(ssdlab_server::Stats::default());
        let core = ssdlab_server::Options {
            // One client at a time: a chip has one bus.
            max_connections: 1,
            ..self.opts.listen.apply(ssdlab_server::Options {
                name: "ssdlab spi".into(),
                request_timeout: Some(ssdlab_server::DEFAULT_REQUEST_TIMEOUT),
                tls_mode: ssdlab_server::TlsMode::StartTls,
                tls_supported: false,
                quiet: self.opts.quiet,
                signals: self.opts.signals,
                worker_threads: 1,
                log_interval: Duration::from_secs(5),
                stats: stats.clone(),
                ..ssdlab_server::Options::default()
            })
        };
        let res = ssdlab_server::Server::with_listener(core, Some(self.listener), proto.clone()).and_then(|srv| srv.run(Some(stop)));
        // Take the chip back whatever happened.
        let standin = Flash::new(ssdlab_spi::parts::w25q16jv(), None, Default::default())?;
        *flash = std::mem::replace(&mut *proto.flash(), standin);
        flash.set_deferred_write_through(false);
        res?;
        flash.flush()?;
        if let Some(e) = ssdlab_server::lock(&proto.flush_error).take() {
            return Err(Error::Io(e));
        }
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Ok(ServeSummary {
            clients: g(&proto.clients),
            commands: g(&proto.commands),
            naks: g(&proto.naks),
            refused: ssdlab_server::Stats::get(&stats.refused),
            evicted: ssdlab_server::Stats::get(&stats.evicted),
            abandoned: ssdlab_server::Stats::get(&stats.abandoned),
            timeouts: ssdlab_server::Stats::get(&stats.handshake_timeouts)
                + ssdlab_server::Stats::get(&stats.request_timeouts)
                + ssdlab_server::Stats::get(&stats.idle_timeouts),
        })
    }
}
