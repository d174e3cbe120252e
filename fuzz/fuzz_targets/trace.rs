//! The block-trace parsers (msr, blkparse, fio, disksim, mqsim) on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ssdlab_core::workload::trace::fuzz_one(data);
});
