//! ssdlab's NVMe/TCP target: real NVMe hosts (the Linux kernel's nvme-tcp driver, nvme-cli,
//! SPDK) see an emulated SSD as an NVMe namespace over TCP, with its timing, wear and metrics.
//! See docs/nvme-tcp.md.
//!
//! - [`pdu`]: the transport's PDUs, parsed from bytes with their lengths checked before anything
//!   is read or allocated, and built with the digests a connection negotiated;
//! - [`cmd`]: submission / completion queue entries and status codes;
//! - [`ctrl`]: the subsystem, its controllers and the commands (fabrics, admin, NVM I/O);
//! - [`server`]: one TCP connection per queue on ssdlab's server core (crates/server);
//! - [`client`]: a small blocking host (`ssdlab nvme stats`, the tests);
//! - [`fuzzing`]: a connection on untrusted bytes (fuzz target, corpus run).

#![forbid(unsafe_code)]

pub mod client;
pub mod cmd;
pub mod ctrl;
pub mod fuzzing;
pub mod pdu;
pub mod server;

pub use ctrl::Subsystem;
pub use server::{serve, Latency, NvmetOptions, Target, DEFAULT_NQN};

use ctrl::Ns;
use ssdlab_core::config::{Config, Personality};
use ssdlab_nbd::{Backend, BackendOptions};

/// Zone geometry of a zoned namespace, for Identify.
#[derive(Debug, Clone, Copy)]
pub struct ZoneInfo {
    pub zones: u32,
    pub zone_size: u64,
    pub zone_capacity: u64,
    pub max_open: u32,
    pub max_active: u32,
}

/// A target for device config `cfg`: a conventional or FDP device as an NVM namespace, a ZNS
/// device as a zoned namespace; the contents in `backend.image` (or in memory) with the NBD
/// server's image, journal and snapshots.
pub fn open(cfg: Config, backend: &BackendOptions, opts: NvmetOptions) -> Result<std::sync::Arc<Target>, String> {
    let sector = cfg.geometry.sector_bytes;
    let seed = cfg.seed;
    let serial = format!("SSDLAB{:014X}", seed & 0xFF_FFFF_FFFF_FFFF);
    let ns = match cfg.personality {
        Personality::Zns => {
            let b = Backend::open(cfg, &BackendOptions { zoned: true, ..backend.clone() }).map_err(|e| e.to_string())?;
            let zs = b.device().zns().map_or(0, |z| z.zone_size());
            if !zs.is_power_of_two() {
                return Err(format!(
                    "zone size {zs} blocks is not a power of two: NVMe allows it, but Linux's zoned block layer does not; choose zns.zone_blocks and the geometry so that it is"
                ));
            }
            Ns::Zoned(Box::new(b))
        }
        Personality::Conventional => Ns::Block(Box::new(Backend::open(cfg, backend).map_err(|e| e.to_string())?)),
        p => return Err(format!("personality {p:?}: NVMe/TCP serves conventional, FDP and ZNS devices")),
    };
    let sub = Subsystem::new(ns, sector, opts.nqn.clone(), serial);
    Target::new(sub, opts).map_err(|e| e.to_string())
}
