//! A minimal NBD client: enough to fetch the metrics export (`ssdlab stats`) and to drive
//! the server from tests. Real clients (qemu-io, nbdinfo, nbdcopy, fio) test the server itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::proto::*;

fn io_err(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// A connected session in the transmission phase (simple replies).
pub struct Client {
    s: TcpStream,
    pub size: u64,
    pub flags: u16,
    cookie: u64,
}

impl Client {
    /// Connect to `addr` and open `export` with NBD_OPT_GO.
    pub fn connect(addr: &str, export: &str) -> std::io::Result<Client> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello)?;
        if u64::from_be_bytes(hello[0..8].try_into().unwrap()) != NBDMAGIC || u64::from_be_bytes(hello[8..16].try_into().unwrap()) != IHAVEOPT {
            return Err(io_err(format!("{addr} is not a newstyle NBD server")));
        }
        s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())?;
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        let mut opt = IHAVEOPT.to_be_bytes().to_vec();
        opt.extend_from_slice(&OPT_GO.to_be_bytes());
        opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
        opt.extend_from_slice(&data);
        s.write_all(&opt)?;
        let (mut size, mut flags) = (None, 0);
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h)?;
            let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
            if len > 1 << 20 {
                return Err(io_err(format!("option reply of {len} bytes")));
            }
            let mut p = vec![0u8; len];
            s.read_exact(&mut p)?;
            match kind {
                REP_ACK => break,
                REP_INFO if len >= 12 && u16::from_be_bytes([p[0], p[1]]) == INFO_EXPORT => {
                    size = Some(u64::from_be_bytes(p[2..10].try_into().unwrap()));
                    flags = u16::from_be_bytes([p[10], p[11]]);
                }
                REP_INFO => {}
                k if k & 0x8000_0000 != 0 => return Err(io_err(format!("export {export:?}: {}", String::from_utf8_lossy(&p)))),
                k => return Err(io_err(format!("unexpected option reply {k}"))),
            }
        }
        let size = size.ok_or_else(|| io_err("the server sent no export information".into()))?;
        Ok(Client { s, size, flags, cookie: 0 })
    }

    fn request(&mut self, kind: u16, flags: u16, offset: u64, len: u32, payload: &[u8]) -> std::io::Result<u32> {
        self.cookie += 1;
        let mut r = REQUEST_MAGIC.to_be_bytes().to_vec();
        r.extend_from_slice(&flags.to_be_bytes());
        r.extend_from_slice(&kind.to_be_bytes());
        r.extend_from_slice(&self.cookie.to_be_bytes());
        r.extend_from_slice(&offset.to_be_bytes());
        r.extend_from_slice(&len.to_be_bytes());
        r.extend_from_slice(payload);
        self.s.write_all(&r)?;
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h)?;
        if u32::from_be_bytes(h[0..4].try_into().unwrap()) != SIMPLE_REPLY_MAGIC || u64::from_be_bytes(h[8..16].try_into().unwrap()) != self.cookie {
            return Err(io_err("malformed reply".into()));
        }
        Ok(u32::from_be_bytes(h[4..8].try_into().unwrap()))
    }

    /// Read `len` bytes at `offset`; Err on an NBD error.
    pub fn read(&mut self, offset: u64, len: u32) -> std::io::Result<Vec<u8>> {
        let e = self.request(CMD_READ, 0, offset, len, &[])?;
        if e != 0 {
            return Err(io_err(format!("read failed with NBD error {e}")));
        }
        let mut v = vec![0u8; len as usize];
        self.s.read_exact(&mut v)?;
        Ok(v)
    }

    /// Write; returns the NBD error (0 = success).
    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> std::io::Result<u32> {
        self.request(CMD_WRITE, if fua { CMD_FLAG_FUA } else { 0 }, offset, data.len() as u32, data)
    }

    pub fn flush(&mut self) -> std::io::Result<u32> {
        self.request(CMD_FLUSH, 0, 0, 0, &[])
    }

    pub fn disconnect(mut self) -> std::io::Result<()> {
        let mut r = REQUEST_MAGIC.to_be_bytes().to_vec();
        r.extend_from_slice(&0u16.to_be_bytes());
        r.extend_from_slice(&CMD_DISC.to_be_bytes());
        r.extend_from_slice(&[0u8; 20]);
        self.s.write_all(&r)
    }
}

/// The server's live metrics.json (the `ssdlab-metrics` export), as text.
pub fn fetch_metrics(addr: &str) -> std::io::Result<String> {
    let mut c = Client::connect(addr, crate::server::METRICS_EXPORT)?;
    let size = c.size;
    let mut out = Vec::with_capacity(size as usize);
    let mut off = 0;
    while off < size {
        let n = (size - off).min(1 << 20) as u32;
        out.extend_from_slice(&c.read(off, n)?);
        off += n as u64;
    }
    let _ = c.disconnect();
    let text = String::from_utf8(out).map_err(|_| io_err("metrics are not UTF-8".into()))?;
    Ok(text.trim_end().to_string())
}
