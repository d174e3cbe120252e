//! A host-side log, for running ordinary block workloads on devices written in append-only
//! containers: ZNS zones, open-channel chunks. What a log-structured host (a zoned file
//! system, a host FTL such as Linux's former pblk) does, minus its mapping table: writes are
//! appended to a current container per (stream, lane); full containers are left behind; when
//! a lane has no free container left, its oldest full one is reset (its data dropped, as a
//! log-structured cache would). Reads go to the address space as it is (data appended there,
//! or zeros): this host keeps no index, it exists to load the device realistically.
//!
//! - Streams: a workload with several address regions keeps them apart (a stream per region,
//!   by the write's address).
//! - Lanes: containers that are written in turn (open-channel: one lane per parallel unit,
//!   units dealt round-robin over them; ZNS: one lane, the device stripes zones itself).
//! - Devices with a write unit (open-channel's ws_min) get whole units: sectors gather in a
//!   host buffer per stream; flush and FUA pad the partial unit with zeros.
//! - A container that wears out on reset goes offline; the log skips it from then on, and
//!   reads of it return zeros without touching the device.

use std::collections::VecDeque;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{BlockDevice, WriteOpts};
use crate::error::{Error, Result, Status};
use crate::media::Media;

/// The state of a container, as the host log needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// Erased, nothing written.
    Free,
    /// Partly written (open or closed).
    Open,
    /// Written to its capacity.
    Full,
    /// Readable, no longer writable or resettable.
    ReadOnly,
    /// Neither readable nor writable.
    Offline,
}

/// A device written in append-only containers.
pub trait Containers: BlockDevice {
    /// What the device calls a container ("zone", "chunk").
    const NAME: &'static str;
    /// Lanes (groups of containers written in turn).
    fn lanes(&self) -> usize;
    /// The containers of lane `lane`.
    fn lane(&self, lane: usize) -> Range<usize>;
    /// Logical sectors between the starts of consecutive containers.
    fn span(&self) -> u64;
    /// Writable sectors of a container.
    fn capacity(&self) -> u64;
    /// Sectors every append must come in multiples of.
    fn write_unit(&self) -> u32;
    /// Addresses below this are written in place with ordinary writes (ZNS conventional
    /// zones).
    fn direct_sectors(&self) -> u64 {
        0
    }
    /// State of container `c` and the sectors written into it.
    fn container(&self, c: usize) -> (Container, u64);
    /// Append `sectors` at container `c`'s write pointer; returns the completion time.
    fn append(&mut self, c: usize, sectors: u32, data: Option<&[u8]>, fua: bool, now: u64) -> Result<u64>;
    /// Reset (erase) container `c`; returns the completion time.
    fn reset(&mut self, c: usize, now: u64) -> Result<u64>;
}

/// Persistent state of a [`HostLog`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostLogState {
    streams: usize,
    lanes: usize,
    /// Current container of each (stream, lane): `stream * lanes + lane`.
    current: Vec<Option<usize>>,
    /// Full containers of each lane, oldest first.
    filled: Vec<VecDeque<usize>>,
    /// Next lane of each stream.
    next_lane: Vec<usize>,
    /// Sectors buffered per stream (devices with a write unit), and their data.
    pending: Vec<u32>,
    pending_data: Vec<Vec<u8>>,
    /// Containers reset by the log.
    pub resets: u64,
    /// Zero sectors the log padded partial units with.
    pub pad_sectors: u64,
}

/// The host log over device `D`. See the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostLog<D> {
    pub dev: D,
    pub state: HostLogState,
}

impl<D: Containers> HostLog<D> {
    /// A log with `streams` address regions over `dev`.
    pub fn new(dev: D, streams: usize) -> HostLog<D> {
        let (streams, lanes) = (streams.max(1), dev.lanes());
        assert!(lanes > 0 && dev.write_unit() > 0, "a device of {}s has lanes and a write unit", D::NAME);
        assert!(dev.capacity().is_multiple_of(dev.write_unit() as u64), "a {} holds whole write units", D::NAME);
        let state = HostLogState {
            streams,
            lanes,
            current: vec![None; streams * lanes],
            filled: vec![VecDeque::new(); lanes],
            next_lane: vec![0; streams],
            pending: vec![0; streams],
            pending_data: vec![Vec::new(); streams],
            resets: 0,
            pad_sectors: 0,
        };
        HostLog { dev, state }
    }

    /// The container stream `s` writes in lane `lane`: its current one while writable, else a
    /// free one, else the lane's oldest full one after a reset.
    fn container_for(&mut self, s: usize, lane: usize, now: u64) -> Result<usize> {
        let slot = s * self.state.lanes + lane;
        if let Some(c) = self.state.current[slot] {
            match self.dev.container(c).0 {
                Container::Free | Container::Open => return Ok(c),
                Container::Full => self.state.filled[lane].push_back(c),
                Container::ReadOnly | Container::Offline => {}
            }
            self.state.current[slot] = None;
        }
        let current = &self.state.current;
        let free = self.dev.lane(lane).find(|&c| self.dev.container(c).0 == Container::Free && !current.contains(&Some(c)));
        let c = match free {
            Some(c) => c,
            None => loop {
                let c = self.state.filled[lane].pop_front().ok_or_else(|| {
                    Error::WornOut(format!("host log: no free or full {} left to reuse in lane {lane} (worn out?)", D::NAME))
                })?;
                // A full container may have gone read-only or offline since it filled.
                if self.dev.container(c).0 != Container::Full {
                    continue;
                }
                self.dev.reset(c, now)?;
                self.state.resets += 1;
                if self.dev.container(c).0 == Container::Free {
                    break c;
                }
            },
        };
        debug_assert!(self.dev.lane(lane).contains(&c), "{} {c} outside lane {lane}", D::NAME);
        debug_assert!(matches!(self.dev.container(c).0, Container::Free | Container::Open), "current {} {c} is not writable", D::NAME);
        self.state.current[slot] = Some(c);
        Ok(c)
    }

    /// Append `sectors` at container `c`, the current one of (stream, lane) `at` (it has
    /// room); a container that fills is left behind.
    fn append(&mut self, at: (usize, usize), c: usize, sectors: u32, data: Option<&[u8]>, fua: bool, now: u64) -> Result<u64> {
        let (s, lane) = at;
        debug_assert!(self.dev.container(c).1 + sectors as u64 <= self.dev.capacity(), "append past {} {c}'s capacity", D::NAME);
        let done = self.dev.append(c, sectors, data, fua, now)?;
        if self.dev.container(c).0 == Container::Full {
            self.state.filled[lane].push_back(c);
            self.state.current[s * self.state.lanes + lane] = None;
        }
        Ok(done)
    }

    /// Write stream `s`'s buffered unit to its next lane.
    fn write_unit(&mut self, s: usize, now: u64) -> Result<u64> {
        let lane = self.state.next_lane[s];
        self.state.next_lane[s] = (lane + 1) % self.state.lanes;
        let c = self.container_for(s, lane, now)?;
        let n = std::mem::take(&mut self.state.pending[s]);
        debug_assert_eq!(n, self.dev.write_unit(), "stream {s}: only whole units go to the device");
        let data = std::mem::take(&mut self.state.pending_data[s]);
        let keep = self.dev.media().data.is_some();
        let done = self.append((s, lane), c, n, keep.then_some(&data[..]), false, now)?;
        self.state.pending_data[s] = data;
        self.state.pending_data[s].clear();
        Ok(done)
    }

    /// Pad stream `s`'s buffered partial unit with zeros and write it.
    fn pad(&mut self, s: usize, now: u64) -> Result<u64> {
        let unit = self.dev.write_unit();
        let pending = self.state.pending[s];
        if pending == 0 {
            return Ok(now);
        }
        debug_assert!(pending < unit, "stream {s}: a full unit waits in the host buffer");
        self.state.pad_sectors += (unit - pending) as u64;
        if self.dev.media().data.is_some() {
            let sb = self.dev.layout().sector_bytes as usize;
            self.state.pending_data[s].resize(unit as usize * sb, 0);
        }
        self.state.pending[s] = unit;
        self.write_unit(s, now)
    }
}

impl<D: Containers> BlockDevice for HostLog<D> {
    fn media(&self) -> &Media {
        self.dev.media()
    }
    fn logical_sectors(&self) -> u64 {
        self.dev.logical_sectors()
    }

    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64> {
        let logical = self.logical_sectors();
        if sectors == 0 || lba + sectors as u64 > logical {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("write of {sectors} blocks at {lba} beyond the device")));
        }
        let sb = self.dev.layout().sector_bytes as usize;
        let mut remaining = sectors;
        let mut done = now;
        let mut off = 0usize;
        // Addresses below the direct region's end are written there in place; the rest is
        // logged.
        let direct = self.dev.direct_sectors();
        if lba < direct {
            let k = remaining.min((direct - lba) as u32);
            done = self.dev.write(lba, k, data.map(|d| &d[..k as usize * sb]), opts, now)?;
            remaining -= k;
            off += k as usize * sb;
        }
        let n = self.state.streams as u64;
        let s = ((lba * n) / logical.max(1)).min(n - 1) as usize;
        let unit = self.dev.write_unit();
        if unit == 1 {
            // The device buffers partial pages itself: append straight away.
            while remaining > 0 {
                let lane = self.state.next_lane[s];
                self.state.next_lane[s] = (lane + 1) % self.state.lanes;
                let c = self.container_for(s, lane, now)?;
                let room = (self.dev.capacity() - self.dev.container(c).1) as u32;
                debug_assert!(room > 0, "current {} {c} has no room", D::NAME);
                let k = remaining.min(room);
                let part = data.map(|d| &d[off..off + k as usize * sb]);
                done = done.max(self.append((s, lane), c, k, part, opts.fua, now)?);
                remaining -= k;
                off += k as usize * sb;
            }
            return Ok(done);
        }
        let keep = self.dev.media().data.is_some();
        while remaining > 0 {
            let k = remaining.min(unit - self.state.pending[s]);
            if keep {
                // Workloads without a payload write zeros.
                let buf = &mut self.state.pending_data[s];
                match data {
                    Some(d) => buf.extend_from_slice(&d[off..off + k as usize * sb]),
                    None => buf.resize(buf.len() + k as usize * sb, 0),
                }
            }
            self.state.pending[s] += k;
            if self.state.pending[s] == unit {
                done = done.max(self.write_unit(s, now)?);
            }
            remaining -= k;
            off += k as usize * sb;
        }
        debug_assert!(self.state.pending[s] < unit, "stream {s}: a full unit left in the host buffer");
        if opts.fua {
            done = done.max(self.pad(s, now)?);
        }
        Ok(done)
    }

    fn read(&mut self, lba: u64, sectors: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        let span = self.dev.span();
        let end = lba.saturating_add(sectors as u64);
        let offline = |dev: &D, c: u64| dev.container(c as usize).0 == Container::Offline;
        if sectors == 0 || end > self.logical_sectors() || !(lba / span..=(end - 1) / span).any(|c| offline(&self.dev, c)) {
            return self.dev.read(lba, sectors, out, now);
        }
        // The log reads only what it could have written: offline containers read as zeros.
        let sb = self.dev.layout().sector_bytes as usize;
        let mut done = now;
        let mut l = lba;
        while l < end {
            let k = (span - l % span).min(end - l);
            let c = l / span;
            let part = out.as_deref_mut().map(|o| &mut o[(l - lba) as usize * sb..(l - lba + k) as usize * sb]);
            if offline(&self.dev, c) {
                if let Some(p) = part {
                    p.fill(0);
                }
            } else {
                done = done.max(self.dev.read(l, k as u32, part, now)?);
            }
            l += k;
        }
        Ok(done)
    }

    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64> {
        self.dev.trim(lba, sectors, now)
    }

    /// The partial units of every stream, then the device's own flush.
    fn flush(&mut self, now: u64) -> Result<u64> {
        let mut done = now;
        for s in 0..self.state.streams {
            done = done.max(self.pad(s, now)?);
        }
        debug_assert!(self.state.pending.iter().all(|&p| p == 0), "a partial unit survives a flush");
        Ok(done.max(self.dev.flush(now)?))
    }

    fn free_blocks(&self) -> u32 {
        self.dev.free_blocks()
    }
    fn mapped_sectors(&self) -> u64 {
        self.dev.mapped_sectors()
    }
    fn check_invariants(&self) {
        self.dev.check_invariants();
        for (slot, c) in self.state.current.iter().enumerate() {
            if let Some(c) = *c {
                assert!(self.dev.lane(slot % self.state.lanes).contains(&c), "current {} {c} outside its lane", D::NAME);
            }
        }
        for (lane, q) in self.state.filled.iter().enumerate() {
            for &c in q {
                assert!(self.dev.lane(lane).contains(&c), "filled {} {c} outside lane {lane}", D::NAME);
                assert!(!self.state.current.contains(&Some(c)), "filled {} {c} is also current", D::NAME);
            }
        }
    }
}
