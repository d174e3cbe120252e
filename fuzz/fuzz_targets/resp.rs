//! RESP (the Redis protocol): a whole client session of arbitrary bytes on the in-memory store.
#![no_main]
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ssdlab_resp::{fuzzing, Server};

static SERVER: OnceLock<Arc<Server>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    fuzzing::session(SERVER.get_or_init(fuzzing::server), data);
});
