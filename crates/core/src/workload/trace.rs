//! Trace replay: block I/O traces in five public text formats, turned into host commands.
//!
//! | name       | one line                                                        | units                    |
//! |------------|-----------------------------------------------------------------|--------------------------|
//! | `msr`      | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`   | FILETIME ticks (100 ns), bytes |
//! | `blkparse` | default `blkparse` text output (`dev cpu seq sec.nsec pid action rwbs sector + n [..]`) | seconds.ns, 512 B sectors |
//! | `fio`      | fio iolog v2 / v3 (`[timestamp] file action [offset length]`)    | µs (v3), bytes           |
//! | `disksim`  | DiskSim ASCII `time devno blkno size flags`                     | ms (float), 512 B sectors, hex flags |
//! | `mqsim`    | MQSim ASCII `time devno lba size type`                          | ns, 512 B sectors        |
//!
//! # Format details
//!
//! - **msr** (SNIA IOTTA "MSR Cambridge"): 7 comma-separated fields. `Type` is `Read` or `Write`
//!   (any case). The original files have no header row; a header on line 1 is skipped when its
//!   first field is not a number. Hostname, DiskNumber and ResponseTime are ignored.
//! - **blkparse**: only lines whose action equals the chosen one (default `Q`, see
//!   [`TraceReader::with_blkparse_action`]) are used; every other line (other actions, the
//!   per-CPU / `Total` summaries, anything that does not look like a default-format event line)
//!   is skipped silently. RWBS: an optional leading `F` (pre-flush), then `D` = trim, `W` = write,
//!   `R` = read; a pre-flush without data (`FN`, or `FWS` with 0 sectors) is a flush. Other ops
//!   (`N` without pre-flush, zoned `Z..`) are skipped. A pre-flush attached to a data request is
//!   not replayed as a separate flush.
//! - **fio**: line 1 must be `fio version 2 iolog` or `fio version 3 iolog`. File actions
//!   (`add`, `open`, `close`) are ignored and all files map onto the one device. `read`,
//!   `write`, `trim` become commands; `sync` / `datasync` become flushes. v2 has no timestamps:
//!   `wait <usec>` advances the replay clock by its offset field in microseconds (fio itself
//!   skips sleeps under 100 µs to absorb its own overhead; the emulator advances exactly).
//!   v3 lines carry a leading timestamp in **microseconds** (current fio writes and replays µs);
//!   `wait` is not allowed in v3 and is reported as an error.
//! - **disksim**: 5 whitespace-separated fields; time is a float in milliseconds; `flags` is
//!   hexadecimal (`10` means 0x10) and bit 0 set means read, clear means write.
//! - **mqsim**: 5 whitespace-separated fields; time in nanoseconds; type `0` is a write,
//!   anything else a read (as MQSim does).
//!
//! Blank lines and lines starting with `#` are skipped in every format (in `blkparse` they are
//! simply non-matching lines).
//!
//! # Addresses
//!
//! Every request becomes a byte range `[offset, offset + length)` (512 B units are converted to
//! bytes first), then device sectors of `sector_bytes`:
//! `lba = offset / sector_bytes`, `sectors = ceil((offset + length) / sector_bytes) - lba`,
//! so a partial sector at either end counts as a whole sector. Requests of length 0 are skipped
//! (flushes have no length and are kept, with `lba = 0, sectors = 0`).
//!
//! A request longer than [`MAX_CMD_SECTORS`] device sectors is an error naming the line.
//! A start address past the end of the device is **wrapped** modulo `logical_sectors` (as MQSim
//! does for addresses beyond a flow's range), and a request that then crosses the end of the
//! device is **truncated** at the end. Traces taken on larger disks therefore fold onto the
//! emulated device instead of failing.
//!
//! # Time
//!
//! `at_ns` is the arrival time relative to the first command of the trace, which gets
//! `Some(0)`. If timestamps go backwards the command gets the previous command's time (clamped,
//! not an error), except in `mqsim`, where times must be non-decreasing as in MQSim itself; a
//! decreasing time there is an error naming the line.
//!
//! # Errors
//!
//! A malformed line yields `Some(Err(Error::Trace { file, line, msg }))` where `msg` says what
//! was expected; the next call continues with the following line. A missing fio header and I/O
//! errors end the trace after being reported. No input makes the reader panic.
//!
//! Lines that are neither blank, comments, a header nor file bookkeeping (fio's add/open/close,
//! v2's wait) and still yield no command are **skipped**: blkparse lines that are not events of
//! the chosen action, requests of length 0, zoned operations. [`TraceReader::skipped`] counts
//! them and keeps the first [`SKIPPED_LINES_KEPT`] line numbers. A trace that ends without one
//! command is an error (`line` 0) saying how many lines it had and which were skipped: an
//! empty file, a file whose lines are all skipped, or a binary file read as text.

mod formats;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{Cmd, Op, Source};
use crate::error::{Error, Result};
use formats::{parse_disksim, FIO_V2_HEADER, FIO_V3_HEADER};

/// The largest single request, in device sectors; longer requests are an error.
pub const MAX_CMD_SECTORS: u32 = 65536;
/// How many skipped line numbers a reader keeps for its report.
pub const SKIPPED_LINES_KEPT: usize = 20;

/// The supported trace formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Msr,
    Blkparse,
    Fio,
    Disksim,
    Mqsim,
}

impl TraceFormat {
    /// Canonical names, as accepted by [`TraceFormat::parse`].
    pub const NAMES: &'static [&'static str] = &["msr", "blkparse", "fio", "disksim", "mqsim"];

    /// A format by name (case-insensitive); `fio-iolog` is an alias of `fio`.
    pub fn parse(name: &str) -> Option<TraceFormat> {
        let n = name.trim().to_ascii_lowercase();
        match n.as_str() {
            "msr" => Some(TraceFormat::Msr),
            "blkparse" => Some(TraceFormat::Blkparse),
            "fio" | "fio-iolog" => Some(TraceFormat::Fio),
            "disksim" => Some(TraceFormat::Disksim),
            "mqsim" => Some(TraceFormat::Mqsim),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Msr => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::Fio => "fio",
            TraceFormat::Disksim => "disksim",
            TraceFormat::Mqsim => "mqsim",
        }
    }
}

/// One parsed request before conversion to device sectors.
struct Req {
    op: Op,
    /// Byte offset and length (unused for flushes).
    off: u128,
    len: u128,
    /// Raw trace time in ns (absolute in the trace's own epoch).
    t_ns: i128,
}

/// Reads a trace and yields host commands (see the module docs).
pub struct TraceReader<R: BufRead> {
    reader: R,
    origin: String,
    format: TraceFormat,
    sector_bytes: u64,
    logical_sectors: u64,
    blk_action: String,
    line: u64,
    buf: Vec<u8>,
    done: bool,
    /// fio: 2 or 3 once the header has been read.
    fio_version: Option<u8>,
    /// fio v2: the replay clock advanced by `wait`, in µs.
    fio_clock_us: u64,
    /// Raw time of the first command.
    first_ns: Option<i128>,
    /// `at_ns` of the previous command.
    last_at: u64,
    /// mqsim: raw time of the previous line.
    mq_prev_ns: Option<u64>,
    /// Commands yielded so far.
    records: u64,
    /// The line being parsed is bookkeeping (a header, a file action, a wait), not a skip.
    benign: bool,
    skipped: u64,
    skipped_lines: Vec<u64>,
    /// Lines reported as errors (a trace that had them was not silently empty).
    errors: u64,
}

/// Opens a trace file (see [`TraceReader::open`]).
pub fn open(path: &Path, format: TraceFormat, sector_bytes: u32, logical_sectors: u64) -> Result<TraceReader<BufReader<File>>> {
    TraceReader::open(path, format, sector_bytes, logical_sectors)
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file; errors name the path. Compressed files are not decoded.
    pub fn open(path: &Path, format: TraceFormat, sector_bytes: u32, logical_sectors: u64) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::Io(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))))?;
        Ok(TraceReader::new(BufReader::new(f), &path.display().to_string(), format, sector_bytes, logical_sectors))
    }
}

impl<R: BufRead> TraceReader<R> {
    /// A reader over `reader`; `origin` names the trace in errors. Commands are in sectors of
    /// `sector_bytes` on a device of `logical_sectors` sectors (both must be non-zero; zero is
    /// treated as 1).
    pub fn new(reader: R, origin: &str, format: TraceFormat, sector_bytes: u32, logical_sectors: u64) -> TraceReader<R> {
        debug_assert!(sector_bytes > 0 && logical_sectors > 0, "sector_bytes and logical_sectors must be non-zero");
        TraceReader {
            reader,
            origin: origin.to_string(),
            format,
            sector_bytes: sector_bytes.max(1) as u64,
            logical_sectors: logical_sectors.max(1),
            blk_action: "Q".to_string(),
            line: 0,
            buf: Vec::new(),
            done: false,
            fio_version: None,
            fio_clock_us: 0,
            first_ns: None,
            last_at: 0,
            mq_prev_ns: None,
            records: 0,
            benign: false,
            skipped: 0,
            skipped_lines: Vec::new(),
            errors: 0,
        }
    }

    /// Commands yielded so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Lines skipped so far, and the numbers of the first [`SKIPPED_LINES_KEPT`] of them.
    pub fn skipped(&self) -> (u64, &[u64]) {
        (self.skipped, &self.skipped_lines)
    }

    /// "12 lines skipped (lines 3, 5, ...)" or "" when none were.
    pub fn skipped_summary(&self) -> String {
        if self.skipped == 0 {
            return String::new();
        }
        let nums: Vec<String> = self.skipped_lines.iter().map(|n| n.to_string()).collect();
        let more = if self.skipped > self.skipped_lines.len() as u64 { ", ..." } else { "" };
        format!(
            "{} line{} skipped (line{} {}{more})",
            self.skipped,
            if self.skipped == 1 { "" } else { "s" },
            if self.skipped == 1 { "" } else { "s" },
            nums.join(", ")
        )
    }

    /// blkparse: replay the events of this action (`Q` by default; `D` and `C` are also common).
    pub fn with_blkparse_action(mut self, a: &str) -> Self {
        self.blk_action = a.trim().to_string();
        self
    }

    /// The format being read.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// The number of the last line read (1-based; 0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn err(&self, msg: String) -> Error {
        Error::Trace { file: self.origin.clone(), line: self.line, msg }
    }

    /// One line: `Ok(None)` if it yields no command.
    fn parse_line(&mut self, raw: &str) -> std::result::Result<Option<Cmd>, String> {
        let mut s = raw;
        if self.line == 1 {
            s = s.strip_prefix('\u{feff}').unwrap_or(s);
        }
        let t = s.trim();
        if self.format == TraceFormat::Fio && self.fio_version.is_none() {
            return self.fio_header(t);
        }
        if t.is_empty() || t.starts_with('#') {
            self.benign = true;
            return Ok(None);
        }
        let req = match self.format {
            TraceFormat::Msr => self.parse_msr(t)?,
            TraceFormat::Blkparse => self.parse_blkparse(t)?,
            TraceFormat::Fio => self.parse_fio(t)?,
            TraceFormat::Disksim => parse_disksim(t)?,
            TraceFormat::Mqsim => self.parse_mqsim(t)?,
        };
        match req {
            Some(r) => self.finish(r),
            None => Ok(None),
        }
    }

    /// Converts to device sectors and stamps the arrival time.
    fn finish(&mut self, r: Req) -> std::result::Result<Option<Cmd>, String> {
        let (lba, sectors) = if r.op == Op::Flush {
            (0, 0)
        } else {
            match self.to_sectors(r.off, r.len)? {
                Some(x) => x,
                None => return Ok(None),
            }
        };
        let first = *self.first_ns.get_or_insert(r.t_ns);
        let rel = r.t_ns.saturating_sub(first);
        let rel = if rel < 0 { 0 } else { rel.min(u64::MAX as i128) as u64 };
        let at = rel.max(self.last_at);
        self.last_at = at;
        Ok(Some(Cmd { op: r.op, lba, sectors, at_ns: Some(at), placement: None }))
    }

    /// Byte range -> (lba, sectors) on the device, wrapped and truncated; None if empty.
    fn to_sectors(&self, off: u128, len: u128) -> std::result::Result<Option<(u64, u32)>, String> {
        if len == 0 {
            return Ok(None);
        }
        let sb = self.sector_bytes as u128;
        let first = off / sb;
        let end = (off + len).div_ceil(sb);
        let n = end - first;
        if n > MAX_CMD_SECTORS as u128 {
            return Err(format!(
                "request of {len} bytes covers {n} sectors of {sb} bytes, more than the limit of {MAX_CMD_SECTORS} sectors per command"
            ));
        }
        let ls = self.logical_sectors as u128;
        let lba = first % ls;
        let n = n.min(ls - lba);
        Ok(Some((lba as u64, n as u32)))
    }
}

impl<R: BufRead> Source for TraceReader<R> {
    fn next_cmd(&mut self) -> Option<Result<Cmd>> {
        loop {
            if self.done {
                return None;
            }
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let n = match self.reader.read_until(b'\n', &mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    self.buf = buf;
                    continue;
                }
                Err(e) => {
                    self.done = true;
                    let e = std::io::Error::new(e.kind(), format!("{}: line {}: {e}", self.origin, self.line + 1));
                    return Some(Err(Error::Io(e)));
                }
            };
            if n == 0 {
                self.done = true;
                if self.format == TraceFormat::Fio && self.fio_version.is_none() {
                    self.line = 1;
                    return Some(Err(
                        self.err(format!("empty file: expected fio iolog header {FIO_V2_HEADER:?} or {FIO_V3_HEADER:?} on line 1"))
                    ));
                }
                if self.records == 0 && self.errors == 0 {
                    let lines = self.line;
                    self.line = 0;
                    let why = if lines == 0 {
                        "the file is empty".to_string()
                    } else if self.skipped > 0 {
                        format!("{}; is it a {} trace?", self.skipped_summary(), self.format.name())
                    } else {
                        "only blank lines, comments or headers".to_string()
                    };
                    return Some(Err(self.err(format!("no valid {} record in {lines} lines: {why}", self.format.name()))));
                }
                return None;
            }
            self.line += 1;
            let text = String::from_utf8_lossy(&buf).into_owned();
            self.buf = buf;
            self.benign = false;
            match self.parse_line(&text) {
                Ok(Some(cmd)) => {
                    self.records += 1;
                    return Some(Ok(cmd));
                }
                Ok(None) => {
                    if !self.benign {
                        self.skipped += 1;
                        if self.skipped_lines.len() < SKIPPED_LINES_KEPT {
                            self.skipped_lines.push(self.line);
                        }
                    }
                    continue;
                }
                Err(msg) => {
                    self.errors += 1;
                    return Some(Err(self.err(msg)));
                }
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Cmd>;
    fn next(&mut self) -> Option<Result<Cmd>> {
        self.next_cmd()
    }
}

/// Fuzzing entry point (fuzz/fuzz_targets/trace.rs and the suite's corpus run): `data` read as
/// a trace of every format, on a device of 4 KiB sectors. Never panics; every command it
/// yields lies inside the device and within the per-command limit.
pub fn fuzz_one(data: &[u8]) {
    const LOGICAL: u64 = 1 << 20;
    for format in [TraceFormat::Msr, TraceFormat::Blkparse, TraceFormat::Fio, TraceFormat::Disksim, TraceFormat::Mqsim] {
        let mut r = TraceReader::new(data, "fuzz", format, 4096, LOGICAL);
        let mut last_at = 0;
        // Each call consumes at least one line, so this ends; the bound keeps it cheap.
        for _ in 0..data.len() + 3 {
            match r.next_cmd() {
                None => break,
                Some(Err(_)) => {}
                Some(Ok(c)) => {
                    assert!(c.lba + c.sectors as u64 <= LOGICAL, "{c:?} outside the device");
                    assert!(c.sectors <= MAX_CMD_SECTORS);
                    let at = c.at_ns.expect("traces stamp arrival times");
                    assert!(at >= last_at, "arrival times never go back");
                    last_at = at;
                }
            }
        }
        assert!(r.next_cmd().is_none(), "the reader ends after its last line");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB_512: u64 = 1 << 21; // 1 GiB of 512 B sectors

    fn reader(text: &str, fmt: TraceFormat, sb: u32, ls: u64) -> TraceReader<&[u8]> {
        TraceReader::new(text.as_bytes(), "t.trace", fmt, sb, ls)
    }

    fn all_ok(r: impl Source) -> Vec<Cmd> {
        let mut r = r;
        let mut v = Vec::new();
        while let Some(c) = r.next_cmd() {
            v.push(c.unwrap_or_else(|e| panic!("unexpected error: {e}")));
        }
        v
    }

    fn c(op: Op, lba: u64, sectors: u32, at: u64) -> Cmd {
        Cmd { op, lba, sectors, at_ns: Some(at), placement: None }
    }

    fn trace_err(e: Error) -> (String, u64, String) {
        match e {
            Error::Trace { file, line, msg } => (file, line, msg),
            other => panic!("expected a trace error, got {other}"),
        }
    }

    #[test]
    fn format_names() {
        for n in TraceFormat::NAMES {
            assert_eq!(TraceFormat::parse(n).map(|f| f.name()), Some(*n));
        }
        assert_eq!(TraceFormat::parse("fio-iolog"), Some(TraceFormat::Fio));
        assert_eq!(TraceFormat::parse("MSR"), Some(TraceFormat::Msr));
        assert_eq!(TraceFormat::parse("spc"), None);
    }

    #[test]
    fn msr_sample() {
        let text = include_str!("../../../../tests/data/traces/sample.msr.csv");
        let v = all_ok(reader(text, TraceFormat::Msr, 512, GIB_512));
        assert_eq!(
            v,
            vec![c(Op::Read, 0, 8, 0), c(Op::Write, 2048, 16, 100_000), c(Op::Read, 1, 3, 250_000), c(Op::Write, 16, 8, 250_000),]
        );
        // 4 KiB device sectors: the unaligned read 1000..2024 lies in sector 0.
        let v = all_ok(reader(text, TraceFormat::Msr, 4096, GIB_512 / 8));
        assert_eq!(v[1], c(Op::Write, 256, 2, 100_000));
        assert_eq!(v[2], c(Op::Read, 0, 1, 250_000));
    }

    #[test]
    fn msr_header_row_is_skipped_only_on_line_1() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n10,hm,0,Write,512,512,5\n";
        assert_eq!(all_ok(reader(text, TraceFormat::Msr, 512, 100)), vec![c(Op::Write, 1, 1, 0)]);
        let text = "10,hm,0,Write,512,512,5\nTimestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n";
        let mut r = reader(text, TraceFormat::Msr, 512, 100);
        assert!(r.next_cmd().unwrap().is_ok());
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 2);
        assert!(msg.starts_with("Timestamp \"Timestamp\" is not an unsigned integer"), "{msg}");
    }

    #[test]
    fn blkparse_sample_uses_q_events_and_skips_summaries() {
        let text = include_str!("../../../../tests/data/traces/sample.blkparse.txt");
        let v = all_ok(reader(text, TraceFormat::Blkparse, 512, GIB_512));
        assert_eq!(
            v,
            vec![
                c(Op::Write, 223490, 8, 0),
                c(Op::Read, 1000, 16, 1_000_000),
                c(Op::Read, 2000, 256, 1_500_000),
                c(Op::Flush, 0, 0, 2_000_000),
                c(Op::Trim, 4096, 2048, 2_500_000),
                c(Op::Write, 5000, 8, 3_000_000),
                c(Op::Flush, 0, 0, 3_200_000),
            ]
        );
    }

    #[test]
    fn blkparse_other_action() {
        let text = include_str!("../../../../tests/data/traces/sample.blkparse.txt");
        let v = all_ok(reader(text, TraceFormat::Blkparse, 512, GIB_512).with_blkparse_action("D"));
        assert_eq!(v, vec![c(Op::Write, 223490, 8, 0)]);
        let v = all_ok(reader(text, TraceFormat::Blkparse, 4096, GIB_512 / 8).with_blkparse_action("C"));
        // 223490 * 512 = 114426880 bytes -> 4 KiB sector 27936 (offset 1024 into it), 4 KiB long -> 2 sectors
        assert_eq!(v, vec![c(Op::Write, 27936, 2, 0)]);
    }

    #[test]
    fn a_trace_without_a_record_is_an_error_naming_its_skipped_lines() {
        for (fmt, text, want) in [
            (TraceFormat::Msr, "", "the file is empty"),
            (TraceFormat::Msr, "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n", "only blank lines"),
            (TraceFormat::Blkparse, "\u{1}\u{2}garbage\n\u{7f}\u{0}\nmore junk here and there ok\n", "3 lines skipped (lines 1, 2, 3)"),
            (TraceFormat::Mqsim, "# comment\n\n", "only blank lines"),
            (TraceFormat::Msr, "1,h,0,Read,0,0,0\n", "1 line skipped (line 1)"),
        ] {
            let mut r = reader(text, fmt, 512, GIB_512);
            let (file, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
            assert_eq!((file.as_str(), line), ("t.trace", 0), "{msg}");
            assert!(msg.contains("no valid") && msg.contains(want), "{fmt:?}: {msg}");
            assert!(r.next_cmd().is_none());
        }
        // With records, skipped lines are counted for the report.
        let text = "junk\n  8,0    3        1     0.000000000   697  Q   W 8 + 8 [x]\nmore junk\n";
        let mut r = reader(text, TraceFormat::Blkparse, 512, GIB_512);
        let mut n = 0;
        while let Some(c) = r.next_cmd() {
            c.unwrap();
            n += 1;
        }
        assert_eq!(n, 1);
        assert_eq!(r.skipped(), (2, &[1u64, 3][..]));
        assert_eq!(r.skipped_summary(), "2 lines skipped (lines 1, 3)");
    }

    #[test]
    fn blkparse_bad_payload_names_the_line() {
        let text = "junk line\n  8,0    3        1     0.000000000   697  Q   W 223490 - 8 [kjournald]\n";
        let mut r = reader(text, TraceFormat::Blkparse, 512, GIB_512);
        let (file, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!((file.as_str(), line), ("t.trace", 2));
        assert!(msg.contains("<sector> + <nsectors>"), "{msg}");
        assert!(r.next_cmd().is_none());
    }

    #[test]
    fn fio_v2_sample() {
        let text = include_str!("../../../../tests/data/traces/sample.fio-v2.log");
        let v = all_ok(reader(text, TraceFormat::Fio, 512, GIB_512));
        assert_eq!(
            v,
            vec![
                c(Op::Write, 0, 8, 0),
                c(Op::Read, 16, 16, 1_000_000),
                c(Op::Trim, 2048, 128, 1_000_000),
                c(Op::Flush, 0, 0, 1_000_000),
                c(Op::Flush, 0, 0, 1_000_000),
                c(Op::Write, 8, 1, 1_500_000),
            ]
        );
    }

    #[test]
    fn fio_v3_sample_timestamps_are_microseconds() {
        let text = include_str!("../../../../tests/data/traces/sample.fio-v3.log");
        let v = all_ok(reader(text, TraceFormat::Fio, 4096, GIB_512 / 8));
        assert_eq!(
            v,
            vec![
                c(Op::Write, 0, 1, 0),
                c(Op::Read, 1, 1, 250_000),
                c(Op::Trim, 0, 2, 1_250_000),
                c(Op::Flush, 0, 0, 1_300_000),
                c(Op::Write, 0, 1, 1_300_000), // timestamp went backwards: clamped
            ]
        );
    }

    #[test]
    fn fio_header_is_required() {
        let mut r = reader("/dev/sda write 0 4096\n", TraceFormat::Fio, 512, 100);
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 1);
        assert!(msg.contains("\"fio version 2 iolog\""), "{msg}");
        assert!(msg.contains("\"fio version 3 iolog\""), "{msg}");
        assert!(r.next_cmd().is_none());
        let mut r = reader("", TraceFormat::Fio, 512, 100);
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 1);
        assert!(msg.contains("fio version 2 iolog"), "{msg}");
        // v3 does not allow wait; v2 needs 2 or 4 fields
        let mut r = reader("fio version 3 iolog\n5 f wait 100 0\n6 f write 0 512\n", TraceFormat::Fio, 512, 100);
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 2);
        assert!(msg.contains("wait"), "{msg}");
        assert_eq!(r.next_cmd().unwrap().unwrap(), c(Op::Write, 0, 1, 0));
        let mut r = reader("fio version 2 iolog\nf write 0\nf frobnicate 0 1\n", TraceFormat::Fio, 512, 100);
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 2);
        assert!(msg.contains("got 3 fields"), "{msg}");
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 3);
        assert!(msg.contains("unknown iolog action \"frobnicate\""), "{msg}");
    }

    #[test]
    fn disksim_sample_flags_are_hex() {
        let text = include_str!("../../../../tests/data/traces/sample.disksim.txt");
        let v = all_ok(reader(text, TraceFormat::Disksim, 512, GIB_512));
        assert_eq!(
            v,
            vec![
                c(Op::Read, 1000, 8, 0),
                c(Op::Write, 2000, 16, 1_500_000),
                c(Op::Read, 3000, 8, 2_250_000),
                c(Op::Write, 4000, 8, 3_000_000),
                c(Op::Write, 5000, 64, 3_000_500),
            ]
        );
        let mut r = reader("0.5 0 10 8 zz\n", TraceFormat::Disksim, 512, GIB_512);
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 1);
        assert!(msg.contains("hexadecimal"), "{msg}");
    }

    #[test]
    fn mqsim_sample() {
        let text = include_str!("../../../../tests/data/traces/sample.mqsim.txt");
        let v = all_ok(reader(text, TraceFormat::Mqsim, 512, GIB_512));
        assert_eq!(v, vec![c(Op::Write, 524288, 16, 0), c(Op::Read, 100, 8, 1000), c(Op::Read, 200, 8, 2000), c(Op::Write, 400, 8, 4000),]);
    }

    #[test]
    fn mqsim_decreasing_time_is_an_error() {
        let text = "100 0 0 8 0\n50 0 8 8 0\n200 0 16 8 1\n";
        let mut r = reader(text, TraceFormat::Mqsim, 512, 1000);
        assert_eq!(r.next_cmd().unwrap().unwrap(), c(Op::Write, 0, 8, 0));
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 2);
        assert!(msg.contains("non-decreasing"), "{msg}");
        assert_eq!(r.next_cmd().unwrap().unwrap(), c(Op::Read, 16, 8, 100));
    }

    #[test]
    fn addresses_wrap_and_truncate_at_the_end() {
        let text = "0 0 1500 8 0\n1 0 996 8 0\n2 0 2996 8 1\n3 0 1000 8 1\n";
        let v = all_ok(reader(text, TraceFormat::Mqsim, 512, 1000));
        assert_eq!(v, vec![c(Op::Write, 500, 8, 0), c(Op::Write, 996, 4, 1), c(Op::Read, 996, 4, 2), c(Op::Read, 0, 8, 3)]);
        // Byte offsets far beyond the device, 4 KiB sectors: 10 GiB + 4 KiB on a 1 GiB device.
        let text = format!("0,h,0,Read,{},8192,1\n", (10u64 << 30) + 4096);
        let v = all_ok(reader(&text, TraceFormat::Msr, 4096, 1 << 18));
        assert_eq!(v, vec![c(Op::Read, 1, 2, 0)]);
        // Largest offsets do not overflow.
        let text = format!("0 0 {} 8 0\n", u64::MAX);
        let v = all_ok(reader(&text, TraceFormat::Mqsim, 4096, 1000));
        assert_eq!(v.len(), 1);
        assert!(v[0].lba + v[0].sectors as u64 <= 1000);
    }

    #[test]
    fn oversized_request_is_an_error_naming_the_line() {
        let text = "0 0 0 65536 0\n1 0 0 65537 0\n2 0 0 8 0\n";
        let mut r = reader(text, TraceFormat::Mqsim, 512, GIB_512);
        assert_eq!(r.next_cmd().unwrap().unwrap().sectors, 65536);
        let e = r.next_cmd().unwrap().unwrap_err();
        assert!(e.to_string().starts_with("t.trace:2: request of"), "{e}");
        assert!(e.to_string().contains("65536"), "{e}");
        assert_eq!(r.next_cmd().unwrap().unwrap().lba, 0);
        // with 4 KiB sectors the same size is fine
        let v = all_ok(reader("0 0 0 65537 0\n", TraceFormat::Mqsim, 4096, GIB_512));
        assert_eq!(v, vec![c(Op::Write, 0, 8193, 0)]);
    }

    #[test]
    fn msr_errors_say_what_was_expected() {
        let text = "1,2,3\n10,hm,0,Rd,0,512,1\n11,hm,0,Read,x,512,1\n12,hm,0,read,0,512,1\n";
        let mut r = reader(text, TraceFormat::Msr, 512, 100);
        let e = r.next_cmd().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.trace:1: expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), got 3"
        );
        let e = r.next_cmd().unwrap().unwrap_err();
        assert_eq!(e.to_string(), "t.trace:2: Type \"Rd\" is not Read or Write");
        let (_, line, msg) = trace_err(r.next_cmd().unwrap().unwrap_err());
        assert_eq!(line, 3);
        assert!(msg.contains("Offset \"x\""), "{msg}");
        assert_eq!(r.next_cmd().unwrap().unwrap(), c(Op::Read, 0, 1, 0));
        assert!(r.next_cmd().is_none());
    }

    #[test]
    fn comments_blank_lines_and_crlf() {
        let text = "# comment\r\n\r\n   \n0.0 0 8 8 1\r\n# x\n";
        assert_eq!(all_ok(reader(text, TraceFormat::Disksim, 512, 100)), vec![c(Op::Read, 8, 8, 0)]);
        let text = "fio version 2 iolog\r\n# c\r\nf add\r\nf write 512 512\r\n";
        assert_eq!(all_ok(reader(text, TraceFormat::Fio, 512, 100)), vec![c(Op::Write, 1, 1, 0)]);
    }

    #[test]
    fn open_names_the_path() {
        let p = Path::new("/nonexistent/ssdlab/trace.csv");
        let e = open(p, TraceFormat::Msr, 512, 100).err().expect("open must fail");
        assert!(e.to_string().contains("/nonexistent/ssdlab/trace.csv"), "{e}");
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/traces/sample.mqsim.txt");
        let r = TraceReader::open(Path::new(dir), TraceFormat::Mqsim, 512, GIB_512).unwrap();
        assert_eq!(r.filter(|x| x.is_ok()).count(), 4);
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
            v[(self.next() % v.len() as u64) as usize]
        }
    }

    /// Random bytes and random mixtures of plausible tokens never panic, and every command
    /// produced lies inside the device with non-decreasing times.
    #[test]
    fn fuzz_never_panics() {
        const TOKENS: &[&str] = &[
            "0",
            "1",
            "7",
            "512",
            "4096",
            "65536",
            "99999999999",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "1.5",
            "0.000000001",
            "1e400",
            "nan",
            "inf",
            "+",
            "-",
            ",",
            ",,",
            "Read",
            "Write",
            "rd",
            "Q",
            "D",
            "C",
            "W",
            "R",
            "FN",
            "FWFS",
            "RA",
            "ZR",
            "N",
            "8,0",
            "259,1",
            "[proc]",
            "[0]",
            "read",
            "write",
            "trim",
            "sync",
            "datasync",
            "wait",
            "add",
            "open",
            "close",
            "/dev/sda",
            "fio version 2 iolog",
            "fio version 3 iolog",
            "#",
            "ff",
            "0x1",
            "zz",
            "\t",
            "é",
            "\u{feff}",
            "CPU0",
            "(8,0):",
            "Total",
            "hm",
            "1,hm,0,Read,0,512,1",
        ];
        let formats = [TraceFormat::Msr, TraceFormat::Blkparse, TraceFormat::Fio, TraceFormat::Disksim, TraceFormat::Mqsim];
        const NUMS: &[&str] = &[
            "0",
            "1",
            "2",
            "8",
            "100",
            "511",
            "512",
            "4096",
            "65536",
            "1048576",
            "33554432",
            "33554433",
            "4294967295",
            "4294967296",
            "999999999",
            "128166372003061629",
            "9223372036854775807",
            "18446744073709551615",
        ];
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut oks = 0;
        for round in 0..3000 {
            let mut data: Vec<u8> = Vec::new();
            if round % 3 == 0 {
                for _ in 0..(rng.next() % 300) {
                    data.push(rng.next() as u8);
                }
            } else {
                if round % 3 == 1 {
                    data.extend_from_slice(rng.pick(&["fio version 2 iolog\n", "fio version 3 iolog\n"]).as_bytes());
                }
                for _ in 0..(rng.next() % 12) {
                    let n = rng.next() % 12;
                    let sep = rng.pick(&[" ", ",", "  ", "\t"]);
                    let line: Vec<&str> = (0..n).map(|_| rng.pick(TOKENS)).collect();
                    data.extend_from_slice(line.join(sep).as_bytes());
                    data.extend_from_slice(rng.pick(&["\n", "\r\n", "\n\n", ""]).as_bytes());
                }
            }
            let lines = data.iter().filter(|&&b| b == b'\n').count() + 2;
            for fmt in formats {
                fuzz_one(&data, fmt, lines, &mut rng);
            }
            // Lines shaped like each format with random (often extreme) numbers.
            for fmt in formats {
                let mut text = String::new();
                if fmt == TraceFormat::Fio {
                    text.push_str(rng.pick(&["fio version 2 iolog\n", "fio version 3 iolog\n"]));
                }
                let v3 = text.contains('3');
                for _ in 0..(rng.next() % 20) {
                    let mut n = || rng.pick(NUMS);
                    let (a, b, c2, d) = (n(), n(), n(), n());
                    let line = match fmt {
                        TraceFormat::Msr => format!("{a},hm,0,{},{b},{c2},{d}", if d.len() % 2 == 0 { "Read" } else { "write" }),
                        TraceFormat::Blkparse => {
                            format!("  8,0 1 {a} {b}.{c2} 9 Q {} {d} + {a} [p]", ["W", "R", "D", "FN", "FWS", "RA"][d.len() % 6])
                        }
                        TraceFormat::Fio if v3 => format!("{a} f {} {b} {c2}", ["read", "write", "trim", "sync", "add"][d.len() % 5]),
                        TraceFormat::Fio => format!("f {} {b} {c2}", ["read", "write", "trim", "sync", "wait"][d.len() % 5]),
                        TraceFormat::Disksim => format!("{a}.{d} 0 {b} {c2} {:x}", d.len()),
                        TraceFormat::Mqsim => format!("{a} 0 {b} {c2} {}", d.len() % 2),
                    };
                    text.push_str(&line);
                    text.push('\n');
                }
                let lines = text.lines().count() + 2;
                oks += fuzz_one(text.as_bytes(), fmt, lines, &mut rng);
            }
        }
        assert!(oks > 3000, "shaped lines produced only {oks} commands");
    }

    /// Reads `data` to the end, checking invariants; returns the number of commands.
    fn fuzz_one(data: &[u8], fmt: TraceFormat, lines: usize, rng: &mut XorShift) -> usize {
        let sb = [512u32, 4096, 1, 3][(rng.next() % 4) as usize];
        let ls = [1u64, 7, 1000, u64::MAX][(rng.next() % 4) as usize];
        let mut r = TraceReader::new(data, "fuzz", fmt, sb, ls).with_blkparse_action(rng.pick(&["Q", "D", "C"]));
        let mut last = 0;
        let mut calls = 0;
        let mut oks = 0;
        while let Some(x) = r.next_cmd() {
            calls += 1;
            assert!(calls <= lines, "reader does not make progress");
            if let Ok(cmd) = x {
                oks += 1;
                assert!(cmd.lba < ls);
                assert!(cmd.lba as u128 + cmd.sectors as u128 <= ls as u128);
                assert!(cmd.sectors <= MAX_CMD_SECTORS);
                let at = cmd.at_ns.unwrap();
                assert!(at >= last);
                last = at;
            }
        }
        oks
    }
}
