//! Free blocks per die (least-worn first with dynamic wear-levelling, else first-in first-out)
//! and the static wear-levelling schedule.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FreePools {
    heaps: Vec<BinaryHeap<Reverse<(u64, u32)>>>,
    /// Insertion counter: FIFO order, and the tie-break among equally worn blocks.
    order: u64,
    wl_dynamic: bool,
}

impl FreePools {
    pub fn new(dies: u32, wl_dynamic: bool) -> FreePools {
        FreePools { heaps: (0..dies).map(|_| BinaryHeap::new()).collect(), order: 0, wl_dynamic }
    }

    /// Block `b` of `die`, erased `erase_count` times, is free.
    pub fn push(&mut self, die: u32, b: u32, erase_count: u32) {
        let key = if self.wl_dynamic { ((erase_count as u64) << 32) | (self.order & 0xFFFF_FFFF) } else { self.order };
        self.order += 1;
        self.heaps[die as usize].push(Reverse((key, b)));
    }

    /// The next free block of `die`, if it has one.
    pub fn pop(&mut self, die: u32) -> Option<u32> {
        self.heaps[die as usize].pop().map(|Reverse((_, b))| b)
    }

    /// Free blocks of `die`.
    #[inline]
    pub fn len(&self, die: u32) -> usize {
        self.heaps[die as usize].len()
    }

    /// Free blocks of `die`, in no particular order.
    pub fn blocks(&self, die: u32) -> impl Iterator<Item = u32> + '_ {
        self.heaps[die as usize].iter().map(|Reverse((_, b))| *b)
    }
}

/// Static wear-levelling schedule: every `check_every_erases` erases, the coldest full blocks
/// are moved when the erase-count spread exceeds `threshold` (0 = off).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StaticWl {
    pub threshold: u32,
    pub check_every_erases: u32,
    pub erases_since_check: u32,
    /// A move is in progress (its relocations must not start another one, nor foreground GC).
    pub active: bool,
}

impl StaticWl {
    pub fn new(threshold: u32, blocks: u32) -> StaticWl {
        StaticWl { threshold, check_every_erases: (blocks / 32).max(16), erases_since_check: 0, active: false }
    }
}
