//! Case study uio-kv: the UIO converged storage + network key-value device of
//! the document behind issue 19.
//!
//! - The host interface: NVMe-style submission and completion queues in memory shared between
//!   a host and the device (memfd), the BAR registers, admin commands that create and delete
//!   I/O queues, put/get commands, round robin arbitration with a burst limit and a per-queue
//!   permission check ([`layout`], [`queues`], [`shm`]).
//! - The device's modules: DMA's record ([`record`]), the UTL storing records log-structured
//!   on the open-channel flash with a scanning GC ([`utl`]), GME routing and the data path
//!   between devices with each leg's modelled cost, UIO's and the traditional one, on two link
//!   profiles ([`cluster`]; the document simulator's message queue hop measured by [`msgq`]),
//!   and the reproduction's measurements ([`repro`]).
//! - Devices as processes: a device serving its host's queues and its peers' requests over
//!   TCP, and the host library that attaches to it, several commands in flight ([`device`],
//!   [`host`], [`net`]); the flash kept in a
//!   file and recovered at start ([`image`]); the RESP front-end on the host library is
//!   crates/serve's `uio`.

pub mod cluster;
pub mod device;
pub mod host;
pub mod image;
pub mod layout;
pub mod msgq;
pub mod net;
pub mod queues;
pub mod record;
pub mod repro;
pub mod shm;
pub mod utl;
pub mod wall;

pub use cluster::{Cluster, Gme, Links, Path, Profile};
pub use layout::{Command, Completion, Status};
pub use queues::{Controller, Finished, Host, Op, Perm, Store};
pub use shm::Region;
pub use utl::{Utl, UtlConfig, UtlError};
