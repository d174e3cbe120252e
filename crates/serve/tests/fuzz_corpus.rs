//! Fuzzing as a habit: the remote-memory node's and serprog's fuzz targets' entry points over
//! their corpora (fuzz/corpus/rmml_node, fuzz/corpus/serprog).

use ssdlab_serve::rmml::node::fuzzing;
use ssdlab_serve::serprog;
use ssdlab_spi::{parts, Flash};

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn rmml_node_corpus() {
    corpus_run("rmml_node", |d| {
        fuzzing::session(d);
    });
}

#[test]
fn serprog_corpus() {
    let mut flash = Flash::new(parts::w25q16jv(), None, Default::default()).unwrap();
    corpus_run("serprog", |d| serprog::fuzz_one(&mut flash, d));
}
