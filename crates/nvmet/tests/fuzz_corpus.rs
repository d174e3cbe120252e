//! Fuzzing as a habit: the NVMe/TCP target's fuzz target's entry point over its corpus
//! (fuzz/corpus/nvmet).

use ssdlab_nvmet::fuzzing;

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn nvmet_corpus() {
    let t = fuzzing::target();
    corpus_run("nvmet", |d| {
        fuzzing::session(&t, d);
    });
}

/// The seeds are real sessions, not noise: the admin session gets its Identify data back, the
/// R2T-fed connect too, the discovery session its log page.
#[test]
fn the_seeds_reach_the_commands() {
    let t = fuzzing::target();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nvmet");
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for (seed, want) in [
        ("admin_session", &b"ssdlab emulated SSD"[..]),
        ("admin_session_digests", b"ssdlab emulated SSD"),
        ("connect_after_r2t", b"ssdlab emulated SSD"),
        ("discovery", ssdlab_nvmet::DEFAULT_NQN.as_bytes()),
    ] {
        let out = fuzzing::session(&t, &std::fs::read(dir.join(seed)).unwrap());
        assert!(find(&out, want), "{seed}: {want:?} not in the replies");
        let mut at = 0;
        while at < out.len() {
            assert_ne!(out[at], ssdlab_nvmet::pdu::C2H_TERM, "{seed}: the target ended the connection");
            at += u32::from_le_bytes(out[at + 4..at + 8].try_into().unwrap()) as usize;
        }
    }
}
