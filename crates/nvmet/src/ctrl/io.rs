//! The NVM and Zoned Namespace I/O command sets on namespace 1: read, write, write zeroes,
//! dataset management, FDP's I/O management, zone append, zone management send and receive.

use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};

use super::{backend_status, done, put16, put64, status_of, Ns, Outcome, Queue, Subsystem, MAX_TRANSFER};
use crate::cmd::{io, Sqe, Status};

/// The namespace, locked for one command.
type NsGuard<'a> = std::sync::MutexGuard<'a, Ns>;

impl Subsystem {
    /// The LBA range of a read or write-like command, checked against the namespace.
    fn range(&self, sqe: &Sqe) -> Result<(u64, u64), Status> {
        let slba = sqe.qw(40);
        let nlb = (sqe.dw(12) & 0xFFFF) as u64 + 1;
        if slba.checked_add(nlb).is_none_or(|end| end > self.nsze) {
            return Err(Status::LBA_OUT_OF_RANGE);
        }
        Ok((slba << self.lba_shift, nlb << self.lba_shift))
    }

    /// An I/O command: Flush (of namespace 1 or all), else a command on namespace 1, sent to
    /// its opcode's handler with the namespace locked.
    pub(super) fn io(&self, q: &Queue, sqe: &Sqe, data: &[u8]) -> Outcome {
        let _ = q;
        let nsid = sqe.nsid();
        if sqe.opcode() == io::FLUSH {
            return self.io_flush(nsid);
        }
        if nsid != 1 {
            return Outcome::err(Status::INVALID_NAMESPACE);
        }
        let ns = self.ns();
        let zoned = matches!(&*ns, Ns::Zoned(_));
        match sqe.opcode() {
            io::READ => self.io_read(ns, sqe),
            io::WRITE => self.io_write(ns, sqe, data),
            io::WRITE_ZEROES => self.io_write_zeroes(ns, sqe),
            io::DATASET_MANAGEMENT => self.io_dataset_management(ns, sqe, data),
            io::IO_MGMT_RECV => {
                drop(ns);
                self.io_mgmt_recv(sqe)
            }
            io::IO_MGMT_SEND => self.io_mgmt_send(ns, sqe, data),
            io::ZONE_APPEND | io::ZONE_MGMT_SEND | io::ZONE_MGMT_RECV if !zoned => Outcome::err(Status::INVALID_OPCODE),
            io::ZONE_APPEND => self.zone_append(ns, sqe, data),
            io::ZONE_MGMT_SEND => self.zone_mgmt_send(ns, sqe),
            io::ZONE_MGMT_RECV => self.zone_mgmt_recv(ns, sqe),
            _ => Outcome::err(Status::INVALID_OPCODE),
        }
    }

    /// Flush: what the namespace holds is made durable.
    fn io_flush(&self, nsid: u32) -> Outcome {
        if nsid != 1 && nsid != 0xFFFF_FFFF {
            return Outcome::err(Status::INVALID_NAMESPACE);
        }
        self.count(|c| c.flushes += 1);
        done(self.ns().flush())
    }

    /// Read: the range's data for the host.
    fn io_read(&self, mut ns: NsGuard<'_>, sqe: &Sqe) -> Outcome {
        let (off, len) = match self.range(sqe) {
            Ok(r) => r,
            Err(s) => return Outcome::err(s),
        };
        let mut buf = vec![0u8; len as usize];
        let r = match &mut *ns {
            Ns::Block(d) => d.read(off, &mut buf).map_err(|e| backend_status(&e)),
            Ns::Zoned(z) => z.read(off, &mut buf).map_err(|e| backend_status(&e)),
        };
        drop(ns);
        let mut out = done(r);
        if out.status() == Status::SUCCESS {
            out.data = buf;
            self.count(|c| {
                c.reads += 1;
                c.read_bytes += len
            });
        }
        out
    }

    /// Write, with FUA and (on an FDP device) a placement directive.
    fn io_write(&self, mut ns: NsGuard<'_>, sqe: &Sqe, data: &[u8]) -> Outcome {
        let (off, len) = match self.range(sqe) {
            Ok(r) => r,
            Err(s) => return Outcome::err(s),
        };
        if data.len() as u64 != len {
            return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let fua = sqe.dw(12) & (1 << 30) != 0;
        let dtype = (sqe.dw(12) >> 20) & 0xF;
        let placement = match dtype {
            0 => None,
            2 => {
                let pid = (sqe.dw(13) >> 16) as u16;
                let ok = match &*ns {
                    Ns::Block(d) => d.device().and_then(|dev| dev.ftl().fdp()).is_some_and(|f| f.decode(pid).is_some()),
                    Ns::Zoned(_) => false,
                };
                if !ok {
                    return Outcome::err(Status::INVALID_FIELD);
                }
                Some(pid)
            }
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        let r = match &mut *ns {
            Ns::Block(d) => d.write(off, data, fua, placement).map_err(|e| backend_status(&e)),
            Ns::Zoned(z) => z.write(off, data, fua, None).map_err(|e| backend_status(&e)),
        };
        drop(ns);
        let out = done(r);
        if out.status() == Status::SUCCESS {
            self.count(|c| {
                c.writes += 1;
                c.write_bytes += len
            });
        }
        out
    }

    /// Write Zeroes: zeros written, or the range deallocated (DEAC) on a block namespace.
    fn io_write_zeroes(&self, mut ns: NsGuard<'_>, sqe: &Sqe) -> Outcome {
        let (off, len) = match self.range(sqe) {
            Ok(r) => r,
            Err(s) => return Outcome::err(s),
        };
        let deac = sqe.dw(12) & (1 << 25) != 0;
        let fua = sqe.dw(12) & (1 << 30) != 0;
        done(match &mut *ns {
            Ns::Block(d) => {
                if deac { d.trim(off, len, fua) } else { d.write_zeroes(off, len, true, fua, None) }.map_err(|_| Status::INTERNAL_ERROR)
            }
            // A zoned namespace writes the zeros at the write pointer like any write.
            Ns::Zoned(z) => z.write(off, &vec![0u8; len as usize], fua, None).map_err(|e| backend_status(&e)),
        })
    }

    /// Dataset Management: the deallocate attribute trims its ranges; hints are ignored.
    fn io_dataset_management(&self, mut ns: NsGuard<'_>, sqe: &Sqe, data: &[u8]) -> Outcome {
        let zoned = matches!(&*ns, Ns::Zoned(_));
        let nr = (sqe.dw(10) & 0xFF) as usize + 1;
        if data.len() < nr * 16 {
            return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
        }
        if sqe.dw(11) & (1 << 2) == 0 || zoned {
            // Only the deallocate attribute does anything, and not on zones (a zone
            // is deallocated by its reset); hints are taken and ignored.
            return Outcome::ok();
        }
        let mut ranges = Vec::with_capacity(nr);
        for r in data[..nr * 16].chunks_exact(16) {
            let nlb = u32::from_le_bytes(r[4..8].try_into().expect("4")) as u64;
            let slba = u64::from_le_bytes(r[8..16].try_into().expect("8"));
            if slba.checked_add(nlb).is_none_or(|e| e > self.nsze) {
                return Outcome::err(Status::LBA_OUT_OF_RANGE);
            }
            if nlb > 0 {
                ranges.push((slba << self.lba_shift, nlb << self.lba_shift));
            }
        }
        let Ns::Block(d) = &mut *ns else { unreachable!("zoned namespaces returned above") };
        let mut t = 0;
        for &(off, len) in &ranges {
            match d.trim(off, len, false) {
                Ok(x) => t = t.max(x),
                Err(_) => return Outcome::err(Status::INTERNAL_ERROR),
            }
        }
        drop(ns);
        self.count(|c| c.deallocates += ranges.len() as u64);
        done(Ok(t))
    }

    /// I/O Management Receive (FDP): the reclaim unit handle status.
    fn io_mgmt_recv(&self, sqe: &Sqe) -> Outcome {
        // Management operation 1: Reclaim Unit Handle Status.
        if sqe.dw(10) as u8 != 1 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let len = ((sqe.dw(11) as u64 + 1) * 4).min(MAX_TRANSFER as u64) as usize;
        let Some(st) = self.with_fdp(|f, _, _| f.ruh_status()) else { return Outcome::err(Status::INVALID_OPCODE) };
        let mut b = vec![0u8; (16 + 32 * st.len()).max(len)];
        put16(&mut b, 14, st.len() as u16);
        for (i, r) in st.iter().enumerate() {
            let d = &mut b[16 + 32 * i..48 + 32 * i];
            put16(d, 0, r.pid);
            put16(d, 2, r.ruhid);
            put64(d, 8, r.ruamw);
        }
        b.truncate(len);
        Outcome::data(b)
    }

    /// I/O Management Send (FDP): a reclaim unit handle update.
    fn io_mgmt_send(&self, ns: NsGuard<'_>, sqe: &Sqe, data: &[u8]) -> Outcome {
        // Management operation 1: Reclaim Unit Handle Update of NPID + 1 identifiers.
        if sqe.dw(10) as u8 != 1 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let n = (sqe.dw(10) >> 16) as usize + 1;
        if data.len() < 2 * n {
            return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let pids: Vec<u16> = data[..2 * n].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        drop(ns);
        match self.with_fdp(|f, _, _| pids.iter().all(|&p| f.decode(p).is_some())) {
            None => return Outcome::err(Status::INVALID_OPCODE),
            Some(false) => return Outcome::err(Status::INVALID_PLACEMENT_HANDLE),
            Some(true) => {}
        }
        let mut ns = self.ns();
        let Ns::Block(d) = &mut *ns else { return Outcome::err(Status::INVALID_OPCODE) };
        done(d.ruh_update(&pids).map_err(|_| Status::INTERNAL_ERROR))
    }

    /// Zone Append: the data at the zone's write pointer; the LBA written in DW0/DW1.
    fn zone_append(&self, mut ns: NsGuard<'_>, sqe: &Sqe, data: &[u8]) -> Outcome {
        let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
        let zslba = sqe.qw(40);
        let nlb = (sqe.dw(12) & 0xFFFF) as u64 + 1;
        if zslba >= self.nsze {
            return Outcome::err(Status::LBA_OUT_OF_RANGE);
        }
        if data.len() as u64 != nlb << self.lba_shift {
            return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let fua = sqe.dw(12) & (1 << 30) != 0;
        match z.zone_append(zslba, data, fua) {
            Ok((lba, t)) => {
                drop(ns);
                self.count(|c| {
                    c.writes += 1;
                    c.write_bytes += data.len() as u64
                });
                Outcome { dw0: lba as u32, dw1: (lba >> 32) as u32, done_ns: Some(t), ..Outcome::ok() }
            }
            Err(e) => Outcome::err(backend_status(&e)),
        }
    }

    /// Zone Management Send: close, finish, open, reset or offline one zone or all.
    fn zone_mgmt_send(&self, mut ns: NsGuard<'_>, sqe: &Sqe) -> Outcome {
        let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
        let slba = sqe.qw(40);
        let all = sqe.dw(13) & (1 << 8) != 0;
        let action = match sqe.dw(13) as u8 {
            1 => ZoneAction::Close,
            2 => ZoneAction::Finish,
            3 => ZoneAction::Open,
            4 => ZoneAction::Reset,
            5 => ZoneAction::Offline,
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        if !all && slba >= self.nsze {
            return Outcome::err(Status::LBA_OUT_OF_RANGE);
        }
        done(z.zone_action(if all { 0 } else { slba }, action, all).map_err(|e| backend_status(&e)))
    }

    /// Zone Management Receive: the zone report from a start LBA, with a state filter.
    fn zone_mgmt_recv(&self, mut ns: NsGuard<'_>, sqe: &Sqe) -> Outcome {
        let Ns::Zoned(z) = &mut *ns else { unreachable!("zoned") };
        let slba = sqe.qw(40);
        let len = ((sqe.dw(12) as u64 + 1) * 4).min(MAX_TRANSFER as u64) as usize;
        let zra = sqe.dw(13) as u8;
        let filter = match (sqe.dw(13) >> 8) as u8 {
            0 => None,
            1 => Some(ZoneState::Empty),
            2 => Some(ZoneState::ImplicitlyOpen),
            3 => Some(ZoneState::ExplicitlyOpen),
            4 => Some(ZoneState::Closed),
            5 => Some(ZoneState::Full),
            6 => Some(ZoneState::ReadOnly),
            7 => Some(ZoneState::Offline),
            _ => return Outcome::err(Status::INVALID_FIELD),
        };
        let partial = sqe.dw(13) & (1 << 16) != 0;
        // Zone descriptor extensions are 0 bytes: the extended report is the report.
        if zra > 1 || len < 64 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        if slba >= self.nsze {
            return Outcome::err(Status::LBA_OUT_OF_RANGE);
        }
        let fit = (len - 64) / 64;
        let zs = match z.device().zns().expect("zoned").report(slba, filter, usize::MAX) {
            Ok(v) => v,
            Err(e) => return Outcome::err(status_of(&e)),
        };
        let mut b = vec![0u8; len];
        let n = zs.len().min(fit);
        put64(&mut b, 0, if partial { n as u64 } else { zs.len() as u64 });
        for (i, d) in zs.iter().take(n).enumerate() {
            let e = &mut b[64 + 64 * i..128 + 64 * i];
            e[0] = d.zone_type.code();
            e[1] = d.state.code() << 4;
            put64(e, 8, d.zcap);
            put64(e, 16, d.zslba);
            put64(e, 24, d.wp);
        }
        Outcome::data(b)
    }
}
