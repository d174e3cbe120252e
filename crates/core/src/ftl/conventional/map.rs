//! The address mapping: logical-to-physical (L2P), the per-sector OOB logical address with a
//! valid bit (P2L), per-page program sequence numbers, and the rebuild of the L2P from the
//! OOB alone.
//!
//! Memory (metadata-only): 4 B of L2P per logical sector, 4 B of P2L per physical sector and a
//! 4 B sequence number per physical page: about 9.4 B per 4 KiB logical sector at 7% spare with
//! 16 KiB pages.

use serde::{Deserialize, Serialize};

use crate::media::mem::{self, prefetch};
use crate::media::{BlockMeta, Layout, OOB_ERASED, OOB_PAD, P2L_VALID};

/// L2P entry of a logical sector that holds nothing.
pub const UNMAPPED: u32 = u32::MAX;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Mapping {
    logical: u64,
    #[serde(deserialize_with = "mem::presized")]
    l2p: Vec<u32>,
    /// Per physical sector: OOB logical address (or OOB_PAD / OOB_ERASED) | P2L_VALID.
    #[serde(deserialize_with = "mem::presized")]
    p2l: Vec<u32>,
    /// Per physical page: program sequence number (0 = erased).
    #[serde(deserialize_with = "mem::presized")]
    page_seq: Vec<u32>,
    next_seq: u32,
    /// Logical sectors currently mapped.
    mapped: u64,
}

impl Mapping {
    pub fn new(lay: &Layout, logical: u64) -> Mapping {
        Mapping {
            logical,
            l2p: mem::filled(logical as usize, UNMAPPED),
            p2l: mem::filled(lay.physical_sectors as usize, OOB_ERASED),
            page_seq: mem::filled((lay.blocks as u64 * lay.pages_per_block as u64) as usize, 0),
            next_seq: 1,
            mapped: 0,
        }
    }

    #[inline(always)]
    pub fn logical(&self) -> u64 {
        self.logical
    }

    /// Logical sectors mapped (written and not trimmed since).
    #[inline(always)]
    pub fn mapped(&self) -> u64 {
        self.mapped
    }

    /// Where `lba` lives, or [`UNMAPPED`].
    #[inline(always)]
    pub fn lookup(&self, lba: u32) -> u32 {
        self.l2p[lba as usize]
    }

    /// A host write of `lba` begins: its current copy (to invalidate), if any; a sector not
    /// mapped before counts as newly mapped.
    #[inline(always)]
    pub fn overwrite(&mut self, lba: u32) -> Option<u32> {
        let old = self.l2p[lba as usize];
        if old == UNMAPPED {
            self.mapped += 1;
            debug_assert!(self.mapped <= self.logical, "more sectors mapped than the device has");
            None
        } else {
            debug_assert_eq!(self.p2l[old as usize], lba | P2L_VALID, "L2P/P2L disagree for sector {lba}");
            Some(old)
        }
    }

    /// Trim: forget `lba`; returns the copy to invalidate.
    #[inline]
    pub fn unmap(&mut self, lba: u32) -> Option<u32> {
        let old = std::mem::replace(&mut self.l2p[lba as usize], UNMAPPED);
        (old != UNMAPPED).then(|| {
            debug_assert_eq!(self.p2l[old as usize], lba | P2L_VALID, "L2P/P2L disagree for sector {lba}");
            self.mapped -= 1;
            old
        })
    }

    /// A host write of `lba` failed before its new copy was placed (the device is worn out):
    /// the sector holds nothing now (its old copy was already invalidated).
    pub fn forget(&mut self, lba: u32) {
        let old = std::mem::replace(&mut self.l2p[lba as usize], UNMAPPED);
        // The old copy's slot may hold another sector by now (GC ran while the write waited).
        debug_assert!(old == UNMAPPED || self.p2l[old as usize] != lba | P2L_VALID, "sector {lba}: old copy still valid");
        self.mapped -= 1;
    }

    /// `lba` now lives at `psa`, an erased sector (its OOB records `lba`).
    #[inline(always)]
    pub fn map(&mut self, lba: u32, psa: u32) {
        let old = std::mem::replace(&mut self.p2l[psa as usize], lba | P2L_VALID);
        assert_eq!(old, OOB_ERASED, "program of a non-erased sector {psa}");
        self.l2p[lba as usize] = psa;
    }

    /// The copy at `psa` is stale. A copy still in the write buffer (`buffered`: its page not
    /// programmed yet) becomes padding, so the media never holds a stale copy newer than the
    /// live one and the mapping rebuilds from OOB alone; a programmed one keeps its OOB.
    #[inline(always)]
    pub fn invalidate(&mut self, psa: u32, buffered: bool) {
        let v = &mut self.p2l[psa as usize];
        debug_assert!(*v & P2L_VALID != 0);
        *v = if buffered { OOB_PAD } else { *v & !P2L_VALID };
    }

    /// The logical address of the valid sector at `psa`, or None if it is not valid.
    #[inline(always)]
    pub fn valid_lba(&self, psa: u32) -> Option<u32> {
        let e = self.p2l[psa as usize];
        (e & P2L_VALID != 0).then_some(e & !P2L_VALID)
    }

    /// Relocation: the valid sector at `psa` now lives elsewhere (already mapped there); its
    /// old copy keeps its OOB address but is no longer valid.
    #[inline(always)]
    pub fn release(&mut self, psa: u32) {
        debug_assert!(self.p2l[psa as usize] & P2L_VALID != 0);
        self.p2l[psa as usize] &= !P2L_VALID;
    }

    /// Valid sectors in `psa..psa + n`.
    #[inline]
    pub fn valid_in(&self, psa: u32, n: u32) -> u64 {
        self.p2l[psa as usize..(psa + n) as usize].iter().filter(|&&e| e & P2L_VALID != 0).count() as u64
    }

    /// The erased sector `psa` is programmed as padding.
    #[inline]
    pub fn pad(&mut self, psa: u32) {
        let old = std::mem::replace(&mut self.p2l[psa as usize], OOB_PAD);
        assert_eq!(old, OOB_ERASED, "padding over a non-erased sector {psa}");
    }

    /// Make room for `n` more sequence numbers (renumbering densely, order kept, when the
    /// counter nears its 32-bit limit: once per 4 G page programs).
    #[inline]
    pub fn reserve_seq(&mut self, n: u32) {
        if self.next_seq > u32::MAX - n - 1 {
            let mut live: Vec<(u32, u32)> =
                self.page_seq.iter().enumerate().filter(|(_, &s)| s != 0).map(|(i, &s)| (s, i as u32)).collect();
            live.sort_unstable();
            for (rank, &(_, page)) in live.iter().enumerate() {
                self.page_seq[page as usize] = rank as u32 + 1;
            }
            self.next_seq = live.len() as u32 + 1;
            assert!(self.next_seq < u32::MAX - n, "renumbering left no room: more live pages than sequence numbers");
        }
    }

    /// Page `page` (global page number) is programmed now: its OOB gets the next sequence
    /// number. Call [`Self::reserve_seq`] first.
    #[inline(always)]
    pub fn stamp(&mut self, page: u32) {
        debug_assert_eq!(self.page_seq[page as usize], 0, "page {page} programmed twice without an erase");
        debug_assert!(self.next_seq < u32::MAX, "stamp without reserve_seq");
        self.page_seq[page as usize] = self.next_seq;
        self.next_seq += 1;
    }

    /// Whether global page `page` is programmed (not erased, not only in the write buffer).
    #[inline(always)]
    pub fn programmed(&self, page: u32) -> bool {
        self.page_seq[page as usize] != 0
    }

    /// Block `b` was erased: its OOB reads as erased.
    pub fn erase(&mut self, lay: &Layout, b: u32) {
        let spb = lay.sectors_per_block as usize;
        let ppb = lay.pages_per_block as usize;
        debug_assert!(self.valid_in(b * lay.sectors_per_block, lay.sectors_per_block) == 0, "erase of block {b} with valid sectors");
        self.p2l[b as usize * spb..(b as usize + 1) * spb].fill(OOB_ERASED);
        self.page_seq[b as usize * ppb..(b as usize + 1) * ppb].fill(0);
    }

    /// Software prefetch of what a write of `lba` will touch: stage 1 its L2P entry, stage 2
    /// (issued later, when that entry is cached) the P2L entry and block of the copy it will
    /// invalidate. Random-write throughput is bound by these cache misses.
    #[inline]
    pub fn prefetch(&self, lba: u64, stage: u8, blocks: &[BlockMeta], spb: u32) {
        if lba >= self.logical {
            return;
        }
        if stage == 1 {
            prefetch(&self.l2p[lba as usize]);
        } else {
            let psa = self.l2p[lba as usize];
            if psa != UNMAPPED {
                prefetch(&self.p2l[psa as usize]);
                prefetch(&blocks[(psa / spb) as usize]);
            }
        }
    }

    /// Software prefetch of what a read of `lba` touches after its L2P entry (stage 1 of
    /// [`prefetch`](Self::prefetch)): whether its page is programmed yet.
    #[inline]
    pub fn prefetch_read(&self, lba: u64, spp: u32) {
        if lba < self.logical {
            let psa = self.l2p[lba as usize];
            if psa != UNMAPPED {
                prefetch(&self.page_seq[(psa / spp) as usize]);
            }
        }
    }

    /// Relocation of a page: the L2P updates of its sectors are independent cache misses, so
    /// start those of the sectors at `psa..psa + n` (the next page) early.
    #[inline]
    pub fn prefetch_relocation(&self, psa: u32, n: u32) {
        for &e in &self.p2l[psa as usize..(psa + n) as usize] {
            if e & P2L_VALID != 0 {
                prefetch(&self.l2p[(e & !P2L_VALID) as usize]);
            }
        }
    }

    /// Rebuild the logical-to-physical map from the media alone (per-sector OOB logical
    /// addresses and per-page sequence numbers): the newest copy of each address wins (newest
    /// sequence number, then later slot). Trims are not recorded on the media; a host that
    /// needs them across a rebuild journals them (the NBD server does).
    pub fn rebuild_from_oob(&self, spp: u32) -> Vec<u32> {
        let mut l2p = mem::filled(self.logical as usize, UNMAPPED);
        for page in 0..self.page_seq.len() as u32 {
            let seq = self.page_seq[page as usize];
            if seq == 0 {
                continue;
            }
            debug_assert!(seq < self.next_seq, "page {page}: sequence number {seq} not handed out yet");
            for slot in 0..spp {
                let psa = page * spp + slot;
                let lba = self.p2l[psa as usize] & !P2L_VALID;
                if lba == OOB_PAD || lba == OOB_ERASED {
                    continue;
                }
                let cur = l2p[lba as usize];
                let newer = cur == UNMAPPED || {
                    let cs = self.page_seq[(cur / spp) as usize];
                    (seq, slot) > (cs, cur % spp)
                };
                if newer {
                    l2p[lba as usize] = psa;
                }
            }
        }
        l2p
    }

    /// The live logical-to-physical map.
    pub fn l2p(&self) -> &[u32] {
        &self.l2p
    }

    /// Bytes of simulator memory the maps take.
    pub fn bytes(&self) -> u64 {
        (self.l2p.len() * 4 + self.p2l.len() * 4 + self.page_seq.len() * 4) as u64
    }

    /// Bytes the maps of a device of `lay` with `logical` sectors take.
    pub fn bytes_of(lay: &Layout, logical: u64) -> u64 {
        logical * 4 + lay.physical_sectors * 4 + lay.blocks as u64 * lay.pages_per_block as u64 * 4
    }

    /// Assert the mapping's invariants against the blocks: L2P and P2L agree, the valid count
    /// of each block equals the sectors mapped to it, the mapped count and the valid bits agree.
    pub fn check(&self, lay: &Layout, blocks: &[BlockMeta]) {
        let spb = lay.sectors_per_block;
        let mut valid = vec![0u32; blocks.len()];
        let mut mapped = 0u64;
        for (lba, &psa) in self.l2p.iter().enumerate() {
            if psa != UNMAPPED {
                assert_eq!(self.p2l[psa as usize], lba as u32 | P2L_VALID, "L2P/P2L disagree for sector {lba}");
                valid[(psa / spb) as usize] += 1;
                mapped += 1;
            }
        }
        assert_eq!(mapped, self.mapped, "mapped-sector count drifted");
        let valid_bits = self.p2l.iter().filter(|&&e| e & P2L_VALID != 0).count() as u64;
        assert_eq!(valid_bits, mapped, "valid bits != mapped sectors");
        for (b, m) in blocks.iter().enumerate() {
            assert_eq!(m.valid, valid[b], "block {b}: valid count {} but {} sectors map to it", m.valid, valid[b]);
        }
    }

    /// Programmed pages of block `b` (by sequence number), for the in-order invariants.
    pub fn block_pages<'a>(&'a self, lay: &Layout, b: u32) -> &'a [u32] {
        let ppb = lay.pages_per_block as usize;
        &self.page_seq[b as usize * ppb..(b as usize + 1) * ppb]
    }

    /// Whether every sector of block `b` reads as erased.
    pub fn block_erased(&self, lay: &Layout, b: u32) -> bool {
        let spb = lay.sectors_per_block as usize;
        self.p2l[b as usize * spb..(b as usize + 1) * spb].iter().all(|&e| e == OOB_ERASED)
    }
}
