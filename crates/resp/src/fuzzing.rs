//! Fuzzing entry points, shared by the cargo-fuzz target (fuzz/fuzz_targets/resp.rs) and the
//! suite's corpus run (tests/fuzz_corpus.rs): a whole client session of untrusted bytes against
//! the real server on the in-memory store; no panic, and the server still serves.

use std::sync::Arc;

use crate::{MemoryStore, RespOptions, Server};

/// A server on an empty [`MemoryStore`].
pub fn server() -> Arc<Server> {
    Server::new(Box::new(MemoryStore::default()), RespOptions { quiet: true, ..RespOptions::default() })
}

/// A whole client session made of `data`; returns what the server sent. A request the parser
/// takes never claims more bytes than there are; afterwards a new client is still served (after
/// a FLUSHALL, so the store does not grow over a long fuzzing run).
pub fn session(srv: &Server, data: &[u8]) -> Vec<u8> {
    if let Ok(Some((_, used))) = crate::proto::parse(data, crate::proto::BULK_MAX_BYTES) {
        assert!(used > 0 && used <= data.len(), "{used} of {} bytes", data.len());
    }
    let out = ssdlab_server::fuzzing::run_session(data, |s| async move {
        let _ = srv.session_on(s, &ssdlab_server::Pace::none()).await;
    });
    let check = ssdlab_server::fuzzing::run_session(
        b"FLUSHALL\r\n*3\r\n$3\r\nSET\r\n$10\r\nfuzz-check\r\n$2\r\nok\r\nGET fuzz-check\r\n",
        |s| async move {
            let _ = srv.session_on(s, &ssdlab_server::Pace::none()).await;
        },
    );
    assert_eq!(String::from_utf8_lossy(&check), "+OK\r\n+OK\r\n$2\r\nok\r\n", "after {:?}", String::from_utf8_lossy(data));
    out
}
