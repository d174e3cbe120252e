//! The write path: placing sectors at a stream's write point, programming full units,
//! opening blocks for a way (with foreground GC when free blocks run short), closing full
//! blocks into the victim set, and padding partial units.

use std::cmp::Reverse;

use super::Conventional;
use crate::error::{Error, Result};
use crate::media::BlockState;

impl Conventional {
    /// Serial number of the reclaim unit stream `s` is filling (FDP host streams; 0 otherwise).
    fn ru_serial_of(&self, s: usize) -> u32 {
        let st = &self.points.streams[s];
        match &self.fdp {
            Some(f) if st.host => f.ru_serial(st.rg as usize, st.handle as usize),
            _ => 0,
        }
    }

    /// Foreground GC: collect whole victims of group `rg` until it has `target` free blocks
    /// (a host write waits for it).
    #[cold]
    #[inline(never)]
    fn gc_foreground(&mut self, rg: usize, target: u32) -> Result<()> {
        let mut rounds = 0u64;
        while self.groups[rg].free < target {
            self.gc_one(rg, true)?;
            rounds += 1;
            if rounds > 2 * self.m.lay.blocks as u64 {
                return Err(Error::WornOut(format!(
                    "garbage collection cannot reclaim space in reclaim group {rg} ({} free blocks, {} mapped sectors)",
                    self.groups[rg].free,
                    self.map.mapped()
                )));
            }
        }
        Ok(())
    }

    /// Host data is about to go into a way of stream `s` that GC opened (the stream takes its
    /// own relocations, `gc_streams = "shared"`): GC opens ways without the foreground check
    /// (GC cannot wait for GC), so the host does it now, once per way, as host streams of the
    /// other modes do when they open a way (against the watermark alone: the way's blocks are
    /// already taken). GC may move the stream on to another way GC opened: that one too.
    #[cold]
    #[inline(never)]
    fn gc_foreground_shared(&mut self, s: usize) -> Result<()> {
        let rg = self.points.streams[s].rg as usize;
        loop {
            while !self.points.ready(s) {
                let cur = self.points.streams[s].cur;
                self.open_way(s, cur)?;
            }
            let st = &mut self.points.streams[s];
            let cur = st.cur;
            if st.ways[cur].host_checked {
                return Ok(());
            }
            st.ways[cur].host_checked = true;
            if !self.wl.active {
                self.gc_foreground(rg, self.groups[rg].fg_free_blocks)?;
            }
        }
    }

    /// Open one block per plane for `way` of `stream`, from its die if it can.
    #[cold]
    #[inline(never)]
    pub(super) fn open_way(&mut self, s: usize, w: usize) -> Result<()> {
        let planes = self.m.lay.planes_per_die as usize;
        let rg = self.points.streams[s].rg as usize;
        // Relocations into a host stream (`gc_streams = "shared"`) come from GC itself.
        let host = self.points.streams[s].host && !self.relocating;
        if host && !self.wl.active {
            self.gc_foreground(rg, self.groups[rg].fg_free_blocks + planes as u32)?;
            // GC may have relocated into this very stream (`gc_streams = "shared"`) and opened
            // its current way or moved it on: the caller looks again.
            if self.points.streams[s].cur != w || self.points.ready(s) {
                return Ok(());
            }
        }
        if self.groups[rg].free < planes as u32 {
            return Err(Error::WornOut(format!(
                "{} free blocks left in reclaim group {rg}, {planes} needed to open a write point",
                self.groups[rg].free
            )));
        }
        // One block per plane from the way's own die when it has them; otherwise from the dies
        // of the group with the most free blocks (GC frees blocks wherever its victims were, so
        // dies drift apart). A unit whose blocks sit on several dies programs on each of them.
        let pref = self.points.streams[s].ways[w].die;
        let ru = self.ru_serial_of(s);
        let mut opened = Vec::with_capacity(planes);
        while opened.len() < planes {
            let die = if self.pools.len(pref) > 0 {
                pref
            } else {
                let g = &self.groups[rg];
                g.dies.iter().copied().max_by_key(|&d| (self.pools.len(d), Reverse(d))).expect("group has dies")
            };
            let b = self.pools.pop(die).expect("the group has free blocks");
            let m = &mut self.m.blocks[b as usize];
            assert_eq!(m.state, BlockState::Free, "pooled block {b} is not free");
            assert_eq!(m.valid, 0, "free block {b} holds valid sectors");
            assert_eq!(m.rg as usize, rg, "a way opens blocks of its own reclaim group only");
            debug_assert_eq!(m.programmed_pages, 0, "free block {b} has programmed pages");
            m.state = BlockState::Open;
            m.stream = s as u16;
            m.ru = ru;
            m.programmed_pages = 0;
            opened.push(b);
        }
        self.groups[rg].free -= planes as u32;
        self.groups[rg].open_blocks += planes as u32;
        self.points.open(s, w, opened, host);
        Ok(())
    }

    /// Place one sector of `lba` on stream `s` and map it; returns its new PSA and whether it
    /// completed the unit. The caller stores the sector's data (if any) and then calls
    /// [`Self::unit_placed`] when the unit is complete, so data is in place before the unit is
    /// programmed and before GC (which may pick this very block) runs.
    #[inline(always)]
    pub(super) fn place(&mut self, s: usize, lba: u32) -> Result<(u32, bool)> {
        let st = &self.points.streams[s];
        if st.gc_dest == s && st.host && !self.relocating && !st.ways[st.cur].host_checked {
            self.gc_foreground_shared(s)?;
        }
        while !self.points.ready(s) {
            let cur = self.points.streams[s].cur;
            self.open_way(s, cur)?;
        }
        let (psa, b, full) = self.points.next_slot(s, &self.m.lay);
        self.map.map(lba, psa);
        let m = &mut self.m.blocks[b as usize];
        debug_assert_eq!(m.state, BlockState::Open, "sector placed in block {b}, which is not open");
        m.valid += 1;
        debug_assert!(m.valid <= self.m.lay.sectors_per_block, "block {b}: more valid sectors than it has");
        Ok((psa, full))
    }

    /// Program stream `s`'s completed unit; for host units a host write completed, pace GC.
    pub(super) fn unit_placed(&mut self, s: usize) -> Result<()> {
        debug_assert!(self.points.unit_full(s, &self.m.lay), "stream {s}: programming a unit that is not full");
        let host = self.program_unit(s, 0);
        // Pace GC with host writes: below the background watermark, every programmed host
        // unit pays for some collection, so free space rarely falls to the foreground
        // watermark (where a host write waits for whole-block collections). A unit that a
        // relocation completed (`gc_streams = "shared"`) does not: GC does not pace itself.
        let rg = self.points.streams[s].rg as usize;
        if host && !self.wl.active && !self.relocating && self.gc_short(rg) {
            self.gc_paced(rg)?;
        }
        Ok(())
    }

    /// The copy at `psa` is stale (overwritten or trimmed). A copy still in the write buffer
    /// (its page not yet programmed) is dropped from the buffer: its slot programs as padding.
    #[inline]
    pub(super) fn invalidate(&mut self, psa: u32) {
        let lay = &self.m.lay;
        let b = psa / lay.sectors_per_block;
        let page_in_block = (psa - b * lay.sectors_per_block) / lay.sectors_per_page;
        let m = &mut self.m.blocks[b as usize];
        debug_assert!(m.valid > 0, "stale copy in block {b}, which counts no valid sector");
        debug_assert!(
            matches!(m.state, BlockState::Open | BlockState::Full | BlockState::Collecting),
            "live copy in a {:?} block",
            m.state
        );
        m.valid -= 1;
        let buffered = m.state == BlockState::Open && page_in_block >= m.programmed_pages as u32;
        self.map.invalidate(psa, buffered);
        if m.state == BlockState::Full {
            let rg = m.rg as usize;
            self.groups[rg].victims.on_invalidate(b, &mut self.m.blocks);
        }
        if let Some(d) = self.m.data.as_mut() {
            d.discard(psa);
        }
    }

    /// Program the current (full) unit of stream `s`, `padded` sectors of it padding, and
    /// advance the stream. Returns whether it was a host unit: one of a host stream holding
    /// host data (not only relocations and padding).
    pub(super) fn program_unit(&mut self, s: usize, padded: u32) -> bool {
        let lay = self.m.lay;
        let planes = lay.planes_per_die;
        let spp = lay.sectors_per_page;
        let (cur, host_stream, rg) = {
            let st = &self.points.streams[s];
            (st.cur, st.host, st.rg as usize)
        };
        let relocated = std::mem::take(&mut self.points.streams[s].relocated);
        debug_assert!(relocated + padded <= spp * planes, "stream {s}: a unit holds more relocated and padded sectors than it has");
        debug_assert!(
            relocated == 0 || self.points.streams[s].gc_dest == s,
            "stream {s}: relocations in a stream that is not their GC stream"
        );
        let host = host_stream && relocated + padded < spp * planes;
        let page = self.points.streams[s].ways[cur].page;
        debug_assert!(page < lay.pages_per_block, "stream {s}: write point past the end of its blocks");
        self.map.reserve_seq(planes);
        self.groups[rg].open_written_pages += planes as u64;
        self.points.stats[s].units_programmed += 1;
        if !host_stream {
            self.m.c.gc_relocated_pages += planes as u64;
        } else if relocated > 0 {
            // Relocations mixed into host units (`gc_streams = "shared"`) count as the whole
            // pages their sectors fill, the rest carried to the next unit.
            let carry = self.points.relocated_carry + relocated;
            self.m.c.gc_relocated_pages += (carry / spp) as u64;
            self.points.relocated_carry = carry % spp;
        }
        let way = &self.points.streams[s].ways[cur];
        let mut earliest = self.points.streams[s].ready_ns;
        for &b in &way.blocks {
            self.map.stamp(b * lay.pages_per_block + page);
            let m = &mut self.m.blocks[b as usize];
            debug_assert_eq!(m.programmed_pages as u32, page, "block {b}: pages program in order");
            debug_assert_eq!(m.state, BlockState::Open, "program of block {b}, which is not open");
            m.programmed_pages = (page + 1) as u16;
            earliest = earliest.max(m.ready_ns);
        }
        let timing = self.m.timing();
        // A buffer shared with GC: every unit takes a slot before its program starts.
        if timing && self.buffer.shares_gc() {
            earliest = earliest.max(self.buffer.admit(host));
        }
        // One multi-plane program per die the unit spans (normally exactly one).
        let mut done = earliest;
        let mut i = 0;
        while i < way.blocks.len() {
            let die = lay.die_of_block(way.blocks[i]);
            let mut j = i + 1;
            while j < way.blocks.len() && lay.die_of_block(way.blocks[j]) == die {
                j += 1;
            }
            done = done.max(self.m.program(die, (j - i) as u32, earliest));
            i = j;
        }
        if host {
            if timing {
                self.buffer.programmed(done);
            }
            // The space GC cannot use, sampled once per host unit: its mean is the spare the
            // FTL really leaves to data (metrics.json's `spare` section).
            let ppb = lay.pages_per_block;
            self.reserved.0 += self.groups.iter().map(|g| g.reserved_pages(ppb)).sum::<u64>();
            self.reserved.1 += 1;
        } else if timing && self.buffer.shares_gc() {
            self.buffer.relocated(done);
        }
        // The next unit waits for its own data: a GC stream's is read later; a host command's
        // later units are as ready as its first (its arrival plus the command overhead, and
        // its data's time on the host link when that is modelled).
        self.points.streams[s].ready_ns =
            if host_stream && timing { (self.now + self.m.tl.command_overhead_ns()).max(self.buffer.begun()) } else { 0 };
        if let Some(w) = self.points.unit_done(s, lay.pages_per_block) {
            self.close_way(s, w);
        }
        host
    }

    /// The blocks of way `w` of stream `s` become full (all pages programmed, or fewer when a
    /// reclaim unit handle update closes them early) and join their group's victim set.
    pub(super) fn close_way(&mut self, s: usize, w: usize) {
        let mut closed = self.points.take_blocks(s, w);
        for &b in &closed {
            let m = &mut self.m.blocks[b as usize];
            assert_eq!(m.state, BlockState::Open, "closing block {b}, which is not open");
            assert!(m.programmed_pages > 0, "closing block {b} with nothing programmed");
            m.state = BlockState::Full;
            m.closed_at = self.host_clock;
            let rg = m.rg as usize;
            self.groups[rg].open_written_pages -= m.programmed_pages as u64;
            self.groups[rg].open_blocks -= 1;
            self.groups[rg].victims.insert(b, &mut self.m.blocks);
        }
        // Hand the vector back: ways keep their capacity for the next blocks.
        closed.clear();
        self.points.streams[s].ways[w].blocks = closed;
    }

    /// End stream `s`'s current reclaim unit: program its partial unit with padding and close
    /// its open blocks, so the next write starts a new reclaim unit (FDP reclaim unit handle
    /// update).
    pub(super) fn end_reclaim_unit(&mut self, s: usize) {
        self.pad(s);
        for w in 0..self.points.streams[s].ways.len() {
            if !self.points.streams[s].ways[w].blocks.is_empty() {
                self.close_way(s, w);
            }
        }
        assert!(
            self.points.streams[s].ways.iter().all(|w| w.blocks.is_empty()),
            "stream {s}: a block left open at the end of its reclaim unit"
        );
        self.points.streams[s].cur = 0;
    }

    /// Fill the rest of stream `s`'s partial unit with padding and program it.
    pub(super) fn pad(&mut self, s: usize) {
        let map = &mut self.map;
        let n = self.points.pad_unit(s, &self.m.lay, |psa| map.pad(psa));
        if n > 0 {
            self.m.c.pad_sectors += n as u64;
            self.program_unit(s, n);
        }
        debug_assert!(!self.points.partial(s), "stream {s}: a partial unit left after padding");
    }
}
