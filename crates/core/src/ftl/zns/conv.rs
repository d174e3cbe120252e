//! The conventional zones of a zoned device: a second, small FTL (`ConvArea`) that maps them
//! page by page onto a pool of hidden zones written as a log, with its own greedy GC.

use serde::{Deserialize, Serialize};

use super::{Zns, NIL};
use crate::error::{Error, Result};
use crate::ftl::victim::greedy;

/// A segment of the conventional zones' pool: one zone's worth of blocks, written as a log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Segment {
    pub(super) written: u64,
    pub(super) valid: u64,
    pub(super) ready_ns: u64,
    /// One of its blocks is bad (from the factory, or retired by an erase): never used again.
    pub(super) offline: bool,
}

/// Conventional zones, mapped page by page onto a pool of hidden zones (segments) written as a
/// log, with greedy garbage collection of whole segments: a small conventional FTL inside the
/// zoned device, so random writes there cost what they cost on flash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvArea {
    /// First physical zone of the pool.
    pub(super) base: usize,
    pub(super) segs: Vec<Segment>,
    /// Conventional LBA -> pool sector (segment * zone size + offset).
    pub(super) l2p: Vec<u32>,
    /// Pool sector -> conventional LBA.
    pub(super) p2l: Vec<u32>,
    pub(super) active: usize,
    /// Erased segments, least recently erased first.
    pub(super) free: std::collections::VecDeque<usize>,
    pub(super) gc_segments: u64,
}

impl ConvArea {
    /// The pool behind `nconv` conventional zones with `spare` spare segments, starting at
    /// physical zone `base`; without `allocate`, no per-sector maps.
    pub(super) fn new(base: usize, nconv: usize, spare: usize, zone_sectors: u64, allocate: bool) -> ConvArea {
        ConvArea {
            base,
            segs: vec![Segment::default(); nconv + spare],
            l2p: if allocate { vec![NIL; nconv * zone_sectors as usize] } else { vec![] },
            p2l: if allocate { vec![NIL; (nconv + spare) * zone_sectors as usize] } else { vec![] },
            active: 0,
            free: (1..nconv + spare).collect(),
            gc_segments: 0,
        }
    }
}

impl Zns {
    /// Sectors of the conventional zones (they come first in the LBA space).
    pub(super) fn conv_sectors(&self) -> u64 {
        self.nconv as u64 * self.zone_sectors
    }

    /// Write to the conventional zones: each sector goes to the pool's log, its old copy
    /// becomes invalid.
    pub(super) fn conv_write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, fua: bool, now: u64) -> Result<u64> {
        let sb = self.m.lay.sector_bytes as usize;
        if let (Some(d), true) = (data, self.m.data.is_some()) {
            if d.len() != sectors as usize * sb {
                return Err(Error::Command(format!("write of {sectors} sectors carries {} bytes", d.len())));
            }
        }
        let t = now + self.m.tl.command_overhead_ns();
        self.buffer.begin(t);
        for i in 0..sectors as usize {
            self.conv_put(lba + i as u64, data.map(|d| &d[i * sb..(i + 1) * sb]), t)?;
        }
        self.m.c.host_write_cmds += 1;
        self.m.c.host_write_bytes += sectors as u64 * sb as u64;
        let sync = fua || self.buffer.write_through();
        if sync {
            self.conv_pad();
        }
        Ok(if self.m.tl.enabled { self.buffer.completion(sync, t) } else { now })
    }

    /// Drop the mapping of conventional LBA `l`, if any.
    pub(super) fn conv_unmap(&mut self, l: u64) {
        let zs = self.zone_sectors;
        let Some(conv) = self.conv.as_mut() else { return };
        let old = std::mem::replace(&mut conv.l2p[l as usize], NIL);
        if old != NIL {
            debug_assert_eq!(conv.p2l[old as usize], l as u32, "conventional LBA {l}: pool maps disagree");
            conv.p2l[old as usize] = NIL;
            let seg = (old as u64 / zs) as usize;
            debug_assert!(conv.segs[seg].valid > 0, "segment {seg} counts no valid sector but maps {l}");
            conv.segs[seg].valid -= 1;
            let pz = conv.base + seg;
            let psa = self.psa(pz, old as u64 % zs);
            self.m.blocks[(psa / self.m.lay.sectors_per_block) as usize].valid -= 1;
        }
    }

    /// Append conventional LBA `l` (its data, if kept) to the pool's log.
    fn conv_put(&mut self, l: u64, data: Option<&[u8]>, t: u64) -> Result<()> {
        self.conv_unmap(l);
        let conv = self.conv.as_ref().expect("conventional zones");
        if conv.segs[conv.active].written == self.zone_sectors {
            self.conv_next_segment(t)?;
        }
        let conv = self.conv.as_ref().expect("conventional zones");
        debug_assert!(conv.segs[conv.active].written < self.zone_sectors, "the active segment has room");
        self.conv_append(l, data, t);
        Ok(())
    }

    /// Append one sector at the active segment's end (which has room).
    fn conv_append(&mut self, l: u64, data: Option<&[u8]>, t: u64) {
        let zs = self.zone_sectors;
        let unit = self.unit_sectors();
        let conv = self.conv.as_mut().expect("conventional zones");
        let seg = conv.active;
        let o = conv.segs[seg].written;
        let pool = seg as u64 * zs + o;
        debug_assert_eq!(conv.p2l[pool as usize], NIL, "pool sector {pool} written twice without an erase");
        debug_assert!(!conv.segs[seg].offline, "append to offline segment {seg}");
        conv.l2p[l as usize] = pool as u32;
        conv.p2l[pool as usize] = l as u32;
        conv.segs[seg].written += 1;
        conv.segs[seg].valid += 1;
        conv.segs[seg].ready_ns = conv.segs[seg].ready_ns.max(t);
        let (pz, ready) = (conv.base + seg, conv.segs[seg].ready_ns);
        let psa = self.psa(pz, o);
        if let (Some(store), Some(d)) = (self.m.data.as_mut(), data) {
            store.put(psa, d);
        }
        self.m.blocks[(psa / self.m.lay.sectors_per_block) as usize].valid += 1;
        if (o + 1).is_multiple_of(unit) {
            self.program_phys(pz, o + 1, ready);
            self.conv.as_mut().unwrap().segs[seg].ready_ns = 0;
        }
    }

    /// Pad and program the active segment's partial unit (FUA, flush): the padding is
    /// flash the log cannot use until the segment is collected.
    pub(super) fn conv_pad(&mut self) {
        let unit = self.unit_sectors();
        let Some(conv) = self.conv.as_mut() else { return };
        let seg = conv.active;
        let w = conv.segs[seg].written;
        if w % unit != 0 {
            let end = (w / unit + 1) * unit;
            debug_assert!(end <= self.zone_sectors, "padding past segment {seg}'s end");
            conv.segs[seg].written = end;
            let (pz, ready) = (conv.base + seg, conv.segs[seg].ready_ns);
            conv.segs[seg].ready_ns = 0;
            self.m.c.pad_sectors += end - w;
            self.program_phys(pz, end, ready);
        }
    }

    /// The active segment is full: continue in the oldest erased one, and if that was the
    /// last, collect the segment with the least valid data into it (greedy) and erase it.
    /// With at least two spare segments the victim's valid data always fits.
    fn conv_next_segment(&mut self, t: u64) -> Result<()> {
        let zs = self.zone_sectors;
        let conv = self.conv.as_mut().expect("conventional zones");
        conv.active = conv
            .free
            .pop_front()
            .ok_or_else(|| Error::WornOut("the conventional zones' pool has no erased segment left: its blocks wore out".into()))?;
        let next = &conv.segs[conv.active];
        assert!(next.written == 0 && next.valid == 0 && !next.offline, "segment {} from the free list is not erased", conv.active);
        if !conv.free.is_empty() {
            return Ok(());
        }
        let active = conv.active;
        let victim = greedy((0..conv.segs.len()).filter(|&s| s != active && !conv.segs[s].offline), |s| conv.segs[s].valid)
            .expect("pool has segments");
        assert!(conv.segs[victim].valid <= zs, "segment {victim}: more valid sectors than it has");
        conv.gc_segments += 1;
        let base = conv.base;
        self.m.c.gc_events += 1;
        let mut last_page = u32::MAX;
        let mut buf = if self.m.data.is_some() { vec![0u8; self.m.lay.sector_bytes as usize] } else { vec![] };
        let programs_before = self.m.c.nand_page_programs;
        for o in 0..zs {
            let pool = victim as u64 * zs + o;
            let l = self.conv.as_ref().unwrap().p2l[pool as usize];
            if l == NIL {
                continue;
            }
            let psa = self.psa(base + victim, o);
            let page = psa / self.m.lay.sectors_per_page;
            if page != last_page {
                last_page = page;
                let die = self.m.lay.die_of_block(psa / self.m.lay.sectors_per_block);
                let r = self.m.read_queued(die, self.m.lay.page_bytes as u64, t);
                if self.m.timing() {
                    let conv = self.conv.as_mut().unwrap();
                    conv.segs[conv.active].ready_ns = conv.segs[conv.active].ready_ns.max(r);
                }
            }
            if let Some(store) = self.m.data.as_ref() {
                store.get(psa, &mut buf);
            }
            self.conv_unmap(l as u64);
            self.conv_append(l as u64, if self.m.data.is_some() { Some(&buf) } else { None }, t);
            self.m.c.gc_relocated_sectors += 1;
        }
        // The pages the relocation programmed (the pool's log programs a page as it fills).
        self.m.c.gc_relocated_pages += self.m.c.nand_page_programs - programs_before;
        let conv = self.conv.as_ref().unwrap();
        assert_eq!(conv.segs[victim].valid, 0, "segment {victim} still holds valid sectors after its collection");
        assert!(conv.segs[conv.active].written <= zs, "the victim's valid data fits in the erased segment");
        let (_, retired) = self.erase_phys(base + victim, t);
        let conv = self.conv.as_mut().unwrap();
        conv.segs[victim] = Segment { offline: retired, ..Segment::default() };
        if !retired {
            conv.free.push_back(victim);
        }
        Ok(())
    }

    /// The conventional area's invariants: the pool maps agree, valid counts match, a spare
    /// erased segment, offline segments exactly those with bad blocks.
    pub(super) fn check_conv_invariants(&self) {
        let Some(conv) = &self.conv else { return };
        let zs = self.zone_sectors;
        let mut valid = vec![0u64; conv.segs.len()];
        for (l, &pool) in conv.l2p.iter().enumerate() {
            if pool != NIL {
                assert_eq!(conv.p2l[pool as usize] as usize, l, "conventional LBA {l}: pool map disagrees");
                assert!(
                    pool as u64 % zs < conv.segs[(pool as u64 / zs) as usize].written,
                    "conventional LBA {l} maps past its segment's end"
                );
                valid[(pool as u64 / zs) as usize] += 1;
            }
        }
        for (k, seg) in conv.segs.iter().enumerate() {
            assert_eq!(seg.valid, valid[k], "segment {k} valid count");
        }
        assert!(!conv.free.contains(&conv.active), "the active segment is not free");
        // An erased segment besides the active one, unless wear-out took the pool's spare.
        assert!(!conv.free.is_empty() || conv.segs.iter().any(|g| g.offline), "the pool keeps an erased segment besides the active one");
        for (k, seg) in conv.segs.iter().enumerate() {
            let bad = self.phys_blocks(conv.base + k).any(|b| self.m.is_bad(b));
            assert_eq!(seg.offline, bad, "segment {k}: offline iff it holds a bad block");
            assert!(!(seg.offline && conv.free.contains(&k)), "offline segment {k} in the free list");
        }
    }
}
