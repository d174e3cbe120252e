//! ssdlab-spi: an SPI NOR flash emulator for firmware and tool testing.
//!
//! - [`chip::Flash`]: a JEDEC SPI NOR chip driven one chip-select frame at a time, with
//!   datasheet busy times in simulated time, status-register and block protection, SFDP, erase
//!   counts, fault injection, a persistent image and a command trace.
//! - [`hal`]: the chip as embedded-hal 1.0 `SpiDevice`, `SpiBus` + CS#, /WP and `DelayNs`, so
//!   unmodified Rust flash drivers run against it.
//! - [`parts`]: presets of real parts (W25Q128JV, MX25L6436F, W25Q16JV) with their sources.
//! - [`sfdp`]: the JESD216 tables the presets report.
//! - [`serprog`]: flashrom's serprog protocol over TCP, so flashrom (and anything else that
//!   speaks serprog) programs the emulated chip.

#![forbid(unsafe_code)]

pub mod chip;
pub mod hal;
pub mod parts;
pub mod serprog;
pub mod sfdp;

pub use chip::{CutAt, CutReport, Flash, Options, StuckBit, WearOut};
pub use parts::{part, Part, TimingMode};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument (unknown chip, wrong image size, bad address): what would be valid.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Io(String),
    /// The serprog server could not listen (address, loopback rule, bind, a bad limit) or
    /// failed while serving.
    #[error(transparent)]
    Serve(#[from] ssdlab_server::ServeError),
}
