//! Which compaction runs next, per policy.
//!
//! - Baseline (RocksDB's leveled default): the level with the highest score (L0: files /
//!   trigger; Li: bytes / target) at or above 1 is compacted; L0 whole, a deeper level one
//!   file, the one with the smallest overlapping ratio (bytes it overlaps in the next level
//!   / its size compensated for tombstones, RocksDB's kMinOverlappingRatio).
//! - FADE (Lethe): files whose oldest tombstone is older than their level's cumulative TTL
//!   are compacted first, the most overdue first, more tombstones breaking ties; otherwise as
//!   the baseline.
//! - Zone-aware (seed 000): compactions start when a level saturates, as the baseline's do (an
//!   expired TTL does not start one unless `zone_aware.ttl_trigger`, the ablation); the queue's
//!   front holds the expired files, ordered as FADE orders them, its back the saturated level's
//!   candidate: low levels by the smallest overlapping ratio, high levels by the largest weight
//!   `w_lsm / (1 + ratio) + w_zns * zone share + w_tomb * TTL urgency`.

use std::sync::Arc;

use crate::config::{fade_cumulative_ttl_ns, LsmConfig, Policy};
use crate::sst::Table;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Saturation,
    /// A tombstone TTL expired (FADE; zone-aware with `ttl_trigger`).
    Ttl,
    /// The device is down to its reserve: a compaction that drops deleted and overwritten
    /// versions, so a full store can take writes again (see `Store::make_room`).
    Room,
}

pub struct Pick {
    pub level: usize,
    pub inputs: Vec<Arc<Table>>,
    pub trigger: Trigger,
    /// The input is an expired tombstone file (for a saturation-started compaction: the
    /// zone-aware queue put it first).
    pub expired: bool,
}

/// What a policy looks at.
pub struct View<'a> {
    pub cfg: &'a LsmConfig,
    pub levels: &'a [Vec<Arc<Table>>],
    pub now_ns: u64,
    /// Share of the live bytes of a table's zones that the table holds (zone-aware).
    pub zone_share: &'a dyn Fn(&Table) -> f64,
}

impl View<'_> {
    /// Levels in use, counting L0: the deepest level with files, plus one.
    pub fn levels_in_use(&self) -> usize {
        self.levels.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1)
    }

    pub fn level_bytes(&self, i: usize) -> u64 {
        self.levels[i].iter().map(|t| t.size_bytes).sum()
    }

    fn score(&self, i: usize) -> f64 {
        if i == 0 {
            self.levels[0].len() as f64 / self.cfg.l0_compaction_trigger as f64
        } else {
            self.level_bytes(i) as f64 / self.cfg.level_target_bytes(i) as f64
        }
    }

    /// Bytes of level `i + 1` overlapping `t`.
    pub fn overlap_bytes(&self, t: &Table, i: usize) -> u64 {
        let next = &self.levels[i + 1];
        let a = next.partition_point(|x| x.largest.as_slice() < t.smallest.as_slice());
        next[a..].iter().take_while(|x| x.smallest.as_slice() <= t.largest.as_slice()).map(|x| x.size_bytes).sum()
    }

    fn overlap_ratio(&self, t: &Table, i: usize) -> f64 {
        let puts = t.entries - t.tombstones;
        let avg = if puts > 0 { t.put_bytes as f64 / puts as f64 } else { 0.0 };
        let compensated = t.size_bytes as f64 + t.tombstones as f64 * avg;
        self.overlap_bytes(t, i) as f64 / compensated.max(1.0)
    }

    pub(crate) fn min_overlap(&self, i: usize) -> Option<Arc<Table>> {
        let mut best: Option<(f64, &Arc<Table>)> = None;
        for t in &self.levels[i] {
            let r = self.overlap_ratio(t, i);
            if best.is_none_or(|(b, _)| r < b) {
                best = Some((r, t));
            }
        }
        best.map(|(_, t)| t.clone())
    }

    fn max_weight(&self, i: usize) -> Option<Arc<Table>> {
        let z = &self.cfg.zone_aware;
        let mut best: Option<(f64, &Arc<Table>)> = None;
        for t in &self.levels[i] {
            let lsm = 1.0 / (1.0 + self.overlap_ratio(t, i));
            let zns = (self.zone_share)(t);
            let tomb = self.urgency(t, i);
            let w = z.weight_lsm * lsm + z.weight_zns * zns + z.weight_tombstone * tomb;
            if best.is_none_or(|(b, _)| w > b) {
                best = Some((w, t));
            }
        }
        best.map(|(_, t)| t.clone())
    }

    /// The tombstone factor of the zone-aware weight: how far the file's oldest tombstone is
    /// through its level's TTL (0: no tombstone, 1: due). Saturation compactions, which run
    /// anyway, then carry tombstones down before a TTL-triggered compaction has to.
    pub fn urgency(&self, t: &Table, i: usize) -> f64 {
        match (t.oldest_tombstone_ns, self.ttl_ns(i)) {
            (Some(o), Some(ttl)) if ttl > 0 => (self.now_ns.saturating_sub(o) as f64 / ttl as f64).min(1.0),
            (Some(_), _) => 1.0,
            _ => 0.0,
        }
    }

    /// Cumulative TTL of level `i` with the tree as it is (None: no TTL there).
    pub fn ttl_ns(&self, i: usize) -> Option<u64> {
        if self.cfg.policy == Policy::Baseline {
            return None;
        }
        fade_cumulative_ttl_ns(self.cfg.delete_threshold_ns, self.cfg.size_ratio, self.levels_in_use(), i)
    }

    /// Whether an expired TTL starts a compaction by itself (FADE; zone-aware only as the
    /// ablation).
    pub fn ttl_triggers(&self) -> bool {
        match self.cfg.policy {
            Policy::Baseline => false,
            Policy::Fade => true,
            Policy::ZoneAware => self.cfg.zone_aware.ttl_trigger,
        }
    }

    /// When the next file's TTL expires, for a policy whose expiries start compactions (None
    /// otherwise: nothing to wake up for).
    pub fn next_expiry_ns(&self) -> Option<u64> {
        if !self.ttl_triggers() {
            return None;
        }
        let mut next: Option<u64> = None;
        for (i, level) in self.levels.iter().enumerate() {
            let Some(ttl) = self.ttl_ns(i) else { continue };
            for t in level {
                if let Some(o) = t.oldest_tombstone_ns {
                    let e = o.saturating_add(ttl);
                    next = Some(next.map_or(e, |n| n.min(e)));
                }
            }
        }
        next
    }

    /// The expired file to compact first: most overdue, then most tombstones (the last level
    /// has nowhere to compact to).
    fn most_expired(&self) -> Option<(usize, Arc<Table>)> {
        let mut best: Option<(u64, u64, usize, &Arc<Table>)> = None;
        let last = self.levels.len() - 1;
        for (i, level) in self.levels[..last].iter().enumerate() {
            let Some(ttl) = self.ttl_ns(i) else { continue };
            for t in level {
                let Some(o) = t.oldest_tombstone_ns else { continue };
                let due = o.saturating_add(ttl);
                if self.now_ns < due {
                    continue;
                }
                let overdue = self.now_ns - due;
                if best.is_none_or(|(bo, bt, _, _)| (overdue, t.tombstones) > (bo, bt)) {
                    best = Some((overdue, t.tombstones, i, t));
                }
            }
        }
        best.map(|(_, _, i, t)| (i, t.clone()))
    }

    fn whole_l0(&self, trigger: Trigger) -> Pick {
        Pick { level: 0, inputs: self.levels[0].clone(), trigger, expired: false }
    }

    /// The most saturated level (score >= 1) that may compact downwards.
    fn saturated(&self) -> Option<usize> {
        let last = self.levels.len() - 1;
        let mut best: Option<(f64, usize)> = None;
        for i in 0..last {
            let s = self.score(i);
            if s >= 1.0 && best.is_none_or(|(b, _)| s > b) {
                best = Some((s, i));
            }
        }
        best.map(|(_, i)| i)
    }

    fn expired_pick(&self, trigger: Trigger) -> Option<Pick> {
        let (i, t) = self.most_expired()?;
        let mut p = if i == 0 { self.whole_l0(trigger) } else { Pick { level: i, inputs: vec![t], trigger, expired: false } };
        p.expired = true;
        Some(p)
    }

    pub fn pick(&self) -> Option<Pick> {
        if self.ttl_triggers() {
            if let Some(p) = self.expired_pick(Trigger::Ttl) {
                return Some(p);
            }
        }
        let i = self.saturated()?;
        if self.cfg.policy == Policy::ZoneAware {
            // A saturated level started this compaction; expired files are first in the queue.
            if let Some(p) = self.expired_pick(Trigger::Saturation) {
                return Some(p);
            }
        }
        if i == 0 {
            return Some(self.whole_l0(Trigger::Saturation));
        }
        let t = if self.cfg.policy == Policy::ZoneAware && i as u32 > self.cfg.zone_aware.low_levels {
            self.max_weight(i)?
        } else {
            self.min_overlap(i)?
        };
        Some(Pick { level: i, inputs: vec![t], trigger: Trigger::Saturation, expired: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// T = 4, L0 trigger 4, L1 1 MiB, D_th 1 s.
    fn cfg(policy: Policy) -> LsmConfig {
        LsmConfig {
            policy,
            size_ratio: 4,
            level1_bytes: 1 << 20,
            l0_compaction_trigger: 4,
            delete_threshold_ns: 1_000 * MS,
            ..Default::default()
        }
    }

    fn table(id: u64, lo: &str, hi: &str, size: u64, tombstones: u64, oldest: Option<u64>) -> Arc<Table> {
        Arc::new(Table::metadata_only(id, (lo.as_bytes(), hi.as_bytes()), size, 1000, tombstones, oldest))
    }

    fn view<'a>(cfg: &'a LsmConfig, levels: &'a [Vec<Arc<Table>>], now_ns: u64) -> View<'a> {
        View { cfg, levels, now_ns, zone_share: &|_: &Table| 0.0 }
    }

    /// Four levels in use, none saturated: one L0 file (under the trigger), L1 and L2 under
    /// their targets, an L3 to make the TTLs of L0-L2 finite. L1's file holds a tombstone
    /// written at time 0.
    fn calm_tree() -> Vec<Vec<Arc<Table>>> {
        let mut levels = vec![Vec::new(); 7];
        levels[0] = vec![table(1, "a", "z", 64 << 10, 0, None)];
        levels[1] = vec![table(2, "a", "m", 256 << 10, 10, Some(0))];
        levels[2] = vec![table(3, "a", "z", 1 << 20, 0, None)];
        levels[3] = vec![table(4, "a", "z", 8 << 20, 0, None)];
        levels
    }

    #[test]
    fn an_expired_ttl_starts_a_compaction_only_for_fade_and_the_ablation() {
        let levels = calm_tree();
        let late = 10_000 * MS; // past every TTL below the last level in use
        let fade = cfg(Policy::Fade);
        let za = cfg(Policy::ZoneAware);
        let mut za_ttl = cfg(Policy::ZoneAware);
        za_ttl.zone_aware.ttl_trigger = true;
        let base = cfg(Policy::Baseline);

        let p = view(&fade, &levels, late).pick().expect("FADE compacts the expired file");
        assert_eq!((p.level, p.inputs[0].id, p.trigger, p.expired), (1, 2, Trigger::Ttl, true));
        let p = view(&za_ttl, &levels, late).pick().expect("the ablation compacts the expired file");
        assert_eq!((p.level, p.inputs[0].id, p.trigger), (1, 2, Trigger::Ttl));
        assert!(view(&za, &levels, late).pick().is_none(), "zone-aware: no saturated level, no compaction");
        assert!(view(&base, &levels, late).pick().is_none());

        // Nothing to wake up for unless an expiry starts a compaction.
        assert!(view(&fade, &levels, 0).next_expiry_ns().is_some());
        assert!(view(&za_ttl, &levels, 0).next_expiry_ns().is_some());
        assert_eq!(view(&za, &levels, 0).next_expiry_ns(), None);
        assert_eq!(view(&base, &levels, 0).next_expiry_ns(), None);
    }

    #[test]
    fn a_saturated_level_puts_expired_files_first_in_the_zone_aware_queue() {
        let za = cfg(Policy::ZoneAware);
        let mut levels = calm_tree();
        // L0 reaches its trigger.
        for id in 10..13 {
            levels[0].push(table(id, "a", "z", 64 << 10, 0, None));
        }
        // A second expired L1 file, expired for longer: it goes first; with the same expiry,
        // the one with more tombstones goes first.
        levels[1].push(table(5, "n", "z", 256 << 10, 3, Some(0)));
        levels[1][0] = table(2, "a", "m", 256 << 10, 10, Some(5 * MS));
        let now = 10_000 * MS;
        let p = view(&za, &levels, now).pick().unwrap();
        assert_eq!((p.level, p.inputs[0].id, p.trigger, p.expired), (1, 5, Trigger::Saturation, true));
        levels[1][0] = table(2, "a", "m", 256 << 10, 10, Some(0));
        let p = view(&za, &levels, now).pick().unwrap();
        assert_eq!(p.inputs[0].id, 2, "same age: more tombstones first");

        // Before any TTL expires, the saturated level's own candidate: L0 whole.
        let p = view(&za, &levels, 1).pick().unwrap();
        assert_eq!((p.level, p.inputs.len(), p.trigger, p.expired), (0, 4, Trigger::Saturation, false));
    }

    #[test]
    fn the_queue_picks_low_levels_by_overlap_and_high_levels_by_weight() {
        let za = cfg(Policy::ZoneAware); // low_levels = 1
        let mut levels: Vec<Vec<Arc<Table>>> = vec![Vec::new(); 7];
        // L1 over its 1 MiB target: "a".."c" overlaps little of L2, "d".."f" much.
        levels[1] = vec![table(1, "a", "c", 600 << 10, 0, None), table(2, "d", "f", 600 << 10, 0, None)];
        levels[2] = vec![table(3, "a", "b", 64 << 10, 0, None), table(4, "d", "f", 2 << 20, 0, None)];
        levels[3] = vec![table(6, "a", "z", 1 << 20, 0, None)];
        let p = view(&za, &levels, 0).pick().unwrap();
        assert_eq!((p.level, p.inputs[0].id), (1, 1), "low level: smallest overlapping ratio");

        // L2 over its 4 MiB target (L1 under its own): a high level, the largest weight. The
        // file with tombstones halfway through its TTL outweighs the one that overlaps less.
        levels[1] = vec![];
        levels[2] = vec![table(3, "a", "b", 2 << 20, 0, None), table(4, "d", "f", 3 << 20, 50, Some(0))];
        levels[3] = vec![table(6, "a", "c", 64 << 10, 0, None), table(7, "d", "f", 512 << 10, 0, None)];
        levels[4] = vec![table(8, "a", "z", 32 << 20, 0, None)];
        let ttl = view(&za, &levels, 0).ttl_ns(2).unwrap();
        let p = view(&za, &levels, ttl / 2).pick().unwrap();
        assert_eq!((p.level, p.inputs[0].id, p.expired), (2, 4, false));
        // Without the tombstone factor, the smaller overlap wins.
        let mut no_tomb = za.clone();
        no_tomb.zone_aware.weight_tombstone = 0.0;
        let p = view(&no_tomb, &levels, ttl / 2).pick().unwrap();
        assert_eq!(p.inputs[0].id, 3);
    }
}
