//! Fuzzing entry points, shared by the cargo-fuzz target (fuzz/) and the suite's corpus run
//! (tests/fuzz_corpus.rs): untrusted bytes in, no panic out.

use std::sync::Arc;

use ssdlab_core::media::presets::preset;
use ssdlab_nbd::BackendOptions;
use ssdlab_server::Pace;

use crate::pdu::{CommonHeader, ICRESP};
use crate::{NvmetOptions, Target};

/// A small in-memory target (the tiny preset without timing).
pub fn target() -> Arc<Target> {
    let mut c = preset("tiny").expect("tiny preset");
    c.timing.enabled = false;
    crate::open(c, &BackendOptions::default(), NvmetOptions::new()).expect("in-memory target")
}

/// One connection made of `data` (from its first byte, the ICReq): returns what the target
/// sent. Whatever the bytes, the target answers with whole PDUs only.
pub fn session(t: &Target, data: &[u8]) -> Vec<u8> {
    if let Some(h) = data.get(..8) {
        let _ = CommonHeader::parse(h.try_into().expect("8 bytes")).layout(None);
    }
    let v = ssdlab_server::fuzzing::run_session(data, |s| async move {
        let _ = t.session(s, &Pace::none()).await;
    });
    let mut at = 0;
    while at < v.len() {
        assert!(v.len() - at >= 8, "a cut PDU header");
        let h = CommonHeader::parse(v[at..at + 8].try_into().expect("8 bytes"));
        assert!(h.plen as usize >= 8 && at + h.plen as usize <= v.len(), "a PDU longer than what was sent");
        if at == 0 && data.len() >= 128 && data[0] == 0 && data[2] == 128 {
            assert!(h.pdu_type == ICRESP || h.pdu_type == crate::pdu::C2H_TERM);
        }
        at += h.plen as usize;
    }
    v
}
