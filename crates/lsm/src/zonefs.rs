//! A zone file layer in the spirit of ZenFS (Western Digital's RocksDB file system for zoned
//! devices), on ssdlab's ZNS personality:
//!
//! - a file is a list of extents; an extent lies in one zone and never crosses its end;
//! - every file carries a lifetime hint (WAL short, L0/L1 medium, L2 long, deeper levels
//!   extreme, as RocksDB passes them) and goes to the open zone whose lifetime is the
//!   closest one not shorter than the file's, or to a fresh zone of its own lifetime;
//!   a zone has one writer at a time;
//! - a zone is reset only when no live extent is left in it (the reset is the erase);
//! - below `gc_free_fraction` empty zones, zone GC migrates the live extents of a victim
//!   zone and resets it;
//! - a zone with less than `finish_fraction` of its capacity left is finished, releasing its
//!   active resource.
//!
//! It also keeps, for the deletion measurements, which files ever wrote to each zone since
//! its last reset: a deleted file is *erased* once every zone it wrote to has been reset,
//! and the layer reports that moment.

use ssdlab_core::config::{Personality, StorageMode};
use ssdlab_core::ftl::victim::greedy;
use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::{Config, Device};

use crate::config::{GcMethod, ZoneLayerConfig};
use crate::error::{Error, Result};

pub use crate::sst::FileId;

/// RocksDB's write-lifetime hints (the values of its `Env::WriteLifeTimeHint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lifetime {
    Short = 2,
    Medium = 3,
    Long = 4,
    Extreme = 5,
}

impl Lifetime {
    /// The hint RocksDB gives an SST of `level`.
    pub fn of_level(level: usize) -> Lifetime {
        match level {
            0 | 1 => Lifetime::Medium,
            2 => Lifetime::Long,
            _ => Lifetime::Extreme,
        }
    }
}

/// Where a file's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// With zones of this lifetime (ZenFS's rule).
    Lifetime(Lifetime),
    /// In zones of their own, shared only with other such files (the zone-aware design's
    /// separate tombstone zones).
    Separate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Wal,
    Sst,
}

#[derive(Debug, Clone, Copy)]
struct Extent {
    zone: u32,
    /// First sector, relative to the zone start.
    start: u64,
    sectors: u64,
    /// Offset of the extent's first byte in the file.
    file_off: u64,
}

#[derive(Debug)]
struct FileInfo {
    kind: FileKind,
    placement: Placement,
    extents: Vec<Extent>,
    /// Bytes of the file (padding written by syncs included: a WAL reader skips it).
    size: u64,
    /// Bytes appended but not yet written (less than a sector).
    pending: Vec<u8>,
    alive: bool,
    /// Zone this file holds as its writer.
    writing: Option<u32>,
    /// When the file is expected to die (a tombstone file's TTL expiry), for GC.
    predicted_death_ns: Option<u64>,
    /// Zones written by this file since their last reset.
    unerased: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Zone {
    placement: Option<Placement>,
    written: u64,
    live: u64,
    writer: Option<FileId>,
    full: bool,
    offline: bool,
    /// Files that wrote here since the last reset.
    files: Vec<FileId>,
}

/// Something that happened on the media, for the deletion measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsEvent {
    /// Every zone the (deleted) file ever wrote to has been reset since: its bytes are gone
    /// from the NAND.
    FileErased { id: FileId, at_ns: u64 },
}

/// Counters of the zone layer.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ZoneStats {
    /// Bytes written to zones (whole sectors: padding and GC migration included).
    pub zone_write_bytes: u64,
    pub zone_read_bytes: u64,
    pub gc_migrated_bytes: u64,
    pub gc_zones: u64,
    pub zone_resets: u64,
    pub zones_finished: u64,
    pub pad_bytes: u64,
    /// Zone resets of zones GC emptied.
    pub gc_resets: u64,
}

/// The zone file layer over a ZNS device.
pub struct ZoneFs {
    dev: Device,
    cfg: ZoneLayerConfig,
    gc_method: GcMethod,
    gc_horizon_ns: u64,
    sb: u64,
    zone_sectors: u64,
    cap: u64,
    max_active: u32,
    zones: Vec<Zone>,
    /// Empty zones, least recently reset first.
    free: std::collections::VecDeque<u32>,
    files: std::collections::HashMap<FileId, FileInfo>,
    next_id: FileId,
    pub stats: ZoneStats,
    events: Vec<FsEvent>,
    in_gc: bool,
}

/// The device the zone file layer can use: a ZNS device of sequential zones only.
pub fn check_device(cfg: &Config) -> Result<()> {
    if cfg.personality != Personality::Zns {
        return Err(Error::Config(format!("device.personality: the LSM store needs a zns device, not {:?}", cfg.personality)));
    }
    if cfg.zns.conventional_zones != 0 {
        return Err(Error::Config("device.zns.conventional_zones: the zone file layer uses sequential zones only; set it to 0".into()));
    }
    Ok(())
}

impl ZoneFs {
    /// Format a ZNS device of `cfg` (made data-backed: the store reads its files back) and
    /// lay the file layer over its zones.
    pub fn new(mut cfg: Config, zcfg: ZoneLayerConfig, gc_method: GcMethod, gc_horizon_ns: u64) -> Result<ZoneFs> {
        check_device(&cfg)?;
        cfg.storage = StorageMode::Data;
        let dev = Device::new(cfg)?;
        let z = dev.zns().expect("zns device");
        let nz = z.zone_count();
        let report = z.report(0, None, nz as usize)?;
        let zones: Vec<Zone> = report
            .iter()
            .map(|d| Zone {
                placement: None,
                written: 0,
                live: 0,
                writer: None,
                full: false,
                offline: d.state == ZoneState::Offline,
                files: vec![],
            })
            .collect();
        let dev_active = z.max_active();
        let max_active = if zcfg.max_active == 0 { dev_active } else { zcfg.max_active.min(dev_active) };
        if max_active < 3 {
            return Err(Error::Config(format!(
                "lsm.zones.max_active: {max_active} active zones are too few (the WAL, SSTs and GC need 3)"
            )));
        }
        let free = (0..nz).filter(|&i| !zones[i as usize].offline).collect::<std::collections::VecDeque<_>>();
        if free.len() < 4 {
            return Err(Error::Config(format!("device: {} usable zones; the zone file layer needs at least 4", free.len())));
        }
        Ok(ZoneFs {
            sb: dev.config().geometry.sector_bytes as u64,
            zone_sectors: z.zone_size(),
            cap: z.zone_capacity(),
            max_active,
            dev,
            cfg: zcfg,
            gc_method,
            gc_horizon_ns,
            zones,
            free,
            files: Default::default(),
            next_id: 1,
            stats: ZoneStats::default(),
            events: vec![],
            in_gc: false,
        })
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }
    pub fn sector_bytes(&self) -> u64 {
        self.sb
    }
    /// Capacity of one zone in bytes.
    pub fn zone_capacity_bytes(&self) -> u64 {
        self.cap * self.sb
    }
    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }
    /// Zones holding no data, ready to be written.
    pub fn free_zones(&self) -> usize {
        self.free.len()
    }
    pub fn usable_zones(&self) -> usize {
        self.zones.iter().filter(|z| !z.offline).count()
    }
    /// Bytes of live extents (what files occupy on flash, in whole sectors).
    pub fn live_bytes(&self) -> u64 {
        self.zones.iter().map(|z| z.live).sum::<u64>() * self.sb
    }
    /// Bytes written in zones not reset since (live plus dead data).
    pub fn occupied_bytes(&self) -> u64 {
        self.zones.iter().map(|z| z.written).sum::<u64>() * self.sb
    }
    fn active_count(&self) -> u32 {
        self.zones.iter().filter(|z| z.written > 0 && !z.full).count() as u32
    }
    /// Files not yet deleted.
    pub fn live_files(&self) -> usize {
        self.files.values().filter(|f| f.alive).count()
    }

    /// Events since the last call.
    pub fn take_events(&mut self) -> Vec<FsEvent> {
        std::mem::take(&mut self.events)
    }

    pub fn create(&mut self, kind: FileKind, placement: Placement, predicted_death_ns: Option<u64>) -> FileId {
        let id = self.next_id;
        self.next_id += 1;
        self.files.insert(
            id,
            FileInfo {
                kind,
                placement,
                extents: vec![],
                size: 0,
                pending: vec![],
                alive: true,
                writing: None,
                predicted_death_ns,
                unerased: vec![],
            },
        );
        id
    }

    fn file(&self, id: FileId) -> &FileInfo {
        self.files.get(&id).unwrap_or_else(|| panic!("no file {id}"))
    }
    fn file_mut(&mut self, id: FileId) -> &mut FileInfo {
        self.files.get_mut(&id).unwrap_or_else(|| panic!("no file {id}"))
    }

    pub fn file_size(&self, id: FileId) -> u64 {
        let f = self.file(id);
        f.size + f.pending.len() as u64
    }
    /// Zones a file's live extents are in, with the file's bytes in each.
    pub fn file_zones(&self, id: FileId) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = vec![];
        for e in &self.file(id).extents {
            match v.iter_mut().find(|(z, _)| *z == e.zone) {
                Some(x) => x.1 += e.sectors * self.sb,
                None => v.push((e.zone, e.sectors * self.sb)),
            }
        }
        v
    }
    /// Live bytes of zone `z`.
    pub fn zone_live_bytes(&self, z: u32) -> u64 {
        self.zones[z as usize].live * self.sb
    }

    /// Append bytes to a file; whole sectors are written as they fill, the rest waits for
    /// more data, `sync` or `close`. Returns the completion time of what was written (`now`
    /// if nothing was).
    pub fn append(&mut self, id: FileId, data: &[u8], now: u64) -> Result<u64> {
        let sb = self.sb as usize;
        let f = self.file_mut(id);
        assert!(f.alive, "append to deleted file {id}");
        if f.pending.is_empty() && data.len() >= sb {
            // Whole sectors straight from the caller's buffer.
            let whole = data.len() / sb * sb;
            let done = self.write_sectors(id, &data[..whole], now)?;
            self.file_mut(id).pending.extend_from_slice(&data[whole..]);
            return Ok(done);
        }
        f.pending.extend_from_slice(data);
        if f.pending.len() < sb {
            return Ok(now);
        }
        let whole = f.pending.len() / sb * sb;
        let buf: Vec<u8> = f.pending.drain(..whole).collect();
        self.write_sectors(id, &buf, now)
    }

    /// Write the partial sector, padded with zeros (the file's size grows by the padding).
    pub fn sync(&mut self, id: FileId, now: u64) -> Result<u64> {
        let sb = self.sb as usize;
        let f = self.file_mut(id);
        if f.pending.is_empty() {
            return Ok(now);
        }
        let mut buf = std::mem::take(&mut f.pending);
        let pad = sb - buf.len();
        buf.resize(sb, 0);
        self.stats.pad_bytes += pad as u64;
        self.write_sectors(id, &buf, now)
    }

    /// Sync and stop writing: the file's zone is free for other writers.
    pub fn close(&mut self, id: FileId, now: u64) -> Result<u64> {
        let done = self.sync(id, now)?;
        if let Some(z) = self.file_mut(id).writing.take() {
            self.zones[z as usize].writer = None;
        }
        Ok(done)
    }

    /// Write a whole file at once (an SST): create, write, close. Returns (id, completion).
    pub fn write_file(
        &mut self,
        kind: FileKind,
        placement: Placement,
        predicted_death_ns: Option<u64>,
        data: &[u8],
        now: u64,
    ) -> Result<(FileId, u64)> {
        let id = self.create(kind, placement, predicted_death_ns);
        let written = self.append(id, data, now).and_then(|a| Ok(a.max(self.close(id, now)?)));
        match written {
            Ok(done) => Ok((id, done)),
            Err(e) => {
                // No room (or a device error) part of the way: the part written is not a file.
                self.delete(id, now)?;
                Err(e)
            }
        }
    }

    fn write_sectors(&mut self, id: FileId, mut buf: &[u8], now: u64) -> Result<u64> {
        let sb = self.sb;
        debug_assert!((buf.len() as u64).is_multiple_of(sb));
        let mut done = now;
        while !buf.is_empty() {
            let z = self.zone_for(id, now)?;
            let zone = &self.zones[z as usize];
            let room = self.cap - zone.written;
            let n = (buf.len() as u64 / sb).min(room);
            assert!(n > 0, "zone {z} handed out with no room");
            let start = zone.written;
            let lba = z as u64 * self.zone_sectors + start;
            let bytes = (n * sb) as usize;
            let (_, d) = self.dev.zns_mut().unwrap().write_zone(lba, n as u32, Some(&buf[..bytes]), false, false, now)?;
            done = done.max(d);
            self.stats.zone_write_bytes += n * sb;
            let zone = &mut self.zones[z as usize];
            zone.written += n;
            zone.live += n;
            let f = self.files.get_mut(&id).unwrap();
            match f.extents.last_mut() {
                Some(e) if e.zone == z && e.start + e.sectors == start => e.sectors += n,
                _ => f.extents.push(Extent { zone: z, start, sectors: n, file_off: f.size }),
            }
            f.size += n * sb;
            if !f.unerased.contains(&z) {
                f.unerased.push(z);
                self.zones[z as usize].files.push(id);
            }
            buf = &buf[bytes..];
            let zone = &self.zones[z as usize];
            let left = self.cap - zone.written;
            if left == 0 {
                self.zones[z as usize].full = true;
                self.release_writer(z);
            } else if (left as f64) < self.cfg.finish_fraction * self.cap as f64 {
                self.finish_zone(z, now)?;
            }
        }
        Ok(done)
    }

    fn release_writer(&mut self, z: u32) {
        if let Some(w) = self.zones[z as usize].writer.take() {
            if let Some(f) = self.files.get_mut(&w) {
                f.writing = None;
            }
        }
    }

    fn finish_zone(&mut self, z: u32, now: u64) -> Result<()> {
        let lba = z as u64 * self.zone_sectors;
        self.dev.zns_mut().unwrap().zone_action(lba, ZoneAction::Finish, false, now)?;
        self.zones[z as usize].full = true;
        self.stats.zones_finished += 1;
        self.release_writer(z);
        self.maybe_reset(z, now)?;
        Ok(())
    }

    /// The zone `id` writes to next (taking a writer slot in it).
    fn zone_for(&mut self, id: FileId, now: u64) -> Result<u32> {
        if let Some(z) = self.file(id).writing {
            if !self.zones[z as usize].full {
                return Ok(z);
            }
        }
        let placement = self.file(id).placement;
        let z = self.allocate(placement, None, now)?;
        self.zones[z as usize].writer = Some(id);
        self.file_mut(id).writing = Some(z);
        Ok(z)
    }

    /// Choose a zone for data of `placement` (never `exclude`): ZenFS's lifetime-distance
    /// rule over the open zones without a writer, a fresh zone when none matches exactly
    /// and the active limit allows, the best remaining match otherwise.
    fn allocate(&mut self, placement: Placement, exclude: Option<u32>, now: u64) -> Result<u32> {
        let mut best: Option<(u32, u32)> = None; // (distance, zone)
        let mut any: Option<(u64, u32)> = None; // (room, zone): a mismatch, last resort
        for (i, z) in self.zones.iter().enumerate() {
            if z.offline || z.full || z.written == 0 || z.writer.is_some() || Some(i as u32) == exclude {
                continue;
            }
            let d = match (placement, z.placement) {
                (Placement::Separate, Some(Placement::Separate)) => Some(0),
                (Placement::Lifetime(f), Some(Placement::Lifetime(zl))) if zl >= f => Some(zl as u32 - f as u32),
                _ => None,
            };
            if let Some(d) = d {
                if best.is_none_or(|(bd, _)| d < bd) {
                    best = Some((d, i as u32));
                }
            }
            let room = self.cap - z.written;
            if any.is_none_or(|(r, _)| room > r) {
                any = Some((room, i as u32));
            }
        }
        if let Some((0, z)) = best {
            return Ok(z);
        }
        if !self.in_gc && self.free.len() <= 1 {
            // Emergency: collect before taking the last empty zone.
            self.gc(now)?;
        }
        if self.active_count() >= self.max_active {
            if let Some((_, z)) = best {
                return Ok(z);
            }
            // Free an active resource: finish the idle open zone with the least room.
            let victim = (0..self.zones.len() as u32)
                .filter(|&i| {
                    let z = &self.zones[i as usize];
                    z.written > 0 && !z.full && z.writer.is_none() && Some(i) != exclude
                })
                .min_by_key(|&i| (self.cap - self.zones[i as usize].written, i));
            match victim {
                Some(v) => self.finish_zone(v, now)?,
                None => return Err(Error::NoSpace(format!("all {} active zones have writers", self.max_active))),
            }
        }
        if let Some(z) = self.free.pop_front() {
            let zone = &mut self.zones[z as usize];
            debug_assert!(zone.written == 0 && zone.live == 0 && zone.files.is_empty());
            zone.placement = Some(placement);
            return Ok(z);
        }
        if let Some((_, z)) = best.map(|(d, z)| (d as u64, z)).or(any) {
            return Ok(z);
        }
        Err(Error::NoSpace(format!(
            "no empty zone and no open zone with room ({} of {} bytes live)",
            self.live_bytes(),
            self.usable_zones() as u64 * self.cap * self.sb
        )))
    }

    /// Delete a file: its extents die; zones left with no live data are reset.
    pub fn delete(&mut self, id: FileId, now: u64) -> Result<()> {
        let f = self.file_mut(id);
        assert!(f.alive, "file {id} deleted twice");
        f.alive = false;
        f.pending.clear();
        let writing = f.writing.take();
        // The extents stay: the bytes are on the NAND until their zones are reset, and the
        // deletion tracker may still look at them.
        let extents = f.extents.clone();
        if let Some(z) = writing {
            self.zones[z as usize].writer = None;
        }
        let mut touched: Vec<u32> = vec![];
        for e in &extents {
            let zone = &mut self.zones[e.zone as usize];
            assert!(zone.live >= e.sectors, "zone {} live count below its extents", e.zone);
            zone.live -= e.sectors;
            if !touched.contains(&e.zone) {
                touched.push(e.zone);
            }
        }
        if self.file(id).unerased.is_empty() {
            self.files.remove(&id);
            self.events.push(FsEvent::FileErased { id, at_ns: now });
        }
        for z in touched {
            self.maybe_reset(z, now)?;
        }
        Ok(())
    }

    /// Reset zone `z` if it holds data but no live extent and no writer.
    fn maybe_reset(&mut self, z: u32, now: u64) -> Result<()> {
        let zone = &self.zones[z as usize];
        if zone.live > 0 || zone.written == 0 || zone.writer.is_some() {
            return Ok(());
        }
        let lba = z as u64 * self.zone_sectors;
        let done = self.dev.zns_mut().unwrap().zone_action(lba, ZoneAction::Reset, false, now)?;
        self.stats.zone_resets += 1;
        let state = self.dev.zns().unwrap().report(lba, None, 1)?[0].state;
        let files = std::mem::take(&mut self.zones[z as usize].files);
        let zone = &mut self.zones[z as usize];
        zone.written = 0;
        zone.full = false;
        zone.placement = None;
        zone.offline = state == ZoneState::Offline;
        if !zone.offline {
            self.free.push_back(z);
        }
        for id in files {
            let f = self.files.get_mut(&id).expect("a zone's file is known until erased");
            f.unerased.retain(|&x| x != z);
            if !f.alive && f.unerased.is_empty() {
                self.files.remove(&id);
                self.events.push(FsEvent::FileErased { id, at_ns: done });
            }
        }
        Ok(())
    }

    /// Zone GC: while empty zones are below the threshold, migrate the live extents of a
    /// victim zone and reset it. Returns bytes migrated.
    pub fn gc(&mut self, now: u64) -> Result<u64> {
        if self.in_gc {
            return Ok(0);
        }
        self.in_gc = true;
        let r = self.gc_inner(now);
        self.in_gc = false;
        r
    }

    /// Zone GC until `want` zones are empty (or no victim is left), whatever the threshold.
    pub fn gc_to(&mut self, want: usize, now: u64) -> Result<u64> {
        if self.in_gc {
            return Ok(0);
        }
        self.in_gc = true;
        let r = self.gc_until(want, now);
        self.in_gc = false;
        r
    }

    fn gc_inner(&mut self, now: u64) -> Result<u64> {
        let want = ((self.usable_zones() as f64 * self.cfg.gc_free_fraction).ceil() as usize).max(2);
        self.gc_until(want, now)
    }

    fn gc_until(&mut self, want: usize, now: u64) -> Result<u64> {
        let mut moved = 0;
        let mut rounds = 0;
        while self.free.len() < want && rounds < self.zones.len() {
            rounds += 1;
            let Some(v) = self.pick_victim(now) else { break };
            if self.room_outside(v) < self.zones[v as usize].live {
                break; // its live data has nowhere to go (a full device)
            }
            moved += self.migrate_zone(v, now)?;
        }
        Ok(moved)
    }

    fn pick_victim(&self, now: u64) -> Option<u32> {
        let candidates: Vec<u32> = (0..self.zones.len() as u32)
            .filter(|&i| {
                let z = &self.zones[i as usize];
                z.full && z.writer.is_none() && z.live < z.written && z.live > 0
            })
            .collect();
        let least_live = |c: &[u32]| greedy(c.iter().copied(), |i| self.zones[i as usize].live);
        match self.gc_method {
            GcMethod::Greedy => least_live(&candidates),
            GcMethod::LifetimeAware => {
                let horizon = now.saturating_add(self.gc_horizon_ns);
                let patient: Vec<u32> = candidates
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let z = &self.zones[i as usize];
                        let dying: u64 = z
                            .files
                            .iter()
                            .filter_map(|id| self.files.get(id))
                            .filter(|f| f.alive && f.predicted_death_ns.is_some_and(|t| t <= horizon))
                            .map(|f| f.extents.iter().filter(|e| e.zone == i).map(|e| e.sectors).sum::<u64>())
                            .sum();
                        dying * 2 <= z.live
                    })
                    .collect();
                least_live(&patient).or_else(|| least_live(&candidates))
            }
        }
    }

    /// Sectors that can still be written outside zone `v`: empty zones and the room left in
    /// open ones.
    fn room_outside(&self, v: u32) -> u64 {
        let open: u64 = (0..self.zones.len() as u32)
            .filter(|&i| i != v)
            .map(|i| &self.zones[i as usize])
            .filter(|z| !z.offline && !z.full && z.written > 0)
            .map(|z| self.cap - z.written)
            .sum();
        open + self.free.len() as u64 * self.cap
    }

    /// Move every live extent out of zone `v`, then reset it.
    fn migrate_zone(&mut self, v: u32, now: u64) -> Result<u64> {
        let sb = self.sb;
        let ids: Vec<FileId> =
            self.zones[v as usize].files.iter().copied().filter(|id| self.files.get(id).is_some_and(|f| f.alive)).collect();
        let mut moved = 0u64;
        for id in ids {
            let exts: Vec<(usize, Extent)> = self.file(id).extents.iter().copied().enumerate().filter(|(_, e)| e.zone == v).collect();
            // Later extents first, so indices of earlier ones stay valid while we splice.
            for (idx, e) in exts.into_iter().rev() {
                let mut data = vec![0u8; (e.sectors * sb) as usize];
                let lba = v as u64 * self.zone_sectors + e.start;
                let t = self.dev.zns_mut().unwrap().read(lba, e.sectors as u32, Some(&mut data), now)?;
                self.stats.zone_read_bytes += e.sectors * sb;
                let placement = self.file(id).placement;
                let mut new: Vec<Extent> = vec![];
                let mut off = 0u64;
                while off < e.sectors {
                    let z = match self.allocate(placement, Some(v), now) {
                        Ok(z) => z,
                        Err(err) => {
                            // No room for the rest: the pieces copied so far hold nothing live
                            // (the extent stays where it was), so their zones can be reset.
                            for p in &new {
                                self.zones[p.zone as usize].live -= p.sectors;
                            }
                            return Err(err);
                        }
                    };
                    let room = self.cap - self.zones[z as usize].written;
                    let n = (e.sectors - off).min(room);
                    let start = self.zones[z as usize].written;
                    let b0 = (off * sb) as usize;
                    let dlba = z as u64 * self.zone_sectors + start;
                    self.dev.zns_mut().unwrap().write_zone(dlba, n as u32, Some(&data[b0..b0 + (n * sb) as usize]), false, false, t)?;
                    self.stats.zone_write_bytes += n * sb;
                    let zone = &mut self.zones[z as usize];
                    zone.written += n;
                    zone.live += n;
                    new.push(Extent { zone: z, start, sectors: n, file_off: e.file_off + off * sb });
                    let f = self.files.get_mut(&id).unwrap();
                    if !f.unerased.contains(&z) {
                        f.unerased.push(z);
                        self.zones[z as usize].files.push(id);
                    }
                    off += n;
                    let left = self.cap - self.zones[z as usize].written;
                    if left == 0 {
                        self.zones[z as usize].full = true;
                        self.release_writer(z);
                    } else if (left as f64) < self.cfg.finish_fraction * self.cap as f64 {
                        self.finish_zone(z, now)?;
                    }
                }
                self.zones[v as usize].live -= e.sectors;
                self.file_mut(id).extents.splice(idx..idx + 1, new);
                moved += e.sectors * sb;
            }
        }
        self.stats.gc_migrated_bytes += moved;
        self.stats.gc_zones += 1;
        assert_eq!(self.zones[v as usize].live, 0, "zone {v} still live after its migration");
        let before = self.stats.zone_resets;
        self.maybe_reset(v, now)?;
        self.stats.gc_resets += self.stats.zone_resets - before;
        Ok(moved)
    }

    /// Map `len` bytes at `off` of file `id` to (lba, sectors, skip bytes) pieces.
    /// Walk the device pieces behind `len` bytes at `off` of file `f`: `each(lba, sectors,
    /// skip, bytes)` for each extent touched, `skip` bytes into its first sector, `bytes` of
    /// the range in it. No allocation: this is every block read's path.
    fn walk(
        f: &FileInfo,
        id: FileId,
        sb: u64,
        zone_sectors: u64,
        off: u64,
        len: u64,
        mut each: impl FnMut(u64, u64, u64, usize) -> Result<()>,
    ) -> Result<()> {
        if off + len > f.size {
            return Err(Error::Corrupt(format!("read of {len} bytes at {off} past the end of file {id} ({} bytes)", f.size)));
        }
        let mut pos = off;
        let end = off + len;
        let mut i = f.extents.partition_point(|e| e.file_off + e.sectors * sb <= pos);
        while pos < end {
            let e = f.extents.get(i).ok_or_else(|| {
                Error::Corrupt(format!(
                    "file {id}: no extent at offset {pos} (read {off}+{len}, size {}, alive {}, extents {:?})",
                    f.size, f.alive, f.extents
                ))
            })?;
            let in_ext = pos - e.file_off;
            let s0 = in_ext / sb;
            let stop = (end - e.file_off).min(e.sectors * sb);
            let s1 = stop.div_ceil(sb);
            each(e.zone as u64 * zone_sectors + e.start + s0, s1 - s0, in_ext % sb, (stop - in_ext) as usize)?;
            pos = e.file_off + s1 * sb;
            i += 1;
        }
        Ok(())
    }

    /// Read `out.len()` bytes at `off` of file `id` through the device; returns the
    /// completion time. Every sector touched is read (and timed) whole; only the bytes asked
    /// for are copied.
    pub fn read(&mut self, id: FileId, off: u64, out: &mut [u8], now: u64) -> Result<u64> {
        let f = self.files.get(&id).unwrap_or_else(|| panic!("no file {id}"));
        let dev = self.dev.zns_mut().unwrap();
        let stats = &mut self.stats;
        let mut done = now;
        let mut w = 0usize;
        Self::walk(f, id, self.sb, self.zone_sectors, off, out.len() as u64, |lba, sectors, skip, n| {
            let d = dev.read_span(lba, sectors as u32, skip as usize, Some(&mut out[w..w + n]), now)?;
            stats.zone_read_bytes += sectors * self.sb;
            done = done.max(d);
            w += n;
            Ok(())
        })?;
        debug_assert_eq!(w, out.len());
        Ok(done)
    }

    /// Like `read`, without timing or counting (the deletion tracker looking at the media).
    /// Works on deleted files until they are erased; parts in zones reset since read as
    /// zeros (or as whatever was written there later).
    pub fn peek(&self, id: FileId, off: u64, out: &mut [u8]) -> Result<()> {
        let dev = self.dev.zns().unwrap();
        let mut w = 0usize;
        Self::walk(self.file(id), id, self.sb, self.zone_sectors, off, out.len() as u64, |lba, sectors, skip, n| {
            dev.peek_span(lba, sectors, skip as usize, &mut out[w..w + n])?;
            w += n;
            Ok(())
        })?;
        Ok(())
    }

    /// Whether file `id` exists and is not deleted.
    pub fn is_alive(&self, id: FileId) -> bool {
        self.files.get(&id).is_some_and(|f| f.alive)
    }

    /// Whether file `id` is known (alive, or deleted with bytes still on the NAND).
    pub fn knows(&self, id: FileId) -> bool {
        self.files.contains_key(&id)
    }

    /// Check the layer's books against each other (tests).
    pub fn check_invariants(&self) {
        let mut live = vec![0u64; self.zones.len()];
        for (id, f) in &self.files {
            if f.alive {
                let mut off = 0;
                for e in &f.extents {
                    assert_eq!(e.file_off, off, "file {id}: extents not contiguous in the file");
                    assert!(e.start + e.sectors <= self.zones[e.zone as usize].written, "file {id}: extent past its zone's write pointer");
                    live[e.zone as usize] += e.sectors;
                    off += e.sectors * self.sb;
                }
                assert_eq!(off, f.size, "file {id}: extents do not cover its size");
            } else {
                assert!(!f.unerased.is_empty(), "deleted file {id} kept without unerased zones");
            }
            for z in &f.unerased {
                assert!(self.zones[*z as usize].files.contains(id), "file {id} / zone {z} books disagree");
            }
        }
        for (i, z) in self.zones.iter().enumerate() {
            assert_eq!(z.live, live[i], "zone {i}: live count");
            assert!(z.written <= self.cap);
            if z.written == 0 {
                assert!(z.files.is_empty(), "empty zone {i} lists files");
            }
            let dev = &self.dev.zns().unwrap().report(i as u64 * self.zone_sectors, None, 1).unwrap()[0];
            if !z.offline && !z.full {
                assert_eq!(dev.wp - dev.zslba, z.written, "zone {i}: write pointer");
            }
        }
        assert!(self.active_count() <= self.max_active);
        self.dev.block_device().check_invariants();
    }

    /// The device's counters and the latest completion the device knows of.
    pub fn device_counters(&self) -> &ssdlab_core::ftl::Counters {
        self.dev.block_device().counters()
    }

    /// Walk every physical sector that holds data, page by page: `f(page bytes)` gets the
    /// concatenated non-zero sectors of each physical page (a deletion audit's raw scan).
    pub fn scan_nand(&self, mut f: impl FnMut(u64, &[u8])) {
        let m = self.dev.block_device().media();
        let Some(store) = m.data.as_ref() else { return };
        let spp = m.lay.sectors_per_page as u64;
        let mut page = Vec::with_capacity(m.lay.page_bytes as usize);
        for pg in 0..m.lay.physical_sectors / spp {
            page.clear();
            for psa in pg * spp..(pg + 1) * spp {
                match store.sector(psa as u32) {
                    Some(s) => page.extend_from_slice(s),
                    None if !page.is_empty() => page.resize(page.len() + self.sb as usize, 0),
                    None => {}
                }
            }
            if !page.is_empty() {
                f(pg, &page);
            }
        }
    }

    /// Whether any of the `len` bytes at `off` of file `id` may still be on the NAND: they lie
    /// (in part) in an extent whose zone has not been reset since the file wrote it.
    pub fn bytes_on_nand(&self, id: FileId, off: u64, len: u64) -> bool {
        let Some(f) = self.files.get(&id) else { return false };
        let sb = self.sb;
        f.extents.iter().any(|e| f.unerased.contains(&e.zone) && e.file_off < off + len && off < e.file_off + e.sectors * sb)
    }

    pub fn file_kind(&self, id: FileId) -> Option<FileKind> {
        self.files.get(&id).map(|f| f.kind)
    }
}
