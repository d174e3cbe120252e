//! Pinned results: the SHA-256 of metrics.json (and of the time series) for a few configs
//! across personalities, policies and modes. A change that moves any number of any of these
//! runs fails here; if the change is meant to move them, say why in the commit and update the
//! digests (the failure message prints the new ones; SSDLAB_DIGEST_SHOW=1 prints a few figures
//! of each run).

use sha2::{Digest, Sha256};
use ssdlab_core::config::Config;
use ssdlab_core::device::no_progress;
use ssdlab_core::Device;

/// (name, config as TOML, expected SHA-256 of metrics.json + timeseries.csv).
const CASES: &[(&str, &str, &str)] = &[
    (
        "conventional greedy, timing, reads and trims",
        r#"preset = "tiny"
           [workload]
           pattern = "hotcold"
           read_fraction = 0.2
           trim_fraction = 0.05
           block_bytes = [4096, 16384]
           block_weights = [3.0, 1.0]
           stop_device_writes = 1.5"#,
        "b8ea51d625868f5ed8a4bf46a00e24da630515b3bdec628df0e1e67fa9700e78",
    ),
    (
        "conventional cost-benefit, read priority and suspend, open loop",
        r#"preset = "tiny"
           [ftl]
           gc_policy = "cost-benefit"
           [timing]
           suspend = true
           [workload]
           pattern = "zipf"
           read_fraction = 0.3
           rate_iops = 20000.0
           stop_device_writes = 1.0"#,
        "04e3369f2652886b958a0135c7bc04ca31da5c9f6c33e16e533794c9711c9bb1",
    ),
    (
        "conventional d-choices, bad blocks, static wear-levelling, no timing",
        r#"preset = "tiny"
           [timing]
           enabled = false
           [media]
           pe_limit = 150
           factory_bad_fraction = 0.03
           grown_bad_probability = 0.0005
           [ftl]
           gc_policy = "d-choices"
           wl_static_threshold = 4
           [workload]
           pattern = "hotcold"
           stop_device_writes = 4.0"#,
        "60e5db53755a55eeb4a8bdf7432a54549c2a668a77c7a2bb890095b794bfa4d7",
    ),
    (
        "conventional fifo, write-through, data-backed",
        r#"preset = "tiny"
           storage = "data"
           [ftl]
           gc_policy = "fifo"
           write_buffer_bytes = 0
           [workload]
           queue_depth = 4
           stop_device_writes = 1.0"#,
        "061a7c8d4093e9e83e8983b40cdb4f2be4cc369e597e158b1c1de02f43db0171",
    ),
    (
        "FDP, two reclaim groups, persistently isolated handle, mix",
        r#"preset = "tiny"
           [fdp]
           enabled = true
           reclaim_groups = 2
           handles = 2
           handle_types = ["initially-isolated", "persistently-isolated"]
           [precondition]
           sequential_fill = false
           random_device_writes = 0.0
           [workload]
           stop_device_writes = 2.0
           mix = [{ weight = 1.0, pattern = "sequential", span = 0.3, block_bytes = [65536], placement = 0 },
                  { weight = 4.0, pattern = "uniform", offset = 0.3, span = 0.2, placement = 1 },
                  { weight = 4.0, pattern = "hotcold", offset = 0.5, span = 0.4, placement = 32768 }]"#,
        "3297e48fee965261af5befc6036e94b4b586e68317b575923aac2b353896bcf4",
    ),
    (
        "ZNS with conventional zones, data-backed",
        r#"preset = "tiny"
           personality = "zns"
           storage = "data"
           [zns]
           max_open = 4
           max_active = 4
           conventional_zones = 4
           [workload]
           read_fraction = 0.2
           stop_device_writes = 3.0"#,
        "ee2bed29de733dc20c9df87bed48924a3b74c8f8c8c2a933d2f7fcaadb2733da",
    ),
    (
        "open-channel through the host chunk log",
        r#"preset = "tiny"
           personality = "ocssd"
           [workload]
           read_fraction = 0.25
           block_bytes = [4096, 65536]
           block_weights = [4.0, 1.0]
           stop_device_writes = 3.0"#,
        "b69e5afa2e0171b543696c0d126b0d4a727ce466447e3a97ded1da027d909fdf",
    ),
];

fn digest(toml: &str) -> String {
    let cfg = Config::from_toml_str(toml, "<digest case>").expect("valid case");
    let mut dev = Device::new(cfg).expect("device");
    let rep = dev.run_configured(&mut no_progress).unwrap_or_else(|e| panic!("{toml}: {e}"));
    if std::env::var_os("SSDLAB_DIGEST_SHOW").is_some() {
        let m = &rep.metrics;
        eprintln!(
            "dlwa {} gc {} wl {} grown {} factory {} erases {} zns {} pad {}",
            m["dlwa"],
            m["gc_events"],
            m["wl_static_moves"],
            m["blocks"]["bad_grown"],
            m["blocks"]["bad_factory"],
            m["nand_erase_count"],
            m["zns"]["zone_resets_total"],
            m["pad_sectors"]
        );
    }
    let mut h = Sha256::new();
    h.update(serde_json::to_string_pretty(&rep.metrics).unwrap().as_bytes());
    h.update(rep.series_csv.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn metrics_are_pinned() {
    let mut wrong = vec![];
    for (name, toml, want) in CASES {
        let got = digest(toml);
        if got != *want {
            wrong.push(format!("{name}: {got} (pinned {want})"));
        }
    }
    assert!(wrong.is_empty(), "metrics moved:\n{}", wrong.join("\n"));
}
