//! Flash drivers the campaign runs littlefs through: the crates.io `w25q32jv` driver unmodified
//! (built for the 128 Mbit part, its read-back check on), a minimal driver of ours (read-back
//! check too), and the same minimal driver with its status polling removed (the deliberately
//! broken variant a campaign must catch).
//!
//! Every driver talks to the chip through [`Tap`], the `SpiDevice` that also lets the campaign
//! fork the chip at chosen frames (a copy of the chip as it is when that frame begins, with the
//! power cut there), so one workload run yields every cut point.

use std::cell::RefCell;
use std::rc::Rc;

use embedded_hal::spi::{Operation, SpiDevice};
use ssdlab_spi::hal::{PowerLost, Shared, SpiFlash, UnusedPin, WriteProtect};
use ssdlab_spi::Flash;
use w25q32jv::W25q32jv;

/// Which driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverKind {
    /// crates.io `w25q32jv` 0.5 (embedded-hal 1.0 `SpiDevice`; its read-back check on).
    W25q32jv,
    /// ssdlab's minimal driver: WREN, command, poll WIP, as the datasheet says.
    Minimal,
    /// The minimal driver without status polling: it sends the next command while the chip is
    /// still busy (the chip ignores it), as firmware with a missing wait does.
    NoPoll,
}

impl DriverKind {
    pub fn parse(s: &str) -> Result<DriverKind, String> {
        match s {
            "w25q32jv" => Ok(DriverKind::W25q32jv),
            "minimal" => Ok(DriverKind::Minimal),
            "no-poll" => Ok(DriverKind::NoPoll),
            _ => Err(format!("driver {s:?}: expected w25q32jv, minimal or no-poll")),
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            DriverKind::W25q32jv => "w25q32jv",
            DriverKind::Minimal => "minimal",
            DriverKind::NoPoll => "no-poll",
        }
    }
}

/// What to do with a fork: (frame, the chip as that frame began, its power cut). It runs inside
/// the driver's SPI transaction, on its own copy of the chip, so a campaign holds one fork at a
/// time whatever the number of cut points.
pub type ForkHook<'a> = Box<dyn FnMut(u64, Flash) + 'a>;

/// Chip forks taken at chosen frames, each with its power cut as that frame begins.
#[derive(Default)]
pub struct Forks<'a> {
    /// Frames still to fork at, last first.
    pub pending: Vec<u64>,
    pub hook: Option<ForkHook<'a>>,
    /// When set, the frames that carry a command other than a status read are listed here (a
    /// dry run finds the moments between commands this way).
    pub commands: Option<Vec<u64>>,
}

/// The chip as an `SpiDevice` that forks it at the frames in [`Forks::pending`].
pub struct Tap<'a> {
    spi: SpiFlash,
    forks: Rc<RefCell<Forks<'a>>>,
}

impl<'a> Tap<'a> {
    pub fn new(chip: Shared, forks: Rc<RefCell<Forks<'a>>>) -> Tap<'a> {
        Tap { spi: SpiFlash::new(chip), forks }
    }
}

impl embedded_hal::spi::ErrorType for Tap<'_> {
    type Error = PowerLost;
}

impl SpiDevice for Tap<'_> {
    fn transaction(&mut self, operations: &mut [Operation<'_, u8>]) -> Result<(), PowerLost> {
        let mut fork = None;
        {
            let mut forks = self.forks.borrow_mut();
            let next = self.spi.chip.borrow().frames_begun() + 1;
            while let Some(&k) = forks.pending.last() {
                if k > next {
                    break;
                }
                forks.pending.pop();
                if k == next && forks.hook.is_some() {
                    let mut copy = self.spi.chip.borrow().snapshot();
                    copy.power_cut();
                    fork = Some((k, copy));
                }
            }
            if let Some(list) = forks.commands.as_mut() {
                let first = operations.iter().find_map(|op| match op {
                    Operation::Write(b) => b.first().copied(),
                    Operation::TransferInPlace(b) => b.first().copied(),
                    Operation::Transfer(_, w) => w.first().copied(),
                    _ => None,
                });
                if first != Some(0x05) {
                    list.push(next);
                }
            }
        }
        if let Some((k, copy)) = fork {
            let hook = self.forks.borrow_mut().hook.take();
            if let Some(mut h) = hook {
                h(k, copy);
                self.forks.borrow_mut().hook = Some(h);
            }
        }
        self.spi.transaction(operations)
    }
}

/// How a driver operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrvError {
    /// The data read back after a program or erase is not what was asked for (the block is bad
    /// as far as the caller can tell: littlefs relocates on it).
    Verify,
    /// Anything else (a dead bus, a timeout, write enable refused), with the driver's words.
    Other(String),
}

impl std::fmt::Display for DrvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrvError::Verify => f.write_str("read-back after program or erase differs"),
            DrvError::Other(s) => f.write_str(s),
        }
    }
}

/// What littlefs needs from a driver.
pub trait NorDriver {
    fn read(&mut self, addr: u32, buf: &mut [u8]) -> Result<(), DrvError>;
    fn program(&mut self, addr: u32, data: &[u8]) -> Result<(), DrvError>;
    fn erase_sector(&mut self, index: u32) -> Result<(), DrvError>;
}

fn crate_err<S: std::fmt::Debug, P: std::fmt::Debug>(e: w25q32jv::Error<S, P>) -> DrvError {
    match e {
        w25q32jv::Error::ReadbackFail => DrvError::Verify,
        e => DrvError::Other(format!("{e:?}")),
    }
}

/// The crates.io driver. Its `erase_range` unwraps SPI errors (a panic on a dead bus), so
/// sectors are erased one by one with `erase_sector`, which returns them.
pub struct Crate<'a>(W25q32jv<Tap<'a>, UnusedPin, WriteProtect>);

impl NorDriver for Crate<'_> {
    fn read(&mut self, addr: u32, buf: &mut [u8]) -> Result<(), DrvError> {
        self.0.read(addr, buf).map_err(crate_err)
    }
    fn program(&mut self, addr: u32, data: &[u8]) -> Result<(), DrvError> {
        self.0.write_blocking(addr, data).map_err(crate_err)
    }
    fn erase_sector(&mut self, index: u32) -> Result<(), DrvError> {
        self.0.erase_sector(index).map_err(crate_err)
    }
}

/// ssdlab's minimal W25Q driver (with `poll` false: the broken variant).
pub struct Minimal<'a> {
    spi: Tap<'a>,
    poll: bool,
    page: u32,
}

impl Minimal<'_> {
    fn cmd(&mut self, bytes: &[u8]) -> Result<(), DrvError> {
        self.spi.transaction(&mut [Operation::Write(bytes)]).map_err(bus)
    }
    fn status(&mut self) -> Result<u8, DrvError> {
        let mut b = [0x05, 0];
        self.spi.transaction(&mut [Operation::TransferInPlace(&mut b)]).map_err(bus)?;
        Ok(b[1])
    }
    /// Read `want.len()` bytes at `addr` and compare.
    fn verify(&mut self, addr: u32, want: &[u8]) -> Result<(), DrvError> {
        let mut got = vec![0u8; want.len()];
        self.read(addr, &mut got)?;
        if got == want {
            Ok(())
        } else {
            Err(DrvError::Verify)
        }
    }
    /// Poll WIP every 10 us of simulated time, for at most `limit_ns`.
    fn wait(&mut self, limit_ns: u64) -> Result<(), DrvError> {
        if !self.poll {
            return Ok(());
        }
        let mut waited = 0;
        while self.status()? & 0x01 != 0 {
            if waited > limit_ns {
                return Err(DrvError::Other("timed out waiting for WIP = 0".into()));
            }
            self.spi.transaction(&mut [Operation::DelayNs(10_000)]).map_err(bus)?;
            waited += 10_000;
        }
        Ok(())
    }
    fn write_enable(&mut self) -> Result<(), DrvError> {
        self.cmd(&[0x06])?;
        if self.poll && self.status()? & 0x02 == 0 {
            return Err(DrvError::Other("WEL did not set".into()));
        }
        Ok(())
    }
}

fn bus(e: PowerLost) -> DrvError {
    DrvError::Other(e.to_string())
}

fn addr_cmd(op: u8, a: u32) -> [u8; 4] {
    [op, (a >> 16) as u8, (a >> 8) as u8, a as u8]
}

impl NorDriver for Minimal<'_> {
    fn read(&mut self, addr: u32, buf: &mut [u8]) -> Result<(), DrvError> {
        self.spi.transaction(&mut [Operation::Write(&addr_cmd(0x03, addr)), Operation::Read(buf)]).map_err(bus)
    }
    fn program(&mut self, mut addr: u32, mut data: &[u8]) -> Result<(), DrvError> {
        while !data.is_empty() {
            let n = ((self.page - addr % self.page) as usize).min(data.len());
            self.write_enable()?;
            self.spi.transaction(&mut [Operation::Write(&addr_cmd(0x02, addr)), Operation::Write(&data[..n])]).map_err(bus)?;
            self.wait(10_000_000)?;
            self.verify(addr, &data[..n])?;
            addr += n as u32;
            data = &data[n..];
        }
        Ok(())
    }
    fn erase_sector(&mut self, index: u32) -> Result<(), DrvError> {
        self.write_enable()?;
        self.cmd(&addr_cmd(0x20, index * 4096))?;
        self.wait(1_000_000_000)?;
        self.verify(index * 4096, &[0xFF; 4096])
    }
}

/// A driver of `kind` on `chip`, forking it as `forks` says.
pub fn open<'a>(kind: DriverKind, chip: &Shared, forks: Rc<RefCell<Forks<'a>>>) -> Box<dyn NorDriver + 'a> {
    let tap = Tap::new(chip.clone(), forks);
    match kind {
        DriverKind::W25q32jv => {
            Box::new(Crate(W25q32jv::new(tap, UnusedPin, WriteProtect { chip: chip.clone() }).expect("pins cannot fail")))
        }
        DriverKind::Minimal | DriverKind::NoPoll => {
            let page = chip.borrow().part().page_bytes;
            Box::new(Minimal { spi: tap, poll: kind == DriverKind::Minimal, page })
        }
    }
}
