//! A zoned namespace (NVMe Zoned Namespace Command Set 1.1): an ssdlab ZNS device with its
//! contents in memory (storage = data), its clock following the wall clock when timing is on,
//! and the same metrics as every other front-end. The zone commands go to the device's own ZNS
//! model (crates/core/src/ftl/zns.rs), whose statuses (zone boundary, zone full, invalid
//! transition, too many open or active zones) are the ones the host receives.

use std::time::Instant;

use serde_json::{json, Value};
use ssdlab_core::config::{Config, Personality, StorageMode};
use ssdlab_core::ftl::zns::{ZoneAction, ZoneDescriptor, ZoneState};
use ssdlab_core::metrics::Recorder;
use ssdlab_core::workload::Op;
use ssdlab_core::{Device, Error};

pub type ZResult<T> = Result<T, Error>;

pub struct Zoned {
    cfg: Config,
    dev: Device,
    rec: Recorder,
    timing: bool,
    started: Instant,
    origin_ns: u64,
    sector: u64,
}

/// Zone geometry for Identify.
#[derive(Debug, Clone, Copy)]
pub struct ZoneInfo {
    pub zones: u32,
    pub zone_size: u64,
    pub zone_capacity: u64,
    pub max_open: u32,
    pub max_active: u32,
}

impl Zoned {
    pub fn open(mut cfg: Config) -> Result<Zoned, String> {
        if !matches!(cfg.personality, Personality::Zns) {
            return Err("a zoned namespace needs a ZNS device (personality = \"zns\")".into());
        }
        cfg.storage = StorageMode::Data;
        cfg.validate().map_err(|e| e.to_string())?;
        let dev = Device::new(cfg.clone()).map_err(|e| e.to_string())?;
        let timing = cfg.timing.enabled;
        let logical = dev.logical_bytes();
        let rec =
            Recorder::new(dev.block_device(), dev.now_ns(), cfg.metrics.series_interval_ns, if timing { 0 } else { (logical / 50).max(1) });
        let info = dev.zns().expect("a ZNS device");
        let zs = info.zone_size();
        if !zs.is_power_of_two() {
            return Err(format!(
                "zone size {zs} blocks is not a power of two: NVMe allows it, but Linux's zoned block layer does not; choose zns.zone_blocks / geometry so that it is"
            ));
        }
        let sector = cfg.geometry.sector_bytes as u64;
        let origin_ns = dev.now_ns();
        Ok(Zoned { cfg, dev, rec, timing, started: Instant::now(), origin_ns, sector })
    }

    pub fn logical_bytes(&self) -> u64 {
        self.dev.logical_bytes()
    }

    pub fn info(&self) -> ZoneInfo {
        let z = self.dev.zns().expect("ZNS");
        ZoneInfo {
            zones: z.zone_count(),
            zone_size: z.zone_size(),
            zone_capacity: z.zone_capacity(),
            max_open: z.max_open(),
            max_active: z.max_active(),
        }
    }

    pub fn wall_of(&self, t_ns: u64) -> Instant {
        self.started + std::time::Duration::from_nanos(t_ns.saturating_sub(self.origin_ns))
    }

    fn now(&mut self) -> u64 {
        if self.timing {
            let t = self.origin_ns + self.started.elapsed().as_nanos() as u64;
            self.dev.advance_to(t);
        }
        self.dev.now_ns()
    }

    fn account(&mut self, op: Op, t: u64, done: u64) {
        self.rec.record(op, done.saturating_sub(t));
        self.rec.tick(self.dev.block_device(), t, done);
    }

    pub fn read(&mut self, lba: u64, out: &mut [u8]) -> ZResult<u64> {
        let t = self.now();
        let done = self.dev.read(lba * self.sector, out)?;
        self.account(Op::Read, t, done);
        Ok(done)
    }

    pub fn write(&mut self, lba: u64, data: &[u8], fua: bool) -> ZResult<u64> {
        let t = self.now();
        let done = self.dev.write(lba * self.sector, data, fua)?;
        self.account(Op::Write, t, done);
        Ok(done)
    }

    /// Zone Append at the zone starting at `zslba`: (LBA written, completion time).
    pub fn append(&mut self, zslba: u64, data: &[u8], fua: bool) -> ZResult<(u64, u64)> {
        let t = self.now();
        let n = (data.len() as u64 / self.sector) as u32;
        let (lba, done) = self.dev.zns_mut().expect("ZNS").write_zone(zslba, n, Some(data), true, fua, t)?;
        self.account(Op::Write, t, done);
        Ok((lba, done))
    }

    pub fn flush(&mut self) -> ZResult<u64> {
        let t = self.now();
        let done = self.dev.flush()?;
        self.account(Op::Flush, t, done);
        Ok(done)
    }

    pub fn action(&mut self, lba: u64, a: ZoneAction, all: bool) -> ZResult<u64> {
        let t = self.now();
        self.dev.zns_mut().expect("ZNS").zone_action(lba, a, all, t)
    }

    pub fn report(&self, lba: u64, filter: Option<ZoneState>, max: usize) -> ZResult<Vec<ZoneDescriptor>> {
        self.dev.zns().expect("ZNS").report(lba, filter, max)
    }

    pub fn metrics(&mut self) -> Value {
        self.now();
        let mut m = self.rec.finish(self.dev.block_device(), &self.cfg, false);
        let c = self.dev.block_device().counters();
        m["device_lifetime"] = json!({
            "host_write_bytes": c.host_write_bytes,
            "host_read_bytes": c.host_read_bytes,
            "nand_write_bytes": c.nand_write_bytes,
            "nand_erase_count": c.nand_erase_count,
            "sim_time_ns": self.dev.now_ns(),
        });
        m
    }

    pub fn series_csv(&self) -> String {
        self.rec.series_csv()
    }
}
