//! Everything the conventional FTL keeps true between commands (slow; tests call it after
//! every step): the mapping agrees with the blocks, free pools and victim sets hold exactly the
//! free and full blocks of their group, open blocks are programmed in order, and blocks only
//! hold data of their own reclaim group's streams.

use super::Conventional;
use crate::media::BlockState;

impl Conventional {
    pub(super) fn check_all(&self) {
        let lay = &self.m.lay;
        let blocks = &self.m.blocks;
        self.m.check_invariants();
        // Valid-sector count of each block == sectors mapped to it; L2P and P2L agree.
        self.map.check(lay, blocks);
        for (rg, g) in self.groups.iter().enumerate() {
            // Free pools hold exactly the group's free blocks, which are fully erased.
            let pooled: u32 = g.dies.iter().map(|&d| self.pools.len(d) as u32).sum();
            let free = blocks.iter().filter(|m| m.state == BlockState::Free && m.rg as usize == rg).count() as u32;
            assert_eq!(pooled, g.free, "group {rg}: pooled free blocks");
            assert_eq!(free, g.free, "group {rg}: free blocks");
            for &d in &g.dies {
                for b in self.pools.blocks(d) {
                    assert_eq!(blocks[b as usize].state, BlockState::Free, "pooled block {b} is not free");
                    assert_eq!(lay.die_of_block(b), d, "block {b} pooled under the wrong die");
                }
            }
            // The victim set holds exactly the group's full blocks.
            let mut members = g.victims.members(blocks);
            members.sort_unstable();
            let full: Vec<u32> = (0..blocks.len() as u32)
                .filter(|&b| blocks[b as usize].state == BlockState::Full && blocks[b as usize].rg as usize == rg)
                .collect();
            assert_eq!(members, full, "group {rg}: victim set != full blocks");
            let open_pages: u64 =
                blocks.iter().filter(|m| m.state == BlockState::Open && m.rg as usize == rg).map(|m| m.programmed_pages as u64).sum();
            assert_eq!(open_pages, g.open_written_pages, "group {rg}: pages written in open blocks");
            let open = blocks.iter().filter(|m| m.state == BlockState::Open && m.rg as usize == rg).count() as u32;
            assert_eq!(open, g.open_blocks, "group {rg}: open blocks");
            // The victims in progress are exactly the group's blocks being collected.
            let mut collecting: Vec<u32> = g.gc.iter().map(|c| c.victim).collect();
            collecting.sort_unstable();
            let want: Vec<u32> = (0..blocks.len() as u32)
                .filter(|&b| blocks[b as usize].state == BlockState::Collecting && blocks[b as usize].rg as usize == rg)
                .collect();
            assert_eq!(collecting, want, "group {rg}: victims in progress");
            assert!(g.gc.len() <= g.gc_width.max(1), "group {rg}: more victims in progress than gc_width");
        }
        // Blocks only ever hold data of their own group's streams.
        for (b, m) in blocks.iter().enumerate() {
            if matches!(m.state, BlockState::Open | BlockState::Full | BlockState::Collecting) {
                assert_eq!(self.points.streams[m.stream as usize].rg, m.rg, "block {b} written by a stream of another reclaim group");
            }
        }
        // Relocated sectors wait in a unit only of a stream that takes its own relocations,
        // and are among the sectors placed in it; GC never moves data out of a group, and
        // data it moved once never goes back to a host stream.
        for (i, st) in self.points.streams.iter().enumerate() {
            let dest = &self.points.streams[st.gc_dest];
            assert!(st.relocated == 0 || st.gc_dest == i, "stream {i}: relocated sectors in a stream that is not its own GC stream");
            assert!(st.relocated <= st.ways[st.cur].fill, "stream {i}: more relocated sectors than placed in its unit");
            assert_eq!(dest.rg, st.rg, "stream {i}: GC destination in another reclaim group");
            assert!(!dest.host || st.gc_dest == i, "stream {i}: relocates into another host stream");
        }
        assert!(self.points.relocated_carry < lay.sectors_per_page, "relocated sectors carried over a whole page");
        // Pages are programmed in order: within an open block, pages before the write point are
        // programmed and those after it erased; full blocks are programmed throughout.
        for st in &self.points.streams {
            for way in &st.ways {
                for &b in &way.blocks {
                    for (page, &seq) in self.map.block_pages(lay, b).iter().enumerate() {
                        assert_eq!(seq != 0, (page as u32) < way.page, "block {b} page {page}: out-of-order program");
                    }
                }
            }
        }
        for (b, m) in blocks.iter().enumerate() {
            let pages = self.map.block_pages(lay, b as u32);
            match m.state {
                // Programmed pages form a prefix (all of the block unless a reclaim unit handle
                // update closed it early).
                BlockState::Full => {
                    let n = m.programmed_pages as usize;
                    assert!(
                        n > 0 && pages[..n].iter().all(|&s| s != 0) && pages[n..].iter().all(|&s| s == 0),
                        "full block {b}: programmed pages not a prefix of {n}"
                    );
                }
                BlockState::Free => {
                    assert!(pages.iter().all(|&s| s == 0));
                    assert!(self.map.block_erased(lay, b as u32), "free block {b} not erased");
                }
                _ => {}
            }
        }
    }
}
