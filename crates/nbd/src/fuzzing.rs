//! Fuzzing entry points, shared by the cargo-fuzz targets (fuzz/) and the suite's corpus run
//! (tests/fuzz_corpus.rs): untrusted bytes in, no panic out.

use std::sync::Arc;

use ssdlab_core::media::presets::preset;

use crate::proto::*;
use crate::{default_exports, Backend, BackendOptions, NbdOptions, Server};

/// A small in-memory server (the tiny preset without timing, 1 MiB requests at most).
pub fn server() -> Arc<Server> {
    let mut c = preset("tiny").expect("tiny preset");
    c.timing.enabled = false;
    let b = Backend::open(c, &BackendOptions::default()).expect("in-memory backend");
    let exports = default_exports(b.config(), b.logical_bytes(), false);
    Server::new(b, NbdOptions { max_request: 1 << 20, ..NbdOptions::new(exports) }).expect("server")
}

/// A whole client session made of `data` (from the first byte after the greeting): returns
/// what the server sent. The parsers are run on the same bytes too.
pub fn session(srv: &Server, data: &[u8]) -> Vec<u8> {
    let _ = parse_go(data);
    let _ = parse_meta(data);
    if let Some(h) = data.get(..16) {
        let _ = parse_option_header(h.try_into().expect("16 bytes"));
    }
    if let Some(h) = data.get(..REQUEST_BYTES) {
        let _ = parse_request(h.try_into().expect("28 bytes"));
    }
    let v = ssdlab_server::fuzzing::run_session(data, |s| async move {
        let _ = srv.session(s).await;
    });
    // Whatever the client sent, the server greeted it first.
    assert!(v.len() >= 18 && v[..8] == NBDMAGIC.to_be_bytes(), "no greeting");
    v
}

/// `data` after a valid start (fixed newstyle, structured replies, GO): the transmission phase.
pub fn transmission(srv: &Server, data: &[u8]) -> Vec<u8> {
    let mut c = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes().to_vec();
    let opt = |o: u32, d: &[u8]| {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(d.len() as u32).to_be_bytes());
        v.extend_from_slice(d);
        v
    };
    if data.first().is_some_and(|b| b & 1 == 1) {
        c.extend(opt(OPT_STRUCTURED_REPLY, &[]));
    }
    c.extend(opt(OPT_GO, &[0, 0, 0, 0, 0, 0]));
    c.extend_from_slice(data.get(1..).unwrap_or_default());
    session(srv, &c)
}
