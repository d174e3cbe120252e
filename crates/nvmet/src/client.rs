//! A small NVMe/TCP host (blocking, one queue per connection), written from the
//! specifications: what `ssdlab nvme stats` uses to read a running target's metrics, and the
//! host of crates/nvmet's tests. Real hosts (Linux nvme-tcp, nvme-cli) are tested through a
//! guest (tests/test_nvme.py).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::cmd::{Sqe, SGL_DATA_BLOCK_OFFSET, SGL_TRANSPORT_DATA_BLOCK};
use crate::pdu::*;

/// One queue's connection.
pub struct Host {
    pub s: TcpStream,
    digests: bool,
    cid: u16,
    /// Bytes of host data per H2CData PDU (at most the target's MAXH2CDATA).
    pub h2c_piece: usize,
}

/// A command's completion and the data that came with it.
#[derive(Debug)]
pub struct Reply {
    pub cqe: [u8; 16],
    pub data: Vec<u8>,
}

impl Reply {
    /// (status code type, status code).
    pub fn status(&self) -> (u8, u8) {
        let f = u16::from_le_bytes([self.cqe[14], self.cqe[15]]);
        (((f >> 9) & 7) as u8, ((f >> 1) & 0xFF) as u8)
    }
    pub fn ok(&self) -> bool {
        self.status() == (0, 0)
    }
    pub fn dw0(&self) -> u32 {
        u32::from_le_bytes(self.cqe[0..4].try_into().expect("4 bytes"))
    }
}

fn bad(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

/// A submission queue entry with opcode `op` (the rest zero).
pub fn sqe(op: u8) -> Sqe {
    let mut s = Sqe([0; 64]);
    s.0[0] = op;
    s
}

/// Set dword `i` of `s`.
pub fn set_dw(s: &mut Sqe, i: usize, v: u32) {
    s.0[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}

/// A fabrics Connect of queue `qid` (controller `cntlid`, 0xFFFF for a new one) to `subnqn`
/// as host `hostnqn`, and its 1 KiB of data.
pub fn connect_cmd(qid: u16, cntlid: u16, subnqn: &str, hostnqn: &str) -> (Sqe, Vec<u8>) {
    let mut s = sqe(0x7F);
    s.0[4] = 1;
    s.0[42..44].copy_from_slice(&qid.to_le_bytes());
    s.0[44..46].copy_from_slice(&31u16.to_le_bytes());
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&[7u8; 16]);
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len().min(255)].copy_from_slice(&subnqn.as_bytes()[..subnqn.len().min(255)]);
    d[512..512 + hostnqn.len().min(255)].copy_from_slice(&hostnqn.as_bytes()[..hostnqn.len().min(255)]);
    (s, d)
}

impl Host {
    /// TCP connection and ICReq/ICResp, with header and data digests if `digests`.
    pub fn connect(addr: impl ToSocketAddrs, digests: bool) -> io::Result<Host> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut h = Host { s, digests, cid: 0, h2c_piece: 65536 };
        let mut ic = vec![0u8; 128];
        ic[..8].copy_from_slice(&CommonHeader { pdu_type: ICREQ, flags: 0, hlen: 128, pdo: 0, plen: 128 }.encode());
        ic[11] = if digests { 3 } else { 0 };
        h.s.write_all(&ic)?;
        let mut r = [0u8; 128];
        h.s.read_exact(&mut r)?;
        if r[0] != ICRESP {
            return Err(bad(format!("PDU type {:#x} instead of ICResp", r[0])));
        }
        if r[11] != ic[11] {
            return Err(bad("the target did not grant the digests asked for"));
        }
        let maxh2c = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes")) as usize;
        h.h2c_piece = h.h2c_piece.min(maxh2c.max(4096));
        Ok(h)
    }

    /// A controller's admin queue, connected and enabled: (host, controller id).
    pub fn admin(addr: impl ToSocketAddrs, subnqn: &str, digests: bool) -> io::Result<(Host, u16)> {
        let mut h = Host::connect(addr, digests)?;
        let (s, d) = connect_cmd(0, 0xFFFF, subnqn, "nqn.2014-08.org.nvmexpress:uuid:ssdlab-client");
        let r = h.cmd(s, &d, true)?;
        if !r.ok() {
            return Err(bad(format!("Connect refused: status {:?}", r.status())));
        }
        let cntlid = r.dw0() as u16;
        let mut p = sqe(0x7F);
        p.0[4] = 0; // Property Set CC: enable, 64-byte SQ and 16-byte CQ entries
        set_dw(&mut p, 11, 0x14);
        set_dw(&mut p, 12, 1 | 6 << 16 | 4 << 20);
        if !h.cmd(p, &[], false)?.ok() {
            return Err(bad("enabling the controller failed"));
        }
        Ok((h, cntlid))
    }

    fn pdu(&mut self, t: u8, hlen: u8, fields: &[u8], data: &[u8], flags: u8) -> io::Result<()> {
        let hd = if self.digests { 4 } else { 0 };
        let dd = if self.digests && !data.is_empty() { 4 } else { 0 };
        let pdo = if data.is_empty() { 0 } else { hlen as usize + hd };
        let plen = hlen as usize + hd + data.len() + dd;
        let f = flags | if self.digests { FLAG_HDGST } else { 0 } | if dd > 0 { FLAG_DDGST } else { 0 };
        let mut v = CommonHeader { pdu_type: t, flags: f, hlen, pdo: pdo as u8, plen: plen as u32 }.encode().to_vec();
        v.extend_from_slice(fields);
        v.resize(hlen as usize, 0);
        if self.digests {
            let c = crc32c(&v);
            v.extend_from_slice(&c.to_le_bytes());
        }
        v.extend_from_slice(data);
        if dd > 0 {
            v.extend_from_slice(&crc32c(data).to_le_bytes());
        }
        self.s.write_all(&v)
    }

    /// The next PDU: (header, header fields, data), digests checked.
    pub fn read_pdu(&mut self) -> io::Result<(CommonHeader, Vec<u8>, Vec<u8>)> {
        let mut ch = [0u8; 8];
        self.s.read_exact(&mut ch)?;
        let h = CommonHeader::parse(&ch);
        if (h.plen as usize) < 8 || (h.hlen as usize) < 8 || h.hlen as u32 > h.plen || h.plen > 64 << 20 {
            return Err(bad(format!("a PDU header with HLEN {} and PLEN {}", h.hlen, h.plen)));
        }
        let mut rest = vec![0u8; h.plen as usize - 8];
        self.s.read_exact(&mut rest)?;
        let hlen = h.hlen as usize - 8;
        let fields = rest[..hlen].to_vec();
        let mut data = vec![];
        if h.pdo > 0 {
            let dd = if h.flags & FLAG_DDGST != 0 { 4 } else { 0 };
            let from = (h.pdo as usize).checked_sub(8).filter(|&f| f + dd <= rest.len()).ok_or_else(|| bad("PDO outside the PDU"))?;
            data = rest[from..rest.len() - dd].to_vec();
            if dd > 0 && crc32c(&data).to_le_bytes() != rest[rest.len() - 4..] {
                return Err(bad("data digest mismatch"));
            }
        }
        if h.flags & FLAG_HDGST != 0 {
            let mut whole = ch.to_vec();
            whole.extend_from_slice(&fields);
            if rest.len() < hlen + 4 || crc32c(&whole).to_le_bytes() != rest[hlen..hlen + 4] {
                return Err(bad("header digest mismatch"));
            }
        }
        Ok((h, fields, data))
    }

    /// Submit `sqe` (its command id is set here) with host data `out`, in the capsule when
    /// `inline`, else after the target's R2T; gather data and the completion.
    pub fn cmd(&mut self, mut sqe: Sqe, out: &[u8], inline: bool) -> io::Result<Reply> {
        self.cid = self.cid.wrapping_add(1);
        sqe.0[2..4].copy_from_slice(&self.cid.to_le_bytes());
        let mut r = self.cmds(&[(sqe, out, inline)])?;
        Ok(r.pop().expect("one reply"))
    }

    /// Submit all of `batch` at once (each entry with its command id set by the caller, unique
    /// in the batch), then serve the target's R2Ts in whatever order they come: the completions,
    /// in the batch's order.
    pub fn cmds(&mut self, batch: &[(Sqe, &[u8], bool)]) -> io::Result<Vec<Reply>> {
        let cids: Vec<u16> = batch.iter().map(|(s, _, _)| s.cid()).collect();
        for &(mut sqe, out, inline) in batch {
            sqe.0[1] = 1 << 6;
            let len = if out.is_empty() { u32::from_le_bytes(sqe.0[32..36].try_into().expect("4 bytes")) } else { out.len() as u32 };
            sqe.0[32..36].copy_from_slice(&len.to_le_bytes());
            sqe.0[39] = if inline && !out.is_empty() { SGL_DATA_BLOCK_OFFSET } else { SGL_TRANSPORT_DATA_BLOCK };
            self.pdu(CAPSULE_CMD, 72, &sqe.0, if inline { out } else { &[] }, 0)?;
        }
        let mut data: Vec<Vec<u8>> = vec![vec![]; batch.len()];
        let mut done: Vec<Option<[u8; 16]>> = vec![None; batch.len()];
        let mut left = batch.len();
        let which = |cid: u16| cids.iter().position(|&c| c == cid).ok_or_else(|| bad(format!("a PDU for command id {cid}, not submitted")));
        while left > 0 {
            let (h, f, d) = self.read_pdu()?;
            match h.pdu_type {
                R2T => {
                    let r = DataHeader::parse(&f);
                    let i = which(r.cccid)?;
                    let out = batch[i].1;
                    let end = (r.offset as usize).checked_add(r.length as usize).filter(|&e| e <= out.len());
                    let Some(end) = end else { return Err(bad("an R2T outside the command's data")) };
                    let mut at = r.offset as usize;
                    while at < end {
                        let n = (end - at).min(self.h2c_piece);
                        let mut fl = [0u8; 16];
                        fl[0..2].copy_from_slice(&r.cccid.to_le_bytes());
                        fl[2..4].copy_from_slice(&r.ttag.to_le_bytes());
                        fl[4..8].copy_from_slice(&(at as u32).to_le_bytes());
                        fl[8..12].copy_from_slice(&(n as u32).to_le_bytes());
                        let last = if at + n == end { FLAG_LAST_PDU } else { 0 };
                        self.pdu(H2C_DATA, 24, &fl, &out[at..at + n], last)?;
                        at += n;
                    }
                }
                C2H_DATA => {
                    let dh = DataHeader::parse(&f);
                    let i = which(dh.cccid)?;
                    if dh.offset as usize != data[i].len() {
                        return Err(bad("C2HData out of order"));
                    }
                    data[i].extend_from_slice(&d);
                }
                CAPSULE_RESP => {
                    let cqe: [u8; 16] = f[..16].try_into().map_err(|_| bad("short response"))?;
                    let i = which(u16::from_le_bytes([cqe[12], cqe[13]]))?;
                    if done[i].replace(cqe).is_some() {
                        return Err(bad("two completions for one command"));
                    }
                    left -= 1;
                }
                C2H_TERM => return Err(bad("the target ended the connection (C2HTermReq)")),
                t => return Err(bad(format!("unexpected PDU type {t:#x}"))),
            }
        }
        Ok(done.into_iter().zip(data).map(|(c, data)| Reply { cqe: c.expect("all done"), data }).collect())
    }

    /// Get Log Page `lid` (NSID all), `len` bytes from byte `offset`.
    pub fn get_log(&mut self, lid: u8, len: u32, offset: u64) -> io::Result<Reply> {
        let mut lp = sqe(0x02);
        set_dw(&mut lp, 1, 0xFFFF_FFFF);
        set_dw(&mut lp, 10, lid as u32 | ((len / 4 - 1) & 0xFFFF) << 16);
        set_dw(&mut lp, 11, (len / 4 - 1) >> 16);
        set_dw(&mut lp, 12, offset as u32);
        set_dw(&mut lp, 13, (offset >> 32) as u32);
        set_dw(&mut lp, 8, len);
        self.cmd(lp, &[], false)
    }
}

/// The live metrics of the target at `addr` (HOST:PORT), from its vendor log page
/// ([`crate::ctrl::METRICS_LOG`]): metrics.json's text.
pub fn fetch_metrics(addr: &str, subnqn: &str) -> io::Result<String> {
    let (mut h, _) = Host::admin(addr, subnqn, false)?;
    let first = h.get_log(crate::ctrl::METRICS_LOG, 4096, 0)?;
    if !first.ok() || first.data.len() < 8 {
        return Err(bad(format!("the metrics log page was refused: status {:?}", first.status())));
    }
    let total = u64::from_le_bytes(first.data[..8].try_into().expect("8 bytes")) as usize + 8;
    let mut all = first.data;
    while all.len() < total {
        let n = (total - all.len()).min(crate::ctrl::MAX_TRANSFER as usize).div_ceil(4) * 4;
        let r = h.get_log(crate::ctrl::METRICS_LOG, n as u32, all.len() as u64)?;
        if !r.ok() {
            return Err(bad(format!("the metrics log page was refused: status {:?}", r.status())));
        }
        all.extend_from_slice(&r.data);
    }
    all.truncate(total);
    String::from_utf8(all[8..].to_vec()).map_err(|_| bad("the metrics are not UTF-8"))
}
