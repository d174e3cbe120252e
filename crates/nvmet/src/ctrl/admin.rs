//! The admin command set: dispatch, Identify (controller, namespace, descriptors, command
//! set structures) and Get/Set Features.

use super::{
    put16, put32, put64, put_nqn, put_str, Ctrl, Outcome, Queue, Subsystem, AER_SLOTS, DISCOVERY_NQN, IN_CAPSULE_IO, KAS, MAX_IO_QUEUES,
    MDTS, QUEUE_ENTRIES, VS,
};
use crate::cmd::{admin, Sqe, Status};

impl Subsystem {
    pub(super) fn admin(&self, q: &Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        let Some(c) = self.ctrl(q) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        if c.cc & 1 == 0 || c.csts & 1 == 0 {
            return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
        }
        let _ = data;
        match sqe.opcode() {
            admin::IDENTIFY => self.identify(&c, sqe),
            admin::GET_LOG_PAGE => self.get_log_page(&c, sqe),
            admin::SET_FEATURES => self.set_features(q, &c, sqe),
            admin::GET_FEATURES => self.get_features(&c, sqe),
            admin::KEEP_ALIVE => Outcome::ok(),
            admin::ASYNC_EVENT_REQUEST => Outcome { hold: true, ..Outcome::ok() },
            // Commands complete in order of their work; there is nothing to abort (bit 0 of
            // DW0 set: not aborted).
            admin::ABORT => Outcome { dw0: 1, ..Outcome::ok() },
            _ => Outcome::err(Status::INVALID_OPCODE),
        }
    }

    fn identify(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let cns = sqe.dw(10) as u8;
        let csi = (sqe.dw(11) >> 24) as u8;
        let nsid = sqe.nsid();
        let ns_ok = nsid == 1 && !c.discovery;
        let zones = self.zone_info();
        // The namespace's command set: NVM (0) or Zoned Namespace (2).
        let ns_csi = if zones.is_some() { 2 } else { 0 };
        let mut b = vec![0u8; 4096];
        match cns {
            0x00 if ns_ok => self.identify_ns(&mut b),
            0x00 if nsid == 0xFFFF_FFFF => self.identify_ns_common(&mut b),
            0x00 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x01 => self.identify_ctrl(c, &mut b),
            0x02 | 0x07 => {
                // Active namespaces above NSID (CNS 07h: of command set CSI).
                if nsid >= 0xFFFF_FFFE {
                    return Outcome::err(Status::INVALID_NAMESPACE);
                }
                if !c.discovery && nsid < 1 && (cns == 0x02 || csi == ns_csi) {
                    put32(&mut b, 0, 1);
                }
            }
            0x03 if ns_ok => {
                // Namespace identification descriptors: NGUID, then the command set.
                b[0] = 0x02;
                b[1] = 16;
                b[4..20].copy_from_slice(&self.nguid);
                b[20] = 0x04;
                b[21] = 1;
                b[24] = ns_csi;
            }
            0x03 => return Outcome::err(Status::INVALID_NAMESPACE),
            // The NVM command set's own structures: nothing beyond the defaults (no protection
            // information, no extended LBA formats, no extra limits).
            0x05 if ns_ok && csi == 0 => {}
            0x06 if csi == 0 => {}
            0x05 if ns_ok && csi == 2 => match zones {
                Some(z) => {
                    // Zoned Namespace: ZOC 0, OZCS bit 0 (reads may cross zone boundaries),
                    // MAR and MOR (0's based), LBAFE 0: ZSZE, ZDES 0.
                    put16(&mut b, 2, 1);
                    put32(&mut b, 4, z.max_active.max(1) - 1);
                    put32(&mut b, 8, z.max_open.max(1) - 1);
                    put64(&mut b, 2816, z.zone_size);
                }
                None => return Outcome::err(Status::INVALID_FIELD),
            },
            // Zoned Namespace controller: ZASL 0 (zone appends up to MDTS).
            0x06 if csi == 2 && zones.is_some() => {}
            0x05 if csi == 0 || csi == 2 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x08 if ns_ok => {
                // I/O command set independent namespace: NSFEAT, NMIC, ..., NSTAT ready.
                b[0] = 1 << 2;
                b[1] = self.shared_namespace() as u8;
                b[14] = 1;
            }
            0x08 => return Outcome::err(Status::INVALID_NAMESPACE),
            0x1C => {
                // I/O command set combinations: index 0 = NVM and Zoned Namespace.
                put64(&mut b, 0, 1 | 1 << 2);
            }
            _ => return Outcome::err(Status::INVALID_FIELD),
        }
        Outcome::data(b)
    }

    fn identify_ctrl(&self, c: &Ctrl, b: &mut [u8]) {
        put16(b, 0, 0x1b36); // VID: the QEMU/Red Hat PCI vendor id used by emulated NVMe devices
        put16(b, 2, 0x1af4);
        put_str(b, 4, 20, &self.serial);
        put_str(b, 24, 40, &self.model);
        put_str(b, 64, 8, &self.firmware);
        b[72] = 6; // RAB
        b[76] = if self.shared_namespace() { 1 << 1 } else { 0 }; // CMIC: see `shared_namespace`
        b[77] = MDTS;
        put16(b, 78, c.cntlid);
        put32(b, 80, VS);
        put32(b, 92, 1 << 8); // OAES: namespace attribute notices
        let fdp = self.fdp_enabled();
        // CTRATT: 128-bit host identifier; with FDP, endurance groups (bit 4) and FDPS (bit 19).
        put32(b, 96, 1 << 0 | if fdp { 1 << 4 | 1 << 19 } else { 0 });
        put16(b, 340, fdp as u16); // ENDGIDMAX
        b[111] = if c.discovery { 2 } else { 1 }; // CNTRLTYPE
        put16(b, 256, 0); // OACS
        b[258] = 3; // ACL
        b[259] = AER_SLOTS as u8 - 1; // AERL
        b[260] = 1 << 1 | 1; // FRMW: one slot, read-only
        b[261] = 1 << 2 | 1 << 1 | 1; // LPA: per-namespace SMART, command effects log, extended data
        b[262] = 0; // ELPE: one error log entry
        put16(b, 266, 0x157); // WCTEMP 70 C
        put16(b, 268, 0x175); // CCTEMP 100 C
        put16(b, 320, KAS);
        b[512] = 0x66; // SQES
        b[513] = 0x44; // CQES
        put16(b, 514, QUEUE_ENTRIES as u16); // MAXCMD
        put32(b, 516, if c.discovery { 0 } else { 1 }); // NN
        put16(b, 520, 1 << 2 | 1 << 3); // ONCS: Dataset Management, Write Zeroes
        b[525] = 1 | 3 << 1; // VWC present; Flush with broadcast NSID supported
        put32(b, 536, 1 | 1 << 20); // SGLS: SGLs supported; offsets in in-capsule data
        put_nqn(b, 768, if c.discovery { DISCOVERY_NQN } else { &self.nqn });
        // Fabrics (bytes 1792..): IOCCSZ and IORCSZ in 16-byte units, ICDOFF 0, FCATT 0 (dynamic
        // controller model), MSDBD 1.
        put32(b, 1792, (64 + IN_CAPSULE_IO) / 16);
        put32(b, 1796, 1);
        put16(b, 1800, 0);
        b[1802] = 0;
        b[1803] = 1;
        // Power state 0: 25 W, the figure of a typical enterprise drive; entry/exit latency 0.
        put16(b, 2048, 2500);
    }

    fn identify_ns(&self, b: &mut [u8]) {
        put64(b, 0, self.nsze);
        put64(b, 8, self.nsze);
        put64(b, 16, self.nsze);
        b[24] = 1 << 2; // NSFEAT: deallocated blocks read as zeros (DLFEAT holds the value)
        b[25] = 0; // NLBAF: one LBA format
        b[26] = 0; // FLBAS
        b[30] = self.shared_namespace() as u8; // NMIC: shared (every controller sees namespace 1)
        b[33] = 1 << 3 | 1; // DLFEAT: deallocated blocks read zeros; Write Zeroes can deallocate
        self.identify_ns_common(b);
        if self.fdp_enabled() {
            put16(b, 102, 1); // ENDGID: the endurance group whose FDP configuration applies
        }
        b[104..120].copy_from_slice(&self.nguid);
    }

    /// What every namespace shares (NSID FFFFFFFFh): the LBA format.
    fn identify_ns_common(&self, b: &mut [u8]) {
        b[128 + 2] = self.lba_shift as u8; // LBAF0: LBADS; no metadata; best performance
    }

    fn set_features(&self, q: &Queue, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let fid = sqe.dw(10) as u8;
        if sqe.dw(10) >> 31 != 0 {
            return Outcome::err(Status::FEATURE_NOT_SAVEABLE);
        }
        let v = sqe.dw(11);
        let mut ctrls = self.ctrls();
        let Some(cm) = ctrls.get_mut(&q.cntlid) else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
        match fid {
            0x07 if !c.discovery => {
                if v & 0xFFFF == 0xFFFF || v >> 16 == 0xFFFF {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                if cm.queues > 1 {
                    // Already granted and in use: the number cannot change.
                    let n = (cm.io_queues - 1) as u32;
                    return Outcome { dw0: n | n << 16, status: Some(Status::COMMAND_SEQUENCE_ERROR), ..Default::default() };
                }
                let want = ((v & 0xFFFF).min(v >> 16) + 1) as u16;
                cm.io_queues = want.min(MAX_IO_QUEUES);
                let n = (cm.io_queues - 1) as u32;
                Outcome { dw0: n | n << 16, ..Outcome::ok() }
            }
            0x06 if !c.discovery => {
                cm.write_cache = v & 1 != 0;
                Outcome::ok()
            }
            0x0B => {
                cm.aen_config = v;
                Outcome::ok()
            }
            0x0F => {
                cm.kato_ms = v;
                Outcome::ok()
            }
            // FDP is enabled or not by the device's config; a host cannot change it.
            0x1D | 0x1E if !c.discovery => Outcome::err(Status::FEATURE_NOT_CHANGEABLE),
            0x02 | 0x04 | 0x08 | 0x0A if !c.discovery => Outcome::ok(),
            _ => Outcome::err(Status::INVALID_FIELD),
        }
    }

    fn get_features(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let fid = sqe.dw(10) as u8;
        let dw0 = match fid {
            0x07 if !c.discovery => {
                let n = c.io_queues.max(1) as u32 - 1;
                n | n << 16
            }
            0x06 if !c.discovery => c.write_cache as u32,
            0x0B => c.aen_config,
            0x0F => c.kato_ms,
            0x04 if !c.discovery => 0x157,
            0x1D if !c.discovery => {
                // FDP: FDPE and the configuration index, for endurance group 1.
                if sqe.dw(11) & 0xFFFF != 1 {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                self.with_fdp(|f, _, _| 1 | f.configuration << 8).unwrap_or_default()
            }
            0x02 | 0x08 | 0x0A if !c.discovery => 0,
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        Outcome { dw0, ..Outcome::ok() }
    }
}
