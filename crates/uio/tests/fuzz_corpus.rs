//! Fuzzing as a habit: the NET link's fuzz target entry point over its corpus (fuzz/corpus/uio_net).

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn uio_net_corpus() {
    corpus_run("uio_net", ssdlab_uio::net::fuzz_one);
}
