//! The baselines' view of file pages in PM: the persistent page table plus the changes made
//! since the last commit (new frames, moved and freed pages), which the next commit writes.
//! The overlay holds a reference to each frame it maps until the page table holds it.
//!
//! A flush stages changes (moves them into its transaction, with their references) under a
//! file's lock and commits later without it; until that commit the page table does not hold
//! them, so the overlay keeps answering look-ups with them. Otherwise a page written back and
//! then evicted, a file moved to a larger range, or a write in place would find the page's
//! previous frame in the page table and lose the flushed data.

use std::collections::HashMap;

use super::engine::Staged;
use crate::pm::Pm;

#[derive(Default)]
pub struct Overlay {
    map: HashMap<u64, Option<u32>>,
    /// Changes a flush has staged and not yet committed (no references: the flush holds them).
    staged: HashMap<u64, Option<u32>>,
}

impl Overlay {
    /// The PM frame page `vpn` is in now.
    pub fn frame(&self, pm: &Pm, vpn: u64) -> Option<u32> {
        match self.map.get(&vpn).or_else(|| self.staged.get(&vpn)) {
            Some(&f) => f,
            None => pm.state().ppt(vpn),
        }
    }

    /// Map `vpn` to `f` (a reference the caller passes to the overlay) or to nothing.
    pub fn set(&mut self, pm: &Pm, vpn: u64, f: Option<u32>) {
        if let Some(Some(old)) = self.map.insert(vpn, f) {
            pm.decref(old);
        }
    }

    /// Stage the changes within `vpn..vpn+n` for a flush: into `st`'s transaction, their
    /// references into `st.frames` (dropped after the commit); look-ups still see them until
    /// [`committed`](Self::committed).
    pub fn stage_range(&mut self, vpn: u64, n: u64, st: &mut Staged) {
        let first = st.pt.len();
        self.take_range(vpn, n, &mut st.pt);
        for &(p, f) in &st.pt[first..] {
            st.tx.pt_set(p, f);
            if let Some(f) = f {
                st.frames.push(f);
            }
            self.staged.insert(p, f);
        }
    }

    /// The changes of `st` are in the page table now (or failed to commit): stop answering
    /// with them, unless a later flush has staged the page again.
    pub fn committed(&mut self, st: &Staged) {
        for (p, f) in &st.pt {
            if self.staged.get(p) == Some(f) {
                self.staged.remove(p);
            }
        }
    }

    /// Drop the uncommitted changes within `vpn..vpn+n` (pages freed); returns the frames
    /// whose overlay references the caller drops. Staged changes stay until their commit.
    pub fn discard_range(&mut self, vpn: u64, n: u64) -> Vec<u32> {
        let mut v = Vec::new();
        self.take_range(vpn, n, &mut v);
        v.into_iter().filter_map(|(_, f)| f).collect()
    }

    /// Remove the changes within `vpn..vpn+n` into `out`, in page order.
    fn take_range(&mut self, vpn: u64, n: u64, out: &mut Vec<(u64, Option<u32>)>) {
        let first = out.len();
        if (n as usize) < self.map.len() {
            for p in vpn..vpn + n {
                if let Some(f) = self.map.remove(&p) {
                    out.push((p, f));
                }
            }
        } else {
            self.map.retain(|&p, &mut f| {
                if p >= vpn && p < vpn + n {
                    out.push((p, f));
                    false
                } else {
                    true
                }
            });
            out[first..].sort_unstable_by_key(|&(p, _)| p);
        }
    }
}
