//! Rebuilding the vSSD layer after a crash from what survives it: the device (its chunks and
//! their OOB records) and the layout table the host persisted (allocations, homes, a swap in
//! progress).
//!
//! Each written chunk's OOB record names the logical block it holds. A logical block normally
//! has one chunk naming it: `free_block` erases before the block can be reused. Two chunks
//! name the same block only when a crash hit a migration, which copies into a new chunk
//! (stamped with a newer timestamp) before it erases the old one: the newer copy wins when it
//! is complete (at least as long as the older), else the older one does and the partial copy
//! is erased. Chunks whose records name nothing a live vSSD owns are erased too.

use std::cmp::Reverse;

use serde::{Deserialize, Serialize};
use ssdlab_core::ftl::ocssd::{ChunkState, Ocssd};

use crate::error::{Result, VssdError};
use crate::flashblox::{EraseKind, FlashBlox, Move, Mover, Swap, NIL};
use crate::oob::OobRecord;

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    pub chunks_scanned: u64,
    pub records_read: u64,
    pub blocks_recovered: u64,
    /// Blocks with two copies (a migration the crash interrupted).
    pub duplicates: u64,
    /// Partial copies and orphan chunks erased.
    pub chunks_erased: u64,
    pub swap_resumed: bool,
    /// Simulated time the OOB scan took (one read of each written chunk's first sector).
    pub scan_ns: u64,
}

/// A chunk that names a logical block a live vSSD owns: (logical die, block, timestamp,
/// chunk, sectors written).
type Candidate = (u32, u32, u64, u32, u64);

/// Which vSSD (and which of its blocks) each logical block of each logical die belongs to
/// (`NIL`: none).
type Cover = Vec<Vec<(u32, u32)>>;

/// What the OOB scan found: the chunks naming a live block, the orphans to erase (chunk,
/// logical die), and when the scan ended.
struct Scan {
    cands: Vec<Candidate>,
    orphans: Vec<(u32, u32)>,
    done: u64,
}

impl FlashBlox {
    /// Rebuild the layer on `dev` (the device as the crash left it) from `table` (the last
    /// layout table the host persisted), at simulated time `now`.
    pub fn recover(dev: Ocssd, table: &crate::flashblox::LayoutTable, now: u64) -> Result<(FlashBlox, RecoveryReport)> {
        let mut fb = FlashBlox::empty(dev, table.config.clone());
        let mut rep = RecoveryReport::default();
        fb.restore_homes(table)?;
        let cover = fb.reinstall_vssds(table)?;
        let Scan { cands, mut orphans, done: scan_done } = fb.scan_chunks(&cover, now, &mut rep)?;
        rep.scan_ns = scan_done - now;
        fb.map_winners(cands, &mut orphans, &mut rep);
        // Allocated blocks: those with any piece mapped; their other pieces get erased chunks
        // again; stripes must be prefixes of the round-robin unit order.
        for id in table.vssds.iter().map(|v| v.id).collect::<Vec<u32>>() {
            fb.rebuild_blocks(id, &mut rep)?;
        }
        rep.chunks_erased = orphans.len() as u64;
        let erased = fb.erase_chunks(&orphans, scan_done, EraseKind::Recovery)?;
        fb.resume_swap(table, erased, &mut rep);
        fb.check_homes()?;
        fb.layout_version += 1;
        if !fb.timing() {
            while fb.swapping() {
                fb.migration_step(erased)?;
            }
        }
        Ok((fb, rep))
    }

    /// Each logical die's home from the table (a permutation of the physical dies).
    fn restore_homes(&mut self, table: &crate::flashblox::LayoutTable) -> Result<()> {
        let g = self.geo;
        if table.homes.len() != g.dies as usize {
            return Err(VssdError::Recovery(format!("the table has {} homes for {} dies", table.homes.len(), g.dies)));
        }
        let mut seen = vec![false; g.dies as usize];
        for (ld, &h) in table.homes.iter().enumerate() {
            if h >= g.dies || std::mem::replace(&mut seen[h as usize], true) {
                return Err(VssdError::Recovery(format!("homes are not a permutation of the dies (logical die {ld} -> {h})")));
            }
            self.ldies[ld].home = h;
            self.pdies[h as usize].ldie = ld as u32;
        }
        Ok(())
    }

    /// The table's vSSDs installed again; returns which vSSD block each logical block belongs
    /// to.
    fn reinstall_vssds(&mut self, table: &crate::flashblox::LayoutTable) -> Result<Cover> {
        let g = self.geo;
        let mut cover = vec![vec![(NIL, 0u32); g.ldie_blocks as usize]; g.dies as usize];
        for v in &table.vssds {
            self.res.assign(v.id, &v.slots)?;
            self.install(v.id, v.level, v.tput_level, v.capacity_bytes, v.slots.clone());
            let vs = self.vssd(v.id)?;
            for (s, &base) in vs.slots.iter().zip(&vs.bases) {
                for b in 0..vs.blocks {
                    cover[s.ldie as usize][(base + b) as usize] = (v.id, b);
                }
            }
        }
        Ok(cover)
    }

    /// Scan: one read of each written chunk's first sector (its OOB record). Counts good
    /// chunks and erases per die, puts erased chunks on the free heaps.
    fn scan_chunks(&mut self, cover: &Cover, now: u64, rep: &mut RecoveryReport) -> Result<Scan> {
        let g = self.geo;
        let mut cands: Vec<Candidate> = vec![];
        let mut orphans: Vec<(u32, u32)> = vec![];
        let mut scan_done = now;
        for c in 0..self.dev.chunks() {
            rep.chunks_scanned += 1;
            let info = self.dev.chunk(c);
            let die = c as u32 / g.chunks_per_die;
            let p = &mut self.pdies[die as usize];
            p.erases += info.erase_count as u64;
            if info.state == ChunkState::Offline {
                continue;
            }
            p.good += 1;
            let written = info.wp - info.slba;
            if written == 0 {
                p.free.push(Reverse((info.erase_count, c as u32)));
                continue;
            }
            scan_done = scan_done.max(self.dev.vector_read(&[info.slba], None, now)?);
            rep.records_read += 1;
            match self.dev.chunk_oob(info.slba)? {
                Some(raw) => {
                    let r = OobRecord::decode(&raw);
                    if r.erase_count != info.erase_count as u16 {
                        return Err(VssdError::Recovery(format!(
                            "chunk {c}: OOB erase count {} but the device reports {}",
                            r.erase_count, info.erase_count
                        )));
                    }
                    self.clock = self.clock.max(r.timestamp + 1);
                    let known = r.ldie < g.dies && r.block < g.ldie_blocks && cover[r.ldie as usize][r.block as usize].0 != NIL;
                    if known {
                        cands.push((r.ldie, r.block, r.timestamp, c as u32, written));
                    } else {
                        orphans.push((c as u32, r.ldie.min(g.dies - 1)));
                    }
                }
                None => orphans.push((c as u32, self.pdies[die as usize].ldie)),
            }
        }
        Ok(Scan { cands, orphans, done: scan_done })
    }

    /// One winner per logical block: newest first, unless an older copy is longer. The
    /// losers join the orphans.
    fn map_winners(&mut self, mut cands: Vec<Candidate>, orphans: &mut Vec<(u32, u32)>, rep: &mut RecoveryReport) {
        cands.sort_by_key(|&(ld, lb, ts, _, _)| (ld, lb, Reverse(ts)));
        let mut i = 0;
        while i < cands.len() {
            let (ld, lb) = (cands[i].0, cands[i].1);
            let j = i + cands[i..].iter().take_while(|x| (x.0, x.1) == (ld, lb)).count();
            let group = &cands[i..j];
            let longest_older = |k: usize| group[k + 1..].iter().map(|x| x.4).max().unwrap_or(0);
            let win = (0..group.len()).find(|&k| group[k].4 >= longest_older(k)).expect("the oldest copy always qualifies");
            if group.len() > 1 {
                rep.duplicates += 1;
            }
            for (k, x) in group.iter().enumerate() {
                if k == win {
                    self.map_piece(ld, lb, x.3);
                } else {
                    orphans.push((x.3, ld));
                }
            }
            i = j;
        }
    }

    /// vSSD `id`'s blocks: a block with any piece mapped is allocated, its stripe checked and
    /// its unwritten pieces given erased chunks again; the others are free.
    fn rebuild_blocks(&mut self, id: u32, rep: &mut RecoveryReport) -> Result<()> {
        let g = self.geo;
        let v = self.vssd(id)?.clone();
        let n = v.slots.len() as u32;
        let mut free = vec![];
        let mut wp = vec![u32::MAX; v.blocks as usize];
        for b in 0..v.blocks {
            let pieces: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
            let written: Vec<Option<u64>> = pieces
                .iter()
                .map(|&(ld, lb)| {
                    let c = self.ldies[ld as usize].map[lb as usize];
                    (c != NIL).then(|| self.dev.chunk(c as usize).wp - c as u64 * g.clba as u64)
                })
                .collect();
            if written.iter().all(|w| w.is_none()) {
                free.push(b);
                continue;
            }
            let total: u64 = written.iter().map(|w| w.unwrap_or(0)).sum();
            let units = (total / g.ws_min as u64) as u32;
            for (k, w) in written.iter().enumerate() {
                let want = (units / n + u32::from((k as u32) < units % n)) as u64 * g.ws_min as u64;
                if w.unwrap_or(0) != want {
                    return Err(VssdError::Recovery(format!(
                        "vSSD {id} block {b}: member {k} holds {} sectors, the stripe of {total} needs {want}",
                        w.unwrap_or(0)
                    )));
                }
            }
            for (k, w) in written.iter().enumerate() {
                if w.is_none() {
                    let (ld, lb) = pieces[k];
                    let home = self.ldies[ld as usize].home;
                    let Some(Reverse((_, c))) = self.pdies[home as usize].free.pop() else {
                        return Err(VssdError::WornOut(format!("recovery: die {home} has no erased block for vSSD {id} block {b}")));
                    };
                    self.map_piece(ld, lb, c);
                }
            }
            wp[b as usize] = total as u32;
            rep.blocks_recovered += 1;
        }
        // A block allocated but never written left nothing on the media: it is free again.
        let vs = self.vssds[id as usize].as_mut().expect("installed");
        vs.wp = wp;
        free.reverse();
        vs.free = free;
        Ok(())
    }

    /// A swap in progress carries on with what is left on the old dies.
    fn resume_swap(&mut self, table: &crate::flashblox::LayoutTable, erased: u64, rep: &mut RecoveryReport) {
        let g = self.geo;
        let Some(sw) = &table.swap else { return };
        let mut movers = vec![];
        for &(ld, from, to) in &sw.moves {
            let pending: Vec<u32> = (0..g.ldie_blocks)
                .filter(|&lb| {
                    let c = self.ldies[ld as usize].map[lb as usize];
                    c != NIL && c / g.chunks_per_die == from
                })
                .rev()
                .collect();
            movers.push(Mover { ldie: ld, from, to, pending, cur: None::<Move>, next_ns: erased });
        }
        if movers.iter().any(|m| !m.pending.is_empty()) {
            self.swap = Some(Swap { channels: sw.channels, movers, started_ns: erased, last_ns: erased });
            rep.swap_resumed = true;
        }
    }

    /// Every mapped block is on its logical die's home, or on the die a swap moves it from.
    fn check_homes(&self) -> Result<()> {
        let g = self.geo;
        for (ld, l) in self.ldies.iter().enumerate() {
            for (lb, &c) in l.map.iter().enumerate() {
                if c == NIL {
                    continue;
                }
                let on = c / g.chunks_per_die;
                let moving = self.swap.as_ref().is_some_and(|s| s.movers.iter().any(|m| m.ldie == ld as u32 && m.from == on));
                if on != l.home && !moving {
                    return Err(VssdError::Recovery(format!("logical die {ld} block {lb} is on die {on}, not its home {}", l.home)));
                }
            }
        }
        Ok(())
    }
}
