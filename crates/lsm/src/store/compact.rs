//! Running compactions (the policies that pick them are crate::compaction): until the tree
//! settles, to give room back, and one compaction's steps (trivial move, merge, install).

use std::sync::Arc;

use super::cursor::Cursor;
use super::{Store, TombFileLife, LIFETIME_WINDOW};
use crate::compaction::{Pick, Trigger, View};
use crate::error::Result;
use crate::format::{cmp_internal, Kind};
use crate::sst::{FileId, Table, TableBuilder};
use crate::zonefs::FileKind;

impl Store {
    /// A compaction that gives room back: above the last level, the file with the most
    /// tombstones, else the file of the shallowest level overlapping least with the next (its
    /// overwritten versions are dropped); files in `tried` are skipped.
    pub(super) fn room_pick(&self, tried: &std::collections::HashSet<FileId>) -> Option<Pick> {
        let last = self.levels.iter().rposition(|l| !l.is_empty())?;
        let fresh = |t: &&Arc<Table>| !tried.contains(&t.id);
        let tomb = (0..last)
            .flat_map(|i| self.levels[i].iter().filter(fresh).map(move |t| (t.tombstones, std::cmp::Reverse(i), t)))
            .filter(|(n, _, _)| *n > 0)
            .max_by_key(|(n, i, t)| (*n, *i, std::cmp::Reverse(t.id)));
        let (level, table) = match tomb {
            Some((_, std::cmp::Reverse(i), t)) => (i, t.clone()),
            None => {
                let share = |_: &Table| 0.0;
                let view = View { cfg: &self.cfg, levels: &self.levels, now_ns: self.now_ns, zone_share: &share };
                (0..last).find_map(|i| {
                    let t = view.min_overlap(i)?;
                    (!tried.contains(&t.id)).then_some((i, t))
                })?
            }
        };
        // L0's files overlap one another: they go down together, as a saturated L0 does.
        let inputs = if level == 0 { self.levels[0].clone() } else { vec![table] };
        Some(Pick { level, inputs, trigger: Trigger::Room, expired: false })
    }

    pub(super) fn compact_until_settled(&mut self) -> Result<()> {
        let mut settled = false;
        for _ in 0..256 {
            let pick = {
                let fs = &self.fs;
                let share = |t: &Table| {
                    let zs = fs.file_zones(t.id);
                    let mine: u64 = zs.iter().map(|(_, b)| b).sum();
                    let all: u64 = zs.iter().map(|(z, _)| fs.zone_live_bytes(*z)).sum();
                    if all == 0 {
                        0.0
                    } else {
                        mine as f64 / all as f64
                    }
                };
                View { cfg: &self.cfg, levels: &self.levels, now_ns: self.now_ns, zone_share: &share }.pick()
            };
            match pick {
                Some(p) => self.compact(p)?,
                None => {
                    settled = true;
                    break;
                }
            }
        }
        let share = |_: &Table| 0.0;
        self.next_expiry_ns = View { cfg: &self.cfg, levels: &self.levels, now_ns: self.now_ns, zone_share: &share }.next_expiry_ns();
        self.dirty = !settled;
        let now = self.now_ns;
        self.fs.gc(now)?;
        self.drain_events();
        Ok(())
    }

    /// Run a picked compaction: a trivial move when the one input overlaps nothing below,
    /// else a merge of the inputs with the overlapped files of the next level, installed in
    /// one step (a compaction that finds no room leaves the tree as it was).
    pub(super) fn compact(&mut self, pick: Pick) -> Result<()> {
        let out = pick.level + 1;
        assert!(out < self.levels.len(), "compaction out of the last level");
        let lo = pick.inputs.iter().map(|t| t.smallest.clone()).min().expect("inputs");
        let hi = pick.inputs.iter().map(|t| t.largest.clone()).max().expect("inputs");
        let next: Vec<Arc<Table>> = self.levels[out].iter().filter(|t| t.overlaps(&lo, &hi)).cloned().collect();
        self.count_compaction(&pick);
        let last = self.levels[out + 1..].iter().all(|l| l.is_empty());
        if next.is_empty() && pick.inputs.len() == 1 {
            self.trivial_move(&pick, last);
            return Ok(());
        }
        let outputs = self.merge(&pick, &next, last)?;
        self.install(&pick, &next, outputs)?;
        self.drain_events();
        Ok(())
    }

    /// Count a compaction by what started it.
    fn count_compaction(&mut self, pick: &Pick) {
        match pick.trigger {
            Trigger::Saturation => self.stats.compactions_saturation += 1,
            Trigger::Ttl => self.stats.compactions_ttl += 1,
            Trigger::Room => self.stats.compactions_room += 1,
        }
        if pick.expired && pick.trigger == Trigger::Saturation {
            self.stats.compactions_expired_first += 1;
        }
    }

    /// Trivial move: the file changes level, nothing is rewritten.
    fn trivial_move(&mut self, pick: &Pick, last: bool) {
        let now = self.now_ns;
        let (i, out) = (pick.level, pick.level + 1);
        let t = pick.inputs[0].clone();
        self.levels[i].retain(|x| x.id != t.id);
        let pos = self.levels[out].partition_point(|x| x.smallest < t.smallest);
        self.levels[out].insert(pos, t.clone());
        self.stats.trivial_moves += 1;
        if last {
            if let Some(tr) = self.tracker.as_mut() {
                tr.on_moved_to_last(t.id, now);
            }
        }
    }

    /// Merge the inputs and the overlapped files `next` into new tables of the output level:
    /// one version per key and snapshot stripe; a tombstone with nothing under it is dropped.
    fn merge(&mut self, pick: &Pick, next: &[Arc<Table>], last: bool) -> Result<Vec<Arc<Table>>> {
        let now = self.now_ns;
        let out = pick.level + 1;
        // Read the inputs (whole files, as compaction readahead does).
        let mut t_read = now;
        let mut cursors: Vec<Cursor> = pick.inputs.iter().map(|t| Cursor::new(vec![t.clone()], true)).collect();
        if !next.is_empty() {
            cursors.push(Cursor::new(next.to_vec(), true));
        }
        for c in cursors.iter_mut() {
            c.seek_first(&mut self.fs, &mut self.stats, &mut t_read)?;
        }
        let snaps: Vec<u64> = self.snapshots.keys().copied().collect();
        let mut outputs: Vec<Arc<Table>> = vec![];
        let mut b = self.builder();
        let mut tracked: Vec<(Vec<u8>, u64, Kind)> = vec![];
        let mut cur_key: Vec<u8> = vec![];
        let mut prev_stripe: Option<usize> = None;
        let mut first = true;
        while let Some(m) = smallest_entry(&cursors) {
            {
                let (k, seq, kind, v) = cursors[m].entry().unwrap();
                let new_key = first || k != cur_key.as_slice();
                if new_key {
                    if !b.is_empty() && b.estimated_bytes() >= self.cfg.sst_target_bytes {
                        let full = std::mem::replace(&mut b, self.builder());
                        let o = self.finish_output(full, out, last, &mut tracked, t_read);
                        outputs.push(self.or_drop_outputs(o, &outputs)?);
                    }
                    cur_key.clear();
                    cur_key.extend_from_slice(k);
                    prev_stripe = None;
                    first = false;
                }
                let stripe = snaps.partition_point(|&s| s < seq);
                if prev_stripe == Some(stripe) && kind == Kind::Delete {
                    if let Some(tr) = self.tracker.as_mut() {
                        tr.on_tomb_dropped(k, seq, true, now);
                    }
                }
                if prev_stripe != Some(stripe) {
                    prev_stripe = Some(stripe);
                    if kind == Kind::Delete && stripe == 0 && !self.may_exist_from(k, out + 1) {
                        self.stats.tombstones_dropped += 1;
                        if let Some(tr) = self.tracker.as_mut() {
                            tr.on_tomb_dropped(k, seq, false, now);
                        }
                    } else {
                        if self.tracker.as_ref().is_some_and(|tr| tr.watches(k)) {
                            tracked.push((k.to_vec(), seq, kind));
                        }
                        b.add(k, seq, kind, v);
                    }
                }
            }
            cursors[m].advance(&mut self.fs, &mut self.stats, &mut t_read)?;
        }
        if !b.is_empty() {
            let o = self.finish_output(b, out, last, &mut tracked, t_read);
            outputs.push(self.or_drop_outputs(o, &outputs)?);
        }
        Ok(outputs)
    }

    /// Install: inputs and overlapped files leave, outputs join the output level; the files
    /// gone are retired.
    fn install(&mut self, pick: &Pick, next: &[Arc<Table>], outputs: Vec<Arc<Table>>) -> Result<()> {
        let (i, out) = (pick.level, pick.level + 1);
        let gone: Vec<Arc<Table>> = pick.inputs.iter().chain(next.iter()).cloned().collect();
        for t in &gone {
            let lvl = if pick.inputs.iter().any(|x| x.id == t.id) { i } else { out };
            self.levels[lvl].retain(|x| x.id != t.id);
        }
        for t in outputs {
            let pos = self.levels[out].partition_point(|x| x.smallest < t.smallest);
            self.levels[out].insert(pos, t);
        }
        debug_assert!(self.levels[out].windows(2).all(|w| w[0].largest < w[1].smallest), "level {out} overlaps after compaction");
        self.retire(pick, gone)
    }

    /// The files a compaction consumed: their lifetimes observed (and a tombstone file's
    /// life recorded), the files deleted; kept as dead tables while deletes are tracked.
    fn retire(&mut self, pick: &Pick, gone: Vec<Arc<Table>>) -> Result<()> {
        let now = self.now_ns;
        let (i, out) = (pick.level, pick.level + 1);
        let issued = self.tracker.as_ref().map_or(self.stats.deletes, |tr| tr.deletes);
        for t in gone {
            let lvl = if pick.inputs.iter().any(|x| x.id == t.id) { i } else { out };
            let life = now.saturating_sub(t.created_ns);
            let w = &mut self.lifetimes[lvl];
            if w.len() == LIFETIME_WINDOW {
                w.pop_front();
            }
            w.push_back(life);
            if t.tombstones > 0 {
                self.tomb_lives.push(TombFileLife {
                    died_ns: now,
                    lifetime_ns: life,
                    level: lvl as u32,
                    tombstones: t.tombstones,
                    deletes_issued: issued,
                });
            }
            self.fs.delete(t.id, now)?;
            if let Some(tr) = self.tracker.as_mut() {
                tr.on_file_dead(t.id, now);
                if self.fs.knows(t.id) {
                    self.dead_tables.insert(t.id, t.clone());
                }
            }
        }
        Ok(())
    }

    /// A compaction output, or, when it could not be written (no room), the error after the
    /// outputs written before it are deleted: the inputs stay, the tree as it was.
    fn or_drop_outputs(&mut self, o: Result<Arc<Table>>, written: &[Arc<Table>]) -> Result<Arc<Table>> {
        if o.is_err() {
            let now = self.now_ns;
            for t in written {
                self.fs.delete(t.id, now)?;
                if let Some(tr) = self.tracker.as_mut() {
                    tr.on_file_dead(t.id, now);
                }
            }
        }
        o
    }

    fn finish_output(
        &mut self,
        b: TableBuilder,
        level: usize,
        last: bool,
        tracked: &mut Vec<(Vec<u8>, u64, Kind)>,
        t: u64,
    ) -> Result<Arc<Table>> {
        let now = self.now_ns;
        let (bytes, mut table) = b.finish(0, now);
        let (placement, death) = self.placement_for(&table, level);
        let (id, _) = self.fs.write_file(FileKind::Sst, placement, death, &bytes, t)?;
        self.table_buf = bytes;
        table.id = id;
        self.stats.compaction_write_bytes += table.size_bytes;
        self.stats.tombstones_written += table.tombstones;
        if let Some(tr) = self.tracker.as_mut() {
            for (k, s, kind) in tracked.drain(..) {
                tr.on_output(id, &k, s, kind, last, now);
            }
        }
        Ok(Arc::new(table))
    }
}

/// The cursor at the smallest entry in internal-key order (the first of equals), if any
/// has one.
fn smallest_entry(cursors: &[Cursor]) -> Option<usize> {
    let mut m: Option<usize> = None;
    for (j, c) in cursors.iter().enumerate() {
        if let Some((k, s, _, _)) = c.entry() {
            let better = match m {
                None => true,
                Some(mj) => {
                    let (mk, ms, _, _) = cursors[mj].entry().unwrap();
                    cmp_internal(k, s, mk, ms).is_lt()
                }
            };
            if better {
                m = Some(j);
            }
        }
    }
    m
}
