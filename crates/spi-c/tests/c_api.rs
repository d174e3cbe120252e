//! Compiles the W25Q driver (tests/c/w25q.c) and its test (tests/c/driver_test.c) against
//! include/ssdlab_spi.h and the built libssdlab_spi_c.so, and runs the test with the chip in
//! memory and in an image file.

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn c_driver_runs_against_the_emulated_chip() {
    // The test binary is target/<profile>/deps/c_api-*; cargo builds the library (cdylib and
    // rlib) for the test into the same deps/ directory.
    let exe = std::env::current_exe().unwrap();
    let libdir = exe.parent().unwrap().to_path_buf();
    let lib = libdir.join("libssdlab_spi_c.so");
    assert!(lib.exists(), "{} not built", lib.display());
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile_dir();
    let bin = tmp.join("driver_test");
    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(here.join("tests/c/driver_test.c"))
        .arg(here.join("tests/c/w25q.c"))
        .arg("-I")
        .arg(here.join("include"))
        .arg("-I")
        .arg(here.join("tests/c"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lssdlab_spi_c")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .status()
        .expect("a C compiler (cc)");
    if !cc.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        panic!("cc failed: {cc}");
    }
    let in_memory = run(&bin, None);
    let in_file = run(&bin, Some(&tmp.join("w25q128jv.bin")));
    let _ = std::fs::remove_dir_all(&tmp);
    for (what, out) in [("in memory", in_memory), ("in an image file", in_file)] {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{what}: {text}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "{what}: {text}");
    }
}

fn run(bin: &Path, image: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(bin);
    if let Some(p) = image {
        cmd.arg(p);
    }
    cmd.output().unwrap()
}

fn tempfile_dir() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let d = base.join(format!("spi-c-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
