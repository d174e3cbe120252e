//! A minimal serprog server without Python (for debugging and the benchmark):
//! cargo run --release -p ssdlab-serve --example serprog -- CHIP IMAGE 127.0.0.1:PORT [TRACE]
//! (SSDLAB_SPI_TIMING=instant|max|scale=X picks the timing mode; datasheet by default)
use std::path::Path;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: serprog CHIP IMAGE HOST:PORT [TRACE]");
        std::process::exit(2);
    }
    let part = ssdlab_spi::part(&a[1]).unwrap_or_else(|| {
        eprintln!("unknown chip {}; valid: {}", a[1], ssdlab_spi::parts::NAMES.join(", "));
        std::process::exit(2)
    });
    let timing = std::env::var("SSDLAB_SPI_TIMING").unwrap_or_else(|_| "datasheet".into());
    let timing = ssdlab_spi::TimingMode::parse(&timing).unwrap_or_else(|e| {
        eprintln!("SSDLAB_SPI_TIMING: {e}");
        std::process::exit(2)
    });
    let opts = ssdlab_spi::Options { timing, ..Default::default() };
    let mut flash = ssdlab_spi::Flash::new(part, Some(Path::new(&a[2])), opts).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    if let Some(t) = a.get(4) {
        flash.trace_to(Path::new(t)).expect("trace file");
    }
    let server = ssdlab_serve::serprog::Server::bind(&a[3]).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    println!("listening on {}", server.local_addr().map(|a| a.to_string()).unwrap_or_default());
    if let Err(e) = server.run(&mut flash, &|| false) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
