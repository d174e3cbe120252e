//! ssdlab-spi-fw: firmware in the loop on the emulated SPI NOR chip.
//!
//! - [`driver`]: the flash drivers a campaign runs (the crates.io `w25q32jv` driver unmodified,
//!   a minimal driver of ours and its broken no-polling variant), all on the chip's
//!   embedded-hal `SpiDevice`.
//! - [`campaign`]: littlefs (the C library, through the `littlefs2` crate) on the chip, a seeded
//!   workload, and a power cut at each of many SPI transactions, each followed by power-up,
//!   remount and a check of littlefs's promise.

#![forbid(unsafe_code)]

pub mod campaign;
pub mod driver;

pub use campaign::{run, Config, Report, Violation};
pub use driver::DriverKind;
