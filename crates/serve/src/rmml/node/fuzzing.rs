//! Fuzzing entry point of the node protocol, shared by the cargo-fuzz target
//! (fuzz/fuzz_targets/rmml_node.rs) and the suite's corpus run (tests/fuzz_corpus.rs): a whole
//! client session of untrusted bytes against a node's real session code; no panic, no reply
//! longer than the request allows, and a new client is then served exactly.

use ssdlab_rmml::node::proto::*;

use super::Node;

/// What a node fuzzed with lends: small, so regions are cheap and capacity runs out.
pub const FUZZ_CAPACITY_BYTES: u64 = 1 << 20;

/// A whole client session made of `data` on a fresh node; returns what the node sent.
pub fn session(data: &[u8]) -> Vec<u8> {
    let node = Node::new(FUZZ_CAPACITY_BYTES, 5);
    let out = run(&node, data);
    // Every reply is a header and at most MAX_IO_BYTES after it, and the node never sends
    // more than one reply per request it read.
    let mut at = 0;
    let mut replies = 0u64;
    while at < out.len() {
        assert!(out.len() - at >= REPLY_BYTES, "a cut reply header after {:?}", &data[..data.len().min(64)]);
        let len = u32::from_le_bytes(out[at + 4..at + 8].try_into().expect("4")) as usize;
        assert!(len as u32 <= MAX_IO_BYTES);
        at += REPLY_BYTES + len;
        replies += 1;
    }
    assert!(replies <= node.requests.load(std::sync::atomic::Ordering::Relaxed));
    assert!(node.stat().used_bytes <= FUZZ_CAPACITY_BYTES);
    // The node still serves a new client: HELLO, ALLOC, WRITE, READ.
    let used = node.stat().used_bytes;
    let mut check = Request { op: OP_HELLO, len: 0, region: 0, offset: 0 }.encode().to_vec();
    let free = FUZZ_CAPACITY_BYTES - used;
    if free >= 4 {
        check.extend(Request { op: OP_ALLOC, len: 0, region: 0, offset: 4 }.encode());
        let got = run(&node, &check);
        assert_eq!(got.len(), 2 * REPLY_BYTES + STAT_BYTES + 8, "after {:?}", &data[..data.len().min(64)]);
        let region = u64::from_le_bytes(got[got.len() - 8..].try_into().expect("8"));
        let mut rw = Request { op: OP_WRITE, len: 4, region, offset: 0 }.encode().to_vec();
        rw.extend(b"fuzz");
        rw.extend(Request { op: OP_READ, len: 4, region, offset: 0 }.encode());
        let got = run(&node, &rw);
        assert_eq!(&got[2 * REPLY_BYTES..], b"fuzz");
    }
    out
}

fn run(node: &Node, data: &[u8]) -> Vec<u8> {
    ssdlab_server::fuzzing::run_session(data, |s| async move {
        let _ = node.session_on(s).await;
    })
}
