//! NVMe Zoned Namespace (ZNS) personality: the host writes each zone sequentially at its
//! write pointer, and resets zones itself. There is no device garbage collection: a reset
//! erases the zone's blocks, so DLWA stays 1 apart from padding of partial pages.
//!
//! Layout: a zone is `zns.zone_blocks` blocks in every plane of `zns.zone_width` dies (a die
//! group), written a multi-plane unit at a time round-robin over the group's dies, so a
//! zone's bandwidth is the group's. Zones are dealt round-robin over the die groups.
//!
//! State machine and errors follow the ZNS command set (QEMU's zoned namespace is the
//! reference implementation we compared against): writes must land at the write pointer
//! (Zone Invalid Write), may not cross the zone capacity (Zone Boundary Error), and need open
//! and active resources (Too Many Open / Active Zones); implicitly opened zones are closed to
//! make room for a new implicit open; explicit open/close/finish/reset/offline move zones
//! between states, or fail with Invalid Zone State Transition.

mod conv;

use serde::{Deserialize, Serialize};

use super::hostlog::{Container, Containers};
use super::{BlockDevice, WriteOpts};
use crate::config::Config;
use crate::engine::WriteBuffer;
use crate::error::{Error, Result, Status};
use crate::ftl::sizing::Sizing;
use crate::media::{BlockState, Layout, Media};
use conv::ConvArea;

/// Zone states with their ZNS state codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneState {
    Empty,
    ImplicitlyOpen,
    ExplicitlyOpen,
    Closed,
    Full,
    ReadOnly,
    Offline,
    /// A conventional zone's condition: no write pointer, random writes allowed.
    NotWritePointer,
}

impl ZoneState {
    pub fn code(self) -> u8 {
        match self {
            ZoneState::NotWritePointer => 0x0,
            ZoneState::Empty => 0x1,
            ZoneState::ImplicitlyOpen => 0x2,
            ZoneState::ExplicitlyOpen => 0x3,
            ZoneState::Closed => 0x4,
            ZoneState::ReadOnly => 0xD,
            ZoneState::Full => 0xE,
            ZoneState::Offline => 0xF,
        }
    }
    fn is_open(self) -> bool {
        matches!(self, ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen)
    }
    fn is_active(self) -> bool {
        self.is_open() || self == ZoneState::Closed
    }
}

/// Zone types as the zone report gives them (ZT field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneType {
    /// 0x1 (the Linux zoned model's and ZBC's conventional zone; NVMe ZNS defines none).
    Conventional,
    /// 0x2, the only type of NVMe ZNS.
    SequentialWriteRequired,
}

impl ZoneType {
    pub fn code(self) -> u8 {
        match self {
            ZoneType::Conventional => 0x1,
            ZoneType::SequentialWriteRequired => 0x2,
        }
    }
}

/// Zone Management Send actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneAction {
    Close,
    Finish,
    Open,
    Reset,
    Offline,
}

/// A zone descriptor (Report Zones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneDescriptor {
    pub index: u32,
    pub zone_type: ZoneType,
    pub state: ZoneState,
    /// Zone start LBA.
    pub zslba: u64,
    /// Zone capacity in logical blocks.
    pub zcap: u64,
    /// Write pointer.
    pub wp: u64,
    pub reset_count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Zone {
    state: ZoneState,
    /// Sectors written (write pointer - zone start).
    written: u64,
    /// Time the data of the partial unit is available to program.
    ready_ns: u64,
    resets: u64,
    /// When the zone was last opened (orders implicit closes: oldest first).
    opened: u64,
}

const NIL: u32 = u32::MAX;

/// The ZNS device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Zns {
    m: Media,
    zone_sectors: u64,
    zone_cap: u64,
    zone_blocks: u32,
    width: u32,
    /// Die groups (each `width` dies, channel-alternating).
    groups: Vec<Vec<u32>>,
    zones: Vec<Zone>,
    max_open: u32,
    max_active: u32,
    buffer: WriteBuffer,
    open_clock: u64,
    /// Conventional zones (host zones 0..nconv) and the pool behind them.
    nconv: usize,
    conv: Option<ConvArea>,
}

impl Zns {
    pub fn new(cfg: &Config) -> Result<Zns> {
        Self::build(cfg, true)
    }

    /// Check and size a device of `cfg` without building its large parts (see
    /// [`crate::sizing`]).
    pub fn sizing(cfg: &Config) -> Result<Sizing> {
        let shell = Self::build(cfg, false)?;
        let lay = shell.m.lay;
        let logical = shell.logical_sectors();
        let conv = shell.conv.as_ref().map_or(0, |c| (shell.nconv as u64 + c.segs.len() as u64) * shell.zone_sectors * 4);
        let zones = shell.zones.len() as u64 * std::mem::size_of::<Zone>() as u64;
        Ok(Sizing {
            logical_bytes: logical * lay.sector_bytes as u64,
            physical_bytes: lay.physical_sectors * lay.sector_bytes as u64,
            good_blocks: shell.m.good_blocks(),
            memory_bytes: Media::memory_bytes_of(cfg) + zones + conv,
            data_bytes_max: Media::data_bytes_of(cfg, logical),
            reserve_blocks: None,
            spare_blocks: None,
            reserve_steady_blocks: None,
            spare_factor: None,
            effective: None,
        })
    }

    /// The device of `cfg`; without `allocate`, a shell with every check done but no
    /// per-sector maps or data store.
    fn build(cfg: &Config, allocate: bool) -> Result<Zns> {
        let lay = Layout::new(&cfg.geometry);
        let z = &cfg.zns;
        let width = if z.zone_width == 0 { lay.dies } else { z.zone_width };
        if !lay.dies.is_multiple_of(width) {
            return Err(Error::config("zns.zone_width", format!("{width} does not divide the {} dies", lay.dies)));
        }
        if !lay.blocks_per_plane.is_multiple_of(z.zone_blocks) {
            return Err(Error::config(
                "zns.zone_blocks",
                format!("{} does not divide blocks_per_plane ({})", z.zone_blocks, lay.blocks_per_plane),
            ));
        }
        let order = lay.way_order();
        let groups: Vec<Vec<u32>> = (0..lay.dies / width).map(|g| (0..width).map(|i| order[(g * width + i) as usize]).collect()).collect();
        let zone_sectors = width as u64 * lay.planes_per_die as u64 * z.zone_blocks as u64 * lay.sectors_per_block as u64;
        let unit = (lay.planes_per_die * lay.sectors_per_page) as u64;
        let zone_cap = (((zone_sectors as f64 * z.zone_capacity).floor() as u64) / unit * unit).max(unit);
        let nphys = groups.len() * (lay.blocks_per_plane / z.zone_blocks) as usize;
        let nconv = z.conventional_zones as usize;
        let spare = if nconv > 0 { z.conventional_spare_zones as usize } else { 0 };
        if nconv + spare >= nphys {
            return Err(Error::config(
                "zns.conventional_zones",
                format!("{nconv} conventional zones and {spare} spare zones leave no sequential zone of the {nphys} the device has"),
            ));
        }
        let nseq = nphys - nconv - spare;
        if (nconv + spare) as u64 * zone_sectors >= NIL as u64 {
            return Err(Error::config("zns.conventional_zones", "the conventional zones' pool exceeds 2^32 sectors"));
        }
        let conv = (nconv > 0).then(|| ConvArea::new(nseq, nconv, spare, zone_sectors, allocate));
        let nzones = (nconv + nseq) as u32;
        if z.max_open > z.max_active && z.max_active > 0 {
            return Err(Error::config("zns.max_open", format!("{} exceeds max_active ({})", z.max_open, z.max_active)));
        }
        let unit_bytes = lay.page_bytes as u64 * lay.planes_per_die as u64;
        let mut zns = Zns {
            m: if allocate { Media::new(cfg) } else { Media::without_data(cfg) },
            zone_sectors,
            zone_cap,
            zone_blocks: z.zone_blocks,
            width,
            groups,
            zones: (0..nzones as usize)
                .map(|i| Zone {
                    state: if i < nconv { ZoneState::NotWritePointer } else { ZoneState::Empty },
                    written: 0,
                    ready_ns: 0,
                    resets: 0,
                    opened: 0,
                })
                .collect(),
            max_open: if z.max_open == 0 { nseq as u32 } else { z.max_open },
            max_active: if z.max_active == 0 { nseq as u32 } else { z.max_active },
            buffer: WriteBuffer::new((cfg.ftl.write_buffer_bytes / unit_bytes) as usize),
            open_clock: 0,
            nconv,
            conv,
        };
        // Factory bad blocks: a sequential zone holding one is offline from the start (the
        // zone report says so); a segment of the conventional zones' pool holding one is never
        // used, and the pool must keep two erased segments besides the conventional zones'.
        for pz in 0..nphys {
            if !zns.phys_blocks(pz).any(|b| zns.m.is_bad(b)) {
                continue;
            }
            if pz < nseq {
                zns.zones[nconv + pz].state = ZoneState::Offline;
            } else if let Some(c) = zns.conv.as_mut() {
                c.segs[pz - nseq].offline = true;
                c.free.retain(|&k| k != pz - nseq);
            }
        }
        if let Some(c) = zns.conv.as_mut() {
            let good = c.segs.iter().filter(|g| !g.offline).count();
            if good < nconv + 2 {
                return Err(Error::config(
                    "zns.conventional_spare_zones",
                    format!(
                        "factory bad blocks leave {good} usable segments for {nconv} conventional zones; raise conventional_spare_zones"
                    ),
                ));
            }
            if c.segs[c.active].offline {
                c.active = c.free.pop_front().expect("usable segments");
            }
        }
        assert!(zone_cap <= zone_sectors && zone_cap.is_multiple_of(unit), "zone capacity: whole units within the zone");
        Ok(zns)
    }

    pub fn zone_count(&self) -> u32 {
        self.zones.len() as u32
    }
    /// Zone size and capacity in logical blocks (sectors).
    pub fn zone_size(&self) -> u64 {
        self.zone_sectors
    }
    pub fn zone_capacity(&self) -> u64 {
        self.zone_cap
    }
    pub fn max_open(&self) -> u32 {
        self.max_open
    }
    pub fn max_active(&self) -> u32 {
        self.max_active
    }

    fn zone_of(&self, lba: u64) -> Result<usize> {
        let z = (lba / self.zone_sectors) as usize;
        if z >= self.zones.len() {
            return Err(Error::nvme(
                Status::LbaOutOfRange,
                format!("LBA {lba} is beyond the last zone ({} zones of {} blocks)", self.zones.len(), self.zone_sectors),
            ));
        }
        Ok(z)
    }

    /// Conventional zones (host zones 0..n, at the start of the LBA space).
    pub fn conventional_zones(&self) -> u32 {
        self.nconv as u32
    }

    /// Physical zone of sequential host zone `z` (the conventional zones' pool comes after
    /// the sequential zones).
    fn pz(&self, z: usize) -> usize {
        debug_assert!(z >= self.nconv, "zone {z} is conventional: it has no physical zone of its own");
        z - self.nconv
    }

    /// Physical block of physical zone `pz`: die index `d` of its group, plane `p`, zone block `j`.
    fn block(&self, pz: usize, d: u32, p: u32, j: u32) -> u32 {
        let ng = self.groups.len();
        let die = self.groups[pz % ng][d as usize];
        let slot = (pz / ng) as u32;
        die * self.m.lay.blocks_per_die + p * self.m.lay.blocks_per_plane + slot * self.zone_blocks + j
    }

    /// Every block of physical zone `pz`.
    fn phys_blocks(&self, pz: usize) -> impl Iterator<Item = u32> + '_ {
        let (w, planes, zb) = (self.width, self.m.lay.planes_per_die, self.zone_blocks);
        (0..w).flat_map(move |d| (0..planes).flat_map(move |p| (0..zb).map(move |j| self.block(pz, d, p, j))))
    }

    /// Physical sector of offset `o` in physical zone `pz`.
    fn psa(&self, pz: usize, o: u64) -> u32 {
        debug_assert!(o < self.zone_sectors, "offset {o} past the end of a zone");
        let spp = self.m.lay.sectors_per_page as u64;
        let unit = spp * self.m.lay.planes_per_die as u64;
        let (u, r) = (o / unit, o % unit);
        let (plane, slot) = ((r / spp) as u32, (r % spp) as u32);
        let d = (u % self.width as u64) as u32;
        let stripe = u / self.width as u64;
        let ppb = self.m.lay.pages_per_block as u64;
        let (j, page) = ((stripe / ppb) as u32, (stripe % ppb) as u32);
        self.block(pz, d, plane, j) * self.m.lay.sectors_per_block + page * self.m.lay.sectors_per_page + slot
    }

    /// Whether zone `z`'s state agrees with its write pointer (injected read-only and offline
    /// states keep whatever was written).
    fn zone_consistent(&self, z: usize) -> bool {
        let (st, w, cap) = (self.zones[z].state, self.zones[z].written, self.zone_cap);
        let by_state = match st {
            ZoneState::Empty => w == 0,
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => w < cap,
            ZoneState::Closed => w > 0 && w < cap,
            ZoneState::Full => w == cap,
            ZoneState::ReadOnly | ZoneState::Offline => w <= cap,
            ZoneState::NotWritePointer => w == 0,
        };
        by_state && (z < self.nconv) == (st == ZoneState::NotWritePointer)
    }

    fn counts(&self) -> (u32, u32) {
        let open = self.zones.iter().filter(|z| z.state.is_open()).count() as u32;
        let active = self.zones.iter().filter(|z| z.state.is_active()).count() as u32;
        (open, active)
    }

    /// Make room for one more open zone (closing an implicitly open one if needed) and check
    /// the active limit for a zone that is not active yet.
    fn acquire(&mut self, z: usize, implicit_close_ok: bool) -> Result<()> {
        let (open, active) = self.counts();
        let st = self.zones[z].state;
        if !st.is_active() && active >= self.max_active {
            return Err(Error::nvme(
                Status::TooManyActiveZones,
                format!("zone {z}: {active} zones active, the limit is {}", self.max_active),
            ));
        }
        if !st.is_open() && open >= self.max_open {
            // The oldest implicitly opened zone makes room; explicitly opened ones never do.
            let victim = if implicit_close_ok {
                (0..self.zones.len())
                    .filter(|&i| self.zones[i].state == ZoneState::ImplicitlyOpen)
                    .min_by_key(|&i| (self.zones[i].opened, i))
            } else {
                None
            };
            match victim {
                Some(v) => self.close_zone(v)?,
                None => {
                    return Err(Error::nvme(
                        Status::TooManyOpenZones,
                        format!("zone {z}: {open} zones open, the limit is {}", self.max_open),
                    ))
                }
            }
        }
        debug_assert!(st.is_open() || self.counts().0 < self.max_open, "zone {z}: no open resource after acquire");
        Ok(())
    }

    fn close_zone(&mut self, z: usize) -> Result<()> {
        let zone = &mut self.zones[z];
        match zone.state {
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => {
                assert!(zone.written < self.zone_cap, "open zone {z} at its capacity (it should be full)");
                zone.state = if zone.written == 0 { ZoneState::Empty } else { ZoneState::Closed };
                Ok(())
            }
            ZoneState::Closed => Ok(()),
            s => Err(Error::nvme(Status::InvalidZoneStateTransition, format!("zone {z} cannot be closed from {s:?}"))),
        }
    }

    fn unit_sectors(&self) -> u64 {
        (self.m.lay.sectors_per_page * self.m.lay.planes_per_die) as u64
    }

    /// Program the unit of zone `z` that ends at offset `end` (exclusive).
    fn program_unit(&mut self, z: usize, end: u64) {
        debug_assert!(end.is_multiple_of(self.unit_sectors()) && end <= self.zone_cap, "zone {z}: unit ending at {end}");
        self.program_phys(self.pz(z), end, self.zones[z].ready_ns);
        self.zones[z].ready_ns = 0;
    }

    /// Program the unit of physical zone `pz` that ends at offset `end`, its data ready at
    /// `ready_ns`.
    fn program_phys(&mut self, pz: usize, end: u64, ready_ns: u64) {
        let unit = self.unit_sectors();
        let first = end - unit;
        let psa = self.psa(pz, first);
        let b0 = psa / self.m.lay.sectors_per_block;
        let planes = self.m.lay.planes_per_die;
        let page = (psa % self.m.lay.sectors_per_block) / self.m.lay.sectors_per_page;
        for p in 0..planes {
            let b = b0 + p * self.m.lay.blocks_per_plane;
            let m = &mut self.m.blocks[b as usize];
            // Pages program in order; a padded unit programs again when the host fills it.
            debug_assert!(
                m.programmed_pages as u32 == page || m.programmed_pages as u32 == page + 1,
                "block {b}: page {page} out of order"
            );
            debug_assert_ne!(m.state, BlockState::Bad, "program of bad block {b}");
            m.state = if page + 1 == self.m.lay.pages_per_block { BlockState::Full } else { BlockState::Open };
            m.programmed_pages = (page + 1) as u16;
        }
        let die = self.m.lay.die_of_block(b0);
        let earliest = ready_ns.max(self.m.blocks[b0 as usize].ready_ns);
        let done = self.m.program(die, planes, earliest);
        if self.m.timing() {
            self.buffer.programmed(done);
        }
    }

    /// Pad and program zone `z`'s partial unit, if any.
    fn pad(&mut self, z: usize) {
        let unit = self.unit_sectors();
        let w = self.zones[z].written;
        if !w.is_multiple_of(unit) {
            let end = (w / unit + 1) * unit;
            debug_assert!(end <= self.zone_cap, "zone {z}: padding past its capacity");
            self.m.c.pad_sectors += end - w;
            self.program_unit(z, end);
        }
    }

    /// Write `sectors` at `lba` (a write) or at the write pointer of the zone starting at
    /// `lba` (a zone append). Returns (first LBA written, completion time).
    pub fn write_zone(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, append: bool, fua: bool, now: u64) -> Result<(u64, u64)> {
        if sectors == 0 {
            return Err(Error::nvme(Status::InvalidField, "zero-length write"));
        }
        let z = self.zone_of(lba)?;
        let start = z as u64 * self.zone_sectors;
        if z < self.nconv {
            if append {
                return Err(Error::nvme(
                    Status::InvalidField,
                    format!("zone append to conventional zone {z}: conventional zones have no write pointer"),
                ));
            }
            let end = lba + sectors as u64;
            if end > self.conv_sectors() {
                return Err(Error::nvme(
                    Status::ZoneBoundaryError,
                    format!("{sectors} blocks at {lba} cross from the conventional zones into sequential zone {}", self.nconv),
                ));
            }
            return Ok((lba, self.conv_write(lba, sectors, data, fua, now)?));
        }
        if append && lba != start {
            return Err(Error::nvme(Status::InvalidField, format!("zone append must name the zone start LBA ({start}), not {lba}")));
        }
        match self.zones[z].state {
            ZoneState::Full => return Err(Error::nvme(Status::ZoneIsFull, format!("zone {z} is full"))),
            ZoneState::ReadOnly => return Err(Error::nvme(Status::ZoneIsReadOnly, format!("zone {z} is read-only"))),
            ZoneState::Offline => return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline"))),
            _ => {}
        }
        let wp = start + self.zones[z].written;
        if !append && lba != wp {
            return Err(Error::nvme(Status::ZoneInvalidWrite, format!("write at LBA {lba} but zone {z}'s write pointer is {wp}")));
        }
        if self.zones[z].written + sectors as u64 > self.zone_cap {
            return Err(Error::nvme(
                Status::ZoneBoundaryError,
                format!("{sectors} blocks at {wp} cross zone {z}'s capacity (ends at {})", start + self.zone_cap),
            ));
        }
        let sb = self.m.lay.sector_bytes as usize;
        if let (Some(d), true) = (data, self.m.data.is_some()) {
            if d.len() != sectors as usize * sb {
                return Err(Error::Command(format!("write of {sectors} sectors carries {} bytes", d.len())));
            }
        }
        if matches!(self.zones[z].state, ZoneState::Empty | ZoneState::Closed) {
            self.acquire(z, true)?;
            self.zones[z].state = ZoneState::ImplicitlyOpen;
            self.open_clock += 1;
            self.zones[z].opened = self.open_clock;
        }
        debug_assert!(self.zones[z].state.is_open(), "zone {z} takes a write in state {:?}", self.zones[z].state);
        let t = now + self.m.tl.command_overhead_ns();
        self.buffer.begin(t);
        self.zones[z].ready_ns = self.zones[z].ready_ns.max(t);
        // Sectors of a page are consecutive PSAs: compute the address once per page and count
        // unit positions instead of dividing per sector.
        let unit = self.unit_sectors();
        let spp = self.m.lay.sectors_per_page as u64;
        let o0 = self.zones[z].written;
        let mut in_page = o0 % spp;
        let mut in_unit = o0 % unit;
        let pz = self.pz(z);
        let mut psa = self.psa(pz, o0);
        let mut block = psa / self.m.lay.sectors_per_block;
        for i in 0..sectors as u64 {
            let o = o0 + i;
            if i > 0 && in_page == 0 {
                psa = self.psa(pz, o);
                block = psa / self.m.lay.sectors_per_block;
            }
            if let (Some(store), Some(d)) = (self.m.data.as_mut(), data) {
                store.put(psa, &d[i as usize * sb..(i as usize + 1) * sb]);
            }
            self.m.blocks[block as usize].valid += 1;
            psa += 1;
            in_page += 1;
            if in_page == spp {
                in_page = 0;
            }
            in_unit += 1;
            if in_unit == unit {
                in_unit = 0;
                self.zones[z].written = o + 1;
                self.program_unit(z, o + 1);
            }
        }
        self.zones[z].written = o0 + sectors as u64;
        self.m.c.host_write_cmds += 1;
        self.m.c.host_write_bytes += sectors as u64 * sb as u64;
        let sync = fua || self.buffer.write_through();
        if sync {
            self.pad(z);
        }
        if self.zones[z].written == self.zone_cap {
            self.pad(z);
            self.zones[z].state = ZoneState::Full;
        }
        debug_assert!(self.zone_consistent(z), "zone {z}: state {:?} disagrees with its write pointer", self.zones[z].state);
        let done = if self.m.tl.enabled { self.buffer.completion(sync, t) } else { now };
        Ok((wp, done))
    }

    /// Zone Management Send. `select_all` applies the action to every zone it applies to.
    pub fn zone_action(&mut self, lba: u64, action: ZoneAction, select_all: bool, now: u64) -> Result<u64> {
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        if select_all {
            for z in 0..self.zones.len() {
                let st = self.zones[z].state;
                let applies = match action {
                    ZoneAction::Close => st.is_open(),
                    ZoneAction::Finish => st.is_active(),
                    ZoneAction::Open => st == ZoneState::Closed,
                    ZoneAction::Reset => st.is_active() || st == ZoneState::Full,
                    ZoneAction::Offline => st == ZoneState::ReadOnly,
                };
                if applies {
                    done = done.max(self.zone_action_one(z, action, t)?);
                }
            }
            return Ok(if self.m.tl.enabled { done } else { now });
        }
        let z = self.zone_of(lba)?;
        if !lba.is_multiple_of(self.zone_sectors) {
            return Err(Error::nvme(Status::InvalidField, format!("LBA {lba} is not a zone start")));
        }
        if z < self.nconv {
            return Err(Error::nvme(Status::InvalidField, format!("zone {z} is conventional: zone management does not apply to it")));
        }
        let d = self.zone_action_one(z, action, t)?;
        Ok(if self.m.tl.enabled { d } else { now })
    }

    fn zone_action_one(&mut self, z: usize, action: ZoneAction, t: u64) -> Result<u64> {
        use ZoneState::*;
        let st = self.zones[z].state;
        let bad = |what: &str| Error::nvme(Status::InvalidZoneStateTransition, format!("zone {z}: cannot {what} a zone in state {st:?}"));
        match action {
            ZoneAction::Open => match st {
                ExplicitlyOpen => {}
                ImplicitlyOpen => self.zones[z].state = ExplicitlyOpen,
                Empty | Closed => {
                    self.acquire(z, true)?;
                    self.zones[z].state = ExplicitlyOpen;
                }
                ReadOnly => return Err(Error::nvme(Status::ZoneIsReadOnly, format!("zone {z} is read-only"))),
                Offline => return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline"))),
                Full | NotWritePointer => return Err(bad("open")),
            },
            ZoneAction::Close => match st {
                ImplicitlyOpen | ExplicitlyOpen | Closed => self.close_zone(z)?,
                ReadOnly => return Err(Error::nvme(Status::ZoneIsReadOnly, format!("zone {z} is read-only"))),
                Offline => return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline"))),
                Empty | Full | NotWritePointer => return Err(bad("close")),
            },
            ZoneAction::Finish => match st {
                Full => {}
                NotWritePointer => return Err(bad("finish")),
                Empty | ImplicitlyOpen | ExplicitlyOpen | Closed => {
                    if st == Empty {
                        let (_, active) = self.counts();
                        if active >= self.max_active {
                            return Err(Error::nvme(
                                Status::TooManyActiveZones,
                                format!("zone {z}: finishing an empty zone needs an active resource ({active} active)"),
                            ));
                        }
                    }
                    self.pad(z);
                    self.zones[z].written = self.zone_cap;
                    self.zones[z].state = Full;
                }
                ReadOnly => return Err(Error::nvme(Status::ZoneIsReadOnly, format!("zone {z} is read-only"))),
                Offline => return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline"))),
            },
            ZoneAction::Reset => match st {
                Empty => {}
                NotWritePointer => return Err(bad("reset")),
                ImplicitlyOpen | ExplicitlyOpen | Closed | Full => return Ok(self.reset_zone(z, t)),
                ReadOnly => return Err(Error::nvme(Status::ZoneIsReadOnly, format!("zone {z} is read-only"))),
                Offline => return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline"))),
            },
            ZoneAction::Offline => match st {
                ReadOnly => {
                    self.zones[z].state = Offline;
                    self.zones[z].written = 0;
                }
                Offline => {}
                _ => return Err(bad("take offline")),
            },
        }
        assert!(self.zone_consistent(z), "zone {z}: {action:?} left state {:?} and its write pointer apart", self.zones[z].state);
        Ok(t)
    }

    /// Erase the zone's blocks (those holding data) and empty it; returns the completion time.
    fn reset_zone(&mut self, z: usize, t: u64) -> u64 {
        let (done, retired) = self.erase_phys(self.pz(z), t);
        let zone = &mut self.zones[z];
        // A zone whose block wore out (or failed its erase) cannot be written again: it goes
        // offline, as a ZNS device takes a zone offline when its media fails.
        zone.state = if retired { ZoneState::Offline } else { ZoneState::Empty };
        zone.written = 0;
        zone.resets += 1;
        debug_assert!(
            self.phys_blocks(self.pz(z)).all(|b| matches!(self.m.blocks[b as usize].state, BlockState::Free | BlockState::Bad)),
            "zone {z}: a block not erased by its reset"
        );
        done
    }

    /// Erase the blocks of physical zone `pz` that hold data; returns the completion time and
    /// whether the media retired any of them.
    fn erase_phys(&mut self, pz: usize, t: u64) -> (u64, bool) {
        let mut done = t;
        let mut retired = false;
        for d in 0..self.width {
            for p in 0..self.m.lay.planes_per_die {
                for j in 0..self.zone_blocks {
                    let b = self.block(pz, d, p, j);
                    let m = &self.m.blocks[b as usize];
                    if m.programmed_pages == 0 && m.valid == 0 {
                        continue;
                    }
                    let e = self.m.erase(b, t);
                    done = done.max(e.done_ns);
                    retired |= e.retired;
                }
            }
        }
        (done, retired)
    }

    /// Copy the contents of `out.len() / sector_bytes` sectors from `lba` without timing or
    /// counting anything: for instruments that look at what the media holds (a host's
    /// deletion tracker), never for the host's own I/O. Unwritten sectors read as zeros.
    pub fn peek(&self, lba: u64, out: &mut [u8]) -> Result<()> {
        let sb = self.m.lay.sector_bytes as usize;
        assert!(out.len().is_multiple_of(sb), "peek of a partial sector");
        self.peek_span(lba, (out.len() / sb) as u64, 0, out)
    }

    /// Like [`Zns::peek`], for `out.len()` bytes starting `skip` bytes into the `sectors`
    /// sectors at `lba`: only those bytes are copied.
    pub fn peek_span(&self, lba: u64, sectors: u64, skip: usize, out: &mut [u8]) -> Result<()> {
        let sb = self.m.lay.sector_bytes as usize;
        if lba + sectors > self.logical_sectors() {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("peek of {sectors} blocks at {lba} beyond the namespace")));
        }
        assert!(skip + out.len() <= sectors as usize * sb, "peek span past its sectors");
        for i in (skip / sb) as u64..sectors {
            // This sector's bytes within the span, and where they land in `out`.
            let s0 = (i as usize * sb).max(skip);
            let s1 = ((i as usize + 1) * sb).min(skip + out.len());
            if s0 >= s1 {
                break;
            }
            let dst = &mut out[s0 - skip..s1 - skip];
            let l = lba + i;
            let z = (l / self.zone_sectors) as usize;
            let o = l % self.zone_sectors;
            match (&self.m.data, z >= self.nconv && o < self.zones[z].written) {
                (Some(store), true) => store.get_part(self.psa(self.pz(z), o), s0 - i as usize * sb, dst),
                _ => dst.fill(0),
            }
        }
        Ok(())
    }

    /// Read `sectors` sectors at `lba` (timed and counted as such) and copy bytes
    /// `skip..skip + out.len()` of them into `out`: a host reading a byte range that starts
    /// or ends inside a sector gets just that range, without a bounce buffer.
    pub fn read_span(&mut self, lba: u64, sectors: u32, skip: usize, mut out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        if sectors == 0 || lba + sectors as u64 > self.logical_sectors() {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("read of {sectors} blocks at {lba} beyond the namespace")));
        }
        let sb = self.m.lay.sector_bytes as usize;
        if let Some(buf) = out.as_deref() {
            assert!(skip + buf.len() <= sectors as usize * sb, "read span past its sectors");
        }
        let t = now + self.m.tl.command_overhead_ns();
        let mut done = t;
        let mut last_page = u32::MAX;
        for i in 0..sectors as u64 {
            let l = lba + i;
            let z = (l / self.zone_sectors) as usize;
            let o = l % self.zone_sectors;
            if self.zones[z].state == ZoneState::Offline {
                return Err(Error::nvme(Status::ZoneIsOffline, format!("zone {z} is offline")));
            }
            let (written, psa) = match &self.conv {
                Some(conv) if z < self.nconv => match conv.l2p[l as usize] {
                    NIL => (false, 0),
                    pool => (true, self.psa(conv.base + (pool as u64 / self.zone_sectors) as usize, pool as u64 % self.zone_sectors)),
                },
                _ => (o < self.zones[z].written, self.psa(self.pz(z), o)),
            };
            if let Some(buf) = out.as_deref_mut() {
                // This sector's bytes within the span, and where they land in `buf`.
                let s0 = (i as usize * sb).max(skip);
                let s1 = ((i as usize + 1) * sb).min(skip + buf.len());
                if s0 < s1 {
                    let dst = &mut buf[s0 - skip..s1 - skip];
                    match &self.m.data {
                        Some(store) if written => store.get_part(psa, s0 - i as usize * sb, dst),
                        _ => dst.fill(0),
                    }
                }
            }
            let page = psa / self.m.lay.sectors_per_page;
            let b = psa / self.m.lay.sectors_per_block;
            let programmed =
                (psa % self.m.lay.sectors_per_block) / self.m.lay.sectors_per_page < self.m.blocks[b as usize].programmed_pages as u32;
            if written && programmed && page != last_page {
                last_page = page;
                let die = self.m.lay.die_of_block(b);
                done = done.max(self.m.read(die, sb as u64, t));
            }
        }
        self.m.c.host_read_cmds += 1;
        self.m.c.host_read_bytes += sectors as u64 * sb as u64;
        Ok(if self.m.tl.enabled { done } else { now })
    }

    /// Mark a zone read-only or offline (media failure injection for host tests).
    pub fn inject_zone_state(&mut self, z: usize, state: ZoneState) -> Result<()> {
        if !matches!(state, ZoneState::ReadOnly | ZoneState::Offline) {
            return Err(Error::Command("only read-only and offline can be injected".into()));
        }
        if z < self.nconv {
            return Err(Error::Command(format!("zone {z} is conventional; inject into a sequential zone")));
        }
        let zone = self.zones.get_mut(z).ok_or_else(|| Error::Command(format!("no zone {z}")))?;
        zone.state = state;
        Ok(())
    }

    /// Report Zones from the zone holding `lba`: those in state `filter` (None = all), at most
    /// `max` descriptors (a partial report).
    pub fn report(&self, lba: u64, filter: Option<ZoneState>, max: usize) -> Result<Vec<ZoneDescriptor>> {
        let z0 = self.zone_of(lba)?;
        Ok((z0..self.zones.len())
            .filter(|&z| filter.is_none_or(|f| self.zones[z].state == f))
            .take(max)
            .map(|z| {
                let start = z as u64 * self.zone_sectors;
                let zone = &self.zones[z];
                if z < self.nconv {
                    return ZoneDescriptor {
                        index: z as u32,
                        zone_type: ZoneType::Conventional,
                        state: zone.state,
                        zslba: start,
                        zcap: self.zone_sectors,
                        wp: u64::MAX,
                        reset_count: 0,
                    };
                }
                let wp = if matches!(zone.state, ZoneState::Full | ZoneState::ReadOnly | ZoneState::Offline) {
                    u64::MAX
                } else {
                    start + zone.written
                };
                ZoneDescriptor {
                    index: z as u32,
                    zone_type: ZoneType::SequentialWriteRequired,
                    state: zone.state,
                    zslba: start,
                    zcap: self.zone_cap,
                    wp,
                    reset_count: zone.resets,
                }
            })
            .collect())
    }
}

impl BlockDevice for Zns {
    fn media(&self) -> &Media {
        &self.m
    }
    fn logical_sectors(&self) -> u64 {
        self.zones.len() as u64 * self.zone_sectors
    }
    fn write(&mut self, lba: u64, sectors: u32, data: Option<&[u8]>, opts: WriteOpts, now: u64) -> Result<u64> {
        Ok(self.write_zone(lba, sectors, data, false, opts.fua, now)?.1)
    }
    fn read(&mut self, lba: u64, sectors: u32, out: Option<&mut [u8]>, now: u64) -> Result<u64> {
        self.read_span(lba, sectors, 0, out, now)
    }
    /// Deallocate on sequential zones changes nothing on the media (the zone is still written
    /// up to its write pointer); it is accepted and counted. On conventional zones it unmaps
    /// the sectors, so their GC need not copy them.
    fn trim(&mut self, lba: u64, sectors: u32, now: u64) -> Result<u64> {
        if lba + sectors as u64 > self.logical_sectors() {
            return Err(Error::nvme(Status::LbaOutOfRange, format!("deallocate of {sectors} blocks at {lba} beyond the namespace")));
        }
        for l in lba..(lba + sectors as u64).min(self.conv_sectors()) {
            self.conv_unmap(l);
        }
        self.m.c.host_trim_cmds += 1;
        self.m.c.host_trim_bytes += sectors as u64 * self.m.lay.sector_bytes as u64;
        Ok(if self.m.tl.enabled { now + self.m.tl.command_overhead_ns() } else { now })
    }
    fn flush(&mut self, now: u64) -> Result<u64> {
        self.conv_pad();
        for z in 0..self.zones.len() {
            if self.zones[z].state.is_active() {
                self.pad(z);
            }
        }
        self.m.c.host_flush_cmds += 1;
        Ok(if self.m.tl.enabled { (now + self.m.tl.command_overhead_ns()).max(self.buffer.drained_at()) } else { now })
    }
    fn free_blocks(&self) -> u32 {
        self.m.blocks.iter().filter(|b| b.programmed_pages == 0 && b.state != BlockState::Bad).count() as u32
    }
    fn mapped_sectors(&self) -> u64 {
        let conv: u64 = self.conv.as_ref().map_or(0, |c| c.segs.iter().map(|s| s.valid).sum());
        conv + self.zones.iter().filter(|z| z.state != ZoneState::Offline).map(|z| z.written).sum::<u64>()
    }
    fn personality_metrics(&self, _base: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
        let mut states = std::collections::BTreeMap::new();
        for z in &self.zones {
            *states.entry(format!("{:?}", z.state)).or_insert(0u64) += 1;
        }
        vec![(
            "zns",
            serde_json::json!({
                "zones": self.zones.len(),
                "zone_size_sectors": self.zone_sectors,
                "zone_capacity_sectors": self.zone_cap,
                "max_open": self.max_open,
                "max_active": self.max_active,
                "zone_resets_total": self.zones.iter().map(|z| z.resets).sum::<u64>(),
                "zone_states": states,
                "conventional_zones": self.nconv,
                "conventional": self.conv.as_ref().map(|c| serde_json::json!({
                    "pool_segments": c.segs.len(),
                    "free_segments": c.free.len(),
                    "gc_segments_collected": c.gc_segments,
                    "valid_sectors": c.segs.iter().map(|s| s.valid).sum::<u64>(),
                })),
            }),
        )]
    }
    fn check_invariants(&self) {
        self.m.check_invariants();
        let (open, active) = self.counts();
        assert!(open <= self.max_open && active <= self.max_active, "open {open} / active {active} over the limits");
        for (i, z) in self.zones.iter().enumerate() {
            assert!(z.written <= self.zone_cap, "zone {i} written past its capacity");
            if matches!(z.state, ZoneState::Empty | ZoneState::Offline) {
                assert_eq!(z.written, 0, "zone {i} ({:?}) has data", z.state);
            }
            assert_eq!(i < self.nconv, z.state == ZoneState::NotWritePointer, "zone {i}: only conventional zones lack a write pointer");
            if i >= self.nconv && self.phys_blocks(self.pz(i)).any(|b| self.m.is_bad(b)) {
                assert_eq!(z.state, ZoneState::Offline, "zone {i} holds a bad block but is not offline");
            }
        }
        self.check_conv_invariants();
    }
}

/// ZNS as the host log (`hostlog.rs`) sees it: the sequential zones in one lane, appended
/// with Zone Append; writes below the conventional zones' end go there in place.
impl Containers for Zns {
    const NAME: &'static str = "zone";
    fn lanes(&self) -> usize {
        1
    }
    fn lane(&self, _lane: usize) -> std::ops::Range<usize> {
        self.nconv..self.zones.len()
    }
    fn span(&self) -> u64 {
        self.zone_sectors
    }
    fn capacity(&self) -> u64 {
        self.zone_cap
    }
    fn write_unit(&self) -> u32 {
        1
    }
    fn direct_sectors(&self) -> u64 {
        self.conv_sectors()
    }
    fn container(&self, c: usize) -> (Container, u64) {
        let z = &self.zones[c];
        let st = match z.state {
            ZoneState::Empty => Container::Free,
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen | ZoneState::Closed | ZoneState::NotWritePointer => Container::Open,
            ZoneState::Full => Container::Full,
            ZoneState::ReadOnly => Container::ReadOnly,
            ZoneState::Offline => Container::Offline,
        };
        (st, z.written)
    }
    fn append(&mut self, c: usize, sectors: u32, data: Option<&[u8]>, fua: bool, now: u64) -> Result<u64> {
        Ok(self.write_zone(c as u64 * self.zone_sectors, sectors, data, true, fua, now)?.1)
    }
    fn reset(&mut self, c: usize, now: u64) -> Result<u64> {
        self.zone_action_one(c, ZoneAction::Reset, now)
    }
}
