//! Host drivers: closed loop (N commands in flight) and open loop (arrival times from a trace
//! or a rate). Both submit commands in simulated-time order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::error::Result;
use crate::ftl::{BlockDevice, WriteOpts};
use crate::metrics::Recorder;
use crate::workload::{Cmd, Op, Source};

/// How commands arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loop {
    /// Keep `depth` commands in flight; a completion releases the next submission.
    Closed { depth: u32 },
    /// Arrivals at `rate` commands per second (fixed spacing or Poisson).
    Rate { iops: f64, poisson: bool },
    /// Arrivals at each command's own `at_ns` (trace replay), shifted to start at `start`.
    Trace,
}

/// When a run stops (0 = no limit). The first limit reached ends the run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub ops: u64,
    pub host_write_bytes: u64,
    pub sim_ns: u64,
}

impl Limits {
    /// Fraction of the run done (the furthest limit), for progress bars.
    pub fn progress(&self, ops: u64, host_write_bytes: u64, sim_ns: u64) -> f64 {
        let mut f: f64 = 0.0;
        if self.ops > 0 {
            f = f.max(ops as f64 / self.ops as f64);
        }
        if self.host_write_bytes > 0 {
            f = f.max(host_write_bytes as f64 / self.host_write_bytes as f64);
        }
        if self.sim_ns > 0 {
            f = f.max(sim_ns as f64 / self.sim_ns as f64);
        }
        f.min(1.0)
    }
}

/// What ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Limit,
    /// The measured quantity settled (`stop = "steady"`).
    Steady,
    SourceExhausted,
    Interrupted,
}

/// Commands between two calls of the progress callback.
pub const PROGRESS_EVERY: u64 = 1 << 16;
/// Commands read ahead of submission so the device can prefetch their metadata.
const LOOKAHEAD: usize = 16;

/// Submit one command at `now`; returns its completion time.
#[inline]
pub fn submit(dev: &mut dyn BlockDevice, cmd: &Cmd, now: u64) -> Result<u64> {
    match cmd.op {
        Op::Write => dev.write(cmd.lba, cmd.sectors, None, WriteOpts { fua: false, placement: cmd.placement }, now),
        Op::Read => dev.read(cmd.lba, cmd.sectors, None, now),
        Op::Trim => dev.trim(cmd.lba, cmd.sectors, now),
        Op::Flush => dev.flush(now),
    }
}

/// How a run submits commands: the arrival loop, its stop limits, the simulated time of the
/// first command and the seed of the arrival process.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub lp: Loop,
    pub limits: Limits,
    pub start: u64,
    pub seed: u64,
}

/// Run `src` against `dev` from simulated time `plan.start` until a limit, the end of the
/// source, or `progress` returning false (called every [`PROGRESS_EVERY`] commands with the
/// fraction done). Returns how it ended and the time of the last completion.
pub fn run(
    dev: &mut dyn BlockDevice,
    src: &mut dyn Source,
    plan: Plan,
    rec: &mut Recorder,
    progress: &mut dyn FnMut(f64) -> bool,
) -> Result<(Ending, u64)> {
    let Plan { lp, limits, start, seed } = plan;
    let timing = dev.timelines().enabled;
    let base_hw = dev.counters().host_write_bytes;
    let mut inflight: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut now = start;
    let mut last_done = start;
    let mut ops = 0u64;
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0xa771_7a15);
    let mut trace_origin: Option<u64> = None;
    let mut ahead: VecDeque<Result<Cmd>> = VecDeque::with_capacity(LOOKAHEAD);
    let mut exhausted = false;
    let ending = loop {
        if rec.steady(dev) {
            break Ending::Steady;
        }
        if limits.ops > 0 && ops >= limits.ops {
            break Ending::Limit;
        }
        let hw = dev.counters().host_write_bytes - base_hw;
        if limits.host_write_bytes > 0 && hw >= limits.host_write_bytes {
            break Ending::Limit;
        }
        if ops.is_multiple_of(PROGRESS_EVERY) && ops > 0 && !progress(limits.progress(ops, hw, now - start)) {
            break Ending::Interrupted;
        }
        // Keep LOOKAHEAD commands read ahead; hint the device about the newest (stage 1) and
        // about the one halfway (stage 2), so their cache misses overlap with this command.
        while !exhausted && ahead.len() < LOOKAHEAD {
            match src.next_cmd() {
                None => exhausted = true,
                Some(c) => {
                    if let Ok(c) = &c {
                        dev.prefetch(c.lba, 1);
                    }
                    ahead.push_back(c);
                }
            }
        }
        if let Some(Ok(c)) = ahead.get(LOOKAHEAD / 2) {
            dev.prefetch(c.lba, 2);
        }
        let cmd = match ahead.pop_front() {
            None => break Ending::SourceExhausted,
            Some(c) => c?,
        };
        // Arrival time of this command.
        if timing {
            match lp {
                Loop::Closed { depth } => {
                    if inflight.len() >= depth as usize {
                        let Reverse(t) = inflight.pop().unwrap();
                        now = now.max(t);
                    }
                }
                Loop::Rate { iops, poisson } => {
                    if ops > 0 {
                        let mean = 1e9 / iops;
                        let gap = if poisson { -mean * (1.0 - rng.gen::<f64>()).ln() } else { mean };
                        now += gap.round() as u64;
                    }
                }
                Loop::Trace => {
                    let at = cmd.at_ns.unwrap_or(0);
                    let origin = *trace_origin.get_or_insert(at);
                    now = now.max(start + at.saturating_sub(origin));
                }
            }
            if limits.sim_ns > 0 && now - start >= limits.sim_ns {
                break Ending::Limit;
            }
            dev.idle(now);
        }
        let done = submit(dev, &cmd, now)?;
        if timing {
            if let Loop::Closed { .. } = lp {
                inflight.push(Reverse(done));
            }
            rec.record(cmd.op, done - now);
            last_done = last_done.max(done);
        }
        ops += 1;
        rec.tick(dev, now, done);
    };
    Ok((ending, last_done))
}
