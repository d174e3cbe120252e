//! Garbage collection: victims come from the group's victim set (`ftl/victim.rs`); up to
//! `gc_width` victims are collected at once, a page of each in turn, so GC reads spread over
//! the dies; collection is paced with host writes below the background watermark, runs on
//! idle dies between open-loop arrivals, and holds host writes only below the foreground
//! watermark. Valid sectors move to the GC stream their data belongs to.

use super::groups::GcCursor;
use super::Conventional;
use crate::error::{Error, Result};
use crate::media::BlockState;

/// How many pages ahead relocation starts its L2P look-ups (each page's sectors are independent
/// cache misses; a page's relocation is too short to hide one).
const RELOCATION_AHEAD: u32 = 3;

impl Conventional {
    /// Take the next victim of group `rg` out of its victim set and start collecting it.
    fn gc_pick(&mut self, rg: usize) -> Result<u32> {
        let v = self.groups[rg].pick(&mut self.m.blocks, &self.m.lay, self.host_clock, &mut self.m.rng, rg, self.map.mapped())?;
        self.m.c.gc_events += 1;
        self.m.blocks[v as usize].state = BlockState::Collecting;
        let now = self.now;
        self.groups[rg].gc.push(GcCursor { victim: v, page: 0, last_read: now });
        assert!(self.groups[rg].gc.len() <= self.groups[rg].gc_width.max(1), "group {rg}: more victims in progress than gc_width");
        Ok(v)
    }

    /// Collect one whole victim of group `rg`: the oldest in progress, or a new one.
    /// `foreground`: a host write is waiting for it (else idle-time GC).
    pub(super) fn gc_one(&mut self, rg: usize, foreground: bool) -> Result<()> {
        if self.groups[rg].gc.is_empty() {
            self.gc_pick(rg)?;
        }
        self.gc_advance(rg, 0, u32::MAX, u64::MAX, foreground)?;
        Ok(())
    }

    /// Whether group `rg`'s free blocks, net of the pages written in its open blocks, are below
    /// the background watermark.
    #[inline]
    pub(super) fn gc_short(&self, rg: usize) -> bool {
        self.groups[rg].shortfall_pages(self.m.lay.pages_per_block) > 0
    }

    /// GC paced by host writes: called once per programmed host unit below the background
    /// watermark, it scans victim pages until it has passed over as many stale sectors as the
    /// host unit consumed (twice as many when free space runs low), so GC work interleaves
    /// with host programs on the dies instead of arriving in bursts.
    pub(super) fn gc_paced(&mut self, rg: usize) -> Result<()> {
        let lay = self.m.lay;
        let unit = (lay.sectors_per_page * lay.planes_per_die) as u64;
        // Twice the pace when more than half a stripe short.
        let half_stripe = (self.groups[rg].dies.len() as u32 * lay.planes_per_die / 2) as i64 * lay.pages_per_block as i64;
        let mut want = if self.groups[rg].shortfall_pages(lay.pages_per_block) > half_stripe { 2 * unit } else { unit };
        // Each host unit's share goes to the next victim in turn (consecutive pages of one
        // block: its reads and map updates stay local), so successive units spread GC reads
        // over the victims' dies; at most four blocks' worth of pages per host unit.
        let mut budget = 4 * lay.pages_per_block;
        {
            let g = &mut self.groups[rg];
            g.gc_turn = g.gc_turn.wrapping_add(1);
        }
        let mut can_pick = true;
        while want > 0 && budget > 0 && self.gc_short(rg) {
            if can_pick && self.groups[rg].gc.len() < self.groups[rg].gc_width {
                match self.gc_pick(rg) {
                    Ok(_) => {}
                    // Nothing reclaimable yet: the data still fits above the foreground
                    // watermark, which is where a host write would have to fail.
                    Err(Error::WornOut(_)) if self.groups[rg].gc.is_empty() => return Ok(()),
                    // Work on the victims in progress; no new pick this call.
                    Err(Error::WornOut(_)) => can_pick = false,
                    Err(e) => return Err(e),
                }
            }
            let g = &self.groups[rg];
            if g.gc.is_empty() {
                // The last victim in progress is done and no new one could be picked.
                return Ok(());
            }
            let i = g.gc_turn % g.gc.len();
            let page0 = g.gc[i].page;
            let (n, v) = (g.gc.len(), g.gc[i].victim);
            let got = self.gc_advance(rg, i, budget, want, false)?;
            want = want.saturating_sub(got);
            // Pages scanned (a finished victim left the list: count the rest of its block).
            let g = &self.groups[rg];
            let now_page = if g.gc.len() < n || g.gc.get(i).map(|c| c.victim) != Some(v) { lay.pages_per_block } else { g.gc[i].page };
            debug_assert!(now_page >= page0, "GC cursor of victim {v} moved backwards");
            budget = budget.saturating_sub((now_page - page0).max(1));
        }
        Ok(())
    }

    /// Relocate up to `pages` pages of group `rg`'s victim in progress number `i`, stopping
    /// once `want` stale sectors have been passed over or the block is done; erase it when
    /// done (the cursor leaves the list) and count the collection as foreground (a host write
    /// waited for it) or background (paced with host writes, or on idle dies). Returns the
    /// stale sectors passed over.
    fn gc_advance(&mut self, rg: usize, i: usize, pages: u32, want: u64, foreground: bool) -> Result<u64> {
        let spp = self.m.lay.sectors_per_page as u64;
        let ppb = self.m.lay.pages_per_block;
        let v = self.groups[rg].gc[i].victim;
        debug_assert_eq!(self.m.blocks[v as usize].state, BlockState::Collecting, "victim {v} in progress but not collecting");
        let mut reclaimed = 0u64;
        let mut done = 0u32;
        while self.groups[rg].gc[i].page < ppb && reclaimed < want && done < pages {
            done += 1;
            let g = &mut self.groups[rg];
            if self.m.blocks[v as usize].valid == 0 {
                let rest = ppb - g.gc[i].page;
                reclaimed += rest as u64 * spp;
                g.gc[i].page = ppb;
                break;
            }
            let page = g.gc[i].page;
            // The cursor moves on only once the page is relocated: a worn-out device failing
            // half way retries the rest of the page next time.
            let (live, read_done) = self.relocate_page(v, page)?;
            let g = &mut self.groups[rg];
            debug_assert_eq!(g.gc[i].victim, v);
            g.gc[i].page += 1;
            g.gc[i].last_read = g.gc[i].last_read.max(read_done);
            reclaimed += spp - live;
        }
        if self.groups[rg].gc[i].page >= ppb || self.m.blocks[v as usize].valid == 0 {
            assert_eq!(self.m.blocks[v as usize].valid, 0, "victim {v} still has valid sectors after collection");
            let c = self.groups[rg].gc.remove(i);
            assert_eq!(c.victim, v, "group {rg}: finished the wrong victim");
            if foreground {
                self.m.c.gc_foreground_events += 1;
            } else {
                self.m.c.gc_background_events += 1;
            }
            let t = c.last_read.max(self.now);
            self.erase(v, t);
            // The host write that needed this block waits for it (with a buffer it would
            // otherwise be acknowledged as if the collection took no time).
            if foreground && self.buffer.shares_gc() && self.m.timing() {
                self.buffer.hold(self.m.blocks[v as usize].ready_ns);
            }
        }
        Ok(reclaimed)
    }

    /// Read one page of block `v` and relocate its valid sectors to the GC stream its data
    /// belongs to; returns how many there were and when the read completed.
    fn relocate_page(&mut self, v: u32, page: u32) -> Result<(u64, u64)> {
        let lay = self.m.lay;
        let spp = lay.sectors_per_page;
        let base = v * lay.sectors_per_block + page * spp;
        // The L2P updates of a victim's sectors are independent cache misses: start those of
        // the page RELOCATION_AHEAD pages on while this one is relocated (the first page
        // starts the ones before it).
        if page == 0 {
            let n = RELOCATION_AHEAD.min(lay.pages_per_block - 1);
            self.map.prefetch_relocation(base + spp, n * spp);
        }
        if page + RELOCATION_AHEAD < lay.pages_per_block {
            self.map.prefetch_relocation(base + RELOCATION_AHEAD * spp, spp);
        }
        let live = self.map.valid_in(base, spp);
        debug_assert!(live <= self.m.blocks[v as usize].valid as u64, "block {v}: a page holds more valid sectors than the block");
        if live == 0 {
            return Ok((0, self.now));
        }
        let src = self.m.blocks[v as usize].stream as usize;
        let dest = self.points.streams[src].gc_dest;
        debug_assert_eq!(self.points.streams[dest].rg, self.m.blocks[v as usize].rg, "GC moves data across reclaim groups");
        self.points.stats[src].relocated_out_sectors += live;
        let read_done = self.m.read_queued(lay.die_of_block(v), live * lay.sector_bytes as u64, self.now);
        if self.m.timing() {
            let st = &mut self.points.streams[dest];
            st.ready_ns = st.ready_ns.max(read_done);
        }
        let was = std::mem::replace(&mut self.relocating, true);
        let moved = self.relocate_sectors(v, base, dest);
        self.relocating = was;
        moved?;
        // Relocations into a host stream (`gc_streams = "shared"`) fill its reclaim unit too.
        let st = &self.points.streams[dest];
        if let (true, Some(f)) = (st.host, self.fdp.as_mut()) {
            f.device_wrote(st.rg as usize, st.handle as usize, live);
        }
        Ok((live, read_done))
    }

    /// Move the valid sectors of the page at `base` (in victim `v`) to stream `dest`.
    fn relocate_sectors(&mut self, v: u32, base: u32, dest: usize) -> Result<()> {
        let spp = self.m.lay.sectors_per_page;
        let into_host = self.points.streams[dest].host;
        for psa in base..base + spp {
            let Some(lba) = self.map.valid_lba(psa) else { continue };
            // Place the new copy before letting go of the old one, so a device that cannot
            // open a block any more fails with its mapping intact.
            let (new, full) = self.place(dest, lba)?;
            self.map.release(psa);
            self.m.blocks[v as usize].valid -= 1;
            if let Some(d) = self.m.data.as_mut() {
                d.relocate(psa, new);
            }
            self.m.c.gc_relocated_sectors += 1;
            if into_host {
                self.points.streams[dest].relocated += 1;
            }
            if full {
                self.unit_placed(dest)?;
            }
        }
        Ok(())
    }

    /// Relocate every valid sector of full block `v` (already out of the victim set) and
    /// erase it (static wear-levelling moves).
    pub(super) fn collect(&mut self, v: u32) -> Result<()> {
        assert_eq!(self.m.blocks[v as usize].state, BlockState::Full, "wear-levelling move of block {v}, which is not full");
        self.m.blocks[v as usize].state = BlockState::Collecting;
        let mut last_read = self.now;
        for page in 0..self.m.lay.pages_per_block {
            if self.m.blocks[v as usize].valid == 0 {
                break;
            }
            last_read = last_read.max(self.relocate_page(v, page)?.1);
        }
        assert_eq!(self.m.blocks[v as usize].valid, 0, "block {v} still has valid sectors after its move");
        self.erase(v, last_read);
        Ok(())
    }
}
