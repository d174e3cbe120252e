//! The chip: a JEDEC SPI NOR state machine driven one chip-select frame at a time.
//!
//! A frame is the bytes clocked while CS# is low. Reads answer byte by byte as the bytes arrive;
//! writes, erases and register writes are latched and start when CS# goes high (as on the real
//! part), after which the chip is busy (WIP = 1) for the datasheet duration in *simulated* time.
//! Simulated time advances only by the bytes clocked (at the SPI clock, 8 clocks per byte on one
//! data line, 4 on two, 2 on four) and by explicit `advance` calls (a host's delay); it never
//! sleeps. While busy, every command but the status reads is ignored, as the datasheets say.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::parts::{Part, Registers, TimingMode, SECTOR_BYTES};
use crate::sfdp;
use crate::Error;

mod exec;
mod power;
pub use power::{CutAt, CutReport, WearOut};

/// A bit that reads back a fixed value whatever is programmed or erased (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StuckBit {
    pub addr: u32,
    pub bit: u8,
    pub value: bool,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub timing: TimingMode,
    /// SPI clock the byte-time model uses (serprog's S_SPI_FREQ changes it).
    pub clock_hz: u32,
    pub stuck_bits: Vec<StuckBit>,
    /// Fault injection: an erase of a sector already erased this many times fails (the sector
    /// keeps its contents; the status register does not tell, as on the Winbond parts).
    pub erase_fail_after: Option<u32>,
    /// 4Bh unique ID; default derived from the part name (deterministic).
    pub unique_id: Option<[u8; 8]>,
    /// Seed of the power model's random choices (what an interrupted operation leaves, where
    /// worn cells stick).
    pub power_seed: u64,
    /// What erases past the endurance rating do, and the rating (None: the part's cycles).
    pub wear_out: WearOut,
    pub endurance_cycles: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timing: TimingMode::Typical,
            clock_hz: DEFAULT_CLOCK_HZ,
            stuck_bits: Vec::new(),
            erase_fail_after: None,
            unique_id: None,
            power_seed: 0,
            wear_out: WearOut::Counted,
            endurance_cycles: None,
        }
    }
}

pub const DEFAULT_CLOCK_HZ: u32 = 8_000_000;
/// Frames longer than this keep only their first bytes in the trace.
const TRACE_BYTES_MAX: usize = 32;

/// Counters a firmware test can assert on.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    pub frames: u64,
    pub ignored_busy: u64,
    pub ignored_protected: u64,
    pub ignored_no_wel: u64,
    pub ignored_other: u64,
    pub programs: u64,
    pub program_bytes: u64,
    pub sector_erases: u64,
    pub block32_erases: u64,
    pub block64_erases: u64,
    pub chip_erases: u64,
    pub failed_erases: u64,
    pub status_writes: u64,
    /// Busy time of the program, erase and status-write operations by the datasheet column
    /// (typical, or max with `TimingMode::Max`), whatever the timing mode.
    pub busy_ns_datasheet: u64,
    /// Busy time the chip actually spent in simulated time (less with `instant` or `scale=X`).
    pub busy_ns: u64,
    pub power_cuts: u64,
    pub power_ups: u64,
    /// Frames begun without power (nothing answered them).
    pub frames_unpowered: u64,
    pub interrupted_programs: u64,
    pub interrupted_erases: u64,
    pub interrupted_status_writes: u64,
    /// Bits stuck at 0 by wear-out (`WearOut::BitsStick`).
    pub worn_bits: u64,
}

/// What the running self-timed operation is (suspend needs to know).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Busy {
    Program(Range<u32>),
    Erase(Range<u32>),
    Other,
}

#[derive(Debug, Default, Clone)]
struct Frame {
    active: bool,
    start_ns: u64,
    pos: u32,
    op: u8,
    addr: u32,
    /// Why this frame is ignored (set at the opcode or later); None = valid so far.
    ignored: Option<&'static str>,
    /// Register-write data bytes (at most 3 kept; more makes the frame invalid).
    args: Vec<u8>,
    /// Page program: latched data per column (FFh = leave the bit alone) and how many data
    /// bytes arrived.
    page: Vec<u8>,
    page_bytes_in: u32,
    mosi_head: Vec<u8>,
    miso_head: Vec<u8>,
}

/// An emulated SPI NOR flash chip.
pub struct Flash {
    part: Part,
    opts: Options,
    mem: Vec<u8>,
    sfdp: [u8; sfdp::SFDP_BYTES],
    image: Option<(File, PathBuf)>,
    /// Register file: Winbond SR1, SR2, SR3; Macronix SR, CR, -. `sr` is what the chip uses,
    /// `sr_nv` what it powers up (and resets) to.
    sr: [u8; 3],
    sr_nv: [u8; 3],
    wp_high: bool,
    now_ns: u64,
    clock_rem: u64,
    busy_until_ns: u64,
    /// WEL stays set while a program/erase/WRSR runs and clears when it completes.
    wel_clears_when_ready: bool,
    busy_kind: Busy,
    /// A suspended program/erase and the busy time it still needs.
    suspended: Option<(Busy, u64)>,
    /// After release from power-down or a reset, commands are ignored until this time.
    ready_at_ns: u64,
    powered_down: bool,
    volatile_armed: bool,
    reset_enabled: bool,
    erase_counts: Vec<u32>,
    stuck: BTreeMap<u32, (u8, u8)>,
    unique_id: [u8; 8],
    stats: Stats,
    frame: Frame,
    trace: Option<BufWriter<File>>,
    source: String,
    /// Write-through deferred until [`Flash::write_back`] (serprog answers first).
    defer_write_through: bool,
    pending_writes: Vec<Range<u32>>,
    power: power::Power,
}

const WIP: u8 = 0x01;
const WEL: u8 = 0x02;

impl Flash {
    /// A chip with erased (FFh) contents, or the contents of `image` (created erased if it does
    /// not exist; it must be exactly the part's size if it does). With an image every program
    /// and erase is written through to the file as it starts.
    pub fn new(part: Part, image: Option<&Path>, opts: Options) -> Result<Flash, Error> {
        if opts.clock_hz == 0 {
            return Err(Error::Invalid("SPI clock must be > 0 Hz".into()));
        }
        let size = part.size_bytes as usize;
        let (mem, image) = match image {
            None => (vec![0xFFu8; size], None),
            Some(path) => {
                let exists = path.exists();
                let mut f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
                let mut mem = vec![0xFFu8; size];
                if exists {
                    let len = f.metadata().map_err(|e| Error::Io(format!("{}: {e}", path.display())))?.len();
                    if len != size as u64 {
                        return Err(Error::Invalid(format!("{}: image is {len} bytes but {} has {size}", path.display(), part.name)));
                    }
                    f.read_exact(&mut mem).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
                } else {
                    f.write_all_at(&mem, 0).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
                }
                (mem, Some((f, path.to_path_buf())))
            }
        };
        let mut stuck = BTreeMap::new();
        for s in &opts.stuck_bits {
            if s.addr >= part.size_bytes || s.bit > 7 {
                return Err(Error::Invalid(format!("stuck bit {}:{} outside the {}-byte array", s.addr, s.bit, part.size_bytes)));
            }
            let e: &mut (u8, u8) = stuck.entry(s.addr).or_insert((0xFF, 0x00));
            if s.value {
                e.1 |= 1 << s.bit;
            } else {
                e.0 &= !(1 << s.bit);
            }
        }
        let unique_id = opts.unique_id.unwrap_or_else(|| {
            // FNV-1a of the part name: fixed per part, different between parts.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in part.name.bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
            h.to_be_bytes()
        });
        let sectors = (part.size_bytes / SECTOR_BYTES) as usize;
        // Non-volatile status bits live next to the image (IMAGE.status: 3 bytes), so block
        // protection set by one run is still there in the next, as on a real chip.
        let mut sr_nv = part.sr_default;
        if let Some((_, p)) = image.as_ref() {
            let sp = status_path(p);
            if let Ok(b) = std::fs::read(&sp) {
                if b.len() != 3 {
                    return Err(Error::Invalid(format!("{}: expected 3 status bytes, found {}", sp.display(), b.len())));
                }
                sr_nv = [b[0] & !(WIP | WEL), b[1], b[2]];
            }
        }
        let opts_seed = opts.power_seed;
        let mut f = Flash {
            sfdp: sfdp::image(&part),
            sr: sr_nv,
            sr_nv,
            part,
            opts,
            mem,
            image,
            wp_high: true,
            now_ns: 0,
            clock_rem: 0,
            busy_until_ns: 0,
            wel_clears_when_ready: false,
            busy_kind: Busy::Other,
            suspended: None,
            ready_at_ns: 0,
            powered_down: false,
            volatile_armed: false,
            reset_enabled: false,
            erase_counts: vec![0; sectors],
            stuck,
            unique_id,
            stats: Stats::default(),
            frame: Frame::default(),
            trace: None,
            source: "host".into(),
            defer_write_through: false,
            pending_writes: Vec::new(),
            power: power::Power::new(opts_seed),
        };
        // Stuck bits are a property of the cells: apply them to the loaded contents too.
        let addrs: Vec<u32> = f.stuck.keys().copied().collect();
        for a in addrs {
            f.apply_stuck(a..a + 1);
        }
        Ok(f)
    }

    pub fn part(&self) -> &Part {
        &self.part
    }
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    pub fn busy(&self) -> bool {
        self.now_ns < self.busy_until_ns
    }
    pub fn busy_until_ns(&self) -> u64 {
        self.busy_until_ns
    }
    pub fn clock_hz(&self) -> u32 {
        self.opts.clock_hz
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn erase_counts(&self) -> &[u32] {
        &self.erase_counts
    }
    /// Sectors erased more often than the endurance rating.
    pub fn sectors_beyond_endurance(&self) -> usize {
        let limit = self.endurance();
        self.erase_counts.iter().filter(|&&c| c > limit).count()
    }
    /// Erases each sector is rated for (the part's, or the override in [`Options`]).
    pub fn endurance(&self) -> u32 {
        self.opts.endurance_cycles.unwrap_or(self.part.endurance_cycles)
    }
    /// The array as it is (a debugger's view; not a SPI transaction, takes no time).
    pub fn contents(&self) -> &[u8] {
        &self.mem
    }
    /// Register file (SR1, SR2, SR3 or SR, CR, 0) without WIP.
    pub fn registers(&self) -> [u8; 3] {
        let mut r = self.sr;
        if self.wel_clears_when_ready && !self.busy() {
            r[0] &= !WEL;
        }
        r
    }

    /// Apply what completed in the meantime (WEL clears at the end of a program/erase/WRSR).
    fn settle(&mut self) {
        if self.wel_clears_when_ready && !self.busy() {
            self.sr[0] &= !WEL;
            self.wel_clears_when_ready = false;
        }
    }
    pub fn sfdp(&self) -> &[u8] {
        &self.sfdp
    }
    pub fn protected_range(&self) -> Range<u32> {
        self.part.protected_range(&self.sr)
    }

    /// The /WP pin level (true = high = writes to a protected status register allowed).
    pub fn set_wp(&mut self, high: bool) {
        self.wp_high = high;
    }
    pub fn set_clock_hz(&mut self, hz: u32) -> Result<(), Error> {
        if hz == 0 {
            return Err(Error::Invalid("SPI clock must be > 0 Hz".into()));
        }
        self.opts.clock_hz = hz;
        Ok(())
    }
    /// Who the trace names as the sender of the following frames.
    pub fn set_source(&mut self, who: &str) {
        self.source = who.to_string();
    }

    /// Let simulated time pass (a host's delay between frames).
    pub fn advance(&mut self, ns: u64) {
        self.now_ns = self.now_ns.saturating_add(ns);
        if let Some(t) = self.power.cut_ns.filter(|&t| t <= self.now_ns) {
            self.cut(t);
        }
        if let Some(t) = self.trace.as_mut() {
            let _ = writeln!(t, "{}", serde_json::json!({"t_ns": self.now_ns - ns, "src": self.source, "advance_ns": ns}));
        }
    }

    /// Write a trace of every frame (JSON lines, simulated timestamps) to `path`.
    pub fn trace_to(&mut self, path: &Path) -> Result<(), Error> {
        let f = File::create(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        self.trace = Some(BufWriter::new(f));
        Ok(())
    }

    /// Defer the image write of each program and erase until [`Flash::write_back`] (a server
    /// sends its answer first and writes while the client reads it; it calls `write_back`
    /// before it answers the next command). Turning it off writes back what is pending.
    pub fn set_deferred_write_through(&mut self, on: bool) {
        if !on {
            self.write_back();
        }
        self.defer_write_through = on;
    }

    /// Write the deferred program and erase ranges to the image.
    pub fn write_back(&mut self) {
        let pending = std::mem::take(&mut self.pending_writes);
        let deferred = std::mem::replace(&mut self.defer_write_through, false);
        for r in pending {
            self.write_through(r);
        }
        self.defer_write_through = deferred;
    }

    /// Flush the trace and the image to the OS (and the image to disk).
    pub fn flush(&mut self) -> Result<(), Error> {
        self.write_back();
        if let Some(t) = self.trace.as_mut() {
            t.flush().map_err(|e| Error::Io(format!("trace: {e}")))?;
        }
        if let Some((f, p)) = self.image.as_ref() {
            f.sync_data().map_err(|e| Error::Io(format!("{}: {e}", p.display())))?;
        }
        Ok(())
    }

    /// A copy of the chip as it is now (array, registers, time, what runs, power), without its
    /// image file or trace: a power-cut campaign forks the chip at each cut point.
    pub fn snapshot(&self) -> Flash {
        Flash {
            part: self.part.clone(),
            opts: self.opts.clone(),
            mem: self.mem.clone(),
            sfdp: self.sfdp,
            image: None,
            sr: self.sr,
            sr_nv: self.sr_nv,
            wp_high: self.wp_high,
            now_ns: self.now_ns,
            clock_rem: self.clock_rem,
            busy_until_ns: self.busy_until_ns,
            wel_clears_when_ready: self.wel_clears_when_ready,
            busy_kind: self.busy_kind.clone(),
            suspended: self.suspended.clone(),
            ready_at_ns: self.ready_at_ns,
            powered_down: self.powered_down,
            volatile_armed: self.volatile_armed,
            reset_enabled: self.reset_enabled,
            erase_counts: self.erase_counts.clone(),
            stuck: self.stuck.clone(),
            unique_id: self.unique_id,
            stats: self.stats.clone(),
            frame: self.frame.clone(),
            trace: None,
            source: self.source.clone(),
            defer_write_through: false,
            pending_writes: Vec::new(),
            power: self.power.clone(),
        }
    }

    /// Clock `out.len()` bytes in the current frame (MOSI = FFh), filling `out` with what the
    /// chip drives: a read's data phase at memory speed.
    pub fn clock_read(&mut self, out: &mut [u8]) {
        let mut at = 0;
        let mut chunk = Vec::new();
        while at < out.len() {
            chunk.clear();
            let n = self.bulk_read(out.len() - at, &mut chunk);
            if n == 0 {
                out[at] = self.clock(0xFF);
                at += 1;
            } else {
                out[at..at + n].copy_from_slice(&chunk);
                at += n;
            }
        }
    }

    /// One whole frame: CS# low, clock `mosi` (full duplex), CS# high. Returns MISO, one byte per
    /// byte sent.
    pub fn transfer(&mut self, mosi: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(mosi.len());
        self.begin();
        for &b in mosi {
            out.push(self.clock(b));
        }
        self.end();
        out
    }

    /// One frame the serprog way: send `write`, then clock `read_len` more bytes (MOSI = FFh) and
    /// append what the chip drove to `out`.
    pub fn transfer_write_read(&mut self, write: &[u8], read_len: usize, out: &mut Vec<u8>) {
        self.begin();
        for &b in write {
            self.clock(b);
        }
        let mut left = read_len;
        while left > 0 {
            let n = self.bulk_read(left, out);
            if n == 0 {
                out.push(self.clock(0xFF));
                left -= 1;
            } else {
                left -= n;
            }
        }
        self.end();
    }

    /// CS# low.
    pub fn begin(&mut self) {
        if self.frame.active {
            self.end();
        }
        self.frame = Frame { active: true, start_ns: self.now_ns, page: Vec::new(), ..Frame::default() };
        self.power_frame_begins();
    }

    fn tick(&mut self, clocks: u64) {
        let num = clocks.saturating_mul(1_000_000_000).saturating_add(self.clock_rem);
        self.now_ns = self.now_ns.saturating_add(num / self.opts.clock_hz as u64);
        self.clock_rem = num % self.opts.clock_hz as u64;
        if let Some(t) = self.power.cut_ns.filter(|&t| t <= self.now_ns) {
            self.cut(t);
        }
    }

    fn supported(&self, op: u8) -> bool {
        let winbond = self.part.registers == Registers::Winbond;
        match op {
            0x06 | 0x04 | 0x05 | 0x01 | 0x15 | 0x03 | 0x0B | 0x02 | 0x20 | 0x52 | 0xD8 | 0x60 | 0xC7 | 0x9F | 0x5A | 0xB9 | 0xAB | 0x90
            | 0x66 | 0x99 => true,
            0x35 | 0x31 | 0x11 | 0x50 => winbond,
            0x3B => self.part.dual_output,
            0x6B => self.part.quad_output,
            0x4B => self.part.has_unique_id,
            0x75 | 0x7A => self.part.suspend_ns.is_some(),
            _ => false,
        }
    }

    fn allowed_while_busy(&self, op: u8) -> bool {
        match self.part.registers {
            Registers::Winbond => matches!(op, 0x05 | 0x35 | 0x15 | 0x75),
            Registers::Macronix => op == 0x05,
        }
    }

    fn qe(&self) -> bool {
        match self.part.registers {
            Registers::Winbond => self.sr[1] & 0x02 != 0,
            Registers::Macronix => self.sr[0] & 0x40 != 0,
        }
    }

    /// Clock one byte in, one byte out.
    pub fn clock(&mut self, mosi: u8) -> u8 {
        if !self.frame.active {
            self.begin();
        }
        self.settle();
        let pos = self.frame.pos;
        let mut clocks = 8u64;
        let out = if pos == 0 {
            self.opcode(mosi);
            0xFF
        } else if self.frame.ignored.is_some() {
            0xFF
        } else {
            self.data_byte(pos, mosi, &mut clocks)
        };
        if self.frame.mosi_head.len() < TRACE_BYTES_MAX {
            self.frame.mosi_head.push(mosi);
            self.frame.miso_head.push(out);
        }
        self.frame.pos = self.frame.pos.saturating_add(1);
        self.tick(clocks);
        out
    }

    /// A frame's first byte: take the opcode, or say why the frame is ignored.
    fn opcode(&mut self, mosi: u8) {
        self.frame.op = mosi;
        let why = if self.frame.ignored.is_some() {
            self.frame.ignored
        } else if !self.power.on {
            Some("no power")
        } else if self.now_ns < self.ready_at_ns {
            Some("not ready (power-up or reset recovery)")
        } else if self.now_ns < self.power.writes_at_ns && power::is_write_op(mosi) {
            Some("write command before tPUW (power-up)")
        } else if self.powered_down && mosi != 0xAB {
            Some("deep power-down")
        } else if self.busy() && !self.allowed_while_busy(mosi) {
            Some("busy")
        } else if !self.supported(mosi) {
            Some("unknown opcode")
        } else if mosi == 0x6B && !self.qe() {
            Some("quad read with QE = 0")
        } else if self.suspended.as_ref().is_some_and(|(kind, _)| match mosi {
            // While suspended: no erase, no status write, no second suspend, and no program
            // during a program suspend.
            0x20 | 0x52 | 0xD8 | 0x60 | 0xC7 | 0x01 | 0x31 | 0x11 | 0x50 | 0x75 => true,
            0x02 => matches!(kind, Busy::Program(_)),
            _ => false,
        }) {
            Some("not allowed while suspended")
        } else {
            None
        };
        if why == Some("busy") {
            self.stats.ignored_busy += 1;
        } else if why.is_some() {
            self.stats.ignored_other += 1;
        }
        self.frame.ignored = why;
    }

    /// A byte after the opcode: what the chip drives on MISO (`clocks`: clocks the byte takes).
    fn data_byte(&mut self, pos: u32, mosi: u8, clocks: &mut u64) -> u8 {
        let op = self.frame.op;
        match op {
            0x05 => self.registers()[0] | if self.busy() { WIP } else { 0 },
            0x35 => self.sr[1],
            0x15 => match self.part.registers {
                Registers::Winbond => self.sr[2],
                Registers::Macronix => self.sr[1],
            },
            0x9F => self.part.jedec_id.get(pos as usize - 1).copied().unwrap_or(0x00),
            0x03 | 0x0B | 0x3B | 0x6B | 0x5A => {
                let dummy = if op == 0x03 { 0 } else { 1 };
                if pos <= 3 {
                    self.frame.addr = (self.frame.addr << 8) | mosi as u32;
                    0xFF
                } else if pos < 4 + dummy {
                    0xFF
                } else {
                    let i = self.frame.addr as u64 + (pos - 4 - dummy) as u64;
                    *clocks = match op {
                        0x3B => 4,
                        0x6B => 2,
                        _ => 8,
                    };
                    if op == 0x5A {
                        self.sfdp.get(i as usize).copied().unwrap_or(0xFF)
                    } else {
                        self.mem[(i % self.part.size_bytes as u64) as usize]
                    }
                }
            }
            0x4B => {
                if pos <= 4 {
                    0xFF
                } else {
                    self.unique_id.get(pos as usize - 5).copied().unwrap_or(0xFF)
                }
            }
            0xAB => {
                if pos <= 3 {
                    0xFF
                } else {
                    self.part.device_id
                }
            }
            0x90 => {
                if pos <= 3 {
                    self.frame.addr = (self.frame.addr << 8) | mosi as u32;
                    0xFF
                } else {
                    self.part.rems_id[((pos - 4 + (self.frame.addr & 1)) % 2) as usize]
                }
            }
            0x02 => {
                if pos <= 3 {
                    self.frame.addr = (self.frame.addr << 8) | mosi as u32;
                } else {
                    let page = self.part.page_bytes;
                    if self.frame.page.is_empty() {
                        self.frame.page = vec![0xFF; page as usize];
                    }
                    // Past the page end the column wraps to the page start; later bytes
                    // replace earlier ones for the same column.
                    let col = (self.frame.addr + (pos - 4)) % page;
                    self.frame.page[col as usize] = mosi;
                    self.frame.page_bytes_in += 1;
                }
                0xFF
            }
            0x20 | 0x52 | 0xD8 => {
                if pos <= 3 {
                    self.frame.addr = (self.frame.addr << 8) | mosi as u32;
                } else {
                    self.frame.ignored = Some("CS# not raised after the address");
                    self.stats.ignored_other += 1;
                }
                0xFF
            }
            0x01 | 0x31 | 0x11 => {
                let max = if op == 0x01 { 2 } else { 1 };
                if self.frame.args.len() < max {
                    self.frame.args.push(mosi);
                } else {
                    self.frame.ignored = Some("too many status bytes");
                    self.stats.ignored_other += 1;
                }
                0xFF
            }
            // Single-byte commands: any further byte means CS# was not raised in time.
            _ => {
                self.frame.ignored = Some("CS# not raised after the opcode");
                self.stats.ignored_other += 1;
                0xFF
            }
        }
    }

    /// Fast path for the data phase of a memory read: copy up to `n` bytes at once. Returns how
    /// many were produced (0 if the frame is not in a read data phase).
    fn bulk_read(&mut self, n: usize, out: &mut Vec<u8>) -> usize {
        let fr = &self.frame;
        let (dummy, clocks) = match fr.op {
            0x03 => (0, 8),
            0x0B => (1, 8),
            0x3B => (1, 4),
            0x6B => (1, 2),
            _ => return 0,
        };
        if !fr.active || fr.ignored.is_some() || fr.pos < 4 + dummy || fr.mosi_head.len() < TRACE_BYTES_MAX {
            return 0;
        }
        let size = self.part.size_bytes as u64;
        let mut i = (fr.addr as u64 + (fr.pos - 4 - dummy) as u64) % size;
        let mut left = n;
        while left > 0 {
            let take = left.min((size - i) as usize);
            out.extend_from_slice(&self.mem[i as usize..i as usize + take]);
            left -= take;
            i = (i + take as u64) % size;
        }
        self.frame.pos = self.frame.pos.saturating_add(n as u32);
        self.tick(clocks * n as u64);
        n
    }

    /// CS# high: latched commands start.
    pub fn end(&mut self) {
        if !self.frame.active {
            return;
        }
        self.frame.active = false;
        self.stats.frames += 1;
        let op = self.frame.op;
        let pos = self.frame.pos;
        let was_reset_enable = self.reset_enabled;
        self.reset_enabled = false;
        let result: String = if pos == 0 {
            "empty frame".into()
        } else if let Some(why) = self.frame.ignored {
            format!("ignored: {why}")
        } else {
            self.execute(op, pos, was_reset_enable)
        };
        if self.trace.is_some() {
            self.write_trace(&result);
        }
    }

    fn write_trace(&mut self, result: &str) {
        let fr = &self.frame;
        let hex = |v: &[u8]| v.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join("");
        let line = serde_json::json!({
            "t_ns": fr.start_ns,
            "end_ns": self.now_ns,
            "src": self.source,
            "op": if fr.pos == 0 { String::new() } else { format!("{:02x} {}", fr.op, op_name(fr.op)) },
            "bytes": fr.pos,
            "mosi": hex(&fr.mosi_head),
            "miso": hex(&fr.miso_head),
            "result": result,
        });
        if let Some(t) = self.trace.as_mut() {
            let _ = writeln!(t, "{line}");
        }
    }
}

/// Where the non-volatile status registers of an image are kept.
pub fn status_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_os_string();
    s.push(".status");
    PathBuf::from(s)
}

fn overlaps(a: &Range<u32>, b: Range<u32>) -> bool {
    a.start < b.end && b.start < a.end
}

/// The datasheet mnemonic of an opcode (for traces).
pub fn op_name(op: u8) -> &'static str {
    match op {
        0x06 => "WREN",
        0x04 => "WRDI",
        0x05 => "RDSR",
        0x35 => "RDSR2",
        0x15 => "RDSR3/RDCR",
        0x01 => "WRSR",
        0x31 => "WRSR2",
        0x11 => "WRSR3",
        0x50 => "VWREN",
        0x03 => "READ",
        0x0B => "FAST_READ",
        0x3B => "DREAD",
        0x6B => "QREAD",
        0x02 => "PP",
        0x20 => "SE",
        0x52 => "BE32",
        0xD8 => "BE64",
        0x60 | 0xC7 => "CE",
        0x9F => "RDID",
        0x5A => "RDSFDP",
        0x4B => "RUID",
        0xB9 => "DP",
        0xAB => "RES",
        0x90 => "REMS",
        0x66 => "RSTEN",
        0x99 => "RST",
        0x75 => "SUSPEND",
        0x7A => "RESUME",
        _ => "?",
    }
}
