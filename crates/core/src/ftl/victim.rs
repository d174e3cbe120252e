//! Garbage-collection victim selection over the set of full blocks.
//!
//! - greedy: buckets of blocks by valid count (intrusive lists through `BlockMeta::prev/next`),
//!   O(1) per invalidation, the victim is the head of the lowest non-empty bucket;
//! - FIFO: blocks in the order they were closed;
//! - cost-benefit ((1 - u) / 2u x age, as in Rosenblum and Ousterhout's LFS): blocks bucketed
//!   by valid count, each bucket ordered by close time. Within a bucket u is fixed, so its
//!   oldest block scores best: a pick compares one candidate per bucket (O(sectors per block),
//!   not O(blocks)); an invalidation moves a block between buckets in O(log n);
//! - d-choices: a dense array of full blocks (position kept in `prev`), best of d random ones.
//!
//! [`greedy`] is the same greedy choice by a scan, for the small logs that keep no buckets (ZNS
//! conventional zones' segments here; the case studies' logs on open-channel and ZNS devices).

use std::collections::{BTreeSet, VecDeque};

use rand::Rng;
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::config::GcPolicy;
use crate::media::{BlockMeta, NIL};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Victims {
    Greedy { heads: Vec<u32>, min: usize, len: u32 },
    Fifo { queue: VecDeque<u32> },
    CostBenefit { buckets: Vec<BTreeSet<(u64, u32)>>, len: u32 },
    Dense { list: Vec<u32>, d: u32 },
}

impl Victims {
    pub fn new(policy: GcPolicy, sectors_per_block: u32, d: u32) -> Victims {
        match policy {
            GcPolicy::Greedy => Victims::Greedy { heads: vec![NIL; sectors_per_block as usize + 1], min: usize::MAX, len: 0 },
            GcPolicy::Fifo => Victims::Fifo { queue: VecDeque::new() },
            GcPolicy::CostBenefit => Victims::CostBenefit { buckets: vec![BTreeSet::new(); sectors_per_block as usize + 1], len: 0 },
            GcPolicy::DChoices => Victims::Dense { list: Vec::new(), d },
        }
    }

    /// Bytes a victim set of `policy` takes on a device of `blocks` blocks (all of them full,
    /// the worst case): greedy keeps list heads per valid count (links live in the blocks),
    /// FIFO and d-choices a slot per block, cost-benefit a B-tree entry per block.
    pub fn memory_bytes_of(policy: GcPolicy, sectors_per_block: u32, blocks: u64) -> u64 {
        let buckets = sectors_per_block as u64 + 1;
        match policy {
            GcPolicy::Greedy => buckets * 4,
            GcPolicy::Fifo | GcPolicy::DChoices => blocks * 4,
            // (u64, u32) keys in B-tree nodes of up to 11 keys, about two thirds full.
            GcPolicy::CostBenefit => buckets * 24 + blocks * 16 * 3 / 2,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Victims::Greedy { len, .. } => *len as usize,
            Victims::Fifo { queue } => queue.len(),
            Victims::CostBenefit { len, .. } => *len as usize,
            Victims::Dense { list, .. } => list.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A block just became full.
    pub fn insert(&mut self, b: u32, blocks: &mut [BlockMeta]) {
        match self {
            Victims::Greedy { heads, min, len } => {
                let v = blocks[b as usize].valid as usize;
                link(heads, blocks, b, v);
                *min = (*min).min(v);
                *len += 1;
            }
            Victims::Fifo { queue } => queue.push_back(b),
            Victims::CostBenefit { buckets, len } => {
                let m = &blocks[b as usize];
                let fresh = buckets[m.valid as usize].insert((m.closed_at, b));
                debug_assert!(fresh, "block {b} inserted into the victim set twice");
                *len += 1;
            }
            Victims::Dense { list, .. } => {
                blocks[b as usize].prev = list.len() as u32;
                list.push(b);
            }
        }
    }

    /// Block `b` (full) lost one valid sector; `blocks[b].valid` is already decremented.
    #[inline]
    pub fn on_invalidate(&mut self, b: u32, blocks: &mut [BlockMeta]) {
        match self {
            Victims::Greedy { heads, min, .. } => {
                let v = blocks[b as usize].valid as usize;
                unlink(heads, blocks, b, v + 1);
                link(heads, blocks, b, v);
                if v < *min {
                    *min = v;
                }
            }
            Victims::CostBenefit { buckets, .. } => {
                let m = &blocks[b as usize];
                let key = (m.closed_at, b);
                let moved = buckets[m.valid as usize + 1].remove(&key);
                debug_assert!(moved, "block {b} was not in the bucket of its valid count");
                buckets[m.valid as usize].insert(key);
            }
            _ => {}
        }
    }

    /// Take a specific block out (static wear-levelling picks its own victim).
    pub fn remove(&mut self, b: u32, blocks: &mut [BlockMeta]) {
        match self {
            Victims::Greedy { heads, len, .. } => {
                let v = blocks[b as usize].valid as usize;
                debug_assert!(*len > 0, "removing block {b} from an empty victim set");
                unlink(heads, blocks, b, v);
                *len -= 1;
            }
            Victims::Fifo { queue } => {
                let i = queue.iter().position(|&x| x == b).expect("block in FIFO");
                queue.remove(i);
            }
            Victims::CostBenefit { buckets, len } => {
                let m = &blocks[b as usize];
                let removed = buckets[m.valid as usize].remove(&(m.closed_at, b));
                debug_assert!(removed, "block {b} in its cost-benefit bucket");
                *len -= 1;
            }
            Victims::Dense { list, .. } => {
                let i = blocks[b as usize].prev as usize;
                debug_assert_eq!(list[i], b);
                list.swap_remove(i);
                if i < list.len() {
                    blocks[list[i] as usize].prev = i as u32;
                }
                blocks[b as usize].prev = NIL;
            }
        }
    }

    /// Choose and remove the next victim. `now` is the host-write clock (for ages).
    pub fn pick(&mut self, blocks: &mut [BlockMeta], sectors_per_block: u32, now: u64, rng: &mut Pcg64Mcg) -> Option<u32> {
        let b = match self {
            Victims::Greedy { heads, min, .. } => {
                let mut v = *min;
                while v < heads.len() && heads[v] == NIL {
                    v += 1;
                }
                if v >= heads.len() {
                    *min = usize::MAX;
                    return None;
                }
                *min = v;
                debug_assert_eq!(blocks[heads[v] as usize].valid as usize, v, "greedy bucket {v} holds a block of another valid count");
                heads[v]
            }
            Victims::Fifo { queue } => return queue.pop_front(),
            Victims::CostBenefit { buckets, .. } => {
                // The oldest block of each valid count is that count's best; compare them.
                let mut best: Option<(f64, u32)> = None;
                for (v, bucket) in buckets.iter().enumerate() {
                    let Some(&(closed_at, b)) = bucket.first() else { continue };
                    debug_assert_eq!(blocks[b as usize].valid as usize, v, "cost-benefit bucket {v} holds a block of another valid count");
                    if v == 0 {
                        best = Some((f64::MAX, b));
                        break;
                    }
                    let u = v as f64 / sectors_per_block as f64;
                    let age = (now - closed_at.min(now)) as f64 + 1.0;
                    let score = (1.0 - u) / (2.0 * u) * age;
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, b));
                    }
                }
                best?.1
            }
            Victims::Dense { list, d, .. } => {
                if list.is_empty() {
                    return None;
                }
                let mut best = list[rng.gen_range(0..list.len())];
                for _ in 1..*d {
                    let c = list[rng.gen_range(0..list.len())];
                    if blocks[c as usize].valid < blocks[best as usize].valid {
                        best = c;
                    }
                }
                best
            }
        };
        self.remove(b, blocks);
        debug_assert!(blocks[b as usize].valid <= sectors_per_block, "victim {b} counts more valid sectors than a block has");
        Some(b)
    }

    /// Every block in the set (for invariant checks and static wear-levelling scans).
    pub fn members(&self, blocks: &[BlockMeta]) -> Vec<u32> {
        match self {
            Victims::Greedy { heads, .. } => {
                let mut out = vec![];
                for &h in heads.iter() {
                    let mut b = h;
                    while b != NIL {
                        out.push(b);
                        b = blocks[b as usize].next;
                    }
                }
                out
            }
            Victims::Fifo { queue } => queue.iter().copied().collect(),
            Victims::CostBenefit { buckets, .. } => buckets.iter().flat_map(|bk| bk.iter().map(|&(_, b)| b)).collect(),
            Victims::Dense { list, .. } => list.clone(),
        }
    }
}

/// The greedy victim among `candidates` (block, zone or segment numbers): the one with the least
/// `valid` (sectors, bytes: whatever the caller counts), ties to the lowest number. `None` when
/// there is no candidate. A scan, O(candidates); the FTL's own greedy set is [`Victims`].
pub fn greedy<I: Ord + Copy, K: Ord>(candidates: impl IntoIterator<Item = I>, mut valid: impl FnMut(I) -> K) -> Option<I> {
    // The number in the key makes every key distinct: which of equal minima a scan keeps
    // never matters.
    candidates.into_iter().min_by_key(|&i| (valid(i), i))
}

#[inline]
fn link(heads: &mut [u32], blocks: &mut [BlockMeta], b: u32, v: usize) {
    let h = heads[v];
    debug_assert_ne!(h, b, "block {b} linked into bucket {v} twice");
    blocks[b as usize].prev = NIL;
    blocks[b as usize].next = h;
    if h != NIL {
        blocks[h as usize].prev = b;
    }
    heads[v] = b;
}

#[inline]
fn unlink(heads: &mut [u32], blocks: &mut [BlockMeta], b: u32, v: usize) {
    let (p, n) = (blocks[b as usize].prev, blocks[b as usize].next);
    if p != NIL {
        blocks[p as usize].next = n;
    } else {
        debug_assert_eq!(heads[v], b);
        heads[v] = n;
    }
    if n != NIL {
        blocks[n as usize].prev = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn greedy_takes_the_least_valid_and_the_lowest_number_on_ties() {
        let valid = [5u32, 2, 7, 2, 0];
        assert_eq!(greedy([0usize, 1, 2, 3], |b| valid[b]), Some(1));
        assert_eq!(greedy([3usize, 2, 1, 0], |b| valid[b]), Some(1), "not the first minimum met");
        assert_eq!(greedy(0..5usize, |b| valid[b]), Some(4));
        assert_eq!(greedy(std::iter::empty::<u32>(), |_| 0), None);
    }

    fn score(m: &BlockMeta, spb: u32, now: u64) -> f64 {
        let u = m.valid as f64 / spb as f64;
        let age = (now - m.closed_at.min(now)) as f64 + 1.0;
        if u == 0.0 {
            f64::MAX
        } else {
            (1.0 - u) / (2.0 * u) * age
        }
    }

    /// The bucketed cost-benefit index picks a block as good as a scan of every block would.
    #[test]
    fn cost_benefit_index_matches_a_full_scan() {
        let spb = 64;
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        for round in 0..50 {
            let n = 200;
            let mut blocks = vec![BlockMeta::new(); n];
            let mut v = Victims::new(GcPolicy::CostBenefit, spb, 0);
            for (b, m) in blocks.iter_mut().enumerate() {
                m.valid = rng.gen_range(1..=spb);
                m.closed_at = rng.gen_range(0..1000);
                m.state = crate::media::BlockState::Full;
                let _ = b;
            }
            for b in 0..n as u32 {
                v.insert(b, &mut blocks);
            }
            // Invalidate some sectors.
            for _ in 0..500 {
                let b = rng.gen_range(0..n as u32);
                if blocks[b as usize].valid > 1 {
                    blocks[b as usize].valid -= 1;
                    v.on_invalidate(b, &mut blocks);
                }
            }
            let now = 1000 + round * 10;
            let mut members = v.members(&blocks);
            members.sort();
            assert_eq!(members, (0..n as u32).collect::<Vec<_>>());
            let best = (0..n).map(|b| score(&blocks[b], spb, now)).fold(f64::MIN, f64::max);
            let picked = v.pick(&mut blocks, spb, now, &mut rng).unwrap();
            assert_eq!(score(&blocks[picked as usize], spb, now), best);
            assert_eq!(v.len(), n - 1);
        }
    }
}
