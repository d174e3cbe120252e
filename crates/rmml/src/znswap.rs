//! The ZNSwap-like baseline: swap slots on a zoned (ZNS) SSD, after ZNSwap (Bergman et al.,
//! USENIX ATC'22), on ssdlab's emulated ZNS device.
//!
//! A swap-out appends its pages at the write pointer of the open zone, so the device never
//! garbage-collects; the host keeps the slot -> (zone, offset) map and a valid count per zone.
//! A released slot (discard) only invalidates its page. When free zones run short, reclaim picks
//! the full zone with the fewest valid pages, moves them to a separate relocation zone and
//! resets the victim (ZNSwap's zone-aware reclamation, using the swap subsystem's knowledge of
//! which slots are free). All timing comes from the device model: NAND reads, programs, erases
//! and channel transfers on its die timelines; reclaim occupies the same dies.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::json;
use ssdlab_core::ftl::zns::{ZoneAction, ZoneState};
use ssdlab_core::ftl::BlockDevice;
use ssdlab_core::{Config, Device};

use crate::device::{check, SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::link::{Lane, Link};

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZnswapConfig {
    /// Swap space the host sees (bytes).
    pub capacity_bytes: u64,
    /// The ZNS device (a resolved ssdlab config with `personality = "zns"`, 4 KiB sectors).
    pub device: Config,
    /// Free zones kept in reserve: reclaim runs when fewer are left.
    pub reserve_zones: u32,
    /// Host software per request (swap path and NVMe submission/completion), ns.
    pub host_request_ns: u64,
    /// Host <-> SSD (NVMe over PCIe): each request's data crosses it.
    pub pcie: Link,
}

struct Zone {
    valid: u32,
    /// Slot of each written sector (NONE when stale).
    slots: Vec<u32>,
    wp: u32,
}

#[derive(Default)]
struct Stats {
    reads: u64,
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
    reclaims: u64,
    relocated_pages: u64,
    zone_resets: u64,
}

pub struct Znswap {
    cfg: ZnswapConfig,
    dev: Device,
    zone_sectors: u64,
    zone_cap: u32,
    zones: Vec<Zone>,
    free: VecDeque<u32>,
    open_host: Option<u32>,
    open_gc: Option<u32>,
    slot_map: Vec<u32>,
    pcie: Lane,
    st: Stats,
}

impl Znswap {
    pub fn new(cfg: ZnswapConfig) -> Result<Znswap> {
        let mut dc = cfg.device.clone();
        if dc.personality != ssdlab_core::config::Personality::Zns {
            return Err(Error::Config("znswap.device: expected personality = \"zns\"".into()));
        }
        if dc.geometry.sector_bytes as u64 != PAGE_BYTES {
            return Err(Error::Config(format!("znswap.device: sector_bytes must be {PAGE_BYTES}")));
        }
        dc.storage = ssdlab_core::config::StorageMode::Data;
        dc.validate()?;
        let dev = Device::new(dc)?;
        let z = dev.zns().expect("a ZNS device");
        let (n, zone_sectors, zone_cap) = (z.zone_count(), z.zone_size(), z.zone_capacity() as u32);
        let usable: Vec<u32> = (0..n)
            .filter(|&i| z.report(i as u64 * zone_sectors, None, 1).map(|d| d[0].state != ZoneState::Offline).unwrap_or(false))
            .collect();
        let slots = cfg.capacity_bytes / PAGE_BYTES;
        if cfg.capacity_bytes == 0 || !cfg.capacity_bytes.is_multiple_of(PAGE_BYTES) || slots > u32::MAX as u64 {
            return Err(Error::Config(format!("znswap.capacity_bytes = {}: expected a positive multiple of 4096", cfg.capacity_bytes)));
        }
        // Reclaim needs room to move a zone's valid pages: keep a tenth of the zones' capacity
        // (over-provisioning) beyond the swap space, and the reserve beyond that.
        let room = (usable.len() as u64).saturating_sub(cfg.reserve_zones as u64 + 2) * zone_cap as u64;
        if slots * 10 > room * 9 {
            return Err(Error::Config(format!(
                "znswap: {} MiB of swap needs more zones: the device has {} usable zones of {} MiB",
                cfg.capacity_bytes >> 20,
                usable.len(),
                (zone_cap as u64 * PAGE_BYTES) >> 20
            )));
        }
        if cfg.reserve_zones < 1 {
            return Err(Error::Config("znswap.reserve_zones: expected at least 1".into()));
        }
        cfg.pcie.validate("znswap.pcie")?;
        Ok(Znswap {
            zones: (0..n).map(|_| Zone { valid: 0, slots: Vec::new(), wp: 0 }).collect(),
            free: usable.into_iter().collect(),
            open_host: None,
            open_gc: None,
            slot_map: vec![NONE; slots as usize],
            zone_sectors,
            zone_cap,
            pcie: Lane::default(),
            st: Stats::default(),
            dev,
            cfg,
        })
    }

    fn phys(&self, zone: u32, off: u32) -> u64 {
        zone as u64 * self.zone_sectors + off as u64
    }

    fn invalidate(&mut self, slot: u64) {
        let ph = self.slot_map[slot as usize];
        if ph == NONE {
            return;
        }
        self.slot_map[slot as usize] = NONE;
        let (z, o) = ((ph as u64 / self.zone_sectors) as usize, (ph as u64 % self.zone_sectors) as usize);
        assert_eq!(self.zones[z].slots[o], slot as u32, "zone {z} sector {o}: slot map and zone disagree");
        self.zones[z].slots[o] = NONE;
        self.zones[z].valid -= 1;
    }

    /// A zone with room for writes of the kind `gc` (host or relocation).
    fn open_zone(&mut self, gc: bool, now: u64) -> Result<u32> {
        let cur = if gc { self.open_gc } else { self.open_host };
        if let Some(z) = cur {
            if self.zones[z as usize].wp < self.zone_cap {
                return Ok(z);
            }
        }
        if !gc {
            while self.free.len() <= self.cfg.reserve_zones as usize {
                if !self.reclaim(now)? {
                    break;
                }
            }
        }
        let z = self.free.pop_front().ok_or_else(|| Error::NoSpace("znswap: no free zone left (swap space over-committed)".into()))?;
        let zone = &mut self.zones[z as usize];
        zone.wp = 0;
        zone.valid = 0;
        zone.slots = vec![NONE; self.zone_cap as usize];
        if gc {
            self.open_gc = Some(z);
        } else {
            self.open_host = Some(z);
        }
        Ok(z)
    }

    /// Append `data` (whole pages for `slots`) to the open host or relocation zone; returns the
    /// completion of the last program command.
    fn append(&mut self, slots: &[u64], data: &[u8], gc: bool, now: u64) -> Result<u64> {
        let mut done = now;
        let mut i = 0;
        while i < slots.len() {
            let z = self.open_zone(gc, now)?;
            let wp = self.zones[z as usize].wp;
            let n = (slots.len() - i).min((self.zone_cap - wp) as usize);
            let lba = self.phys(z, wp);
            let bytes = &data[i * PAGE_BYTES as usize..(i + n) * PAGE_BYTES as usize];
            let zns = self.dev.zns_mut().expect("ZNS device");
            let (_, t) = zns.write_zone(lba, n as u32, Some(bytes), false, false, now)?;
            done = done.max(t);
            for (k, &s) in slots[i..i + n].iter().enumerate() {
                self.zones[z as usize].slots[wp as usize + k] = s as u32;
                self.slot_map[s as usize] = (lba + k as u64) as u32;
            }
            self.zones[z as usize].wp += n as u32;
            self.zones[z as usize].valid += n as u32;
            i += n;
        }
        Ok(done)
    }

    /// Move the valid pages of the full zone with the fewest of them and reset it. Returns
    /// whether a zone was freed.
    fn reclaim(&mut self, now: u64) -> Result<bool> {
        let open = [self.open_host, self.open_gc];
        let victim = (0..self.zones.len() as u32)
            .filter(|z| !open.contains(&Some(*z)) && !self.free.contains(z) && self.zones[*z as usize].wp == self.zone_cap)
            .min_by_key(|&z| (self.zones[z as usize].valid, z));
        let Some(v) = victim else { return Ok(false) };
        if self.zones[v as usize].valid == self.zone_cap {
            return Ok(false);
        }
        self.st.reclaims += 1;
        let live: Vec<(u32, u32)> =
            self.zones[v as usize].slots.iter().enumerate().filter(|(_, &s)| s != NONE).map(|(o, &s)| (o as u32, s)).collect();
        let mut page = vec![0u8; PAGE_BYTES as usize];
        for (o, s) in live {
            let lba = self.phys(v, o);
            self.dev.zns_mut().expect("ZNS").read(lba, 1, Some(&mut page), now)?;
            self.invalidate(s as u64);
            // Relocation programs are issued with the reads: the dies order them.
            self.append(&[s as u64], &page, true, now)?;
            self.st.relocated_pages += 1;
        }
        assert_eq!(self.zones[v as usize].valid, 0);
        let zslba = self.phys(v, 0);
        self.dev.zns_mut().expect("ZNS").zone_action(zslba, ZoneAction::Reset, false, now)?;
        self.st.zone_resets += 1;
        self.zones[v as usize].slots = Vec::new();
        self.zones[v as usize].wp = 0;
        self.free.push_back(v);
        Ok(true)
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl SwapDevice for Znswap {
    fn kind(&self) -> &'static str {
        "znswap"
    }
    fn capacity_bytes(&self) -> u64 {
        self.cfg.capacity_bytes
    }

    fn write(&mut self, offset: u64, data: &[u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, data.len() as u64)?;
        self.st.writes += 1;
        self.st.write_bytes += data.len() as u64;
        let t = self.pcie.transfer(&self.cfg.pcie, now_ns + self.cfg.host_request_ns, data.len() as u64);
        let slots: Vec<u64> = (offset / PAGE_BYTES..(offset + data.len() as u64) / PAGE_BYTES).collect();
        for &s in &slots {
            self.invalidate(s);
        }
        self.append(&slots, data, false, t)
    }

    fn read(&mut self, offset: u64, out: &mut [u8], now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, out.len() as u64)?;
        self.st.reads += 1;
        self.st.read_bytes += out.len() as u64;
        let t = now_ns + self.cfg.host_request_ns;
        let mut ready = t;
        let first = offset / PAGE_BYTES;
        let n = out.len() / PAGE_BYTES as usize;
        let mut i = 0;
        // Runs of slots that sit next to each other on the device are one read command.
        while i < n {
            let ph = self.slot_map[first as usize + i];
            let mut k = 1;
            while i + k < n
                && ph != NONE
                && self.slot_map[first as usize + i + k] == ph + k as u32
                && !(ph as u64 + k as u64).is_multiple_of(self.zone_sectors)
            {
                k += 1;
            }
            let piece = &mut out[i * PAGE_BYTES as usize..(i + k) * PAGE_BYTES as usize];
            if ph == NONE {
                piece.fill(0);
            } else {
                let done = self.dev.zns_mut().expect("ZNS").read(ph as u64, k as u32, Some(piece), t)?;
                ready = ready.max(done);
            }
            i += k;
        }
        Ok(self.pcie.transfer(&self.cfg.pcie, ready, out.len() as u64))
    }

    fn discard_zeroes(&self) -> bool {
        true
    }
    fn discard(&mut self, offset: u64, len: u64, now_ns: u64) -> Result<u64> {
        check(self.cfg.capacity_bytes, offset, len)?;
        for s in offset / PAGE_BYTES..(offset + len) / PAGE_BYTES {
            self.invalidate(s);
        }
        Ok(now_ns + self.cfg.host_request_ns)
    }

    fn stats(&mut self) -> serde_json::Value {
        let c = self.dev.block_device().counters();
        json!({
            "kind": "znswap", "zone_bytes": self.zone_sectors * PAGE_BYTES, "zone_capacity_bytes": self.zone_cap as u64 * PAGE_BYTES,
            "zones": self.zones.len(), "free_zones": self.free.len(),
            "reads": self.st.reads, "writes": self.st.writes, "read_bytes": self.st.read_bytes, "write_bytes": self.st.write_bytes,
            "reclaims": self.st.reclaims, "relocated_pages": self.st.relocated_pages, "zone_resets": self.st.zone_resets,
            "nand_write_bytes": c.nand_write_bytes, "nand_read_bytes": c.nand_read_bytes, "nand_erases": c.nand_erase_count,
        })
    }
}
