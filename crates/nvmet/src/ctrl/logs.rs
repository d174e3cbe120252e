//! Get Log Page and the pages it serves: FDP (configurations, usage, statistics, events),
//! commands supported and effects, SMART / Health, firmware slots, the metrics page and the
//! discovery log.

use serde_json::Value;
use ssdlab_core::config::HandleType;

use super::{put128, put16, put32, put64, put_nqn, put_str, Ctrl, Outcome, Subsystem, MAX_TRANSFER, METRICS_LOG};
use crate::cmd::{admin, io, Sqe, Status};

impl Subsystem {
    pub(super) fn get_log_page(&self, c: &Ctrl, sqe: &Sqe) -> Outcome {
        let lid = sqe.dw(10) as u8;
        let numd = ((sqe.dw(11) as u64 & 0xFFFF) << 16 | (sqe.dw(10) as u64 >> 16)) + 1;
        let len = (numd * 4) as usize;
        let offset = (sqe.dw(13) as u64) << 32 | sqe.dw(12) as u64;
        if len > MAX_TRANSFER as usize {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let page: Vec<u8> = match lid {
            0x01 => vec![0u8; 64],
            0x05 if !c.discovery => self.effects_log((sqe.dw(14) >> 24) as u8),
            0x02 if !c.discovery => self.smart_log(),
            0x03 if !c.discovery => {
                let mut b = vec![0u8; 512];
                b[0] = 1; // AFI: slot 1 active
                put_str(&mut b, 8, 8, &self.firmware);
                b
            }
            0x04 if !c.discovery => vec![0u8; 4096],
            0x70 if c.discovery => self.discovery_log(),
            METRICS_LOG if !c.discovery => {
                // One snapshot per controller, taken when a read starts at offset 0, so a page
                // read in pieces is one consistent document.
                let mut snaps = ssdlab_server::lock(&self.metrics_snapshots);
                if offset == 0 || !snaps.contains_key(&c.cntlid) {
                    let text = serde_json::to_vec_pretty(&self.metrics()).unwrap_or_default();
                    let mut b = (text.len() as u64).to_le_bytes().to_vec();
                    b.extend_from_slice(&text);
                    snaps.insert(c.cntlid, b);
                }
                snaps[&c.cntlid].clone()
            }
            0x20..=0x23 if !c.discovery => {
                if sqe.dw(11) >> 16 != 1 {
                    return Outcome::err(Status::INVALID_FIELD); // LSI: endurance group 1 only
                }
                match self.fdp_log(lid, sqe.dw(10) >> 8 & 1 != 0) {
                    Some(p) => p,
                    None => return Outcome::err(Status::INVALID_LOG_PAGE),
                }
            }
            _ => return Outcome::err(Status::INVALID_LOG_PAGE),
        };
        if !offset.is_multiple_of(4) || offset > page.len() as u64 {
            return Outcome::err(Status::INVALID_FIELD);
        }
        let mut out = vec![0u8; len];
        let from = &page[offset as usize..];
        let n = from.len().min(len);
        out[..n].copy_from_slice(&from[..n]);
        Outcome::data(out)
    }

    /// The FDP log pages (TP4146) of endurance group 1: configurations (20h), reclaim unit
    /// handle usage (21h), statistics (22h), events (23h; `controller`: the controller's events
    /// rather than the host's).
    fn fdp_log(&self, lid: u8, controller: bool) -> Option<Vec<u8>> {
        self.with_fdp(|f, ftl, _| match lid {
            0x20 => {
                let mut descs = vec![];
                for (cfg, ru_bytes) in &f.offered {
                    let nruh = cfg.handles as usize;
                    let mut d = vec![0u8; 64 + 4 * nruh];
                    let dsze = d.len() as u16;
                    put16(&mut d, 0, dsze);
                    let rgif = if cfg.reclaim_groups <= 1 { 0 } else { 32 - (cfg.reclaim_groups - 1).leading_zeros() };
                    d[2] = rgif as u8 | 1 << 4 | 1 << 7; // RGIF, FDPVWC, FDPCV (valid)
                    put32(&mut d, 4, cfg.reclaim_groups);
                    put16(&mut d, 8, cfg.handles as u16);
                    put16(&mut d, 10, (cfg.reclaim_groups * cfg.handles - 1) as u16); // MAXPIDS, 0's based
                    put32(&mut d, 12, 0); // NNSS, 0's based: one namespace
                    put64(&mut d, 16, *ru_bytes); // RUNS
                    for h in 0..nruh {
                        d[64 + 4 * h] = match cfg.handle_type(h as u32) {
                            HandleType::InitiallyIsolated => 1,
                            HandleType::PersistentlyIsolated => 2,
                        };
                    }
                    descs.extend_from_slice(&d);
                }
                let mut b = vec![0u8; 16];
                put16(&mut b, 0, f.offered.len().saturating_sub(1) as u16);
                put32(&mut b, 4, (16 + descs.len()) as u32);
                b.extend_from_slice(&descs);
                b
            }
            0x21 => {
                let u = f.usage();
                let mut b = vec![0u8; 8 + 8 * u.len()];
                put16(&mut b, 0, u.len() as u16);
                for (h, s) in u.iter().enumerate() {
                    b[8 + 8 * h] = if *s == "unused" { 0 } else { 1 };
                }
                b
            }
            0x22 => {
                let mut b = vec![0u8; 64];
                if let Ok(st) = ftl.fdp_statistics() {
                    put128(&mut b, 0, st.hbmw as u128);
                    put128(&mut b, 16, st.mbmw as u128);
                    put128(&mut b, 32, st.mbe as u128);
                }
                b
            }
            0x23 => {
                let evs: Vec<_> = f.events().filter(|e| (e.code >= 0x80) == controller).collect();
                let mut b = vec![0u8; 64 + 64 * evs.len()];
                put32(&mut b, 0, evs.len() as u32);
                for (i, e) in evs.iter().enumerate() {
                    let d = &mut b[64 + 64 * i..128 + 64 * i];
                    d[0] = e.code;
                    d[1] = e.pid.is_some() as u8 | 1 << 1; // PIV, NSIDV
                    put16(d, 2, e.pid.unwrap_or(0));
                    put64(d, 4, e.time_ns / 1_000_000); // timestamp: milliseconds
                    put32(d, 12, 1);
                    put16(d, 32, e.reclaim_group);
                }
                b
            }
            _ => vec![],
        })
        .filter(|b| !b.is_empty())
    }

    /// Commands Supported and Effects (05h) of command set `csi`: which admin and I/O commands
    /// the controller takes and which change logical block content. Linux reads it for a zoned
    /// namespace and leaves the namespace out (or read-only) unless Zone Append is listed.
    fn effects_log(&self, csi: u8) -> Vec<u8> {
        const CSUPP: u32 = 1;
        const LBCC: u32 = 1 << 1;
        let mut b = vec![0u8; 4096];
        for op in [
            admin::GET_LOG_PAGE,
            admin::IDENTIFY,
            admin::ABORT,
            admin::SET_FEATURES,
            admin::GET_FEATURES,
            admin::ASYNC_EVENT_REQUEST,
            admin::KEEP_ALIVE,
        ] {
            put32(&mut b, 4 * op as usize, CSUPP);
        }
        let zoned = self.zone_info().is_some();
        let fdp = self.fdp_enabled();
        let mut io_ops: Vec<(u8, u32)> = vec![(io::FLUSH, CSUPP), (io::READ, CSUPP)];
        if (csi == 0 && !zoned) || (csi == 2 && zoned) {
            io_ops.extend([(io::WRITE, CSUPP | LBCC), (io::WRITE_ZEROES, CSUPP | LBCC), (io::DATASET_MANAGEMENT, CSUPP | LBCC)]);
        }
        if csi == 2 && zoned {
            io_ops.extend([(io::ZONE_MGMT_SEND, CSUPP | LBCC), (io::ZONE_MGMT_RECV, CSUPP), (io::ZONE_APPEND, CSUPP | LBCC)]);
        }
        if csi == 0 && fdp {
            io_ops.extend([(io::IO_MGMT_RECV, CSUPP), (io::IO_MGMT_SEND, CSUPP)]);
        }
        for (op, e) in io_ops {
            put32(&mut b, 1024 + 4 * op as usize, e);
        }
        b
    }

    /// SMART / Health Information: ssdlab's bytes and commands since the device was new, its
    /// wear as Percentage Used (mean erase count over the P/E limit) and spare blocks left.
    fn smart_log(&self) -> Vec<u8> {
        let m = self.ns().metrics();
        let life = &m["device_lifetime"];
        let g = |v: &Value| v.as_u64().unwrap_or(0);
        let mut b = vec![0u8; 512];
        b[0] = 0; // critical warning
        put16(&mut b, 1, 273 + 35); // composite temperature (K)
        b[3] = 100; // available spare
        b[4] = 10; // available spare threshold
        let wear = m["erase_count"]["mean"].as_f64().unwrap_or(0.0);
        let limit = m["config"]["media"]["pe_limit"].as_f64().unwrap_or(0.0);
        b[5] = if limit > 0.0 { (100.0 * wear / limit).min(255.0) as u8 } else { 0 };
        // Data units: thousands of 512-byte units, rounded up.
        let units = |bytes: u64| (bytes / 512).div_ceil(1000) as u128;
        put128(&mut b, 32, units(g(&life["host_read_bytes"])));
        put128(&mut b, 48, units(g(&life["host_write_bytes"])));
        let cnt = ssdlab_server::lock(&self.counters).clone();
        put128(&mut b, 64, cnt.reads as u128);
        put128(&mut b, 80, cnt.writes as u128);
        put128(&mut b, 112, 1); // power cycles
        put128(&mut b, 128, (self.started.elapsed().as_secs() / 3600) as u128);
        b
    }

    fn discovery_log(&self) -> Vec<u8> {
        let mut b = vec![0u8; 2048];
        put64(&mut b, 0, 1); // GENCTR
        put64(&mut b, 8, 1); // NUMREC
        let e = &mut b[1024..2048];
        e[0] = 3; // TRTYPE: TCP
        e[1] = if self.traddr.contains(':') { 2 } else { 1 }; // ADRFAM: IPv6 / IPv4
        e[2] = 2; // SUBTYPE: an NVM subsystem
        e[3] = 2; // TREQ: secure channel not required
        put16(e, 4, 1); // PORTID
        put16(e, 6, 0xFFFF); // CNTLID: dynamic
        put16(e, 8, 32); // ASQSZ
        put_str(e, 32, 32, &self.trsvcid);
        put_nqn(e, 256, &self.nqn);
        put_str(e, 512, 256, &self.traddr);
        e[768] = 0; // TSAS: no security
                    // TRSVCID and TRADDR are space padded ASCII fields (discovery log entry).
        b
    }
}
