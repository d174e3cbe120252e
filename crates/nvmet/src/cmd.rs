//! Submission and completion queue entries (NVMe base specification 2.0, section 4.2 and 4.6)
//! and the status codes ssdlab's controller answers with.

use crate::pdu::{CQE_BYTES, SQE_BYTES};

/// A submission queue entry, read field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_BYTES]);

impl Sqe {
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// PSDT (bits 7:6 of byte 1): 0 PRPs, 1 or 2 SGLs. Fabrics commands use SGLs.
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    pub fn fuse(&self) -> u8 {
        self.0[1] & 3
    }
    pub fn cid(&self) -> u16 {
        u16::from_le_bytes([self.0[2], self.0[3]])
    }
    pub fn nsid(&self) -> u32 {
        self.dw(1)
    }
    /// Fabrics commands: FCTYPE (byte 4).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// Dword `i` of the entry (CDW10 is dword 10).
    pub fn dw(&self, i: usize) -> u32 {
        u32::from_le_bytes(self.0[4 * i..4 * i + 4].try_into().expect("4 bytes"))
    }
    pub fn qw(&self, byte: usize) -> u64 {
        u64::from_le_bytes(self.0[byte..byte + 8].try_into().expect("8 bytes"))
    }
    pub fn u16_at(&self, byte: usize) -> u16 {
        u16::from_le_bytes([self.0[byte], self.0[byte + 1]])
    }
    /// The data pointer as an SGL descriptor: (address, length, SGL identifier).
    pub fn sgl(&self) -> (u64, u32, u8) {
        (self.qw(24), self.dw(8), self.0[39])
    }
}

/// SGL identifiers (descriptor type << 4 | subtype) NVMe/TCP hosts use.
pub const SGL_DATA_BLOCK_OFFSET: u8 = 0x01;
pub const SGL_TRANSPORT_DATA_BLOCK: u8 = 0x5A;

/// Status: status code type (SCT) and status code (SC); `dnr`: do not retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
}

impl Status {
    pub const SUCCESS: Status = Status { sct: 0, sc: 0, dnr: false };
    const fn generic(sc: u8) -> Status {
        Status { sct: 0, sc, dnr: true }
    }
    const fn specific(sc: u8) -> Status {
        Status { sct: 1, sc, dnr: true }
    }
    pub const INVALID_OPCODE: Status = Status::generic(0x01);
    pub const INVALID_FIELD: Status = Status::generic(0x02);
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    pub const INTERNAL_ERROR: Status = Status { sct: 0, sc: 0x06, dnr: false };
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0C);
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = Status::generic(0x11);
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::generic(0x0F);
    pub const INVALID_CONTROLLER_ID: Status = Status::generic(0x1F);
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::generic(0x81);
    pub const INVALID_QUEUE_ID: Status = Status::specific(0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::specific(0x02);
    pub const ASYNC_EVENT_LIMIT: Status = Status::specific(0x05);
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::specific(0x0E);
    /// Fabrics: Connect Invalid Parameters.
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82);
    /// Fabrics: Connect Invalid Host.
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84);
    /// Fabrics: Connect Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81);
    /// Invalid Placement Handle List (a Reclaim Unit Handle Update names no handle).
    pub const INVALID_PLACEMENT_HANDLE: Status = Status::generic(0x2A);

    /// The 16-bit status field of a completion (phase bit 0: fabrics have no phase).
    pub fn field(&self) -> u16 {
        ((self.dnr as u16) << 15) | ((self.sct as u16 & 7) << 9) | ((self.sc as u16) << 1)
    }
}

/// A completion queue entry.
pub fn cqe(dw0: u32, dw1: u32, sqhd: u16, sqid: u16, cid: u16, status: Status) -> [u8; CQE_BYTES] {
    let mut c = [0u8; CQE_BYTES];
    c[0..4].copy_from_slice(&dw0.to_le_bytes());
    c[4..8].copy_from_slice(&dw1.to_le_bytes());
    c[8..10].copy_from_slice(&sqhd.to_le_bytes());
    c[10..12].copy_from_slice(&sqid.to_le_bytes());
    c[12..14].copy_from_slice(&cid.to_le_bytes());
    c[14..16].copy_from_slice(&status.field().to_le_bytes());
    c
}

/// Admin command opcodes.
pub mod admin {
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const FABRICS: u8 = 0x7F;
}

/// Fabrics command types (FCTYPE).
pub mod fabrics {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const DISCONNECT: u8 = 0x08;
}

/// NVM command set opcodes.
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const IO_MGMT_RECV: u8 = 0x12;
    pub const IO_MGMT_SEND: u8 = 0x1D;
    pub const ZONE_MGMT_SEND: u8 = 0x79;
    pub const ZONE_MGMT_RECV: u8 = 0x7A;
    pub const ZONE_APPEND: u8 = 0x7D;
}

/// Whether a command moves data from the host to the controller (opcode bits 1:0 = 01b, the
/// specification's data transfer direction), or is a fabrics command carrying data (Connect).
pub fn host_to_controller(sqe: &Sqe) -> bool {
    if sqe.opcode() == admin::FABRICS {
        return sqe.fctype() & 3 == 1;
    }
    sqe.opcode() & 3 == 1 || sqe.opcode() & 3 == 3
}

/// Whether data goes to the host (opcode bits 1:0 = 10b).
pub fn controller_to_host(sqe: &Sqe) -> bool {
    if sqe.opcode() == admin::FABRICS {
        return sqe.fctype() & 3 == 2;
    }
    sqe.opcode() & 3 == 2 || sqe.opcode() & 3 == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_field_layout() {
        // Invalid field in command, do not retry: SC 02h, SCT 0, DNR.
        assert_eq!(Status::INVALID_FIELD.field(), 0x8004);
        assert_eq!(Status::SUCCESS.field(), 0);
        // LBA out of range.
        assert_eq!(Status::LBA_OUT_OF_RANGE.field(), 0x8100);
        let c = cqe(1, 0, 3, 1, 9, Status::INVALID_QUEUE_ID);
        assert_eq!(u16::from_le_bytes([c[12], c[13]]), 9);
        assert_eq!(u16::from_le_bytes([c[14], c[15]]) >> 9 & 7, 1);
    }

    #[test]
    fn data_direction_follows_the_opcode() {
        let mut s = Sqe([0; 64]);
        s.0[0] = io::WRITE;
        assert!(host_to_controller(&s) && !controller_to_host(&s));
        s.0[0] = io::READ;
        assert!(!host_to_controller(&s) && controller_to_host(&s));
        s.0[0] = admin::FABRICS;
        s.0[4] = fabrics::CONNECT;
        assert!(host_to_controller(&s));
        s.0[4] = fabrics::PROPERTY_GET;
        assert!(!host_to_controller(&s) && !controller_to_host(&s));
    }
}
