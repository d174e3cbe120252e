//! Fuzzing as a habit: the memcached fuzz target's entry point over its corpus (fuzz/corpus/memcached).

use ssdlab_memcached::fuzzing;

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn memcached_corpus() {
    let srv = fuzzing::server();
    corpus_run("memcached", |d| {
        fuzzing::session(&srv, d);
    });
}
