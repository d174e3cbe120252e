//! Fuzzing as a habit: the RESP fuzz target's entry point over its corpus (fuzz/corpus/resp).

use ssdlab_resp::fuzzing;

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn resp_corpus() {
    let srv = fuzzing::server();
    corpus_run("resp", |d| {
        fuzzing::session(&srv, d);
    });
}
