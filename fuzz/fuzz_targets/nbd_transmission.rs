//! NBD requests after a valid handshake (simple or structured replies) on arbitrary bytes.
#![no_main]
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ssdlab_nbd::{fuzzing, Server};

static SERVER: OnceLock<Arc<Server>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    fuzzing::transmission(SERVER.get_or_init(fuzzing::server), data);
});
