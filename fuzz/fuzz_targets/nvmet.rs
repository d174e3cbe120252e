//! The NVMe/TCP target (`ssdlab nvme serve`): a whole connection of arbitrary bytes, from its
//! ICReq on, against a small in-memory subsystem.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ssdlab_nvmet::fuzzing;

static TARGET: OnceLock<std::sync::Arc<ssdlab_nvmet::Target>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let t = TARGET.get_or_init(fuzzing::target);
    fuzzing::session(t, data);
});
