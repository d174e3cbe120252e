//! Power: cuts at a chip-select frame or at a simulated time, the state an interrupted program,
//! erase or status write leaves, power-up, and wear-out past the endurance rating.
//!
//! The model (docs/case-studies/spi-nor.md, "Power cuts", says where each choice comes from):
//! - A cut scheduled at frame N happens as frame N begins (that frame is never seen); a cut at a
//!   simulated time happens when the clocked bytes or a host's delay reach it, in the middle of a
//!   frame if one is open (the frame is then lost: CS# high without power starts nothing).
//! - Without power the chip drives nothing: MISO reads FFh (the line's pull-up) and no frame
//!   executes.
//! - A page program interrupted after a fraction f of its busy time leaves each bit it was
//!   turning 0 at 0 with probability f (seeded), others as they were: program pulses move cells
//!   one by one, so what a cut leaves is a subset of the intended zeros.
//! - A sector, block or chip erase is modelled as NOR erase algorithms run it: a pre-program
//!   phase (the first tenth of the busy time) that drives 1 bits to 0, then erase pulses that
//!   drive bits to 1. A cut in the first phase leaves each 1 bit at 0 with probability
//!   f / 0.1; a cut in the second leaves every bit at 0, then each at 1 with probability
//!   (f - 0.1) / 0.9. Either way the sector is neither erased nor intact (unless it was already
//!   erased and the cut came in the erase phase).
//! - An interrupted non-volatile status write leaves the old or the new register values (the new
//!   with probability f).
//! - Power-up: status registers from their non-volatile copy, WEL = 0, WIP = 0, nothing
//!   suspended, not in deep power-down. The chip ignores every command for tVSL and every write
//!   command (WREN included) until tPUW, the part's power-up timing.
//! - Past the endurance rating (erases of a sector, the part's cycles unless overridden), the
//!   chosen [`WearOut`] applies.

use std::ops::Range;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::{Busy, Flash, WEL};

use crate::parts::SECTOR_BYTES;

/// When power fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutAt {
    /// As the N-th chip-select frame after the plan is made begins (1 = the next frame).
    Frame(u64),
    /// When simulated time reaches this many nanoseconds.
    TimeNs(u64),
}

impl CutAt {
    /// A frame drawn uniformly from 1..=frames with `seed` (the same seed, the same frame).
    pub fn random_frame(seed: u64, frames: u64) -> CutAt {
        CutAt::Frame(Pcg64Mcg::seed_from_u64(seed).gen_range(1..=frames.max(1)))
    }
}

/// What erasing a sector past its endurance rating does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum WearOut {
    /// Nothing: the erase counts are kept and reported (the default).
    #[default]
    Counted,
    /// The erase fails: the sector keeps its contents, the status register does not say so.
    EraseFails,
    /// Each erase past the rating leaves one more bit of the sector stuck at 0 (seeded place):
    /// the cell no longer erases, so programs and erases around it still work.
    BitsStick,
}

impl WearOut {
    pub fn parse(s: &str) -> Result<WearOut, crate::Error> {
        match s {
            "counted" | "none" => Ok(WearOut::Counted),
            "erase-fails" => Ok(WearOut::EraseFails),
            "bits-stick" => Ok(WearOut::BitsStick),
            _ => Err(crate::Error::Invalid(format!("wear-out {s:?}: expected counted, erase-fails or bits-stick"))),
        }
    }
}

/// What a cut interrupted (for reports and replay).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CutReport {
    /// Simulated time of the cut and the number of frames begun before it.
    pub t_ns: u64,
    pub frame: u64,
    /// "program", "erase", "status write" or "" (nothing was running).
    pub interrupted: &'static str,
    pub range: Option<(u32, u32)>,
    /// Share of the operation's busy time that had passed.
    pub fraction: f64,
    /// Bits of the range that differ from what the operation would have left.
    pub bits_short: u64,
}

/// A program, erase or status write that has not finished: what it started from.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    kind: OpKind,
    range: Range<u32>,
    before: Vec<u8>,
    start_ns: u64,
    dur_ns: u64,
    /// Set while the operation is suspended: the busy time it had had.
    paused_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Program,
    Erase,
    /// Non-volatile status registers: `before` holds the old three bytes.
    Status,
}

/// The power side of a chip.
#[derive(Debug, Clone)]
pub(super) struct Power {
    pub(super) on: bool,
    plan: Option<CutAt>,
    /// The frame count at which a `Frame` plan fires.
    cut_frame: u64,
    pub(super) cut_ns: Option<u64>,
    pub(super) frames_begun: u64,
    pub(super) in_flight: Option<InFlight>,
    /// Write commands are ignored until this time (tPUW after power-up).
    pub(super) writes_at_ns: u64,
    seed: u64,
    pub(super) last: Option<CutReport>,
}

impl Power {
    pub(super) fn new(seed: u64) -> Power {
        Power { on: true, plan: None, cut_frame: 0, cut_ns: None, frames_begun: 0, in_flight: None, writes_at_ns: 0, seed, last: None }
    }

    /// A generator for the n-th random choice of this chip: the same seed and history, the same
    /// draws.
    fn rng(&self, salt: u64) -> Pcg64Mcg {
        Pcg64Mcg::seed_from_u64(self.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

/// Opcodes that write: ignored from power-up until tPUW.
pub(super) fn is_write_op(op: u8) -> bool {
    matches!(op, 0x06 | 0x02 | 0x20 | 0x52 | 0xD8 | 0x60 | 0xC7 | 0x01 | 0x31 | 0x11 | 0x50)
}

/// Each bit of `mask` with probability `p`.
fn random_bits(rng: &mut Pcg64Mcg, mask: u8, p: f64) -> u8 {
    if mask == 0 || p <= 0.0 {
        return 0;
    }
    if p >= 1.0 {
        return mask;
    }
    let mut out = 0;
    for b in 0..8 {
        if mask & (1 << b) != 0 && rng.gen_bool(p) {
            out |= 1 << b;
        }
    }
    out
}

impl Flash {
    /// Is the chip powered?
    pub fn powered(&self) -> bool {
        self.power.on
    }

    /// Cut power now.
    pub fn power_cut(&mut self) {
        let t = self.now_ns;
        self.cut(t);
    }

    /// Plan a cut (replacing any earlier plan).
    pub fn schedule_power_cut(&mut self, at: CutAt) {
        self.power.plan = Some(at);
        self.power.cut_ns = None;
        match at {
            CutAt::Frame(n) => self.power.cut_frame = self.power.frames_begun.saturating_add(n.max(1)),
            CutAt::TimeNs(t) => {
                self.power.cut_ns = Some(t);
                if self.now_ns >= t {
                    self.cut(self.now_ns);
                }
            }
        }
    }

    pub fn cancel_power_cut(&mut self) {
        self.power.plan = None;
        self.power.cut_ns = None;
    }

    /// The plan not yet carried out.
    pub fn planned_power_cut(&self) -> Option<CutAt> {
        self.power.plan
    }

    /// What the last cut interrupted.
    pub fn last_power_cut(&self) -> Option<&CutReport> {
        self.power.last.as_ref()
    }

    /// Chip-select frames begun since the chip was made (powered or not): what `CutAt::Frame`
    /// counts.
    pub fn frames_begun(&self) -> u64 {
        self.power.frames_begun
    }

    /// Power comes back (after a cut; harmless when powered): the power-up state, with commands
    /// ignored for tVSL and write commands until tPUW.
    pub fn power_up(&mut self) {
        if self.power.on {
            return;
        }
        self.power.on = true;
        self.sr = self.sr_nv;
        self.sr[0] &= !WEL;
        self.busy_until_ns = self.now_ns;
        self.wel_clears_when_ready = false;
        self.busy_kind = Busy::Other;
        self.suspended = None;
        self.powered_down = false;
        self.volatile_armed = false;
        self.reset_enabled = false;
        let t = self.opts.timing;
        self.ready_at_ns = self.now_ns.saturating_add(t.apply(self.part.power_up_ns));
        self.power.writes_at_ns = self.now_ns.saturating_add(t.apply(self.part.power_up_write_ns));
        self.stats.power_ups += 1;
    }

    /// A frame begins: a planned frame cut fires first.
    pub(super) fn power_frame_begins(&mut self) {
        self.power.frames_begun += 1;
        if self.power.plan.is_some_and(|p| matches!(p, CutAt::Frame(_))) && self.power.frames_begun >= self.power.cut_frame {
            self.cut(self.now_ns);
        }
        if !self.power.on {
            self.stats.frames_unpowered += 1;
        }
    }

    /// Power fails at simulated time `t` (<= now): whatever runs stops where it is.
    pub(super) fn cut(&mut self, t: u64) {
        self.power.plan = None;
        self.power.cut_ns = None;
        if !self.power.on {
            return;
        }
        self.power.on = false;
        self.stats.power_cuts += 1;
        if self.frame.active {
            self.frame.ignored = Some("power lost");
        }
        let mut report = CutReport { t_ns: t, frame: self.power.frames_begun, interrupted: "", range: None, fraction: 0.0, bits_short: 0 };
        if let Some(op) = self.power.in_flight.take() {
            let elapsed = op.paused_ns.unwrap_or_else(|| t.saturating_sub(op.start_ns));
            if elapsed < op.dur_ns {
                let f = elapsed as f64 / op.dur_ns as f64;
                report.fraction = f;
                report.range = Some((op.range.start, op.range.end));
                report.bits_short = self.leave_partial(&op, f);
                report.interrupted = match op.kind {
                    OpKind::Program => "program",
                    OpKind::Erase => "erase",
                    OpKind::Status => "status write",
                };
            }
        }
        self.busy_until_ns = self.now_ns;
        self.power.last = Some(report);
    }

    /// An operation of `dur_ns` busy time starts on `range`: remember what it started from,
    /// `before` (the range's contents, or the old non-volatile status bytes).
    pub(super) fn power_op_starts(&mut self, kind: OpKind, range: Range<u32>, before: Vec<u8>, dur_ns: u64) {
        self.power.in_flight =
            if dur_ns == 0 { None } else { Some(InFlight { kind, range, before, start_ns: self.now_ns, dur_ns, paused_ns: None }) };
    }

    pub(super) fn power_op_suspended(&mut self) {
        let now = self.now_ns;
        if let Some(op) = self.power.in_flight.as_mut() {
            op.paused_ns = Some(now.saturating_sub(op.start_ns));
        }
    }

    pub(super) fn power_op_resumed(&mut self) {
        let now = self.now_ns;
        if let Some(op) = self.power.in_flight.as_mut() {
            if let Some(p) = op.paused_ns.take() {
                op.start_ns = now.saturating_sub(p);
            }
        }
    }

    /// A reset abandons a suspended operation: it stays as it was when suspended.
    pub(super) fn power_op_abandoned(&mut self) {
        if let Some(op) = self.power.in_flight.take() {
            if let Some(p) = op.paused_ns {
                if p < op.dur_ns {
                    self.leave_partial(&op, p as f64 / op.dur_ns as f64);
                }
            }
        }
    }

    /// Rewrite an interrupted operation's range as the model says a cut at fraction `f` leaves
    /// it; returns how many bits differ from the finished operation.
    fn leave_partial(&mut self, op: &InFlight, f: f64) -> u64 {
        let salt = self.stats.power_cuts ^ (op.start_ns << 1);
        let mut rng = self.power.rng(salt);
        let mut short = 0u64;
        match op.kind {
            OpKind::Status => {
                if !rng.gen_bool(f.clamp(0.0, 1.0)) {
                    short = op.before.iter().zip(self.sr_nv.iter()).map(|(a, b)| (a ^ b).count_ones() as u64).sum();
                    self.sr_nv.copy_from_slice(&op.before);
                    self.persist_status();
                }
            }
            OpKind::Program | OpKind::Erase => {
                let r = op.range.start as usize..op.range.end as usize;
                for (i, &before) in op.before.iter().enumerate() {
                    let done = self.mem[r.start + i];
                    let now = if op.kind == OpKind::Program {
                        // Bits going 1 -> 0 each made it with probability f.
                        let to_zero = before & !done;
                        before & !random_bits(&mut rng, to_zero, f)
                    } else if f < ERASE_PREPROGRAM {
                        before & !random_bits(&mut rng, before, f / ERASE_PREPROGRAM)
                    } else {
                        random_bits(&mut rng, done, (f - ERASE_PREPROGRAM) / (1.0 - ERASE_PREPROGRAM))
                    };
                    short += (now ^ done).count_ones() as u64;
                    self.mem[r.start + i] = now;
                }
                self.apply_stuck(op.range.clone());
                self.write_through(op.range.clone());
            }
        }
        match op.kind {
            OpKind::Program => self.stats.interrupted_programs += 1,
            OpKind::Erase => self.stats.interrupted_erases += 1,
            OpKind::Status => self.stats.interrupted_status_writes += 1,
        }
        short
    }

    /// Wear-out of one sector just erased `count` times (past the rating): true if the erase
    /// must fail.
    pub(super) fn wear_out(&mut self, sector: u32, count: u32) -> bool {
        match self.opts.wear_out {
            WearOut::Counted => false,
            WearOut::EraseFails => true,
            WearOut::BitsStick => {
                let mut rng = self.power.rng(0x5745_4152 ^ ((sector as u64) << 32) ^ count as u64);
                let addr = sector * SECTOR_BYTES + rng.gen_range(0..SECTOR_BYTES);
                let bit = rng.gen_range(0..8u8);
                let e = self.stuck.entry(addr).or_insert((0xFF, 0x00));
                e.0 &= !(1 << bit);
                e.1 &= !(1 << bit);
                self.stats.worn_bits += 1;
                false
            }
        }
    }
}

/// Share of an erase's busy time spent pre-programming (the model's choice; see the module
/// documentation).
const ERASE_PREPROGRAM: f64 = 0.1;
