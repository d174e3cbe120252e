//! NBD protocol constants and the parsing of what clients send (the newstyle fixed
//! handshake, options, transmission requests). Parsing never panics: every function here
//! takes untrusted bytes and returns a value or a [`ProtoError`]; they are property-tested.
//!
//! Written from the protocol description in the NBD project's doc/proto.md.

use std::fmt;

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const REP_ERR_POLICY: u32 = 0x8000_0002;
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
pub const REP_ERR_TLS_REQD: u32 = 0x8000_0005;
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
pub const REP_ERR_SHUTDOWN: u32 = 0x8000_0007;
pub const REP_ERR_TOO_BIG: u32 = 0x8000_0009;

// NBD_INFO types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands and their flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply types and flags.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = 0x8001;

// base:allocation flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

// Errors (the protocol's fixed values).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Longest option payload accepted during the handshake (names and queries are strings of
/// at most 4096 bytes; a few of them fit).
pub const MAX_OPTION_BYTES: u32 = 64 * 1024;
/// The one metadata context served, and its id.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const BASE_ALLOCATION_ID: u32 = 1;

/// What is wrong with bytes a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtoError> {
    Err(ProtoError(msg.into()))
}

/// A cursor over untrusted bytes: every read is bounds-checked.
pub struct Bytes<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Bytes { b, pos: 0 }
    }
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ProtoError> {
        if self.b.len() - self.pos < n {
            return err(format!("{what}: {n} bytes needed, {} left", self.b.len() - self.pos));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn u16(&mut self, what: &str) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    /// A length-prefixed (32-bit) UTF-8 string of at most 4096 bytes.
    pub fn string(&mut self, what: &str) -> Result<String, ProtoError> {
        let n = self.u32(what)? as usize;
        if n > 4096 {
            return err(format!("{what}: {n} bytes, strings are at most 4096"));
        }
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| ProtoError(format!("{what}: not UTF-8")))
    }
    pub fn rest(&self) -> usize {
        self.b.len() - self.pos
    }
    pub fn end(&self, what: &str) -> Result<(), ProtoError> {
        if self.rest() != 0 {
            return err(format!("{what}: {} unexpected trailing bytes", self.rest()));
        }
        Ok(())
    }
}

/// The header of an option the client sends during the handshake (after the magic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

/// Parse the 16 bytes of an option header: magic, option, length.
pub fn parse_option_header(b: &[u8; 16]) -> Result<OptionHeader, ProtoError> {
    let mut c = Bytes::new(b);
    let magic = c.u64("option magic")?;
    if magic != IHAVEOPT {
        return err(format!("option magic {magic:#018x} is not IHAVEOPT"));
    }
    Ok(OptionHeader { option: c.u32("option")?, len: c.u32("option length")? })
}

/// Data of NBD_OPT_INFO / NBD_OPT_GO: the export name and the information types requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoRequest {
    pub name: String,
    pub infos: Vec<u16>,
}

pub fn parse_go(data: &[u8]) -> Result<GoRequest, ProtoError> {
    let mut c = Bytes::new(data);
    let name = c.string("export name")?;
    let n = c.u16("number of information requests")? as usize;
    let mut infos = Vec::with_capacity(n.min(16));
    for _ in 0..n {
        infos.push(c.u16("information request")?);
    }
    c.end("NBD_OPT_GO")?;
    Ok(GoRequest { name, infos })
}

/// Data of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: export name and queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest {
    pub name: String,
    pub queries: Vec<String>,
}

pub fn parse_meta(data: &[u8]) -> Result<MetaRequest, ProtoError> {
    let mut c = Bytes::new(data);
    let name = c.string("export name")?;
    let n = c.u32("number of queries")? as usize;
    if n > 256 {
        return err(format!("{n} metadata queries, at most 256 accepted"));
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(c.string("query")?);
    }
    c.end("meta context option")?;
    Ok(MetaRequest { name, queries })
}

/// A transmission request (header; a write's payload follows it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

pub const REQUEST_BYTES: usize = 28;

pub fn parse_request(b: &[u8; REQUEST_BYTES]) -> Result<Request, ProtoError> {
    let mut c = Bytes::new(b);
    let magic = c.u32("request magic")?;
    if magic != REQUEST_MAGIC {
        return err(format!("request magic {magic:#010x} is not NBD_REQUEST_MAGIC"));
    }
    Ok(Request {
        flags: c.u16("command flags")?,
        kind: c.u16("command")?,
        cookie: c.u64("cookie")?,
        offset: c.u64("offset")?,
        len: c.u32("length")?,
    })
}

/// Option reply header + payload.
pub fn option_reply(option: u32, kind: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + payload.len());
    v.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&kind.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Simple reply header (data, if any, follows).
pub fn simple_reply(out: &mut Vec<u8>, error: u32, cookie: u64) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
}

/// Structured reply chunk header (payload of `len` bytes follows).
pub fn chunk_header(out: &mut Vec<u8>, flags: u16, kind: u16, cookie: u64, len: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// A structured error chunk with a message (final).
pub fn error_chunk(out: &mut Vec<u8>, cookie: u64, error: u32, msg: &str) {
    let msg = &msg.as_bytes()[..msg.len().min(4096)];
    chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie, 6 + msg.len() as u32);
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_go(&data);
            let _ = parse_meta(&data);
            if data.len() >= 16 {
                let _ = parse_option_header(data[..16].try_into().unwrap());
            }
            if data.len() >= REQUEST_BYTES {
                let _ = parse_request(data[..REQUEST_BYTES].try_into().unwrap());
            }
        }

        #[test]
        fn go_round_trips(name in "[a-z0-9:-]{0,40}", infos in proptest::collection::vec(any::<u16>(), 0..8)) {
            let mut d = (name.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(name.as_bytes());
            d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
            for i in &infos { d.extend_from_slice(&i.to_be_bytes()); }
            prop_assert_eq!(parse_go(&d).unwrap(), GoRequest { name, infos });
        }
    }

    #[test]
    fn bad_inputs_are_errors_with_reasons() {
        assert!(parse_go(&[0, 0, 0, 9, b'a']).unwrap_err().0.contains("export name"));
        assert!(parse_go(&[0, 0, 0x20, 0]).unwrap_err().0.contains("4096"));
        let mut d = vec![0, 0, 0, 0, 0, 1, 0, 0, 9];
        assert!(parse_go(&d).unwrap_err().0.contains("trailing"));
        d.truncate(5);
        assert!(parse_go(&d).is_err());
        let mut r = [0u8; REQUEST_BYTES];
        r[..4].copy_from_slice(&0xdeadbeefu32.to_be_bytes());
        assert!(parse_request(&r).unwrap_err().0.contains("magic"));
    }
}
