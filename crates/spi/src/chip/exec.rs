//! What a frame does when CS# rises: the commands that change the chip (program, erase, status
//! writes, suspend/resume, power-down, reset), their busy time and the array and image updates.

use std::ops::Range;
use std::os::unix::fs::FileExt;

use super::power::OpKind;
use super::{overlaps, status_path, Busy, Flash, WEL};
use crate::parts::{OpTimes, Registers, BLOCK32_BYTES, BLOCK64_BYTES, SECTOR_BYTES};

impl Flash {
    /// A self-timed operation whose datasheet time is `ns` starts: busy for the timing mode's
    /// share of it (counted in the statistics either way). Returns the busy time.
    pub(super) fn start_op(&mut self, ns: u64, kind: Busy) -> u64 {
        let applied = self.opts.timing.apply(ns);
        self.stats.busy_ns_datasheet += ns;
        self.stats.busy_ns += applied;
        self.start_busy(applied, kind);
        applied
    }

    /// WIP for `ns`, WEL cleared when it ends.
    pub(super) fn start_busy(&mut self, ns: u64, kind: Busy) {
        self.busy_until_ns = self.now_ns.saturating_add(ns);
        self.wel_clears_when_ready = true;
        self.busy_kind = kind;
    }

    pub(super) fn execute(&mut self, op: u8, pos: u32, was_reset_enable: bool) -> String {
        self.settle();
        let t = *self.part.times(self.opts.timing);
        let wel = self.sr[0] & WEL != 0;
        match op {
            0x06 => {
                self.sr[0] |= WEL;
                "WEL = 1".into()
            }
            0x04 => {
                self.sr[0] &= !WEL;
                self.volatile_armed = false;
                "WEL = 0".into()
            }
            0x50 => {
                self.volatile_armed = true;
                "volatile status write enabled".into()
            }
            0x01 | 0x31 | 0x11 => self.write_status(op, wel, t.write_status_ns),
            0x02 => self.page_program(pos, wel, &t),
            0x20 | 0x52 | 0xD8 | 0x60 | 0xC7 => self.erase_command(op, pos, wel, &t),
            0xB9 => {
                self.powered_down = true;
                self.ready_at_ns = self.now_ns.saturating_add(self.opts.timing.apply(self.part.power_down_ns));
                "deep power-down".into()
            }
            0xAB => {
                if self.powered_down {
                    self.powered_down = false;
                    self.ready_at_ns = self.now_ns.saturating_add(self.opts.timing.apply(self.part.release_ns));
                    "released from deep power-down".into()
                } else {
                    "device ID".into()
                }
            }
            0x75 => self.suspend(),
            0x7A => self.resume(),
            0x66 => {
                self.reset_enabled = true;
                "reset enabled".into()
            }
            0x99 => self.software_reset(was_reset_enable),
            _ => "read".into(),
        }
    }

    /// 02h: program the latched page.
    fn page_program(&mut self, pos: u32, wel: bool, t: &OpTimes) -> String {
        if pos < 5 {
            self.stats.ignored_other += 1;
            return "ignored: no data bytes".into();
        }
        if !wel {
            self.stats.ignored_no_wel += 1;
            return "ignored: WEL = 0".into();
        }
        let page = self.part.page_bytes;
        let addr = self.frame.addr % self.part.size_bytes;
        let base = addr - addr % page;
        if overlaps(&self.protected_range(), base..base + page) {
            self.stats.ignored_protected += 1;
            return format!("ignored: page {base:#x} protected");
        }
        if let Some((Busy::Erase(r), _)) = &self.suspended {
            if overlaps(r, base..base + page) {
                self.stats.ignored_other += 1;
                return format!("ignored: page {base:#x} is in the suspended erase");
            }
        }
        let data = std::mem::take(&mut self.frame.page);
        let before = self.mem[base as usize..(base + page) as usize].to_vec();
        for (i, d) in data.iter().enumerate() {
            self.mem[base as usize + i] &= d;
        }
        self.apply_stuck(base..base + page);
        self.write_through(base..base + page);
        let n = self.frame.page_bytes_in.min(page) as u64;
        // A full page takes tPP; a partial one tBP1 + (n - 1) * tBP2, at most tPP.
        let ns = if n >= page as u64 { t.page_program_ns } else { (t.byte_first_ns + (n - 1) * t.byte_next_ns).min(t.page_program_ns) };
        let ns = self.start_op(ns, Busy::Program(base..base + page));
        self.power_op_starts(OpKind::Program, base..base + page, before, ns);
        self.stats.programs += 1;
        self.stats.program_bytes += n;
        format!("program {n} B at {addr:#x}, busy {ns} ns")
    }

    /// 20h, 52h, D8h, 60h/C7h: sector, block or chip erase.
    fn erase_command(&mut self, op: u8, pos: u32, wel: bool, t: &OpTimes) -> String {
        if matches!(op, 0x20 | 0x52 | 0xD8) && pos < 4 {
            self.stats.ignored_other += 1;
            return "ignored: short address".into();
        }
        if !wel {
            self.stats.ignored_no_wel += 1;
            return "ignored: WEL = 0".into();
        }
        let (len, ns) = match op {
            0x20 => (SECTOR_BYTES, t.sector_erase_ns),
            0x52 => (BLOCK32_BYTES, t.block32_erase_ns),
            0xD8 => (BLOCK64_BYTES, t.block64_erase_ns),
            _ => (self.part.size_bytes, t.chip_erase_ns),
        };
        let addr = self.frame.addr % self.part.size_bytes;
        let base = addr - addr % len;
        let range = base..base + len;
        let prot = self.protected_range();
        // Chip erase is refused if any region is protected; the others if theirs is.
        if (len == self.part.size_bytes && !prot.is_empty()) || overlaps(&prot, range.clone()) {
            self.stats.ignored_protected += 1;
            return format!("ignored: {range:#x?} protected");
        }
        let before = self.mem[range.start as usize..range.end as usize].to_vec();
        let failed = self.erase(range.clone());
        self.write_through(range.clone());
        let ns = self.start_op(ns, if len == self.part.size_bytes { Busy::Other } else { Busy::Erase(range.clone()) });
        self.power_op_starts(OpKind::Erase, range.clone(), before, ns);
        match op {
            0x20 => self.stats.sector_erases += 1,
            0x52 => self.stats.block32_erases += 1,
            0xD8 => self.stats.block64_erases += 1,
            _ => self.stats.chip_erases += 1,
        }
        let fail = if failed > 0 { format!(", {failed} sectors FAILED (fault injection)") } else { String::new() };
        let limit = self.endurance();
        let worn = self.erase_counts[(range.start / SECTOR_BYTES) as usize..(range.end / SECTOR_BYTES) as usize]
            .iter()
            .filter(|&&c| c > limit)
            .count();
        let worn = if worn > 0 { format!(", {worn} sectors beyond the {limit}-cycle endurance") } else { String::new() };
        format!("erase {:#x}..{:#x}, busy {ns} ns{fail}{worn}", range.start, range.end)
    }

    /// 75h: suspend the running program or erase.
    fn suspend(&mut self) -> String {
        let kind = self.busy_kind.clone();
        if !self.busy() || kind == Busy::Other {
            self.stats.ignored_other += 1;
            return "ignored: no program or sector/block erase to suspend".into();
        }
        let tsus = self.part.suspend_ns.unwrap_or(0);
        let left = self.busy_until_ns - self.now_ns;
        self.suspended = Some((kind, left));
        self.power_op_suspended();
        // The operation stops within tSUS; then WIP = 0 and SUS = 1.
        self.busy_until_ns = self.now_ns.saturating_add(tsus.min(left));
        self.busy_kind = Busy::Other;
        self.sr[1] |= 0x80;
        format!("suspended with {left} ns to go")
    }

    /// 7Ah: resume what was suspended.
    fn resume(&mut self) -> String {
        let Some((kind, left)) = self.suspended.take() else {
            self.stats.ignored_other += 1;
            return "ignored: nothing suspended".into();
        };
        if self.busy() {
            self.suspended = Some((kind, left));
            self.stats.ignored_other += 1;
            return "ignored: busy".into();
        }
        self.sr[1] &= !0x80;
        self.start_busy(left, kind);
        self.power_op_resumed();
        format!("resumed, busy {left} ns")
    }

    /// 99h after 66h: registers from their non-volatile copy, latches cleared.
    fn software_reset(&mut self, was_reset_enable: bool) -> String {
        if !was_reset_enable {
            self.stats.ignored_other += 1;
            return "ignored: 99h without 66h just before".into();
        }
        self.sr = self.sr_nv;
        self.sr[0] &= !WEL;
        self.wel_clears_when_ready = false;
        if self.suspended.take().is_some() {
            self.power_op_abandoned();
        }
        self.volatile_armed = false;
        self.ready_at_ns = self.now_ns.saturating_add(self.opts.timing.apply(self.part.reset_ns));
        "software reset".into()
    }

    pub(super) fn write_status(&mut self, op: u8, wel: bool, tw_ns: u64) -> String {
        let args = std::mem::take(&mut self.frame.args);
        if args.is_empty() {
            self.stats.ignored_other += 1;
            return "ignored: no status byte".into();
        }
        let volatile = self.volatile_armed;
        self.volatile_armed = false;
        if !wel && !volatile {
            self.stats.ignored_no_wel += 1;
            return "ignored: WEL = 0".into();
        }
        // Status-register protection.
        let locked = match self.part.registers {
            Registers::Winbond => self.sr[1] & 0x01 != 0 || (self.sr[0] & 0x80 != 0 && !self.wp_high),
            Registers::Macronix => self.sr[0] & 0x80 != 0 && !self.wp_high,
        };
        if locked {
            self.stats.ignored_protected += 1;
            return "ignored: status register protected (SRP/SRWD with /WP low, or SRL)".into();
        }
        let mut new = self.sr;
        // (register index, writable mask, one-time-programmable mask: can only be set)
        let mut set = |idx: usize, v: u8, mask: u8, otp: u8| {
            let cur = new[idx];
            new[idx] = (cur & !mask) | (v & mask) | (cur & otp) | (v & otp);
        };
        match (self.part.registers, op) {
            (Registers::Winbond, 0x01) => {
                set(0, args[0], 0xFC, 0);
                if let Some(&b) = args.get(1) {
                    set(1, b, 0x43, 0x38);
                }
            }
            (Registers::Winbond, 0x31) => set(1, args[0], 0x43, 0x38),
            (Registers::Winbond, 0x11) => set(2, args[0], 0x64, 0),
            (Registers::Macronix, _) => {
                set(0, args[0], 0xFC, 0);
                if let Some(&b) = args.get(1) {
                    set(1, b, 0xC7, 0x08);
                }
            }
            _ => return "ignored".into(),
        }
        new[0] = (new[0] & !WEL) | (self.sr[0] & WEL);
        self.sr = new;
        self.stats.status_writes += 1;
        if volatile {
            // Volatile write (after 50h): the power-up copy is untouched and there is no tW.
            return format!("status (volatile) = {:02x} {:02x} {:02x}", new[0], new[1], new[2]);
        }
        let before = self.sr_nv.to_vec();
        self.sr_nv = new;
        self.sr_nv[0] &= !WEL;
        self.persist_status();
        let tw_ns = self.start_op(tw_ns, Busy::Other);
        self.power_op_starts(OpKind::Status, 0..3, before, tw_ns);
        format!("status = {:02x} {:02x} {:02x}, busy {tw_ns} ns", new[0], new[1], new[2])
    }

    /// The non-volatile status registers to the image's side file.
    pub(super) fn persist_status(&self) {
        if let Some((_, p)) = self.image.as_ref() {
            let sp = status_path(p);
            if let Err(e) = std::fs::write(&sp, self.sr_nv) {
                eprintln!("ssdlab-spi: cannot write {}: {e}", sp.display());
            }
        }
    }

    /// Erase a range (whole sectors); returns how many sectors failed to erase.
    pub(super) fn erase(&mut self, r: Range<u32>) -> u32 {
        let mut failed = 0;
        let limit = self.endurance();
        for s in (r.start / SECTOR_BYTES)..(r.end / SECTOR_BYTES) {
            let before = self.erase_counts[s as usize];
            let count = before.saturating_add(1);
            self.erase_counts[s as usize] = count;
            let mut fails = self.opts.erase_fail_after.is_some_and(|n| before >= n);
            if count > limit && self.wear_out(s, count) {
                fails = true;
            }
            if fails {
                failed += 1;
                self.stats.failed_erases += 1;
                continue;
            }
            let a = (s * SECTOR_BYTES) as usize;
            self.mem[a..a + SECTOR_BYTES as usize].fill(0xFF);
        }
        self.apply_stuck(r);
        failed
    }

    pub(super) fn apply_stuck(&mut self, r: Range<u32>) {
        for (&a, &(and, or)) in self.stuck.range(r) {
            let m = &mut self.mem[a as usize];
            *m = (*m & and) | or;
        }
    }

    pub(super) fn write_through(&mut self, r: Range<u32>) {
        if self.defer_write_through && self.image.is_some() {
            self.pending_writes.push(r);
            return;
        }
        if let Some((f, p)) = self.image.as_ref() {
            if let Err(e) = f.write_all_at(&self.mem[r.start as usize..r.end as usize], r.start as u64) {
                // The chip keeps working from memory; a lost write-through is reported, not fatal.
                eprintln!("ssdlab-spi: cannot write {}: {e}", p.display());
            }
        }
    }
}
