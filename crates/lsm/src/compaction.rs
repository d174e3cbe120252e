//! Which compaction runs next, per policy.
//!
//! - Baseline (RocksDB's leveled default): the level with the highest score (L0: files /
//!   trigger; Li: bytes / target) at or above 1 is compacted; L0 whole, a deeper level one
//!   file, the one with the smallest overlapping ratio (bytes it overlaps in the next level
//!   / its size compensated for tombstones, RocksDB's kMinOverlappingRatio).
//! - FADE (Lethe): files whose oldest tombstone is older than their level's cumulative TTL
//!   are compacted first, the most overdue first, more tombstones breaking ties; otherwise as
//!   the baseline.
//! - Zone-aware (seed 000): a queue whose front holds the expired files, ordered as FADE
//!   orders them, and whose back holds the saturated levels' candidates: low levels by the
//!   smallest overlapping ratio, high levels by the largest weight
//!   `w_lsm / (1 + ratio) + w_zns * zone share + w_tomb * TTL urgency`.

use std::sync::Arc;

use crate::config::{fade_cumulative_ttl_ns, LsmConfig, Policy};
use crate::sst::Table;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Saturation,
    /// A tombstone TTL expired (FADE and zone-aware).
    Ttl,
}

pub struct Pick {
    pub level: usize,
    pub inputs: Vec<Arc<Table>>,
    pub trigger: Trigger,
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

    fn min_overlap(&self, i: usize) -> Option<Arc<Table>> {
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

    /// When the next file's TTL expires (FADE and zone-aware).
    pub fn next_expiry_ns(&self) -> Option<u64> {
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

    /// The expired file to compact first: most overdue, then most tombstones.
    fn most_expired(&self) -> Option<(usize, Arc<Table>)> {
        let mut best: Option<(u64, u64, usize, &Arc<Table>)> = None;
        for (i, level) in self.levels.iter().enumerate() {
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
        Pick { level: 0, inputs: self.levels[0].clone(), trigger }
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

    pub fn pick(&self) -> Option<Pick> {
        let last = self.levels.len() - 1;
        if self.cfg.policy != Policy::Baseline {
            if let Some((i, t)) = self.most_expired() {
                if i < last {
                    return Some(if i == 0 {
                        self.whole_l0(Trigger::Ttl)
                    } else {
                        Pick { level: i, inputs: vec![t], trigger: Trigger::Ttl }
                    });
                }
            }
        }
        let i = self.saturated()?;
        if i == 0 {
            return Some(self.whole_l0(Trigger::Saturation));
        }
        let t = if self.cfg.policy == Policy::ZoneAware && i as u32 > self.cfg.zone_aware.low_levels {
            self.max_weight(i)?
        } else {
            self.min_overlap(i)?
        };
        Some(Pick { level: i, inputs: vec![t], trigger: Trigger::Saturation })
    }
}
