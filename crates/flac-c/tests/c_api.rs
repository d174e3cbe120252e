//! Compiles tests/c/smoke.c against include/flac.h and the built libssdlab_flac_c.so, and runs it.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_program_uses_the_api() {
    // The test binary is target/<profile>/deps/c_api-*; cargo builds the library (cdylib and
    // rlib) for the test into the same deps/ directory.
    let exe = std::env::current_exe().unwrap();
    let libdir = exe.parent().unwrap().to_path_buf();
    let lib = libdir.join("libssdlab_flac_c.so");
    assert!(lib.exists(), "{} not built", lib.display());
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile_dir();
    let bin = tmp.join("smoke");
    let cc = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&bin)
        .arg(here.join("tests/c/smoke.c"))
        .arg("-I")
        .arg(here.join("include"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lssdlab_flac_c")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .status()
        .expect("a C compiler (cc)");
    assert!(cc.success());
    let out = Command::new(&bin).arg(tmp.join("flac.img")).arg(tmp.join("fs.img")).output().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

fn tempfile_dir() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let d = base.join(format!("flac-c-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
