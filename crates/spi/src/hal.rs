//! The chip as `embedded-hal` 1.0 peripherals, so unmodified Rust flash drivers run on the host
//! against it: [`SpiFlash`] is an `SpiDevice` (one transaction = one chip-select frame),
//! [`Bus`] + [`ChipSelect`] are an `SpiBus` and the CS# pin for drivers (or
//! `embedded-hal-bus`) that drive chip select themselves, [`WriteProtect`] is the /WP pin and
//! [`Delay`] a `DelayNs` that advances the chip's simulated clock.
//!
//! All of them share one chip ([`Shared`]), so a test keeps a handle to inspect it, let time
//! pass or cut power while a driver owns the bus. Without power every operation fails with
//! [`PowerLost`] (the bus is dead), which drivers pass up as their SPI error.

use std::cell::RefCell;
use std::rc::Rc;

use embedded_hal::delay::DelayNs;
use embedded_hal::digital::{self, OutputPin};
use embedded_hal::spi::{self, Operation, SpiBus, SpiDevice};

use crate::chip::Flash;

/// One chip shared by the peripherals and the test that owns them.
pub type Shared = Rc<RefCell<Flash>>;

/// Wrap a chip for sharing.
pub fn shared(f: Flash) -> Shared {
    Rc::new(RefCell::new(f))
}

/// The chip had no power during the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerLost;

impl std::fmt::Display for PowerLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the flash chip has no power")
    }
}

impl std::error::Error for PowerLost {}

impl spi::Error for PowerLost {
    fn kind(&self) -> spi::ErrorKind {
        spi::ErrorKind::Other
    }
}

impl digital::Error for PowerLost {
    fn kind(&self) -> digital::ErrorKind {
        digital::ErrorKind::Other
    }
}

fn powered(c: &Flash) -> Result<(), PowerLost> {
    if c.powered() {
        Ok(())
    } else {
        Err(PowerLost)
    }
}

/// Clock one embedded-hal operation into the open frame.
fn run_op(c: &mut Flash, op: &mut Operation<'_, u8>) {
    match op {
        Operation::Read(buf) => c.clock_read(buf),
        Operation::Write(buf) => {
            for &b in buf.iter() {
                c.clock(b);
            }
        }
        Operation::Transfer(read, write) => full_duplex(c, read, write),
        Operation::TransferInPlace(buf) => {
            for b in buf.iter_mut() {
                *b = c.clock(*b);
            }
        }
        Operation::DelayNs(ns) => c.advance(*ns as u64),
    }
}

/// embedded-hal's `transfer`: as many bytes as the longer buffer; FFh sent past `write`'s end,
/// what is read past `read`'s end dropped.
fn full_duplex(c: &mut Flash, read: &mut [u8], write: &[u8]) {
    for i in 0..read.len().max(write.len()) {
        let miso = c.clock(write.get(i).copied().unwrap_or(0xFF));
        if let Some(r) = read.get_mut(i) {
            *r = miso;
        }
    }
}

/// The chip as an `SpiDevice`: each transaction is one chip-select frame.
pub struct SpiFlash {
    pub chip: Shared,
}

impl SpiFlash {
    pub fn new(chip: Shared) -> SpiFlash {
        SpiFlash { chip }
    }
}

impl spi::ErrorType for SpiFlash {
    type Error = PowerLost;
}

impl SpiDevice for SpiFlash {
    fn transaction(&mut self, operations: &mut [Operation<'_, u8>]) -> Result<(), PowerLost> {
        let mut c = self.chip.borrow_mut();
        c.begin();
        for op in operations.iter_mut() {
            run_op(&mut c, op);
        }
        c.end();
        powered(&c)
    }
}

/// The chip's data lines as an `SpiBus` (chip select is [`ChipSelect`]): bytes clocked go to
/// the frame CS# opened, or open one.
pub struct Bus {
    pub chip: Shared,
}

impl spi::ErrorType for Bus {
    type Error = PowerLost;
}

impl SpiBus for Bus {
    fn read(&mut self, words: &mut [u8]) -> Result<(), PowerLost> {
        self.clock_op(&mut Operation::Read(words))
    }
    fn write(&mut self, words: &[u8]) -> Result<(), PowerLost> {
        self.clock_op(&mut Operation::Write(words))
    }
    fn transfer(&mut self, read: &mut [u8], write: &[u8]) -> Result<(), PowerLost> {
        self.clock_op(&mut Operation::Transfer(read, write))
    }
    fn transfer_in_place(&mut self, words: &mut [u8]) -> Result<(), PowerLost> {
        self.clock_op(&mut Operation::TransferInPlace(words))
    }
    fn flush(&mut self) -> Result<(), PowerLost> {
        powered(&self.chip.borrow())
    }
}

impl Bus {
    /// One operation into the frame CS# opened (the same clocking as [`SpiFlash`]'s).
    fn clock_op(&mut self, op: &mut Operation<'_, u8>) -> Result<(), PowerLost> {
        let mut c = self.chip.borrow_mut();
        run_op(&mut c, op);
        powered(&c)
    }
}

/// The CS# pin: low opens a frame, high ends it (latched commands start).
pub struct ChipSelect {
    pub chip: Shared,
}

impl digital::ErrorType for ChipSelect {
    type Error = PowerLost;
}

impl OutputPin for ChipSelect {
    fn set_low(&mut self) -> Result<(), PowerLost> {
        let mut c = self.chip.borrow_mut();
        c.begin();
        powered(&c)
    }
    fn set_high(&mut self) -> Result<(), PowerLost> {
        let mut c = self.chip.borrow_mut();
        c.end();
        powered(&c)
    }
}

/// The /WP pin (low: a protected status register cannot be written).
pub struct WriteProtect {
    pub chip: Shared,
}

impl digital::ErrorType for WriteProtect {
    type Error = PowerLost;
}

impl OutputPin for WriteProtect {
    fn set_low(&mut self) -> Result<(), PowerLost> {
        self.chip.borrow_mut().set_wp(false);
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), PowerLost> {
        self.chip.borrow_mut().set_wp(true);
        Ok(())
    }
}

/// A pin the model does not use (/HOLD: the emulated chip is never held).
pub struct UnusedPin;

impl digital::ErrorType for UnusedPin {
    type Error = PowerLost;
}

impl OutputPin for UnusedPin {
    fn set_low(&mut self) -> Result<(), PowerLost> {
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), PowerLost> {
        Ok(())
    }
}

/// A delay that lets the chip's simulated time pass (no wall-clock wait).
pub struct Delay {
    pub chip: Shared,
}

impl DelayNs for Delay {
    fn delay_ns(&mut self, ns: u32) {
        self.chip.borrow_mut().advance(ns as u64);
    }
}
