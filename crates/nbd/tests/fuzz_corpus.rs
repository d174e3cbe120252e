//! Fuzzing as a habit: the NBD fuzz targets' entry points over their corpus (fuzz/corpus/).

use ssdlab_nbd::fuzzing;

#[path = "../../../fuzz/corpus_run.rs"]
mod corpus;
use corpus::corpus_run;

#[test]
fn nbd_session_corpus() {
    let srv = fuzzing::server();
    corpus_run("nbd_session", |d| {
        fuzzing::session(&srv, d);
    });
}

#[test]
fn nbd_transmission_corpus() {
    let srv = fuzzing::server();
    corpus_run("nbd_transmission", |d| {
        fuzzing::transmission(&srv, d);
    });
}
