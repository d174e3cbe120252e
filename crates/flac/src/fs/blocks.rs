//! The baselines' view of file pages in PM: the persistent page table plus the changes made
//! since the last commit (new frames, moved and freed pages), which the next commit writes.
//! The overlay holds a reference to each frame it maps until the page table holds it.

use std::collections::HashMap;

use crate::pm::log::Tx;
use crate::pm::Pm;

#[derive(Default)]
pub struct Overlay {
    map: HashMap<u64, Option<u32>>,
}

impl Overlay {
    /// The PM frame page `vpn` is in now.
    pub fn frame(&self, pm: &Pm, vpn: u64) -> Option<u32> {
        match self.map.get(&vpn) {
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

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Move the changes into `tx` (page order); returns the frames whose overlay references
    /// the caller drops after the commit.
    pub fn drain_into(&mut self, tx: &mut Tx) -> Vec<u32> {
        let mut v: Vec<(u64, Option<u32>)> = self.map.drain().collect();
        v.sort_unstable_by_key(|&(vpn, _)| vpn);
        let mut held = Vec::new();
        for (vpn, f) in v {
            tx.pt_set(vpn, f);
            if let Some(f) = f {
                held.push(f);
            }
        }
        held
    }

    /// Changes within `vpn..vpn+n`, removed from the overlay, into `tx`.
    pub fn drain_range_into(&mut self, vpn: u64, n: u64, tx: &mut Tx, held: &mut Vec<u32>) {
        let mut v: Vec<(u64, Option<u32>)> = Vec::new();
        if (n as usize) < self.map.len() {
            for p in vpn..vpn + n {
                if let Some(f) = self.map.remove(&p) {
                    v.push((p, f));
                }
            }
        } else {
            self.map.retain(|&p, &mut f| {
                if p >= vpn && p < vpn + n {
                    v.push((p, f));
                    false
                } else {
                    true
                }
            });
            v.sort_unstable_by_key(|&(p, _)| p);
        }
        for (p, f) in v {
            tx.pt_set(p, f);
            if let Some(f) = f {
                held.push(f);
            }
        }
    }
}
