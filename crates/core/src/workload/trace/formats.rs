//! The line parsers of the five trace formats (msr, blkparse, fio iolog v2/v3, disksim,
//! mqsim): one line in, a request in bytes and raw trace time out, or a message saying what
//! was expected. The formats are described in the parent module's docs.

use std::io::BufRead;

use super::{Cmd, Req, TraceReader};
use crate::workload::Op;

const MSR_FIELDS: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";
pub(super) const FIO_V2_HEADER: &str = "fio version 2 iolog";
pub(super) const FIO_V3_HEADER: &str = "fio version 3 iolog";
const UNIT_512: u128 = 512;

impl<R: BufRead> TraceReader<R> {
    pub(super) fn parse_msr(&mut self, t: &str) -> std::result::Result<Option<Req>, String> {
        let f: Vec<&str> = t.split(',').map(str::trim).collect();
        if self.line == 1 && !f[0].is_empty() && !f[0].bytes().all(|b| b.is_ascii_digit()) {
            self.benign = true;
            return Ok(None); // header row
        }
        if f.len() != 7 {
            return Err(format!("expected 7 comma-separated fields ({MSR_FIELDS}), got {}", f.len()));
        }
        let ticks: u64 = uint(f[0], "Timestamp", "Windows FILETIME ticks of 100 ns")?;
        let op = if f[3].eq_ignore_ascii_case("read") {
            Op::Read
        } else if f[3].eq_ignore_ascii_case("write") {
            Op::Write
        } else {
            return Err(format!("Type {:?} is not Read or Write", shorten(f[3])));
        };
        let off: u64 = uint(f[4], "Offset", "bytes")?;
        let len: u64 = uint(f[5], "Size", "bytes")?;
        Ok(Some(Req { op, off: off as u128, len: len as u128, t_ns: ticks as i128 * 100 }))
    }

    pub(super) fn parse_blkparse(&mut self, t: &str) -> std::result::Result<Option<Req>, String> {
        let f: Vec<&str> = t.split_whitespace().collect();
        // dev cpu seq time pid action rwbs [payload...]
        if f.len() < 7 {
            return Ok(None);
        }
        let dev_ok = match f[0].split_once(',') {
            Some((a, b)) => a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok(),
            None => false,
        };
        let time = blk_time(f[3]);
        let action_ok = (1..=2).contains(&f[5].len()) && f[5].bytes().all(|b| b.is_ascii_alphabetic());
        if !dev_ok
            || f[1].parse::<u32>().is_err()
            || f[2].parse::<u64>().is_err()
            || time.is_none()
            || f[4].parse::<u64>().is_err()
            || !action_ok
        {
            return Ok(None); // not an event line (summary, message, other output)
        }
        if f[5] != self.blk_action {
            return Ok(None);
        }
        let t_ns = time.unwrap_or(0);
        let rwbs = f[6];
        let (sector, count) = if f.len() == 7 || f[7].starts_with('[') {
            (0u64, 0u64)
        } else if f.len() >= 10 && f[8] == "+" {
            let s: u64 = uint(f[7], "sector", "512-byte sectors")?;
            let n: u64 = uint(f[9], "sector count", "512-byte sectors")?;
            (s, n)
        } else {
            return Err(format!(
                "expected \"<sector> + <nsectors>\" or \"[<process>]\" after action {} RWBS {}, got {:?}",
                f[5],
                rwbs,
                shorten(&f[7..].join(" "))
            ));
        };
        let preflush = rwbs.starts_with('F');
        let rest = if preflush { &rwbs[1..] } else { rwbs };
        let dir = match rest.chars().next() {
            Some('D') => Some(Op::Trim),
            Some('W') => Some(Op::Write),
            Some('R') => Some(Op::Read),
            Some('Z') => return Ok(None), // zoned management ops
            _ => None,
        };
        let op = match dir {
            Some(op) if count > 0 => op,
            _ if preflush => Op::Flush,
            _ => return Ok(None),
        };
        Ok(Some(Req { op, off: sector as u128 * UNIT_512, len: count as u128 * UNIT_512, t_ns }))
    }

    pub(super) fn fio_header(&mut self, t: &str) -> std::result::Result<Option<Cmd>, String> {
        self.benign = true;
        if t == FIO_V2_HEADER {
            self.fio_version = Some(2);
            Ok(None)
        } else if t == FIO_V3_HEADER {
            self.fio_version = Some(3);
            Ok(None)
        } else {
            self.done = true;
            Err(format!("expected fio iolog header {FIO_V2_HEADER:?} or {FIO_V3_HEADER:?} on line 1, got {:?}", shorten(t)))
        }
    }

    pub(super) fn parse_fio(&mut self, t: &str) -> std::result::Result<Option<Req>, String> {
        let v3 = self.fio_version == Some(3);
        let f: Vec<&str> = t.split_whitespace().collect();
        let (ts_us, rest) = if v3 {
            if f.len() != 3 && f.len() != 5 {
                return Err(format!(
                    "expected \"<timestamp> <file> <add|open|close>\" or \"<timestamp> <file> <action> <offset> <length>\" (fio v3 iolog), got {} fields",
                    f.len()
                ));
            }
            let ts: u64 = uint(f[0], "timestamp", "microseconds")?;
            (Some(ts), &f[1..])
        } else {
            if f.len() != 2 && f.len() != 4 {
                return Err(format!(
                    "expected \"<file> <add|open|close>\" or \"<file> <action> <offset> <length>\" (fio v2 iolog), got {} fields",
                    f.len()
                ));
            }
            (None, &f[..])
        };
        let action = rest[1];
        if rest.len() == 2 {
            return match action {
                "add" | "open" | "close" => {
                    self.benign = true;
                    Ok(None)
                }
                _ => Err(format!("expected a file action (add, open, close) after the file name, got {:?}", shorten(action))),
            };
        }
        let op = match action {
            "read" => Op::Read,
            "write" => Op::Write,
            "trim" => Op::Trim,
            "sync" | "datasync" => Op::Flush,
            "wait" => Op::Flush, // handled below
            _ => {
                return Err(format!(
                    "unknown iolog action {:?} (expected read, write, trim, sync, datasync{})",
                    shorten(action),
                    if v3 { "" } else { " or wait" }
                ))
            }
        };
        let off: u64 = uint(rest[2], "offset", "bytes")?;
        let len: u64 = uint(rest[3], "length", "bytes")?;
        if action == "wait" {
            if v3 {
                return Err("\"wait\" is not allowed in a version 3 iolog (timestamps give the timing)".to_string());
            }
            self.fio_clock_us = self.fio_clock_us.saturating_add(off);
            self.benign = true;
            return Ok(None);
        }
        let t_us = ts_us.unwrap_or(self.fio_clock_us);
        Ok(Some(Req { op, off: off as u128, len: len as u128, t_ns: t_us as i128 * 1000 }))
    }

    pub(super) fn parse_mqsim(&mut self, t: &str) -> std::result::Result<Option<Req>, String> {
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() != 5 {
            return Err(format!(
                "expected 5 space-separated fields (arrival_time_ns device_number start_sector size_sectors type), got {}",
                f.len()
            ));
        }
        let time: u64 = uint(f[0], "arrival time", "nanoseconds")?;
        let _dev: u64 = uint(f[1], "device number", "an unsigned integer")?;
        let lba: u64 = uint(f[2], "start sector", "512-byte sectors")?;
        let size: u64 = uint(f[3], "size", "512-byte sectors")?;
        let op = if f[4] == "0" { Op::Write } else { Op::Read };
        if let Some(prev) = self.mq_prev_ns {
            if time < prev {
                return Err(format!(
                    "arrival time {time} ns is before the previous request's {prev} ns (MQSim requires non-decreasing times)"
                ));
            }
        }
        self.mq_prev_ns = Some(time);
        Ok(Some(Req { op, off: lba as u128 * UNIT_512, len: size as u128 * UNIT_512, t_ns: time as i128 }))
    }
}

pub(super) fn parse_disksim(t: &str) -> std::result::Result<Option<Req>, String> {
    let f: Vec<&str> = t.split_whitespace().collect();
    if f.len() != 5 {
        return Err(format!("expected 5 whitespace-separated fields (time_ms devno blkno size flags_hex), got {}", f.len()));
    }
    let ms: f64 = f[0].parse().map_err(|_| format!("time {:?} is not a number of milliseconds", shorten(f[0])))?;
    if !ms.is_finite() || ms.abs() > 1e18 {
        return Err(format!("time {:?} is not a finite number of milliseconds", shorten(f[0])));
    }
    if f[1].parse::<i64>().is_err() {
        return Err(format!("device number {:?} is not an integer", shorten(f[1])));
    }
    let blk: u64 = uint(f[2], "block number", "512-byte sectors")?;
    let size: u64 = uint(f[3], "size", "512-byte sectors")?;
    let hex = f[4].strip_prefix("0x").or_else(|| f[4].strip_prefix("0X")).unwrap_or(f[4]);
    let flags = match hex.bytes().all(|b| b.is_ascii_hexdigit()) && !hex.is_empty() {
        true => u64::from_str_radix(hex, 16).map_err(|_| format!("flags {:?} do not fit 64 bits", shorten(f[4])))?,
        false => return Err(format!("flags {:?} are not a hexadecimal number (bit 0: 1 = read, 0 = write)", shorten(f[4]))),
    };
    let op = if flags & 1 == 1 { Op::Read } else { Op::Write };
    let t_ns = (ms * 1e6).round() as i128;
    Ok(Some(Req { op, off: blk as u128 * UNIT_512, len: size as u128 * UNIT_512, t_ns }))
}

/// blkparse "sec.nnnnnnnnn" -> ns.
fn blk_time(s: &str) -> Option<i128> {
    let (sec, frac) = s.split_once('.')?;
    if sec.is_empty() || frac.is_empty() || !sec.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sec: u64 = sec.parse().ok()?;
    let mut ns: i128 = 0;
    for b in frac.bytes().chain(std::iter::repeat(b'0')).take(9) {
        ns = ns * 10 + (b - b'0') as i128;
    }
    Some(sec as i128 * 1_000_000_000 + ns)
}

/// An unsigned integer field, or a message naming it and its unit.
fn uint(s: &str, what: &str, unit: &str) -> std::result::Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {:?} is not an unsigned integer ({unit})", shorten(s)));
    }
    s.parse::<u64>().map_err(|_| format!("{what} {:?} does not fit 64 bits ({unit})", shorten(s)))
}

/// At most 40 characters of untrusted input for messages.
fn shorten(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_string()
    } else {
        let mut v: String = s.chars().take(40).collect();
        v.push_str("...");
        v
    }
}
