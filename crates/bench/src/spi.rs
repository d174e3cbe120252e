//! `--only spi`: full-chip read and write of the emulated SPI NOR chips by the real flashrom over
//! serprog (TCP loopback), against a probe-only run of the same flashrom as the baseline (flashrom
//! spends about 1 s synchronising with any serprog programmer). Needs flashrom on PATH.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ssdlab_serve::serprog::Server;
use ssdlab_spi::{parts, Flash, Options, TimingMode};

struct Run {
    wall_s: f64,
    sim_s: f64,
}

/// Serve `chip` (image at `image`) on a thread while `flashrom ARGS` runs; returns the wall time
/// of flashrom and the simulated time the chip saw.
fn with_flashrom(chip: &str, image: &Path, args: &[&str]) -> Run {
    with_flashrom_timed(chip, image, args, TimingMode::Typical)
}

fn with_flashrom_timed(chip: &str, image: &Path, args: &[&str], timing: TimingMode) -> Run {
    let part = parts::part(chip).expect("preset");
    let mut flash = Flash::new(part, Some(image), Options { timing, ..Options::default() }).expect("flash");
    let server = Server::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::spawn(move || {
        server.run(&mut flash, &|| stop2.load(Ordering::Relaxed)).expect("serve");
        flash.now_ns()
    });
    let t = Instant::now();
    let out = Command::new("flashrom").arg("-p").arg(format!("serprog:ip=127.0.0.1:{port}")).args(args).output().expect("run flashrom");
    let wall_s = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let sim_ns = handle.join().expect("server thread");
    if !out.status.success() {
        panic!("flashrom {args:?} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Run { wall_s, sim_s: sim_ns as f64 / 1e9 }
}

/// A firmware developer's loop: flashrom writing and verifying a whole 16 MiB W25Q128JV in
/// `--timing instant` mode over serprog, against flashrom's own dummy programmer emulating the
/// same size of chip in process (W25Q128FV, the dummy's closest part), same images, same run.
pub fn instant_only() {
    let dir: PathBuf = std::env::temp_dir().join(format!("ssdlab-bench-spi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    instant_vs_dummy(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

fn instant_vs_dummy(dir: &Path) {
    let (old, new) = (dir.join("i-old.bin"), dir.join("i-new.bin"));
    random_file(&old, 16 << 20, 11);
    random_file(&new, 16 << 20, 12);
    let mut ratios = vec![];
    for _ in 0..3 {
        let dummy_img = dir.join("dummy.bin");
        std::fs::copy(&old, &dummy_img).expect("copy");
        let t = Instant::now();
        let out = Command::new("flashrom")
            .arg("-p")
            .arg(format!("dummy:emulate=W25Q128FV,image={}", dummy_img.display()))
            .arg("-w")
            .arg(&new)
            .output()
            .expect("run flashrom");
        let dummy_s = t.elapsed().as_secs_f64();
        assert!(out.status.success(), "flashrom dummy: {}", String::from_utf8_lossy(&out.stdout));
        let img = dir.join("instant.bin");
        std::fs::copy(&old, &img).expect("copy");
        let _ = std::fs::remove_file(dir.join("instant.bin.status"));
        let r = with_flashrom_timed("W25Q128JV", &img, &["-c", "W25Q128.V", "-w", new.to_str().unwrap_or_default()], TimingMode::Instant);
        assert_eq!(std::fs::read(&img).expect("image"), std::fs::read(&new).expect("new"), "written image differs");
        ratios.push((r.wall_s / dummy_s, r.wall_s, dummy_s));
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, wall, dummy) = ratios[1];
    println!(
        "spi: W25Q128JV 16 MiB write + verify, --timing instant over serprog {wall:.2} s vs flashrom's dummy programmer {dummy:.2} s -> {ratio:.2}x (goal <= 3x; median of 3)"
    );
}

fn random_file(path: &Path, len: usize, mut x: u64) {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    std::fs::write(path, v).expect("write");
}

pub fn run() {
    if Command::new("flashrom").arg("--version").output().is_err() {
        println!("spi: flashrom not found (scripts/setup.sh installs it); skipped");
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("ssdlab-bench-spi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let img = |n: &str| dir.join(n);
    let base = with_flashrom("W25Q16JV", &img("probe.bin"), &[]);
    println!("spi: flashrom probe only (baseline: sync + probe): {:.2} s", base.wall_s);
    for (chip, mib) in [("W25Q128JV", 16usize), ("MX25L6436F", 8), ("W25Q16JV", 2)] {
        let image = img(&format!("{chip}.bin"));
        random_file(&image, mib << 20, 7);
        let r = with_flashrom(
            chip,
            &image,
            &[
                "-c",
                if chip == "MX25L6436F" {
                    "MX25L6436E/MX25L6445E/MX25L6465E/MX25L6473E/MX25L6473F"
                } else if chip == "W25Q128JV" {
                    "W25Q128.V"
                } else {
                    "W25Q16.V"
                },
                "-r",
                img("read.bin").to_str().unwrap_or_default(),
            ],
        );
        let net = (r.wall_s - base.wall_s).max(1e-3);
        println!(
            "spi: {chip} full read {mib} MiB: {:.2} s wall ({:.2} s over the baseline = {:.0} MiB/s); the chip's simulated time {:.2} s at 8 MHz",
            r.wall_s,
            net,
            mib as f64 / net,
            r.sim_s
        );
    }
    // Full write of the 16 Mbit part: flashrom reads, erases (the image holds old data),
    // programs 8192 pages polling WIP, and verifies.
    let image = img("w16-write.bin");
    random_file(&image, 2 << 20, 1);
    random_file(&img("new.bin"), 2 << 20, 2);
    let w = with_flashrom("W25Q16JV", &image, &["-w", img("new.bin").to_str().unwrap_or_default()]);
    println!(
        "spi: W25Q16JV full write 2 MiB (read + erase + program + verify): {:.1} s wall; simulated chip time {:.1} s (emulation {:.2}x real-chip speed)",
        w.wall_s,
        w.sim_s,
        w.sim_s / w.wall_s
    );
    let e = with_flashrom("W25Q16JV", &image, &["-E"]);
    println!("spi: W25Q16JV full erase: {:.1} s wall; simulated chip time {:.1} s", e.wall_s, e.sim_s);
    instant_vs_dummy(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}
