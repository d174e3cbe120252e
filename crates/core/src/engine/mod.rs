//! Simulated time: one timeline (busy-until, in ns) per die and per channel.
//!
//! Operations are reserved on the timelines when they are issued, in issue order, so a host
//! command's completion time is known when it is submitted (the analytic-timeline approach of
//! FEMU and NVMeVirt). Garbage collection reserves the same timelines, so it delays host
//! commands exactly where it competes with them.

pub mod driver;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::config::Timing;
use crate::media::Layout;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
enum DieOp {
    Idle,
    Read,
    Program,
    Erase,
}

/// Per-die and per-channel timelines plus busy-time accounting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timelines {
    pub enabled: bool,
    t: Timing,
    dies_per_channel: u32,
    die_free_ns: Vec<u64>,
    die_op: Vec<DieOp>,
    die_busy_ns: Vec<u64>,
    chan_free_ns: Vec<u64>,
    chan_busy_ns: Vec<u64>,
    /// Picoseconds per byte on a channel (integer arithmetic keeps runs bit-exact).
    chan_ps_per_byte: u64,
}

impl Timelines {
    pub fn new(t: &Timing, lay: &Layout) -> Timelines {
        Timelines {
            enabled: t.enabled,
            t: t.clone(),
            dies_per_channel: lay.dies_per_channel,
            die_free_ns: vec![0; lay.dies as usize],
            die_op: vec![DieOp::Idle; lay.dies as usize],
            die_busy_ns: vec![0; lay.dies as usize],
            chan_free_ns: vec![0; lay.channels as usize],
            chan_busy_ns: vec![0; lay.channels as usize],
            chan_ps_per_byte: (1_000_000_000_000u64 / t.channel_bytes_per_s.max(1)).max(1),
        }
    }

    #[inline]
    pub fn xfer_ns(&self, bytes: u64) -> u64 {
        (bytes * self.chan_ps_per_byte).div_ceil(1000)
    }

    #[inline]
    pub fn command_overhead_ns(&self) -> u64 {
        self.t.command_overhead_ns
    }

    /// Transfer `bytes` to `die` and program them; returns the completion time.
    pub fn program(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        let (d, c) = (die as usize, (die / self.dies_per_channel) as usize);
        let x = self.xfer_ns(bytes);
        let t0 = earliest.max(self.die_free_ns[d]).max(self.chan_free_ns[c]);
        self.chan_free_ns[c] = t0 + x;
        self.chan_busy_ns[c] += x;
        let done = t0 + x + self.t.page_program_ns;
        self.die_free_ns[d] = done;
        self.die_busy_ns[d] += x + self.t.page_program_ns;
        self.die_op[d] = DieOp::Program;
        done
    }

    /// Sense a page on `die` and transfer `bytes` of it out; returns the completion time.
    pub fn read(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        let (d, c) = (die as usize, (die / self.dies_per_channel) as usize);
        let x = self.xfer_ns(bytes);
        let busy = self.die_free_ns[d] > earliest;
        if self.t.suspend && busy && matches!(self.die_op[d], DieOp::Program | DieOp::Erase) {
            // Suspend the program/erase, read, resume: the read goes first, the suspended
            // operation finishes later by the read's time plus the suspend/resume overheads.
            let sensed = earliest + self.t.suspend_ns + self.t.page_read_ns;
            let t1 = sensed.max(self.chan_free_ns[c]);
            self.chan_free_ns[c] = t1 + x;
            self.chan_busy_ns[c] += x;
            let extra = (t1 + x - earliest) + self.t.resume_ns;
            self.die_free_ns[d] += extra;
            self.die_busy_ns[d] += extra;
            return t1 + x;
        }
        let t0 = earliest.max(self.die_free_ns[d]);
        let sensed = t0 + self.t.page_read_ns;
        let t1 = sensed.max(self.chan_free_ns[c]);
        self.chan_free_ns[c] = t1 + x;
        self.chan_busy_ns[c] += x;
        // The die holds the page in its register until the transfer ends.
        self.die_free_ns[d] = t1 + x;
        self.die_busy_ns[d] += t1 + x - t0;
        self.die_op[d] = DieOp::Read;
        t1 + x
    }

    /// Erase a block on `die`; returns the completion time.
    pub fn erase(&mut self, die: u32, earliest: u64) -> u64 {
        let d = die as usize;
        let t0 = earliest.max(self.die_free_ns[d]);
        let done = t0 + self.t.block_erase_ns;
        self.die_free_ns[d] = done;
        self.die_busy_ns[d] += self.t.block_erase_ns;
        self.die_op[d] = DieOp::Erase;
        done
    }

    /// Whether `die` has nothing scheduled at `now`.
    #[inline]
    pub fn die_idle(&self, die: u32, now: u64) -> bool {
        self.die_free_ns[die as usize] <= now
    }

    /// Latest time any die or channel is busy until.
    pub fn horizon_ns(&self) -> u64 {
        self.die_free_ns.iter().chain(self.chan_free_ns.iter()).copied().max().unwrap_or(0)
    }

    pub fn die_busy_ns(&self) -> &[u64] {
        &self.die_busy_ns
    }
    pub fn channel_busy_ns(&self) -> &[u64] {
        &self.chan_busy_ns
    }
}

/// The device's write-back buffer, in multi-plane program units: host data is acknowledged
/// once buffered; a programmed unit holds its buffer space until its program completes, and
/// when more units are in flight than the buffer holds, the command that overflows it waits
/// for the oldest to finish. With no buffer (write-through), commands wait for their programs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteBuffer {
    units: usize,
    inflight: BinaryHeap<Reverse<u64>>,
    cmd_done: u64,
    stall_until: u64,
    last_done: u64,
}

impl WriteBuffer {
    pub fn new(units: usize) -> WriteBuffer {
        WriteBuffer { units, inflight: BinaryHeap::new(), cmd_done: 0, stall_until: 0, last_done: 0 }
    }
    /// No buffer: every write waits for its programs (and partial units are padded).
    #[inline]
    pub fn write_through(&self) -> bool {
        self.units == 0
    }
    /// A host command starts being processed at `t`.
    #[inline]
    pub fn begin(&mut self, t: u64) {
        self.cmd_done = t;
        self.stall_until = t;
    }
    /// A host unit's program completes at `done`.
    #[inline]
    pub fn programmed(&mut self, done: u64) {
        self.cmd_done = self.cmd_done.max(done);
        self.last_done = self.last_done.max(done);
        if self.units > 0 {
            self.inflight.push(Reverse(done));
            while self.inflight.len() > self.units {
                let Reverse(t) = self.inflight.pop().expect("non-empty");
                self.stall_until = self.stall_until.max(t);
            }
        }
    }
    /// Completion of the current command begun at `t`: its programs' end when it must wait for
    /// them (`sync`: FUA or write-through), else when buffer space was available.
    #[inline]
    pub fn completion(&self, sync: bool, t: u64) -> u64 {
        if sync {
            self.cmd_done
        } else {
            self.stall_until.max(t)
        }
    }
    /// When every host program issued so far is done (flush completion).
    pub fn drained_at(&self) -> u64 {
        self.last_done
    }
}
