//! A campaign from the command line without Python: `cargo run --release -p ssdlab-spi-fw
//! --example campaign -- [CONFIG.toml] [key=value ...]` (keys as in
//! experiments/spi-nor/campaign.toml, values in TOML syntax); prints the report as JSON.

fn main() {
    let mut text = String::new();
    for a in std::env::args().skip(1) {
        if a.contains('=') {
            text.push_str(&a);
        } else {
            text.push_str(&std::fs::read_to_string(&a).unwrap_or_else(|e| panic!("{a}: {e}")));
        }
        text.push('\n');
    }
    let c = ssdlab_spi_fw::Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    let r = ssdlab_spi_fw::run(&c, &mut |done, total| eprint!("\r{done}/{total} cut points")).unwrap_or_else(|e| panic!("{e}"));
    eprintln!();
    println!("{}", serde_json::to_string_pretty(&r).expect("json"));
}
