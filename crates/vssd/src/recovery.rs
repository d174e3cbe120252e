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

impl FlashBlox {
    /// Rebuild the layer on `dev` (the device as the crash left it) from `table` (the last
    /// layout table the host persisted), at simulated time `now`.
    pub fn recover(dev: Ocssd, table: &crate::flashblox::LayoutTable, now: u64) -> Result<(FlashBlox, RecoveryReport)> {
        let mut fb = FlashBlox::empty(dev, table.config.clone());
        let g = *fb.geo();
        let mut rep = RecoveryReport::default();
        if table.homes.len() != g.dies as usize {
            return Err(VssdError::Recovery(format!("the table has {} homes for {} dies", table.homes.len(), g.dies)));
        }
        let mut seen = vec![false; g.dies as usize];
        for (ld, &h) in table.homes.iter().enumerate() {
            if h >= g.dies || std::mem::replace(&mut seen[h as usize], true) {
                return Err(VssdError::Recovery(format!("homes are not a permutation of the dies (logical die {ld} -> {h})")));
            }
            fb.ldies[ld].home = h;
            fb.pdies[h as usize].ldie = ld as u32;
        }
        // Which vSSD (and which of its blocks) each logical block belongs to.
        let mut cover = vec![vec![(NIL, 0u32); g.ldie_blocks as usize]; g.dies as usize];
        for v in &table.vssds {
            fb.res.assign(v.id, &v.slots)?;
            fb.install(v.id, v.level, v.tput_level, v.capacity_bytes, v.slots.clone());
            let vs = fb.vssd(v.id)?;
            for (s, &base) in vs.slots.iter().zip(&vs.bases) {
                for b in 0..vs.blocks {
                    cover[s.ldie as usize][(base + b) as usize] = (v.id, b);
                }
            }
        }
        // Scan: one read of each written chunk's first sector (its OOB record).
        let mut cands: Vec<(u32, u32, u64, u32, u64)> = vec![]; // (ldie, block, timestamp, chunk, written)
        let mut orphans: Vec<(u32, u32)> = vec![];
        let mut scan_done = now;
        for c in 0..fb.dev.chunks() {
            rep.chunks_scanned += 1;
            let info = fb.dev.chunk(c);
            let die = c as u32 / g.chunks_per_die;
            let p = &mut fb.pdies[die as usize];
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
            scan_done = scan_done.max(fb.dev.vector_read(&[info.slba], None, now)?);
            rep.records_read += 1;
            match fb.dev.chunk_oob(info.slba)? {
                Some(raw) => {
                    let r = OobRecord::decode(&raw);
                    if r.erase_count != info.erase_count as u16 {
                        return Err(VssdError::Recovery(format!(
                            "chunk {c}: OOB erase count {} but the device reports {}",
                            r.erase_count, info.erase_count
                        )));
                    }
                    fb.clock = fb.clock.max(r.timestamp + 1);
                    let known = r.ldie < g.dies && r.block < g.ldie_blocks && cover[r.ldie as usize][r.block as usize].0 != NIL;
                    if known {
                        cands.push((r.ldie, r.block, r.timestamp, c as u32, written));
                    } else {
                        orphans.push((c as u32, r.ldie.min(g.dies - 1)));
                    }
                }
                None => orphans.push((c as u32, fb.pdies[die as usize].ldie)),
            }
        }
        rep.scan_ns = scan_done - now;
        // One winner per logical block: newest first, unless an older copy is longer.
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
                    fb.map_piece(ld, lb, x.3);
                } else {
                    orphans.push((x.3, ld));
                }
            }
            i = j;
        }
        // Allocated blocks: those with any piece mapped; their other pieces get erased chunks
        // again; stripes must be prefixes of the round-robin unit order.
        let ids: Vec<u32> = table.vssds.iter().map(|v| v.id).collect();
        for id in ids {
            let v = fb.vssd(id)?.clone();
            let n = v.slots.len() as u32;
            let mut free = vec![];
            let mut wp = vec![u32::MAX; v.blocks as usize];
            for b in 0..v.blocks {
                let pieces: Vec<(u32, u32)> = v.slots.iter().zip(&v.bases).map(|(s, &base)| (s.ldie, base + b)).collect();
                let written: Vec<Option<u64>> = pieces
                    .iter()
                    .map(|&(ld, lb)| {
                        let c = fb.ldies[ld as usize].map[lb as usize];
                        (c != NIL).then(|| fb.dev.chunk(c as usize).wp - c as u64 * g.clba as u64)
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
                        let home = fb.ldies[ld as usize].home;
                        let Some(Reverse((_, c))) = fb.pdies[home as usize].free.pop() else {
                            return Err(VssdError::WornOut(format!("recovery: die {home} has no erased block for vSSD {id} block {b}")));
                        };
                        fb.map_piece(ld, lb, c);
                    }
                }
                wp[b as usize] = total as u32;
                rep.blocks_recovered += 1;
            }
            // A block allocated but never written left nothing on the media: it is free again.
            let vs = fb.vssds[id as usize].as_mut().expect("installed");
            vs.wp = wp;
            free.reverse();
            vs.free = free;
        }
        rep.chunks_erased = orphans.len() as u64;
        let erased = fb.erase_chunks(&orphans, scan_done, EraseKind::Recovery)?;
        // A swap in progress carries on with what is left on the old dies.
        if let Some(sw) = &table.swap {
            let mut movers = vec![];
            for &(ld, from, to) in &sw.moves {
                let pending: Vec<u32> = (0..g.ldie_blocks)
                    .filter(|&lb| {
                        let c = fb.ldies[ld as usize].map[lb as usize];
                        c != NIL && c / g.chunks_per_die == from
                    })
                    .rev()
                    .collect();
                movers.push(Mover { ldie: ld, from, to, pending, cur: None::<Move>, next_ns: erased });
            }
            if movers.iter().any(|m| !m.pending.is_empty()) {
                fb.swap = Some(Swap { channels: sw.channels, movers, started_ns: erased, last_ns: erased });
                rep.swap_resumed = true;
            }
        }
        for (ld, l) in fb.ldies.iter().enumerate() {
            for (lb, &c) in l.map.iter().enumerate() {
                if c == NIL {
                    continue;
                }
                let on = c / g.chunks_per_die;
                let moving = fb.swap.as_ref().is_some_and(|s| s.movers.iter().any(|m| m.ldie == ld as u32 && m.from == on));
                if on != l.home && !moving {
                    return Err(VssdError::Recovery(format!("logical die {ld} block {lb} is on die {on}, not its home {}", l.home)));
                }
            }
        }
        fb.layout_version += 1;
        if !fb.timing() {
            while fb.swapping() {
                fb.migration_step(erased)?;
            }
        }
        Ok((fb, rep))
    }
}
