//! `ssdlab nvme serve`: the NVMe/TCP transport on ssdlab's server core. One TCP connection is one
//! queue (the admin queue or an I/O queue of a controller): ICReq/ICResp, then command capsules;
//! data to the controller comes in the capsule or after an R2T in H2CData PDUs; data to the host
//! goes in C2HData PDUs before the response capsule.
//!
//! Replies go out when the device's modelled work is done (latency `emulated`, as the NBD
//! server) or at once (`none`); the journal of an `--image` is committed before any reply to a
//! write leaves, so what a host saw completed survives kill -9.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use ssdlab_server::{ConnEnd, ListenOptions, Pace, ServeError, Stats};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::cmd::{self, controller_to_host, host_to_controller, Sqe, Status, SGL_DATA_BLOCK_OFFSET, SGL_TRANSPORT_DATA_BLOCK};
use crate::ctrl::{Queue, Subsystem, IN_CAPSULE_ADMIN, IN_CAPSULE_IO, MAX_TRANSFER};
use crate::pdu::*;

/// When completions are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Latency {
    None,
    Emulated,
}

/// Largest H2CData PDU the target takes (MAXH2CDATA).
pub const MAX_H2C_DATA: u32 = 128 << 10;
/// Bytes of host data a connection may have asked for (R2Ts outstanding) at once; further
/// commands wait for earlier transfers to finish.
pub const R2T_BYTES_AT_ONCE: u64 = 4 << 20;

/// Target settings: the listener's (shared by every ssdlab server; NVMe/TCP here has no TLS)
/// and the target's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NvmetOptions {
    /// Address, loopback opt-in, connection limit and deadlines.
    #[serde(flatten)]
    pub listen: ListenOptions,
    pub latency: Latency,
    pub metrics_out: Option<std::path::PathBuf>,
    pub quiet: bool,
    pub nqn: String,
    pub name: String,
}

/// NVMe/TCP's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4420";
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

impl NvmetOptions {
    /// Options for tests and embedders: loopback, port 0, 64 connections, quiet.
    pub fn new() -> NvmetOptions {
        NvmetOptions {
            listen: ListenOptions::on("127.0.0.1:0", DEFAULT_MAX_CONNECTIONS),
            latency: Latency::None,
            metrics_out: None,
            quiet: true,
            nqn: DEFAULT_NQN.into(),
            name: "ssdlab nvme serve".into(),
        }
    }
}

impl Default for NvmetOptions {
    fn default() -> Self {
        NvmetOptions::new()
    }
}

pub const DEFAULT_NQN: &str = "nqn.2026-11.dev.ssdlab:ssd";

pub struct Target {
    pub sub: Subsystem,
    pub opts: NvmetOptions,
    core: Arc<Stats>,
    shutdown: Arc<AtomicBool>,
}

fn fatal_end(f: &Fatal) -> ConnEnd {
    ConnEnd::Protocol(format!("NVMe/TCP: {}", f.why))
}

/// A command waiting for its data (R2T sent).
struct Transfer {
    sqe: Sqe,
    buf: Vec<u8>,
    want: usize,
}

/// Replies not yet released: each with the instant it is due.
struct Out<W: AsyncWrite + Unpin + Send + 'static> {
    w: Option<W>,
    now: Vec<u8>,
    due: Vec<(Instant, Vec<u8>)>,
    tx: Option<tokio::sync::mpsc::UnboundedSender<(Instant, u64, Vec<u8>)>>,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
    seq: u64,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Out<W> {
    fn new(w: W, latency: Latency) -> Self {
        match latency {
            Latency::None => Out { w: Some(w), now: vec![], due: vec![], tx: None, task: None, seq: 0 },
            Latency::Emulated => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let task = tokio::spawn(ssdlab_server::delayed::writer(w, rx));
                Out { w: None, now: vec![], due: vec![], tx: Some(tx), task: Some(task), seq: 0 }
            }
        }
    }

    fn push(&mut self, due: Option<Instant>, bytes: Vec<u8>) {
        match (due, self.tx.is_some()) {
            (Some(t), true) => self.due.push((t, bytes)),
            (None, true) => self.due.push((Instant::now(), bytes)),
            _ => self.now.extend_from_slice(&bytes),
        }
    }

    /// Commit the journal, then release what is queued.
    async fn send(&mut self, sub: &Subsystem) -> Result<(), ConnEnd> {
        if self.now.is_empty() && self.due.is_empty() {
            return Ok(());
        }
        ssdlab_server::blocking(|| sub.ns().commit_journal()).map_err(|e| ConnEnd::Io(io::Error::other(format!("journal: {e}"))))?;
        if let Some(tx) = &self.tx {
            for (t, b) in self.due.drain(..) {
                self.seq += 1;
                tx.send((t, self.seq, b)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "reply writer ended"))?;
            }
        }
        if let Some(w) = self.w.as_mut() {
            if !self.now.is_empty() {
                w.write_all(&self.now).await?;
                self.now.clear();
            }
            w.flush().await?;
        }
        Ok(())
    }

    async fn finish(&mut self, sub: &Subsystem) -> Result<(), ConnEnd> {
        self.send(sub).await?;
        drop(self.tx.take());
        if let Some(t) = self.task.take() {
            t.await.map_err(|_| io::Error::other("reply writer panicked"))??;
        }
        Ok(())
    }
}

async fn read_exact<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<(), ConnEnd> {
    r.read_exact(buf).await.map(|_| ()).map_err(ConnEnd::from)
}

/// One queue's connection after ICReq.
struct Session {
    q: Queue,
    enc: Encoder,
    lim: Limits,
    /// Commands whose data was asked for, by transfer tag. The tag is the command id: command
    /// ids are unique among a queue's commands in flight, so tags are too, and a new capsule
    /// reusing a busy id is found by one lookup.
    transfers: HashMap<u16, Transfer>,
    /// Commands whose data is not asked for yet (the connection's R2T budget was spent).
    waiting: std::collections::VecDeque<(Sqe, usize)>,
    r2t_bytes: u64,
    /// Asynchronous event requests held (command ids).
    aers: Vec<u16>,
}

impl Target {
    pub fn new(sub: Subsystem, opts: NvmetOptions) -> Result<Arc<Target>, ServeError> {
        opts.listen.check()?;
        check_nqn(&opts.nqn)?;
        Ok(Arc::new(Target { sub, opts, core: Arc::new(Stats::default()), shutdown: Arc::new(AtomicBool::new(false)) }))
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    pub fn metrics(&self) -> Value {
        let mut m = self.sub.metrics();
        m["nvme"]["connections_total"] = Stats::get(&self.core.connections_total).into();
        m["nvme"]["connections_refused"] = Stats::get(&self.core.refused).into();
        m["nvme"]["protocol_errors"] = Stats::get(&self.core.protocol_errors).into();
        m["nvme"]["latency_mode"] = serde_json::to_value(self.opts.latency).unwrap_or(Value::Null);
        m
    }

    pub fn dump_metrics(&self) -> io::Result<Option<std::path::PathBuf>> {
        let Some(dir) = &self.opts.metrics_out else { return Ok(None) };
        std::fs::create_dir_all(dir)?;
        let text = serde_json::to_string_pretty(&self.metrics()).map_err(io::Error::other)?;
        let tmp = dir.join("metrics.json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join("metrics.json"))?;
        std::fs::write(dir.join("timeseries.csv"), self.sub.ns().series_csv())?;
        Ok(Some(dir.join("metrics.json")))
    }

    /// ICReq / ICResp: the connection's parameters (digests). Errors after a C2HTermReq.
    pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(&self, s: &mut S) -> Result<IcReq, ConnEnd> {
        let mut ch = [0u8; 8];
        read_exact(s, &mut ch).await?;
        let h = CommonHeader::parse(&ch);
        let ic = match h.layout(None) {
            Err(f) => Err(f),
            Ok(_) => {
                let mut rest = [0u8; ICREQ_HLEN as usize - 8];
                read_exact(s, &mut rest).await?;
                IcReq::parse(&rest)
            }
        };
        match ic {
            Ok(ic) => {
                s.write_all(&icresp(ic.hdgst, ic.ddgst, MAX_H2C_DATA)).await?;
                s.flush().await?;
                Ok(ic)
            }
            Err(f) => {
                let mut v = vec![];
                Encoder::default().c2h_term(&mut v, &f, &ch);
                let _ = s.write_all(&v).await;
                let _ = s.flush().await;
                Err(fatal_end(&f))
            }
        }
    }

    /// A whole connection on a stream (tests, fuzzing): ICReq, then the queue's commands until
    /// the host leaves.
    pub async fn session<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, mut s: S, pace: &Pace) -> Result<(), ConnEnd> {
        let ic = self.handshake(&mut s).await?;
        self.queue(s, ic, pace).await
    }

    /// The queue's commands after ICReq, until the host leaves.
    pub async fn queue<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, s: S, ic: IcReq, pace: &Pace) -> Result<(), ConnEnd> {
        let (r, w) = tokio::io::split(s);
        let mut r = BufReader::with_capacity(256 << 10, r);
        let mut out = Out::new(w, self.opts.latency);
        let mut q = Queue::default();
        let res = self.run(&mut r, &mut out, &mut q, ic, pace).await;
        self.sub.disconnect(&q);
        let fin = out.finish(&self.sub).await;
        res?;
        fin
    }

    async fn run<R: AsyncRead + Unpin, W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        r: &mut BufReader<R>,
        out: &mut Out<W>,
        q: &mut Queue,
        ic: IcReq,
        pace: &Pace,
    ) -> Result<(), ConnEnd> {
        let mut ch = [0u8; 8];
        let term = |f: &Fatal, hdr: &[u8], out: &mut Out<W>| {
            let mut v = vec![];
            Encoder::default().c2h_term(&mut v, f, hdr);
            out.push(None, v);
        };
        let mut s = Session {
            q: Queue::default(),
            enc: Encoder { hdgst: ic.hdgst, ddgst: ic.ddgst },
            lim: Limits { hdgst: ic.hdgst, ddgst: ic.ddgst, in_capsule: IN_CAPSULE_ADMIN.max(IN_CAPSULE_IO), max_h2c_data: MAX_H2C_DATA },
            transfers: HashMap::new(),
            waiting: Default::default(),
            r2t_bytes: 0,
            aers: vec![],
        };
        let mut buf: Vec<u8> = Vec::new();
        let res = loop {
            pace.end();
            // Replies go out (journal first) unless the next PDU is already here whole: a host
            // that keeps many commands in flight sends the next capsule before this one's
            // completion, and waiting for its last bytes with completions held back would
            // stall both sides.
            let b = r.buffer();
            let whole = b.len() >= 8 && b.len() >= u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
            if !whole {
                out.send(&self.sub).await?;
            }
            if r.fill_buf().await?.is_empty() {
                break Ok(());
            }
            pace.begin();
            read_exact(r, &mut ch).await?;
            let h = CommonHeader::parse(&ch);
            let lay = match h.layout(Some(&s.lim)) {
                Ok(l) => l,
                Err(f) => {
                    term(&f, &ch, out);
                    break Err(fatal_end(&f));
                }
            };
            // Everything after the common header; its size was checked against the limits.
            buf.clear();
            let n = lay.remaining();
            buf.reserve(n);
            (&mut *r).take(n as u64).read_to_end(&mut buf).await?;
            if buf.len() < n {
                break Err(ConnEnd::Closed);
            }
            let hlen = 8 + lay.rest_of_header;
            if lay.hdgst {
                let mut whole = ch.to_vec();
                whole.extend_from_slice(&buf[..lay.rest_of_header]);
                let got = u32::from_le_bytes(buf[lay.rest_of_header..lay.rest_of_header + 4].try_into().expect("4"));
                if crc32c(&whole) != got {
                    let f = Fatal::new(FES_HEADER_DIGEST_ERROR, 0, "header digest mismatch");
                    term(&f, &whole, out);
                    break Err(fatal_end(&f));
                }
            }
            let d0 = lay.rest_of_header + 4 * lay.hdgst as usize + lay.pad;
            let data = &buf[d0..d0 + lay.data];
            if lay.ddgst {
                let got = u32::from_le_bytes(buf[d0 + lay.data..d0 + lay.data + 4].try_into().expect("4"));
                if crc32c(data) != got {
                    let f = Fatal::new(FES_DATA_DIGEST_ERROR, 0, "data digest mismatch");
                    let mut whole = ch.to_vec();
                    whole.extend_from_slice(&buf[..lay.rest_of_header]);
                    term(&f, &whole, out);
                    break Err(fatal_end(&f));
                }
            }
            let _ = hlen;
            let step = match h.pdu_type {
                CAPSULE_CMD => {
                    let sqe = Sqe(buf[..SQE_BYTES].try_into().expect("64 bytes"));
                    let data = buf[d0..d0 + lay.data].to_vec();
                    self.capsule(&mut s, q, out, sqe, data)
                }
                H2C_DATA => {
                    let dh = DataHeader::parse(&buf[..16]);
                    let last = h.flags & FLAG_LAST_PDU != 0;
                    let data = buf[d0..d0 + lay.data].to_vec();
                    self.h2c_data(&mut s, q, out, dh, last, &data)
                }
                H2C_TERM => break Err(ConnEnd::Protocol("the host ended the connection (H2CTermReq)".into())),
                _ => unreachable!("layout() admits only host PDUs"),
            };
            if let Err(f) = step {
                let mut whole = ch.to_vec();
                whole.extend_from_slice(&buf[..lay.rest_of_header.min(buf.len())]);
                term(&f, &whole, out);
                break Err(fatal_end(&f));
            }
        };
        s.q = *q;
        res
    }

    /// A command capsule: run it now (data in the capsule, or none needed) or ask for its data.
    fn capsule<W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        s: &mut Session,
        q: &mut Queue,
        out: &mut Out<W>,
        sqe: Sqe,
        data: Vec<u8>,
    ) -> Result<(), Fatal> {
        let (_, sgl_len, sgl_id) = sqe.sgl();
        let to_ctrl = host_to_controller(&sqe);
        let to_host = controller_to_host(&sqe);
        let admin_q = !q.connected || q.qid == 0;
        let cap = if admin_q { IN_CAPSULE_ADMIN } else { IN_CAPSULE_IO };
        if data.len() as u32 > cap {
            return Err(Fatal::new(FES_DATA_OUT_OF_RANGE, 4, "in-capsule data beyond IOCCSZ"));
        }
        if !data.is_empty() {
            if !to_ctrl || sgl_id != SGL_DATA_BLOCK_OFFSET || data.len() as u32 != sgl_len {
                self.complete(s, q, out, &sqe, crate::ctrl::Outcome::err(Status::DATA_SGL_LENGTH_INVALID));
                return Ok(());
            }
            let o = self.sub.execute(q, &sqe, &data);
            self.complete(s, q, out, &sqe, o);
            return Ok(());
        }
        if to_ctrl && sgl_len > 0 {
            if sgl_id != SGL_TRANSPORT_DATA_BLOCK {
                self.complete(s, q, out, &sqe, crate::ctrl::Outcome::err(Status::SGL_DESCRIPTOR_TYPE_INVALID));
                return Ok(());
            }
            if sgl_len > MAX_TRANSFER {
                self.complete(s, q, out, &sqe, crate::ctrl::Outcome::err(Status::DATA_SGL_LENGTH_INVALID));
                return Ok(());
            }
            if s.transfers.contains_key(&sqe.cid()) || s.waiting.iter().any(|(w, _)| w.cid() == sqe.cid()) {
                return Err(Fatal::new(FES_PDU_SEQUENCE_ERROR, 0, format!("command id {} already in flight", sqe.cid())));
            }
            if s.transfers.len() + s.waiting.len() >= q.entries.max(crate::ctrl::QUEUE_ENTRIES) as usize {
                return Err(Fatal::new(FES_PDU_SEQUENCE_ERROR, 0, "more commands than the queue has entries"));
            }
            s.waiting.push_back((sqe, sgl_len as usize));
            self.ask(s, out);
            return Ok(());
        }
        if to_host && sgl_id != SGL_TRANSPORT_DATA_BLOCK && sgl_len > 0 {
            self.complete(s, q, out, &sqe, crate::ctrl::Outcome::err(Status::SGL_DESCRIPTOR_TYPE_INVALID));
            return Ok(());
        }
        let o = self.sub.execute(q, &sqe, &[]);
        self.complete(s, q, out, &sqe, o);
        Ok(())
    }

    /// Send R2Ts for waiting commands while the connection's budget allows (one at least).
    fn ask<W: AsyncWrite + Unpin + Send + 'static>(&self, s: &mut Session, out: &mut Out<W>) {
        while let Some(&(sqe, len)) = s.waiting.front() {
            if !s.transfers.is_empty() && s.r2t_bytes + len as u64 > R2T_BYTES_AT_ONCE {
                return;
            }
            s.waiting.pop_front();
            let tag = sqe.cid();
            s.r2t_bytes += len as u64;
            s.transfers.insert(tag, Transfer { sqe, buf: Vec::with_capacity(len.min(MAX_H2C_DATA as usize)), want: len });
            let mut v = vec![];
            s.enc.r2t(&mut v, sqe.cid(), tag, 0, len as u32);
            out.push(None, v);
        }
    }

    fn h2c_data<W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        s: &mut Session,
        q: &mut Queue,
        out: &mut Out<W>,
        dh: DataHeader,
        last: bool,
        data: &[u8],
    ) -> Result<(), Fatal> {
        let Some(t) = s.transfers.get_mut(&dh.ttag) else {
            return Err(Fatal::new(FES_INVALID_HEADER_FIELD, 10, format!("H2CData for unknown transfer tag {}", dh.ttag)));
        };
        if dh.cccid != t.sqe.cid() {
            return Err(Fatal::new(FES_INVALID_HEADER_FIELD, 8, "H2CData command id does not match its transfer tag"));
        }
        if dh.offset as usize != t.buf.len() || dh.length as usize != data.len() || t.buf.len() + data.len() > t.want {
            return Err(Fatal::new(FES_DATA_OUT_OF_RANGE, 12, "H2CData outside what the R2T asked for"));
        }
        t.buf.extend_from_slice(data);
        let complete = t.buf.len() == t.want;
        if complete != last {
            return Err(Fatal::new(FES_PDU_SEQUENCE_ERROR, 1, "LAST_PDU flag does not match the end of the data"));
        }
        if complete {
            let t = s.transfers.remove(&dh.ttag).expect("present");
            s.r2t_bytes -= t.want as u64;
            let o = self.sub.execute(q, &t.sqe, &t.buf);
            self.complete(s, q, out, &t.sqe, o);
            self.ask(s, out);
        }
        Ok(())
    }

    /// Queue a command's completion (its data first), due when the device finished it.
    fn complete<W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        s: &mut Session,
        q: &mut Queue,
        out: &mut Out<W>,
        sqe: &Sqe,
        o: crate::ctrl::Outcome,
    ) {
        let sqhd = q.consume();
        if o.hold {
            if s.aers.len() >= crate::ctrl::AER_SLOTS {
                let e = crate::ctrl::Outcome::err(Status::ASYNC_EVENT_LIMIT);
                let mut v = vec![];
                s.enc.resp(&mut v, &e.cqe(sqhd, q.qid, sqe.cid()));
                out.push(None, v);
            } else {
                s.aers.push(sqe.cid());
            }
            return;
        }
        let mut v = Vec::with_capacity(o.data.len() + 64);
        if o.status() == Status::SUCCESS && !o.data.is_empty() && controller_to_host(sqe) {
            let (_, sgl_len, _) = sqe.sgl();
            let n = o.data.len().min(sgl_len as usize);
            if n > 0 {
                s.enc.c2h_data(&mut v, sqe.cid(), &o.data[..n], MAX_TRANSFER as usize, true);
            }
        }
        s.enc.resp(&mut v, &o.cqe(sqhd, q.qid, sqe.cid()));
        let due = match (self.opts.latency, o.done_ns) {
            (Latency::Emulated, Some(t)) => Some(self.sub.wall_of(t)),
            _ => None,
        };
        out.push(due, v);
        let _ = cmd::io::READ;
    }
}

/// NQNs: "nqn." and at most 223 bytes (NVMe Base 2.0, 4.5), no NUL.
pub fn check_nqn(n: &str) -> Result<(), ServeError> {
    if !n.starts_with("nqn.") || n.len() > 223 || n.contains('\0') || n == crate::ctrl::DISCOVERY_NQN {
        return Err(ServeError::BadOption(format!(
            "--nqn {n:?}: an NVMe qualified name starts with \"nqn.\", is at most 223 bytes and is not the discovery NQN"
        )));
    }
    Ok(())
}

impl ssdlab_server::Protocol for Target {
    async fn serve(self: Arc<Self>, mut conn: ssdlab_server::Conn) -> ConnEnd {
        let pace = conn.pace();
        let ic = match self.handshake(&mut conn).await {
            Ok(ic) => ic,
            Err(e) => return e,
        };
        conn.established();
        match self.queue(conn, ic, &pace).await {
            Ok(()) => ConnEnd::Closed,
            Err(e) => e,
        }
    }

    fn on_usr1(&self) {
        match self.dump_metrics() {
            Ok(Some(p)) if !self.opts.quiet => eprintln!("{}: wrote {}", self.opts.name, p.display()),
            Ok(_) => {}
            Err(e) => eprintln!("{}: writing metrics failed: {e}", self.opts.name),
        }
    }

    fn on_shutdown(&self) -> Result<(), ServeError> {
        self.shutdown.store(true, Ordering::Relaxed);
        self.sub.ns().snapshot().map_err(|e| ServeError::Failed(format!("saving the device state failed: {e}")))?;
        match self.dump_metrics() {
            Ok(Some(p)) if !self.opts.quiet => eprintln!("{}: wrote {}", self.opts.name, p.display()),
            Ok(_) => {}
            Err(e) => return Err(ServeError::Failed(format!("writing metrics to {:?} failed: {e}", self.opts.metrics_out))),
        }
        Ok(())
    }
}

/// Serve until SIGINT/SIGTERM (or `stop` returns true). Returns the final metrics.
pub fn serve(t: Arc<Target>, stop: Option<&dyn Fn() -> bool>) -> Result<Value, ServeError> {
    let server = bind(&t, None)?;
    server.run(stop)?;
    Ok(t.metrics())
}

/// Bind the listener (or take `listener`) and log the subsystem; the caller runs it.
pub fn bind(t: &Arc<Target>, listener: Option<std::net::TcpListener>) -> Result<ssdlab_server::Server<Target>, ServeError> {
    let o = &t.opts;
    let core_opts = o.listen.apply(ssdlab_server::Options {
        name: o.name.clone(),
        request_timeout: Some(ssdlab_server::DEFAULT_REQUEST_TIMEOUT),
        tls_mode: ssdlab_server::TlsMode::Implicit,
        tls_supported: false,
        quiet: o.quiet,
        signals: true,
        worker_threads: 0,
        log_interval: Duration::from_secs(5),
        stats: t.core.clone(),
        ..ssdlab_server::Options::default()
    });
    let server = ssdlab_server::Server::start(core_opts, listener, t.clone())?;
    let blocks = t.sub.ns().logical_bytes() / t.sub.lba_bytes() as u64;
    let zones = t.sub.zone_info().map(|z| format!(", {} zones of {} blocks (capacity {})", z.zones, z.zone_size, z.zone_capacity));
    server.log().info(format!(
        "listening on {} (NVMe/TCP, latency {:?}); subsystem {} with namespace 1: {blocks} blocks of {} bytes{}",
        server.local_addr(),
        o.latency,
        t.sub.nqn,
        t.sub.lba_bytes(),
        zones.unwrap_or_default()
    ));
    Ok(server)
}
