//! Finding many byte strings at once in the raw NAND (the audit of deleted values).
//!
//! An audit looks for hundreds of thousands of 16-byte fingerprints in every written page. A
//! general multi-pattern automaton steps through each text byte with a cache miss on a table
//! of millions of states; here a string of at least [`WORD_SPAN`] bytes is found from the
//! aligned 8-byte words of the text instead. Any occurrence at offset `s` contains the aligned
//! word at some `a` in `s..=s + 8`, which is one of the string's nine 8-byte substrings at
//! offsets 0..=8: those are indexed, the text is read one aligned word at a time through a bit
//! filter that fits in the last-level cache, and a hit is confirmed byte for byte. Shorter
//! strings (values under 16 bytes) go to an Aho-Corasick automaton.

use aho_corasick::AhoCorasick;

/// Strings at least this long are found from aligned words.
const WORD_SPAN: usize = 16;
/// Filter bits per indexed word (about 6% of the text's words pass the filter by chance).
const FILTER_BITS_PER_WORD: usize = 16;

pub struct Finder<'a> {
    patterns: Vec<&'a [u8]>,
    /// (word, pattern, offset of the word in the pattern), sorted.
    words: Vec<(u64, u32, u8)>,
    filter: Vec<u64>,
    filter_shift: u32,
    /// The strings shorter than WORD_SPAN, with their indices in `patterns`.
    short: Option<(AhoCorasick, Vec<usize>)>,
}

fn word_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

impl<'a> Finder<'a> {
    pub fn new(patterns: Vec<&'a [u8]>) -> Finder<'a> {
        let mut words = vec![];
        let mut short = vec![];
        for (i, p) in patterns.iter().enumerate() {
            if p.len() >= WORD_SPAN {
                words.extend((0..=WORD_SPAN - 8).map(|off| (word_at(p, off), i as u32, off as u8)));
            } else {
                short.push(i);
            }
        }
        words.sort_unstable();
        words.dedup();
        let bits = (words.len() * FILTER_BITS_PER_WORD).next_power_of_two().max(64);
        let mut f = Finder { filter: vec![0; bits / 64], filter_shift: 64 - bits.trailing_zeros(), words, short: None, patterns };
        for &(w, _, _) in &f.words {
            let b = f.slot(w);
            f.filter[b / 64] |= 1 << (b % 64);
        }
        if !short.is_empty() {
            let ac = AhoCorasick::new(short.iter().map(|&i| f.patterns[i])).expect("short strings build an automaton");
            f.short = Some((ac, short));
        }
        f
    }

    fn slot(&self, w: u64) -> usize {
        (w.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.filter_shift) as usize
    }

    /// Calls `hit` with the index of every pattern that occurs in `text` (a pattern may be
    /// reported more than once; at least once if it occurs).
    pub fn find(&self, text: &[u8], mut hit: impl FnMut(usize)) {
        let mut a = 0;
        while a + 8 <= text.len() {
            let w = word_at(text, a);
            let b = self.slot(w);
            if self.filter[b / 64] & (1 << (b % 64)) != 0 {
                let from = self.words.partition_point(|e| e.0 < w);
                for &(_, p, off) in self.words[from..].iter().take_while(|e| e.0 == w) {
                    let pat = self.patterns[p as usize];
                    if let Some(s) = a.checked_sub(off as usize) {
                        if text.get(s..s + pat.len()) == Some(pat) {
                            hit(p as usize);
                        }
                    }
                }
            }
            a += 8;
        }
        if let Some((ac, ids)) = &self.short {
            for m in ac.find_overlapping_iter(text) {
                hit(ids[m.pattern().as_usize()]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn naive(patterns: &[&[u8]], text: &[u8]) -> BTreeSet<usize> {
        (0..patterns.len()).filter(|&i| text.windows(patterns[i].len().max(1)).any(|w| w == patterns[i])).collect()
    }

    fn found(patterns: &[&[u8]], text: &[u8]) -> BTreeSet<usize> {
        let mut s = BTreeSet::new();
        Finder::new(patterns.to_vec()).find(text, |i| {
            s.insert(i);
        });
        s
    }

    #[test]
    fn finds_strings_at_every_offset_up_to_the_last_byte() {
        let pat: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
        for len in 16..=40 {
            for s in 0..=len - 16 {
                let mut text = vec![0xEEu8; len];
                text[s..s + 16].copy_from_slice(&pat);
                assert_eq!(found(&[&pat], &text), BTreeSet::from([0]), "text {len} bytes, string at {s}");
            }
        }
        assert!(found(&[&pat], &pat[..15]).is_empty(), "a text shorter than the string");
    }

    proptest! {
        // Strings of 1..40 bytes over a small alphabet (so near misses and overlaps are common),
        // some planted in the text: the same set as a naive search.
        #[test]
        fn agrees_with_a_naive_search(
            pats in prop::collection::vec(prop::collection::vec(0u8..3, 1..40), 1..12),
            filler in prop::collection::vec(0u8..3, 0..300),
            plant in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..6),
        ) {
            let mut text = filler;
            for (p, at) in plant {
                let p = &pats[p.index(pats.len())];
                let at = if text.is_empty() { 0 } else { at.index(text.len()) };
                text.splice(at..at, p.iter().copied());
            }
            let refs: Vec<&[u8]> = pats.iter().map(|p| p.as_slice()).collect();
            prop_assert_eq!(found(&refs, &text), naive(&refs, &text));
        }
    }
}
