//! Wear-levelling: when to swap channels (the swap policy and pair), the swap itself, and the
//! paced migration that moves logical dies block by block (I/O to a block being moved stalls).

use std::cmp::Reverse;

use ssdlab_core::ftl::ocssd::{MAX_VECTOR, OOB_BYTES};
use ssdlab_core::ftl::BlockDevice;

use super::{EraseKind, FlashBlox, Move, Mover, Swap, NIL, NIL64};
use crate::config::{SwapPair, SwapPolicy};
use crate::error::{Result, VssdError};
use crate::oob::OobRecord;

impl FlashBlox {
    /// Erase counts per physical channel and per physical die (chunk erases).
    pub fn wear(&self) -> (Vec<u64>, Vec<u64>) {
        let per_die: Vec<u64> = self.pdies.iter().map(|p| p.erases).collect();
        let per_ch = per_die.chunks(self.geo.dies_per_channel as usize).map(|c| c.iter().sum()).collect();
        (per_ch, per_die)
    }

    /// Start a swap when the policy says so (see [`SwapPolicy`]).
    pub(crate) fn wear_tick(&mut self, now: u64) -> Result<()> {
        if self.swap.is_some() {
            return Ok(());
        }
        let w = &self.cfg.wear;
        let due = match w.policy {
            SwapPolicy::None => false,
            SwapPolicy::Adaptive => self.wear.epoch_bytes.iter().any(|&b| b >= w.threshold_bytes),
            SwapPolicy::Fixed => {
                let due = now >= self.wear.next_due_ns;
                while self.wear.next_due_ns <= now {
                    self.wear.next_due_ns += w.period_ns;
                }
                due
            }
        };
        let pick = due.then(|| match w.pair {
            SwapPair::MaxWearMinRate => self.pick_max_wear_min_rate(),
            SwapPair::MaxRateMinWear => self.pick_max_rate_min_wear(),
        });
        match pick {
            Some((a, b)) => self.start_swap(a, b, now),
            None => Ok(()),
        }
    }

    /// The document's pair: the channel with the most wear (ties: the one wearing faster, then
    /// the lower index) and the channel with the lowest wear rate since the last swap (ties:
    /// less wear, then lower index).
    fn pick_max_wear_min_rate(&self) -> (u32, u32) {
        let (s, _) = self.wear();
        let e = &self.wear.epoch_bytes;
        let p = (0..s.len()).max_by_key(|&i| (s[i], e[i], Reverse(i))).expect("channels") as u32;
        let q = (0..s.len()).filter(|&i| i as u32 != p).min_by_key(|&i| (e[i], s[i], i)).expect("two channels") as u32;
        (p, q)
    }

    /// The analysis's rotation: the channel with the highest wear rate moves to the least-worn
    /// channel.
    fn pick_max_rate_min_wear(&self) -> (u32, u32) {
        let (s, _) = self.wear();
        let e = &self.wear.epoch_bytes;
        let p = (0..s.len()).max_by_key(|&i| (e[i], Reverse(i))).expect("channels") as u32;
        let q = (0..s.len()).filter(|&i| i as u32 != p).min_by_key(|&i| (s[i], i)).expect("two channels") as u32;
        (p, q)
    }

    /// Swap physical channels `a` (the migrating one) and `b`: every logical die on `a` moves
    /// to a die of `b` and back. With `wear.die_swaps`, the most-worn die of `a` receives the
    /// logical die of `b` that writes least; the other dies pair in order. Without timing the
    /// whole swap is carried out at once; with timing, `migration_step` carries it out paced.
    pub fn start_swap(&mut self, a: u32, b: u32, now: u64) -> Result<()> {
        let g = self.geo;
        if a == b || a >= g.channels || b >= g.channels {
            return Err(VssdError::Api(format!("swap of channels {a} and {b}: two different channels below {}", g.channels)));
        }
        if self.swap.is_some() {
            return Err(VssdError::Api("a swap is already in progress".into()));
        }
        let dpc = g.dies_per_channel;
        let mut pa: Vec<u32> = (a * dpc..(a + 1) * dpc).collect();
        let mut pb: Vec<u32> = (b * dpc..(b + 1) * dpc).collect();
        if self.cfg.wear.die_swaps {
            let worn = *pa.iter().max_by_key(|&&d| (self.pdies[d as usize].erases, Reverse(d))).expect("dies");
            let cool = *pb.iter().min_by_key(|&&d| (self.ldies[self.pdies[d as usize].ldie as usize].epoch_erases, d)).expect("dies");
            pa.retain(|&d| d != worn);
            pb.retain(|&d| d != cool);
            pa.insert(0, worn);
            pb.insert(0, cool);
        }
        let mut movers = vec![];
        for (&p, &q) in pa.iter().zip(&pb) {
            let (la, lb) = (self.pdies[p as usize].ldie, self.pdies[q as usize].ldie);
            for (ld, from, to) in [(la, p, q), (lb, q, p)] {
                let pending: Vec<u32> = (from * g.chunks_per_die..(from + 1) * g.chunks_per_die)
                    .filter(|&c| self.owner[c as usize] != NIL64 && (self.owner[c as usize] >> 32) as u32 == ld)
                    .map(|c| self.owner[c as usize] as u32)
                    .rev()
                    .collect();
                movers.push(Mover { ldie: ld, from, to, pending, cur: None, next_ns: now });
            }
            self.ldies[la as usize].home = q;
            self.ldies[lb as usize].home = p;
            self.pdies[q as usize].ldie = la;
            self.pdies[p as usize].ldie = lb;
        }
        self.swap = Some(Swap { channels: (a, b), movers, started_ns: now, last_ns: now });
        self.mig.swaps += 1;
        self.wear.epoch_bytes.iter_mut().for_each(|x| *x = 0);
        self.wear.epoch_start_ns = now;
        self.ldies.iter_mut().for_each(|l| l.epoch_erases = 0);
        self.layout_version += 1;
        if !self.timing {
            while self.swap.is_some() {
                self.migration_step(now)?;
            }
        }
        Ok(())
    }

    /// When the migration next wants to run (None: no swap in progress).
    pub fn migration_next_ns(&self) -> Option<u64> {
        self.swap
            .as_ref()
            .map(|s| s.movers.iter().filter(|m| m.cur.is_some() || !m.pending.is_empty()).map(|m| m.next_ns).min().unwrap_or(0))
    }

    /// Run every mover that is due at `now`: each copies `migration_units_per_step` units of
    /// its current block (reading into memory, writing to the new place) and asks to run again
    /// when its last program is about to finish, so the dies' other work goes in between.
    /// Returns when the migration next wants to run (None: the swap is done).
    pub fn migration_step(&mut self, now: u64) -> Result<Option<u64>> {
        let Some(mut sw) = self.swap.take() else { return Ok(None) };
        let units = if self.timing { self.cfg.wear.migration_units_per_step } else { u32::MAX };
        let mut progress = true;
        while progress {
            progress = false;
            for m in sw.movers.iter_mut() {
                if m.next_ns > now || (m.cur.is_none() && m.pending.is_empty()) {
                    continue;
                }
                let before = (m.pending.len(), m.cur.as_ref().map(|c| c.copied));
                let next = self.mover_run(m, now, units)?;
                m.next_ns = next;
                sw.last_ns = sw.last_ns.max(next);
                progress |= (m.pending.len(), m.cur.as_ref().map(|c| c.copied)) != before;
            }
            if self.timing {
                break;
            }
        }
        let left = sw.movers.iter().any(|m| m.cur.is_some() || !m.pending.is_empty());
        if !left {
            self.mig.swaps_done += 1;
            let end = sw.last_ns.max(now);
            self.mig.busy_ns += end - sw.started_ns;
            let bytes = self.mig.bytes_moved - self.swap_log.iter().map(|s| s.4).sum::<u64>();
            self.swap_log.push((sw.started_ns, end, sw.channels.0, sw.channels.1, bytes));
            self.layout_version += 1;
            return Ok(None);
        }
        if !progress && !self.timing {
            return Err(VssdError::WornOut(format!(
                "swap of channels {} and {} cannot go on: no erased block on either side",
                sw.channels.0, sw.channels.1
            )));
        }
        let next = sw.movers.iter().filter(|m| m.cur.is_some() || !m.pending.is_empty()).map(|m| m.next_ns).min();
        self.swap = Some(sw);
        Ok(next)
    }

    /// Copy up to `units` of the mover's current block (starting one if needed); returns when
    /// it wants to run next.
    fn mover_run(&mut self, m: &mut Mover, now: u64, units: u32) -> Result<u64> {
        let g = self.geo;
        let mut left = units;
        let mut next = now;
        while left > 0 {
            if m.cur.is_none() {
                let Some(lb) = m.pending.pop() else { return Ok(next) };
                let src = self.ldies[m.ldie as usize].map[lb as usize];
                if src == NIL || src / g.chunks_per_die != m.from {
                    continue; // freed (or freed and reallocated at the new home) meanwhile
                }
                let Some(Reverse((_, dst))) = self.pdies[m.to as usize].free.pop() else {
                    m.pending.push(lb);
                    // Wait for the opposite mover to free a chunk here.
                    return Ok(if self.timing { now + self.dev.geometry().tprt_ns } else { now });
                };
                let total = (self.dev.chunk(src as usize).wp - src as u64 * g.clba as u64) as u32;
                m.cur = Some(Move { lblock: lb, src, dst, copied: 0, total });
            }
            let mv = m.cur.as_mut().expect("current move");
            if mv.copied < mv.total {
                let (r, w) = self.copy_unit(m.ldie, mv, now)?;
                mv.copied += g.ws_min;
                left -= 1;
                // Run again so the next unit's data is in memory as this program finishes.
                let read_ns = self.dev.geometry().trdt_ns + self.dev.media().tl.xfer_ns(g.ws_min as u64 * g.sector_bytes as u64);
                next = r.max(w.saturating_sub(read_ns));
            }
            if mv.copied >= mv.total {
                let mv = m.cur.take().expect("current move");
                next = next.max(self.finish_move(m, mv, next)?);
                if self.timing {
                    return Ok(next);
                }
            }
        }
        Ok(next)
    }

    /// Copy one unit of `mv` through a memory buffer; returns (read done, program done).
    fn copy_unit(&mut self, ld: u32, mv: &Move, now: u64) -> Result<(u64, u64)> {
        let g = self.geo;
        let n = g.ws_min as usize;
        let src0 = mv.src as u64 * g.clba as u64 + mv.copied as u64;
        let dst0 = mv.dst as u64 * g.clba as u64 + mv.copied as u64;
        let mut lbas = [0u64; MAX_VECTOR];
        let mut sc = std::mem::take(&mut self.scratch);
        if self.data_backed {
            sc.buf.resize(n * g.sector_bytes as usize, 0);
        }
        for (k, l) in lbas[..n].iter_mut().enumerate() {
            *l = src0 + k as u64;
        }
        let from = [mv.src / g.chunks_per_die];
        let to = [mv.dst / g.chunks_per_die];
        let at = self.admit(&from, now);
        let buf = if self.data_backed { Some(&mut sc.buf[..]) } else { None };
        let r = self.dev.vector_read_queued(&lbas[..n], buf, at)?;
        self.complete(&from, r);
        for (k, l) in lbas[..n].iter_mut().enumerate() {
            *l = dst0 + k as u64;
        }
        let oob = (mv.copied == 0).then(|| {
            let rec = OobRecord {
                ldie: ld,
                block: mv.lblock,
                erase_count: self.dev.chunk(mv.dst as usize).erase_count as u16,
                timestamp: self.clock,
            };
            self.clock += 1;
            let mut o = vec![0u8; n * OOB_BYTES];
            o[..OOB_BYTES].copy_from_slice(&rec.encode());
            o
        });
        let at = self.admit(&to, r);
        let data = if self.data_backed { Some(&sc.buf[..]) } else { None };
        let w = self.dev.vector_write_oob(&lbas[..n], data, oob.as_deref(), at)?;
        self.complete(&to, w);
        self.scratch = sc;
        self.mig.bytes_moved += n as u64 * g.sector_bytes as u64;
        Ok((r, w))
    }

    /// The copy is complete: point the map at the new chunk, erase the old one.
    fn finish_move(&mut self, m: &Mover, mv: Move, t: u64) -> Result<u64> {
        let old = self.unmap_piece(m.ldie, mv.lblock);
        assert_eq!(old, mv.src);
        self.map_piece(m.ldie, mv.lblock, mv.dst);
        self.mig.blocks_moved += 1;
        if mv.total == 0 {
            let e = self.dev.chunk(mv.src as usize).erase_count;
            self.pdies[m.from as usize].free.push(Reverse((e, mv.src)));
            return Ok(t);
        }
        self.erase_chunks(&[(mv.src, m.ldie)], t, EraseKind::Migration)
    }

    /// I/O to block `b` (units `u0..u1`) of vSSD `id` during a swap: a piece being moved is
    /// finished at once and the I/O waits for it (only those blocks stall; the rest of the
    /// migration keeps its pace). Returns when the I/O may start.
    pub(super) fn stall(&mut self, id: u32, b: u32, u0: u32, u1: u32, now: u64) -> Result<u64> {
        let v = self.vssds[id as usize].as_ref().expect("checked");
        let n = v.slots.len() as u32;
        let touched: Vec<(u32, u32)> = (0..n.min(u1.saturating_sub(u0)))
            .map(|k| {
                let i = ((u0 + k) % n) as usize;
                (v.slots[i].ldie, v.bases[i] + b)
            })
            .collect();
        let mut sw = self.swap.take().expect("swap in progress");
        let mut t = now;
        for m in sw.movers.iter_mut() {
            let Some(cur) = m.cur.as_ref() else { continue };
            if !touched.contains(&(m.ldie, cur.lblock)) {
                continue;
            }
            let mut done = now;
            while m.cur.as_ref().is_some_and(|c| c.copied < c.total) {
                let (_, w) = self.copy_unit(m.ldie, m.cur.as_ref().expect("move"), now)?;
                m.cur.as_mut().expect("move").copied += self.geo.ws_min;
                done = done.max(w);
            }
            let mv = m.cur.take().expect("move");
            done = done.max(self.finish_move(m, mv, done)?);
            m.next_ns = m.next_ns.max(now);
            sw.last_ns = sw.last_ns.max(done);
            self.mig.expedited += 1;
            t = t.max(done);
        }
        self.swap = Some(sw);
        if t > now {
            let v = self.vssds[id as usize].as_mut().expect("checked");
            v.stats.stalls += 1;
            v.stats.stall_ns += t - now;
        }
        Ok(t)
    }
}
