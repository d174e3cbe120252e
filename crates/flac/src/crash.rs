//! Crash points for recovery tests: named places in the commit path where a test makes the
//! process die as `kill -9` would (SIGKILL to itself: no destructors, no flushing), so every
//! stage of a commit is covered deterministically, not only where a random kill lands.
//! Armed by `FLAC_CRASH_AT=name[:n]` (die the n-th time, default 1) or [`arm`]; one relaxed
//! load when disarmed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static ARMED: AtomicBool = AtomicBool::new(false);
static LEFT: AtomicU64 = AtomicU64::new(0);
static NAME: Mutex<String> = Mutex::new(String::new());

/// The crash points, in commit order.
pub const POINTS: &[&str] = &["flush.after_copy", "log.before_header", "commit.after_log", "commit.mid_apply", "commit.after_apply"];

/// Die at the `n`-th pass through `name`.
pub fn arm(name: &str, n: u64) {
    assert!(POINTS.contains(&name), "unknown crash point {name:?}; points: {POINTS:?}");
    *NAME.lock().unwrap() = name.to_string();
    LEFT.store(n.max(1), Ordering::SeqCst);
    ARMED.store(true, Ordering::SeqCst);
}

/// Arm from `FLAC_CRASH_AT` if set.
pub fn arm_from_env() {
    if let Ok(v) = std::env::var("FLAC_CRASH_AT") {
        let (name, n) = match v.split_once(':') {
            Some((a, b)) => (a.to_string(), b.parse().unwrap_or(1)),
            None => (v.clone(), 1),
        };
        arm(&name, n);
    }
}

#[inline]
pub fn point(name: &str) {
    if ARMED.load(Ordering::Relaxed) {
        hit(name);
    }
}

#[cold]
fn hit(name: &str) {
    if *NAME.lock().unwrap() != name {
        return;
    }
    if LEFT.fetch_sub(1, Ordering::SeqCst) == 1 {
        // SAFETY: sending SIGKILL to ourselves; nothing runs after it.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        unreachable!("SIGKILL");
    }
}
