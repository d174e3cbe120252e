//! Frame allocation with reference counts, for both tiers: DRAM frames (a memfd) and PM frames
//! (the PM file's data area). A frame is shared when more than one holder refers to it (a
//! FLAC-space page, a buffer page, a flush in flight, the persistent page table); a shared
//! frame is never written in place (copy-on-write), and it is free again when the last holder
//! lets go. Runs of consecutive frames are preferred, and 2 MiB-aligned runs for 2 MiB of
//! consecutive pages, so a range maps with one `mmap` (and one PMD on a huge-page backing).

use crate::sys::HUGE_PAGES;

pub struct FrameAlloc {
    refs: Vec<u32>,
    /// Bit `i` set = frame `i` free.
    free: Vec<u64>,
    nfree: usize,
    /// Next-fit position (bit index) for single frames and short runs.
    cursor: usize,
}

impl FrameAlloc {
    pub fn new(nframes: usize) -> Self {
        Self::from_refs(vec![0; nframes])
    }

    /// Rebuild from reference counts (recovery: counted from the persistent page table).
    pub fn from_refs(refs: Vec<u32>) -> Self {
        let n = refs.len();
        let mut free = vec![0u64; n.div_ceil(64)];
        let mut nfree = 0;
        for (i, &r) in refs.iter().enumerate() {
            if r == 0 {
                free[i / 64] |= 1 << (i % 64);
                nfree += 1;
            }
        }
        FrameAlloc { refs, free, nfree, cursor: 0 }
    }

    pub fn nframes(&self) -> usize {
        self.refs.len()
    }

    pub fn nfree(&self) -> usize {
        self.nfree
    }

    pub fn refs(&self, f: u32) -> u32 {
        self.refs[f as usize]
    }

    fn is_free(&self, i: usize) -> bool {
        self.free[i / 64] >> (i % 64) & 1 == 1
    }

    fn take(&mut self, i: usize) {
        debug_assert!(self.is_free(i) && self.refs[i] == 0);
        self.free[i / 64] &= !(1 << (i % 64));
        self.refs[i] = 1;
        self.nfree -= 1;
    }

    /// One frame (reference count 1).
    pub fn alloc(&mut self) -> Option<u32> {
        if self.nfree == 0 {
            return None;
        }
        let words = self.free.len();
        let start = self.cursor / 64;
        for k in 0..=words {
            let w = (start + k) % words;
            let bits = self.free[w];
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                if i < self.refs.len() {
                    self.take(i);
                    self.cursor = i + 1;
                    return Some(i as u32);
                }
            }
        }
        unreachable!("nfree > 0 but no free bit")
    }

    /// `n` consecutive frames whose first is a multiple of `align`; None if there is no such run.
    pub fn alloc_run(&mut self, n: usize, align: usize) -> Option<u32> {
        assert!(n > 0 && align > 0);
        if self.nfree < n {
            return None;
        }
        let total = self.refs.len();
        // Whole-word runs (the 2 MiB case: 8 words of free bits) are checked a word at a time.
        if n.is_multiple_of(64) && align.is_multiple_of(64) {
            let wn = n / 64;
            let wa = align / 64;
            let mut w = 0;
            while (w + wn) * 64 <= total {
                if self.free[w..w + wn].iter().all(|&b| b == u64::MAX) {
                    for i in w * 64..(w + wn) * 64 {
                        self.take(i);
                    }
                    return Some((w * 64) as u32);
                }
                w += wa;
            }
            return None;
        }
        let mut i = self.cursor.min(total);
        let mut wrapped = false;
        loop {
            if i + n > total {
                if wrapped {
                    return None;
                }
                wrapped = true;
                i = 0;
                continue;
            }
            let aligned = i.div_ceil(align) * align;
            if aligned != i {
                i = aligned;
                continue;
            }
            match (i..i + n).find(|&j| !self.is_free(j)) {
                None => {
                    for j in i..i + n {
                        self.take(j);
                    }
                    self.cursor = i + n;
                    return Some(i as u32);
                }
                Some(busy) => {
                    if wrapped && busy >= self.cursor {
                        return None;
                    }
                    i = busy + 1;
                }
            }
        }
    }

    /// `n` frames for `n` consecutive pages: 2 MiB-aligned runs for each whole 2 MiB when
    /// `huge_first` (the pages start on a 2 MiB boundary), then one run for the rest, then
    /// single frames. Returns false (nothing allocated) if fewer than `n` are free.
    pub fn alloc_many(&mut self, n: usize, huge_first: bool, out: &mut Vec<u32>) -> bool {
        if self.nfree < n {
            return false;
        }
        let mut left = n;
        if huge_first {
            while left >= HUGE_PAGES {
                match self.alloc_run(HUGE_PAGES, HUGE_PAGES) {
                    Some(f) => out.extend(f..f + HUGE_PAGES as u32),
                    None => break,
                }
                left -= HUGE_PAGES;
            }
        }
        if left > 1 {
            if let Some(f) = self.alloc_run(left, 1) {
                out.extend(f..f + left as u32);
                return true;
            }
        }
        for _ in 0..left {
            out.push(self.alloc().expect("counted free frames"));
        }
        true
    }

    pub fn incref(&mut self, f: u32) {
        let r = &mut self.refs[f as usize];
        assert!(*r > 0, "incref of free frame {f}");
        *r += 1;
    }

    /// Drop one reference; true if the frame became free.
    pub fn decref(&mut self, f: u32) -> bool {
        let i = f as usize;
        let r = &mut self.refs[i];
        assert!(*r > 0, "decref of free frame {f}");
        *r -= 1;
        if *r == 0 {
            self.free[i / 64] |= 1 << (i % 64);
            self.nfree += 1;
            true
        } else {
            false
        }
    }

    /// Free bits and reference counts agree, and the free count matches.
    pub fn check_invariants(&self) {
        let mut nfree = 0;
        for (i, &r) in self.refs.iter().enumerate() {
            assert_eq!(self.is_free(i), r == 0, "frame {i}: refs {r} but free bit {}", self.is_free(i));
            nfree += (r == 0) as usize;
        }
        assert_eq!(nfree, self.nfree);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_singles_and_refcounts() {
        let mut a = FrameAlloc::new(2048);
        let r = a.alloc_run(HUGE_PAGES, HUGE_PAGES).unwrap();
        assert_eq!(r % HUGE_PAGES as u32, 0);
        let s = a.alloc().unwrap();
        assert!(s < r || s >= r + HUGE_PAGES as u32);
        a.incref(s);
        assert!(!a.decref(s));
        assert!(a.decref(s));
        a.check_invariants();
        assert_eq!(a.nfree(), 2048 - HUGE_PAGES);
        let mut out = Vec::new();
        assert!(a.alloc_many(1000, true, &mut out));
        assert_eq!(out.len(), 1000);
        out.sort();
        out.dedup();
        assert_eq!(out.len(), 1000);
        assert!(!a.alloc_many(1000, false, &mut Vec::new()), "only 536 left");
        a.check_invariants();
    }

    #[test]
    fn unaligned_runs_skip_busy_frames() {
        let mut a = FrameAlloc::new(100);
        for _ in 0..10 {
            a.alloc().unwrap();
        }
        a.decref(5);
        let r = a.alloc_run(20, 4).unwrap();
        assert_eq!(r, 12);
        assert!(a.alloc_run(90, 1).is_none());
        a.check_invariants();
    }

    #[test]
    fn rebuild_from_refs() {
        let a = FrameAlloc::from_refs(vec![1, 0, 2, 0]);
        assert_eq!(a.nfree(), 2);
        a.check_invariants();
    }
}
