//! The memcached text protocol: a whole client session of arbitrary bytes on a small cache.
#![no_main]
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ssdlab_memcached::{fuzzing, Server};

static SERVER: OnceLock<Arc<Server>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    fuzzing::session(SERVER.get_or_init(fuzzing::server), data);
});
