//! ssdlab's NVMe/TCP target: real NVMe hosts (the Linux kernel's nvme-tcp driver, nvme-cli,
//! SPDK) see an emulated SSD as an NVMe namespace over TCP, with its timing, wear and metrics.
//! See docs/nvme-tcp.md.
//!
//! - [`pdu`]: the transport's PDUs, parsed from bytes with their lengths checked before anything
//!   is read or allocated, and built with the digests a connection negotiated;
//! - [`cmd`]: submission / completion queue entries and status codes;
//! - [`ctrl`]: the subsystem, its controllers and the commands (fabrics, admin, NVM I/O);
//! - [`server`]: one TCP connection per queue on ssdlab's server core (crates/server);
//! - [`zoned`]: a zoned namespace on an ssdlab ZNS device;
//! - [`fuzzing`]: a connection on untrusted bytes (fuzz target, corpus run).

pub mod cmd;
pub mod ctrl;
pub mod fuzzing;
pub mod pdu;
pub mod server;
pub mod zoned;

pub use ctrl::Subsystem;
pub use server::{serve, Latency, ServeOptions, Target, DEFAULT_NQN};

use ctrl::Ns;
use ssdlab_core::config::{Config, Personality};
use ssdlab_nbd::{Backend, BackendOptions};
use zoned::Zoned;

/// A target for device config `cfg`: a conventional or FDP device as an NVM namespace, its
/// contents in `backend.image` (or in memory); a ZNS device as a zoned namespace (in memory).
pub fn open(cfg: Config, backend: &BackendOptions, opts: ServeOptions) -> Result<std::sync::Arc<Target>, String> {
    let sector = cfg.geometry.sector_bytes;
    let seed = cfg.seed;
    let serial = format!("SSDLAB{:014X}", seed & 0xFF_FFFF_FFFF_FFFF);
    let ns = match cfg.personality {
        Personality::Zns => {
            if backend.image.is_some() {
                return Err("--image: a zoned namespace is kept in memory only (for now); serve it without --image".into());
            }
            Ns::Zoned(Box::new(Zoned::open(cfg)?))
        }
        Personality::Conventional => Ns::Block(Box::new(Backend::open(cfg, backend).map_err(|e| e.to_string())?)),
        p => return Err(format!("personality {p:?}: NVMe/TCP serves conventional, FDP and ZNS devices")),
    };
    let sub = Subsystem::new(ns, sector, opts.nqn.clone(), serial);
    Target::new(sub, opts)
}
