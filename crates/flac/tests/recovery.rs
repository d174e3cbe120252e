//! Recovery after `kill -9` during `pflush_commit`: a child process rewrites three ranges with
//! generation `g`'s pattern and commits them with metadata saying `g`, over and over; it is
//! killed at every stage of the commit (crash points) and at random times. After recovery
//! the metadata's generation is the last one committed (or the one being committed, if the
//! kill came after its commit point), every range holds exactly that generation's data, and
//! the reference counts are exact.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use ssdlab_flac::{crash, Flac, Tx};

const P: usize = 4096;
/// (first page, bytes): a 2 MiB-aligned run, an odd-sized range, a partial page.
const RANGES: [(u64, usize); 3] = [(512, 520 * P), (2000, 37 * P + 123), (3000, 700)];

fn gen_pattern(g: u64, r: usize, len: usize) -> Vec<u8> {
    pattern((g * 3 + r as u64) as u8, len)
}

/// The child: commit generations until killed.
#[test]
fn child_writer() {
    let Ok(dir) = std::env::var("FLAC_TEST_CHILD") else { return };
    let f = open(std::path::Path::new(&dir), 64, 16);
    let start: u64 = f.pm.kv_get(b"gen").map(|v| u64::from_le_bytes(v.try_into().unwrap())).unwrap_or(0);
    let mut out = std::io::stdout();
    for g in start + 1..start + 1000 {
        let mut h = f.pflush_handle();
        let mut meta = Tx::new();
        for (i, &(vpn, len)) in RANGES.iter().enumerate() {
            let data = gen_pattern(g, i, len);
            f.zcopy_to_flac(f.addr(vpn), data.as_ptr(), len).unwrap();
            f.pflush_add(&mut h, f.addr(vpn), len).unwrap();
            meta.put(format!("range/{i}").as_bytes(), &g.to_le_bytes());
        }
        meta.put(b"gen", &g.to_le_bytes());
        f.pflush_commit(h, &meta).unwrap();
        writeln!(out, "committed {g}").unwrap();
        out.flush().unwrap();
    }
}

/// Run the child until it dies; returns the last generation it reported committed.
fn run_child(dir: &std::path::Path, crash_at: Option<&str>, kill_after: Option<Duration>) -> u64 {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env("FLAC_TEST_CHILD", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match crash_at {
        Some(c) => cmd.env("FLAC_CRASH_AT", c),
        None => cmd.env_remove("FLAC_CRASH_AT"),
    };
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut last = 0;
        for line in BufReader::new(stdout).lines() {
            // The first report shares its line with the test harness's "test child_writer ... ".
            if let Some((_, g)) = line.unwrap().rsplit_once("committed ") {
                last = g.trim().parse().unwrap();
            }
        }
        last
    });
    if let Some(t) = kill_after {
        std::thread::sleep(t);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    }
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the child should die by SIGKILL, got {status:?}");
    reader.join().unwrap()
}

fn verify(dir: &std::path::Path, last_reported: u64, ctx: &str) -> u64 {
    let f = open(dir, 64, 16);
    let g = f.pm.kv_get(b"gen").map(|v| u64::from_le_bytes(v.try_into().unwrap())).unwrap_or(0);
    assert!(g == last_reported || g == last_reported + 1, "{ctx}: recovered generation {g}, child reported {last_reported} committed");
    for (i, &(vpn, len)) in RANGES.iter().enumerate() {
        let rg = f.pm.kv_get(format!("range/{i}").as_bytes()).map(|v| u64::from_le_bytes(v.try_into().unwrap())).unwrap_or(0);
        assert_eq!(rg, g, "range {i}'s metadata disagrees with the generation");
        let want = if g == 0 { vec![0u8; len] } else { gen_pattern(g, i, len) };
        assert!(read_space(&f, f.addr(vpn), len) == want, "range {i}: data is not generation {g}'s");
    }
    f.check_invariants();
    f.pm.check_invariants();
    g
}

#[test]
fn kill_at_every_stage_of_a_commit() {
    for &point in crash::POINTS {
        for nth in [1u64, 3] {
            let d = tmpdir();
            let last = run_child(d.path(), Some(&format!("{point}:{nth}")), None);
            assert_eq!(last, nth - 1, "{point}:{nth}: the child dies during commit number {nth}");
            let g = verify(d.path(), last, &format!("{point}:{nth}"));
            // Crashes after the commit point keep the transaction, before it lose it.
            let committed = matches!(point, "commit.after_log" | "commit.mid_apply" | "commit.after_apply");
            assert_eq!(g, if committed { nth } else { nth - 1 }, "{point}:{nth}");
            // And the image keeps working: commit more on top of the recovered state.
            let last2 = run_child(d.path(), Some("commit.after_apply:2"), None);
            assert_eq!(verify(d.path(), last2, &format!("{point}:{nth} then after_apply:2")), g + 2);
        }
    }
}

#[test]
fn kill_at_random_times() {
    let d = tmpdir();
    let mut prev = 0;
    for ms in [30u64, 55, 80, 120] {
        let last = run_child(d.path(), None, Some(Duration::from_millis(ms)));
        let g = verify(d.path(), last.max(prev), &format!("killed after {ms} ms"));
        assert!(g >= prev);
        prev = g;
    }
}

#[test]
fn a_transaction_that_does_not_fit_the_log_is_refused_and_rolled_back() {
    let d = tmpdir();
    let f: std::sync::Arc<Flac> = open(d.path(), 64, 16);
    let data = pattern(1, 8 * P);
    f.copy_to_flac(f.addr(0), data.as_ptr(), 8 * P).unwrap();
    let mut h = f.pflush_handle();
    f.pflush_add(&mut h, f.addr(0), 8 * P).unwrap();
    let mut meta = Tx::new();
    meta.put(b"big", &vec![0u8; 2 << 20]);
    assert!(f.pflush_commit(h, &meta).is_err());
    assert_eq!(f.dirty_pages(), 8, "the pages stay dirty for a later flush");
    f.check_invariants();
    let mut h = f.pflush_handle();
    f.pflush_add(&mut h, f.addr(0), 8 * P).unwrap();
    f.pflush_commit(h, &Tx::new()).unwrap();
    assert_eq!(f.dirty_pages(), 0);
    f.check_invariants();
}
