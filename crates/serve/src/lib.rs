//! The case studies served: where a case-study crate meets a front-end's trait. The case-study
//! crates (crates/lsm, uio, rmml, spi) import no protocol crate, no async runtime and no TLS; this
//! crate holds the adapters that make them servable.
//!
//! - [`lsm`]: the LSM store as a RESP [`ssdlab_resp::Backend`] (`ssdlab kv serve`), persisted
//!   as the store's command journal;
//! - [`uio`]: a UIO device's host as a RESP backend (`ssdlab uio kv-serve`);
//! - [`rmml`]: dpuswap's swap backends as an NBD [`ssdlab_nbd::Disk`] (`ssdlab rmml serve`,
//!   [`rmml::export`]) and the remote-memory node's store as a [`ssdlab_server::Protocol`]
//!   (`ssdlab rmml node`, [`rmml::node`]); the RMML's client of a node stays in crates/rmml
//!   (blocking sockets, the wire format in `ssdlab_rmml::node::proto`);
//! - [`serprog`]: the SPI NOR chip (crates/spi) over flashrom's serprog protocol (`ssdlab spi
//!   serve`), one client at a time.

#![forbid(unsafe_code)]

pub mod lsm;
pub mod rmml;
pub mod serprog;
pub mod uio;

pub use lsm::KvBackend;
pub use rmml::export::SwapDisk;
pub use uio::UioBackend;
