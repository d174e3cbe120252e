//! ssdlab's NVMe/TCP target: real NVMe hosts (the Linux kernel's nvme-tcp driver, nvme-cli,
//! SPDK) see an emulated SSD as an NVMe namespace over TCP, with its timing, wear and metrics.
//! See docs/nvme-tcp.md.
//!
//! - [`pdu`]: the transport's PDUs, parsed from bytes with their lengths checked before anything
//!   is read or allocated, and built with the digests a connection negotiated;
//! - [`cmd`]: submission / completion queue entries and status codes;
//! - [`ctrl`]: the subsystem, its controllers and the commands (fabrics, admin, NVM I/O);
//! - [`server`]: one TCP connection per queue on ssdlab's server core (crates/server);
//! - [`fuzzing`]: a connection on untrusted bytes (fuzz target, corpus run).

pub mod cmd;
pub mod ctrl;
pub mod fuzzing;
pub mod pdu;
pub mod server;

pub use ctrl::Subsystem;
pub use server::{serve, Latency, ServeOptions, Target, DEFAULT_NQN};

use ssdlab_core::config::Config;
use ssdlab_nbd::{Backend, BackendOptions};

/// A target for device config `cfg` (conventional or FDP), its contents in `opts.image` (or in
/// memory).
pub fn open(cfg: Config, backend: &BackendOptions, opts: ServeOptions) -> Result<std::sync::Arc<Target>, String> {
    let sector = cfg.geometry.sector_bytes;
    let seed = cfg.seed;
    let b = Backend::open(cfg, backend).map_err(|e| e.to_string())?;
    let serial = format!("SSDLAB{:014X}", seed & 0xFF_FFFF_FFFF_FFFF);
    let sub = Subsystem::new(Box::new(b), sector, opts.nqn.clone(), serial);
    Target::new(sub, opts)
}
