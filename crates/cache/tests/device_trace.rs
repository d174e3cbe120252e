//! A cache run's device commands, recorded as an MSR Cambridge trace, replay on the device
//! alone to the same flash behaviour: the device-level view of a cache run can be studied
//! (or run on other device configurations) without the cache.

mod common;

use ssdlab_cache::run::run_on;
use ssdlab_cache::{run, Generator, HybridCache, RunSpec};
use ssdlab_core::driver::{Limits, Loop};
use ssdlab_core::workload::trace::{self, TraceFormat};
use ssdlab_core::Device;

/// A path in the temporary directory, removed when dropped.
struct TempFile(std::path::PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_recorded_device_trace_replays_to_the_same_media_writes() {
    let cfg = common::device(false, false);
    // kvcache at 50% utilisation with a 4% SOC, 1.5 device writes: enough for GC to move data.
    let s = common::spec(0.5, 0.04, 1.5);
    let a = TempFile(std::env::temp_dir().join(format!("ssdlab-device-trace-{}-a.csv", std::process::id())));
    let mut cache = HybridCache::new(Device::new(cfg.clone()).unwrap(), s.cache.clone()).unwrap();
    let mut gen = Generator::new(&s.workload).unwrap();
    cache.flash.record_to(&a.0).unwrap();
    run_on(&mut cache, &s, &mut gen, &mut |_| true).unwrap();
    cache.flash.finish_trace().unwrap();
    let want = cache.flash.dev.block_device().counters().clone();
    assert!(want.gc_relocated_sectors > 0, "the run must collect garbage for the comparison to mean something");

    let mut dev = Device::new(cfg.clone()).unwrap();
    let (sector, logical) = (cfg.geometry.sector_bytes, dev.block_device().logical_sectors());
    let mut src = trace::open(&a.0, TraceFormat::Msr, sector, logical).unwrap();
    dev.run_source(&mut src, Loop::Closed { depth: 1 }, Limits::default(), &mut |_, _| true).unwrap();
    let got = dev.block_device().counters();
    assert_eq!(
        (got.host_write_cmds, got.host_read_cmds, got.host_write_bytes, got.host_read_bytes),
        (want.host_write_cmds, want.host_read_cmds, want.host_write_bytes, want.host_read_bytes)
    );
    assert_eq!(
        (got.nand_write_bytes, got.gc_relocated_sectors, got.nand_erase_count),
        (want.nand_write_bytes, want.gc_relocated_sectors, want.nand_erase_count)
    );

    // `device_trace` in a run spec records the same commands, byte for byte.
    let b = TempFile(std::env::temp_dir().join(format!("ssdlab-device-trace-{}-b.csv", std::process::id())));
    run(cfg, &RunSpec { device_trace: Some(b.0.clone()), ..s }, None, &mut |_| true).unwrap();
    assert!(std::fs::read(&a.0).unwrap() == std::fs::read(&b.0).unwrap(), "the two recordings differ");
}

#[test]
fn an_unwritable_device_trace_path_is_a_clear_error() {
    let s = RunSpec { device_trace: Some("/nonexistent-dir/trace.csv".into()), stop_requests: 10, ..common::spec(0.5, 0.04, 1.5) };
    let Err(e) = run(common::device(false, false), &s, None, &mut |_| true) else { panic!("the run should fail") };
    let e = e.to_string();
    assert!(e.contains("device trace /nonexistent-dir/trace.csv"), "{e}");
}
