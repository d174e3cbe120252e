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
        "b71ce9a6c810923e1014113b65ec16efed2e74d593fa7f92542e147125faed36",
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
        "1e8d4c36afb55229ead11d55d28962648112878212874f3e8c1bcfbf1f2d85f6",
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
        "dc70d305a4978cf8a170084575232616dfbe8fd598fa6091ed13278988332c8a",
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
        "884b03916a009096e2543b894a2481b391ef11590ebf0a7e65bb3d3165b525bd",
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
        "cbab100303aa5550a7a6a059abc2851b288f4c7fb75e6ad6748d130cb444959b",
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
        "324ea56e77b5b5574c2a24708c7e64a4f1fb4a0e6b11862f2e3699d5f5092315",
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
        "472a122abb6b4de877626732e82ec7066c7ab2679558d0b43e9adc5cd3cb529b",
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
