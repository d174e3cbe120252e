//! Case study uio-kv (in progress): the UIO converged storage + network key-value device of
//! the document behind issue 19. This first part is the device's host interface: NVMe-style
//! submission and completion queues in memory shared between a host and the device (memfd),
//! the BAR registers, admin commands that create and delete I/O queues, put/get commands, round
//! robin arbitration with a burst limit and a per-queue permission check. The device modules
//! behind it (DMA, GME, UTL on the NAND media model, NET) come next.

pub mod layout;
pub mod queues;
pub mod shm;

pub use layout::{Command, Completion, Status};
pub use queues::{Controller, Host, Perm, Store};
pub use shm::Region;
