//! Run a spec file: `cargo run --release -p ssdlab-vssd --example vssd_run -- run|lifetime SPEC.json`
//! (the JSON the Python API sends: {"device": {...config...}, "spec": {...}}).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[2]).expect("spec file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let dev = ssdlab_vssd::device_config(v["device"].as_str().unwrap_or("quick")).expect("device name");
    let t = std::time::Instant::now();
    let out = match args[1].as_str() {
        "cost" => serde_json::to_value(ssdlab_vssd::cost::measure(&dev, 30).expect("cost")).unwrap(),
        "run" => {
            let spec: ssdlab_vssd::sim::RunSpec = serde_json::from_value(v["spec"].clone()).expect("run spec");
            ssdlab_vssd::sim::run(&dev, &spec, &mut |_| true).expect("run").summary
        }
        _ => {
            let mut d = dev;
            if let Some(pe) = v["pe_limit"].as_u64() {
                d.media.pe_limit = pe as u32;
            }
            let spec: ssdlab_vssd::lifetime::LifetimeSpec = serde_json::from_value(v["spec"].clone()).expect("lifetime spec");
            ssdlab_vssd::lifetime::run(d, &spec, &mut |_| true).expect("lifetime").0
        }
    };
    eprintln!("wall {:.2} s", t.elapsed().as_secs_f64());
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
