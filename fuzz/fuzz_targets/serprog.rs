//! flashrom's serprog protocol on arbitrary client bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ssdlab_serve::serprog;
use ssdlab_spi::{parts, Flash};

fuzz_target!(|data: &[u8]| {
    let mut flash = Flash::new(parts::w25q16jv(), None, Default::default()).expect("chip");
    serprog::fuzz_one(&mut flash, data);
});
