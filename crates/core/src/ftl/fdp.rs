//! NVMe Flexible Data Placement (TP4146) on the conventional FTL.
//!
//! Model: a reclaim group (RG) is an equal share of the dies; a reclaim unit handle (RUH) is a
//! host write stream of its own in every RG, so data written through different handles never
//! shares an erase block. A reclaim unit (RU) is `fdp.ru_superblocks` superblocks (one block per
//! plane of every die of the RG); a handle's current RU is replaced transparently when the
//! host has written an RU's worth through it, and at once on a reclaim unit handle update.
//!
//! Garbage collection honours the handle types. Relocation-target policy: valid data of an
//! initially isolated handle goes to one GC stream shared by all initially isolated handles of
//! the RG (the spec lets such data be mixed once the controller moves it); data of a
//! persistently isolated handle goes to a GC stream of that handle alone, so it never mixes
//! with other handles' data, before or after relocation. Victims are chosen per RG, so data
//! never crosses RGs. We chose one shared stream (rather than, say, one per source handle) for
//! initially isolated handles because that is the cheapest layout the spec allows and what
//! distinguishes the two types in practice: hot and cold relocated data mix in the shared
//! stream, and do not under persistent isolation.
//!
//! Placement identifier (the write's DSPEC): the reclaim group in the top RGIF bits, the
//! placement handle in the rest (RGIF = bits needed for the RG count; 0 with one RG). A write
//! whose identifier names no group or handle fails with Invalid Field in Command; QEMU's FDP
//! instead falls back to handle 0 silently, which hides host bugs we would rather show.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::conventional::{Conventional, Stream};
use crate::config::{FdpConfig, FdpConfiguration, HandleType};
use crate::error::{Error, Result, Status};
use crate::ftl::BlockDevice;
use crate::media::{BlockState, Layout};

/// Handle of streams whose data belongs to no single handle.
pub const SHARED: u16 = u16::MAX;

/// Per-stream accounting; per-handle FDP figures are derived from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStats {
    pub host_sectors: u64,
    pub units_programmed: u64,
    /// Valid sectors GC moved out of this stream's blocks.
    pub relocated_out_sectors: u64,
}

/// FDP event types (FDP Events log page), with their type codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventType {
    /// 0x00 (host event): a reclaim unit handle update ended an RU before it was full.
    RuNotFullyWritten,
    /// 0x80 (controller event): the controller replaced media (a block retired as grown bad).
    MediaReallocated,
}

impl EventType {
    pub fn code(self) -> u8 {
        match self {
            EventType::RuNotFullyWritten => 0x00,
            EventType::MediaReallocated => 0x80,
        }
    }
}

/// One FDP event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventType,
    pub code: u8,
    /// Placement identifier concerned (host events), or None.
    pub pid: Option<u16>,
    pub reclaim_group: u16,
    /// Simulated time of the event.
    pub time_ns: u64,
}

/// Reclaim Unit Handle Status descriptor (I/O Management Receive), one per placement
/// identifier of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuhStatus {
    pub pid: u16,
    pub reclaim_group: u16,
    /// Placement handle (index into the namespace's list).
    pub handle: u16,
    /// Reclaim unit handle it selects.
    pub ruhid: u16,
    pub handle_type: HandleType,
    /// Reclaim unit available media writes: logical blocks (sectors) left in the current RU.
    pub ruamw: u64,
}

/// FDP Statistics log page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdpStatistics {
    /// Host bytes with metadata written.
    pub hbmw: u64,
    /// Media bytes with metadata written.
    pub mbmw: u64,
    /// Media bytes erased.
    pub mbe: u64,
}

/// Reclaim group of each die: equal contiguous shares of the dies in address order (whole
/// channels when the group count divides them).
pub fn reclaim_group_of_dies(lay: &Layout, groups: u32) -> Vec<u8> {
    (0..lay.dies).map(|d| (d as u64 * groups as u64 / lay.dies as u64) as u8).collect()
}

/// Reclaim unit size in sectors of each reclaim group under configuration `fc`.
fn ru_sectors_of(fc: &FdpConfiguration, lay: &Layout) -> Vec<u64> {
    let rg_of_die = reclaim_group_of_dies(lay, fc.reclaim_groups);
    (0..fc.reclaim_groups)
        .map(|g| {
            let dies = rg_of_die.iter().filter(|&&r| r as u32 == g).count() as u64;
            fc.ru_superblocks as u64 * dies * lay.planes_per_die as u64 * lay.sectors_per_block as u64
        })
        .collect()
}

/// FDP state of a device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fdp {
    /// Index of the configuration in force.
    pub configuration: u32,
    /// Every configuration the device offers, with its RU size in bytes (of reclaim group 0).
    pub offered: Vec<(FdpConfiguration, u64)>,
    pub groups: u32,
    pub handles: u32,
    /// The namespace's placement handle list: placement handle -> reclaim unit handle.
    pub phndl: Vec<u16>,
    pub types: Vec<HandleType>,
    /// Bits of the placement identifier that name the reclaim group.
    pub rgif: u32,
    /// Nominal RU size in sectors, per reclaim group.
    pub ru_sectors: Vec<u64>,
    pub ru_bytes: Vec<u64>,
    max_events: usize,
    events: VecDeque<Event>,
    pub events_total: u64,
    /// RUs started per host stream (RU switches).
    pub ru_switches: Vec<u64>,
    /// Whether the host has written through each (rg, handle).
    used: Vec<bool>,
}

impl Fdp {
    pub fn new(cfg: &FdpConfig, lay: &Layout) -> Fdp {
        let fc = cfg.active();
        let rgif = if fc.reclaim_groups <= 1 { 0 } else { 32 - (fc.reclaim_groups - 1).leading_zeros() };
        let ru_sectors = ru_sectors_of(&fc, lay);
        let n = (fc.reclaim_groups * fc.handles) as usize;
        let sb = lay.sector_bytes as u64;
        Fdp {
            configuration: cfg.configuration,
            offered: cfg
                .configurations()
                .into_iter()
                .map(|c| {
                    let ru = ru_sectors_of(&c, lay)[0] * sb;
                    (c, ru)
                })
                .collect(),
            groups: fc.reclaim_groups,
            handles: fc.handles,
            phndl: if cfg.namespace_handles.is_empty() {
                (0..fc.handles as u16).collect()
            } else {
                cfg.namespace_handles.iter().map(|&h| h as u16).collect()
            },
            types: (0..fc.handles).map(|h| fc.handle_type(h)).collect(),
            rgif,
            ru_bytes: ru_sectors.iter().map(|s| s * sb).collect(),
            ru_sectors,
            max_events: cfg.max_events as usize,
            events: VecDeque::new(),
            events_total: 0,
            ru_switches: vec![0; n],
            used: vec![false; n],
        }
    }

    /// Placement identifier of (reclaim group, placement handle).
    pub fn pid(&self, rg: u32, handle: u32) -> u16 {
        if self.rgif == 0 {
            handle as u16
        } else {
            ((rg << (16 - self.rgif)) | handle) as u16
        }
    }

    /// (reclaim group, reclaim unit handle) a placement identifier selects, if it names a
    /// group and a placement handle of the namespace.
    pub fn decode(&self, pid: u16) -> Option<(usize, usize)> {
        let (rg, ph) = if self.rgif == 0 {
            (0u32, pid as u32)
        } else {
            ((pid as u32) >> (16 - self.rgif), pid as u32 & ((1 << (16 - self.rgif)) - 1))
        };
        let ruh = *self.phndl.get(ph as usize)?;
        (rg < self.groups).then_some((rg as usize, ruh as usize))
    }

    /// Placement handles of the namespace.
    pub fn placement_handles(&self) -> u32 {
        self.phndl.len() as u32
    }

    /// Account `sectors` host sectors written through stream `st` (RU switches).
    pub(crate) fn host_wrote(&mut self, st: &mut Stream, sectors: u64, _now: u64) {
        let idx = st.rg as usize * self.handles as usize + st.handle as usize;
        if st.handle == SHARED || idx >= self.used.len() {
            return;
        }
        self.used[idx] = true;
        let ru = self.ru_sectors[st.rg as usize];
        st.ru_written += sectors;
        while st.ru_written >= ru {
            st.ru_written -= ru;
            st.ru_serial += 1;
            self.ru_switches[idx] += 1;
        }
    }

    pub(crate) fn push_event(&mut self, kind: EventType, pid: Option<u16>, rg: u16, time_ns: u64) {
        self.events_total += 1;
        if self.max_events == 0 {
            return;
        }
        if self.events.len() == self.max_events {
            self.events.pop_front();
        }
        self.events.push_back(Event { kind, code: kind.code(), pid, reclaim_group: rg, time_ns });
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }
}

impl Conventional {
    fn fdp_ref(&self) -> Result<&Fdp> {
        self.fdp.as_ref().ok_or_else(|| Error::Nvme(Status::FdpDisabled, "FDP is not enabled on this device (fdp.enabled = false)".into()))
    }

    /// The FDP state, if FDP is enabled.
    pub fn fdp(&self) -> Option<&Fdp> {
        self.fdp.as_ref()
    }

    fn host_stream_of(&self, rg: usize, h: usize) -> usize {
        let f = self.fdp.as_ref().expect("fdp");
        self.host_streams[rg * f.handles as usize + h]
    }

    /// FDP Configurations log page: every configuration the device offers, in index order,
    /// and (as Get Features, FDP would report) which one is in force.
    pub fn fdp_configurations(&self) -> Result<Value> {
        let f = self.fdp_ref()?;
        let rgif = |groups: u32| if groups <= 1 { 0 } else { 32 - (groups - 1).leading_zeros() };
        Ok(json!({
            "number_of_configurations": f.offered.len(),
            "configuration_in_use": f.configuration,
            "configurations": f.offered.iter().map(|(c, ru_bytes)| json!({
                "fdp_attributes": {"rgif": rgif(c.reclaim_groups), "volatile_write_cache": true, "valid": true},
                "vendor_specific_size": 0,
                "nrg": c.reclaim_groups,
                "nruh": c.handles,
                "maxpids": c.reclaim_groups * c.handles,
                "nnss": 1,
                "runs": ru_bytes,
                "erutl": 0,
                "ruh_descriptors": (0..c.handles).map(|h| { let t = c.handle_type(h); json!({"ruht": match t { HandleType::InitiallyIsolated => 1, HandleType::PersistentlyIsolated => 2 }, "type": t}) }).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }))
    }

    /// Reclaim Unit Handle Usage log page: per handle, whether the host has used it.
    pub fn ruh_usage(&self) -> Result<Vec<&'static str>> {
        let f = self.fdp_ref()?;
        Ok((0..f.handles as usize)
            .map(|h| if (0..f.groups as usize).any(|rg| f.used[rg * f.handles as usize + h]) { "host-specified" } else { "unused" })
            .collect())
    }

    /// FDP Statistics log page.
    pub fn fdp_statistics(&self) -> Result<FdpStatistics> {
        self.fdp_ref()?;
        let c = self.counters();
        let block_bytes = self.layout().sectors_per_block as u64 * self.layout().sector_bytes as u64;
        Ok(FdpStatistics { hbmw: c.host_write_bytes, mbmw: c.nand_write_bytes, mbe: c.nand_erase_count * block_bytes })
    }

    /// FDP Events log page (most recent last; at most `fdp.max_events`).
    pub fn fdp_events(&self) -> Result<Vec<Event>> {
        Ok(self.fdp_ref()?.events().cloned().collect())
    }

    /// Reclaim Unit Handle Status (I/O Management Receive): every (group, handle).
    pub fn ruh_status(&self) -> Result<Vec<RuhStatus>> {
        let f = self.fdp_ref()?;
        let mut out = vec![];
        for rg in 0..f.groups {
            for (ph, &ruh) in f.phndl.iter().enumerate() {
                let s = self.host_stream_of(rg as usize, ruh as usize);
                out.push(RuhStatus {
                    pid: f.pid(rg, ph as u32),
                    reclaim_group: rg as u16,
                    handle: ph as u16,
                    ruhid: ruh,
                    handle_type: f.types[ruh as usize],
                    ruamw: f.ru_sectors[rg as usize] - self.streams[s].ru_written,
                });
            }
        }
        Ok(out)
    }

    /// Reclaim Unit Handle Update (I/O Management Send): each listed placement identifier's
    /// handle moves to a new, empty RU. An RU left partly written raises an "RU not fully
    /// written" event.
    pub fn ruh_update(&mut self, pids: &[u16], now: u64) -> Result<()> {
        let f = self.fdp_ref()?;
        let mut targets = vec![];
        for &pid in pids {
            let (rg, h) = f.decode(pid).ok_or_else(|| {
                Error::Nvme(
                    Status::InvalidPlacementHandleList,
                    format!("placement identifier {pid:#06x} names no reclaim group and handle of this device"),
                )
            })?;
            targets.push((pid, rg, self.host_stream_of(rg, h)));
        }
        for (pid, rg, s) in targets {
            if self.end_reclaim_unit(s) {
                self.fdp.as_mut().unwrap().push_event(EventType::RuNotFullyWritten, Some(pid), rg as u16, now);
            }
        }
        Ok(())
    }

    /// Per-stream counters now (the baseline of a measured run).
    pub fn stream_stats(&self) -> Vec<StreamStats> {
        self.sstats.clone()
    }

    /// The `fdp` section of metrics.json: per-handle host and media bytes and DLWA since
    /// `base`, shared GC streams, RU switches, events, and the valid-data distribution of each
    /// handle's full blocks.
    pub fn fdp_metrics(&self, base: &[StreamStats]) -> Option<Value> {
        let f = self.fdp.as_ref()?;
        let lay = self.layout();
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let sb = lay.sector_bytes as u64;
        let d = |s: usize| {
            let (a, b) = (&self.sstats[s], base.get(s).cloned().unwrap_or_default());
            (a.host_sectors - b.host_sectors, a.units_programmed - b.units_programmed, a.relocated_out_sectors - b.relocated_out_sectors)
        };
        // Valid fraction of full blocks, by the stream that wrote them (10 bins).
        let mut hist = vec![[0u64; 10]; self.streams.len()];
        for m in self.blocks() {
            if m.state == BlockState::Full {
                let bin = ((m.valid as u64 * 10) / lay.sectors_per_block as u64).min(9) as usize;
                hist[m.stream as usize][bin] += 1;
            }
        }
        // Valid fraction of each completed reclaim unit of the host streams, over its blocks
        // still on the media (10 bins).
        let mut ru_fill: std::collections::BTreeMap<(usize, u32), (u64, u64)> = Default::default();
        for m in self.blocks() {
            let st = &self.streams[m.stream as usize];
            if m.state == BlockState::Full && st.host && m.ru < st.ru_serial {
                let e = ru_fill.entry((m.stream as usize, m.ru)).or_default();
                e.0 += m.valid as u64;
                e.1 += lay.sectors_per_block as u64;
            }
        }
        let mut ru_hist = vec![[0u64; 10]; self.streams.len()];
        for (&(s, _), &(valid, cap)) in &ru_fill {
            ru_hist[s][((valid * 10) / cap).min(9) as usize] += 1;
        }
        let mut handles = vec![];
        let mut shared = vec![];
        for (s, st) in self.streams.iter().enumerate() {
            let (host, units, moved) = d(s);
            let nand = units * unit_bytes;
            if st.host {
                let h = st.handle as u32;
                // Media bytes for a handle: its host stream's programs plus the relocations of
                // its data out of its own blocks (for persistently isolated handles, out of its
                // own GC stream's blocks too). Data of initially isolated handles that GC has
                // already moved once lives in the shared GC stream and is counted there.
                let own_gc = self.streams.iter().position(|g| !g.host && g.rg == st.rg && g.handle == st.handle);
                let moved_again = own_gc.map(|i| d(i).2).unwrap_or(0);
                let media = nand + (moved + moved_again) * sb;
                handles.push(json!({
                    "pid": f.phndl.iter().position(|&r| r as u32 == h).map(|ph| f.pid(st.rg as u32, ph as u32)),
                    "reclaim_group": st.rg,
                    "handle": h,
                    "type": f.types[h as usize],
                    "host_write_bytes": host * sb,
                    "media_write_bytes": media,
                    "gc_relocated_out_bytes": (moved + moved_again) * sb,
                    "dlwa": if host == 0 { 0.0 } else { (media as f64 / (host * sb) as f64 * 1e6).round() / 1e6 },
                    "ru_switches": f.ru_switches[st.rg as usize * f.handles as usize + h as usize],
                    "full_block_valid_fraction_histogram": hist[s].to_vec(),
                    "ru_valid_fraction_histogram": ru_hist[s].to_vec(),
                }));
            } else if st.handle == SHARED {
                shared.push(json!({
                    "reclaim_group": st.rg,
                    "media_write_bytes": nand,
                    "gc_relocated_out_bytes": moved * sb,
                    "full_block_valid_fraction_histogram": hist[s].to_vec(),
                }));
            }
        }
        Some(json!({
            "enabled": true,
            "configuration": f.configuration,
            "reclaim_groups": f.groups,
            "handles_per_group": f.handles,
            "ru_bytes": f.ru_bytes,
            "handles": handles,
            "shared_gc_streams": shared,
            "events_total": f.events_total,
        }))
    }
}
