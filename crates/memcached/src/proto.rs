//! The memcached text protocol's command lines (memcached's doc/protocol.txt): parsing and
//! limits, with no I/O. A line is what precedes `\n` (a trailing `\r` removed).
//!
//! Refusals say what to send and how to keep the byte stream in step: a storage command
//! whose `<bytes>` could be read has its data block skipped, so the client can go on; one
//! whose `<bytes>` cannot be read leaves the stream unparseable, and the connection closes.

/// memcached's key limit.
pub const KEY_BYTES_MAX: usize = 250;
/// Relative expiry times up to this many seconds; larger values are Unix times.
pub const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;
/// Declared data blocks above this close the connection rather than being skipped.
pub const DECLARED_BYTES_MAX: u64 = u32::MAX as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Cas,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get`/`gets <key>*` (`cas`: gets, replies carry the CAS unique).
    Get {
        keys: Vec<&'a [u8]>,
        cas: bool,
    },
    /// `set|add|replace <key> <flags> <exptime> <bytes> [noreply]`,
    /// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`; a data block follows.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        bytes: u32,
        cas_unique: u64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]`
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `stats [group]`
    Stats {
        group: Option<&'a [u8]>,
    },
    Version,
    Quit,
}

/// A line the server will not execute: the reply, and what to do with the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// "ERROR", "CLIENT_ERROR <reason>" or "SERVER_ERROR <reason>" (no CRLF).
    pub reply: String,
    /// Bytes to read and drop after the line (a storage command's data block and its CRLF).
    pub skip_bytes: u64,
    /// The stream cannot be followed: send the reply, then close the connection.
    pub close: bool,
    /// The client asked for no reply (`noreply` could be parsed).
    pub noreply: bool,
}

impl Refusal {
    fn unknown() -> Refusal {
        Refusal { reply: "ERROR".into(), skip_bytes: 0, close: false, noreply: false }
    }
    fn client(msg: impl Into<String>) -> Refusal {
        Refusal { reply: format!("CLIENT_ERROR {}", msg.into()), skip_bytes: 0, close: false, noreply: false }
    }
}

/// Why `key` is not a valid key, if it is not.
pub fn key_error(key: &[u8]) -> Option<String> {
    if key.len() > KEY_BYTES_MAX {
        return Some(format!("key of {} bytes is longer than {KEY_BYTES_MAX}", key.len()));
    }
    if key.is_empty() {
        return Some("empty key".into());
    }
    if key.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Some("key contains a control character".into());
    }
    None
}

/// A decimal number without sign (memcached's `safe_strtoul` family, strict).
fn unsigned(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn signed(t: &[u8]) -> Option<i64> {
    match t.first() {
        Some(b'-') => unsigned(&t[1..]).and_then(|v| i64::try_from(v).ok()).map(|v| -v),
        _ => unsigned(t).and_then(|v| i64::try_from(v).ok()),
    }
}

/// Parse one command line. `max_value_bytes` is the largest data block a storage command may
/// carry (larger ones are refused with `SERVER_ERROR object too large for cache` and skipped).
pub fn parse(line: &[u8], max_value_bytes: u64) -> Result<Command<'_>, Refusal> {
    let toks: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect();
    let Some(&name) = toks.first() else { return Err(Refusal::unknown()) };
    let args = &toks[1..];
    let noreply = args.last() == Some(&&b"noreply"[..]);
    match name {
        b"get" | b"gets" => {
            if args.is_empty() {
                return Err(Refusal::client("get needs at least one key"));
            }
            if let Some(e) = args.iter().find_map(|k| key_error(k)) {
                return Err(Refusal::client(e));
            }
            Ok(Command::Get { keys: args.to_vec(), cas: name == b"gets" })
        }
        b"set" | b"add" | b"replace" | b"cas" => {
            let kind = match name {
                b"set" => StoreKind::Set,
                b"add" => StoreKind::Add,
                b"replace" => StoreKind::Replace,
                _ => StoreKind::Cas,
            };
            // <bytes> first: without it the data block cannot be found, and the stream is lost.
            let Some(bytes) = args.get(3).and_then(|t| unsigned(t)).filter(|&b| b <= DECLARED_BYTES_MAX) else {
                return Err(Refusal { reply: "CLIENT_ERROR bad data chunk length".into(), skip_bytes: 0, close: true, noreply: false });
            };
            let skip = |reply: String| Refusal { reply, skip_bytes: bytes + 2, close: false, noreply };
            let want = if kind == StoreKind::Cas { 5 } else { 4 } + noreply as usize;
            if args.len() != want {
                let usage = if kind == StoreKind::Cas {
                    "cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]"
                } else {
                    "<command> <key> <flags> <exptime> <bytes> [noreply]"
                };
                return Err(skip(format!("CLIENT_ERROR bad command line format; usage: {usage}")));
            }
            let key = args[0];
            if let Some(e) = key_error(key) {
                return Err(skip(format!("CLIENT_ERROR {e}")));
            }
            let Some(flags) = unsigned(args[1]).and_then(|f| u32::try_from(f).ok()) else {
                return Err(skip("CLIENT_ERROR flags must be an unsigned 32-bit number".into()));
            };
            let Some(exptime) = signed(args[2]) else {
                return Err(skip("CLIENT_ERROR exptime must be a number".into()));
            };
            let cas_unique = if kind == StoreKind::Cas {
                match unsigned(args[4]) {
                    Some(c) => c,
                    None => return Err(skip("CLIENT_ERROR cas unique must be an unsigned 64-bit number".into())),
                }
            } else {
                0
            };
            if bytes > max_value_bytes {
                return Err(skip("SERVER_ERROR object too large for cache".into()));
            }
            Ok(Command::Store { kind, key, flags, exptime, bytes: bytes as u32, cas_unique, noreply })
        }
        b"delete" => {
            // Legacy `delete <key> 0` is accepted, as memcached does.
            let n = args.len() - noreply as usize;
            let legacy_zero = n == 2 && args[1] == b"0";
            if n != 1 && !legacy_zero {
                let mut r = Refusal::client("bad command line format; usage: delete <key> [noreply]");
                r.noreply = noreply;
                return Err(r);
            }
            if let Some(e) = key_error(args[0]) {
                return Err(Refusal { noreply, ..Refusal::client(e) });
            }
            Ok(Command::Delete { key: args[0], noreply })
        }
        b"touch" => {
            if args.len() - noreply as usize != 2 {
                return Err(Refusal { noreply, ..Refusal::client("bad command line format; usage: touch <key> <exptime> [noreply]") });
            }
            if let Some(e) = key_error(args[0]) {
                return Err(Refusal { noreply, ..Refusal::client(e) });
            }
            let Some(exptime) = signed(args[1]) else {
                return Err(Refusal { noreply, ..Refusal::client("exptime must be a number") });
            };
            Ok(Command::Touch { key: args[0], exptime, noreply })
        }
        b"stats" => match args {
            [] => Ok(Command::Stats { group: None }),
            [g] => Ok(Command::Stats { group: Some(g) }),
            _ => Err(Refusal::client("bad command line format; usage: stats [settings]")),
        },
        b"version" if args.is_empty() => Ok(Command::Version),
        b"quit" if args.is_empty() => Ok(Command::Quit),
        b"version" | b"quit" => Err(Refusal::client(format!("{} takes no arguments", String::from_utf8_lossy(name)))),
        _ => Err(Refusal::unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u64 = 1 << 20;

    #[test]
    fn commands_parse() {
        assert_eq!(parse(b"get a bb  ccc", MAX), Ok(Command::Get { keys: vec![b"a", b"bb", b"ccc"], cas: false }));
        assert_eq!(parse(b"gets k", MAX), Ok(Command::Get { keys: vec![b"k"], cas: true }));
        assert_eq!(
            parse(b"set k 42 -1 5 noreply", MAX),
            Ok(Command::Store { kind: StoreKind::Set, key: b"k", flags: 42, exptime: -1, bytes: 5, cas_unique: 0, noreply: true })
        );
        assert_eq!(
            parse(b"cas k 0 0 5 99", MAX),
            Ok(Command::Store { kind: StoreKind::Cas, key: b"k", flags: 0, exptime: 0, bytes: 5, cas_unique: 99, noreply: false })
        );
        assert_eq!(parse(b"delete k", MAX), Ok(Command::Delete { key: b"k", noreply: false }));
        assert_eq!(parse(b"delete k 0 noreply", MAX), Ok(Command::Delete { key: b"k", noreply: true }));
        assert_eq!(parse(b"touch k 10", MAX), Ok(Command::Touch { key: b"k", exptime: 10, noreply: false }));
        assert_eq!(parse(b"stats", MAX), Ok(Command::Stats { group: None }));
        assert_eq!(parse(b"version", MAX), Ok(Command::Version));
        assert_eq!(parse(b"quit", MAX), Ok(Command::Quit));
    }

    #[test]
    fn bad_lines_get_clear_refusals_and_keep_the_stream_in_step() {
        assert_eq!(parse(b"frobnicate x", MAX).unwrap_err().reply, "ERROR");
        assert_eq!(parse(b"", MAX).unwrap_err().reply, "ERROR");
        assert_eq!(parse(b"GET k", MAX).unwrap_err().reply, "ERROR"); // commands are case-sensitive
        let long = [b'k'; 251];
        let mut l = b"set ".to_vec();
        l.extend_from_slice(&long);
        l.extend_from_slice(b" 0 0 3");
        let r = parse(&l, MAX).unwrap_err();
        assert_eq!((r.reply.as_str(), r.skip_bytes, r.close), ("CLIENT_ERROR key of 251 bytes is longer than 250", 5, false));
        let r = parse(b"set k 0 0 2000000", MAX).unwrap_err();
        assert_eq!((r.reply.as_str(), r.skip_bytes, r.close), ("SERVER_ERROR object too large for cache", 2_000_002, false));
        let r = parse(b"set k 0 0 abc", MAX).unwrap_err();
        assert_eq!((r.reply.as_str(), r.close), ("CLIENT_ERROR bad data chunk length", true));
        assert!(parse(b"set k 0 0 -5", MAX).unwrap_err().close);
        assert!(parse(b"set k 0 0 99999999999", MAX).unwrap_err().close);
        let r = parse(b"set k 4294967296 0 3", MAX).unwrap_err();
        assert!(r.reply.starts_with("CLIENT_ERROR flags") && r.skip_bytes == 5);
        assert!(parse(b"set k 0 zz 3 noreply", MAX).unwrap_err().noreply);
        assert!(parse(b"get a\x01b", MAX).unwrap_err().reply.contains("control character"));
        assert!(parse(b"get", MAX).unwrap_err().reply.starts_with("CLIENT_ERROR"));
        assert!(parse(b"delete k 10", MAX).unwrap_err().reply.contains("usage: delete"));
        assert!(parse(b"touch k", MAX).unwrap_err().reply.contains("usage: touch"));
        assert_eq!(parse(b"cas k 0 0 3", MAX).unwrap_err().skip_bytes, 5);
    }

    proptest! {
        /// Any line: a command or a refusal, never a panic; refusals are protocol error lines;
        /// a refusal that skips a data block never also closes.
        #[test]
        fn any_line_parses_or_is_refused(line in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Err(r) = parse(&line, MAX) {
                prop_assert!(r.reply == "ERROR" || r.reply.starts_with("CLIENT_ERROR ") || r.reply.starts_with("SERVER_ERROR "));
                prop_assert!(!(r.close && r.skip_bytes > 0));
                prop_assert!(!r.reply.contains('\n') && !r.reply.contains('\r'));
            }
        }

        #[test]
        fn storage_lines_round_trip(key in "[!-~]{1,250}", flags: u32, exptime in -5i64..5_000_000_000, bytes in 0u32..2_000_000, noreply: bool) {
            let line = format!("set {key} {flags} {exptime} {bytes}{}", if noreply { " noreply" } else { "" });
            match parse(line.as_bytes(), MAX) {
                Ok(Command::Store { key: k, flags: f, exptime: e, bytes: b, noreply: n, .. }) => {
                    prop_assert!(k == key.as_bytes() && f == flags && e == exptime && b == bytes && n == noreply && (bytes as u64) <= MAX);
                }
                Err(r) => prop_assert!(bytes as u64 > MAX && r.skip_bytes == bytes as u64 + 2 && r.noreply == noreply),
                Ok(other) => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
