//! Garbage-collection victim selection over the set of full blocks.
//!
//! - greedy: buckets of blocks by valid count (intrusive lists through `BlockMeta::prev/next`),
//!   O(1) per invalidation, the victim is the head of the lowest non-empty bucket;
//! - FIFO: blocks in the order they were closed;
//! - cost-benefit and d-choices: a dense array of full blocks (position kept in `prev`),
//!   scanned (cost-benefit, (1 - u) / 2u x age as in Rosenblum and Ousterhout's LFS) or
//!   sampled (best of d random blocks).

use std::collections::VecDeque;

use rand::Rng;
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};

use crate::config::GcPolicy;
use crate::media::{BlockMeta, NIL};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Victims {
    Greedy { heads: Vec<u32>, min: usize, len: u32 },
    Fifo { queue: VecDeque<u32> },
    Dense { policy: GcPolicy, list: Vec<u32>, d: u32 },
}

impl Victims {
    pub fn new(policy: GcPolicy, sectors_per_block: u32, d: u32) -> Victims {
        match policy {
            GcPolicy::Greedy => Victims::Greedy { heads: vec![NIL; sectors_per_block as usize + 1], min: usize::MAX, len: 0 },
            GcPolicy::Fifo => Victims::Fifo { queue: VecDeque::new() },
            GcPolicy::CostBenefit | GcPolicy::DChoices => Victims::Dense { policy, list: Vec::new(), d },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Victims::Greedy { len, .. } => *len as usize,
            Victims::Fifo { queue } => queue.len(),
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
            Victims::Dense { list, .. } => {
                blocks[b as usize].prev = list.len() as u32;
                list.push(b);
            }
        }
    }

    /// Block `b` (full) lost one valid sector; `blocks[b].valid` is already decremented.
    #[inline]
    pub fn on_invalidate(&mut self, b: u32, blocks: &mut [BlockMeta]) {
        if let Victims::Greedy { heads, min, .. } = self {
            let v = blocks[b as usize].valid as usize;
            unlink(heads, blocks, b, v + 1);
            link(heads, blocks, b, v);
            if v < *min {
                *min = v;
            }
        }
    }

    /// Take a specific block out (static wear-levelling picks its own victim).
    pub fn remove(&mut self, b: u32, blocks: &mut [BlockMeta]) {
        match self {
            Victims::Greedy { heads, len, .. } => {
                let v = blocks[b as usize].valid as usize;
                unlink(heads, blocks, b, v);
                *len -= 1;
            }
            Victims::Fifo { queue } => {
                let i = queue.iter().position(|&x| x == b).expect("block in FIFO");
                queue.remove(i);
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
                heads[v]
            }
            Victims::Fifo { queue } => return queue.pop_front(),
            Victims::Dense { policy, list, d } => {
                if list.is_empty() {
                    return None;
                }
                match policy {
                    GcPolicy::CostBenefit => {
                        let mut best = (f64::MIN, 0usize);
                        for (i, &b) in list.iter().enumerate() {
                            let m = &blocks[b as usize];
                            let u = m.valid as f64 / sectors_per_block as f64;
                            let age = (now - m.closed_at.min(now)) as f64 + 1.0;
                            let score = if u == 0.0 { f64::MAX } else { (1.0 - u) / (2.0 * u) * age };
                            if score > best.0 {
                                best = (score, i);
                            }
                        }
                        list[best.1]
                    }
                    _ => {
                        let mut best = list[rng.gen_range(0..list.len())];
                        for _ in 1..*d {
                            let c = list[rng.gen_range(0..list.len())];
                            if blocks[c as usize].valid < blocks[best as usize].valid {
                                best = c;
                            }
                        }
                        best
                    }
                }
            }
        };
        self.remove(b, blocks);
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
            Victims::Dense { list, .. } => list.clone(),
        }
    }
}

#[inline]
fn link(heads: &mut [u32], blocks: &mut [BlockMeta], b: u32, v: usize) {
    let h = heads[v];
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
