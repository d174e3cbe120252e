//! Fuzzing as a habit: the serprog fuzz target's entry point over its corpus (fuzz/corpus/serprog).

use ssdlab_spi::{parts, serprog, Flash};

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn serprog_corpus() {
    let mut flash = Flash::new(parts::w25q16jv(), None, Default::default()).unwrap();
    corpus_run("serprog", |d| serprog::fuzz_one(&mut flash, d));
}
