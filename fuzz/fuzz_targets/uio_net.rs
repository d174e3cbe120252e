//! The UIO NET link's message reader and record decoder, on a peer's arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ssdlab_uio::net::fuzz_one(data);
});
