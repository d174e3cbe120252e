//! NVMe Flexible Data Placement (TP4146): the placement component the conventional FTL calls.
//! It decodes placement identifiers, keeps the reclaim unit accounting of each handle, the
//! events, and answers the log pages; the FTL owns the write points and the blocks, and asks
//! it where a write goes and which streams to build. It knows nothing of the FTL's internals.
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

use crate::config::{FdpConfig, FdpConfiguration, HandleType};
use crate::error::{Error, Result, Status};
use crate::media::{Counters, Layout};

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
    /// RUs started per (reclaim group, handle) (RU switches).
    pub ru_switches: Vec<u64>,
    /// Whether the host has written through each (rg, handle).
    used: Vec<bool>,
    /// Host sectors written into the current RU of each (rg, handle).
    ru_written: Vec<u64>,
    /// Serial number of the current RU of each (rg, handle): blocks opened for the handle now
    /// belong to it.
    ru_serial: Vec<u32>,
}

impl Fdp {
    pub fn new(cfg: &FdpConfig, lay: &Layout) -> Fdp {
        let fc = cfg.active();
        let rgif = if fc.reclaim_groups <= 1 { 0 } else { 32 - (fc.reclaim_groups - 1).leading_zeros() };
        let ru_sectors = ru_sectors_of(&fc, lay);
        let n = (fc.reclaim_groups * fc.handles) as usize;
        let sb = lay.sector_bytes as u64;
        assert!(fc.reclaim_groups <= 1 << rgif, "RGIF bits name every reclaim group");
        assert!(ru_sectors.iter().all(|&s| s > 0), "every reclaim group has dies, so RUs hold sectors");
        let f = Fdp {
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
            ru_written: vec![0; n],
            ru_serial: vec![0; n],
        };
        assert!(f.phndl.iter().all(|&h| (h as u32) < f.handles), "placement handles select reclaim unit handles of the configuration");
        f
    }

    /// Placement identifier of (reclaim group, placement handle).
    pub fn pid(&self, rg: u32, handle: u32) -> u16 {
        debug_assert!(rg < self.groups && handle < 1 << (16 - self.rgif), "({rg}, {handle}) has no placement identifier");
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
        debug_assert!(rg >= self.groups || self.pid(rg, ph) == pid, "decode inverts pid");
        (rg < self.groups).then_some((rg as usize, ruh as usize))
    }

    /// Placement handles of the namespace.
    pub fn placement_handles(&self) -> u32 {
        self.phndl.len() as u32
    }

    /// Handles with persistent isolation: their data never mixes with other handles' data,
    /// relocated or not.
    pub fn persistently_isolated(&self, handle: u32) -> bool {
        self.types[handle as usize] == HandleType::PersistentlyIsolated
    }

    /// (reclaim group, reclaim unit handle) a write goes to: the one its placement identifier
    /// names, or placement handle 0 of reclaim group 0 without one.
    #[inline]
    pub fn route(&self, placement: Option<u16>) -> Result<(usize, usize)> {
        match placement {
            Some(pid) => self.decode(pid).ok_or_else(|| {
                Error::Nvme(
                    Status::InvalidField,
                    format!(
                        "placement identifier {pid:#06x} names no reclaim group and placement handle of this namespace ({} groups x {} placement handles)",
                        self.groups,
                        self.placement_handles()
                    ),
                )
            }),
            None => Ok((0, self.phndl[0] as usize)),
        }
    }

    #[inline(always)]
    fn idx(&self, rg: usize, handle: usize) -> usize {
        rg * self.handles as usize + handle
    }

    /// Account `sectors` host sectors written through (rg, handle): RUs fill and switch.
    #[inline]
    pub fn host_wrote(&mut self, rg: usize, handle: usize, sectors: u64) {
        let idx = self.idx(rg, handle);
        self.used[idx] = true;
        self.device_wrote(rg, handle, sectors);
    }

    /// Account `sectors` written into the RUs of (rg, handle), by the host or by GC putting
    /// relocated data back into the handle's own RU (`ftl.gc_streams = "shared"`): RUs fill
    /// and switch by what the media holds, so available media writes stay exact.
    #[inline]
    pub fn device_wrote(&mut self, rg: usize, handle: usize, sectors: u64) {
        let idx = self.idx(rg, handle);
        let ru = self.ru_sectors[rg];
        self.ru_written[idx] += sectors;
        while self.ru_written[idx] >= ru {
            self.ru_written[idx] -= ru;
            self.ru_serial[idx] += 1;
            self.ru_switches[idx] += 1;
        }
        debug_assert!(self.ru_written[idx] < ru, "RU of ({rg}, {handle}) written past its size");
    }

    /// Serial number of the current RU of (rg, handle).
    #[inline]
    pub fn ru_serial(&self, rg: usize, handle: usize) -> u32 {
        self.ru_serial[self.idx(rg, handle)]
    }

    /// The FTL closed the current RU of (rg, handle) (reclaim unit handle update): the next
    /// write starts a new one. Returns whether the RU held any host data.
    pub fn end_ru(&mut self, rg: usize, handle: usize) -> bool {
        let idx = self.idx(rg, handle);
        self.ru_serial[idx] += 1;
        std::mem::take(&mut self.ru_written[idx]) > 0
    }

    pub fn push_event(&mut self, kind: EventType, pid: Option<u16>, rg: u16, time_ns: u64) {
        self.events_total += 1;
        if self.max_events == 0 {
            return;
        }
        if self.events.len() == self.max_events {
            self.events.pop_front();
        }
        self.events.push_back(Event { kind, code: kind.code(), pid, reclaim_group: rg, time_ns });
        debug_assert!(self.events.len() <= self.max_events, "event log past its bound");
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }
}

impl Fdp {
    /// FDP Configurations log page: every configuration the device offers, in index order,
    /// and (as Get Features, FDP would report) which one is in force.
    pub fn configurations(&self) -> Value {
        let rgif = |groups: u32| if groups <= 1 { 0 } else { 32 - (groups - 1).leading_zeros() };
        json!({
            "number_of_configurations": self.offered.len(),
            "configuration_in_use": self.configuration,
            "configurations": self.offered.iter().map(|(c, ru_bytes)| json!({
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
        })
    }

    /// Reclaim Unit Handle Usage log page: per handle, whether the host has used it.
    pub fn usage(&self) -> Vec<&'static str> {
        (0..self.handles as usize)
            .map(|h| if (0..self.groups as usize).any(|rg| self.used[self.idx(rg, h)]) { "host-specified" } else { "unused" })
            .collect()
    }

    /// FDP Statistics log page, from the device's counters.
    pub fn statistics(&self, c: &Counters, lay: &Layout) -> FdpStatistics {
        let block_bytes = lay.sectors_per_block as u64 * lay.sector_bytes as u64;
        FdpStatistics { hbmw: c.host_write_bytes, mbmw: c.nand_write_bytes, mbe: c.nand_erase_count * block_bytes }
    }

    /// Reclaim Unit Handle Status (I/O Management Receive): every (group, placement handle).
    pub fn ruh_status(&self) -> Vec<RuhStatus> {
        let mut out = vec![];
        for rg in 0..self.groups {
            for (ph, &ruh) in self.phndl.iter().enumerate() {
                out.push(RuhStatus {
                    pid: self.pid(rg, ph as u32),
                    reclaim_group: rg as u16,
                    handle: ph as u16,
                    ruhid: ruh,
                    handle_type: self.types[ruh as usize],
                    ruamw: self.ru_sectors[rg as usize] - self.ru_written[self.idx(rg as usize, ruh as usize)],
                });
            }
        }
        out
    }
}
