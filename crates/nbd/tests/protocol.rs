//! The server on untrusted input: malformed handshakes and requests get errors or a dropped
//! connection, never a panic; a corpus of known-bad sessions stays in the suite.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use proptest::prelude::*;
use ssdlab_core::media::presets::preset;
use ssdlab_nbd::proto::*;
use ssdlab_nbd::server::ConnEnd;
use ssdlab_nbd::{default_exports, Backend, BackendOptions, Latency, NbdOptions, Server};
use ssdlab_server::ListenOptions;

fn server() -> Arc<Server> {
    let mut c = preset("tiny").unwrap();
    c.timing.enabled = false;
    let b = Backend::open(c, &BackendOptions::default()).unwrap();
    let exports = default_exports(b.config(), b.logical_bytes(), false);
    let opts = NbdOptions {
        listen: ListenOptions { max_connections: 4, ..ListenOptions::default() },
        max_request: 1 << 20,
        latency: Latency::None,
        ..NbdOptions::new(exports)
    };
    Server::new(b, opts).unwrap()
}

/// Where the server's bytes go.
#[derive(Clone)]
struct Out(Arc<Mutex<Vec<u8>>>);
impl tokio::io::AsyncWrite for Out {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(b);
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Run a whole session on `client` bytes (a connection whose client side is a fixed byte
/// string); returns (how it ended, what the server sent).
fn session(srv: &Server, client: Vec<u8>) -> (Result<(), String>, Vec<u8>) {
    let out = Arc::new(Mutex::new(vec![]));
    let stream = tokio::io::join(std::io::Cursor::new(client), Out(out.clone()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let end = match rt.block_on(srv.session(stream)) {
        Ok(()) | Err(ConnEnd::Closed) => Ok(()),
        Err(ConnEnd::Protocol(m)) => Err(m),
        Err(ConnEnd::Io(e)) => Err(e.to_string()),
    };
    let o = out.lock().unwrap().clone();
    (end, o)
}

fn opt(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn go(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    opt(OPT_GO, &d)
}

fn req(kind: u16, flags: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut v = REQUEST_MAGIC.to_be_bytes().to_vec();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&kind.to_be_bytes());
    v.extend_from_slice(&cookie.to_be_bytes());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

fn start() -> Vec<u8> {
    (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes().to_vec()
}

/// Simple replies in `out` after the handshake bytes: (error, cookie) pairs.
fn simple_errors(out: &[u8]) -> Vec<(u32, u64)> {
    let magic = SIMPLE_REPLY_MAGIC.to_be_bytes();
    let mut v = vec![];
    let mut i = 0;
    while i + 16 <= out.len() {
        if out[i..i + 4] == magic {
            v.push((u32::from_be_bytes(out[i + 4..i + 8].try_into().unwrap()), u64::from_be_bytes(out[i + 8..i + 16].try_into().unwrap())));
            i += 16;
        } else {
            i += 1;
        }
    }
    v
}

#[test]
fn write_read_and_errors_over_a_session() {
    let srv = server();
    let mut c = start();
    c.extend(go("ssdlab"));
    c.extend(req(CMD_WRITE, 0, 1, 4096, 8192));
    c.extend(vec![0x5a; 8192]);
    c.extend(req(CMD_READ, 0, 2, 4096, 8192));
    c.extend(req(CMD_READ, 0, 3, u64::MAX - 10, 100)); // out of range: EINVAL
    c.extend(req(CMD_WRITE, 0, 4, 1 << 40, 4096)); // beyond the end: ENOSPC
    c.extend(vec![1; 4096]);
    c.extend(req(CMD_WRITE, 0, 5, 0, 2 << 20)); // over --max-request: payload skipped, EINVAL
    c.extend(vec![2; 2 << 20]);
    c.extend(req(CMD_READ, 0x40, 6, 0, 512)); // unknown flag: EINVAL
    c.extend(req(99, 0, 7, 0, 0)); // unknown command: EINVAL
    c.extend(req(CMD_FLUSH, 0, 8, 0, 0));
    c.extend(req(CMD_READ, 0, 9, 4096, 0)); // zero-length: success, no data
    c.extend(req(CMD_WRITE, 0, 10, 4096, 0));
    c.extend(req(CMD_DISC, 0, 11, 0, 0));
    let (end, out) = session(&srv, c);
    assert_eq!(end, Ok(()));
    let replies = simple_errors(&out);
    let errs: Vec<(u64, u32)> = replies.iter().map(|&(e, c)| (c, e)).collect();
    assert_eq!(errs, vec![(1, 0), (2, 0), (3, EINVAL), (4, ENOSPC), (5, EINVAL), (6, EINVAL), (7, EINVAL), (8, 0), (9, 0), (10, 0)]);
    // The read returned what was written.
    let pos = out.windows(8).position(|w| w == 2u64.to_be_bytes()).unwrap();
    assert!(out[pos + 8..pos + 8 + 8192].iter().all(|&b| b == 0x5a));
}

#[test]
fn corpus_of_malformed_sessions_ends_cleanly() {
    let srv = server();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("nothing", vec![]),
        ("unknown client flags", 0xffff_ffffu32.to_be_bytes().to_vec()),
        ("bad option magic", [start(), vec![0; 16]].concat()),
        ("truncated option", [start(), opt(OPT_GO, &[0, 0, 0, 9])[..20].to_vec()].concat()),
        ("GO with garbage", [start(), opt(OPT_GO, &[0xff; 7]), opt(OPT_ABORT, &[])].concat()),
        (
            "huge option",
            [start(), IHAVEOPT.to_be_bytes().to_vec(), OPT_LIST.to_be_bytes().to_vec(), 0xffff_fff0u32.to_be_bytes().to_vec()].concat(),
        ),
        ("unknown export by name", [start(), opt(OPT_EXPORT_NAME, b"nope")].concat()),
        ("meta before structured", [start(), opt(OPT_SET_META_CONTEXT, &[0; 8]), opt(OPT_ABORT, &[])].concat()),
        ("bad request magic", [start(), go(""), vec![0xee; 28]].concat()),
        ("truncated write payload", [start(), go(""), req(CMD_WRITE, 0, 1, 0, 4096), vec![0; 100]].concat()),
    ];
    let mut many = start();
    for _ in 0..2000 {
        many.extend(opt(OPT_LIST, &[]));
    }
    cases.push(("option flood", many));
    for (name, bytes) in cases {
        // Must return (dropped or closed), never panic or hang.
        let _ = session(&srv, bytes);
        let _ = name;
    }
    // The server still serves a good session afterwards.
    let mut c = start();
    c.extend(go("ssdlab"));
    c.extend(req(CMD_READ, 0, 1, 0, 4096));
    let (end, out) = session(&srv, c);
    assert_eq!(end, Ok(()));
    assert_eq!(simple_errors(&out), vec![(0, 1)]);
}

#[test]
fn option_replies_follow_the_protocol() {
    let srv = server();
    let mut c = start();
    c.extend(opt(OPT_LIST, &[]));
    c.extend(opt(OPT_STARTTLS, &[]));
    c.extend(opt(12345, &[]));
    c.extend(opt(OPT_INFO, &[0, 0, 0, 4, b'n', b'o', b'p', b'e', 0, 0]));
    c.extend(opt(OPT_ABORT, &[]));
    let (end, out) = session(&srv, c);
    assert_eq!(end, Ok(()));
    // Reply types in order: SERVER x2 (ssdlab, ssdlab-metrics), ACK, POLICY, UNSUP, UNKNOWN, ACK.
    let magic = REPLY_MAGIC.to_be_bytes();
    let mut kinds = vec![];
    let mut i = 18;
    while i + 20 <= out.len() {
        assert_eq!(out[i..i + 8], magic);
        kinds.push(u32::from_be_bytes(out[i + 12..i + 16].try_into().unwrap()));
        i += 20 + u32::from_be_bytes(out[i + 16..i + 20].try_into().unwrap()) as usize;
    }
    assert_eq!(kinds, vec![REP_SERVER, REP_SERVER, REP_ACK, REP_ERR_POLICY, REP_ERR_UNSUP, REP_ERR_UNKNOWN, REP_ACK]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Random bytes after a valid start, in the handshake or in transmission: no panic.
    #[test]
    fn random_sessions_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..600), in_transmission in any::<bool>()) {
        let srv = server();
        let mut c = start();
        if in_transmission {
            c.extend(go(""));
        }
        c.extend(tail);
        let _ = session(&srv, c);
    }

    /// Well-formed requests with random fields: every one gets exactly one reply.
    #[test]
    fn random_requests_each_get_a_reply(reqs in proptest::collection::vec((0u16..9, any::<u16>(), any::<u64>(), 0u32..70000), 1..20)) {
        let srv = server();
        let mut c = start();
        c.extend(go(""));
        let mut expected = 0;
        for (i, (kind, flags, off, len)) in reqs.into_iter().enumerate() {
            if kind == CMD_DISC { continue; }
            let off = off % (300 << 20);
            c.extend(req(kind, flags, i as u64 + 1, off, len));
            if kind == CMD_WRITE { c.extend(vec![7u8; len as usize]); }
            expected += 1;
        }
        let (end, out) = session(&srv, c);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(simple_errors(&out).len(), expected);
    }
}

/// Final replies in a structured session: (cookie, was an error) per request, in order sent.
fn structured_finals(out: &[u8]) -> Vec<(u64, bool)> {
    let (sm, cm) = (SIMPLE_REPLY_MAGIC.to_be_bytes(), STRUCTURED_REPLY_MAGIC.to_be_bytes());
    // Skip the handshake: the greeting and the option replies.
    let mut i = 18;
    while i + 20 <= out.len() && out[i..i + 8] == REPLY_MAGIC.to_be_bytes() {
        i += 20 + u32::from_be_bytes(out[i + 16..i + 20].try_into().unwrap()) as usize;
    }
    let mut v = vec![];
    while i + 16 <= out.len() {
        if out[i..i + 4] == sm {
            let err = u32::from_be_bytes(out[i + 4..i + 8].try_into().unwrap());
            v.push((u64::from_be_bytes(out[i + 8..i + 16].try_into().unwrap()), err != 0));
            i += 16;
        } else {
            assert_eq!(out[i..i + 4], cm, "reply stream out of step at byte {i}");
            let flags = u16::from_be_bytes(out[i + 4..i + 6].try_into().unwrap());
            let kind = u16::from_be_bytes(out[i + 6..i + 8].try_into().unwrap());
            let cookie = u64::from_be_bytes(out[i + 8..i + 16].try_into().unwrap());
            let len = u32::from_be_bytes(out[i + 16..i + 20].try_into().unwrap()) as usize;
            if kind == REPLY_TYPE_OFFSET_DATA {
                assert!(len >= 9, "a data chunk carries at least one byte");
            }
            if flags & REPLY_FLAG_DONE != 0 {
                v.push((cookie, kind & 0x8000 != 0));
            }
            i += 20 + len;
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// With structured replies and base:allocation, every request gets exactly one final
    /// chunk, and the reply stream parses from start to end.
    #[test]
    fn structured_sessions_reply_once_per_request(reqs in proptest::collection::vec((0u16..9, any::<u16>(), 0u64..(300 << 20), 0u32..70000), 1..20)) {
        let srv = server();
        let mut c = start();
        c.extend(opt(OPT_STRUCTURED_REPLY, &[]));
        let mut meta = 0u32.to_be_bytes().to_vec();
        meta.extend_from_slice(&1u32.to_be_bytes());
        meta.extend_from_slice(&(BASE_ALLOCATION.len() as u32).to_be_bytes());
        meta.extend_from_slice(BASE_ALLOCATION.as_bytes());
        c.extend(opt(OPT_SET_META_CONTEXT, &meta));
        c.extend(go("ssdlab"));
        let mut cookies = vec![];
        for (i, (kind, flags, off, len)) in reqs.into_iter().enumerate() {
            if kind == CMD_DISC { continue; }
            c.extend(req(kind, flags, i as u64 + 1, off, len));
            if kind == CMD_WRITE { c.extend(vec![7u8; len as usize]); }
            cookies.push(i as u64 + 1);
        }
        let (end, out) = session(&srv, c);
        prop_assert_eq!(end, Ok(()));
        let finals: Vec<u64> = structured_finals(&out).into_iter().map(|(c, _)| c).collect();
        prop_assert_eq!(finals, cookies);
    }
}
