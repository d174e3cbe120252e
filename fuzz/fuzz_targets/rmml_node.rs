//! The remote-memory node protocol (`ssdlab rmml node`): a whole client session of arbitrary
//! bytes against a fresh node.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ssdlab_serve::rmml::node::fuzzing;

fuzz_target!(|data: &[u8]| {
    fuzzing::session(data);
});
