//! The UIO device's host interface, byte for byte: 64-byte commands (the document's Table 1),
//! 16-byte completions (Table 2), the BAR registers (Table 3) and the admin commands that create
//! and delete I/O queues. Where the document names a field but gives no width or bit position,
//! ssdlab takes NVMe's (the document models its interface on NVMe) and docs/case-studies/uio-kv.md
//! marks it "assumed".

/// Bytes of a submission queue entry (Table 1).
pub const SQE_BYTES: usize = 64;
/// Bytes of a completion queue entry (Table 2).
pub const CQE_BYTES: usize = 16;

/// Admin command opcodes (NVMe's values; assumed).
pub mod admin {
    pub const DELETE_SQ: u8 = 0x00;
    pub const CREATE_SQ: u8 = 0x01;
    pub const DELETE_CQ: u8 = 0x04;
    pub const CREATE_CQ: u8 = 0x05;
}

/// I/O command opcodes (NVMe's key-value command set uses 0x01 store and 0x02 retrieve; assumed).
pub mod io {
    pub const PUT: u8 = 0x01;
    pub const GET: u8 = 0x02;
}

/// A submission queue entry (Table 1). Bytes 07:00 hold opcode | res1 | cid | nsid: opcode in
/// byte 0, res1 in byte 1, cid in bytes 3:2, nsid in bytes 7:4 (NVMe's CDW0/NSID; assumed).
/// adr1, len1, adr2, len2 are 8 bytes each (the document), cdw10..cdw15 4 bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Command {
    pub opcode: u8,
    pub res1: u8,
    pub cid: u16,
    /// Reserved by the document (namespaces are not implemented): must be 0.
    pub nsid: u32,
    pub adr1: u64,
    pub len1: u64,
    pub adr2: u64,
    pub len2: u64,
    pub cdw: [u32; 6],
}

impl Command {
    pub fn encode(&self) -> [u8; SQE_BYTES] {
        let mut b = [0u8; SQE_BYTES];
        b[0] = self.opcode;
        b[1] = self.res1;
        b[2..4].copy_from_slice(&self.cid.to_le_bytes());
        b[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        b[8..16].copy_from_slice(&self.adr1.to_le_bytes());
        b[16..24].copy_from_slice(&self.len1.to_le_bytes());
        b[24..32].copy_from_slice(&self.adr2.to_le_bytes());
        b[32..40].copy_from_slice(&self.len2.to_le_bytes());
        for (i, d) in self.cdw.iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8; SQE_BYTES]) -> Command {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Command {
            opcode: b[0],
            res1: b[1],
            cid: u16::from_le_bytes([b[2], b[3]]),
            nsid: u32_at(4),
            adr1: u64_at(8),
            len1: u64_at(16),
            adr2: u64_at(24),
            len2: u64_at(32),
            cdw: std::array::from_fn(|i| u32_at(40 + 4 * i)),
        }
    }

    pub fn cdw10(&self) -> u32 {
        self.cdw[0]
    }
    pub fn cdw11(&self) -> u32 {
        self.cdw[1]
    }

    /// Create I/O CQ `qid` of `entries` entries at host address `base`: adr2 = base, cdw10 =
    /// (entries - 1) << 16 | qid (NVMe's 0's-based size in the upper half; assumed).
    pub fn create_cq(cid: u16, qid: u16, entries: u16, base: u64) -> Command {
        assert!(entries >= 2, "a queue has at least 2 entries");
        Command { opcode: admin::CREATE_CQ, cid, adr2: base, cdw: [queue_dw10(qid, entries), 0, 0, 0, 0, 0], ..Default::default() }
    }

    /// Create I/O SQ `qid` feeding CQ `cqid`: adr2 = base, cdw10 as for a CQ, cdw11 = cqid << 16 |
    /// priority << 1 (NVMe's CQID and QPRIO fields; assumed).
    pub fn create_sq(cid: u16, qid: u16, entries: u16, base: u64, cqid: u16, priority: u8) -> Command {
        assert!(entries >= 2, "a queue has at least 2 entries");
        assert!(priority < 4, "priority is 2 bits");
        let dw11 = (cqid as u32) << 16 | (priority as u32) << 1;
        Command { opcode: admin::CREATE_SQ, cid, adr2: base, cdw: [queue_dw10(qid, entries), dw11, 0, 0, 0, 0], ..Default::default() }
    }

    pub fn delete_sq(cid: u16, qid: u16) -> Command {
        Command { opcode: admin::DELETE_SQ, cid, cdw: [qid as u32, 0, 0, 0, 0, 0], ..Default::default() }
    }
    pub fn delete_cq(cid: u16, qid: u16) -> Command {
        Command { opcode: admin::DELETE_CQ, cid, cdw: [qid as u32, 0, 0, 0, 0, 0], ..Default::default() }
    }

    /// put: the key at host address adr1 (len1 bytes), the value at adr2 (len2 bytes).
    pub fn put(cid: u16, key: (u64, u64), value: (u64, u64)) -> Command {
        Command { opcode: io::PUT, cid, adr1: key.0, len1: key.1, adr2: value.0, len2: value.1, ..Default::default() }
    }
    /// get: the key at adr1 (len1 bytes); the value goes to the buffer at adr2 of len2 bytes.
    pub fn get(cid: u16, key: (u64, u64), buf: (u64, u64)) -> Command {
        Command { opcode: io::GET, cid, adr1: key.0, len1: key.1, adr2: buf.0, len2: buf.1, ..Default::default() }
    }
}

fn queue_dw10(qid: u16, entries: u16) -> u32 {
    ((entries - 1) as u32) << 16 | qid as u32
}

/// Fields of a create-queue command's cdw10/cdw11.
pub fn queue_fields(c: &Command) -> (u16, u32, u16, u8) {
    let qid = (c.cdw10() & 0xffff) as u16;
    let entries = (c.cdw10() >> 16) + 1;
    let cqid = (c.cdw11() >> 16) as u16;
    let priority = ((c.cdw11() >> 1) & 3) as u8;
    (qid, entries, cqid, priority)
}

/// Completion status (Table 2's Status Field, 15 bits). NVMe's status code types and codes
/// where NVMe has the case; assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x000,
    InvalidOpcode = 0x001,
    InvalidField = 0x002,
    /// The command names a namespace (nsid must be 0: namespaces are reserved).
    InvalidNamespace = 0x00b,
    /// A host address range outside the shared memory.
    DataTransferError = 0x004,
    /// Create SQ for a CQ that does not exist (NVMe: Completion Queue Invalid). The document
    /// leaves the other order undefined; ssdlab refuses it.
    CompletionQueueInvalid = 0x100,
    InvalidQueueIdentifier = 0x101,
    InvalidQueueSize = 0x102,
    /// Delete CQ while an SQ still posts to it.
    InvalidQueueDeletion = 0x10c,
    /// get of a key that is not stored (NVMe KV: Key Does Not Exist).
    KeyNotFound = 0x187,
    /// The value does not fit the get buffer (NVMe KV: Invalid Buffer Size); cdw0 has its size.
    BufferTooSmall = 0x181,
    /// The queue may not do this (the per-queue permission check).
    AccessDenied = 0x286,
    /// The device could not store the record (full, worn out).
    InternalError = 0x006,
    /// A remote operation's peer device is unreachable (NVMe: Transient Transport Error).
    TransientTransport = 0x022,
}

impl Status {
    pub fn from_bits(b: u16) -> Option<Status> {
        use Status::*;
        [
            Success,
            InvalidOpcode,
            InvalidField,
            InvalidNamespace,
            DataTransferError,
            CompletionQueueInvalid,
            InvalidQueueIdentifier,
            InvalidQueueSize,
            InvalidQueueDeletion,
            KeyNotFound,
            BufferTooSmall,
            AccessDenied,
            InternalError,
            TransientTransport,
        ]
        .into_iter()
        .find(|s| *s as u16 == b)
    }
}

/// A completion queue entry (Table 2): bytes 03:00 command specific; 07:04 reserved; 11:08
/// SQ identifier (bytes 11:10) | SQ head pointer (bytes 9:8); 15:12 status field (bits 31:17)
/// | phase tag (bit 16) | command identifier (bits 15:0) (NVMe's positions; assumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub specific: u32,
    /// Bytes 07:04 (Reserved in the document's Table 2): the command's simulated latency in ns
    /// as the device accounts it (saturating; 0: not modelled). ssdlab's use.
    pub sim_ns: u32,
    pub sq_head: u16,
    pub sq_id: u16,
    pub cid: u16,
    pub phase: bool,
    pub status: u16,
}

impl Completion {
    pub fn encode(&self) -> [u8; CQE_BYTES] {
        assert!(self.status < 1 << 15, "the status field is 15 bits");
        let mut b = [0u8; CQE_BYTES];
        b[0..4].copy_from_slice(&self.specific.to_le_bytes());
        b[4..8].copy_from_slice(&self.sim_ns.to_le_bytes());
        b[8..10].copy_from_slice(&self.sq_head.to_le_bytes());
        b[10..12].copy_from_slice(&self.sq_id.to_le_bytes());
        let dw3 = (self.status as u32) << 17 | (self.phase as u32) << 16 | self.cid as u32;
        b[12..16].copy_from_slice(&dw3.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; CQE_BYTES]) -> Completion {
        let dw3 = u32::from_le_bytes(b[12..16].try_into().unwrap());
        Completion {
            specific: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            sim_ns: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            sq_head: u16::from_le_bytes([b[8], b[9]]),
            sq_id: u16::from_le_bytes([b[10], b[11]]),
            cid: (dw3 & 0xffff) as u16,
            phase: dw3 >> 16 & 1 == 1,
            status: (dw3 >> 17) as u16,
        }
    }
}

/// BAR register offsets (Table 3, at NVMe's offsets; assumed): AQA (4 bytes: ACQ entries - 1 in
/// bits 27:16, ASQ entries - 1 in bits 11:0), ASQ and ACQ base addresses (8 bytes each), then a
/// doorbell pair per queue id y from 0x1000: SQyTDBL at 0x1000 + 8y, CQyHDBL at 0x1004 + 8y.
pub mod bar {
    pub const AQA: usize = 0x24;
    pub const ASQ: usize = 0x28;
    pub const ACQ: usize = 0x30;
    pub const DOORBELLS: usize = 0x1000;

    pub const fn sq_tail(qid: u16) -> usize {
        DOORBELLS + 8 * qid as usize
    }
    pub const fn cq_head(qid: u16) -> usize {
        DOORBELLS + 8 * qid as usize + 4
    }
    /// The BAR's size for `queues` queue ids (0 = admin).
    pub const fn bytes(queues: u16) -> usize {
        DOORBELLS + 8 * queues as usize
    }
    pub fn aqa(asq_entries: u16, acq_entries: u16) -> u32 {
        assert!((2..=4096).contains(&asq_entries) && (2..=4096).contains(&acq_entries), "admin queues hold 2..4096 entries");
        ((acq_entries - 1) as u32) << 16 | (asq_entries - 1) as u32
    }
    pub fn aqa_fields(v: u32) -> (u32, u32) {
        ((v & 0xfff) + 1, (v >> 16 & 0xfff) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_command_lays_out_as_table_1() {
        let c = Command::put(0x1234, (0x1000, 5), (0x2000_0000_0000, 64));
        let b = c.encode();
        assert_eq!(b[0], io::PUT);
        assert_eq!(b[1], 0);
        assert_eq!(&b[2..4], &[0x34, 0x12]);
        assert_eq!(&b[4..8], &[0; 4], "nsid reserved");
        assert_eq!(&b[8..16], &0x1000u64.to_le_bytes());
        assert_eq!(&b[16..24], &5u64.to_le_bytes());
        assert_eq!(&b[24..32], &0x2000_0000_0000u64.to_le_bytes());
        assert_eq!(&b[32..40], &64u64.to_le_bytes());
        assert_eq!(&b[40..64], &[0; 24]);
        assert_eq!(Command::decode(&b), c);
    }

    #[test]
    fn create_queue_commands_carry_size_id_cq_and_priority() {
        let c = Command::create_sq(7, 3, 256, 0xdead_b000, 2, 1);
        let b = c.encode();
        assert_eq!(b[0], admin::CREATE_SQ);
        assert_eq!(&b[24..32], &0xdead_b000u64.to_le_bytes(), "adr2 = queue start");
        assert_eq!(&b[40..44], &(255u32 << 16 | 3).to_le_bytes(), "cdw10 = size | id");
        assert_eq!(&b[44..48], &(2u32 << 16 | 1 << 1).to_le_bytes(), "cdw11 = cq id | priority");
        assert_eq!(queue_fields(&Command::decode(&b)), (3, 256, 2, 1));
    }

    #[test]
    fn a_completion_lays_out_as_table_2() {
        let c = Completion { specific: 0xa1b2_c3d4, sim_ns: 0, sq_head: 0x0102, sq_id: 0x0304, cid: 0x0506, phase: true, status: 0x187 };
        let b = c.encode();
        assert_eq!(&b[0..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&b[4..8], &[0; 4]);
        assert_eq!(&b[8..12], &[0x02, 0x01, 0x04, 0x03]);
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 0x187 << 17 | 1 << 16 | 0x0506);
        assert_eq!(Completion::decode(&b), c);
        assert_eq!(Status::from_bits(0x187), Some(Status::KeyNotFound));
    }

    #[test]
    fn bar_registers_sit_at_nvme_offsets() {
        assert_eq!((bar::sq_tail(0), bar::cq_head(0), bar::sq_tail(1), bar::cq_head(1)), (0x1000, 0x1004, 0x1008, 0x100c));
        assert_eq!(bar::aqa(32, 64), 63 << 16 | 31);
        assert_eq!(bar::aqa_fields(bar::aqa(32, 64)), (32, 64));
    }
}
