//! The in-process applications give the same, correct answers on every engine, and the JSON
//! runner's microbenchmark and benches run.

mod common;

use common::*;
use ssdlab_flac::apps::{self, TreeSpec};
use ssdlab_flac::fs::engine::EngineKind;
use ssdlab_flac::fs::{Fs, FsConfig};

fn mount(dir: &std::path::Path, engine: EngineKind) -> std::sync::Arc<Fs> {
    Fs::mount(FsConfig { engine, flac: config(dir, 128, 32), flush_interval_ms: 0, ..FsConfig::default() }).unwrap()
}

#[test]
fn grep_tar_bigsort_on_every_engine() {
    let tree = TreeSpec { root: "/src".into(), files: 20, total_bytes: 6 << 20, ..TreeSpec::default() };
    let mut sums = Vec::new();
    for engine in [EngineKind::Flac, EngineKind::Pagecache, EngineKind::Dax] {
        let d = tmpdir();
        let fs = mount(d.path(), engine);
        let want = apps::make_tree(&fs, &tree).unwrap();
        assert!(want > 100);
        let g = apps::grep(&fs, "/src", &tree.pattern, 1 << 20).unwrap();
        assert_eq!(g.result, want, "{engine:?}");
        let src = apps::tree_checksum(&fs, "/src").unwrap();
        let c = apps::tar_create(&fs, "/src", "/a.tar", 1 << 20).unwrap();
        let x = apps::tar_extract(&fs, "/a.tar", "/x", 1 << 20).unwrap();
        assert_eq!((c.result, x.result), (20, 20));
        assert_eq!(apps::tree_checksum(&fs, "/x").unwrap(), src, "{engine:?}: extracted tree");
        apps::make_ints(&fs, "/ints", 300_000, 7).unwrap();
        let s = apps::bigsort(&fs, "/ints", "/sorted", "/tmp", 100_000, 64 << 10).unwrap();
        let (n, sum) = apps::check_sorted(&fs, "/sorted").unwrap();
        assert_eq!((n, sum), (300_000, s.checksum));
        sums.push((src, sum));
        if engine == EngineKind::Flac {
            let st = fs.stats();
            assert!(st["mapped_bytes"].as_u64().unwrap() > 0, "FlacFS attached nothing: {st}");
            fs.flac().unwrap().check_invariants();
        }
        fs.unmount().unwrap();
    }
    assert!(sums.windows(2).all(|w| w[0] == w[1]), "same data and results on every engine");
}

#[test]
fn runner_micro_attach_faults() {
    let d = tmpdir();
    let fs = serde_json::to_value(FsConfig { flac: config(d.path(), 64, 16), ..FsConfig::default() }).unwrap();
    let points = serde_json::json!([
        {"op": "read", "io_bytes": 65536, "threads": 2, "bytes": 1 << 20, "repeats": 2},
        {"op": "write", "io_bytes": 65536, "threads": 1, "bytes": 1 << 20},
        {"op": "read", "io_bytes": 4096, "threads": 1, "bytes": 1 << 20, "cold": true},
    ]);
    let spec = serde_json::json!({"kind": "micro", "fs": fs, "setup": {"data_bytes": 8 << 20, "threads": 2}, "points": points});
    let r: serde_json::Value = serde_json::from_str(&ssdlab_flac::run::run_json(&spec.to_string()).unwrap()).unwrap();
    let pts = r["points"].as_array().unwrap();
    assert_eq!(pts.len(), 3);
    assert!(pts.iter().all(|p| p["gb_s"].as_f64().unwrap() > 0.0));
    assert_eq!(pts[0]["runs"].as_array().unwrap().len(), 2);
    assert!(pts[0]["mapped_bytes"].as_u64().unwrap() > 0, "64 KiB reads into FLAC buffers are attached");
    let flac = serde_json::to_value(config(d.path(), 64, 16)).unwrap();
    let r = ssdlab_flac::run::run_json(
        &serde_json::json!({"kind": "attach", "flac": flac, "sizes": [4096, 65536], "budget_bytes": 1 << 20}).to_string(),
    )
    .unwrap();
    let rows: serde_json::Value = serde_json::from_str(&r).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    let r = ssdlab_flac::run::run_json(&serde_json::json!({"kind": "faults", "flac": flac, "pages": 64}).to_string()).unwrap();
    assert!(r.contains("cow_fault_us"));
    assert!(ssdlab_flac::run::run_json(r#"{"kind": "nope"}"#).unwrap_err().to_string().contains("kind must be"));
}
