//! Power-cut campaigns at suite size: littlefs through the unmodified crates.io driver keeps its
//! promise at every cut point; the driver without status polling is caught.

use ssdlab_spi_fw::{run, Config, DriverKind};

#[test]
fn littlefs_through_the_crates_io_driver_survives_every_cut() {
    let c = Config { cuts: 500, ..Config::default() };
    let r = run(&c, &mut |_, _| {}).unwrap();
    assert_eq!(r.cut_points, 500, "distinct cut points");
    assert!(r.workload_errors.is_empty(), "{:?}", r.workload_errors);
    assert!(r.violations.is_empty(), "{:#?}", &r.violations[..r.violations.len().min(3)]);
    // The cuts reached programs and erases in flight, not only the gaps between them.
    assert!(
        r.interrupted.get("erase").copied().unwrap_or(0) > 10 && r.interrupted.get("program").copied().unwrap_or(0) > 10,
        "{:?}",
        r.interrupted
    );
    assert!(r.sector_erases > 0 && r.simulated_ns > 0);
}

#[test]
fn the_driver_without_status_polling_is_caught() {
    let c = Config { driver: DriverKind::NoPoll, cuts: 100, ..Config::default() };
    let r = run(&c, &mut |_, _| {}).unwrap();
    assert!(!r.violations.is_empty() || !r.workload_errors.is_empty(), "{r:?}");
}

/// littlefs relocates a block whose program did not read back only when told LFS_ERR_CORRUPT;
/// glue that reports LFS_ERR_IO leaves a file system that mounts but refuses new files after
/// some cuts in a page program.
#[test]
fn glue_that_reports_a_failed_read_back_as_an_io_error_is_caught() {
    let c = Config { verify_as_corrupt: false, cuts: 300, ..Config::default() };
    let r = run(&c, &mut |_, _| {}).unwrap();
    assert!(r.violations.iter().any(|v| v.interrupted == "program"), "{:?}", r.violations);
}

#[test]
fn a_cut_point_replays_alone_with_the_same_outcome() {
    let c = Config { driver: DriverKind::Minimal, cuts: 60, ops: 40, ..Config::default() };
    let all = run(&c, &mut |_, _| {}).unwrap();
    assert!(all.violations.is_empty(), "{:?}", all.violations);
    let one = run(&Config { only_frame: Some(all.frames_total / 2), ..c }, &mut |_, _| {}).unwrap();
    assert_eq!(one.cut_points, 1);
    assert!(one.violations.is_empty());
}
