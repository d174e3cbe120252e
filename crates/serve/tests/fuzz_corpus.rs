//! Fuzzing as a habit: the remote-memory node's fuzz target's entry point over its corpus
//! (fuzz/corpus/rmml_node).

use ssdlab_serve::rmml::node::fuzzing;

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn rmml_node_corpus() {
    corpus_run("rmml_node", |d| {
        fuzzing::session(d);
    });
}
