//! Fuzzing as a habit: the trace parsers' fuzz entry point over its corpus (fuzz/corpus/trace).

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn trace_corpus() {
    corpus_run("trace", ssdlab_core::workload::trace::fuzz_one);
}
