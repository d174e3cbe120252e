//! Rate-limited logging: a flood of refused or dropped connections must not flood stderr.
//!
//! Each kind of message ("refused", "dropped", ...) is printed at most once per interval; the
//! ones held back are counted and reported with the next line of that kind, by [`RateLog::tick`]
//! (the accept loop calls it every few seconds) and at shutdown by [`RateLog::flush`].

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Kind {
    last: Option<Instant>,
    suppressed: u64,
}

/// A logger writing `PREFIX: message` lines to stderr, at most one per kind and interval.
pub struct RateLog {
    prefix: String,
    quiet: bool,
    interval: Duration,
    kinds: Mutex<BTreeMap<&'static str, Kind>>,
    /// Lines written (tests count them instead of parsing stderr).
    lines: std::sync::atomic::AtomicU64,
}

impl RateLog {
    pub fn new(prefix: &str, quiet: bool, interval: Duration) -> RateLog {
        assert!(!interval.is_zero(), "a rate limit needs an interval");
        RateLog {
            prefix: prefix.to_string(),
            quiet,
            interval,
            kinds: Mutex::new(BTreeMap::new()),
            lines: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn write(&self, msg: &str) {
        self.lines.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        eprintln!("{}: {msg}", self.prefix);
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An informational line, always printed unless quiet (startup, shutdown).
    pub fn info(&self, msg: impl Display) {
        if !self.quiet {
            self.write(&msg.to_string());
        }
    }

    /// An error, printed even when quiet.
    pub fn error(&self, msg: impl Display) {
        self.write(&msg.to_string());
    }

    /// A per-connection event of `kind`: printed unless one of the same kind was printed less
    /// than an interval ago (then counted and summarised later). Nothing when quiet.
    pub fn event(&self, kind: &'static str, msg: impl Display) {
        if self.quiet {
            return;
        }
        let now = Instant::now();
        let mut kinds = crate::lock(&self.kinds);
        let k = kinds.entry(kind).or_default();
        if k.last.is_some_and(|t| now.duration_since(t) < self.interval) {
            k.suppressed += 1;
            return;
        }
        let held = std::mem::take(&mut k.suppressed);
        k.last = Some(now);
        drop(kinds);
        if held > 0 {
            self.write(&format!("{msg} (and {held} more {kind} before it, not shown)"));
        } else {
            self.write(&msg.to_string());
        }
    }

    /// Summarise the kinds whose messages were held back for a whole interval.
    pub fn tick(&self) {
        self.summarise(false);
    }

    /// Summarise everything held back (at shutdown).
    pub fn flush(&self) {
        self.summarise(true);
    }

    fn summarise(&self, all: bool) {
        let now = Instant::now();
        let mut out = vec![];
        {
            let mut kinds = crate::lock(&self.kinds);
            for (name, k) in kinds.iter_mut() {
                let due = all || k.last.is_none_or(|t| now.duration_since(t) >= self.interval);
                if k.suppressed > 0 && due {
                    out.push(format!("{} more {name} not shown (one line per {:?} at most)", k.suppressed, self.interval));
                    k.suppressed = 0;
                    k.last = Some(now);
                }
            }
        }
        for line in out {
            self.write(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_prints_one_line_then_a_summary() {
        let log = RateLog::new("test", false, Duration::from_secs(3600));
        for i in 0..10_000 {
            log.event("refused connections", format!("refused client {i}"));
        }
        assert_eq!(log.lines(), 1);
        log.tick(); // the interval has not passed: nothing yet
        assert_eq!(log.lines(), 1);
        log.flush();
        assert_eq!(log.lines(), 2);
        log.flush(); // nothing held back any more
        assert_eq!(log.lines(), 2);
    }

    #[test]
    fn quiet_hides_events_but_not_errors() {
        let log = RateLog::new("test", true, Duration::from_millis(1));
        log.event("refused connections", "x");
        log.info("y");
        assert_eq!(log.lines(), 0);
        log.error("z");
        assert_eq!(log.lines(), 1);
    }
}
