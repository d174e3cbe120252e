//! The conventional FTL: page-level (sector-level) mapping, striped write points, garbage
//! collection with pluggable victim policies, TRIM, dynamic and static wear-levelling, an
//! optional write-back buffer, and FDP placement.
//!
//! It is split the way MQSim splits its FTL (address mapping, block management, GC and
//! wear-levelling), one concern per file:
//! - `map.rs`: the mapping (L2P, P2L with the OOB logical address, sequence numbers, rebuild);
//! - `streams.rs`: write points (streams of ways of open blocks);
//! - `pools.rs`: free blocks per die, and the static wear-levelling schedule;
//! - `groups.rs`: reclaim groups (free counts, watermarks, victim sets, victims in progress);
//! - `write.rs`: the write path (placing sectors, programming units, opening, closing and
//!   padding blocks);
//! - `gc.rs`: garbage collection (pacing, picks, relocation);
//! - `wear.rs`: erases, retirement and static wear-levelling;
//! - `invariants.rs`: what tests assert after every step;
//! - `report.rs`: the FDP host commands and the `fdp` section of metrics.json.
//!
//! FDP placement is a component of its own (`ftl/fdp.rs`) that this FTL calls; the NAND
//! (blocks, timelines, contents, counters, wear-out) is the shared [`Media`].

mod gc;
mod groups;
mod invariants;
mod map;
mod pools;
mod report;
mod streams;
mod wear;
mod write;

use serde::{Deserialize, Serialize};

use super::fdp::{self, Fdp};
use super::victim::Victims;
use super::{BlockDevice, WriteOpts};
use crate::analytic::effective_spare;
use crate::config::Config;
use crate::engine::WriteBuffer;
use crate::error::{Error, Result};
use crate::ftl::sizing::Sizing;
use crate::media::{BlockMeta, BlockState, Media, NIL, OOB_PAD};
use groups::Group;
use map::{Mapping, UNMAPPED};
use pools::{FreePools, StaticWl};
use streams::{StreamPlan, WritePoints};
pub use streams::{StreamStats, SHARED};

/// The default host stream (reclaim group 0, placement handle 0).
pub const HOST: usize = 0;

/// What formatting decides from the config and the good blocks: the logical capacity, the
/// reclaim groups, the write points and FDP, checked against the spare they need.
struct Parts {
    logical: u64,
    rg_of_die: Vec<u8>,
    groups: Vec<Group>,
    points: WritePoints,
    fdp: Option<Fdp>,
    reserve_blocks: u64,
    reserve_steady_blocks: f64,
    spare_blocks: f64,
}

/// Blocks the FTL holds back in steady state (see `Group::reserve_steady_blocks`).
fn reserve_steady(groups: &[Group], points: &WritePoints, planes: u32) -> f64 {
    let open = points.open_blocks_max(planes) as f64 / groups.len() as f64;
    groups.iter().map(|g| g.reserve_steady_blocks(open as u64)).sum()
}

impl Parts {
    fn of(cfg: &Config, good: u64) -> Result<Parts> {
        let lay = crate::media::Layout::new(&cfg.geometry);
        let physical = good * lay.sectors_per_block as u64;
        let logical = (physical as f64 * (1.0 - cfg.ftl.spare_factor)).floor() as u64;
        if logical >= OOB_PAD as u64 - 1 {
            return Err(Error::config(
                "geometry.blocks_per_plane",
                format!("{logical} logical sectors exceed the supported 2^31 - 2; use larger sector_bytes"),
            ));
        }
        let planes = lay.planes_per_die;
        let fdp_on = cfg.fdp.enabled;
        let fdp_cfg = cfg.fdp.active();
        let ngroups = if fdp_on { fdp_cfg.reclaim_groups } else { 1 };
        let nhandles = if fdp_on { fdp_cfg.handles } else { 1 };
        let rg_of_die = fdp::reclaim_group_of_dies(&lay, ngroups);
        let group_dies: Vec<Vec<u32>> =
            (0..ngroups).map(|g| lay.way_order().into_iter().filter(|&d| rg_of_die[d as usize] as u32 == g).collect()).collect();
        let ways =
            |dies: &Vec<u32>| if cfg.ftl.write_point_dies == 0 { dies.len() } else { (cfg.ftl.write_point_dies as usize).min(dies.len()) };
        let groups: Vec<Group> = group_dies.iter().map(|dies| Group::new(dies.clone(), ways(dies) as u32, &lay, &cfg.ftl)).collect();
        let fdp = fdp_on.then(|| Fdp::new(&cfg.fdp, &lay));
        let pi = |h: u32| fdp.as_ref().is_some_and(|f| f.persistently_isolated(h));
        let plan = StreamPlan {
            group_dies: &group_dies,
            handles: nhandles,
            ways: if cfg.ftl.write_point_dies == 0 { usize::MAX } else { cfg.ftl.write_point_dies as usize },
            fdp: fdp_on,
            persistently_isolated: &pi,
            gc_streams: cfg.ftl.gc_streams,
        };
        let points = WritePoints::new(&plan, planes as usize);
        // Every stream may hold one block per plane of its group's dies open, and a GC round
        // may need a fresh block per plane and die on top of the foreground watermark.
        let reserve: u64 = groups.iter().map(|g| g.fg_free_blocks as u64).sum::<u64>() + points.open_blocks_max(planes);
        let spare_blocks = good as f64 - logical as f64 / lay.sectors_per_block as f64;
        if (spare_blocks as u64) < reserve {
            return Err(Error::config(
                "ftl.spare_factor",
                format!(
                    "{spare_blocks:.0} spare blocks cannot hold the {reserve} the FTL keeps free and open ({} write streams with one open block per plane and die of their group, plus the GC watermarks); raise spare_factor or blocks_per_plane{}",
                    points.streams.len(),
                    if fdp_on { ", or use fewer FDP handles" } else { "" }
                ),
            ));
        }
        let reserve_steady = reserve_steady(&groups, &points, planes);
        assert!(logical <= physical, "more logical than physical sectors");
        assert_eq!(groups.iter().map(|g| g.dies.len()).sum::<usize>(), lay.dies as usize, "reclaim groups partition the dies");
        Ok(Parts { logical, rg_of_die, groups, points, fdp, reserve_blocks: reserve, reserve_steady_blocks: reserve_steady, spare_blocks })
    }
}

/// The conventional page-mapped FTL. See the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conventional {
    m: Media,
    map: Mapping,
    points: WritePoints,
    groups: Vec<Group>,
    pools: FreePools,
    wl: StaticWl,
    fdp: Option<Fdp>,
    /// Host sectors written so far (the clock of block ages).
    host_clock: u64,
    /// Submission time of the command being processed.
    now: u64,
    /// Pages GC cannot use (`Group::reserved_pages`) summed at every programmed host unit, and
    /// the number of units.
    reserved: (u64, u64),
    buffer: WriteBuffer,
    /// GC (or a wear-levelling move) is placing relocated data: what it writes is not host
    /// data, so it neither triggers GC of its own (foreground or paced) nor counts as host
    /// units, even in a host stream (`gc_streams = "shared"`).
    #[serde(default)]
    relocating: bool,
}

impl Conventional {
    /// Format a new device from a validated config.
    pub fn new(cfg: &Config) -> Result<Conventional> {
        let mut m = Media::new(cfg);
        let lay = m.lay;
        let parts = Parts::of(cfg, m.good_blocks())?;
        for (b, meta) in m.blocks.iter_mut().enumerate() {
            meta.rg = parts.rg_of_die[lay.die_of_block(b as u32) as usize];
        }
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let mut ftl = Conventional {
            map: Mapping::new(&lay, parts.logical),
            points: parts.points,
            groups: parts.groups,
            pools: FreePools::new(lay.dies, cfg.ftl.wl_dynamic),
            wl: StaticWl::new(cfg.ftl.wl_static_threshold, lay.blocks),
            fdp: parts.fdp,
            host_clock: 0,
            now: 0,
            reserved: (0, 0),
            buffer: WriteBuffer::new((cfg.ftl.write_buffer_bytes / unit_bytes) as usize).sharing_gc(cfg.ftl.gc_uses_write_buffer),
            relocating: false,
            m,
        };
        for b in 0..lay.blocks {
            if ftl.m.blocks[b as usize].state == BlockState::Free {
                ftl.pool_push(b);
            }
        }
        assert_eq!(ftl.free_blocks() as u64, ftl.m.good_blocks(), "after format every good block is free");
        Ok(ftl)
    }

    /// Check and size a device of `cfg` without building it (see [`crate::sizing`]).
    pub fn sizing(cfg: &Config) -> Result<Sizing> {
        let good = Media::good_blocks_of(cfg);
        let parts = Parts::of(cfg, good)?;
        let lay = crate::media::Layout::new(&cfg.geometry);
        let blocks = lay.blocks as u64;
        // Free pools hold (key, block) per free block; victim sets index the full ones.
        let pools = blocks * 16;
        let victims = Victims::memory_bytes_of(cfg.ftl.gc_policy, lay.sectors_per_block, blocks);
        let memory = Media::memory_bytes_of(cfg) + Mapping::bytes_of(&lay, parts.logical) + pools + victims;
        Ok(Sizing {
            logical_bytes: parts.logical * lay.sector_bytes as u64,
            physical_bytes: lay.physical_sectors * lay.sector_bytes as u64,
            good_blocks: good,
            memory_bytes: memory,
            data_bytes_max: Media::data_bytes_of(cfg, parts.logical),
            reserve_blocks: Some(parts.reserve_blocks),
            spare_blocks: Some(parts.spare_blocks),
            reserve_steady_blocks: Some(parts.reserve_steady_blocks),
            spare_factor: Some(cfg.ftl.spare_factor),
            effective: Some(effective_spare(good, parts.reserve_steady_blocks, lay.sectors_per_block, parts.logical)),
        })
    }

    pub fn gc_policy_name(&self) -> &'static str {
        match &self.groups[0].victims {
            Victims::Greedy { .. } => "greedy",
            Victims::Fifo { .. } => "fifo",
            Victims::CostBenefit { .. } => "cost-benefit",
            Victims::Dense { .. } => "d-choices",
        }
    }

    /// Foreground and background GC watermarks in use (free blocks) of reclaim group 0.
    pub fn watermarks(&self) -> (u32, u32) {
        (self.groups[0].fg_free_blocks, self.groups[0].bg_free_blocks)
    }

    /// Blocks the FTL holds back in steady state: each group's background watermark plus every
    /// stream's open blocks.
    pub fn reserve_steady_blocks(&self) -> f64 {
        reserve_steady(&self.groups, &self.points, self.m.lay.planes_per_die)
    }

    /// The `spare` section of metrics.json: the spare the FTL leaves to data after its reserve,
    /// estimated from its settings and measured over the run (`reserved`: pages GC could not
    /// use, summed per host unit since the run's start, and the units), with what Desnoyers'
    /// models predict at each for uniform random overwrites.
    fn spare_metrics(&self, reserved: (u64, u64)) -> serde_json::Value {
        let good = self.m.good_blocks();
        let spb = self.m.lay.sectors_per_block;
        let ppb = self.m.lay.pages_per_block as f64;
        let logical = self.map.logical();
        let r6 = |x: f64| (x * 1e6).round() / 1e6;
        let est = effective_spare(good, self.reserve_steady_blocks(), spb, logical);
        let mut v = serde_json::json!({
            "good_blocks": good,
            "spare_blocks": r6(good as f64 - logical as f64 / spb as f64),
            "reserve_steady_blocks": r6(self.reserve_steady_blocks()),
            "spare_factor_effective": r6(est.spare_factor),
            "model_waf_greedy": est.waf_greedy.map(r6),
            "model_waf_fifo": est.waf_fifo.map(r6),
        });
        if reserved.1 > 0 {
            let mean = reserved.0 as f64 / reserved.1 as f64 / ppb;
            let m = effective_spare(good, mean, spb, logical);
            v["reserved_blocks_mean"] = serde_json::json!(r6(mean));
            v["spare_factor_measured"] = serde_json::json!(r6(m.spare_factor));
            v["model_waf_greedy_measured"] = serde_json::json!(m.waf_greedy.map(r6));
            v["model_waf_fifo_measured"] = serde_json::json!(m.waf_fifo.map(r6));
        }
        v
    }

    /// Victims being collected right now, over all reclaim groups.
    pub fn gc_in_progress(&self) -> usize {
        self.groups.iter().map(|g| g.gc.len()).sum()
    }

    /// Number of reclaim groups (1 without FDP).
    pub fn reclaim_groups(&self) -> usize {
        self.groups.len()
    }

    /// Bytes of simulator memory per logical sector in metadata-only mode (maps and OOB).
    pub fn metadata_bytes(&self) -> u64 {
        self.map.bytes() + (self.m.blocks.len() * std::mem::size_of::<BlockMeta>()) as u64
    }

    /// Rebuild the logical-to-physical map from the media alone (per-sector OOB logical
    /// addresses and per-page sequence numbers): the newest copy of each address wins.
    /// Trims are not recorded on the media; a host that needs them across a rebuild journals
    /// them (the NBD server does).
    pub fn rebuild_l2p_from_media(&self) -> Vec<u32> {
        self.map.rebuild_from_oob(self.m.lay.sectors_per_page)
    }

    /// The live logical-to-physical map (for tests and recovery checks).
    pub fn l2p(&self) -> &[u32] {
        self.map.l2p()
    }

    fn check_range(&self, lba: u64, sectors: u32) -> Result<()> {
        let logical = self.map.logical();
        if sectors == 0 || lba.checked_add(sectors as u64).is_none_or(|end| end > logical) {
            return Err(Error::Command(format!("sectors {lba}..{} outside the device (0..{logical})", lba.saturating_add(sectors as u64))));
        }
        Ok(())
    }

    /// Host stream a write with `placement` goes to.
    #[inline]
    fn host_stream_for(&self, placement: Option<u16>) -> Result<usize> {
        match &self.fdp {
            Some(f) => {
                let (rg, h) = f.route(placement)?;
                Ok(self.points.host_stream(rg, h))
            }
            None => Ok(HOST),
        }
    }
}

impl BlockDevice for Conventional {
    fn media(&self) -> &Media {
        &self.m
    }
    fn logical_sectors(&self) -> u64 {
        self.map.logical()
    }

    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        let sb = self.m.lay.sector_bytes as usize;
        if let (Some(d), true) = (data, self.m.data.is_some()) {
            if d.len() != sectors as usize * sb {
                return Err(Error::Command(format!("write of {sectors} sectors carries {} bytes", d.len())));
            }
        }
        let s = self.host_stream_for(opts.placement)?;
        self.now = now;
        self.m.tl.set_now(now);
        // Processed after the command overhead, buffered once its data has crossed the link.
        let t = self.m.tl.link_in(sectors as u64 * sb as u64, now + self.m.tl.command_overhead_ns());
        self.buffer.begin(t);
        if self.m.timing() {
            let st = &mut self.points.streams[s];
            st.ready_ns = st.ready_ns.max(t);
        }
        for i in 0..sectors as u64 {
            let l = (lba + i) as u32;
            if let Some(old) = self.map.overwrite(l) {
                self.invalidate(old);
            }
            self.host_clock += 1;
            let (psa, full) = match self.place(s, l) {
                Ok(p) => p,
                Err(e) => {
                    // Worn out: the sector's old copy is gone, its new one never placed.
                    self.map.forget(l);
                    return Err(e);
                }
            };
            if let (Some(store), Some(d)) = (self.m.data.as_mut(), data) {
                let off = i as usize * sb;
                store.put(psa, &d[off..off + sb]);
            }
            if full {
                self.unit_placed(s)?;
            }
        }
        self.points.stats[s].host_sectors += sectors as u64;
        if let Some(f) = self.fdp.as_mut() {
            let st = &self.points.streams[s];
            f.host_wrote(st.rg as usize, st.handle as usize, sectors as u64);
        }
        debug_assert!(self.map.mapped() <= self.map.logical(), "more sectors mapped than the device has");
        self.m.c.host_write_cmds += 1;
        self.m.c.host_write_bytes += sectors as u64 * sb as u64;
        // FUA and write-through pad the partial unit whether or not time is modelled, so the
        // media sees the same writes in both modes.
        let sync = opts.fua || self.buffer.write_through();
        if sync {
            self.pad(s);
        }
        if !self.m.timing() {
            return Ok(now);
        }
        Ok(self.buffer.completion(sync, t))
    }

    fn read(&mut self, lba: u64, sectors: u32, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        self.m.tl.set_now(now);
        let lay = self.m.lay;
        let sb = lay.sector_bytes as usize;
        if let Some(o) = out.as_deref() {
            if o.len() != sectors as usize * sb {
                return Err(Error::Command(format!("read of {sectors} sectors into {} bytes", o.len())));
            }
        }
        let spp = lay.sectors_per_page;
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        let mut group: (u32, u64) = (NIL, 0); // (page, sectors) of the current media read
        for i in 0..=sectors as u64 {
            let psa = if i < sectors as u64 { self.map.lookup((lba + i) as u32) } else { UNMAPPED };
            let page = if psa == UNMAPPED { NIL } else { psa / spp };
            if page != group.0 && group.0 != NIL {
                // Issue the previous group's read, unless its page is still in the buffer.
                if self.map.programmed(group.0) {
                    let die = lay.die_of_block(group.0 / lay.pages_per_block);
                    done = done.max(self.m.read(die, group.1 * sb as u64, t));
                }
                group = (NIL, 0);
            }
            if page != NIL {
                if group.0 == NIL {
                    group = (page, 0);
                }
                group.1 += 1;
                debug_assert!(group.1 <= spp as u64, "one media read covers more sectors than a page");
            }
            if i < sectors as u64 {
                if let Some(o) = out.as_deref_mut() {
                    let dst = &mut o[i as usize * sb..(i as usize + 1) * sb];
                    match (&self.m.data, psa) {
                        (Some(store), p) if p != UNMAPPED => store.get(p, dst),
                        _ => dst.fill(0),
                    }
                }
            }
        }
        self.m.c.host_read_cmds += 1;
        self.m.c.host_read_bytes += sectors as u64 * sb as u64;
        // The data (zeros for unmapped sectors too) crosses the host link once it is out.
        Ok(if self.m.timing() { self.m.tl.link_out(sectors as u64 * sb as u64, done) } else { now })
    }

    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64> {
        self.check_range(lba, sectors)?;
        for l in lba..lba + sectors as u64 {
            if let Some(old) = self.map.unmap(l as u32) {
                self.invalidate(old);
            }
        }
        debug_assert!(self.map.mapped() <= self.map.logical(), "more sectors mapped than the device has");
        self.m.c.host_trim_cmds += 1;
        self.m.c.host_trim_bytes += sectors as u64 * self.m.lay.sector_bytes as u64;
        Ok(if self.m.timing() { now + self.m.tl.command_overhead_ns() } else { now })
    }

    fn flush(&mut self, now: u64) -> Result<u64> {
        self.now = now;
        self.m.tl.set_now(now);
        let t = now + self.m.tl.command_overhead_ns();
        // Every stream's partial unit, relocated data in GC buffers included, so a flushed
        // device holds everything on the media.
        for s in 0..self.points.streams.len() {
            self.pad(s);
        }
        // Relocated sectors mixed into host units (`gc_streams = "shared"`) are all programmed
        // now: the page the last of them partly filled counts too, so relocated pages cover
        // every relocated sector after a flush.
        if std::mem::take(&mut self.points.relocated_carry) > 0 {
            self.m.c.gc_relocated_pages += 1;
        }
        self.m.c.host_flush_cmds += 1;
        Ok(if self.m.timing() { t.max(self.buffer.drained_at()) } else { now })
    }

    fn idle(&mut self, now: u64) {
        if !self.m.timing() || (0..self.groups.len()).all(|rg| !self.gc_short(rg)) || self.m.tl.horizon_ns() > now {
            return;
        }
        self.now = now;
        self.m.tl.set_now(now);
        for rg in 0..self.groups.len() {
            if self.gc_short(rg) {
                // Background GC never fails the host: if nothing is collectable, foreground GC
                // will say so.
                let _ = self.gc_one(rg, false);
            }
        }
    }

    #[inline]
    fn prefetch(&self, lba: u64, stage: u8) {
        if stage == 3 {
            self.map.prefetch_read(lba, self.m.lay.sectors_per_page)
        } else {
            self.map.prefetch(lba, stage, &self.m.blocks, self.m.lay.sectors_per_block)
        }
    }

    fn personality_baseline(&self) -> serde_json::Value {
        serde_json::json!({ "streams": self.points.stats, "reserved": [self.reserved.0, self.reserved.1] })
    }

    fn personality_metrics(&self, base: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
        let streams: Vec<StreamStats> = serde_json::from_value(base["streams"].clone()).unwrap_or_default();
        let r = |i: usize| base["reserved"][i].as_u64().unwrap_or(0);
        let mut out = vec![("spare", self.spare_metrics((self.reserved.0 - r(0), self.reserved.1 - r(1))))];
        if let Some(f) = self.fdp_metrics(&streams) {
            out.push(("fdp", f));
        }
        out
    }

    fn free_blocks(&self) -> u32 {
        self.groups.iter().map(|g| g.free).sum()
    }
    fn mapped_sectors(&self) -> u64 {
        self.map.mapped()
    }

    fn check_invariants(&self) {
        self.check_all();
    }
}
