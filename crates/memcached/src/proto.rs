//! The memcached text protocol's command lines (memcached 1.6's doc/protocol.txt): parsing,
//! with no I/O. A line is what precedes `\n` (a trailing `\r` removed).
//!
//! The parse follows memcached 1.6 (proto_text.c) reply for reply, so that clients written
//! against memcached see the same answers: tokens are split on spaces; a wrong number of
//! tokens is `ERROR`; malformed numbers, over-long keys and bad usage are memcached's
//! `CLIENT_ERROR` lines; numbers are read as C's `strtol`/`strtoull` read them (leading white
//! space and a sign accepted, trailing garbage refused); `noreply` is honoured by exactly the
//! commands memcached honours it for, and silences their errors too. As in memcached, a
//! storage command refused for its line format does not skip its data block (the client's
//! next line is read as a command); one refused for its size does.

/// memcached's key limit.
pub const KEY_BYTES_MAX: usize = 250;
/// Relative expiry times up to this many seconds; larger values are Unix times.
pub const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;
/// The first byte of a binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get|gets <key>*`, `gat|gats <exptime> <key>*` (`cas`: replies carry the CAS unique;
    /// `touch`: the new exptime). `bad_key`: the key after `keys` is longer than 250 bytes:
    /// the values of `keys` are sent, then `CLIENT_ERROR bad command line format`.
    Get { keys: Vec<&'a [u8]>, cas: bool, touch: Option<i64>, bad_key: bool },
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`,
    /// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`; a data block follows.
    Store { kind: StoreKind, key: &'a [u8], flags: u32, exptime: i64, bytes: u32, cas_unique: u64, noreply: bool },
    /// `incr|decr <key> <delta> [noreply]`
    Arith { incr: bool, key: &'a [u8], delta: u64, noreply: bool },
    /// `delete <key> [0] [noreply]`
    Delete { key: &'a [u8], noreply: bool },
    /// `touch <key> <exptime> [noreply]`
    Touch { key: &'a [u8], exptime: i64, noreply: bool },
    /// `flush_all [delay] [noreply]` (delay in seconds, or a Unix time; <= 0: now).
    FlushAll { delay: i64, noreply: bool },
    /// `verbosity <level> [noreply]` (accepted; ssdlab's log does not change).
    Verbosity { noreply: bool },
    /// `stats [group [arg]]`
    Stats { group: Option<&'a [u8]>, arg: Option<&'a [u8]> },
    /// `version` (arguments ignored, as memcached does).
    Version,
    /// `quit` (arguments ignored).
    Quit,
    /// `mn`: the meta no-op (answered `MN`).
    MetaNoop,
    /// `mg|ms|md|ma <key> [<datalen> (ms)] <flags>*`: the meta commands; `flags` checked
    /// against the command's set (see [`META_FLAGS`]), each at most once.
    Meta { kind: MetaKind, key: &'a [u8], datalen: u32, flags: Vec<(u8, &'a [u8])> },
}

/// The meta commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
    Arith,
}

/// The flags ssdlab serves per meta command (a letter, then its token if it takes one):
/// mg `v k c f s t q O T`; ms `c k q O F T C M`; md `k q O C`; ma `v k c t q O N J D M`.
/// memcached also has `b` (base64 keys), `h`/`l` (access history), `E`, `I`/`x` (stale
/// items), `N`/`R` on mg (vivify, recache) and `S`/`u`: those are refused with
/// `CLIENT_ERROR unsupported meta flag`.
pub const META_FLAGS: [(MetaKind, &[u8]); 4] =
    [(MetaKind::Get, b"vkcfstqOT"), (MetaKind::Set, b"ckqOFTCM"), (MetaKind::Delete, b"kqOC"), (MetaKind::Arith, b"vkctqONJDM")];
/// Flags memcached knows that ssdlab does not serve (any command).
const META_UNSUPPORTED: &[u8] = b"bhlEINRSux";
/// memcached's limit on an opaque token.
pub const META_OPAQUE_MAX: usize = 32;

/// A line the server will not execute: the reply, and what to do with the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// "ERROR", "CLIENT_ERROR <reason>" or "SERVER_ERROR <reason>" (no CRLF); empty: close
    /// without a word (memcached's answer to an HTTP request).
    pub reply: String,
    /// Bytes to read and drop after the line (a refused storage command's data block).
    pub skip_bytes: u64,
    /// The stream cannot be followed: send the reply, then close the connection.
    pub close: bool,
    /// The client asked for no reply.
    pub noreply: bool,
    /// A `set` refused for its size also deletes the key (memcached: no stale value may
    /// survive a failed set).
    pub delete_key: Option<Vec<u8>>,
}

impl Refusal {
    fn new(reply: &str, noreply: bool) -> Refusal {
        Refusal { reply: reply.into(), skip_bytes: 0, close: false, noreply, delete_key: None }
    }
}

const ERROR: &str = "ERROR";
const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A number as C's `strtoull`/`strtol` read it and memcached's `safe_*` helpers accept it:
/// leading white space, an optional sign, at least one digit, then white space, a NUL or the
/// end. Returns (negative, the digits).
fn c_number(s: &[u8]) -> Option<(bool, &[u8])> {
    let mut i = s.iter().take_while(|&&b| is_c_space(b)).count();
    let neg = matches!(s.get(i), Some(b'-'));
    if matches!(s.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    match s.get(i + digits) {
        None | Some(0) => {}
        Some(&b) if is_c_space(b) => {}
        Some(_) => return None,
    }
    Some((neg, &s[i..i + digits]))
}

/// C's `strtoull(s, &end, 10)` as memcached's `safe_strtoull` checks it: no overflow; a
/// negative number that wraps to a value >= 2^63 is refused.
pub fn safe_strtoull(s: &[u8]) -> Option<u64> {
    let (neg, digits) = c_number(s)?;
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    let v = if neg { v.wrapping_neg() } else { v };
    if (v as i64) < 0 && neg {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtoul` (a 32-bit result: the 64-bit number truncated, as memcached
/// does on 64-bit machines).
fn safe_strtoul(s: &[u8]) -> Option<u32> {
    safe_strtoull(s).map(|v| v as u32)
}

/// memcached's `safe_strtol` into an `int32_t` (`strtol`'s 64-bit result truncated).
fn safe_strtol(s: &[u8]) -> Option<i64> {
    let (neg, digits) = c_number(s)?;
    let mut v: i128 = 0;
    for &d in digits {
        v = v * 10 + (d - b'0') as i128;
        if v > i64::MAX as i128 + 1 {
            return None; // ERANGE
        }
    }
    let v = if neg { -v } else { v };
    if v > i64::MAX as i128 {
        return None;
    }
    Some(v as i64 as i32 as i64)
}

/// A meta flag's numeric token as `safe_strtol` reads it (a 32-bit signed value).
pub fn safe_strtol_token(t: &[u8]) -> Option<i64> {
    safe_strtol(t)
}

/// A meta flag's numeric token as `safe_strtoul` reads it (client flags: 32 bits).
pub fn safe_strtoul_token(t: &[u8]) -> Option<u32> {
    safe_strtoul(t)
}

/// Whether a line's first bytes ask for a multi-get (whose lines may be long).
pub fn is_get_line(prefix: &[u8]) -> bool {
    let p = &prefix[prefix.iter().take_while(|&&b| b == b' ').count()..];
    [&b"get "[..], b"gets ", b"gat ", b"gats "].iter().any(|w| p.starts_with(w))
}

/// Parse one command line. `max_value_bytes` is the largest data block a storage command may
/// carry (larger ones are refused with `SERVER_ERROR object too large for cache` and skipped).
pub fn parse(line: &[u8], max_value_bytes: u64) -> Result<Command<'_>, Refusal> {
    let toks: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect();
    let Some(&name) = toks.first() else { return Err(Refusal::new(ERROR, false)) };
    if name.len() < 2 {
        return Err(Refusal::new(ERROR, false));
    }
    let args = &toks[1..];
    let n = args.len();
    // memcached's set_noreply_maybe: the last token, for the commands that call it.
    let noreply = n > 0 && args[n - 1] == b"noreply";
    match name {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => parse_get(name, args),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => parse_store(name, args, noreply, max_value_bytes),
        b"incr" | b"decr" => parse_arith(name, args, noreply),
        b"delete" => parse_delete(args, noreply),
        b"touch" => parse_touch(args, noreply),
        b"flush_all" => parse_flush_all(args, noreply),
        b"verbosity" => parse_verbosity(args, noreply),
        b"stats" => Ok(Command::Stats { group: args.first().copied(), arg: args.get(1).copied() }),
        b"version" => Ok(Command::Version),
        b"quit" => Ok(Command::Quit),
        b"mn" => Ok(Command::MetaNoop),
        b"mg" | b"ms" | b"md" | b"ma" => parse_meta(name, args, max_value_bytes),
        _ if toks.last().is_some_and(|t| t.starts_with(b"HTTP/")) => {
            // A web browser or HTTP client: memcached closes without a word.
            Err(Refusal { close: true, ..Refusal::new("", false) })
        }
        _ => Err(Refusal::new(ERROR, false)),
    }
}

/// A refusal with `reply`, silenced by the line's `noreply`.
fn bad<'a>(reply: &str, noreply: bool) -> Result<Command<'a>, Refusal> {
    Err(Refusal::new(reply, noreply))
}

/// `get|gets <key>*`, `gat|gats <exptime> <key>*` (and memcached's `bget`).
fn parse_get<'a>(name: &[u8], args: &[&'a [u8]]) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if n == 0 {
        return Err(Refusal::new(ERROR, false));
    }
    let touch = name.starts_with(b"gat");
    let (touch, keys) = if touch {
        match safe_strtol(args[0]) {
            Some(e) => (Some(e), &args[1..]),
            None => return Err(Refusal::new(BAD_EXPTIME, false)),
        }
    } else {
        (None, args)
    };
    let good = keys.iter().take_while(|k| k.len() <= KEY_BYTES_MAX).count();
    Ok(Command::Get { keys: keys[..good].to_vec(), cas: name.ends_with(b"s"), touch, bad_key: good < keys.len() })
}

/// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`, `cas ... <cas
/// unique> [noreply]`: one refused for its size skips its data block.
fn parse_store<'a>(name: &[u8], args: &[&'a [u8]], noreply: bool, max_value_bytes: u64) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    let kind = match name {
        b"set" => StoreKind::Set,
        b"add" => StoreKind::Add,
        b"replace" => StoreKind::Replace,
        b"append" => StoreKind::Append,
        b"prepend" => StoreKind::Prepend,
        _ => StoreKind::Cas,
    };
    let want = if kind == StoreKind::Cas { 5 } else { 4 };
    if n != want && n != want + 1 {
        return Err(Refusal::new(ERROR, false));
    }
    let key = args[0];
    if key.len() > KEY_BYTES_MAX {
        return bad(BAD_FORMAT, noreply);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (safe_strtoul(args[1]), safe_strtol(args[2]), safe_strtol(args[3])) else {
        return bad(BAD_FORMAT, noreply);
    };
    let cas_unique = if kind == StoreKind::Cas {
        match safe_strtoull(args[4]) {
            Some(c) => c,
            None => return bad(BAD_FORMAT, noreply),
        }
    } else {
        0
    };
    if vlen < 0 {
        return bad(BAD_FORMAT, noreply);
    }
    let bytes = vlen as u64;
    if bytes > max_value_bytes {
        return Err(Refusal {
            reply: "SERVER_ERROR object too large for cache".into(),
            skip_bytes: bytes + 2,
            close: false,
            noreply,
            delete_key: (kind == StoreKind::Set).then(|| key.to_vec()),
        });
    }
    Ok(Command::Store { kind, key, flags, exptime, bytes: bytes as u32, cas_unique, noreply })
}

/// `incr|decr <key> <delta> [noreply]`
fn parse_arith<'a>(name: &[u8], args: &[&'a [u8]], noreply: bool) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if n != 2 && n != 3 {
        return Err(Refusal::new(ERROR, false));
    }
    if args[0].len() > KEY_BYTES_MAX {
        return bad(BAD_FORMAT, noreply);
    }
    let Some(delta) = safe_strtoull(args[1]) else { return bad("CLIENT_ERROR invalid numeric delta argument", noreply) };
    Ok(Command::Arith { incr: name == b"incr", key: args[0], delta, noreply })
}

/// `delete <key> [0] [noreply]`
fn parse_delete<'a>(args: &[&'a [u8]], noreply: bool) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if !(1..=3).contains(&n) {
        return Err(Refusal::new(ERROR, false));
    }
    if n > 1 {
        let zero = args[1] == b"0";
        if !((n == 2 && (zero || noreply)) || (n == 3 && zero && noreply)) {
            return bad("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", noreply);
        }
    }
    if args[0].len() > KEY_BYTES_MAX {
        return bad(BAD_FORMAT, noreply);
    }
    Ok(Command::Delete { key: args[0], noreply: n > 1 && noreply })
}

/// `touch <key> <exptime> [noreply]`
fn parse_touch<'a>(args: &[&'a [u8]], noreply: bool) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if n != 2 && n != 3 {
        return Err(Refusal::new(ERROR, false));
    }
    if args[0].len() > KEY_BYTES_MAX {
        return bad(BAD_FORMAT, noreply);
    }
    let Some(exptime) = safe_strtol(args[1]) else { return bad(BAD_EXPTIME, noreply) };
    Ok(Command::Touch { key: args[0], exptime, noreply })
}

/// `flush_all [delay] [noreply]`
fn parse_flush_all<'a>(args: &[&'a [u8]], noreply: bool) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if n > 2 {
        return Err(Refusal::new(ERROR, false));
    }
    let delay = if n != noreply as usize {
        match safe_strtol(args[0]) {
            Some(d) => d,
            None => return bad(BAD_EXPTIME, noreply),
        }
    } else {
        0
    };
    Ok(Command::FlushAll { delay, noreply })
}

/// `verbosity <level> [noreply]`
fn parse_verbosity<'a>(args: &[&'a [u8]], noreply: bool) -> Result<Command<'a>, Refusal> {
    let n = args.len();
    if n != 1 && n != 2 {
        return Err(Refusal::new(ERROR, false));
    }
    if safe_strtoul(args[0]).is_none() {
        return bad(BAD_FORMAT, noreply);
    }
    Ok(Command::Verbosity { noreply })
}

/// A meta command's line (`name` and its arguments), with memcached's error texts.
fn parse_meta<'a>(name: &[u8], args: &[&'a [u8]], max_value_bytes: u64) -> Result<Command<'a>, Refusal> {
    let kind = match name {
        b"mg" => MetaKind::Get,
        b"ms" => MetaKind::Set,
        b"md" => MetaKind::Delete,
        _ => MetaKind::Arith,
    };
    let Some(&key) = args.first() else { return Err(Refusal::new(ERROR, false)) };
    if key.len() > KEY_BYTES_MAX {
        return Err(Refusal::new(BAD_FORMAT, false));
    }
    let (datalen, rest) = if kind == MetaKind::Set {
        match args.get(1).and_then(|t| safe_strtol(t)) {
            Some(n) if n >= 0 => (n as u64, &args[2..]),
            _ => return Err(Refusal::new(BAD_FORMAT, false)),
        }
    } else {
        (0, &args[1..])
    };
    // An ms refused after its length is known has its data block skipped.
    let refuse = |reply: &str| Refusal { skip_bytes: if kind == MetaKind::Set { datalen + 2 } else { 0 }, ..Refusal::new(reply, false) };
    let allowed = META_FLAGS.iter().find(|(k, _)| *k == kind).map(|(_, f)| *f).unwrap_or_default();
    let mut flags: Vec<(u8, &[u8])> = Vec::with_capacity(rest.len());
    for tok in rest {
        let (f, token) = (tok[0], &tok[1..]);
        if !f.is_ascii_alphabetic() {
            return Err(refuse("CLIENT_ERROR invalid flag"));
        }
        if flags.iter().any(|&(g, _)| g == f) {
            return Err(refuse("CLIENT_ERROR duplicate flag"));
        }
        // An mg with a long opaque is refused after its look-up (and counted), as memcached does.
        if f == b'O' && token.len() > META_OPAQUE_MAX && kind != MetaKind::Get {
            return Err(refuse("CLIENT_ERROR opaque token too long"));
        }
        if !allowed.contains(&f) {
            return Err(refuse(if META_UNSUPPORTED.contains(&f) {
                "CLIENT_ERROR unsupported meta flag (ssdlab serves mg vkcfstqOT, ms ckqOFTCM, md kqOC, ma vkctqONJDM)"
            } else {
                "CLIENT_ERROR invalid flag"
            }));
        }
        flags.push((f, token));
    }
    if kind == MetaKind::Set {
        if let Some(&(_, m)) = flags.iter().find(|(f, _)| *f == b'M') {
            if !matches!(m, b"E" | b"A" | b"P" | b"R" | b"S" | b"e" | b"a" | b"p" | b"r" | b"s") {
                return Err(refuse("CLIENT_ERROR invalid mode for ms M token"));
            }
        }
        if datalen > max_value_bytes {
            return Err(refuse("SERVER_ERROR object too large for cache"));
        }
    }
    Ok(Command::Meta { kind, key, datalen: datalen as u32, flags })
}

/// The reply to a binary-protocol request header (24 bytes, magic 0x80): a binary response
/// with status 0x0083 ("not supported") and a message saying what this server speaks, so a
/// binary client reports an error at once instead of waiting.
pub fn binary_refusal(header: &[u8]) -> Vec<u8> {
    let msg: &[u8] = b"ssdlab cache serve speaks the memcached text protocol only (no binary protocol)";
    let opcode = header.get(1).copied().unwrap_or(0);
    let opaque: [u8; 4] = header.get(12..16).and_then(|s| s.try_into().ok()).unwrap_or([0; 4]);
    let mut r = vec![0x81, opcode, 0, 0, 0, 0, 0x00, 0x83];
    r.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    r.extend_from_slice(&opaque);
    r.extend_from_slice(&[0; 8]);
    r.extend_from_slice(msg);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: u64 = 1 << 20;

    fn reply(line: &[u8]) -> String {
        parse(line, MAX).unwrap_err().reply
    }

    #[test]
    fn commands_parse() {
        assert_eq!(
            parse(b"get a bb  ccc", MAX),
            Ok(Command::Get { keys: vec![b"a", b"bb", b"ccc"], cas: false, touch: None, bad_key: false })
        );
        assert_eq!(parse(b"gets k", MAX), Ok(Command::Get { keys: vec![b"k"], cas: true, touch: None, bad_key: false }));
        assert_eq!(parse(b"gats -1 k", MAX), Ok(Command::Get { keys: vec![b"k"], cas: true, touch: Some(-1), bad_key: false }));
        assert_eq!(parse(b"gat 10", MAX), Ok(Command::Get { keys: vec![], cas: false, touch: Some(10), bad_key: false }));
        assert_eq!(
            parse(b"set k 42 -1 5 noreply", MAX),
            Ok(Command::Store { kind: StoreKind::Set, key: b"k", flags: 42, exptime: -1, bytes: 5, cas_unique: 0, noreply: true })
        );
        assert_eq!(
            parse(b"cas k 0 0 5 99", MAX),
            Ok(Command::Store { kind: StoreKind::Cas, key: b"k", flags: 0, exptime: 0, bytes: 5, cas_unique: 99, noreply: false })
        );
        assert!(matches!(parse(b"prepend k 0 0 1", MAX), Ok(Command::Store { kind: StoreKind::Prepend, .. })));
        assert_eq!(
            parse(b"incr k 18446744073709551615", MAX),
            Ok(Command::Arith { incr: true, key: b"k", delta: u64::MAX, noreply: false })
        );
        assert_eq!(parse(b"decr k 1 noreply", MAX), Ok(Command::Arith { incr: false, key: b"k", delta: 1, noreply: true }));
        assert_eq!(parse(b"delete k", MAX), Ok(Command::Delete { key: b"k", noreply: false }));
        assert_eq!(parse(b"delete k 0 noreply", MAX), Ok(Command::Delete { key: b"k", noreply: true }));
        assert_eq!(parse(b"delete k noreply", MAX), Ok(Command::Delete { key: b"k", noreply: true }));
        assert_eq!(parse(b"touch k 10", MAX), Ok(Command::Touch { key: b"k", exptime: 10, noreply: false }));
        assert_eq!(parse(b"flush_all", MAX), Ok(Command::FlushAll { delay: 0, noreply: false }));
        assert_eq!(parse(b"flush_all noreply", MAX), Ok(Command::FlushAll { delay: 0, noreply: true }));
        assert_eq!(parse(b"flush_all 5 noreply", MAX), Ok(Command::FlushAll { delay: 5, noreply: true }));
        assert_eq!(parse(b"verbosity 1", MAX), Ok(Command::Verbosity { noreply: false }));
        assert_eq!(parse(b"stats", MAX), Ok(Command::Stats { group: None, arg: None }));
        assert_eq!(parse(b"stats noreply", MAX), Ok(Command::Stats { group: Some(b"noreply"), arg: None }));
        assert_eq!(parse(b"version foo bar", MAX), Ok(Command::Version));
        assert_eq!(parse(b"version noreply", MAX), Ok(Command::Version));
        assert_eq!(parse(b"quit now", MAX), Ok(Command::Quit));
        assert_eq!(parse(b"mn", MAX), Ok(Command::MetaNoop));
    }

    #[test]
    fn bad_lines_get_memcacheds_replies() {
        for l in [&b"frobnicate x"[..], b"", b"g", b"GET k", b"get", b"set k 0 0", b"cas k 0 0 3", b"incr k", b"delete", b"touch k"] {
            assert_eq!(reply(l), "ERROR", "{}", String::from_utf8_lossy(l));
        }
        assert_eq!(reply(b"flush_all 1 2 3"), "ERROR");
        assert_eq!(reply(b"verbosity"), "ERROR");
        let long = "k".repeat(251);
        let r = parse(format!("set {long} 0 0 3").as_bytes(), MAX).unwrap_err();
        assert_eq!((r.reply.as_str(), r.skip_bytes, r.close), (BAD_FORMAT, 0, false));
        let r = parse(b"set k 0 0 2000000", MAX).unwrap_err();
        assert_eq!(
            (r.reply.as_str(), r.skip_bytes, r.delete_key),
            ("SERVER_ERROR object too large for cache", 2_000_002, Some(b"k".to_vec()))
        );
        assert_eq!(parse(b"add k 0 0 2000000", MAX).unwrap_err().delete_key, None);
        assert_eq!(reply(b"set k 0 0 abc"), BAD_FORMAT);
        assert_eq!(reply(b"set k 0 0 -5"), BAD_FORMAT);
        assert_eq!(reply(b"set k 0 zz 3"), BAD_FORMAT);
        assert!(parse(b"set k 0 zz 3 noreply", MAX).unwrap_err().noreply);
        assert_eq!(reply(b"incr k -1"), "CLIENT_ERROR invalid numeric delta argument");
        assert_eq!(reply(b"incr k 18446744073709551616"), "CLIENT_ERROR invalid numeric delta argument");
        assert_eq!(reply(b"delete k 10"), "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
        assert_eq!(reply(b"touch k x"), BAD_EXPTIME);
        assert_eq!(reply(b"flush_all soon"), BAD_EXPTIME);
        assert_eq!(reply(b"gat x k"), BAD_EXPTIME);
        assert_eq!(reply(b"verbosity loud"), BAD_FORMAT);
        assert!(parse(b"verbosity noreply", MAX).unwrap_err().noreply);
        let r = parse(b"GET / HTTP/1.1", MAX).unwrap_err();
        assert!(r.close && r.reply.is_empty());
        match parse(format!("get a {long} b").as_bytes(), MAX) {
            Ok(Command::Get { keys, bad_key: true, .. }) => assert_eq!(keys, vec![b"a"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn numbers_are_read_as_c_reads_them() {
        assert_eq!(safe_strtoull(b"42"), Some(42));
        assert_eq!(safe_strtoull(b"+7"), Some(7));
        assert_eq!(safe_strtoull(b" 12\r\n"), Some(12));
        assert_eq!(safe_strtoull(b"12 34"), Some(12));
        assert_eq!(safe_strtoull(b"-0"), Some(0));
        assert_eq!(safe_strtoull(b"-1"), None);
        assert_eq!(safe_strtoull(b"12abc"), None);
        assert_eq!(safe_strtoull(b""), None);
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtol(b"-5"), Some(-5));
        assert_eq!(safe_strtol(b"4294967297"), Some(1)); // memcached's int32 truncation
        assert_eq!(safe_strtol(b"x"), None);
    }

    #[test]
    fn binary_requests_get_a_binary_not_supported_reply() {
        let mut h = [0u8; 24];
        h[0] = BINARY_REQUEST_MAGIC;
        h[1] = 0x0b; // version
        h[12..16].copy_from_slice(&[1, 2, 3, 4]);
        let r = binary_refusal(&h);
        assert_eq!(&r[..2], &[0x81, 0x0b]);
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 0x83);
        assert_eq!(u32::from_be_bytes(r[8..12].try_into().unwrap()) as usize, r.len() - 24);
        assert_eq!(&r[12..16], &[1, 2, 3, 4]);
    }

    proptest! {
        /// Any line: a command or a refusal, never a panic; refusals are protocol error lines.
        #[test]
        fn any_line_parses_or_is_refused(line in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Err(r) = parse(&line, MAX) {
                prop_assert!(r.reply == "ERROR" || r.reply.starts_with("CLIENT_ERROR ") || r.reply.starts_with("SERVER_ERROR ") || (r.close && r.reply.is_empty()));
                prop_assert!(!(r.close && r.skip_bytes > 0));
                prop_assert!(!r.reply.contains('\n') && !r.reply.contains('\r'));
            }
        }

        #[test]
        fn storage_lines_round_trip(key in "[!-~]{1,250}", flags: u32, exptime in -5i64..2_000_000_000, bytes in 0u32..2_000_000, noreply: bool) {
            let line = format!("set {key} {flags} {exptime} {bytes}{}", if noreply { " noreply" } else { "" });
            match parse(line.as_bytes(), MAX) {
                Ok(Command::Store { key: k, flags: f, exptime: e, bytes: b, noreply: n, .. }) => {
                    prop_assert!(k == key.as_bytes() && f == flags && e == exptime && b == bytes && n == noreply && (bytes as u64) <= MAX);
                }
                Err(r) => prop_assert!(bytes as u64 > MAX && r.skip_bytes == bytes as u64 + 2 && r.noreply == noreply),
                Ok(other) => prop_assert!(false, "{:?}", other),
            }
        }

        #[test]
        fn unsigned_numbers_match_rusts_parse(v: u64) {
            prop_assert_eq!(safe_strtoull(v.to_string().as_bytes()), Some(v));
        }
    }
}
