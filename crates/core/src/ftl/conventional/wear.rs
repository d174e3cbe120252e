//! Erases and wear: an erased block goes back to its die's free pool (least-worn first with
//! dynamic wear-levelling) unless the media retired it; static wear-levelling moves the data
//! of the coldest full blocks when the erase-count spread grows too wide.

use super::super::fdp::EventType;
use super::Conventional;
use crate::media::BlockState;

/// Static wear-levelling moves at most this many blocks per check.
const WL_MOVES_PER_CHECK: usize = 4;

impl Conventional {
    /// Block `b` is free: into its die's pool, counted free in its group.
    pub(super) fn pool_push(&mut self, b: u32) {
        let die = self.m.lay.die_of_block(b);
        let m = &mut self.m.blocks[b as usize];
        assert_eq!(m.state, BlockState::Free, "block {b} joins a free pool without being erased");
        assert_eq!(m.valid, 0, "free block {b} holds valid sectors");
        self.pools.push(die, b, m.erase_count);
        m.state = BlockState::Free;
        self.groups[m.rg as usize].free += 1;
    }

    /// Erase block `b` (its valid data already moved) no earlier than `earliest`.
    pub(super) fn erase(&mut self, b: u32, earliest: u64) {
        let m = &self.m.blocks[b as usize];
        assert_eq!(m.state, BlockState::Collecting, "erase of block {b}, which is not being collected");
        assert_eq!(m.valid, 0, "erase of block {b}, which holds valid sectors");
        self.map.erase(&self.m.lay, b);
        let erased = self.m.erase(b, earliest);
        if erased.retired {
            let (rg, now) = (self.m.blocks[b as usize].rg as u16, self.now);
            if let Some(f) = self.fdp.as_mut() {
                f.push_event(EventType::MediaReallocated, None, rg, now);
            }
        } else {
            self.pool_push(b);
        }
        let wl = &mut self.wl;
        wl.erases_since_check += 1;
        if wl.threshold > 0 && !wl.active && wl.erases_since_check >= wl.check_every_erases {
            wl.erases_since_check = 0;
            let rg = self.m.blocks[b as usize].rg as usize;
            self.static_wear_level(rg);
        }
    }

    /// Move the data of the least-worn full blocks when the erase-count spread is too wide, so
    /// cold data stops pinning young blocks.
    fn static_wear_level(&mut self, rg: usize) {
        let blocks = &self.m.blocks;
        assert!(!self.wl.active, "static wear-levelling started within a move");
        let mut members = self.groups[rg].victims.members(blocks);
        members.sort_unstable_by_key(|&b| (blocks[b as usize].erase_count, b));
        self.wl.active = true;
        let planes = self.m.lay.planes_per_die;
        // A few of the coldest blocks per check, while they lag too far behind.
        for &coldest in members.iter().take(WL_MOVES_PER_CHECK) {
            if self.m.max_erase() - self.m.blocks[coldest as usize].erase_count <= self.wl.threshold {
                break;
            }
            let g = &self.groups[rg];
            if g.free <= g.dies.len() as u32 * planes + planes {
                break; // keep the GC reserve for foreground GC
            }
            debug_assert_eq!(self.m.blocks[coldest as usize].rg as usize, rg, "block {coldest} moved by another group");
            self.groups[rg].victims.remove(coldest, &mut self.m.blocks);
            self.m.c.wl_static_moves += 1;
            self.m.c.gc_events += 1;
            self.collect(coldest).expect("static wear-levelling move within the GC reserve");
        }
        self.wl.active = false;
    }
}
