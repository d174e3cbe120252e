//! The SFDP area (JESD216) a part answers to RDSFDP (5Ah): the SFDP header, one parameter header
//! and the Basic Flash Parameter Table (BFPT), generated from the part's own numbers so the table
//! and the behaviour cannot disagree.
//!
//! The table advertises only what the emulator implements: 1-1-1, 1-1-2 (3Bh) and 1-1-4 (6Bh)
//! reads, the 4 KiB / 32 KiB / 64 KiB erase types, 3-byte addressing. A real chip's table also
//! lists 1-2-2 and 1-4-4 reads, which we do not model. Suspend/resume (DWORDs 12-13) is
//! advertised exactly when the part models it.

use crate::parts::{Part, Registers, BLOCK32_BYTES, BLOCK64_BYTES, SECTOR_BYTES};

/// Size of the SFDP address space we fill; reads beyond it return FFh.
pub const SFDP_BYTES: usize = 256;
pub const SIGNATURE: u32 = 0x5044_4653; // "SFDP", little-endian

/// Encode a time as JESD216 `count` bits + `unit` bits: the smallest unit in which (count + 1) *
/// unit >= t fits in `count_bits` bits. Returns (count, unit index).
fn encode_time(t_ns: u64, units_ns: &[u64], count_bits: u32) -> (u32, u32) {
    let max_count = (1u64 << count_bits) - 1;
    for (i, &u) in units_ns.iter().enumerate() {
        let n = t_ns.div_ceil(u).max(1);
        if n - 1 <= max_count {
            return ((n - 1) as u32, i as u32);
        }
    }
    (max_count as u32, (units_ns.len() - 1) as u32)
}

/// BFPT DWORDs 12 and 13 (JESD216B): suspend/resume. When the part suspends (75h/7Ah): bit 31
/// = 0, the suspend latency of erases (bits 30:24) and programs (bits 19:13) from the part's tSUS,
/// the shortest resume-to-suspend interval the field can say (64 us, count 0: the model has no
/// minimum), bit 8 reserved = 1, and the prohibited-operation nibbles at 0000b, the most
/// restrictive reading (a host honouring them stays within what the model allows: no new erase,
/// no status write and no program into the suspended erase); DWORD 13 = erase suspend, erase
/// resume, program suspend, program resume opcodes (75h, 7Ah, 75h, 7Ah).
fn suspend_dwords(p: &Part) -> (u32, u32) {
    let Some(tsus) = p.suspend_ns else { return (0xFFFF_FFFF, 0xFFFF_FFFF) };
    let (c, u) = encode_time(tsus, &[128, 1_000, 8_000, 64_000], 5);
    let latency = c | (u << 5); // 2 unit bits above 5 count bits
    let dw12 = (latency << 24) | (latency << 13) | (1 << 8);
    (dw12, 0x75 << 24 | 0x7A << 16 | 0x75 << 8 | 0x7A)
}

/// Max/typ multiplier field: the smallest m with 2 * (m + 1) * typ >= max (4 bits).
fn encode_multiplier(typ_ns: u64, max_ns: u64) -> u32 {
    (0..16u32).find(|&m| 2 * (m as u64 + 1) * typ_ns >= max_ns).unwrap_or(15)
}

pub const ERASE_UNITS_NS: [u64; 4] = [1_000_000, 16_000_000, 128_000_000, 1_000_000_000];
pub const CHIP_ERASE_UNITS_NS: [u64; 4] = [16_000_000, 256_000_000, 4_000_000_000, 64_000_000_000];
pub const PAGE_UNITS_NS: [u64; 2] = [8_000, 64_000];
pub const BYTE_UNITS_NS: [u64; 2] = [1_000, 8_000];

/// The BFPT DWORDs (1-based in the standard; index 0 here is DWORD 1).
pub fn bfpt(p: &Part) -> Vec<u32> {
    let mut d = vec![0u32; p.bfpt_dwords as usize];
    // DWORD 1: 4 KiB erase everywhere (01b), write granularity >= 64 bytes, non-volatile status
    // bits, 4 KiB erase opcode 20h, 1-1-2 and 1-1-4 fast reads, 3-byte addresses only, no DTR.
    let mut d1: u32 = 0b01 | (1 << 2) | (0b111 << 5) | (0x20 << 8) | (0x1FF << 23);
    if p.dual_output {
        d1 |= 1 << 16;
    }
    if p.quad_output {
        d1 |= 1 << 22;
    }
    d[0] = d1;
    // DWORD 2: density in bits minus one (parts <= 2 Gbit).
    d[1] = p.size_bytes * 8 - 1;
    // DWORD 3: 1-1-4 fast read: 8 dummy clocks, no mode clocks, opcode 6Bh (1-4-4 not offered).
    d[2] = if p.quad_output { (0x6B << 24) | (8 << 16) } else { 0 };
    // DWORD 4: 1-1-2 fast read: 8 dummy clocks, opcode 3Bh (1-2-2 not offered).
    d[3] = if p.dual_output { (0x3B << 8) | 8 } else { 0 };
    // DWORD 5-7: no 2-2-2 or 4-4-4 modes; reserved bits are 1.
    d[4] = 0xFFFF_FFEE;
    d[5] = 0x0000_FFFF;
    d[6] = 0x0000_FFFF;
    // DWORD 8-9: erase types (size as a power of two, opcode).
    d[7] = (SECTOR_BYTES.trailing_zeros()) | (0x20 << 8) | (BLOCK32_BYTES.trailing_zeros() << 16) | (0x52 << 24);
    d[8] = BLOCK64_BYTES.trailing_zeros() | (0xD8 << 8);
    if p.bfpt_dwords >= 16 {
        let (t, m) = (&p.typ, &p.max);
        // DWORD 10: typical erase times per type and the typ->max multiplier.
        let mult = [
            encode_multiplier(t.sector_erase_ns, m.sector_erase_ns),
            encode_multiplier(t.block32_erase_ns, m.block32_erase_ns),
            encode_multiplier(t.block64_erase_ns, m.block64_erase_ns),
        ]
        .into_iter()
        .max()
        .unwrap_or(15);
        let field = |ns: u64| {
            let (c, u) = encode_time(ns, &ERASE_UNITS_NS, 5);
            c | (u << 5)
        };
        d[9] = mult | (field(t.sector_erase_ns) << 4) | (field(t.block32_erase_ns) << 11) | (field(t.block64_erase_ns) << 18);
        // DWORD 11: program multiplier, page size, page/byte program times, chip erase time.
        let pmult = encode_multiplier(t.page_program_ns, m.page_program_ns);
        let (pc, pu) = encode_time(t.page_program_ns, &PAGE_UNITS_NS, 5);
        let (fc, fu) = encode_time(t.byte_first_ns, &BYTE_UNITS_NS, 4);
        let (nc, nu) = encode_time(t.byte_next_ns, &BYTE_UNITS_NS, 4);
        let (cc, cu) = encode_time(t.chip_erase_ns, &CHIP_ERASE_UNITS_NS, 5);
        d[10] = pmult
            | (p.page_bytes.trailing_zeros() << 4)
            | ((pc | (pu << 5)) << 8)
            | ((fc | (fu << 4)) << 14)
            | ((nc | (nu << 4)) << 19)
            | ((cc | (cu << 5)) << 24)
            | (1 << 31);
        // DWORD 12-13: suspend/resume as the model runs it (bit 31 = 0: supported), or not
        // supported (bit 31 = 1, the rest unused).
        (d[11], d[12]) = suspend_dwords(p);
        // DWORD 14: deep power-down supported (bit 31 = 0), enter B9h, exit ABh, exit delay,
        // busy polled through the status register's WIP bit (bit 2), reserved bits 1:0 = 11.
        let (xc, xu) = encode_time(p.release_ns, &[128, 1_000, 8_000, 64_000], 5);
        d[13] = (0xB9 << 23) | (0xAB << 15) | ((xc | (xu << 5)) << 8) | (1 << 2) | 0b11;
        // DWORD 15: HOLD/RESET allowed, quad-enable requirement, no 0-4-4 mode.
        let qer: u32 = match p.registers {
            Registers::Winbond => 0b101,  // QE = SR2 bit 1, read with 35h, written with 01h+2 bytes
            Registers::Macronix => 0b010, // QE = SR bit 6
        };
        d[14] = (0xFF << 24) | (qer << 20);
        // DWORD 16: no 4-byte addressing; soft reset = 66h then 99h (bit 12); status register 1
        // non-volatile, written after 06h, volatile copy after 50h (bits 6:0 = 000_1000b);
        // reserved bit 7 = 1.
        d[15] = (1 << 12) | (1 << 7) | 0b000_1000;
    }
    d
}

/// The whole SFDP area: header at 0, parameter header at 8, BFPT at the part's offset.
pub fn image(p: &Part) -> [u8; SFDP_BYTES] {
    let mut a = [0xFFu8; SFDP_BYTES];
    a[0..4].copy_from_slice(&SIGNATURE.to_le_bytes());
    a[4] = p.sfdp_rev.0; // minor
    a[5] = p.sfdp_rev.1; // major
    a[6] = 0; // number of parameter headers - 1
    a[7] = 0xFF; // access protocol: legacy SPI (JESD216B: FFh)
    let ptr = p.bfpt_offset;
    a[8] = 0x00; // parameter ID LSB: BFPT is FF00h
    a[9] = p.sfdp_rev.0;
    a[10] = p.sfdp_rev.1;
    a[11] = p.bfpt_dwords;
    a[12] = ptr as u8;
    a[13] = (ptr >> 8) as u8;
    a[14] = (ptr >> 16) as u8;
    a[15] = 0xFF; // parameter ID MSB
    for (i, dw) in bfpt(p).iter().enumerate() {
        let at = ptr as usize + 4 * i;
        a[at..at + 4].copy_from_slice(&dw.to_le_bytes());
    }
    a
}
