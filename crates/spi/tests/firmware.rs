//! Firmware in the loop: an unmodified crates.io driver (`w25q32jv`, built for the 128 Mbit part)
//! drives the emulated W25Q128JV through embedded-hal 1.0, as an `SpiDevice` and as an `SpiBus`
//! with its own chip select (`embedded-hal-bus`); power cuts reach it as SPI errors and leave
//! the partial states the model describes.

use embedded_hal::spi::{Operation, SpiDevice};
use embedded_hal_bus::spi::ExclusiveDevice;
use ssdlab_spi::hal::{self, Bus, ChipSelect, Delay, PowerLost, SpiFlash, UnusedPin, WriteProtect};
use ssdlab_spi::{part, CutAt, Flash, Options, WearOut};
use w25q32jv::{Error as DrvError, W25q32jv};

const SECTOR: u32 = 4096;

fn chip(opts: Options) -> hal::Shared {
    hal::shared(Flash::new(part("W25Q128JV").unwrap(), None, opts).unwrap())
}

fn driver(c: &hal::Shared) -> W25q32jv<SpiFlash, UnusedPin, WriteProtect> {
    W25q32jv::new(SpiFlash::new(c.clone()), UnusedPin, WriteProtect { chip: c.clone() }).unwrap()
}

fn jedec(spi: &mut impl SpiDevice) -> [u8; 3] {
    let mut id = [0u8; 3];
    spi.transaction(&mut [Operation::Write(&[0x9F]), Operation::Read(&mut id)]).unwrap();
    id
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ (i >> 8) as u8).collect()
}

#[test]
fn an_unmodified_driver_erases_programs_and_reads_back_with_the_busy_time_simulated() {
    let c = chip(Options::default());
    assert_eq!(jedec(&mut SpiFlash::new(c.clone())), [0xEF, 0x40, 0x18]);
    let mut d = driver(&c);
    let data = pattern(1000, 7);
    d.erase_sector(1).unwrap();
    // 0x11F0: 16 bytes to the page end, three full pages, 216 bytes of a fifth page.
    d.write_blocking(0x11F0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    d.read(0x11F0, &mut back).unwrap();
    assert_eq!(back, data);
    let f = c.borrow();
    let s = f.stats();
    assert_eq!((s.sector_erases, s.programs, s.program_bytes), (1, 5, 1000));
    // tSE 45 ms + three full pages at tPP 0.7 ms + partial pages at tBP1 + (n - 1) tBP2.
    let partial = |n: u64| 30_000 + (n - 1) * 2_500;
    let want = 45_000_000 + 3 * 700_000 + partial(16) + partial(1000 - 16 - 3 * 256);
    assert_eq!(s.busy_ns, want);
    assert!(f.now_ns() >= want, "the driver waited for each operation: {} ns simulated", f.now_ns());
    assert!(s.frames > 1000 && s.ignored_busy == 0, "it polled WIP and sent nothing while busy: {s:?}");
}

#[test]
fn the_same_driver_works_through_a_bus_with_its_own_chip_select() {
    let c = chip(Options::default());
    let spi = ExclusiveDevice::new(Bus { chip: c.clone() }, ChipSelect { chip: c.clone() }, Delay { chip: c.clone() }).unwrap();
    let mut d = W25q32jv::new(spi, UnusedPin, WriteProtect { chip: c.clone() }).unwrap();
    let data = pattern(600, 3);
    d.erase_sector(0).unwrap();
    d.write_blocking(0x80, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    d.read(0x80, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(&c.borrow().contents()[0x80..0x80 + 600], &data[..]);
}

#[test]
fn a_cut_during_an_erase_reaches_the_driver_and_leaves_the_sector_neither_erased_nor_intact() {
    let c = chip(Options { power_seed: 11, ..Options::default() });
    let mut d = driver(&c);
    let old = pattern(SECTOR as usize, 1);
    d.erase_sector(2).unwrap();
    d.write_blocking(2 * SECTOR, &old).unwrap();
    let t = c.borrow().now_ns();
    c.borrow_mut().schedule_power_cut(CutAt::TimeNs(t + 30_000_000));
    match d.erase_sector(2) {
        Err(DrvError::SpiError(PowerLost)) => {}
        other => panic!("the driver saw {other:?}"),
    }
    {
        let f = c.borrow();
        let cut = f.last_power_cut().unwrap();
        assert_eq!(cut.interrupted, "erase");
        assert!((cut.fraction - 30.0 / 45.0).abs() < 0.01, "{cut:?}");
        let s = &f.contents()[2 * SECTOR as usize..3 * SECTOR as usize];
        assert!(s != &old[..] && s.iter().any(|&b| b != 0xFF), "neither intact nor erased");
    }
    // Power back: writes are refused until tPUW, then the sector erases and programs again.
    c.borrow_mut().power_up();
    c.borrow_mut().advance(20_000); // tVSL: the chip answers again
    assert!(matches!(d.erase_sector(2), Err(DrvError::WriteEnableFail)), "WREN before tPUW is ignored");
    c.borrow_mut().advance(5_000_000);
    d.erase_sector(2).unwrap();
    d.write_blocking(2 * SECTOR, &old).unwrap();
    assert_eq!(&c.borrow().contents()[2 * SECTOR as usize..3 * SECTOR as usize], &old[..]);
}

/// An interrupted page program: a subset of the bits it was clearing are clear, nothing else
/// changed; the same seed gives the same bits, another seed others.
#[test]
fn an_interrupted_program_leaves_a_seeded_subset_of_its_zeros() {
    let run = |seed: u64| {
        let mut f = Flash::new(part("W25Q128JV").unwrap(), None, Options { power_seed: seed, ..Options::default() }).unwrap();
        let data = pattern(256, 9);
        f.transfer(&[0x06]);
        let mut cmd = vec![0x02, 0x00, 0x01, 0x00];
        cmd.extend_from_slice(&data);
        f.transfer(&cmd);
        f.schedule_power_cut(CutAt::TimeNs(f.now_ns() + 350_000));
        f.advance(1_000_000);
        assert!(!f.powered());
        let cut = f.last_power_cut().unwrap().clone();
        assert_eq!(cut.interrupted, "program");
        assert!((cut.fraction - 0.5).abs() < 0.01);
        let got = f.contents()[0x100..0x200].to_vec();
        for (g, d) in got.iter().zip(&data) {
            assert_eq!(g & d, *d, "only bits the program clears are clear");
        }
        assert!(got != data && got != vec![0xFF; 256], "a strict subset, half-way");
        got
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn a_cut_at_a_frame_drops_that_frame_and_power_up_resets_the_latches() {
    let mut f = Flash::new(part("W25Q128JV").unwrap(), None, Options::default()).unwrap();
    f.transfer(&[0x06]);
    assert_eq!(f.transfer(&[0x05, 0])[1] & 0x02, 0x02, "WEL");
    f.schedule_power_cut(CutAt::Frame(2));
    f.transfer(&[0x05, 0]);
    assert!(f.powered());
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0]), vec![0xFF; 4], "no power: MISO floats high");
    assert!(!f.powered() && f.stats().power_cuts == 1 && f.stats().frames_unpowered == 1);
    f.power_up();
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0]), vec![0xFF; 4], "ignored for tVSL");
    f.advance(20_000);
    assert_eq!(f.transfer(&[0x9F, 0, 0, 0])[1..], [0xEF, 0x40, 0x18]);
    assert_eq!(f.transfer(&[0x05, 0])[1] & 0x03, 0, "WEL and WIP clear after power-up");
}

#[test]
fn erases_past_the_endurance_rating_fail_as_configured() {
    let erase = |f: &mut Flash| {
        f.transfer(&[0x06]);
        f.transfer(&[0x20, 0, 0, 0]);
        f.advance(500_000_000);
    };
    let program = |f: &mut Flash| {
        f.transfer(&[0x06]);
        f.transfer(&[0x02, 0, 0, 0, 0x00]);
        f.advance(10_000_000);
    };
    let mut f = Flash::new(
        part("W25Q128JV").unwrap(),
        None,
        Options { wear_out: WearOut::EraseFails, endurance_cycles: Some(3), ..Options::default() },
    )
    .unwrap();
    for _ in 0..3 {
        program(&mut f);
        erase(&mut f);
        assert_eq!(f.contents()[0], 0xFF);
    }
    program(&mut f);
    erase(&mut f);
    assert_eq!(f.contents()[0], 0x00, "the fourth erase failed");
    assert_eq!(f.sectors_beyond_endurance(), 1);

    let mut f = Flash::new(
        part("W25Q128JV").unwrap(),
        None,
        Options { wear_out: WearOut::BitsStick, endurance_cycles: Some(3), ..Options::default() },
    )
    .unwrap();
    for _ in 0..8 {
        erase(&mut f);
    }
    let zeros: u32 = f.contents()[..SECTOR as usize].iter().map(|b| b.count_zeros()).sum();
    assert_eq!((zeros, f.stats().worn_bits), (5, 5), "one bit stuck at 0 per erase past the rating");
}
