//! FlashBlox's log-structured API on a vSSD: `AllocBlock`, `WriteData`, `ReadData`,
//! `FreeBlock`, with the block maps they change, the per-die queues and chunk erases.

use std::cmp::Reverse;

use ssdlab_core::ftl::ocssd::{ChunkState, MAX_VECTOR, OOB_BYTES};

use super::{EraseKind, FlashBlox, Scratch, Vssd, NIL, NIL64, UNALLOCATED};
use crate::error::{Result, VssdError};
use crate::oob::{OobRecord, TIMESTAMP_MAX};

impl FlashBlox {
    /// `AllocBlock`: a free block of the vSSD, with an erased chunk on each stripe member.
    pub fn alloc_block(&mut self, id: u32) -> Result<u32> {
        let v = self.vssd(id)?;
        let b =
            *v.free.last().ok_or_else(|| VssdError::Api(format!("vSSD {id} has no free block ({} blocks, all allocated)", v.blocks)))?;
        let members: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
        let mut taken: Vec<(u32, u32, u32)> = Vec::with_capacity(members.len());
        for &(ld, lb) in &members {
            let home = self.ldies[ld as usize].home;
            let mut got = self.pdies[home as usize].free.pop();
            if got.is_none() {
                // Mid-swap the new home may be briefly full of blocks still to move out: take a
                // chunk on the old home and let the swap move this block too.
                if let Some(m) = self.swap.as_mut().and_then(|s| s.movers.iter_mut().find(|m| m.ldie == ld && m.to == home)) {
                    got = self.pdies[m.from as usize].free.pop();
                    if got.is_some() {
                        m.pending.push(lb);
                    }
                }
            }
            match got {
                Some(Reverse((_, c))) => taken.push((ld, lb, c)),
                None => {
                    for &(_, _, c) in &taken {
                        let die = c / self.geo.chunks_per_die;
                        let e = self.dev.chunk(c as usize).erase_count;
                        self.pdies[die as usize].free.push(Reverse((e, c)));
                    }
                    let p = &self.pdies[home as usize];
                    return Err(VssdError::WornOut(format!(
                        "physical die {home} has no erased block left ({} of {} chunks bad, reserve {})",
                        self.geo.chunks_per_die - p.good,
                        self.geo.chunks_per_die,
                        self.geo.reserve
                    )));
                }
            }
        }
        for (ld, lb, c) in taken {
            self.map_piece(ld, lb, c);
        }
        let v = self.vssds[id as usize].as_mut().expect("checked");
        v.free.pop();
        v.wp[b as usize] = 0;
        v.stats.blocks_allocated += 1;
        Ok(b)
    }

    pub(crate) fn map_piece(&mut self, ld: u32, lb: u32, c: u32) {
        let l = &mut self.ldies[ld as usize];
        assert_eq!(l.map[lb as usize], NIL, "logical block {lb} of die {ld} mapped twice");
        l.map[lb as usize] = c;
        l.mapped += 1;
        assert_eq!(self.owner[c as usize], NIL64, "chunk {c} owned twice");
        self.owner[c as usize] = (ld as u64) << 32 | lb as u64;
    }

    pub(super) fn unmap_piece(&mut self, ld: u32, lb: u32) -> u32 {
        let l = &mut self.ldies[ld as usize];
        let c = l.map[lb as usize];
        assert_ne!(c, NIL);
        l.map[lb as usize] = NIL;
        l.mapped -= 1;
        self.owner[c as usize] = NIL64;
        c
    }

    fn check_block(&self, id: u32, b: u32) -> Result<&Vssd> {
        let v = self.vssd(id)?;
        if b >= v.blocks || v.wp[b as usize] == UNALLOCATED {
            return Err(VssdError::Api(format!("block {b} of vSSD {id} is not allocated")));
        }
        Ok(v)
    }

    /// Sectors written so far in block `b`.
    pub fn block_written(&self, id: u32, b: u32) -> Result<u32> {
        Ok(self.check_block(id, b)?.wp[b as usize])
    }

    /// `WriteData`: append `sectors` (a multiple of the write unit) at `offset`, which must be
    /// the block's write pointer. Returns the completion time.
    pub fn write_data(&mut self, id: u32, b: u32, offset: u32, sectors: u32, data: Option<&[u8]>, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let v = self.check_block(id, b)?;
        let wp = v.wp[b as usize];
        let bs = v.block_sectors(&g);
        if offset != wp {
            return Err(VssdError::Api(format!(
                "write at sector {offset} of block {b}: its write pointer is at {wp} (blocks are written in order)"
            )));
        }
        if sectors == 0 || !sectors.is_multiple_of(g.ws_min) || offset + sectors > bs {
            return Err(VssdError::Api(format!(
                "write of {sectors} sectors at {offset}: whole units of {} sectors, within the block's {bs}",
                g.ws_min
            )));
        }
        if let (Some(d), true) = (data, self.data_backed) {
            if d.len() != sectors as usize * g.sector_bytes as usize {
                return Err(VssdError::Api(format!("{sectors} sectors but {} bytes of data", d.len())));
            }
        }
        let t = if self.swap.is_some() { self.stall(id, b, offset / g.ws_min, (offset + sectors) / g.ws_min, now)? } else { now };
        let mut v = self.vssds[id as usize].take().expect("checked");
        let r = self.write_units(&v, b, offset, sectors, data, t);
        if r.is_ok() {
            v.wp[b as usize] += sectors;
            v.stats.write_bytes += sectors as u64 * g.sector_bytes as u64;
        }
        self.vssds[id as usize] = Some(v);
        r
    }

    fn write_units(&mut self, v: &Vssd, b: u32, offset: u32, sectors: u32, data: Option<&[u8]>, t: u64) -> Result<u64> {
        let g = self.geo;
        let n = v.slots.len() as u32;
        let mut sc = std::mem::take(&mut self.scratch);
        sc.lbas.clear();
        sc.marks.clear();
        sc.dies.clear();
        let mut done = t;
        let mut first_sector = offset; // first sector of the command being built
        let last = (offset + sectors) / g.ws_min;
        for u in offset / g.ws_min..last {
            let i = (u % n) as usize;
            let cu = u / n;
            let (ld, lb) = (v.slots[i].ldie, v.bases[i] + b);
            let c = self.ldies[ld as usize].map[lb as usize];
            debug_assert_ne!(c, NIL);
            if cu == 0 {
                let rec =
                    OobRecord { ldie: ld, block: lb, erase_count: self.dev.chunk(c as usize).erase_count as u16, timestamp: self.clock };
                self.clock += 1;
                assert!(self.clock <= TIMESTAMP_MAX);
                sc.marks.push((sc.lbas.len(), rec.encode()));
            }
            let lba0 = c as u64 * g.clba as u64 + (cu * g.ws_min) as u64;
            sc.lbas.extend(lba0..lba0 + g.ws_min as u64);
            if self.timing && !sc.dies.contains(&(c / g.chunks_per_die)) {
                sc.dies.push(c / g.chunks_per_die);
            }
            if sc.lbas.len() + g.ws_min as usize > MAX_VECTOR || u + 1 == last {
                let k = (first_sector - offset) as usize * g.sector_bytes as usize;
                let part = data.map(|d| &d[k..k + sc.lbas.len() * g.sector_bytes as usize]);
                let r = self.issue_write(&mut sc, part, t);
                let d = match r {
                    Ok(d) => d,
                    Err(e) => {
                        self.scratch = sc;
                        return Err(e);
                    }
                };
                done = done.max(d);
                first_sector += sc.lbas.len() as u32;
                sc.lbas.clear();
                sc.marks.clear();
                sc.dies.clear();
            }
        }
        self.scratch = sc;
        Ok(done)
    }

    fn issue_write(&mut self, sc: &mut Scratch, data: Option<&[u8]>, t: u64) -> Result<u64> {
        let at = self.admit(&sc.dies, t);
        let oob = if sc.marks.is_empty() {
            None
        } else {
            sc.oob.clear();
            sc.oob.resize(sc.lbas.len() * OOB_BYTES, 0);
            for &(i, rec) in &sc.marks {
                sc.oob[i * OOB_BYTES..(i + 1) * OOB_BYTES].copy_from_slice(&rec);
            }
            Some(&sc.oob[..])
        };
        let done = self.dev.vector_write_oob(&sc.lbas, data, oob, at)?;
        self.complete(&sc.dies, done);
        Ok(done)
    }

    /// The per-die queues: a command waits until each die it touches has fewer than
    /// `die_queue_depth` commands in flight.
    pub(super) fn admit(&mut self, dies: &[u32], t: u64) -> u64 {
        if !self.timing {
            return t;
        }
        let depth = self.cfg.die_queue_depth as usize;
        let mut at = t;
        for &d in dies {
            let q = &mut self.pdies[d as usize].inflight;
            while q.peek().is_some_and(|r| r.0 <= at) {
                q.pop();
            }
            while q.len() >= depth {
                at = at.max(q.pop().expect("non-empty").0);
            }
        }
        at
    }

    pub(super) fn complete(&mut self, dies: &[u32], done: u64) {
        if self.timing {
            for &d in dies {
                self.pdies[d as usize].inflight.push(Reverse(done));
            }
        }
    }

    /// `ReadData`: read `sectors` at `offset` of block `b` (written sectors only). Returns the
    /// completion time.
    pub fn read_data(&mut self, id: u32, b: u32, offset: u32, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let v = self.check_block(id, b)?;
        let wp = v.wp[b as usize];
        if sectors == 0 || offset as u64 + sectors as u64 > wp as u64 {
            return Err(VssdError::Api(format!("read of {sectors} sectors at {offset} of block {b}: {wp} sectors are written")));
        }
        if let Some(o) = out.as_deref() {
            if o.len() != sectors as usize * g.sector_bytes as usize {
                return Err(VssdError::Api(format!("{sectors} sectors but a buffer of {} bytes", o.len())));
            }
        }
        let t = if self.swap.is_some() { self.stall(id, b, offset / g.ws_min, (offset + sectors).div_ceil(g.ws_min), now)? } else { now };
        let mut v = self.vssds[id as usize].take().expect("checked");
        let r = self.read_sectors(&v, b, offset, sectors, out, t);
        if r.is_ok() {
            v.stats.read_bytes += sectors as u64 * g.sector_bytes as u64;
        }
        self.vssds[id as usize] = Some(v);
        r
    }

    fn read_sectors(&mut self, v: &Vssd, b: u32, offset: u32, sectors: u32, mut out: Option<&mut [u8]>, t: u64) -> Result<u64> {
        let g = self.geo;
        let n = v.slots.len() as u32;
        let mut sc = std::mem::take(&mut self.scratch);
        sc.lbas.clear();
        sc.dies.clear();
        let mut done = t;
        let mut first = offset;
        let sb = g.sector_bytes as usize;
        let mut s = offset;
        let end = offset + sectors;
        while s < end {
            let u = s / g.ws_min;
            let i = (u % n) as usize;
            let c = self.ldies[v.slots[i].ldie as usize].map[(v.bases[i] + b) as usize];
            let in_unit = s % g.ws_min;
            let run = (g.ws_min - in_unit).min(end - s).min((MAX_VECTOR - sc.lbas.len()) as u32);
            let lba0 = c as u64 * g.clba as u64 + ((u / n) * g.ws_min + in_unit) as u64;
            sc.lbas.extend(lba0..lba0 + run as u64);
            if self.timing && !sc.dies.contains(&(c / g.chunks_per_die)) {
                sc.dies.push(c / g.chunks_per_die);
            }
            s += run;
            if sc.lbas.len() == MAX_VECTOR || s == end {
                let at = self.admit(&sc.dies, t);
                let k = (first - offset) as usize * sb;
                let part = out.as_deref_mut().map(|o| &mut o[k..k + sc.lbas.len() * sb]);
                let d = match self.dev.vector_read(&sc.lbas, part, at) {
                    Ok(d) => d,
                    Err(e) => {
                        self.scratch = sc;
                        return Err(e.into());
                    }
                };
                self.complete(&sc.dies, d);
                done = done.max(d);
                first += sc.lbas.len() as u32;
                sc.lbas.clear();
                sc.dies.clear();
            }
        }
        self.scratch = sc;
        Ok(done)
    }

    /// `FreeBlock`: erase the block's chunks (those written) and return them to their dies'
    /// free heaps; the block is free for `alloc_block` again. Returns the completion time.
    pub fn free_block(&mut self, id: u32, b: u32, now: u64) -> Result<u64> {
        self.wear_tick(now)?;
        let g = self.geo;
        let units = self.check_block(id, b)?.block_sectors(&g) / g.ws_min;
        let t = if self.swap.is_some() { self.stall(id, b, 0, units, now)? } else { now };
        let v = self.vssds[id as usize].as_ref().expect("checked");
        let pieces: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
        let mut resets: Vec<(u32, u32)> = Vec::with_capacity(pieces.len()); // (chunk, ldie)
        for (ld, lb) in pieces {
            let c = self.unmap_piece(ld, lb);
            if self.dev.chunk(c as usize).wp > c as u64 * g.clba as u64 {
                resets.push((c, ld));
            } else {
                let die = c / g.chunks_per_die;
                self.pdies[die as usize].free.push(Reverse((self.dev.chunk(c as usize).erase_count, c)));
            }
        }
        let done = self.erase_chunks(&resets, t, EraseKind::Tenant)?;
        let v = self.vssds[id as usize].as_mut().expect("checked");
        v.wp[b as usize] = UNALLOCATED;
        v.free.push(b);
        v.stats.blocks_freed += 1;
        v.stats.chunk_erases += resets.len() as u64;
        self.wear_tick(done.max(now))?;
        Ok(done)
    }

    /// Reset `chunks` (each with the logical die it belonged to) and put them back on their
    /// dies' free heaps; a chunk whose erase retired a block goes offline and is lost to its
    /// die. Erases of a swap or of recovery count as wear but not in the tenants' wear rate.
    pub(crate) fn erase_chunks(&mut self, chunks: &[(u32, u32)], t: u64, kind: EraseKind) -> Result<u64> {
        let g = self.geo;
        let mut done = t;
        for part in chunks.chunks(MAX_VECTOR) {
            let mut lbas = [0u64; MAX_VECTOR];
            let mut dies = [0u32; MAX_VECTOR];
            for (k, &(c, _)) in part.iter().enumerate() {
                lbas[k] = c as u64 * g.clba as u64;
                dies[k] = c / g.chunks_per_die;
            }
            let at = self.admit(&dies[..part.len()], t);
            let d = self.dev.vector_reset(&lbas[..part.len()], at)?;
            self.complete(&dies[..part.len()], d);
            done = done.max(d);
        }
        for &(c, ld) in chunks {
            let die = c / g.chunks_per_die;
            let info = self.dev.chunk(c as usize);
            let p = &mut self.pdies[die as usize];
            p.erases += 1;
            if info.state == ChunkState::Offline {
                p.good -= 1;
            } else {
                p.free.push(Reverse((info.erase_count, c)));
            }
            match kind {
                EraseKind::Migration => self.mig.erases += 1,
                EraseKind::Recovery => {}
                EraseKind::Tenant => {
                    self.wear.epoch_bytes[(die / g.dies_per_channel) as usize] += g.chunk_bytes;
                    self.ldies[ld as usize].epoch_erases += 1;
                }
            }
        }
        Ok(done)
    }
}
