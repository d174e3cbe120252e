//! Checkpointed runs: a run stopped part-way and started again from its save gives what the
//! same run gives uninterrupted, byte for byte; a save that is not of this run is set aside.
mod common;

use std::path::PathBuf;
use std::time::Duration;

use ssdlab_cache::{run, run_checkpointed, Checkpointing, RunSpec};
use ssdlab_core::config::StopRule;

/// A directory of its own under the system's temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ssdlab-ckpt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run with timing, FDP and the steady rule, so the save holds timelines, placement
/// handles, latency histograms and steady windows.
fn spec() -> RunSpec {
    let mut s = common::spec(1.0, 0.04, 1.5);
    s.stop = StopRule::Steady;
    s.steady_start_device_writes = 0.25;
    s.steady_window_device_writes = 0.25;
    s.steady_tolerance = 0.0001;
    s.steady_windows = 3;
    s
}

#[test]
fn a_run_resumed_from_its_save_ends_as_the_uninterrupted_run() {
    let dir = Scratch::new("resume");
    let s = spec();
    let straight = run(common::device(true, true), &s, None, &mut |_| true).unwrap();
    let ck = Checkpointing { path: dir.0.join("run.ckpt"), every: Duration::ZERO };

    // Stopped at its 12th progress check: saved at each of the 11 before (every check, here).
    let mut checks = 0;
    let first = run_checkpointed(common::device(true, true), &s, &ck, &mut |_| {
        checks += 1;
        checks < 12
    })
    .unwrap();
    assert!(first.interrupted);
    assert!(ck.path.exists(), "the save stays for the next start");
    assert_eq!(first.checkpoint, "saved 11 times");

    let mut fractions = vec![];
    let second = run_checkpointed(common::device(true, true), &s, &ck, &mut |f| {
        fractions.push(f);
        true
    })
    .unwrap();
    assert!(!second.interrupted);
    assert!(second.checkpoint.starts_with("resumed from "), "{}", second.checkpoint);
    assert!(fractions[0] > 0.0, "it went on from where it was, not from the start");
    assert_eq!(second.summary.to_string(), straight.summary.to_string());
    assert_eq!(second.series_csv, straight.series_csv);
    assert!(!ck.path.exists(), "a finished run removes its save");
    assert!(second.wall_seconds >= first.wall_seconds.min(second.wall_seconds));
}

#[test]
fn a_save_of_another_run_or_a_damaged_one_is_set_aside() {
    let dir = Scratch::new("aside");
    let s = spec();
    let ck = Checkpointing { path: dir.0.join("run.ckpt"), every: Duration::ZERO };
    let mut checks = 0;
    run_checkpointed(common::device(true, true), &s, &ck, &mut |_| {
        checks += 1;
        checks < 4
    })
    .unwrap();
    assert!(ck.path.exists());

    // Another seed: the save is not this run's.
    let mut other = spec();
    other.workload.seed += 1;
    other.stop_requests = 100_000;
    other.stop = StopRule::Volume;
    let straight = run(common::device(true, true), &other, None, &mut |_| true).unwrap();
    let r = run_checkpointed(common::device(true, true), &other, &ck, &mut |_| true).unwrap();
    assert!(r.checkpoint.starts_with("started afresh: a save of another run"), "{}", r.checkpoint);
    assert_eq!(r.summary.to_string(), straight.summary.to_string());
    let aside = ck.path.with_extension("unusable");
    assert!(aside.exists(), "the other run's save is kept aside, not deleted");

    // A save cut short (a crash while copying it elsewhere, say).
    let bytes = std::fs::read(&aside).unwrap();
    std::fs::write(&ck.path, &bytes[..bytes.len() / 2]).unwrap();
    let r = run_checkpointed(common::device(true, true), &other, &ck, &mut |_| true).unwrap();
    assert!(r.checkpoint.starts_with("started afresh: "), "{}", r.checkpoint);
    assert_eq!(r.summary.to_string(), straight.summary.to_string());

    // Not a checkpoint at all.
    std::fs::write(&ck.path, b"not a checkpoint, a note").unwrap();
    let r = run_checkpointed(common::device(true, true), &other, &ck, &mut |_| true).unwrap();
    assert!(r.checkpoint.contains("not an ssdlab cache-run checkpoint"), "{}", r.checkpoint);
}

#[test]
fn a_checkpointed_run_refuses_a_device_trace() {
    let dir = Scratch::new("trace");
    let mut s = spec();
    s.device_trace = Some(dir.0.join("t.msr"));
    let ck = Checkpointing { path: dir.0.join("run.ckpt"), every: Duration::ZERO };
    let e = run_checkpointed(common::device(true, true), &s, &ck, &mut |_| true).err().unwrap().to_string();
    assert!(e.contains("device_trace"), "{e}");
}

#[test]
fn a_save_that_fails_does_not_stop_the_run() {
    let dir = Scratch::new("fail");
    let s = spec();
    let straight = run(common::device(true, true), &s, None, &mut |_| true).unwrap();
    // The save's directory does not exist: every save fails.
    let ck = Checkpointing { path: dir.0.join("gone").join("run.ckpt"), every: Duration::ZERO };
    let r = run_checkpointed(common::device(true, true), &s, &ck, &mut |_| true).unwrap();
    assert!(r.checkpoint.starts_with("a save failed ("), "{}", r.checkpoint);
    assert_eq!(r.summary.to_string(), straight.summary.to_string());
}
