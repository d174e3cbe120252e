//! Chip presets: identification bytes, geometry, timings and the block-protection scheme of real
//! SPI NOR parts, each with the datasheet it was transcribed from.
//!
//! Timings are in nanoseconds. `typ` is the datasheet's typical column, `max` its maximum column;
//! the chip uses one of them (`TimingMode`).

use std::ops::Range;

pub const SECTOR_BYTES: u32 = 4096;
pub const BLOCK32_BYTES: u32 = 32 * 1024;
pub const BLOCK64_BYTES: u32 = 64 * 1024;

/// Durations of the self-timed operations of one datasheet column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTimes {
    /// Whole-page program (tPP).
    pub page_program_ns: u64,
    /// First byte of a partial-page program (tBP1) and each further byte (tBP2); a program of
    /// n bytes takes min(tPP, tBP1 + (n - 1) * tBP2).
    pub byte_first_ns: u64,
    pub byte_next_ns: u64,
    /// 4 KiB sector erase (tSE), 32 KiB and 64 KiB block erase (tBE1, tBE2), chip erase (tCE).
    pub sector_erase_ns: u64,
    pub block32_erase_ns: u64,
    pub block64_erase_ns: u64,
    pub chip_erase_ns: u64,
    /// Write status register (tW).
    pub write_status_ns: u64,
}

/// How long the chip's self-timed operations keep it busy (in simulated time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimingMode {
    /// The datasheet's typical column (the default; also called "datasheet").
    Typical,
    /// The datasheet's maximum column (worst case).
    Max,
    /// No busy time: WIP never shows, so a host's polling loop ends at its first status read
    /// (fast firmware loops). The datasheet time is still counted in the statistics.
    Instant,
    /// The typical column times a factor (e.g. 0.01: a hundred times faster than the part).
    Scaled(f64),
}

/// Largest `scale=X` factor accepted.
pub const SCALE_MAX: f64 = 1000.0;

impl TimingMode {
    /// "datasheet" (= "typical"), "max", "instant" or "scale=X" (0 <= X <= 1000).
    pub fn parse(s: &str) -> Result<TimingMode, crate::Error> {
        let bad = || {
            crate::Error::Invalid(format!(
                "timing {s:?}: expected datasheet (or typical), max, instant or scale=X with 0 <= X <= {SCALE_MAX}"
            ))
        };
        match s {
            "datasheet" | "typ" | "typical" => Ok(TimingMode::Typical),
            "max" | "maximum" => Ok(TimingMode::Max),
            "instant" => Ok(TimingMode::Instant),
            _ => {
                let x: f64 = s.strip_prefix("scale=").ok_or_else(bad)?.parse().map_err(|_| bad())?;
                if !(0.0..=SCALE_MAX).contains(&x) {
                    return Err(bad());
                }
                Ok(TimingMode::Scaled(x))
            }
        }
    }

    /// The busy time this mode gives an operation that the datasheet column says takes `ns`.
    pub fn apply(&self, ns: u64) -> u64 {
        match self {
            TimingMode::Typical | TimingMode::Max => ns,
            TimingMode::Instant => 0,
            TimingMode::Scaled(x) => (ns as f64 * x).round() as u64,
        }
    }
}

/// How the status registers are laid out (the vendor families differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registers {
    /// Winbond W25Q..JV: SR1 (05h/01h) = BUSY WEL BP0 BP1 BP2 TB SEC SRP; SR2 (35h/31h) = SRL QE -
    /// LB1 LB2 LB3 CMP SUS; SR3 (15h/11h) = - - WPS - - DRV0 DRV1 -. 50h enables a volatile write.
    Winbond,
    /// Macronix MX25L..F: SR (05h/01h) = WIP WEL BP0 BP1 BP2 BP3 QE SRWD; configuration register
    /// (15h, written as WRSR's second byte) = ODS0 ODS1 ODS2 TB - - DC0 DC1.
    Macronix,
}

/// Block-protection scheme (what the BP bits mean).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Winbond: BP2..BP0 select 1/2^k of the array from the top (TB=0) or bottom (TB=1), the
    /// smallest region being `unit_bytes`; SEC=1 selects 4/8/16/32 KiB instead; BP=111 is the
    /// whole array; CMP=1 protects the complement.
    Winbond { unit_bytes: u32 },
    /// Macronix: BP3..BP0 = n protects 2^(n-1) 64 KiB blocks from the top (TB=0) or bottom (TB=1)
    /// until the whole array; n >= 8 is the whole array.
    Macronix,
}

#[derive(Debug, Clone)]
pub struct Part {
    /// The name users type (`--chip`).
    pub name: &'static str,
    pub vendor: &'static str,
    /// The datasheet every number below comes from.
    pub datasheet: &'static str,
    /// RDID (9Fh): manufacturer, memory type, capacity.
    pub jedec_id: [u8; 3],
    /// RES (ABh) electronic signature / device ID.
    pub device_id: u8,
    /// REMS (90h): manufacturer, device.
    pub rems_id: [u8; 2],
    pub size_bytes: u32,
    pub page_bytes: u32,
    pub typ: OpTimes,
    pub max: OpTimes,
    /// Erase/program suspend (75h) and resume (7Ah) with the suspend latency tSUS; None = not
    /// modelled for this part.
    pub suspend_ns: Option<u64>,
    /// Deep power-down entry (tDP) and release (tRES1) times; software reset recovery (tRST).
    pub power_down_ns: u64,
    pub release_ns: u64,
    pub reset_ns: u64,
    /// Power-up: commands are ignored until tVSL after power returns, write commands until
    /// tPUW.
    pub power_up_ns: u64,
    pub power_up_write_ns: u64,
    pub registers: Registers,
    pub protection: Protection,
    /// Status register values at power-on (SR1/SR2/SR3 or SR/CR/unused).
    pub sr_default: [u8; 3],
    /// 4Bh read unique ID (Winbond: 4 dummy bytes, then 64 bits).
    pub has_unique_id: bool,
    /// 3Bh fast read dual output and 6Bh fast read quad output (the latter needs QE = 1).
    pub dual_output: bool,
    pub quad_output: bool,
    /// Highest clock of FAST_READ and friends; serprog's S_SPI_FREQ is capped to it.
    pub max_clock_hz: u32,
    /// Program/erase cycles each sector is specified for.
    pub endurance_cycles: u32,
    /// SFDP revision this part reports (minor, major) and where its BFPT lives; `bfpt_dwords` is 9
    /// (JESD216) or 16 (JESD216A/B).
    pub sfdp_rev: (u8, u8),
    pub bfpt_offset: u32,
    pub bfpt_dwords: u8,
}

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const S: u64 = 1_000_000_000;

/// Winbond W25Q128JV, datasheet "W25Q128JV 3V 128M-bit serial flash memory with uniform 4KB
/// sectors and dual/quad SPI" (Winbond): ID table (EF 40 18, device ID 17h),
/// status registers, block protection table (SEC/TB/BP/CMP), AC
/// characteristics (tPP 0.7/3 ms, tBP1 30/50 us, tBP2 2.5/12 us, tSE 45/400 ms, tBE1 120/1600
/// ms, tBE2 150/2000 ms, tCE 40/200 s, tW 10/15 ms, tSUS 20 us, tDP 3 us, tRES1 3 us, tRST 30 us),
/// erase/program suspend and resume (75h/7Ah, SUS = SR2 bit 7).
pub fn w25q128jv() -> Part {
    Part {
        name: "W25Q128JV",
        vendor: "Winbond",
        datasheet: "Winbond W25Q128JV datasheet (3V 128M-bit serial flash, dual/quad SPI)",
        jedec_id: [0xEF, 0x40, 0x18],
        device_id: 0x17,
        rems_id: [0xEF, 0x17],
        size_bytes: 16 * 1024 * 1024,
        page_bytes: 256,
        typ: OpTimes {
            page_program_ns: 700 * US,
            byte_first_ns: 30 * US,
            byte_next_ns: 2500,
            sector_erase_ns: 45 * MS,
            block32_erase_ns: 120 * MS,
            block64_erase_ns: 150 * MS,
            chip_erase_ns: 40 * S,
            write_status_ns: 10 * MS,
        },
        max: OpTimes {
            page_program_ns: 3 * MS,
            byte_first_ns: 50 * US,
            byte_next_ns: 12 * US,
            sector_erase_ns: 400 * MS,
            block32_erase_ns: 1600 * MS,
            block64_erase_ns: 2000 * MS,
            chip_erase_ns: 200 * S,
            write_status_ns: 15 * MS,
        },
        suspend_ns: Some(20 * US),
        power_down_ns: 3 * US,
        release_ns: 3 * US,
        reset_ns: 30 * US,
        power_up_ns: 20 * US,
        power_up_write_ns: 5 * MS,
        registers: Registers::Winbond,
        protection: Protection::Winbond { unit_bytes: 256 * 1024 },
        // IQ/JQ ordering codes ship with QE = 1 (datasheet, Quad Enable bit).
        sr_default: [0x00, 0x02, 0x60],
        has_unique_id: true,
        dual_output: true,
        quad_output: true,
        max_clock_hz: 133_000_000,
        endurance_cycles: 100_000,
        sfdp_rev: (5, 1),
        bfpt_offset: 0x80,
        bfpt_dwords: 16,
    }
}

/// Winbond W25Q16JV, datasheet "W25Q16JV 3V 16M-bit serial flash memory with uniform 4KB sectors
/// and dual/quad SPI" (Winbond): ID EF 40 15, device ID 14h, same register set and
/// protection rules as the W25Q128JV with a 64 KiB smallest BP region (1/32 of the array), tPP
/// 0.7/3 ms, tSE 45/400 ms, tBE1 120/1600 ms, tBE2 150/2000 ms, tCE 5/25 s, tW 10/15 ms.
pub fn w25q16jv() -> Part {
    let mut p = w25q128jv();
    p.name = "W25Q16JV";
    p.datasheet = "Winbond W25Q16JV datasheet (3V 16M-bit serial flash, dual/quad SPI)";
    p.jedec_id = [0xEF, 0x40, 0x15];
    p.device_id = 0x14;
    p.rems_id = [0xEF, 0x14];
    p.size_bytes = 2 * 1024 * 1024;
    p.typ.chip_erase_ns = 5 * S;
    p.max.chip_erase_ns = 25 * S;
    p.protection = Protection::Winbond { unit_bytes: 64 * 1024 };
    p
}

/// Macronix MX25L6436F, datasheet "MX25L6436F 3V, 64M-bit [x1/x2/x4] CMOS MXSMIO serial flash
/// memory" (Macronix): RDID C2 20 17, RES 16h, REMS C2 16, status and configuration
/// register, protected-area table (BP3..BP0 with TB in the configuration register). The AC
/// timings below (tPP 0.5/3 ms, tSE 40/200 ms, tBE32 0.2/1 s, tBE64 0.4/2 s, tCE 25/50 s, tW
/// 40 ms typical, tDP 10 us, tRES1 8.8 us) were transcribed without a copy of the datasheet at
/// hand to cross-check; the tW maximum (100 ms) is our placeholder. Check them against your
/// copy before relying on absolute Macronix times. No 4Bh unique ID (the part has a secured OTP
/// area instead, not modelled), no 50h.
pub fn mx25l6436f() -> Part {
    Part {
        name: "MX25L6436F",
        vendor: "Macronix",
        datasheet: "Macronix MX25L6436F datasheet (3V 64M-bit MXSMIO serial flash)",
        jedec_id: [0xC2, 0x20, 0x17],
        device_id: 0x16,
        rems_id: [0xC2, 0x16],
        size_bytes: 8 * 1024 * 1024,
        page_bytes: 256,
        typ: OpTimes {
            page_program_ns: 500 * US,
            byte_first_ns: 30 * US,
            byte_next_ns: 2 * US,
            sector_erase_ns: 40 * MS,
            block32_erase_ns: 200 * MS,
            block64_erase_ns: 400 * MS,
            chip_erase_ns: 25 * S,
            write_status_ns: 40 * MS,
        },
        max: OpTimes {
            page_program_ns: 3 * MS,
            byte_first_ns: 60 * US,
            byte_next_ns: 12 * US,
            sector_erase_ns: 200 * MS,
            block32_erase_ns: 1000 * MS,
            block64_erase_ns: 2000 * MS,
            chip_erase_ns: 50 * S,
            write_status_ns: 100 * MS,
        },
        suspend_ns: None,
        power_down_ns: 10 * US,
        release_ns: 8800,
        reset_ns: 100 * US,
        power_up_ns: 300 * US,
        power_up_write_ns: 10 * MS,
        registers: Registers::Macronix,
        protection: Protection::Macronix,
        sr_default: [0x00, 0x00, 0x00],
        has_unique_id: false,
        dual_output: true,
        quad_output: true,
        max_clock_hz: 133_000_000,
        endurance_cycles: 100_000,
        sfdp_rev: (0, 1),
        bfpt_offset: 0x30,
        bfpt_dwords: 9,
    }
}

pub const NAMES: [&str; 3] = ["W25Q128JV", "MX25L6436F", "W25Q16JV"];

/// A preset by name (case-insensitive).
pub fn part(name: &str) -> Option<Part> {
    match name.to_ascii_uppercase().as_str() {
        "W25Q128JV" => Some(w25q128jv()),
        "W25Q16JV" => Some(w25q16jv()),
        "MX25L6436F" => Some(mx25l6436f()),
        _ => None,
    }
}

impl Part {
    pub fn times(&self, mode: TimingMode) -> &OpTimes {
        match mode {
            TimingMode::Max => &self.max,
            TimingMode::Typical | TimingMode::Instant | TimingMode::Scaled(_) => &self.typ,
        }
    }

    /// The byte range the block-protect bits protect (empty when none). `sr` is the chip's
    /// register file (SR1, SR2, SR3 or SR, CR, -).
    pub fn protected_range(&self, sr: &[u8; 3]) -> Range<u32> {
        let r = self.protected_range_raw(sr);
        if r.is_empty() {
            0..0
        } else {
            r
        }
    }

    fn protected_range_raw(&self, sr: &[u8; 3]) -> Range<u32> {
        let size = self.size_bytes;
        match self.protection {
            Protection::Winbond { unit_bytes } => {
                let bp = (sr[0] >> 2) & 0x7;
                let tb = sr[0] & 0x20 != 0;
                let sec = sr[0] & 0x40 != 0;
                let cmp = sr[1] & 0x40 != 0;
                let len = if bp == 0 {
                    0
                } else if bp == 7 {
                    size
                } else if sec {
                    // 001: 4 KiB, 010: 8 KiB, 011: 16 KiB, 10x: 32 KiB. 110 is not listed in the
                    // table; we treat it like 10x (32 KiB).
                    SECTOR_BYTES << (bp.min(4) - 1)
                } else {
                    (unit_bytes as u64 * (1u64 << (bp - 1))).min(size as u64) as u32
                };
                let from_bottom = tb;
                let base = if from_bottom { 0..len } else { size - len..size };
                if cmp {
                    complement(base, size)
                } else {
                    base
                }
            }
            Protection::Macronix => {
                let bp = (sr[0] >> 2) & 0xF;
                let tb = sr[1] & 0x08 != 0;
                let len = if bp == 0 { 0 } else { (BLOCK64_BYTES as u64 * (1u64 << (bp - 1).min(20))).min(size as u64) as u32 };
                if tb {
                    0..len
                } else {
                    size - len..size
                }
            }
        }
    }
}

/// The complement of a region that touches one end of `0..size` (what CMP = 1 protects).
fn complement(r: Range<u32>, size: u32) -> Range<u32> {
    if r.is_empty() {
        0..size
    } else if r.start == 0 {
        r.end..size
    } else {
        0..r.start
    }
}
