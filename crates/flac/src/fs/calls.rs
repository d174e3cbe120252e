//! Where a program's time goes: how many file-system calls of each kind it made, the time spent
//! inside them (wall clock, from entry to return, the outermost call only: a write that commits
//! counts once, as a write), and the sizes its reads and writes asked for. The shim and the
//! in-process programs go through the same [`super::Fs`] calls, so both are counted here.
//!
//! The same place charges the optional per-call kernel costs ([`KernelCost`]): a library file
//! system makes no system call, where a kernel file system pays the crossing and the VFS work on
//! every call. With a cost set, each call of a charged kind first waits (busy) for that many
//! nanoseconds, measured on this machine's tmpfs by [`crate::kcost::measure`], never fitted.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The kinds of calls counted (and charged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Read,
    Write,
    Open,
    Close,
    Stat,
    Seek,
    /// mkdir, readdir, rename, unlink, link, truncate, fsync, setattr, ...
    Other,
}

pub const CALLS: [(Call, &str); 7] = [
    (Call::Read, "read"),
    (Call::Write, "write"),
    (Call::Open, "open"),
    (Call::Close, "close"),
    (Call::Stat, "stat"),
    (Call::Seek, "seek"),
    (Call::Other, "other"),
];

/// Read and write sizes are counted in these buckets: below each bound (bytes), the last
/// unbounded. 64 KiB is FlacFS's attach threshold.
pub const SIZE_BUCKETS: [(u64, &str); 4] = [(4096, "<4K"), (65536, "4K-64K"), (2 << 20, "64K-2M"), (u64::MAX, ">=2M")];

/// Per-call costs of a kernel file system (nanoseconds; 0 = not charged). Read and write cover
/// pread and pwrite too. Calls of kind [`Call::Other`] are not charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelCost {
    pub read_ns: u64,
    pub write_ns: u64,
    pub open_ns: u64,
    pub close_ns: u64,
    pub stat_ns: u64,
    pub seek_ns: u64,
}

impl KernelCost {
    fn of(&self, c: Call) -> u64 {
        match c {
            Call::Read => self.read_ns,
            Call::Write => self.write_ns,
            Call::Open => self.open_ns,
            Call::Close => self.close_ns,
            Call::Stat => self.stat_ns,
            Call::Seek => self.seek_ns,
            Call::Other => 0,
        }
    }

    pub fn is_zero(&self) -> bool {
        CALLS.iter().all(|(c, _)| self.of(*c) == 0)
    }
}

fn idx(c: Call) -> usize {
    CALLS.iter().position(|(k, _)| *k == c).unwrap_or(CALLS.len() - 1)
}

fn bucket(len: u64) -> usize {
    SIZE_BUCKETS.iter().position(|(b, _)| len < *b).unwrap_or(SIZE_BUCKETS.len() - 1)
}

thread_local! {
    /// Calls in progress on this thread (only the outermost is timed).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The counters of one mounted file system.
#[derive(Default)]
pub struct Calls {
    n: [AtomicU64; CALLS.len()],
    ns: [AtomicU64; CALLS.len()],
    charged_ns: AtomicU64,
    read_sizes: [AtomicU64; SIZE_BUCKETS.len()],
    write_sizes: [AtomicU64; SIZE_BUCKETS.len()],
    cost: KernelCost,
}

/// A call in progress: records its time when dropped.
pub struct Timed<'a> {
    calls: &'a Calls,
    kind: Call,
    t0: Option<Instant>,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        if let Some(t0) = self.t0 {
            let i = idx(self.kind);
            self.calls.n[i].fetch_add(1, Ordering::Relaxed);
            self.calls.ns[i].fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// Wait (busy) for `ns` nanoseconds: a kernel crossing holds the CPU.
fn spin(ns: u64) {
    let until = Instant::now() + Duration::from_nanos(ns);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

impl Calls {
    pub fn new(cost: KernelCost) -> Calls {
        Calls { cost, ..Calls::default() }
    }

    /// Enter a call of kind `kind`; `size`: what a read or write asked for.
    pub fn enter(&self, kind: Call, size: Option<u64>) -> Timed<'_> {
        let outer = DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get() == 1
        });
        if !outer {
            return Timed { calls: self, kind, t0: None };
        }
        let t0 = Instant::now();
        if let Some(len) = size {
            let h = if kind == Call::Write { &self.write_sizes } else { &self.read_sizes };
            h[bucket(len)].fetch_add(1, Ordering::Relaxed);
        }
        let c = self.cost.of(kind);
        if c > 0 {
            spin(c);
            self.charged_ns.fetch_add(c, Ordering::Relaxed);
        }
        Timed { calls: self, kind, t0: Some(t0) }
    }

    pub fn cost(&self) -> KernelCost {
        self.cost
    }

    /// The counters as JSON: `calls` {kind: n}, `call_ns` {kind: ns}, `call_ns_total`,
    /// `charged_ns` (of which the kernel costs), `read_sizes` / `write_sizes` {bucket: n}.
    pub fn json(&self) -> serde_json::Value {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let map = |v: &[AtomicU64], names: &mut dyn Iterator<Item = &'static str>| -> serde_json::Map<String, serde_json::Value> {
            v.iter().map(|a| (names.next().unwrap_or("?").to_string(), serde_json::json!(r(a)))).collect()
        };
        serde_json::json!({
            "calls": map(&self.n, &mut CALLS.iter().map(|c| c.1)),
            "call_ns": map(&self.ns, &mut CALLS.iter().map(|c| c.1)),
            "call_ns_total": self.ns.iter().map(r).sum::<u64>(),
            "charged_ns": r(&self.charged_ns),
            "read_sizes": map(&self.read_sizes, &mut SIZE_BUCKETS.iter().map(|b| b.1)),
            "write_sizes": map(&self.write_sizes, &mut SIZE_BUCKETS.iter().map(|b| b.1)),
            "kernel_cost": self.cost,
        })
    }
}

/// `after - before` for every unsigned number in two snapshots of the same shape (counters
/// over an interval: what one program did); other values are taken from `after`.
pub fn delta(after: &serde_json::Value, before: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (after, before) {
        (Value::Object(a), Value::Object(b)) => {
            Value::Object(a.iter().map(|(k, v)| (k.clone(), b.get(k).map_or_else(|| v.clone(), |w| delta(v, w)))).collect())
        }
        (Value::Number(a), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => serde_json::json!(x.saturating_sub(y)),
            _ => after.clone(),
        },
        _ => after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_calls_count_once_and_sizes_fall_in_their_buckets() {
        let c = Calls::new(KernelCost::default());
        {
            let _w = c.enter(Call::Write, Some(2 << 20));
            let _inner = c.enter(Call::Other, None);
        }
        drop(c.enter(Call::Read, Some(100)));
        drop(c.enter(Call::Read, Some(65536)));
        let j = c.json();
        assert_eq!(j["calls"]["write"], 1);
        assert_eq!(j["calls"]["other"], 0);
        assert_eq!(j["calls"]["read"], 2);
        assert_eq!(j["write_sizes"][">=2M"], 1);
        assert_eq!(j["read_sizes"]["<4K"], 1);
        assert_eq!(j["read_sizes"]["64K-2M"], 1);
        assert_eq!(j["charged_ns"], 0);
    }

    #[test]
    fn a_kernel_cost_is_charged_per_call_of_its_kind() {
        let c = Calls::new(KernelCost { open_ns: 1000, ..KernelCost::default() });
        drop(c.enter(Call::Open, None));
        drop(c.enter(Call::Other, None));
        drop(c.enter(Call::Read, Some(1)));
        assert_eq!(c.json()["charged_ns"], 1000);
    }

    #[test]
    fn delta_subtracts_counters_and_keeps_the_rest() {
        let a = serde_json::json!({"engine": "flac", "reads": 7, "io": {"calls": {"read": 5}}});
        let b = serde_json::json!({"engine": "flac", "reads": 2, "io": {"calls": {"read": 1}}});
        assert_eq!(delta(&a, &b), serde_json::json!({"engine": "flac", "reads": 5, "io": {"calls": {"read": 4}}}));
    }
}
