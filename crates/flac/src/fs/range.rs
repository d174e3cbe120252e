//! Virtual ranges for files: each file is one contiguous range of FLAC pages, allocated by a
//! buddy allocator (power-of-two sizes, naturally aligned, so a range of 512 pages or more
//! starts on a 2 MiB boundary and maps with huge pages). A file that outgrows its range moves
//! to one twice as large (by attaching its pages, not copying them).

use std::collections::BTreeSet;

pub struct Ranges {
    /// Free blocks by order (block of order k = 2^k pages).
    free: Vec<BTreeSet<u64>>,
    total: u64,
    free_pages: u64,
}

impl Ranges {
    /// All of `0..pages` free (`pages` need not be a power of two).
    pub fn new(pages: u64) -> Ranges {
        let orders = 64 - pages.leading_zeros() as usize;
        let mut r = Ranges { free: vec![BTreeSet::new(); orders.max(1)], total: pages, free_pages: 0 };
        let mut at = 0;
        while at < pages {
            let mut k = (at.trailing_zeros() as usize).min(orders - 1);
            while at + (1 << k) > pages {
                k -= 1;
            }
            r.free[k].insert(at);
            r.free_pages += 1 << k;
            at += 1 << k;
        }
        r
    }

    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The order of a range of `pages` pages (rounded up to a power of two).
    pub fn order_of(pages: u64) -> usize {
        pages.max(1).next_power_of_two().trailing_zeros() as usize
    }

    /// A free range of 2^order pages; None if there is none.
    pub fn alloc(&mut self, order: usize) -> Option<u64> {
        let k = (order..self.free.len()).find(|&k| !self.free[k].is_empty())?;
        let at = *self.free[k].iter().next().unwrap();
        self.free[k].remove(&at);
        // Split down to the order wanted, keeping the lower half.
        for j in (order..k).rev() {
            self.free[j].insert(at + (1 << j));
        }
        self.free_pages -= 1 << order;
        Some(at)
    }

    /// Return a range (merging buddies).
    pub fn free(&mut self, at: u64, order: usize) {
        assert_eq!(at % (1 << order), 0, "range {at} not aligned to order {order}");
        self.free_pages += 1 << order;
        let mut at = at;
        let mut k = order;
        while k + 1 < self.free.len() {
            let buddy = at ^ (1 << k);
            if buddy + (1 << k) > self.total || !self.free[k].remove(&buddy) {
                break;
            }
            at = at.min(buddy);
            k += 1;
        }
        self.free[k].insert(at);
    }

    /// Mark a range in use (rebuilding from file metadata); false if any of it is not free.
    pub fn reserve(&mut self, at: u64, order: usize) -> bool {
        // Find the free block containing [at, at + 2^order) and split it around the range.
        for k in order..self.free.len() {
            let base = at & !((1u64 << k) - 1);
            if self.free[k].remove(&base) {
                let mut b = base;
                for j in (order..k).rev() {
                    let half = 1 << j;
                    if at >= b + half {
                        self.free[j].insert(b);
                        b += half;
                    } else {
                        self.free[j].insert(b + half);
                    }
                }
                debug_assert_eq!(b, at);
                self.free_pages -= 1 << order;
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_merge_reserve() {
        let mut r = Ranges::new(1000);
        assert_eq!(r.free_pages(), 1000);
        let a = r.alloc(9).unwrap();
        assert_eq!(a % 512, 0);
        let b = r.alloc(0).unwrap();
        let c = r.alloc(3).unwrap();
        assert_eq!(c % 8, 0);
        assert_eq!(r.free_pages(), 1000 - 512 - 1 - 8);
        r.free(b, 0);
        r.free(c, 3);
        r.free(a, 9);
        assert_eq!(r.free_pages(), 1000);
        assert!(r.alloc(9).is_some());
        assert!(r.alloc(9).is_none(), "only 488 pages left, no second 512 run");
        let mut r = Ranges::new(4096);
        assert!(r.reserve(1024 + 64, 4));
        assert!(!r.reserve(1024 + 64, 4), "already in use");
        assert!(r.reserve(8, 3));
        assert_eq!(r.free_pages(), 4096 - 16 - 8);
        r.free(1024 + 64, 4);
        r.free(8, 3);
        assert_eq!(r.alloc(12), Some(0), "everything merged back");
    }
}
