//! A log-structured block store on a vSSD: a sector-addressed disk whose writes are appended
//! to the head block unit by unit and whose map (logical sector -> block, sector) lives in
//! memory, with greedy cleaning at erase-block granularity. fio-like jobs (random or
//! sequential reads and writes of any size) and block traces run on it, the role the
//! document's vLFS plays for applications that cannot be changed.
//!
//! Timing: a write completes when the units holding its sectors are programmed; sectors left
//! in a partial unit are acknowledged from the host buffer at once. A read reads the runs of
//! sectors that sit next to each other on the media; sectors never written (or trimmed) read
//! as zeros without I/O, those still in the buffer from memory.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use ssdlab_core::ftl::victim::greedy;

use crate::error::{Result, VssdError};
use crate::flashblox::BlockApi;

const NIL: u64 = u64::MAX;
const NO_LBA: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogDiskStats {
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    /// Bytes of units programmed (host data and cleaning).
    pub device_write_bytes: u64,
    pub gc_victims: u64,
    pub gc_moved_sectors: u64,
    pub write_stalls: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Free,
    Head,
    Full,
}

#[derive(Debug, Clone)]
pub struct LogDisk {
    sectors: u64,
    unit_sectors: u32,
    block_sectors: u32,
    sector_bytes: u32,
    /// Logical sector -> (block << 32 | sector in block).
    map: Vec<u64>,
    /// Per block: the logical sector of each of its sectors (NO_LBA: stale).
    p2l: Vec<Vec<u32>>,
    valid: Vec<u32>,
    state: Vec<BlockState>,
    /// Head block and its next sector (the start of the unit being filled).
    head: Option<(u32, u32)>,
    /// Logical sectors in the unit being filled, and their bytes (data-backed devices).
    ubuf: Vec<u32>,
    udata: Vec<u8>,
    inflight: VecDeque<u64>,
    max_inflight: usize,
    reserve: u32,
    cleaning: bool,
    stats: LogDiskStats,
}

impl LogDisk {
    /// A disk of `logical_sectors` on the vSSD behind `io` (at most its capacity less
    /// `reserve_blocks + 2` blocks: cleaning needs room).
    pub fn new(io: &dyn BlockApi, logical_sectors: u64, reserve_blocks: u32, max_inflight_units: u32) -> Result<LogDisk> {
        let bs = io.block_sectors();
        let blocks = io.blocks();
        let room = (blocks.saturating_sub(reserve_blocks + 2)) as u64 * bs as u64;
        if logical_sectors == 0 || logical_sectors > room || logical_sectors >= NO_LBA as u64 {
            return Err(VssdError::Config(format!(
                "disk of {logical_sectors} sectors on a vSSD of {blocks} blocks x {bs} sectors: 1 to {room} (cleaning needs {} spare blocks)",
                reserve_blocks + 2
            )));
        }
        if reserve_blocks == 0 || max_inflight_units == 0 {
            return Err(VssdError::Config("disk: reserve_blocks and max_inflight_units must be at least 1".into()));
        }
        Ok(LogDisk {
            sectors: logical_sectors,
            unit_sectors: io.unit_sectors(),
            block_sectors: bs,
            sector_bytes: io.sector_bytes(),
            map: vec![NIL; logical_sectors as usize],
            p2l: vec![vec![]; blocks as usize],
            valid: vec![0; blocks as usize],
            state: vec![BlockState::Free; blocks as usize],
            head: None,
            ubuf: Vec::with_capacity(io.unit_sectors() as usize),
            udata: vec![],
            inflight: VecDeque::new(),
            max_inflight: max_inflight_units as usize,
            reserve: reserve_blocks,
            cleaning: false,
            stats: LogDiskStats::default(),
        })
    }

    pub fn sectors(&self) -> u64 {
        self.sectors
    }
    pub fn stats(&self) -> LogDiskStats {
        self.stats
    }
    /// Mapped sectors over the vSSD's capacity.
    pub fn utilization(&self) -> f64 {
        self.valid.iter().map(|&v| v as u64).sum::<u64>() as f64 / (self.valid.len() as f64 * self.block_sectors as f64)
    }

    fn check(&self, lba: u64, n: u32) -> Result<()> {
        if n == 0 || lba + n as u64 > self.sectors {
            return Err(VssdError::Api(format!("disk I/O of {n} sectors at {lba}: the disk has {} sectors", self.sectors)));
        }
        Ok(())
    }

    fn invalidate(&mut self, lba: u64) {
        let old = self.map[lba as usize];
        if old != NIL {
            let (b, s) = ((old >> 32) as usize, old as u32 as usize);
            self.p2l[b][s] = NO_LBA;
            self.valid[b] -= 1;
            self.map[lba as usize] = NIL;
        }
    }

    /// Write `n` sectors at `lba` (`data`: their bytes on data-backed devices).
    pub fn write(&mut self, io: &mut dyn BlockApi, lba: u64, n: u32, data: Option<&[u8]>, now: u64) -> Result<u64> {
        self.check(lba, n)?;
        let sb = self.sector_bytes as usize;
        self.stats.host_write_bytes += n as u64 * sb as u64;
        let mut done = now;
        for k in 0..n {
            let d = data.filter(|_| io.data_backed()).map(|d| &d[k as usize * sb..(k as usize + 1) * sb]);
            done = done.max(self.append(io, (lba + k as u64) as u32, d, now, now)?);
        }
        Ok(done)
    }

    /// Append one logical sector; its data is ready at `earliest`.
    fn append(&mut self, io: &mut dyn BlockApi, lba: u32, data: Option<&[u8]>, now: u64, earliest: u64) -> Result<u64> {
        let mut t = now;
        if self.head.is_none() {
            t = t.max(self.new_head(io, now)?);
        }
        self.invalidate(lba as u64);
        let (b, s) = self.head.expect("head");
        let pos = s + self.ubuf.len() as u32;
        self.p2l[b as usize][pos as usize] = lba;
        self.valid[b as usize] += 1;
        self.map[lba as usize] = (b as u64) << 32 | pos as u64;
        self.ubuf.push(lba);
        if io.data_backed() {
            match data {
                Some(d) => self.udata.extend_from_slice(d),
                None => self.udata.resize(self.udata.len() + self.sector_bytes as usize, 0),
            }
        }
        if self.ubuf.len() as u32 == self.unit_sectors {
            t = t.max(self.flush(io, now, earliest)?);
        }
        Ok(t)
    }

    fn flush(&mut self, io: &mut dyn BlockApi, now: u64, earliest: u64) -> Result<u64> {
        let (b, s) = self.head.expect("head");
        let data = if io.data_backed() { Some(&self.udata[..]) } else { None };
        let done = io.write_data(b, s, self.unit_sectors, data, earliest.max(now))?;
        self.stats.device_write_bytes += (self.unit_sectors * self.sector_bytes) as u64;
        self.ubuf.clear();
        self.udata.clear();
        self.inflight.push_back(done);
        let mut t = done;
        while self.inflight.len() > self.max_inflight {
            let oldest = self.inflight.pop_front().expect("non-empty");
            if oldest > now {
                self.stats.write_stalls += 1;
            }
            t = t.max(oldest);
        }
        let next = s + self.unit_sectors;
        if next == self.block_sectors {
            self.state[b as usize] = BlockState::Full;
            self.head = None;
        } else {
            self.head = Some((b, next));
        }
        Ok(t)
    }

    fn new_head(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<u64> {
        let mut t = now;
        if !self.cleaning {
            let mut rounds = 0;
            while io.free_blocks() <= self.reserve {
                t = t.max(self.clean(io, now)?);
                rounds += 1;
                if rounds > io.blocks() {
                    return Err(VssdError::Api("disk: cleaning frees nothing (the disk is full)".into()));
                }
                if self.head.is_some() {
                    return Ok(t);
                }
            }
        }
        let b = io.alloc_block()?;
        self.state[b as usize] = BlockState::Head;
        self.p2l[b as usize] = vec![NO_LBA; self.block_sectors as usize];
        self.head = Some((b, 0));
        Ok(t)
    }

    /// Clean the full block with the fewest valid sectors: read its valid runs, append them,
    /// free it.
    fn clean(&mut self, io: &mut dyn BlockApi, now: u64) -> Result<u64> {
        let victim = greedy((0..self.state.len()).filter(|&b| self.state[b] == BlockState::Full), |b| self.valid[b])
            .ok_or_else(|| VssdError::Api("disk: no full block to clean".into()))? as u32;
        self.cleaning = true;
        self.stats.gc_victims += 1;
        let p2l = std::mem::take(&mut self.p2l[victim as usize]);
        let sb = self.sector_bytes as usize;
        let mut t = now;
        let mut s = 0u32;
        let mut read_done = now;
        let mut moves: Vec<(u32, Vec<u8>)> = vec![];
        while s < self.block_sectors {
            if p2l[s as usize] == NO_LBA {
                s += 1;
                continue;
            }
            let start = s;
            while s < self.block_sectors && p2l[s as usize] != NO_LBA {
                s += 1;
            }
            let n = s - start;
            let mut buf = if io.data_backed() { vec![0u8; n as usize * sb] } else { vec![] };
            let out = if io.data_backed() { Some(&mut buf[..]) } else { None };
            read_done = read_done.max(io.read_data(victim, start, n, out, now)?);
            for k in 0..n {
                let d = if io.data_backed() { buf[k as usize * sb..(k as usize + 1) * sb].to_vec() } else { vec![] };
                moves.push((p2l[(start + k) as usize], d));
            }
        }
        self.p2l[victim as usize] = p2l;
        for (lba, d) in moves {
            let data = if io.data_backed() { Some(&d[..]) } else { None };
            t = t.max(self.append(io, lba, data, now, read_done)?);
            self.stats.gc_moved_sectors += 1;
        }
        assert_eq!(self.valid[victim as usize], 0, "valid sectors left in the cleaned block");
        io.free_block(victim, read_done)?;
        self.state[victim as usize] = BlockState::Free;
        self.p2l[victim as usize] = vec![];
        self.cleaning = false;
        Ok(t)
    }

    /// Read `n` sectors at `lba` into `out` (data-backed devices).
    pub fn read(&mut self, io: &mut dyn BlockApi, lba: u64, n: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.check(lba, n)?;
        let sb = self.sector_bytes as usize;
        self.stats.host_read_bytes += n as u64 * sb as u64;
        let mut done = now;
        let mut k = 0u32;
        while k < n {
            let m = self.map[(lba + k as u64) as usize];
            if m == NIL {
                if let Some(o) = out.as_deref_mut() {
                    o[k as usize * sb..(k as usize + 1) * sb].fill(0);
                }
                k += 1;
                continue;
            }
            let (b, s) = ((m >> 32) as u32, m as u32);
            if let Some((hb, hs)) = self.head {
                if b == hb && s >= hs {
                    if let Some(o) = out.as_deref_mut() {
                        let i = (s - hs) as usize;
                        o[k as usize * sb..(k as usize + 1) * sb].copy_from_slice(&self.udata[i * sb..(i + 1) * sb]);
                    }
                    k += 1;
                    continue;
                }
            }
            // A run of sectors that follow each other on the media too.
            let mut r = 1;
            while k + r < n && self.map[(lba + (k + r) as u64) as usize] == (b as u64) << 32 | (s + r) as u64 {
                if let Some((hb, hs)) = self.head {
                    if b == hb && s + r >= hs {
                        break;
                    }
                }
                r += 1;
            }
            let part = out.as_deref_mut().map(|o| &mut o[k as usize * sb..(k + r) as usize * sb]);
            done = done.max(io.read_data(b, s, r, part, now)?);
            k += r;
        }
        Ok(done)
    }

    /// Forget `n` sectors at `lba`.
    pub fn trim(&mut self, lba: u64, n: u32) -> Result<()> {
        self.check(lba, n)?;
        for k in 0..n as u64 {
            self.invalidate(lba + k);
        }
        Ok(())
    }
}
