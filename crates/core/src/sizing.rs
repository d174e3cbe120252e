//! What a config will give, known before the device is built: capacities, the blocks the FTL
//! holds back, and the simulator memory it will take. `ssdlab config check` shows it, and the
//! CLI refuses a config whose memory would not fit. It runs exactly the checks that building
//! the device runs (the personalities' constructors call the same code), without allocating
//! the per-sector maps.

use crate::config::{Config, Personality};
use crate::error::Result;
use crate::ftl::conventional::Conventional;
use crate::ftl::ocssd::Ocssd;
pub use crate::ftl::sizing::Sizing;
use crate::ftl::zns::Zns;

/// Check `cfg` as building the device would, and size it.
pub fn sizing(cfg: &Config) -> Result<Sizing> {
    cfg.validate()?;
    match cfg.personality {
        Personality::Conventional => Conventional::sizing(cfg),
        Personality::Zns => Zns::sizing(cfg),
        Personality::Ocssd => Ocssd::sizing(cfg),
    }
}

/// Memory available to new allocations, if known: the least of Linux's MemAvailable, the room
/// left under the memory limit of this process's cgroup (and of its ancestors; cgroup v2
/// `memory.max`, v1 `memory.limit_in_bytes`), and [`MEMORY_ENV`] when it is set.
pub fn available_memory_bytes() -> Option<u64> {
    available_memory().map(|(b, _)| b)
}

/// Environment variable: the memory (bytes) ssdlab takes as available, when less than what
/// the machine says; a budget of one's own (e.g. a process sharing the machine), and how the
/// tests try the refusal and `--force` without a machine that small.
pub const MEMORY_ENV: &str = "SSDLAB_MEMORY_AVAILABLE";

/// [`available_memory_bytes`] and where the figure comes from (for messages).
pub fn available_memory() -> Option<(u64, &'static str)> {
    let mut best: Option<(u64, &'static str)> = None;
    let mut consider = |b: Option<u64>, what: &'static str| {
        if let Some(b) = b {
            if best.is_none_or(|(x, _)| b < x) {
                best = Some((b, what));
            }
        }
    };
    consider(mem_available(), "MemAvailable");
    consider(cgroup_room(), "under the cgroup memory limit");
    consider(std::env::var(MEMORY_ENV).ok().and_then(|v| v.trim().parse().ok()), MEMORY_ENV);
    best
}

fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// Room left under the tightest memory limit of this process's cgroup and its ancestors.
fn cgroup_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut room: Option<u64> = None;
    for line in own.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        // v2: one hierarchy ("0::/path"); v1: the memory controller's own.
        let (root, limit, usage) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else {
            continue;
        };
        // The process's group and each group above it that this mount shows (inside a
        // container the mount's root is the container's group).
        let mut dir = std::path::PathBuf::from(format!("{root}{}", path.trim_end_matches('/')));
        loop {
            let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok().and_then(|t| t.trim().parse::<u64>().ok());
            // "max" (v2) does not parse; v1 says "no limit" with a number near 2^63.
            if let (Some(l), Some(u)) = (read(limit), read(usage)) {
                if l < 1 << 60 {
                    let r = l.saturating_sub(u);
                    room = Some(room.map_or(r, |x| x.min(r)));
                }
            }
            if dir.as_os_str().len() <= root.len() || !dir.pop() {
                break;
            }
        }
    }
    room
}

/// Environment variable that lets a device be built although its estimate exceeds the memory
/// available (`ssdlab ... --force` sets it).
pub const FORCE_ENV: &str = "SSDLAB_IGNORE_MEMORY_ESTIMATE";

/// Refuse a device whose memory at format exceeds what this machine has available, with a
/// message that says how much and what to do, rather than let the allocation abort the
/// process half way (unless [`FORCE_ENV`] is set). A data-backed device's contents grow later
/// and are not counted here; `config check` warns when they could not fit.
pub fn ensure_memory(s: &Sizing) -> Result<()> {
    if std::env::var_os(FORCE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Ok(());
    }
    match available_memory() {
        Some((avail, source)) if s.memory_bytes > avail => Err(crate::error::Error::config(
            "geometry",
            format!(
                "this device needs about {} of memory and {} are available ({source}); use a smaller geometry (blocks_per_plane), storage = \"metadata\", or force it with --force ({FORCE_ENV}=1)",
                human(s.memory_bytes),
                human(avail)
            ),
        )),
        _ => Ok(()),
    }
}

/// Bytes as GiB, or MiB below one GiB, with one decimal.
fn human(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}
