//! The corpus run shared by the fuzz-corpus tests of several crates (each includes this file
//! with `#[path]`): crates/core/tests/trace_fuzz_corpus.rs and tests/fuzz_corpus.rs of crates/nbd,
//! crates/spi, crates/memcached, crates/resp, crates/rmml and crates/uio.

/// The short corpus run of `make test`: every file of fuzz/corpus/TARGET, then
/// `SSDLAB_FUZZ_ITERS` (default 150) deterministic mutations of each (byte flips, cuts,
/// insertions, spliced copies). The long run is cargo-fuzz (docs/fuzzing.md).
pub fn corpus_run(target: &str, mut check: impl FnMut(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    let iters: usize = std::env::var("SSDLAB_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    };
    for f in &files {
        let seed = std::fs::read(f).unwrap();
        check(&seed);
        for _ in 0..iters {
            let mut v = seed.clone();
            for _ in 0..1 + rnd(4) {
                match rnd(4) {
                    0 if !v.is_empty() => {
                        let i = rnd(v.len());
                        v[i] ^= 1 << rnd(8);
                    }
                    1 => v.truncate(rnd(v.len() + 1)),
                    2 => {
                        let i = rnd(v.len() + 1);
                        let b = [0u8, 0xFF, 0x7F, 0x80, rnd(256) as u8][rnd(5)];
                        v.splice(i..i, std::iter::repeat_n(b, 1 + rnd(8)));
                    }
                    _ if !v.is_empty() => {
                        let (a, b) = (rnd(v.len()), rnd(v.len()));
                        let piece = v[a.min(b)..a.max(b)].to_vec();
                        let at = rnd(v.len() + 1);
                        v.splice(at..at, piece);
                    }
                    _ => {}
                }
            }
            check(&v);
        }
    }
}
