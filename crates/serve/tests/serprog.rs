//! The serprog parser: answers per command, a regression corpus of malformed streams, and
//! property tests (arbitrary bytes never panic; well-formed command sequences always get
//! answers of the documented length).

use proptest::prelude::*;
use ssdlab_serve::serprog::{self, respond, ACK, NAK};
use ssdlab_spi::parts;
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

proptest! {
    /// frame_len tells exactly how many bytes serve_one consumes for the command at the start.
    #[test]
    fn frame_len_matches_what_serve_one_consumes(input in prop::collection::vec(any::<u8>(), 1..400), cmds in prop::collection::vec(cmd(), 1..10)) {
        for bytes in [input, cmds.iter().flat_map(|c| encode(c).0).collect::<Vec<u8>>()] {
            let mut at = 0;
            let mut f = flash();
            let mut s = serprog::Session::default();
            while let Some(n) = serprog::frame_len(&bytes[at..]) {
                if bytes.len() - at < n {
                    // An incomplete command: serve_one runs out of bytes inside it.
                    let mut r = &bytes[at..];
                    prop_assert!(serprog::serve_one(&mut f, &mut s, &mut r, &mut Vec::new()).is_err());
                    break;
                }
                let mut r = &bytes[at..];
                prop_assert!(serprog::serve_one(&mut f, &mut s, &mut r, &mut Vec::new()).unwrap());
                prop_assert_eq!(bytes.len() - at - r.len(), n);
                at += n;
            }
        }
    }
}

#[test]
fn frame_len_needs_the_length_field_of_variable_commands() {
    assert_eq!(serprog::frame_len(&[]), None);
    assert_eq!(serprog::frame_len(&[0x13, 0x05]), None);
    assert_eq!(serprog::frame_len(&[0x13, 0x05, 0, 0]), Some(12));
    assert_eq!(serprog::frame_len(&[0x0D, 0x01, 0x01, 0x00]), Some(7 + 257));
    assert_eq!(serprog::frame_len(&[0x10]), Some(1));
}

mod over_tcp {
    use super::*;
    use ssdlab_serve::serprog::{SerprogOptions, Server};
    use ssdlab_server::ListenOptions;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    struct Running {
        port: u16,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<ssdlab_serve::serprog::ServeSummary>>,
    }

    fn start(opts: SerprogOptions) -> Running {
        let server = Server::bind_with(opts).unwrap();
        let port = server.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = Some(std::thread::spawn(move || {
            let mut f = flash();
            server.run(&mut f, &|| stop2.load(Ordering::Relaxed)).unwrap()
        }));
        Running { port, stop, thread }
    }

    impl Running {
        fn finish(mut self) -> ssdlab_serve::serprog::ServeSummary {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    fn ask(s: &mut TcpStream, cmd: &[u8], n: usize) -> Vec<u8> {
        s.write_all(cmd).unwrap();
        let mut v = vec![0u8; n];
        s.read_exact(&mut v).unwrap();
        v
    }

    fn connect(port: u16) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    #[test]
    fn a_second_client_is_refused_with_a_busy_name_while_the_first_is_served() {
        let srv = start(SerprogOptions::new("127.0.0.1:0"));
        let mut first = connect(srv.port);
        assert_eq!(ask(&mut first, &spiop(&[0x9F], 3), 4), vec![ACK, 0xEF, 0x40, 0x15]);
        let mut second = connect(srv.port);
        assert_eq!(ask(&mut second, &[0x10], 2), vec![NAK, ACK]);
        let name = ask(&mut second, &[0x03], 17);
        assert_eq!(&name[1..], serprog::BUSY_NAME);
        assert_eq!(ask(&mut second, &spiop(&[0x9F], 3), 1), vec![NAK], "no chip access while refused");
        // The first client keeps the chip.
        assert_eq!(ask(&mut first, &spiop(&[0x9F], 3), 4), vec![ACK, 0xEF, 0x40, 0x15]);
        drop((first, second));
        let sum = srv.finish();
        assert_eq!((sum.clients, sum.refused), (1, 1));
    }

    #[test]
    fn an_idle_client_gives_the_chip_to_a_new_one_and_slow_loris_is_cut() {
        let opts = SerprogOptions::new("127.0.0.1:0");
        let srv = start(SerprogOptions {
            listen: ListenOptions {
                evict_idle_after: Some(Duration::from_millis(300)),
                handshake_timeout: Duration::from_millis(700),
                ..opts.listen.clone()
            },
            ..opts
        });
        let mut idle = connect(srv.port);
        assert_eq!(ask(&mut idle, &[0x00], 1), vec![ACK]);
        std::thread::sleep(Duration::from_millis(400));
        let mut next = connect(srv.port);
        assert_eq!(ask(&mut next, &spiop(&[0x9F], 3), 4), vec![ACK, 0xEF, 0x40, 0x15]);
        let mut b = [0u8; 1];
        assert_eq!(idle.read(&mut b).unwrap_or(0), 0, "the idle client was cut");
        drop(next);
        // Let the server see that client go (otherwise the next one is refused, not cut).
        std::thread::sleep(Duration::from_millis(500));
        // A client that trickles a command byte by byte never gets past its first command.
        let mut loris = connect(srv.port);
        let t0 = Instant::now();
        for &byte in &spiop(&[0x9F], 3)[..6] {
            if loris.write_all(&[byte]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(loris.read(&mut b).unwrap_or(0), 0, "cut at the handshake deadline");
        assert!(t0.elapsed() < Duration::from_secs(3));
        let mut good = connect(srv.port);
        assert_eq!(ask(&mut good, &[0x00], 1), vec![ACK]);
        drop(good);
        let sum = srv.finish();
        assert!(sum.evicted >= 1 && sum.timeouts >= 1, "{sum:?}");
    }

    #[test]
    fn a_program_is_in_the_image_file_before_the_next_command_is_answered() {
        let dir = std::env::temp_dir().join(format!("ssdlab-serprog-wt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("f.bin");
        let server = Server::bind_with(SerprogOptions::new("127.0.0.1:0")).unwrap();
        let port = server.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, image2) = (stop.clone(), image.clone());
        let t = std::thread::spawn(move || {
            let mut f = Flash::new(parts::w25q16jv(), Some(&image2), Options::default()).unwrap();
            server.run(&mut f, &|| stop2.load(Ordering::Relaxed)).unwrap();
            f
        });
        let mut c = connect(port);
        assert_eq!(ask(&mut c, &spiop(&[0x06], 0), 1), vec![ACK]);
        assert_eq!(ask(&mut c, &spiop(&[0x02, 0x00, 0x10, 0x00, 0x12, 0x34], 0), 1), vec![ACK]);
        // The answer to the program is out; the next answer comes after the image write.
        assert_eq!(ask(&mut c, &[0x00], 1), vec![ACK]);
        assert_eq!(&std::fs::read(&image).unwrap()[0x1000..0x1002], &[0x12, 0x34]);
        drop(c);
        stop.store(true, Ordering::Relaxed);
        let f = t.join().unwrap();
        assert_eq!(&f.contents()[0x1000..0x1002], &[0x12, 0x34], "the chip came back to the caller");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_connection_flood_does_not_disturb_the_client_that_has_the_chip() {
        let srv = start(SerprogOptions::new("127.0.0.1:0"));
        let mut first = connect(srv.port);
        assert_eq!(ask(&mut first, &spiop(&[0x9F], 3), 4), vec![ACK, 0xEF, 0x40, 0x15]);
        let flood: Vec<TcpStream> = (0..500).map(|_| TcpStream::connect(("127.0.0.1", srv.port)).unwrap()).collect();
        for _ in 0..100 {
            assert_eq!(ask(&mut first, &spiop(&[0x05], 1), 2), vec![ACK, 0x00]);
        }
        drop(flood);
        drop(first);
        // A client that gets the chip after the flood was accepted after all of it (the listen
        // queue is first in, first out): from then on every flood connection is counted, as
        // served, refused, abandoned (hung up before it was accepted or while it waited), or
        // (still waiting at the stop) refused by the stop.
        let mut probes = 0;
        loop {
            probes += 1;
            let mut probe = connect(srv.port);
            if ask(&mut probe, &spiop(&[0x9F], 3), 1) == vec![ACK] {
                break;
            }
        }
        let sum = srv.finish();
        // Up to 64 of the flood waited for the chip (and got it once the first client left, or
        // hung up first); the rest were refused at once, or had hung up before the server got
        // to them.
        assert_eq!(sum.clients + sum.refused + sum.abandoned, 501 + probes, "{sum:?}");
        assert!(sum.refused + sum.abandoned >= 500 - ssdlab_server::WAITERS_AT_ONCE as u64, "{sum:?}");
    }

    #[test]
    fn non_loopback_needs_the_explicit_opt_in() {
        let e = Server::bind_with(SerprogOptions::new("0.0.0.0:0")).err().unwrap().to_string();
        assert!(e.contains("--allow-remote") && e.contains("no TLS"), "{e}");
        assert!(Server::bind_with(SerprogOptions {
            listen: ListenOptions { allow_remote: true, ..ListenOptions::on("0.0.0.0:0", 1) },
            ..SerprogOptions::new("0.0.0.0:0")
        })
        .is_ok());
    }
}
