//! Every command, protection case, busy behaviour and the SFDP table of the presets.

use ssdlab_spi::parts::{self, Part, TimingMode};
use ssdlab_spi::{Flash, Options, StuckBit};

const KB: u32 = 1024;
const MB: u32 = 1024 * 1024;

fn chip(name: &str) -> Flash {
    Flash::new(parts::part(name).unwrap(), None, Options::default()).unwrap()
}

fn a3(addr: u32) -> [u8; 3] {
    [(addr >> 16) as u8, (addr >> 8) as u8, addr as u8]
}

fn cmd_addr(op: u8, addr: u32, extra: &[u8]) -> Vec<u8> {
    let mut v = vec![op];
    v.extend_from_slice(&a3(addr));
    v.extend_from_slice(extra);
    v
}

fn rdsr(f: &mut Flash) -> u8 {
    f.transfer(&[0x05, 0])[1]
}

fn read(f: &mut Flash, addr: u32, n: usize) -> Vec<u8> {
    f.transfer(&cmd_addr(0x03, addr, &vec![0; n]))[4..].to_vec()
}

fn wait(f: &mut Flash) {
    let left = f.busy_until_ns().saturating_sub(f.now_ns());
    f.advance(left);
    assert_eq!(rdsr(f) & 1, 0);
}

fn program(f: &mut Flash, addr: u32, data: &[u8]) {
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, addr, data));
    wait(f);
}

fn erase(f: &mut Flash, op: u8, addr: u32) {
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(op, addr, &[]));
    wait(f);
}

fn write_sr(f: &mut Flash, bytes: &[u8]) {
    f.transfer(&[0x06]);
    let mut v = vec![0x01];
    v.extend_from_slice(bytes);
    f.transfer(&v);
    wait(f);
}

#[test]
fn identification_of_every_preset() {
    for (name, id, dev) in
        [("W25Q128JV", [0xEF, 0x40, 0x18], 0x17), ("W25Q16JV", [0xEF, 0x40, 0x15], 0x14), ("MX25L6436F", [0xC2, 0x20, 0x17], 0x16)]
    {
        let mut f = chip(name);
        assert_eq!(&f.transfer(&[0x9F, 0, 0, 0])[1..], &id, "{name}");
        assert_eq!(f.transfer(&[0xAB, 0, 0, 0, 0])[4], dev, "{name} RES");
        assert_eq!(&f.transfer(&[0x90, 0, 0, 0, 0, 0])[4..], &[id[0], dev], "{name} REMS");
        assert_eq!(&f.transfer(&[0x90, 0, 0, 1, 0, 0])[4..], &[dev, id[0]], "{name} REMS addr 1");
    }
}

#[test]
fn reads_wrap_and_fast_reads_take_a_dummy_byte() {
    let mut f = chip("W25Q16JV");
    program(&mut f, 0, &[1, 2, 3, 4]);
    let end = 2 * MB - 2;
    program(&mut f, end, &[0xAA, 0xBB]);
    // READ wraps from the last byte to address 0.
    assert_eq!(read(&mut f, end, 4), vec![0xAA, 0xBB, 1, 2]);
    // FAST_READ: address, one dummy byte, then data.
    assert_eq!(&f.transfer(&cmd_addr(0x0B, 1, &[0, 0, 0, 0]))[5..], &[2, 3, 4]);
    // Dual/quad output reads return the bytes as the host assembles them, in fewer clocks.
    let t0 = f.now_ns();
    assert_eq!(&f.transfer(&cmd_addr(0x0B, 0, &[0; 65]))[5..9], &[1, 2, 3, 4]);
    let t_single = f.now_ns() - t0;
    let t0 = f.now_ns();
    assert_eq!(&f.transfer(&cmd_addr(0x3B, 0, &[0; 65]))[5..9], &[1, 2, 3, 4]);
    let t_dual = f.now_ns() - t0;
    let t0 = f.now_ns();
    assert_eq!(&f.transfer(&cmd_addr(0x6B, 0, &[0; 65]))[5..9], &[1, 2, 3, 4]);
    let t_quad = f.now_ns() - t0;
    // 8 MHz: 1 us per single-line byte; header 5 bytes, then 64 data bytes at 1, 1/2, 1/4 us.
    assert_eq!(t_single, 69_000);
    assert_eq!(t_dual, 5_000 + 32_000);
    assert_eq!(t_quad, 5_000 + 16_000);
}

#[test]
fn quad_read_needs_qe_on_macronix() {
    let mut f = chip("MX25L6436F");
    program(&mut f, 0, &[0x12]);
    assert_eq!(f.transfer(&cmd_addr(0x6B, 0, &[0, 0]))[5], 0xFF, "QE = 0: ignored");
    write_sr(&mut f, &[0x40]);
    assert_eq!(f.registers()[0], 0x40);
    assert_eq!(f.transfer(&cmd_addr(0x6B, 0, &[0, 0]))[5], 0x12);
}

#[test]
fn wren_wrdi_and_wel_cleared_after_program_erase_wrsr() {
    let mut f = chip("W25Q128JV");
    assert_eq!(rdsr(&mut f) & 2, 0);
    f.transfer(&[0x06]);
    assert_eq!(rdsr(&mut f) & 2, 2);
    f.transfer(&[0x04]);
    assert_eq!(rdsr(&mut f) & 2, 0);
    program(&mut f, 0, &[0]);
    assert_eq!(rdsr(&mut f) & 2, 0, "WEL after PP");
    erase(&mut f, 0x20, 0);
    assert_eq!(rdsr(&mut f) & 2, 0, "WEL after SE");
    write_sr(&mut f, &[0x00]);
    assert_eq!(rdsr(&mut f) & 2, 0, "WEL after WRSR");
}

#[test]
fn program_needs_wel_only_clears_bits_and_wraps_in_page() {
    let mut f = chip("W25Q16JV");
    f.transfer(&cmd_addr(0x02, 0, &[0]));
    assert!(!f.busy());
    assert_eq!(read(&mut f, 0, 1), vec![0xFF], "no WEL: nothing programmed");
    program(&mut f, 0x100, &[0xF0]);
    program(&mut f, 0x100, &[0x3C]);
    assert_eq!(read(&mut f, 0x100, 1), vec![0x30], "AND of both");
    // Start 2 bytes before the page end with 4 bytes: the last 2 land at the page start.
    program(&mut f, 0x2FE, &[1, 2, 3, 4]);
    assert_eq!(read(&mut f, 0x2FE, 2), vec![1, 2]);
    assert_eq!(read(&mut f, 0x200, 2), vec![3, 4]);
    assert_eq!(read(&mut f, 0x300, 1), vec![0xFF], "the next page is untouched");
    // More than a page: later bytes replace earlier ones for the same column.
    let mut data = vec![0x00; 256];
    data.extend_from_slice(&[0x7F]);
    program(&mut f, 0x400, &data);
    assert_eq!(read(&mut f, 0x400, 2), vec![0x7F, 0x00]);
}

#[test]
fn busy_for_the_datasheet_time_and_ignores_all_but_status_reads() {
    for (mode, pp_ns, se_ns) in [(TimingMode::Typical, 700_000u64, 45_000_000u64), (TimingMode::Max, 3_000_000, 400_000_000)] {
        let mut f = Flash::new(parts::w25q128jv(), None, Options { timing: mode, ..Options::default() }).unwrap();
        f.transfer(&[0x06]);
        f.transfer(&cmd_addr(0x02, 0, &[0u8; 256]));
        let start = f.now_ns();
        assert_eq!(f.busy_until_ns() - start, pp_ns, "{mode:?}: a full page takes tPP");
        assert_eq!(rdsr(&mut f), 0x03, "WIP, and WEL stays set until the program completes");
        // While busy: reads, WREN, erase are ignored; status reads work.
        assert_eq!(read(&mut f, 0, 1), vec![0xFF]);
        f.transfer(&[0x04]);
        f.transfer(&[0x06]);
        assert_eq!(f.transfer(&[0x35, 0])[1], 0x02, "RDSR2 answers while busy");
        assert_eq!(f.transfer(&[0x9F, 0, 0, 0])[1..], [0xFF; 3], "RDID ignored while busy");
        f.advance(f.busy_until_ns() - f.now_ns() - 1);
        assert_eq!(rdsr(&mut f), 0x00, "the RDSR byte itself clocks past the end; WEL cleared");
        assert_eq!(read(&mut f, 0, 1), vec![0x00]);
        assert_eq!(f.stats().ignored_busy, 4, "READ, WRDI, WREN, RDID");
        f.transfer(&[0x06]);
        f.transfer(&cmd_addr(0x20, 0, &[]));
        assert_eq!(f.busy_until_ns() - f.now_ns(), se_ns);
    }
}

#[test]
fn partial_page_program_time_follows_tbp1_tbp2() {
    let mut f = chip("W25Q128JV");
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0, &[0u8; 4]));
    assert_eq!(f.busy_until_ns() - f.now_ns(), 30_000 + 3 * 2_500);
}

#[test]
fn one_rdsr_frame_sees_wip_clear_as_time_passes() {
    let mut f = chip("W25Q16JV");
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0, &[0u8; 1])); // 30 us busy
    let out = f.transfer(&[0x05; 40]); // 1 us per byte
    assert_eq!(out[1] & 1, 1);
    assert_eq!(out[39] & 1, 0);
}

#[test]
fn erases_cover_their_unit_and_count_per_sector() {
    let mut f = chip("W25Q16JV");
    let zeros = vec![0u8; 256];
    for a in (0..128 * KB).step_by(4096) {
        program(&mut f, a, &zeros);
    }
    erase(&mut f, 0x20, 4096 + 17);
    assert_eq!(read(&mut f, 4096, 1), vec![0xFF]);
    assert_eq!(read(&mut f, 0, 1), vec![0x00]);
    assert_eq!(read(&mut f, 8192, 1), vec![0x00]);
    erase(&mut f, 0x52, 32 * KB + 5);
    assert_eq!(read(&mut f, 32 * KB, 1), vec![0xFF]);
    assert_eq!(read(&mut f, 60 * KB, 1), vec![0xFF]);
    assert_eq!(read(&mut f, 64 * KB, 1), vec![0x00]);
    erase(&mut f, 0xD8, 64 * KB);
    assert_eq!(read(&mut f, 124 * KB, 1), vec![0xFF]);
    assert_eq!(read(&mut f, 28 * KB, 1), vec![0x00]);
    let c = f.erase_counts();
    assert_eq!((c[0], c[1], c[8], c[16], c[31], c[32]), (0, 1, 1, 1, 1, 0));
    for op in [0x60, 0xC7] {
        erase(&mut f, op, 0);
        // (CE is a 1-byte command: the helper sent 3 address bytes, so it was ignored.)
    }
    assert_eq!(f.stats().chip_erases, 0);
    for op in [0x60u8, 0xC7] {
        f.transfer(&[0x06]);
        f.transfer(&[op]);
        assert_eq!(f.busy_until_ns() - f.now_ns(), 5_000_000_000);
        wait(&mut f);
    }
    assert_eq!(f.stats().chip_erases, 2);
    assert!(f.contents().iter().all(|&b| b == 0xFF));
    assert_eq!(f.erase_counts()[0], 2);
    assert_eq!(f.erase_counts()[1], 3);
}

#[test]
fn frames_with_extra_bytes_are_not_executed() {
    let mut f = chip("W25Q16JV");
    program(&mut f, 0, &[0]);
    f.transfer(&[0x06, 0x00]);
    assert_eq!(rdsr(&mut f) & 2, 0, "WREN + extra byte ignored");
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x20, 0, &[0]));
    assert!(!f.busy(), "SE + extra byte ignored");
    assert_eq!(read(&mut f, 0, 1), vec![0]);
    f.transfer(&[0x20, 0, 0]);
    assert!(!f.busy(), "SE with a short address ignored");
}

/// Datasheet protection tables, row by row: (SR1, SR2) -> protected range.
fn check_table(p: Part, rows: &[(u8, u8, std::ops::Range<u32>)]) {
    for (sr1, sr2, want) in rows {
        assert_eq!(p.protected_range(&[*sr1, *sr2, 0]), want.clone(), "{} SR1 {sr1:08b} SR2 {sr2:08b}", p.name);
    }
}

fn wb(sec: u8, tb: u8, bp: u8) -> u8 {
    (sec << 6) | (tb << 5) | (bp << 2)
}

#[test]
fn winbond_w25q128jv_protection_table() {
    let s = 16 * MB;
    let cmp = 0x40;
    check_table(
        parts::w25q128jv(),
        &[
            (wb(0, 0, 0), 0, 0..0),
            (wb(1, 1, 0), 0, 0..0),
            (wb(0, 0, 1), 0, s - 256 * KB..s),
            (wb(0, 0, 2), 0, s - 512 * KB..s),
            (wb(0, 0, 3), 0, s - MB..s),
            (wb(0, 0, 4), 0, s - 2 * MB..s),
            (wb(0, 0, 5), 0, s - 4 * MB..s),
            (wb(0, 0, 6), 0, s - 8 * MB..s),
            (wb(0, 1, 1), 0, 0..256 * KB),
            (wb(0, 1, 6), 0, 0..8 * MB),
            (wb(0, 0, 7), 0, 0..s),
            (wb(1, 1, 7), 0, 0..s),
            (wb(1, 0, 1), 0, s - 4 * KB..s),
            (wb(1, 0, 2), 0, s - 8 * KB..s),
            (wb(1, 0, 3), 0, s - 16 * KB..s),
            (wb(1, 0, 4), 0, s - 32 * KB..s),
            (wb(1, 0, 5), 0, s - 32 * KB..s),
            (wb(1, 1, 1), 0, 0..4 * KB),
            (wb(1, 1, 4), 0, 0..32 * KB),
            // CMP = 1: the complement.
            (wb(0, 0, 0), cmp, 0..s),
            (wb(0, 0, 7), cmp, 0..0),
            (wb(0, 0, 1), cmp, 0..s - 256 * KB),
            (wb(0, 1, 6), cmp, 8 * MB..s),
            (wb(1, 0, 1), cmp, 0..s - 4 * KB),
            (wb(1, 1, 3), cmp, 16 * KB..s),
        ],
    );
}

#[test]
fn winbond_w25q16jv_protection_table() {
    let s = 2 * MB;
    check_table(
        parts::w25q16jv(),
        &[
            (wb(0, 0, 1), 0, s - 64 * KB..s),
            (wb(0, 0, 2), 0, s - 128 * KB..s),
            (wb(0, 0, 3), 0, s - 256 * KB..s),
            (wb(0, 0, 4), 0, s - 512 * KB..s),
            (wb(0, 0, 5), 0, s - MB..s),
            (wb(0, 0, 6), 0, 0..s),
            (wb(0, 1, 5), 0, 0..MB),
            (wb(1, 1, 2), 0, 0..8 * KB),
        ],
    );
}

#[test]
fn macronix_mx25l6436f_protection_table() {
    let s = 8 * MB;
    let bp = |n: u8| n << 2;
    let tb = 0x08; // configuration register
    check_table(
        parts::mx25l6436f(),
        &[
            (bp(0), 0, 0..0),
            (bp(1), 0, s - 64 * KB..s),
            (bp(2), 0, s - 128 * KB..s),
            (bp(3), 0, s - 256 * KB..s),
            (bp(4), 0, s - 512 * KB..s),
            (bp(5), 0, s - MB..s),
            (bp(6), 0, s - 2 * MB..s),
            (bp(7), 0, s - 4 * MB..s),
            (bp(8), 0, 0..s),
            (bp(15), 0, 0..s),
            (bp(1), tb, 0..64 * KB),
            (bp(7), tb, 0..4 * MB),
        ],
    );
}

#[test]
fn block_protection_is_enforced() {
    let mut f = chip("W25Q16JV");
    write_sr(&mut f, &[wb(0, 0, 1)]); // top 64 KiB
    assert_eq!(f.protected_range(), 2 * MB - 64 * KB..2 * MB);
    let top = 2 * MB - 4096;
    program(&mut f, top, &[0]);
    assert_eq!(read(&mut f, top, 1), vec![0xFF], "PP into the protected block ignored");
    program(&mut f, 0, &[0]);
    assert_eq!(read(&mut f, 0, 1), vec![0x00], "outside it works");
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x20, top, &[]));
    assert!(!f.busy(), "SE refused");
    f.transfer(&cmd_addr(0xD8, 0, &[]));
    assert!(f.busy(), "BE64 outside accepted (WEL still set after a refused command)");
    wait(&mut f);
    f.transfer(&[0x06]);
    f.transfer(&[0xC7]);
    assert!(!f.busy(), "CE refused while any block is protected");
    assert!(f.stats().ignored_protected >= 3);
    // CMP = 1 through a two-byte WRSR: now everything but the top 64 KiB is protected.
    write_sr(&mut f, &[wb(0, 0, 1), 0x42]);
    program(&mut f, top, &[0x11]);
    assert_eq!(read(&mut f, top, 1), vec![0x11]);
    program(&mut f, 0x1000, &[0]);
    assert_eq!(read(&mut f, 0x1000, 1), vec![0xFF]);
}

#[test]
fn status_register_protect_with_wp_pin_and_lock() {
    let mut f = chip("W25Q128JV");
    write_sr(&mut f, &[0x80]); // SRP = 1
    f.set_wp(false);
    write_sr(&mut f, &[0x84]);
    // (A refused WRSR changes nothing, so the WEL bit (02h) set before it is still set.)
    assert_eq!(f.registers()[0] & !0x02, 0x80, "SRP = 1 and /WP low: WRSR ignored");
    f.set_wp(true);
    write_sr(&mut f, &[0x84]);
    assert_eq!(f.registers()[0], 0x84, "/WP high: allowed");
    // SRL = 1 locks the status registers whatever /WP does.
    f.transfer(&[0x06]);
    f.transfer(&[0x31, 0x03]);
    wait(&mut f);
    assert_eq!(f.registers()[1] & 1, 1);
    write_sr(&mut f, &[0x00]);
    assert_eq!(f.registers()[0] & !0x02, 0x84, "SRL: locked");

    let mut m = chip("MX25L6436F");
    write_sr(&mut m, &[0x80 | 0x04]); // SRWD + BP0
    m.set_wp(false);
    write_sr(&mut m, &[0x00]);
    assert_eq!(m.registers()[0] & !0x02, 0x84);
    m.set_wp(true);
    write_sr(&mut m, &[0x00]);
    assert_eq!(m.registers()[0], 0x00);
    // TB in the configuration register is one-time programmable.
    write_sr(&mut m, &[0x00, 0x08]);
    write_sr(&mut m, &[0x00, 0x00]);
    assert_eq!(m.registers()[1] & 0x08, 0x08);
    assert_eq!(m.transfer(&[0x15, 0])[1] & 0x08, 0x08, "RDCR");
}

#[test]
fn winbond_status_registers_2_and_3_and_volatile_writes() {
    let mut f = chip("W25Q128JV");
    assert_eq!(f.transfer(&[0x35, 0])[1], 0x02, "QE set at the factory");
    assert_eq!(f.transfer(&[0x15, 0])[1], 0x60, "DRV = 11b");
    f.transfer(&[0x06]);
    f.transfer(&[0x11, 0x20]);
    assert!(f.busy());
    wait(&mut f);
    assert_eq!(f.transfer(&[0x15, 0])[1], 0x20);
    // 50h then WRSR: no WEL needed, no busy time, lost at reset.
    f.transfer(&[0x50]);
    f.transfer(&[0x01, 0x1C]);
    assert!(!f.busy());
    assert_eq!(rdsr(&mut f), 0x1C);
    f.transfer(&[0x66]);
    f.transfer(&[0x99]);
    f.advance(30_000);
    assert_eq!(rdsr(&mut f), 0x00, "reset restores the non-volatile value");
}

#[test]
fn power_down_and_release() {
    let mut f = chip("W25Q16JV");
    f.transfer(&[0xB9]);
    f.advance(3_000);
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0])[1..], [0xFF; 3], "RDID ignored in power-down");
    assert_eq!(rdsr(&mut f), 0xFF, "even RDSR");
    // ABh with dummy bytes releases and returns the device ID.
    assert_eq!(f.transfer(&[0xAB, 0, 0, 0, 0])[4], 0x14);
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0])[1], 0xFF, "within tRES1: not ready yet");
    f.advance(3_000);
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0])[1], 0xEF);
}

#[test]
fn software_reset_needs_enable_first() {
    let mut f = chip("MX25L6436F");
    f.transfer(&[0x06]);
    f.transfer(&[0x99]);
    assert_eq!(rdsr(&mut f) & 2, 2, "99h alone ignored");
    f.transfer(&[0x66]);
    f.transfer(&[0x99]);
    f.advance(100_000);
    assert_eq!(rdsr(&mut f) & 2, 0, "reset clears WEL");
    f.transfer(&[0x66]);
    f.transfer(&[0x05, 0]);
    f.transfer(&[0x06]);
    f.transfer(&[0x99]);
    assert_eq!(rdsr(&mut f) & 2, 2, "66h must come right before 99h");
}

#[test]
fn unique_id_where_the_part_has_it() {
    let mut f = chip("W25Q128JV");
    let id = f.transfer(&[0x4B, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])[5..].to_vec();
    assert_eq!(id.len(), 8);
    assert_ne!(id, vec![0xFF; 8]);
    let mut g = chip("W25Q16JV");
    assert_ne!(g.transfer(&[0x4B, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])[5..].to_vec(), id, "differs between parts");
    let mut m = chip("MX25L6436F");
    assert_eq!(m.transfer(&[0x4B, 0, 0, 0, 0, 0, 0])[5..], [0xFF, 0xFF], "no 4Bh on the Macronix part");
}

/// An independent SFDP reader (JESD216 field layout written out again, not the generator's).
struct Sfdp {
    rev: (u8, u8),
    bfpt: Vec<u32>,
}

fn read_sfdp(f: &mut Flash) -> Sfdp {
    let rd = |f: &mut Flash, addr: u32, n: usize| f.transfer(&cmd_addr(0x5A, addr, &vec![0; n + 1]))[5..].to_vec();
    let h = rd(f, 0, 16);
    assert_eq!(&h[0..4], b"SFDP");
    let (minor, major, nph, proto) = (h[4], h[5], h[6], h[7]);
    assert_eq!((major, nph, proto), (1, 0, 0xFF));
    // Parameter header 0: BFPT id FF00h.
    assert_eq!((h[8], h[15]), (0x00, 0xFF));
    let len = h[11] as usize;
    let ptr = u32::from_le_bytes([h[12], h[13], h[14], 0]);
    assert_eq!(ptr % 4, 0);
    let raw = rd(f, ptr, 4 * len);
    let bfpt = raw.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Sfdp { rev: (major, minor), bfpt }
}

fn bits(v: u32, hi: u32, lo: u32) -> u32 {
    (v >> lo) & ((1 << (hi - lo + 1)) - 1)
}

#[test]
fn sfdp_tables_parse_back_to_the_part() {
    for name in parts::NAMES {
        let p = parts::part(name).unwrap();
        let mut f = chip(name);
        let s = read_sfdp(&mut f);
        let d = |i: usize| s.bfpt[i - 1];
        assert_eq!(s.bfpt.len(), p.bfpt_dwords as usize);
        assert_eq!(s.rev, (1, p.sfdp_rev.0));
        // DWORD 1: uniform 4 KiB erase with 20h, 3-byte addressing, 1-1-2 and 1-1-4 reads.
        assert_eq!(bits(d(1), 1, 0), 0b01, "{name}");
        assert_eq!(bits(d(1), 15, 8), 0x20);
        assert_eq!(bits(d(1), 18, 17), 0);
        assert_eq!(bits(d(1), 16, 16), 1);
        assert_eq!(bits(d(1), 22, 22), 1);
        assert_eq!(bits(d(1), 21, 20), 0, "1-2-2 / 1-4-4 not offered (not emulated)");
        // DWORD 2: density.
        assert_eq!(d(2) >> 31, 0);
        assert_eq!((d(2) as u64 + 1) / 8, p.size_bytes as u64, "{name} density");
        // DWORDs 3-4: 1-1-4 6Bh and 1-1-2 3Bh, 8 dummy clocks each.
        assert_eq!((bits(d(3), 31, 24), bits(d(3), 20, 16)), (0x6B, 8));
        assert_eq!((bits(d(4), 15, 8), bits(d(4), 4, 0)), (0x3B, 8));
        // DWORDs 8-9: erase types.
        let types: Vec<(u32, u32)> = [bits(d(8), 15, 0), bits(d(8), 31, 16), bits(d(9), 15, 0), bits(d(9), 31, 16)]
            .iter()
            .map(|&t| (1u32.checked_shl(t & 0xFF).filter(|_| t & 0xFF != 0).unwrap_or(0), t >> 8))
            .collect();
        assert_eq!(types, vec![(4096, 0x20), (32768, 0x52), (65536, 0xD8), (0, 0)], "{name}");
        if p.bfpt_dwords >= 16 {
            // DWORD 10: erase times (count, units 1 ms / 16 ms / 128 ms / 1 s), within one unit
            // above the datasheet typical.
            let unit = [1_000_000u64, 16_000_000, 128_000_000, 1_000_000_000];
            let t = |f: u32| (bits(f, 4, 0) as u64 + 1) * unit[bits(f, 6, 5) as usize];
            for (field, typ) in [
                (bits(d(10), 10, 4), p.typ.sector_erase_ns),
                (bits(d(10), 17, 11), p.typ.block32_erase_ns),
                (bits(d(10), 24, 18), p.typ.block64_erase_ns),
            ] {
                let got = t(field);
                assert!(got >= typ && got < typ + unit[bits(field, 6, 5) as usize], "{name}: {got} vs {typ}");
            }
            let mult = 2 * (bits(d(10), 3, 0) as u64 + 1);
            assert!(mult * p.typ.sector_erase_ns >= p.max.sector_erase_ns);
            // DWORD 11: page size, page program time (8 us / 64 us units), chip erase time.
            assert_eq!(1u32 << bits(d(11), 7, 4), p.page_bytes);
            let pp = (bits(d(11), 12, 8) as u64 + 1) * [8_000u64, 64_000][bits(d(11), 13, 13) as usize];
            assert!(pp >= p.typ.page_program_ns && pp < p.typ.page_program_ns + 64_000, "{name} tPP {pp}");
            let ce = (bits(d(11), 28, 24) as u64 + 1)
                * [16_000_000u64, 256_000_000, 4_000_000_000, 64_000_000_000][bits(d(11), 30, 29) as usize];
            assert!(ce >= p.typ.chip_erase_ns && ce <= p.typ.chip_erase_ns + 4_000_000_000, "{name} tCE {ce}");
            // DWORD 14: deep power-down B9h / ABh, WIP polling.
            assert_eq!((bits(d(14), 31, 31), bits(d(14), 30, 23), bits(d(14), 22, 15), bits(d(14), 2, 2)), (0, 0xB9, 0xAB, 1));
            // DWORD 16: 66h + 99h soft reset.
            assert_eq!(bits(d(16), 12, 12), 1);
            // DWORDs 12-13: suspend/resume advertised exactly when modelled (bit 31 inverted),
            // with the part's tSUS (units 128 ns / 1 us / 8 us / 64 us) and 75h / 7Ah.
            assert_eq!(bits(d(12), 31, 31) == 0, p.suspend_ns.is_some(), "{name} suspend bit");
            if let Some(tsus) = p.suspend_ns {
                let unit = [128u64, 1_000, 8_000, 64_000];
                for (c, u) in [(bits(d(12), 28, 24), bits(d(12), 30, 29)), (bits(d(12), 17, 13), bits(d(12), 19, 18))] {
                    let t = (c as u64 + 1) * unit[u as usize];
                    assert!(t >= tsus && t < tsus + unit[u as usize], "{name} tSUS {t}");
                }
                assert_eq!((bits(d(13), 31, 24), bits(d(13), 23, 16), bits(d(13), 15, 8), bits(d(13), 7, 0)), (0x75, 0x7A, 0x75, 0x7A));
            }
        }
        // Beyond the table: FFh.
        assert_eq!(f.transfer(&cmd_addr(0x5A, 0xFFF0, &[0, 0]))[5], 0xFF);
    }
}

#[test]
fn image_file_persists_and_must_match_the_size() {
    let dir = std::env::temp_dir().join(format!("ssdlab-spi-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("w.bin");
    let _ = std::fs::remove_file(&img);
    {
        let mut f = Flash::new(parts::w25q16jv(), Some(&img), Options::default()).unwrap();
        program(&mut f, 0x1234, &[0xA5, 0x5A]);
        // Written through at once: visible in the file before any flush.
        let bytes = std::fs::read(&img).unwrap();
        assert_eq!(bytes.len(), 2 * MB as usize);
        assert_eq!(&bytes[0x1234..0x1236], &[0xA5, 0x5A]);
    }
    let mut f = Flash::new(parts::w25q16jv(), Some(&img), Options::default()).unwrap();
    assert_eq!(read(&mut f, 0x1234, 2), vec![0xA5, 0x5A]);
    // Non-volatile status bits persist next to the image; volatile (50h) writes do not.
    write_sr(&mut f, &[0x04]);
    f.transfer(&[0x50]);
    f.transfer(&[0x31, 0x42]);
    drop(f);
    let f = Flash::new(parts::w25q16jv(), Some(&img), Options::default()).unwrap();
    assert_eq!(f.registers(), [0x04, 0x02, 0x60]);
    assert_eq!(f.protected_range(), 2 * MB - 64 * KB..2 * MB);
    let e = Flash::new(parts::w25q128jv(), Some(&img), Options::default()).err().unwrap();
    assert!(e.to_string().contains("image is 2097152 bytes"), "{e}");
    std::fs::write(ssdlab_spi::chip::status_path(&img), [0u8; 2]).unwrap();
    let e = Flash::new(parts::w25q16jv(), Some(&img), Options::default()).err().unwrap();
    assert!(e.to_string().contains("expected 3 status bytes"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fault_injection_stuck_bits_and_failing_erases() {
    let opts = Options {
        stuck_bits: vec![StuckBit { addr: 10, bit: 0, value: false }, StuckBit { addr: 11, bit: 7, value: true }],
        erase_fail_after: Some(2),
        ..Options::default()
    };
    let mut f = Flash::new(parts::w25q16jv(), None, opts).unwrap();
    assert_eq!(read(&mut f, 10, 2), vec![0xFE, 0xFF], "stuck-at-0 shows in the erased state");
    program(&mut f, 11, &[0x00]);
    assert_eq!(read(&mut f, 11, 1), vec![0x80], "stuck-at-1 cannot be programmed");
    program(&mut f, 0, &[0x00]);
    erase(&mut f, 0x20, 0);
    erase(&mut f, 0x20, 0);
    assert_eq!(read(&mut f, 0, 1), vec![0xFF]);
    program(&mut f, 0, &[0x00]);
    erase(&mut f, 0x20, 0); // third erase: fails
    assert_eq!(read(&mut f, 0, 1), vec![0x00], "failed erase leaves the data");
    assert_eq!(f.stats().failed_erases, 1);
    assert_eq!(f.erase_counts()[0], 3);
}

#[test]
fn endurance_limit_is_reported() {
    let mut p = parts::w25q16jv();
    p.endurance_cycles = 3;
    let mut f = Flash::new(p, None, Options::default()).unwrap();
    let dir = std::env::temp_dir().join(format!("ssdlab-spi-endurance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    f.trace_to(&dir.join("t.jsonl")).unwrap();
    for _ in 0..4 {
        erase(&mut f, 0x20, 0);
    }
    assert_eq!(f.sectors_beyond_endurance(), 1);
    f.flush().unwrap();
    let text = std::fs::read_to_string(dir.join("t.jsonl")).unwrap();
    assert_eq!(text.matches("1 sectors beyond the 3-cycle endurance").count(), 1, "only the 4th erase");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trace_records_frames_with_simulated_time() {
    let dir = std::env::temp_dir().join(format!("ssdlab-spi-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jsonl");
    let mut f = chip("W25Q16JV");
    f.set_source("test");
    f.trace_to(&path).unwrap();
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0, &[1]));
    f.transfer(&[0x03, 0, 0, 0, 0]);
    f.advance(50_000);
    f.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["op"], "06 WREN");
    assert_eq!(lines[0]["src"], "test");
    assert_eq!(lines[1]["op"], "02 PP");
    assert_eq!(lines[1]["t_ns"], 1000);
    assert!(lines[1]["result"].as_str().unwrap().starts_with("program 1 B at 0x0, busy 30000 ns"));
    assert_eq!(lines[2]["result"], "ignored: busy");
    assert_eq!(lines[3]["advance_ns"], 50_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn same_frames_same_trace_and_contents() {
    let dir = std::env::temp_dir().join(format!("ssdlab-spi-det-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |name: &str| {
        let path = dir.join(name);
        let mut f = chip("MX25L6436F");
        f.trace_to(&path).unwrap();
        let mut x: u32 = 12345;
        for i in 0..200u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            match x % 4 {
                0 => program(&mut f, (x >> 8) % (8 * MB), &[(i & 0xFF) as u8; 16]),
                1 => erase(&mut f, 0x20, (x >> 8) % (8 * MB)),
                2 => {
                    read(&mut f, (x >> 8) % (8 * MB), 64);
                }
                _ => f.advance((x >> 12) as u64),
            }
        }
        f.flush().unwrap();
        (std::fs::read(&path).unwrap(), f.contents().to_vec(), f.now_ns())
    };
    let a = run("a.jsonl");
    let b = run("b.jsonl");
    assert!(a.0.len() > 10_000);
    assert_eq!(a, b);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn erase_suspend_lets_firmware_read_and_program_elsewhere_then_resume() {
    let mut f = chip("W25Q128JV");
    program(&mut f, 0x2000, &[0x42]);
    program(&mut f, 0x1000, &[0x00]);
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x20, 0x1000, &[])); // tSE 45 ms
    f.advance(10_000_000);
    f.transfer(&[0x75]);
    assert_eq!(f.transfer(&[0x35, 0])[1] & 0x80, 0x80, "SUS = 1");
    f.advance(20_000); // tSUS
    assert_eq!(rdsr(&mut f) & 1, 0, "not busy while suspended");
    assert_eq!(read(&mut f, 0x2000, 1), vec![0x42], "reads elsewhere work");
    program(&mut f, 0x3000, &[0x24]);
    assert_eq!(read(&mut f, 0x3000, 1), vec![0x24], "programs elsewhere work");
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0x1000, &[0]));
    assert!(!f.busy(), "no program into the sector being erased");
    f.transfer(&cmd_addr(0x20, 0x5000, &[]));
    assert!(!f.busy(), "no erase while suspended");
    f.transfer(&[0x01, 0x00]);
    assert!(!f.busy(), "no status write while suspended");
    let t = f.now_ns();
    f.transfer(&[0x7A]);
    assert_eq!(f.transfer(&[0x35, 0])[1] & 0x80, 0, "SUS = 0");
    let left = f.busy_until_ns() - t;
    // 45 ms - 10 ms - the 75h byte itself (1 us): about 35 ms to go after the resume.
    assert!((34_990_000..=35_000_000).contains(&left), "{left}");
    wait(&mut f);
    assert_eq!(read(&mut f, 0x1000, 1), vec![0xFF]);
    assert_eq!(f.erase_counts()[1], 1);
}

#[test]
fn suspend_is_refused_when_nothing_suspendable_runs() {
    let mut f = chip("W25Q16JV");
    f.transfer(&[0x75]);
    assert_eq!(f.transfer(&[0x35, 0])[1] & 0x80, 0, "idle: nothing to suspend");
    f.transfer(&[0x06]);
    f.transfer(&[0xC7]);
    f.transfer(&[0x75]);
    assert_eq!(f.transfer(&[0x35, 0])[1] & 0x80, 0, "chip erase cannot be suspended");
    wait(&mut f);
    f.transfer(&[0x7A]);
    assert!(!f.busy(), "resume without suspend ignored");
    // Program suspend: no second program until resumed.
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0, &[0u8; 256]));
    f.transfer(&[0x75]);
    f.advance(20_000);
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x02, 0x100, &[0]));
    assert!(!f.busy());
    f.transfer(&[0x7A]);
    wait(&mut f);
    assert_eq!(read(&mut f, 0, 1), vec![0x00]);
    assert_eq!(read(&mut f, 0x100, 1), vec![0xFF]);
    // The Macronix preset does not model suspend: 75h is an unknown opcode there.
    let mut m = chip("MX25L6436F");
    m.transfer(&[0x06]);
    m.transfer(&cmd_addr(0x20, 0, &[]));
    m.transfer(&[0x75]);
    assert!(m.busy());
}

#[test]
fn the_end_of_simulated_time_does_not_panic() {
    let mut f = chip("W25Q16JV");
    f.advance(u64::MAX - 10);
    f.transfer(&[0x06]);
    f.transfer(&cmd_addr(0x20, 0, &[]));
    f.advance(u64::MAX);
    assert_eq!(f.now_ns(), u64::MAX);
    f.transfer(&[0x9F, 0, 0, 0]);
    f.transfer(&[0xB9]);
    f.transfer(&[0xAB]);
}
