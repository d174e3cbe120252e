//! flashrom's serprog protocol (interface version 1) in front of a [`Flash`], over TCP.
//!
//! Answers what flashrom's serprog driver uses for an SPI chip: NOP, Q_IFACE, Q_CMDMAP,
//! Q_PGMNAME, Q_SERBUF, Q_BUSTYPE, Q_OPBUF, Q_WRNMAXLEN, Q_RDNMAXLEN, O_INIT, O_DELAY, O_EXEC,
//! SYNCNOP, S_BUSTYPE, O_SPIOP, S_SPI_FREQ, S_PIN_STATE. O_DELAY advances the chip's simulated
//! clock when the operation buffer executes, so a host's busy-polling delays cost no real time.
//! Everything else, and anything malformed or over a limit, gets NAK; parameters of the known
//! parallel-bus commands are consumed first so the stream stays in step. One client at a time; a
//! disconnect ends the session, not the server.

use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::chip::Flash;
use crate::Error;

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

/// A socket reader that keeps waiting through read timeouts, asking `stop` every 100 ms whether
/// to give up (signals, shutdown).
struct StopReader<'a> {
    stream: TcpStream,
    stop: &'a dyn Fn() -> bool,
    last_check: Instant,
}

const CHECK_EVERY: Duration = Duration::from_millis(100);

impl Read for StopReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.last_check.elapsed() >= CHECK_EVERY {
                self.last_check = Instant::now();
                if (self.stop)() {
                    return Err(io::Error::other("stopped"));
                }
            }
            match self.stream.read(buf) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => continue,
                r => return r,
            }
        }
    }
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ServeSummary {
    pub clients: u64,
    pub commands: u64,
    pub naks: u64,
}

/// A serprog TCP server.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    pub fn bind(addr: &str) -> Result<Server, Error> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::Io(format!("cannot listen on {addr}: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| Error::Io(e.to_string()))?;
        Ok(Server { listener })
    }

    pub fn local_addr(&self) -> Result<std::net::SocketAddr, Error> {
        self.listener.local_addr().map_err(|e| Error::Io(e.to_string()))
    }

    /// Serve clients one after another until `stop` returns true (checked at least every 100
    /// ms). Each program/erase is already in the image file; the trace is flushed per client.
    pub fn run(&self, flash: &mut Flash, stop: &dyn Fn() -> bool) -> Result<ServeSummary, Error> {
        // Once asked to stop, stay stopped (a signal is reported only once).
        let stopped = std::cell::Cell::new(false);
        let stop = &|| {
            if !stopped.get() && stop() {
                stopped.set(true);
            }
            stopped.get()
        };
        let mut sum = ServeSummary::default();
        loop {
            if stop() {
                break;
            }
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    sum.clients += 1;
                    let s = serve_client(flash, stream, &peer.to_string(), stop);
                    sum.commands += s.commands;
                    sum.naks += s.naks;
                    flash.flush()?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(Error::Io(format!("accept: {e}"))),
            }
        }
        flash.flush()?;
        Ok(sum)
    }
}

fn serve_client(flash: &mut Flash, stream: TcpStream, peer: &str, stop: &dyn Fn() -> bool) -> Session {
    let mut s = Session::default();
    let setup = (|| -> io::Result<TcpStream> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(CHECK_EVERY))?;
        stream.try_clone()
    })();
    let wstream = match setup {
        Ok(w) => w,
        Err(e) => {
            eprintln!("serprog: {peer}: {e}");
            return s;
        }
    };
    flash.set_source(&format!("serprog {peer}"));
    let mut reader = BufReader::with_capacity(1 << 16, StopReader { stream, stop, last_check: Instant::now() });
    let mut writer = BufWriter::with_capacity(1 << 16, wstream);
    loop {
        match serve_one(flash, &mut s, &mut reader, &mut writer) {
            Ok(true) => {
                // Answer as soon as the client has nothing more queued for us.
                if reader.buffer().is_empty() && writer.flush().is_err() {
                    break;
                }
            }
            Ok(false) => break,
            Err(e) => {
                if e.kind() != ErrorKind::UnexpectedEof && e.kind() != ErrorKind::ConnectionReset && e.to_string() != "stopped" {
                    eprintln!("serprog: {peer}: {e}");
                }
                break;
            }
        }
    }
    let _ = writer.flush();
    // A frame cut by a disconnect ends there (CS# high).
    flash.end();
    s
}
