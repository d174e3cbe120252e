//! ssdlab-spi: an SPI NOR flash emulator for firmware and tool testing.
//!
//! - [`chip::Flash`]: a JEDEC SPI NOR chip driven one chip-select frame at a time, with
//!   datasheet busy times in simulated time, status-register and block protection, SFDP, erase
//!   counts, fault injection, a persistent image and a command trace.
//! - [`hal`]: the chip as embedded-hal 1.0 `SpiDevice`, `SpiBus` + CS#, /WP and `DelayNs`, so
//!   unmodified Rust flash drivers run against it.
//! - [`parts`]: presets of real parts (W25Q128JV, MX25L6436F, W25Q16JV) with their sources.
//! - [`sfdp`]: the JESD216 tables the presets report.
//!
//! The chip knows no protocol: flashrom's serprog server, which puts it on TCP, is
//! crates/serve's (`ssdlab_serve::serprog`).

#![forbid(unsafe_code)]

pub mod chip;
pub mod hal;
pub mod parts;
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
}
