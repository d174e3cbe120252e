//! A minimal NBD client: enough to fetch the metrics export (`ssdlab stats`) and to drive
//! the server from tests. Real clients (qemu-io, nbdinfo, nbdcopy, fio) test the server itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::proto::*;

fn io_err(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// How long to wait for the server's greeting.
pub const GREETING_TIMEOUT: Duration = Duration::from_secs(3);

/// A byte stream to the server: plain TCP or TLS.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A connected session in the transmission phase (simple replies).
pub struct Client {
    s: Box<dyn Stream>,
    pub size: u64,
    pub flags: u16,
    cookie: u64,
}

impl Client {
    /// Connect to `addr` and open `export` with NBD_OPT_GO; with `tls_ca` (a PEM file of
    /// the CA that signed the server's certificate) the session is upgraded with STARTTLS.
    pub fn connect(addr: &str, export: &str, tls_ca: Option<&std::path::Path>) -> std::io::Result<Client> {
        let mut tcp = TcpStream::connect(addr)?;
        // An NBD server greets at once; a server of another protocol usually waits for the
        // client to speak first, so waiting long would only delay the error.
        tcp.set_read_timeout(Some(GREETING_TIMEOUT))?;
        let mut hello = [0u8; 18];
        let mut got = 0;
        while got < hello.len() {
            match tcp.read(&mut hello[got..]) {
                Ok(0) => {
                    return Err(io_err(format!(
                        "{addr} closed the connection after {got} bytes without an NBD greeting: not an NBD server, or every slot is taken"
                    )))
                }
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(io_err(format!(
                        "{addr} sent no NBD greeting within {} s ({got} bytes): not an NBD server (is it `ssdlab serve`?)",
                        GREETING_TIMEOUT.as_secs()
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        if u64::from_be_bytes(hello[0..8].try_into().unwrap()) != NBDMAGIC
            || u64::from_be_bytes(hello[8..16].try_into().unwrap()) != IHAVEOPT
        {
            return Err(io_err(format!("{addr} is not a newstyle NBD server (it sent {:?})", String::from_utf8_lossy(&hello))));
        }
        tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
        tcp.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())?;
        let mut s: Box<dyn Stream> = match tls_ca {
            None => Box::new(tcp),
            Some(ca) => Box::new(start_tls(tcp, addr, ca)?),
        };
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
        if u32::from_be_bytes(h[0..4].try_into().unwrap()) != SIMPLE_REPLY_MAGIC
            || u64::from_be_bytes(h[8..16].try_into().unwrap()) != self.cookie
        {
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

/// Send NBD_OPT_STARTTLS and run the TLS handshake, checking the server's certificate
/// against the CA in `ca` and the host of `addr`.
fn start_tls(
    mut tcp: TcpStream,
    addr: &str,
    ca: &std::path::Path,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&OPT_STARTTLS.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    tcp.write_all(&opt)?;
    let mut h = [0u8; 20];
    tcp.read_exact(&mut h)?;
    let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut p = vec![0u8; len.min(1 << 16)];
    tcp.read_exact(&mut p)?;
    if kind != REP_ACK {
        return Err(io_err(format!("{addr} refused TLS: {}", String::from_utf8_lossy(&p))));
    }
    let mut roots = rustls::RootCertStore::empty();
    let mut r = std::io::BufReader::new(std::fs::File::open(ca).map_err(|e| io_err(format!("{}: {e}", ca.display())))?);
    for cert in rustls_pemfile::certs(&mut r) {
        roots.add(cert?).map_err(|e| io_err(format!("{}: {e}", ca.display())))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io_err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = addr.rsplit_once(':').map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']')).unwrap_or(addr);
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| io_err(format!("{host}: {e}")))?;
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).map_err(|e| io_err(e.to_string()))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// The server's live metrics.json (the `ssdlab-metrics` export), as text.
pub fn fetch_metrics(addr: &str, tls_ca: Option<&std::path::Path>) -> std::io::Result<String> {
    let mut c = Client::connect(addr, crate::server::METRICS_EXPORT, tls_ca)?;
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
