//! Simulated time: one timeline (busy-until, in ns) per die and per channel.
//!
//! Operations are reserved on the timelines when they are issued, in issue order, so a host
//! command's completion time is known when it is submitted (the analytic-timeline approach of
//! FEMU and NVMeVirt). Garbage collection reserves the same timelines, so it delays host
//! commands exactly where it competes with them. With `timing.host_link_bytes_per_s` the
//! host interface is a resource too: one lane per direction that every command's data crosses.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::config::Timing;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
enum DieOp {
    Idle,
    Read,
    Program,
    Erase,
}

/// Most idle gaps a lane remembers (a gap it forgets counts as busy: conservative).
const GAPS: usize = 32;

/// One resource's reservations: busy until `free_ns`, except for the idle `gaps` before it.
///
/// Operations are reserved in issue order, but an operation may have to start later than the
/// resource is free (a relocation program waits for its page to be read on another die, say).
/// A plain busy-until timeline would waste that idle stretch and push every later operation
/// behind it, so one busy die would drag all the others along; a lane keeps the stretch as a
/// gap that later operations fill first-fit (work-conserving, as a controller's per-die queue
/// is).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Lane {
    free_ns: u64,
    n: u8,
    /// Idle intervals [start, end) before `free_ns`, sorted, disjoint.
    gaps: [(u64, u64); GAPS],
}

impl Lane {
    /// Whether the gaps are what they claim: non-empty, sorted, disjoint, before `free_ns`.
    fn gaps_ok(&self) -> bool {
        let g = &self.gaps[..self.n as usize];
        g.iter().all(|&(a, b)| a < b && b <= self.free_ns) && g.windows(2).all(|w| w[0].1 <= w[1].0)
    }

    /// Earliest start >= `earliest` of an operation lasting `dur`.
    #[inline]
    fn fit(&self, earliest: u64, dur: u64) -> u64 {
        self.fit_from(0, earliest, dur).0
    }

    /// [`fit`](Self::fit) looking at the gaps from index `from` on (the caller knows the ones
    /// before it cannot hold the operation: a gap too short or too early for a start is so for
    /// every later start). Also returns the index of the gap it starts in (`n`: after them all),
    /// which is a valid `from` for a later start and a valid hint for
    /// [`reserve_at`](Self::reserve_at) at the start returned.
    #[inline]
    fn fit_from(&self, from: usize, earliest: u64, dur: u64) -> (u64, usize) {
        let n = self.n as usize;
        for (i, &(a, b)) in self.gaps[..n].iter().enumerate().skip(from) {
            let t = a.max(earliest);
            if t + dur <= b {
                debug_assert!(t >= earliest && i >= from, "a fit starts before its earliest start");
                return (t, i);
            }
        }
        (earliest.max(self.free_ns), n)
    }

    /// Whether the resource is busy at `t`.
    #[inline]
    fn busy_at(&self, t: u64) -> bool {
        t < self.free_ns && !self.gaps[..self.n as usize].iter().any(|&(a, b)| a <= t && t < b)
    }

    fn remove_gap(&mut self, i: usize) {
        let n = self.n as usize;
        debug_assert!(i < n, "removing gap {i} of {n}");
        self.gaps.copy_within(i + 1..n, i);
        self.n -= 1;
    }

    fn insert_gap(&mut self, i: usize, g: (u64, u64), horizon: u64) {
        if self.n as usize == GAPS {
            // Forget gaps that are over by `horizon` (the operation being placed), else the
            // shortest (unless the new one is shorter still).
            let j = match self.gaps.iter().position(|&(_, b)| b <= horizon) {
                Some(j) => j,
                None => {
                    let (j, _) = self.gaps.iter().enumerate().min_by_key(|&(_, &(a, b))| b - a).expect("full");
                    if self.gaps[j].1 - self.gaps[j].0 > g.1 - g.0 {
                        return;
                    }
                    j
                }
            };
            // Gap `j` goes and `g` comes in at `i`: only the gaps between them move.
            if j < i {
                self.gaps.copy_within(j + 1..i, j);
                self.gaps[i - 1] = g;
            } else {
                self.gaps.copy_within(i..j, i + 1);
                self.gaps[i] = g;
            }
            return;
        }
        let n = self.n as usize;
        debug_assert!(i <= n && g.0 < g.1, "gap {g:?} inserted at {i} of {n}");
        self.gaps.copy_within(i..n, i + 1);
        self.gaps[i] = g;
        self.n += 1;
        debug_assert!(self.gaps[..self.n as usize].windows(2).all(|w| w[0].1 <= w[1].0), "gaps out of order after inserting {g:?}");
    }

    /// Mark [start, start + dur) busy. Gaps that end by `now` are dropped first: no operation
    /// can start before the present, so they are only a cost to scan.
    fn reserve(&mut self, start: u64, dur: u64, now: u64) {
        self.reserve_at(0, start, dur, now);
    }

    /// [`reserve`](Self::reserve) knowing that the gaps before index `hint` end by `start`
    /// (the index [`fit_from`](Self::fit_from) returned with `start`), so it need not look
    /// at them.
    #[inline]
    fn reserve_at(&mut self, hint: usize, start: u64, dur: u64, now: u64) {
        debug_assert!(start >= now, "an operation placed at {start}, before the present ({now})");
        let dead = self.gaps[..self.n as usize].iter().take_while(|&&(_, b)| b <= now).count();
        if dead > 0 {
            let n = self.n as usize;
            self.gaps.copy_within(dead..n, 0);
            self.n -= dead as u8;
        }
        // The dead gaps end by `now` <= `start`: they were among the first `hint`.
        self.occupy_from(hint.saturating_sub(dead), start, dur);
    }

    fn occupy(&mut self, start: u64, dur: u64) {
        self.occupy_from(0, start, dur);
        debug_assert!(self.gaps_ok() && (dur == 0 || self.busy_at(start)), "lane after occupying {dur} ns at {start}");
    }

    fn occupy_from(&mut self, from: usize, start: u64, dur: u64) {
        debug_assert!(self.gaps[..from.min(self.n as usize)].iter().all(|&(_, b)| b <= start));
        let end = start + dur;
        let mut i = from;
        while i < self.n as usize {
            let (a, b) = self.gaps[i];
            if b <= start {
                i += 1;
                continue;
            }
            if a >= end {
                break;
            }
            // Overlap: keep what is left on either side.
            match (a < start, b > end) {
                (true, true) => {
                    self.gaps[i] = (a, start);
                    self.insert_gap(i + 1, (end, b), start);
                    return;
                }
                (true, false) => {
                    self.gaps[i] = (a, start);
                    i += 1;
                }
                (false, true) => {
                    self.gaps[i] = (end, b);
                    return;
                }
                (false, false) => self.remove_gap(i),
            }
        }
        if end > self.free_ns {
            if start > self.free_ns {
                let n = self.n as usize;
                self.insert_gap(n, (self.free_ns, start), start);
            }
            self.free_ns = end;
        }
    }

    /// Time reserved at or after `t`: booked, but not yet worked off by then. Exact for
    /// `t` at or after the present (gaps before it are forgotten).
    fn booked_after(&self, t: u64) -> u64 {
        if t >= self.free_ns {
            return 0;
        }
        let idle: u64 = self.gaps[..self.n as usize].iter().map(|&(a, b)| b.saturating_sub(a.max(t))).sum();
        debug_assert!(idle <= self.free_ns - t, "gaps lie before free_ns");
        self.free_ns - t - idle
    }

    /// End of the busy stretch that contains `t` (`t` itself if the resource is idle then).
    #[inline]
    fn busy_end(&self, t: u64) -> u64 {
        if !self.busy_at(t) {
            return t;
        }
        self.gaps[..self.n as usize].iter().find(|&&(a, _)| a > t).map_or(self.free_ns, |&(a, _)| a)
    }

    /// Make [t, t + d) busy by pushing everything reserved after `t` later by `d` (an
    /// operation that goes ahead of the queue; a suspended one resumes later). A gap around
    /// `t` keeps its part before `t` and moves the rest.
    fn delay_after(&mut self, t: u64, d: u64, now: u64) {
        if t >= self.free_ns {
            return self.occupy(t, d);
        }
        let n = self.n as usize;
        let mut split = None;
        for (i, g) in self.gaps[..n].iter_mut().enumerate() {
            if g.0 >= t {
                *g = (g.0 + d, g.1 + d);
            } else if g.1 > t {
                split = Some((i, (t + d, g.1 + d)));
                g.1 = t;
            }
        }
        if let Some((i, rest)) = split {
            self.insert_gap(i + 1, rest, now);
        }
        self.free_ns += d;
        debug_assert!(self.gaps_ok(), "lane after a delay of {d} ns at {t}");
    }
}

/// Per-die and per-channel timelines plus busy-time accounting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timelines {
    pub enabled: bool,
    t: Timing,
    dies_per_channel: u32,
    /// The present, as the device last said (`set_now`): idle gaps before it are dead.
    #[serde(default)]
    now_ns: u64,
    die: Vec<Lane>,
    /// The kind of each die's latest operation (what a read would suspend).
    die_op: Vec<DieOp>,
    die_busy_ns: Vec<u64>,
    chan: Vec<Lane>,
    chan_busy_ns: Vec<u64>,
    /// Picoseconds per byte on a channel (integer arithmetic keeps runs bit-exact).
    chan_ps_per_byte: u64,
    /// The host interface link, one lane per direction ([`LINK_IN`], [`LINK_OUT`]); used only
    /// when `timing.host_link_bytes_per_s` is set.
    #[serde(default)]
    link: [Lane; 2],
}

/// Host-to-device direction of the link (write data).
const LINK_IN: usize = 0;
/// Device-to-host direction of the link (read data).
const LINK_OUT: usize = 1;

impl Timelines {
    /// Timelines for `channels` channels of `dies_per_channel` dies each (dies are numbered
    /// channel-major).
    pub fn new(t: &Timing, channels: u32, dies_per_channel: u32) -> Timelines {
        let dies = (channels * dies_per_channel) as usize;
        assert!(dies > 0, "timelines for a device without dies");
        Timelines {
            enabled: t.enabled,
            t: t.clone(),
            dies_per_channel,
            now_ns: 0,
            die: vec![Lane::default(); dies],
            die_op: vec![DieOp::Idle; dies],
            die_busy_ns: vec![0; dies],
            chan: vec![Lane::default(); channels as usize],
            chan_busy_ns: vec![0; channels as usize],
            chan_ps_per_byte: (1_000_000_000_000u64 / t.channel_bytes_per_s.max(1)).max(1),
            link: [Lane::default(); 2],
        }
    }

    /// Bytes of memory the timelines of `channels` x `dies_per_channel` dies take.
    pub fn memory_bytes(channels: u32, dies_per_channel: u32) -> u64 {
        let dies = (channels * dies_per_channel) as u64;
        let lane = std::mem::size_of::<Lane>() as u64;
        dies * (lane + 1 + 8) + channels as u64 * (lane + 8)
    }

    #[inline]
    pub fn xfer_ns(&self, bytes: u64) -> u64 {
        (bytes * self.chan_ps_per_byte).div_ceil(1000)
    }

    #[inline]
    pub fn command_overhead_ns(&self) -> u64 {
        self.t.command_overhead_ns
    }

    /// Time `bytes` take on the host link at `timing.host_link_bytes_per_s` (0 when the link
    /// is not modelled), rounded up to the nanosecond. Exact integer arithmetic, not a rounded
    /// per-byte cost: a PCIe 4.0 x4 link moves 7.877 bytes per ns, which no integer number of
    /// picoseconds per byte states within 1%.
    ///
    /// The rate is what the user sets. PCI Express Base Specification 4.0 signals at 16.0 GT/s
    /// per lane with 128b/130b encoding, so an x4 link carries 16e9 x 4 x 128/130 / 8 =
    /// 7.877e9 bytes/s per direction; that raw rate is the documented value, and no transaction
    /// layer overhead is charged on top. TLP headers, sequence numbers, LCRC and DLLPs cost
    /// roughly 6-10% with 256-byte payloads, but the share depends on the Max_Payload_Size the
    /// host negotiates and on flow-control settings the emulator does not know; a user who wants
    /// it sets the effective rate instead (e.g. 7.877e9 x 256 / (256 + 24) = 7.2e9).
    #[inline]
    pub fn link_ns(&self, bytes: u64) -> u64 {
        match self.t.host_link_bytes_per_s {
            0 => 0,
            rate => (bytes as u128 * 1_000_000_000).div_ceil(rate as u128) as u64,
        }
    }

    /// A write's data crosses the link to the device: it starts at `earliest` or when the
    /// link is free and returns when the last byte has arrived (`earliest` itself when time or
    /// the link is not modelled).
    #[inline]
    pub fn link_in(&mut self, bytes: u64, earliest: u64) -> u64 {
        self.link_xfer(LINK_IN, bytes, earliest)
    }

    /// A read's data crosses the link to the host once it is out of the NAND at `earliest`;
    /// returns when the last byte has arrived (as [`link_in`](Self::link_in)).
    #[inline]
    pub fn link_out(&mut self, bytes: u64, earliest: u64) -> u64 {
        self.link_xfer(LINK_OUT, bytes, earliest)
    }

    /// One transfer on one direction of the link, first-fit: reads complete out of issue order
    /// (their dies differ), so a later command's data may fill an idle stretch before an
    /// earlier one's, as it would on the wire.
    fn link_xfer(&mut self, dir: usize, bytes: u64, earliest: u64) -> u64 {
        if !self.enabled || self.t.host_link_bytes_per_s == 0 {
            return earliest;
        }
        let earliest = earliest.max(self.now_ns);
        let x = self.link_ns(bytes);
        let (t0, i) = self.link[dir].fit_from(0, earliest, x);
        debug_assert!(t0 >= earliest, "a link transfer starts before its data is ready");
        self.link[dir].reserve_at(i, t0, x, self.now_ns);
        t0 + x
    }

    /// Earliest start >= `earliest` at which `die` is free for `die_dur` from the start and
    /// its channel for `xfer` from `xfer_at` after the start (a few rounds of first-fit on
    /// both; if they do not agree, the die's choice wins and the transfer goes where it fits).
    ///
    /// Returns each start with the index of the gap it is in, for `reserve_at`. A round's
    /// starts are never earlier than the round's before (first-fit is monotone in the earliest
    /// start), so each round looks at the gaps from where the previous one stopped.
    #[inline]
    fn co_fit(&self, d: usize, c: usize, earliest: u64, die_dur: u64, xfer_at: u64, xfer: u64) -> ((u64, usize), (u64, usize)) {
        let (die, chan) = (&self.die[d], &self.chan[c]);
        let mut t = earliest;
        let (mut di, mut ci) = (0, 0);
        for _ in 0..4 {
            let (td, i) = die.fit_from(di, t, die_dur);
            let (tc, j) = chan.fit_from(ci, td + xfer_at, xfer);
            if tc == td + xfer_at {
                return ((td, i), (tc, j));
            }
            (di, ci) = (i, j);
            t = tc - xfer_at;
        }
        let (td, i) = die.fit_from(di, t, die_dur);
        ((td, i), chan.fit_from(ci, td + xfer_at, xfer))
    }

    /// Transfer `bytes` to `die` and program them; returns the completion time.
    pub fn program(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        let (d, c) = (die as usize, (die / self.dies_per_channel) as usize);
        let earliest = earliest.max(self.now_ns);
        let x = self.xfer_ns(bytes);
        let p = self.t.page_program_ns;
        let ((t0, di), (tc, ci)) = self.co_fit(d, c, earliest, x + p, 0, x);
        self.chan[c].reserve_at(ci, tc, x, self.now_ns);
        self.chan_busy_ns[c] += x;
        let done = (tc + x).max(t0 + x) + p;
        debug_assert!(t0 >= earliest && tc >= t0, "a program starts before its data is ready");
        self.die[d].reserve_at(di, t0, done - t0, self.now_ns);
        self.die_busy_ns[d] += x + p;
        self.die_op[d] = DieOp::Program;
        done
    }

    /// A host read: sense a page on `die` and transfer `bytes` of it out; returns the
    /// completion time. With `timing.read_priority` it waits only for the operation in
    /// progress on its die (the rest of the die's queue, at most one operation's time), with
    /// `timing.suspend` it also suspends a program or erase in progress; either way it goes
    /// ahead of the work queued on the die, which finishes that much later (completion times
    /// already returned for that work are not revised). Without either, reads queue in issue
    /// order.
    pub fn read(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        if !(self.t.suspend || self.t.read_priority) {
            return self.read_queued(die, bytes, earliest);
        }
        let (d, c) = (die as usize, (die / self.dies_per_channel) as usize);
        let earliest = earliest.max(self.now_ns);
        let x = self.xfer_ns(bytes);
        let r = self.t.page_read_ns;
        let busy = self.die[d].busy_at(earliest);
        // The kind of the die's latest operation stands for the one in progress (the lane keeps
        // busy stretches, not operation boundaries).
        let suspend = busy && self.t.suspend && matches!(self.die_op[d], DieOp::Program | DieOp::Erase);
        let (start, sensed) = if !busy {
            (earliest, earliest + r)
        } else if suspend {
            (earliest, earliest + self.t.suspend_ns + r)
        } else {
            // Behind a read (or, without suspend, any operation): wait for it to finish, at most
            // one operation's time and never past the end of the die's busy stretch.
            let op = match self.die_op[d] {
                DieOp::Erase => self.t.block_erase_ns,
                DieOp::Program => self.t.page_program_ns,
                _ => r + x,
            };
            let t0 = earliest + op.min(self.die[d].busy_end(earliest) - earliest);
            (t0, t0 + r)
        };
        // The data-out goes ahead of queued transfers too, after the one in progress.
        let ch = &mut self.chan[c];
        let t1 = sensed + x.min(ch.busy_end(sensed) - sensed);
        if !ch.busy_at(t1) && ch.fit(t1, x) == t1 {
            ch.reserve(t1, x, self.now_ns);
        } else {
            ch.delay_after(t1, x, self.now_ns);
        }
        self.chan_busy_ns[c] += x;
        let hold = t1 + x - start;
        if !busy && self.die[d].fit(start, hold) == start {
            self.die[d].reserve(start, hold, self.now_ns);
            self.die_op[d] = DieOp::Read;
            self.die_busy_ns[d] += hold;
        } else {
            // Ahead of the queue: everything after it on the die (the suspended operation
            // included) finishes later by the read's time (plus the resume overhead).
            let extra = hold + if suspend { self.t.resume_ns } else { 0 };
            self.die[d].delay_after(start, extra, self.now_ns);
            self.die_busy_ns[d] += extra;
        }
        debug_assert!(start >= earliest && t1 >= sensed, "a read completes before it was issued");
        t1 + x
    }

    /// A read in issue order (garbage collection, copies): sense a page on `die` once the work
    /// queued before it is done, transfer `bytes` out; returns the completion time.
    pub fn read_queued(&mut self, die: u32, bytes: u64, earliest: u64) -> u64 {
        let (d, c) = (die as usize, (die / self.dies_per_channel) as usize);
        let earliest = earliest.max(self.now_ns);
        let x = self.xfer_ns(bytes);
        let r = self.t.page_read_ns;
        let ((t0, di), (t1, ci)) = self.co_fit(d, c, earliest, r + x, r, x);
        debug_assert!(t0 >= earliest && t1 >= t0 + r, "data out before the page is sensed");
        self.chan[c].reserve_at(ci, t1, x, self.now_ns);
        self.chan_busy_ns[c] += x;
        // The die holds the page in its register until the transfer ends.
        self.die[d].reserve_at(di, t0, t1 + x - t0, self.now_ns);
        self.die_busy_ns[d] += t1 + x - t0;
        self.die_op[d] = DieOp::Read;
        t1 + x
    }

    /// Erase a block on `die`; returns the completion time.
    pub fn erase(&mut self, die: u32, earliest: u64) -> u64 {
        let d = die as usize;
        let earliest = earliest.max(self.now_ns);
        let e = self.t.block_erase_ns;
        let (t0, i) = self.die[d].fit_from(0, earliest, e);
        debug_assert!(t0 >= earliest, "an erase starts before its earliest start");
        self.die[d].reserve_at(i, t0, e, self.now_ns);
        self.die_busy_ns[d] += e;
        self.die_op[d] = DieOp::Erase;
        t0 + e
    }

    /// Whether `die` has nothing scheduled at `now`.
    #[inline]
    pub fn die_idle(&self, die: u32, now: u64) -> bool {
        !self.die[die as usize].busy_at(now)
    }

    /// The device's present moment: operations are never placed before it, so idle time
    /// before it is forgotten. Optional (a personality that never calls it keeps every gap).
    #[inline]
    pub fn set_now(&mut self, now: u64) {
        self.now_ns = self.now_ns.max(now);
    }

    /// When `die` has finished everything reserved on it so far.
    pub fn die_free_ns(&self, die: u32) -> u64 {
        self.die[die as usize].free_ns
    }

    /// Latest time any die or channel is busy until.
    pub fn horizon_ns(&self) -> u64 {
        self.die.iter().chain(self.chan.iter()).map(|l| l.free_ns).max().unwrap_or(0)
    }

    /// Each die's busy time booked so far (at submission, so it may lie in the future).
    pub fn die_busy_ns(&self) -> &[u64] {
        &self.die_busy_ns
    }

    /// Each die's busy time that lies before `t`: [`die_busy_ns`](Self::die_busy_ns) less
    /// what is booked at or after `t`. The difference of two calls is the busy time inside a
    /// window, which is at most the window (booked totals are not: a backlogged die's queue
    /// reaches past its end). Exact for `t` at or after the last [`set_now`](Self::set_now).
    pub fn die_busy_before_ns(&self, t: u64) -> Vec<u64> {
        self.die_busy_ns.iter().zip(&self.die).map(|(&b, l)| b.saturating_sub(l.booked_after(t))).collect()
    }
    pub fn channel_busy_ns(&self) -> &[u64] {
        &self.chan_busy_ns
    }
}

/// The device's write-back buffer, in multi-plane program units: host data is acknowledged
/// once buffered; a programmed unit holds its buffer space until its program completes, and
/// when more units are in flight than the buffer holds, the command that overflows it waits
/// for the oldest to finish. With no buffer (write-through), commands wait for their programs.
///
/// With `ftl.gc_uses_write_buffer` ([`sharing_gc`](Self::sharing_gc)) relocated units take
/// slots too, as real controllers stage GC copies in the same DRAM/SRAM as host data: every
/// unit, host or GC, takes a slot ([`admit`](Self::admit)) before its program starts, at the
/// earliest program completion among the units in flight when the buffer is full. A host unit
/// that has to wait stalls its command; a GC unit that has to wait starts its program later.
/// So when GC programs fill the buffer, host writes wait: GC interference reaches write latency
/// below saturation, where the dies keep up but the buffer does not always have room.
///
/// Slots are counted, not placed in time: a GC unit holds its slot from when it is issued
/// (its reads are issued just before), which is at or before its data is read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteBuffer {
    units: usize,
    /// Relocated units share the buffer with host units.
    #[serde(default)]
    shared: bool,
    /// Program completion times of the units holding a slot (min-heap).
    inflight: BinaryHeap<Reverse<u64>>,
    cmd_done: u64,
    stall_until: u64,
    last_done: u64,
    /// When the current command's data was in the device (`begin`).
    #[serde(default)]
    begun: u64,
}

impl WriteBuffer {
    pub fn new(units: usize) -> WriteBuffer {
        // A slot per unit and one for the unit that overflows it: the hot path never allocates
        // (the cap only bounds the up-front allocation of a huge buffer).
        let inflight = BinaryHeap::with_capacity(units.saturating_add(1).min(1 << 16));
        WriteBuffer { units, shared: false, inflight, cmd_done: 0, stall_until: 0, last_done: 0, begun: 0 }
    }
    /// Relocated units share the buffer (`ftl.gc_uses_write_buffer`).
    pub fn sharing_gc(mut self, shared: bool) -> WriteBuffer {
        self.shared = shared;
        self
    }
    #[inline]
    pub fn shares_gc(&self) -> bool {
        self.shared
    }
    /// No buffer: every write waits for its programs (and partial units are padded).
    #[inline]
    pub fn write_through(&self) -> bool {
        self.units == 0
    }
    /// A host command's data is in the device at `t` (after the command overhead and the
    /// link).
    #[inline]
    pub fn begin(&mut self, t: u64) {
        self.cmd_done = t;
        self.stall_until = t;
        self.begun = t;
    }
    /// When the current (or last) host command's data was in the device.
    #[inline]
    pub fn begun(&self) -> u64 {
        self.begun
    }
    /// A unit (`host` or relocated) takes a slot before it is programmed, with a shared
    /// buffer; returns when the slot is free (0: at once). A host unit that waits stalls its
    /// command until then.
    #[inline]
    pub fn admit(&mut self, host: bool) -> u64 {
        debug_assert!(self.shared, "admission is for a buffer shared with GC");
        if self.units == 0 || self.inflight.len() < self.units {
            return 0;
        }
        let Reverse(free) = self.inflight.pop().expect("a full buffer holds units");
        if host {
            self.stall_until = self.stall_until.max(free);
        }
        debug_assert!(self.inflight.len() < self.units, "no slot free after admission");
        free
    }
    /// A host unit's program completes at `done`.
    #[inline]
    pub fn programmed(&mut self, done: u64) {
        self.cmd_done = self.cmd_done.max(done);
        self.last_done = self.last_done.max(done);
        if self.units > 0 {
            debug_assert!(!self.shared || self.inflight.len() < self.units, "a host unit programmed without a slot");
            self.inflight.push(Reverse(done));
            while self.inflight.len() > self.units {
                let Reverse(t) = self.inflight.pop().expect("non-empty");
                self.stall_until = self.stall_until.max(t);
            }
            debug_assert!(self.inflight.len() <= self.units, "more programs in flight than the buffer holds");
        }
    }
    /// A relocated unit admitted to a shared buffer is programmed, done at `done`; it holds its
    /// slot until then.
    #[inline]
    pub fn relocated(&mut self, done: u64) {
        debug_assert!(self.shared, "relocated units hold slots only in a shared buffer");
        if self.units > 0 {
            debug_assert!(self.inflight.len() < self.units, "a relocated unit programmed without a slot");
            self.inflight.push(Reverse(done));
        }
    }
    /// The current host command also waits until `t` (the foreground collection it
    /// triggered), buffered or not.
    #[inline]
    pub fn hold(&mut self, t: u64) {
        self.stall_until = self.stall_until.max(t);
        self.cmd_done = self.cmd_done.max(t);
    }
    /// Completion of the current command begun at `t`: its programs' end when it must wait for
    /// them (`sync`: FUA or write-through), else when buffer space was available.
    #[inline]
    pub fn completion(&self, sync: bool, t: u64) -> u64 {
        debug_assert!(self.cmd_done >= t && self.stall_until >= t, "completion of a command not begun at {t}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn tl(f: impl FnOnce(&mut Timing)) -> Timelines {
        let c = Config::from_toml_str("preset = \"fdp-ssd\"", "test").unwrap();
        let mut t = c.timing.clone();
        f(&mut t);
        Timelines::new(&t, c.geometry.channels, c.geometry.dies_per_channel)
    }

    #[test]
    fn lane_keeps_and_fills_gaps() {
        let mut l = Lane::default();
        l.reserve(100, 10, 0); // idle 0..100 stays a gap
        assert_eq!((l.free_ns, l.n), (110, 1));
        assert_eq!(l.fit(0, 50), 0);
        assert_eq!(l.fit(60, 50), 110, "does not fit before 100");
        l.reserve(20, 30, 0); // splits the gap into 0..20 and 50..100
        assert_eq!(&l.gaps[..l.n as usize], &[(0, 20), (50, 100)]);
        assert!(l.busy_at(25) && !l.busy_at(60) && l.busy_at(105) && !l.busy_at(110));
        l.reserve(50, 50, 0);
        assert_eq!(&l.gaps[..l.n as usize], &[(0, 20)]);
        l.delay_after(0, 5, 0);
        assert_eq!((l.free_ns, l.gaps[0]), (115, (5, 25)));
    }

    #[test]
    fn lane_forgets_gaps_conservatively() {
        let mut l = Lane::default();
        for i in 0..(2 * GAPS as u64 + 8) {
            l.reserve(100 * i + 50, 10, 0);
        }
        assert_eq!(l.n as usize, GAPS);
        // Whatever it forgot counts as busy: nothing is placed where it was not idle.
        for &(a, b) in &l.gaps[..l.n as usize] {
            assert!(a < b && (a % 100 == 60 || a == 0) && b % 100 == 50);
        }
    }

    /// The lane as its doc says, written plainly (a sorted list of idle intervals, first
    /// fit, a full list forgets a gap over by the operation's start, else its shortest).
    #[derive(Default)]
    struct PlainLane {
        free_ns: u64,
        gaps: Vec<(u64, u64)>,
    }

    impl PlainLane {
        fn fit(&self, earliest: u64, dur: u64) -> u64 {
            self.gaps
                .iter()
                .map(|&(a, _)| a.max(earliest))
                .zip(&self.gaps)
                .find(|&(t, &(_, b))| t + dur <= b)
                .map_or(earliest.max(self.free_ns), |(t, _)| t)
        }

        fn add_gap(&mut self, g: (u64, u64), horizon: u64) {
            if self.gaps.len() == GAPS {
                let j = match self.gaps.iter().position(|&(_, b)| b <= horizon) {
                    Some(j) => j,
                    None => {
                        let j = (0..GAPS).min_by_key(|&j| self.gaps[j].1 - self.gaps[j].0).unwrap();
                        if self.gaps[j].1 - self.gaps[j].0 > g.1 - g.0 {
                            return;
                        }
                        j
                    }
                };
                self.gaps.remove(j);
            }
            let i = self.gaps.partition_point(|&(a, _)| a < g.0);
            self.gaps.insert(i, g);
        }

        fn reserve(&mut self, start: u64, dur: u64, now: u64) {
            self.gaps.retain(|&(_, b)| b > now);
            let end = start + dur;
            let mut kept = vec![];
            for &(a, b) in &self.gaps {
                if b <= start || a >= end {
                    kept.push((a, b));
                    continue;
                }
                if a < start {
                    kept.push((a, start));
                }
                if b > end {
                    kept.push((end, b));
                }
            }
            let split = kept.len() > self.gaps.len();
            self.gaps = kept;
            if split && self.gaps.len() > GAPS {
                // The right part of a split gap is a new gap like any other.
                let i = self.gaps.iter().position(|&(a, _)| a == end).unwrap();
                let g = self.gaps.remove(i);
                self.add_gap(g, start);
            }
            if end > self.free_ns {
                if start > self.free_ns {
                    self.add_gap((self.free_ns, start), start);
                }
                self.free_ns = end;
            }
        }
    }

    /// The lane (gap index hints, fitting again from where a previous round stopped, gaps
    /// forgotten in place) places every operation exactly where the plain lane does: random
    /// operations, busy stretches where the lane runs ahead of the present and fills its 32
    /// gaps, calm ones where the present passes them.
    #[test]
    fn the_lane_places_operations_as_the_plain_lane_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(7);
        let (mut lane, mut plain) = (Lane::default(), PlainLane::default());
        let (mut now, mut full, mut dead) = (0u64, 0, 0);
        for k in 0..200_000 {
            now += if k / 10_000 % 2 == 0 { rng.gen_range(0..40) } else { rng.gen_range(0..3_000) };
            let ahead = plain.free_ns.saturating_sub(now);
            let earliest = now + rng.gen_range(0..ahead.min(50_000) * 3 / 2 + 2_000);
            let dur = rng.gen_range(1..400);
            let later = earliest + rng.gen_range(0..300);
            let (t, i) = lane.fit_from(0, earliest, dur);
            assert_eq!(t, plain.fit(earliest, dur));
            // A second round from a later start resumes at the first round's gap.
            let (t2, i2) = lane.fit_from(i, later.max(t), dur);
            assert_eq!(t2, plain.fit(later.max(t), dur));
            let (start, hint) = if rng.gen_bool(0.5) { (t, i) } else { (t2, i2) };
            let extra = rng.gen_range(0..100);
            dead += plain.gaps.iter().any(|&(_, b)| b <= now) as u32;
            lane.reserve_at(hint, start, dur + extra, now);
            plain.reserve(start, dur + extra, now);
            assert_eq!((lane.free_ns, &lane.gaps[..lane.n as usize]), (plain.free_ns, &plain.gaps[..]), "operation {k}");
            full += (plain.gaps.len() == GAPS) as u32;
        }
        assert!(full > 1_000 && dead > 10_000, "the lanes were full {full} times and had gaps in the past {dead} times");
    }

    #[test]
    fn an_op_waiting_for_its_data_does_not_hold_the_die_meanwhile() {
        let mut t = tl(|_| ());
        let p = t.t.page_program_ns;
        // A relocation program that must wait until t = 10 ms for its page...
        let late = t.program(0, 16384, 10_000_000);
        assert!(late >= 10_000_000 + p);
        // ...leaves die 0 free before then: an erase issued at 0 runs at once.
        assert_eq!(t.erase(0, 0), t.t.block_erase_ns);
        // Its channel neighbour is not dragged along either.
        assert!(t.program(1, 16384, 0) < 10_000_000);
    }

    #[test]
    fn busy_before_a_time_leaves_out_the_backlog_booked_past_it() {
        let mut l = Lane::default();
        l.reserve(100, 10, 0);
        l.reserve(200, 50, 0); // busy 100..110 and 200..250, idle between
        assert_eq!(l.booked_after(0), 60);
        assert_eq!(l.booked_after(105), 55);
        assert_eq!(l.booked_after(150), 50);
        assert_eq!(l.booked_after(240), 10);
        assert_eq!(l.booked_after(250), 0);
        // A die with a queue of programs booked at time 0 was busy at most the window by then.
        let mut t = tl(|_| ());
        let done = queue_programs(&mut t, 20);
        let mid = done / 2;
        let (before, total) = (t.die_busy_before_ns(mid)[0], t.die_busy_ns()[0]);
        assert!(before <= mid && total > mid, "{before} {total} {mid}");
        assert_eq!(t.die_busy_before_ns(done)[0], total);
        assert_eq!(t.die_busy_before_ns(0)[0], 0);
    }

    fn queue_programs(t: &mut Timelines, n: u64) -> u64 {
        (0..n).map(|_| t.program(0, 32768, 0)).max().unwrap()
    }

    #[test]
    fn reads_queue_in_issue_order_by_default() {
        let mut t = tl(|_| ());
        let end = queue_programs(&mut t, 20);
        assert!(t.read(0, 4096, 1_000) > end);
    }

    #[test]
    fn read_priority_waits_for_one_operation_only() {
        let mut t = tl(|t| t.read_priority = true);
        let end = queue_programs(&mut t, 20);
        let (p, r) = (t.t.page_program_ns, t.t.page_read_ns);
        let done = t.read(0, 4096, 1_000);
        assert!(done < 1_000 + p + r + 200_000, "read done at {done}, queue ends at {end}");
        // The queue behind it finishes later by the read's time.
        assert!(t.die[0].free_ns > end && t.die[0].free_ns < end + r + 100_000);
        // Garbage collection's reads still queue.
        assert!(t.read_queued(0, 4096, 1_000) >= t.die[0].free_ns - r - 100_000);
    }

    #[test]
    fn suspend_reads_do_not_wait_and_stay_bounded() {
        let mut t = tl(|t| t.suspend = true);
        let end = queue_programs(&mut t, 20);
        let (s, r) = (t.t.suspend_ns, t.t.page_read_ns);
        for i in 0..1000u64 {
            let at = 1_000 + i * 1_000;
            let done = t.read(0, 4096, at);
            assert!(done - at <= s + r + 2 * t.xfer_ns(4096), "read {i} took {}", done - at);
        }
        // A thousand suspensions delay the queue by their time (a transfer may wait for the
        // one in progress on its channel), no more.
        let per = s + r + 2 * t.xfer_ns(4096) + t.t.resume_ns;
        assert!(t.horizon_ns() <= end + 1000 * per + 1_000_000, "horizon {} end {end}", t.horizon_ns());
    }

    #[test]
    fn nothing_is_placed_before_the_present() {
        let mut t = tl(|_| ());
        t.set_now(1_000_000_000);
        // A caller with a stale earliest time still gets work that starts now or later.
        assert!(t.program(3, 32768, 0) >= 1_000_000_000 + t.t.page_program_ns);
        assert!(t.read_queued(3, 4096, 0) >= 1_000_000_000);
        assert!(t.erase(3, 0) >= 1_000_000_000 + t.t.block_erase_ns);
    }

    #[test]
    fn a_priority_read_on_an_idle_channel_books_its_transfer() {
        let mut t = tl(|t| t.read_priority = true);
        let done = t.read(0, 16384, 10_000_000);
        let x = t.xfer_ns(16384);
        // The channel is busy with the read's data-out, so a program on a neighbour die
        // cannot transfer over it.
        assert!(t.chan[0].busy_at(done - x / 2), "channel free during the read's transfer");
        let p = t.program(1, 16384, done - x);
        assert!(p >= done + t.t.page_program_ns, "program {p} overlapped the read ending at {done}");
    }

    #[test]
    fn delay_after_splits_a_gap_around_its_start() {
        let mut l = Lane::default();
        l.reserve(1000, 10, 0); // gap 0..1000
        l.delay_after(400, 50, 0); // busy 400..450 inside the gap
        assert_eq!(&l.gaps[..l.n as usize], &[(0, 400), (450, 1050)]);
        assert!(l.busy_at(420) && !l.busy_at(460) && l.busy_at(1055));
        assert_eq!(l.free_ns, 1060);
    }
}
