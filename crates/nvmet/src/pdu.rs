//! NVMe/TCP PDUs (NVMe over TCP transport specification 1.0, section 3.6): the common header,
//! the connection set-up PDUs (ICReq/ICResp), command capsules and responses, data transfer
//! (H2CData, C2HData, R2T) and termination requests; header and data digests are CRC32C.
//!
//! Parsing is split from I/O so the parser can be fuzzed on bytes: [`CommonHeader::parse`]
//! checks a header's lengths against the PDU type and the limits of the connection before any
//! byte of the rest is read, so nothing is allocated from a length the peer declared beyond
//! what the connection allows.

/// PDU types.
pub const ICREQ: u8 = 0x00;
pub const ICRESP: u8 = 0x01;
pub const H2C_TERM: u8 = 0x02;
pub const C2H_TERM: u8 = 0x03;
pub const CAPSULE_CMD: u8 = 0x04;
pub const CAPSULE_RESP: u8 = 0x05;
pub const H2C_DATA: u8 = 0x06;
pub const C2H_DATA: u8 = 0x07;
pub const R2T: u8 = 0x09;

/// Common header flags.
pub const FLAG_HDGST: u8 = 0x01;
pub const FLAG_DDGST: u8 = 0x02;
/// H2CData / C2HData: the last PDU of the command's data.
pub const FLAG_LAST_PDU: u8 = 0x04;
/// C2HData: the command succeeded and no response capsule follows (not used by ssdlab: it always
/// sends the response capsule).
pub const FLAG_SUCCESS: u8 = 0x08;

/// Header lengths (HLEN) per PDU type.
pub const ICREQ_HLEN: u8 = 128;
pub const CMD_HLEN: u8 = 72;
pub const RESP_HLEN: u8 = 24;
pub const DATA_HLEN: u8 = 24;
pub const R2T_HLEN: u8 = 24;
pub const TERM_HLEN: u8 = 24;

/// Bytes of a submission queue entry and a completion queue entry.
pub const SQE_BYTES: usize = 64;
pub const CQE_BYTES: usize = 16;

/// H2CTermReq / C2HTermReq fatal error status (FES).
pub const FES_INVALID_HEADER_FIELD: u16 = 0x01;
pub const FES_PDU_SEQUENCE_ERROR: u16 = 0x02;
pub const FES_HEADER_DIGEST_ERROR: u16 = 0x03;
pub const FES_DATA_OUT_OF_RANGE: u16 = 0x04;
pub const FES_DATA_DIGEST_ERROR: u16 = 0x05;
pub const FES_UNSUPPORTED_PARAMETER: u16 = 0x06;

/// CRC32C (Castagnoli), the digest NVMe/TCP uses for headers and data.
pub fn crc32c(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

/// A PDU the peer sent that the connection cannot go on from: what the termination request
/// says (FES, and for an invalid header field the offset of the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub fes: u16,
    pub field_offset: u32,
    pub why: String,
}

impl Fatal {
    pub fn new(fes: u16, field_offset: u32, why: impl Into<String>) -> Fatal {
        Fatal { fes, field_offset, why: why.into() }
    }
}

/// The 8-byte common header of every PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

/// What a connection accepts of its peer: digests negotiated and the largest PDUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub hdgst: bool,
    pub ddgst: bool,
    /// Largest in-capsule data of a command capsule (bytes).
    pub in_capsule: u32,
    /// Largest data of one H2CData PDU (MAXH2CDATA).
    pub max_h2c_data: u32,
}

/// Where a PDU's parts lie, from its common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of the header after the common header (HLEN - 8).
    pub rest_of_header: usize,
    /// A header digest follows the header.
    pub hdgst: bool,
    /// Padding between the header (and its digest) and the data.
    pub pad: usize,
    /// Data bytes.
    pub data: usize,
    /// A data digest follows the data.
    pub ddgst: bool,
}

impl Layout {
    /// Bytes after the common header: the rest of the PDU.
    pub fn remaining(&self) -> usize {
        self.rest_of_header + 4 * self.hdgst as usize + self.pad + self.data + 4 * self.ddgst as usize
    }
}

impl CommonHeader {
    pub fn parse(b: &[u8; 8]) -> CommonHeader {
        CommonHeader { pdu_type: b[0], flags: b[1], hlen: b[2], pdo: b[3], plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]) }
    }

    pub fn encode(&self) -> [u8; 8] {
        let p = self.plen.to_le_bytes();
        [self.pdu_type, self.flags, self.hlen, self.pdo, p[0], p[1], p[2], p[3]]
    }

    /// Check the header of a PDU a host sent against its type and the connection's limits
    /// (`None` before ICReq: only an ICReq is allowed) and say where its parts lie.
    pub fn layout(&self, lim: Option<&Limits>) -> Result<Layout, Fatal> {
        let bad = |off: u32, why: &str| Err(Fatal::new(FES_INVALID_HEADER_FIELD, off, why));
        let Some(lim) = lim else {
            if self.pdu_type != ICREQ {
                return Err(Fatal::new(FES_PDU_SEQUENCE_ERROR, 0, format!("PDU type {:#04x} before ICReq", self.pdu_type)));
            }
            if self.hlen != ICREQ_HLEN {
                return bad(2, "ICReq HLEN is not 128");
            }
            if self.plen != ICREQ_HLEN as u32 {
                return bad(4, "ICReq PLEN is not 128");
            }
            return Ok(Layout { rest_of_header: ICREQ_HLEN as usize - 8, hdgst: false, pad: 0, data: 0, ddgst: false });
        };
        let (hlen, max_data) = match self.pdu_type {
            CAPSULE_CMD => (CMD_HLEN, lim.in_capsule),
            H2C_DATA => (DATA_HLEN, lim.max_h2c_data),
            H2C_TERM => (TERM_HLEN, 152 - TERM_HLEN as u32),
            ICREQ => return Err(Fatal::new(FES_PDU_SEQUENCE_ERROR, 0, "a second ICReq")),
            t => return bad(0, &format!("PDU type {t:#04x} is not one a host sends")),
        };
        if self.hlen != hlen {
            return bad(2, &format!("HLEN {} for PDU type {:#04x} (must be {hlen})", self.hlen, self.pdu_type));
        }
        let term = self.pdu_type == H2C_TERM;
        // Digests on every PDU but ICReq and the termination requests, as negotiated; the
        // flags must say so.
        let hdgst = lim.hdgst && !term;
        if !term && ((self.flags & FLAG_HDGST != 0) != lim.hdgst) {
            return bad(1, "HDGSTF does not match the negotiated header digest");
        }
        let head = hlen as u32 + 4 * hdgst as u32;
        let plen = self.plen;
        if plen < head {
            return bad(4, &format!("PLEN {plen} shorter than the header"));
        }
        if plen == head {
            if self.pdo != 0 {
                return bad(3, "PDO set on a PDU without data");
            }
            if self.flags & FLAG_DDGST != 0 {
                return bad(1, "DDGSTF on a PDU without data");
            }
            return Ok(Layout { rest_of_header: hlen as usize - 8, hdgst, pad: 0, data: 0, ddgst: false });
        }
        let ddgst = !term && lim.ddgst;
        if !term && ((self.flags & FLAG_DDGST != 0) != lim.ddgst) {
            return bad(1, "DDGSTF does not match the negotiated data digest");
        }
        let pdo = if term { head } else { self.pdo as u32 };
        if pdo < head || pdo >= plen {
            return bad(3, &format!("PDO {pdo} outside the PDU (header {head}, PLEN {plen})"));
        }
        let tail = 4 * ddgst as u32;
        if plen - pdo <= tail {
            return bad(4, "PLEN leaves no data after PDO");
        }
        let data = plen - pdo - tail;
        if data > max_data {
            return Err(Fatal::new(FES_DATA_OUT_OF_RANGE, 4, format!("{data} data bytes in one PDU (at most {max_data})")));
        }
        Ok(Layout { rest_of_header: hlen as usize - 8, hdgst, pad: (pdo - head) as usize, data: data as usize, ddgst })
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// ICReq fields (bytes 8.. of the PDU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    pub pfv: u16,
    pub hpda: u8,
    pub hdgst: bool,
    pub ddgst: bool,
    pub maxr2t: u32,
}

impl IcReq {
    /// `rest`: the 120 bytes after the common header.
    pub fn parse(rest: &[u8]) -> Result<IcReq, Fatal> {
        let pfv = u16_at(rest, 0);
        if pfv != 0 {
            return Err(Fatal::new(FES_UNSUPPORTED_PARAMETER, 8, format!("PDU format version {pfv} (ssdlab speaks 0)")));
        }
        let hpda = rest[2];
        if hpda > 31 {
            return Err(Fatal::new(FES_INVALID_HEADER_FIELD, 10, format!("HPDA {hpda} (at most 31)")));
        }
        let d = rest[3];
        Ok(IcReq { pfv, hpda, hdgst: d & 1 != 0, ddgst: d & 2 != 0, maxr2t: u32_at(rest, 4) })
    }
}

/// ICResp: PDU format version 0, CPDA 0 (data anywhere), the digests as the host asked,
/// MAXH2CDATA.
pub fn icresp(hdgst: bool, ddgst: bool, max_h2c_data: u32) -> Vec<u8> {
    let mut v = vec![0u8; ICREQ_HLEN as usize];
    v[..8].copy_from_slice(&CommonHeader { pdu_type: ICRESP, flags: 0, hlen: ICREQ_HLEN, pdo: 0, plen: ICREQ_HLEN as u32 }.encode());
    v[11] = hdgst as u8 | (ddgst as u8) << 1;
    v[12..16].copy_from_slice(&max_h2c_data.to_le_bytes());
    v
}

/// H2CData / C2HData / R2T fields after the common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    pub cccid: u16,
    pub ttag: u16,
    /// DATAO (R2TO for an R2T).
    pub offset: u32,
    /// DATAL (R2TL).
    pub length: u32,
}

impl DataHeader {
    pub fn parse(rest: &[u8]) -> DataHeader {
        DataHeader { cccid: u16_at(rest, 0), ttag: u16_at(rest, 2), offset: u32_at(rest, 4), length: u32_at(rest, 8) }
    }
}

/// Builds the PDUs the controller sends, with the digests the connection negotiated.
#[derive(Debug, Clone, Copy, Default)]
pub struct Encoder {
    pub hdgst: bool,
    pub ddgst: bool,
}

impl Encoder {
    fn header(&self, out: &mut Vec<u8>, pdu_type: u8, mut flags: u8, hlen: u8, data: usize, fields: &[u8]) {
        let start = out.len();
        let hd = 4 * self.hdgst as usize;
        let dd = if data > 0 && self.ddgst { 4 } else { 0 };
        if self.hdgst {
            flags |= FLAG_HDGST;
        }
        if dd > 0 {
            flags |= FLAG_DDGST;
        }
        let pdo = if data > 0 { hlen as usize + hd } else { 0 };
        let plen = hlen as usize + hd + data + dd;
        out.extend_from_slice(&CommonHeader { pdu_type, flags, hlen, pdo: pdo as u8, plen: plen as u32 }.encode());
        out.extend_from_slice(fields);
        out.resize(start + hlen as usize, 0);
        if self.hdgst {
            let c = crc32c(&out[start..start + hlen as usize]);
            out.extend_from_slice(&c.to_le_bytes());
        }
    }

    /// A response capsule carrying `cqe`.
    pub fn resp(&self, out: &mut Vec<u8>, cqe: &[u8; CQE_BYTES]) {
        self.header(out, CAPSULE_RESP, 0, RESP_HLEN, 0, cqe);
    }

    /// C2HData PDUs carrying `data` (at offset `offset` of the command's data) in pieces of at
    /// most `max` bytes; the last one is marked.
    pub fn c2h_data(&self, out: &mut Vec<u8>, cid: u16, data: &[u8], max: usize, last: bool) {
        let mut off = 0usize;
        loop {
            let n = (data.len() - off).min(max.max(1));
            let end = off + n == data.len();
            let mut f = [0u8; 16];
            f[0..2].copy_from_slice(&cid.to_le_bytes());
            f[4..8].copy_from_slice(&(off as u32).to_le_bytes());
            f[8..12].copy_from_slice(&(n as u32).to_le_bytes());
            self.header(out, C2H_DATA, if end && last { FLAG_LAST_PDU } else { 0 }, DATA_HLEN, n, &f);
            let piece = &data[off..off + n];
            out.extend_from_slice(piece);
            if self.ddgst {
                out.extend_from_slice(&crc32c(piece).to_le_bytes());
            }
            off += n;
            if end {
                return;
            }
        }
    }

    /// An R2T: the host may send `length` bytes of command `cid`'s data from `offset`, tagged
    /// `ttag`.
    pub fn r2t(&self, out: &mut Vec<u8>, cid: u16, ttag: u16, offset: u32, length: u32) {
        let mut f = [0u8; 16];
        f[0..2].copy_from_slice(&cid.to_le_bytes());
        f[2..4].copy_from_slice(&ttag.to_le_bytes());
        f[4..8].copy_from_slice(&offset.to_le_bytes());
        f[8..12].copy_from_slice(&length.to_le_bytes());
        self.header(out, R2T, 0, R2T_HLEN, 0, &f);
    }

    /// A C2HTermReq: the connection ends after it. It carries the header of the PDU in error
    /// (at most 128 bytes of it).
    pub fn c2h_term(&self, out: &mut Vec<u8>, fatal: &Fatal, bad_header: &[u8]) {
        let h = &bad_header[..bad_header.len().min(128)];
        let mut f = [0u8; 16];
        f[0..2].copy_from_slice(&fatal.fes.to_le_bytes());
        f[2..6].copy_from_slice(&fatal.field_offset.to_le_bytes());
        let plen = TERM_HLEN as usize + h.len();
        out.extend_from_slice(&CommonHeader { pdu_type: C2H_TERM, flags: 0, hlen: TERM_HLEN, pdo: 0, plen: plen as u32 }.encode());
        out.extend_from_slice(&f);
        out.extend_from_slice(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits { hdgst: false, ddgst: false, in_capsule: 8192, max_h2c_data: 131072 };

    #[test]
    fn crc32c_matches_the_specs_check_value() {
        // The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn headers_are_checked_against_type_and_limits() {
        let h = |t, f, hlen, pdo, plen| CommonHeader { pdu_type: t, flags: f, hlen, pdo, plen };
        assert!(h(ICREQ, 0, 128, 0, 128).layout(None).is_ok());
        assert_eq!(h(CAPSULE_CMD, 0, 72, 0, 72).layout(None).unwrap_err().fes, FES_PDU_SEQUENCE_ERROR);
        let l = h(CAPSULE_CMD, 0, 72, 72, 72 + 4096).layout(Some(&LIM)).unwrap();
        assert_eq!((l.data, l.pad, l.remaining()), (4096, 0, 64 + 4096));
        // More in-capsule data than offered: refused before any of it is read.
        assert_eq!(h(CAPSULE_CMD, 0, 72, 72, 72 + 8193).layout(Some(&LIM)).unwrap_err().fes, FES_DATA_OUT_OF_RANGE);
        assert_eq!(h(CAPSULE_CMD, 0, 72, 72, u32::MAX).layout(Some(&LIM)).unwrap_err().fes, FES_DATA_OUT_OF_RANGE);
        assert!(h(CAPSULE_CMD, 0, 70, 0, 70).layout(Some(&LIM)).is_err());
        assert!(h(CAPSULE_CMD, 0, 72, 10, 80).layout(Some(&LIM)).is_err());
        assert!(h(C2H_DATA, 0, 24, 0, 24).layout(Some(&LIM)).is_err());
        // Digests must be flagged as negotiated.
        let dg = Limits { hdgst: true, ddgst: true, ..LIM };
        assert!(h(CAPSULE_CMD, 0, 72, 0, 76).layout(Some(&dg)).is_err());
        let l = h(CAPSULE_CMD, 3, 72, 76, 76 + 512 + 4).layout(Some(&dg)).unwrap();
        assert_eq!((l.hdgst, l.data, l.ddgst), (true, 512, true));
    }

    #[test]
    fn encoded_pdus_parse_back() {
        let e = Encoder { hdgst: true, ddgst: true };
        let mut v = vec![];
        e.c2h_data(&mut v, 7, &[1u8; 300], 128, true);
        // Three PDUs of 128, 128 and 44 bytes, each with its digests; the last flagged.
        let mut at = 0;
        let mut seen = vec![];
        while at < v.len() {
            let h = CommonHeader::parse(v[at..at + 8].try_into().unwrap());
            assert_eq!(h.pdu_type, C2H_DATA);
            let hd = crc32c(&v[at..at + 24]);
            assert_eq!(u32_at(&v, at + 24), hd);
            let d = DataHeader::parse(&v[at + 8..at + 24]);
            let data = &v[at + h.pdo as usize..at + h.pdo as usize + d.length as usize];
            assert_eq!(u32_at(&v, at + h.pdo as usize + d.length as usize), crc32c(data));
            seen.push((d.offset, d.length, h.flags & FLAG_LAST_PDU != 0));
            at += h.plen as usize;
        }
        assert_eq!(seen, vec![(0, 128, false), (128, 128, false), (256, 44, true)]);
    }
}
