//! `sizing` runs the checks building a device runs, and its memory estimate is what the device
//! really takes: measured here with a counting allocator, on devices that have been written
//! (victim sets and free pools full, data stores filled).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use ssdlab_core::config::Config;
use ssdlab_core::device::no_progress;
use ssdlab_core::sizing::sizing;
use ssdlab_core::Device;

struct Counting;
static LIVE: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as u64, Ordering::Relaxed);
        LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn config(toml: &str) -> Config {
    Config::from_toml_str(toml, "<sizing test>").unwrap()
}

/// One test function: the allocator count is process-wide, so cases run one after another.
#[test]
fn estimates_match_measured_memory_and_checks_match_building() {
    let cases = [
        ("conventional greedy", "preset = \"default\"\n[timing]\nenabled = false", 0.10),
        ("conventional cost-benefit", "preset = \"default\"\n[timing]\nenabled = false\n[ftl]\ngc_policy = \"cost-benefit\"", 0.10),
        ("FDP", "preset = \"fdp-ssd\"\n[timing]\nenabled = false", 0.10),
        ("ZNS, conventional zones", "preset = \"zns-ssd\"\n[timing]\nenabled = false\n[zns]\nconventional_zones = 8", 0.10),
        ("open-channel", "preset = \"default\"\npersonality = \"ocssd\"\n[timing]\nenabled = false", 0.10),
        ("conventional, data-backed", "preset = \"tiny\"\nstorage = \"data\"\n[timing]\nenabled = false", 0.10),
    ];
    for (name, toml, tol) in cases {
        let cfg = config(toml);
        let est = sizing(&cfg).unwrap();
        let before = LIVE.load(Ordering::Relaxed);
        let mut dev = Device::new(cfg.clone()).unwrap();
        assert_eq!(est.logical_bytes, dev.logical_bytes(), "{name}: logical capacity");
        if cfg.storage == ssdlab_core::config::StorageMode::Data {
            // Fill every sector with non-zero data, the estimate's worst case.
            let chunk = vec![0x5au8; 1 << 20];
            let mut off = 0;
            while off < dev.logical_bytes() {
                let n = (dev.logical_bytes() - off).min(chunk.len() as u64) as usize;
                dev.write(off, &chunk[..n], false).unwrap();
                off += n as u64;
            }
        } else {
            dev.precondition(&mut no_progress).unwrap();
        }
        let used = LIVE.load(Ordering::Relaxed) - before;
        let full = est.memory_bytes + est.data_bytes_max;
        let ratio = full as f64 / used as f64;
        println!("{name}: estimate {full} B, measured {used} B ({ratio:.3})");
        assert!((ratio - 1.0).abs() <= tol, "{name}: estimate {full} B vs measured {used} B");
        drop(dev);
    }
}

#[test]
fn sizing_refuses_what_building_refuses() {
    for toml in [
        // A zone width that does not divide the dies (config check used to accept it).
        "preset = \"tiny\"\npersonality = \"zns\"\n[zns]\nzone_width = 3",
        "preset = \"tiny\"\npersonality = \"zns\"\n[zns]\nzone_blocks = 5",
        "preset = \"tiny\"\npersonality = \"zns\"\n[zns]\nconventional_zones = 63",
        // More write streams than the spare can hold open.
        "preset = \"tiny\"\n[fdp]\nenabled = true\nhandles = 64",
    ] {
        let cfg = config(toml);
        let s = sizing(&cfg).map(|_| ()).map_err(|e| e.to_string());
        let b = Device::new(cfg).map(|_| ()).map_err(|e| e.to_string());
        assert!(s.is_err(), "{toml}: sizing accepted it");
        assert_eq!(s, b, "{toml}: sizing and building disagree");
    }
}
