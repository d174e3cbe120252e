//! The serprog parser: answers per command, a regression corpus of malformed streams, and
//! property tests (arbitrary bytes never panic; well-formed command sequences always get
//! answers of the documented length).

use proptest::prelude::*;
use ssdlab_spi::parts;
use ssdlab_spi::serprog::{self, respond, ACK, NAK};
use ssdlab_spi::{Flash, Options};

fn flash() -> Flash {
    Flash::new(parts::w25q16jv(), None, Options::default()).unwrap()
}

fn spiop(write: &[u8], rlen: u32) -> Vec<u8> {
    let s = write.len() as u32;
    let mut v = vec![0x13, s as u8, (s >> 8) as u8, (s >> 16) as u8, rlen as u8, (rlen >> 8) as u8, (rlen >> 16) as u8];
    v.extend_from_slice(write);
    v
}

#[test]
fn handshake_flashrom_does() {
    let mut f = flash();
    let mut input = vec![0u8; 8];
    input.extend_from_slice(&[0x10, 0x10, 0x01, 0x02]);
    let out = respond(&mut f, &input);
    assert_eq!(&out[0..8], &[ACK; 8]);
    assert_eq!(&out[8..12], &[NAK, ACK, NAK, ACK]);
    assert_eq!(&out[12..15], &[ACK, 1, 0]);
    assert_eq!(out[15], ACK);
    let map = &out[16..48];
    let has = |c: u8| map[c as usize / 8] & (1 << (c % 8)) != 0;
    for c in [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x08, 0x0B, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15] {
        assert!(has(c), "{c:#x} in the command map");
    }
    for c in [0x06, 0x09, 0x0A, 0x0C, 0x0D, 0x16, 0xFF] {
        assert!(!has(c), "{c:#x} not in the command map");
    }
    assert_eq!(out.len(), 48);
}

#[test]
fn queries_and_settings() {
    let mut f = flash();
    let out = respond(&mut f, &[0x03, 0x04, 0x05, 0x07, 0x08, 0x11, 0x12, 0x08, 0x12, 0x01, 0x15, 0x01]);
    let mut want = vec![ACK];
    want.extend_from_slice(serprog::PROGRAMMER_NAME);
    want.extend_from_slice(&[ACK, 0xFF, 0xFF]); // serial buffer
    want.extend_from_slice(&[ACK, 0x08]); // SPI only
    want.extend_from_slice(&[ACK, 0x00, 0x10]); // opbuf 4096
    want.extend_from_slice(&[ACK, 0x00, 0x00, 0x01]); // write-n 64 KiB
    want.extend_from_slice(&[ACK, 0x00, 0x00, 0x10]); // read-n 1 MiB
    want.extend_from_slice(&[ACK, NAK, ACK]); // bustype SPI ok, parallel refused, pins
    assert_eq!(out, want);
    // SPI frequency: capped at the part's maximum, 0 refused.
    let out = respond(&mut f, &[0x14, 0x40, 0x42, 0x0F, 0x00, 0x14, 0, 0, 0, 0, 0x14, 0xFF, 0xFF, 0xFF, 0xFF]);
    let mut want = vec![ACK, 0x40, 0x42, 0x0F, 0x00, NAK, ACK];
    want.extend_from_slice(&133_000_000u32.to_le_bytes());
    assert_eq!(out, want);
    assert_eq!(f.clock_hz(), 133_000_000);
}

#[test]
fn spi_operations_reach_the_chip_and_delays_advance_simulated_time() {
    let mut f = flash();
    let mut input = spiop(&[0x9F], 3);
    input.extend(spiop(&[0x06], 0));
    input.extend(spiop(&[0x02, 0, 0, 0, 0xAB, 0xCD], 0));
    input.extend(spiop(&[0x05], 1));
    input.extend([0x0E, 0x10, 0x27, 0, 0, 0x0F]); // 10 ms delay, then execute
    input.extend(spiop(&[0x05], 1));
    input.extend(spiop(&[0x03, 0, 0, 0], 2));
    let t0 = f.now_ns();
    let out = respond(&mut f, &input);
    assert_eq!(out, vec![ACK, 0xEF, 0x40, 0x15, ACK, ACK, ACK, 0x03, ACK, ACK, ACK, 0x00, ACK, 0xAB, 0xCD]);
    assert!(f.now_ns() - t0 >= 10_000_000);
    assert!(f.now_ns() - t0 < 11_000_000);
}

#[test]
fn malformed_streams_regression_corpus() {
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        ("unknown command", vec![0x42], vec![NAK]),
        ("0x16 (newer CS command) not supported", vec![0x16, 0x00], vec![NAK, ACK]),
        ("truncated O_SPIOP header", vec![0x13, 0x01, 0x00], vec![]),
        ("O_SPIOP with slen bytes missing", vec![0x13, 0x04, 0, 0, 0x00, 0, 0, 0x9F], vec![]),
        ("O_SPIOP over the read limit", vec![0x13, 0x01, 0, 0, 0xFF, 0xFF, 0xFF, 0x9F, 0x00], vec![NAK, ACK]),
        (
            "O_SPIOP over the write limit is consumed",
            {
                let mut v = vec![0x13, 0x01, 0x00, 0x01, 0, 0, 0];
                v.extend(vec![0x9F; 65537]);
                v.push(0x00);
                v
            },
            vec![NAK, ACK],
        ),
        ("empty O_SPIOP", vec![0x13, 0, 0, 0, 0, 0, 0], vec![ACK]),
        ("parallel write-n consumed", vec![0x0D, 0x02, 0, 0, 0, 0, 0, 0xAA, 0xBB, 0x00], vec![NAK, ACK]),
        ("parallel read byte consumed", vec![0x09, 0, 0, 0, 0x00], vec![NAK, ACK]),
        ("parallel read-n consumed", vec![0x0A, 0, 0, 0, 5, 0, 0, 0x00], vec![NAK, ACK]),
        ("write byte consumed", vec![0x0C, 0, 0, 0, 0x55, 0x00], vec![NAK, ACK]),
        ("chip size not supported", vec![0x06, 0x00], vec![NAK, ACK]),
        ("truncated delay", vec![0x0E, 0x01], vec![]),
        ("truncated frequency", vec![0x14, 0x01, 0x02], vec![]),
        (
            "opbuf overflow",
            {
                let mut v = vec![0x0B];
                for _ in 0..820 {
                    v.extend([0x0E, 1, 0, 0, 0]);
                }
                v
            },
            {
                let mut v = vec![ACK];
                v.extend(vec![ACK; 819]);
                v.push(NAK);
                v
            },
        ),
    ];
    for (name, input, want) in cases {
        let mut f = flash();
        assert_eq!(respond(&mut f, &input), want, "{name}");
    }
}

#[derive(Debug, Clone)]
enum Cmd {
    Simple(u8),
    Delay(u32),
    Freq(u32),
    Bus(u8),
    Spi(Vec<u8>, u16),
    Unknown(u8),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        prop::sample::select(vec![0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x08, 0x0B, 0x0F, 0x10, 0x11]).prop_map(Cmd::Simple),
        any::<u32>().prop_map(Cmd::Delay),
        any::<u32>().prop_map(Cmd::Freq),
        any::<u8>().prop_map(Cmd::Bus),
        (prop::collection::vec(any::<u8>(), 0..300), 0u16..600).prop_map(|(w, r)| Cmd::Spi(w, r)),
        (0x16u8..=0xFF).prop_map(Cmd::Unknown),
    ]
}

fn encode(c: &Cmd) -> (Vec<u8>, Option<usize>) {
    // (bytes, answer length when ACKed; None = always NAK or variable)
    match c {
        Cmd::Simple(op) => {
            let n = match op {
                0x01 | 0x04 | 0x07 => 3,
                0x02 => 33,
                0x03 => 17,
                0x05 => 2,
                0x08 | 0x11 => 4,
                0x10 => 2,
                _ => 1,
            };
            (vec![*op], Some(n))
        }
        Cmd::Delay(us) => {
            let mut v = vec![0x0E];
            v.extend(us.to_le_bytes());
            (v, Some(1))
        }
        Cmd::Freq(hz) => {
            let mut v = vec![0x14];
            v.extend(hz.to_le_bytes());
            (v, if *hz == 0 { None } else { Some(5) })
        }
        Cmd::Bus(b) => (vec![0x12, *b], Some(1)),
        Cmd::Spi(w, r) => (spiop(w, *r as u32), Some(1 + *r as usize)),
        Cmd::Unknown(op) => (vec![*op], None),
    }
}

// 256 cases per property by default; PROPTEST_CASES=N fuzzes longer.
proptest! {
    /// Arbitrary bytes: no panic, and every answer starts with ACK or NAK.
    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..2000)) {
        let mut f = flash();
        let out = respond(&mut f, &input);
        if let Some(&b) = out.first() {
            prop_assert!(b == ACK || b == NAK);
        }
    }

    /// Well-formed command sequences: each answer has the documented shape, in order, and the
    /// stream never desynchronises.
    #[test]
    fn well_formed_sequences_get_one_answer_each(cmds in prop::collection::vec(cmd(), 1..40)) {
        let mut f = flash();
        let mut input = Vec::new();
        for c in &cmds {
            input.extend(encode(c).0);
        }
        let out = respond(&mut f, &input);
        let mut at = 0;
        for c in &cmds {
            prop_assert!(at < out.len(), "answer missing for {:?}", c);
            let len = match (c, encode(c).1) {
                (Cmd::Simple(0x10), _) => { prop_assert_eq!(&out[at..at + 2], &[NAK, ACK]); 2 }
                (Cmd::Bus(b), _) if b & 0x08 == 0 => { prop_assert_eq!(out[at], NAK); 1 }
                (_, None) => { prop_assert_eq!(out[at], NAK); 1 }
                (_, Some(n)) => { prop_assert_eq!(out[at], ACK, "{:?}", c); n }
            };
            at += len;
        }
        prop_assert_eq!(at, out.len());
    }
}
