//! uio-kv (crates/uio): put/get commands per second through the shared-memory queue interface,
//! a host thread and a device thread polling (the device's UTL on the `quick` flash, untimed),
//! and one command's round trip at queue depth 1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ssdlab_uio::layout::{bar, Command};
use ssdlab_uio::repro::{device_config, letter_key, letter_value};
use ssdlab_uio::{Controller, Host, Perm, Region, Utl, UtlConfig};

const KEYS: u64 = 4096;
const KEY_BYTES: u64 = 16;
const VALUE_BYTES: u64 = 64;
const ENTRIES: u16 = 1024;

struct Rig {
    host: Host,
    keys: u64,
    values: u64,
    bufs: u64,
}

/// Host and device over memfd regions, one I/O queue pair, the keys and values laid out in
/// host memory; returns the rig and the device thread (stopped through `stop`).
fn rig(stop: Arc<AtomicBool>) -> (Rig, std::thread::JoinHandle<u64>) {
    let bar_r = Arc::new(Region::new("uio-bar", bar::bytes(4)).expect("bar"));
    let mem = Arc::new(Region::new("uio-host", 16 << 20).expect("host memory"));
    let mut host = Host::new(bar_r.clone(), mem.clone(), 16);
    let mut dev_cfg = device_config("quick").expect("quick device");
    dev_cfg.timing.enabled = false;
    let utl = Utl::new(&dev_cfg, UtlConfig::default()).expect("utl");
    let mut dev = Controller::enable(bar_r, mem.clone(), 64, utl).map_err(|e| e.0).expect("controller");
    host.create_io_pair(1, 1, ENTRIES, Perm::default(), || {
        dev.poll();
        true
    })
    .expect("queues");
    let keys = host.alloc(KEYS * KEY_BYTES);
    let values = host.alloc(KEYS * VALUE_BYTES);
    let bufs = host.alloc(ENTRIES as u64 * VALUE_BYTES);
    for i in 0..KEYS {
        mem.write(keys + i * KEY_BYTES, &letter_key(i, KEY_BYTES as usize));
        mem.write(values + i * VALUE_BYTES, &letter_value(VALUE_BYTES as usize, i));
    }
    let t = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if dev.poll() == 0 {
                std::hint::spin_loop();
            }
        }
        dev.processed
    });
    (Rig { host, keys, values, bufs }, t)
}

impl Rig {
    fn cmd(&mut self, i: u64, put: bool, slot: u64) -> Command {
        let k = i % KEYS;
        let cid = self.host.cid();
        let key = (self.keys + k * KEY_BYTES, KEY_BYTES);
        if put {
            Command::put(cid, key, (self.values + k * VALUE_BYTES, VALUE_BYTES))
        } else {
            Command::get(cid, key, (self.bufs + slot * VALUE_BYTES, VALUE_BYTES))
        }
    }

    /// `n` commands (puts, or gets) kept `depth` deep; returns commands per second.
    fn stream(&mut self, n: u64, put: bool, depth: u32) -> f64 {
        let (mut sent, mut done, mut failed) = (0u64, 0u64, 0u64);
        let t = Instant::now();
        while done < n {
            while sent < n && sent - done < depth as u64 {
                let c = self.cmd(sent, put, sent % ENTRIES as u64);
                self.host.submit(1, &c).expect("queue has room");
                sent += 1;
            }
            while let Some(c) = self.host.reap(1) {
                failed += (c.status != 0) as u64;
                done += 1;
            }
        }
        assert_eq!(failed, 0, "commands failed");
        n as f64 / t.elapsed().as_secs_f64()
    }
}

pub fn run() {
    let stop = Arc::new(AtomicBool::new(false));
    let (mut r, dev) = rig(stop.clone());
    r.stream(KEYS, true, 256); // every key stored once
    let n = 1_000_000;
    let puts = r.stream(n, true, 512);
    let gets = r.stream(n, false, 512);
    let qd1 = 100_000;
    let rate1 = r.stream(qd1, false, 1);
    stop.store(true, Ordering::Relaxed);
    dev.join().expect("device thread");
    let mixed = (puts + gets) / 2.0;
    println!(
        "uio-kv queue interface, host and device threads over memfd, {VALUE_BYTES}-byte values, QD 512: {:.2} M puts/s, {:.2} M gets/s; round trip at QD 1 {:.2} us; goal 1 M/s -> {:.2}x",
        puts / 1e6,
        gets / 1e6,
        1e6 / rate1,
        mixed / 1e6
    );
}
