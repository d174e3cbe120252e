//! RESP2 requests and replies, with redis-server's own rules and error texts (Redis 7.0,
//! networking.c): multibulk requests (`*N` then N `$len` bulk strings) and inline commands (a
//! line split like a shell, with quotes), parsed incrementally from a connection's buffer.
//! After a protocol error Redis answers `-ERR Protocol error: ...` and closes the connection;
//! so does ssdlab.

/// Longest inline command, multibulk count line or bulk length line without its newline
/// (Redis's PROTO_INLINE_MAX_SIZE).
pub const INLINE_MAX_BYTES: usize = 64 << 10;

/// Redis's default `proto-max-bulk-len`.
pub const BULK_MAX_BYTES: usize = 512 << 20;

/// A request: the command name and its arguments, as bytes.
pub type Args = Vec<Vec<u8>>;

/// A malformed request: the reply's text (after `-ERR `); the connection closes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

/// Parse one request from the front of `buf`. Ok(None): more bytes are needed. Ok(Some((args,
/// used))): the request and how many bytes it took; `args` is empty for a request Redis skips
/// without a reply (an empty line, `*0` or a negative count).
pub fn parse(buf: &[u8], bulk_max: usize) -> Result<Option<(Args, usize)>, ProtoError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, bulk_max),
        Some(_) => parse_inline(buf),
    }
}

/// The position of the first `\r` in `buf[from..]`, if the byte after it is there too (Redis
/// looks for `\r` and steps over the following byte without checking it).
fn header_end(buf: &[u8], from: usize) -> Option<usize> {
    let r = buf[from..].iter().position(|&b| b == b'\r')? + from;
    (r + 1 < buf.len()).then_some(r)
}

fn parse_multibulk(buf: &[u8], bulk_max: usize) -> Result<Option<(Args, usize)>, ProtoError> {
    let Some(r) = header_end(buf, 0) else {
        return if buf.len() > INLINE_MAX_BYTES { Err(perr("too big mbulk count string")) } else { Ok(None) };
    };
    let count = match string2ll(&buf[1..r]) {
        Some(n) if n <= i32::MAX as i64 => n,
        _ => return Err(perr("invalid multibulk length")),
    };
    let mut pos = r + 2;
    if count <= 0 {
        return Ok(Some((Vec::new(), pos)));
    }
    // No allocation from the client's count before its bytes arrive: at most what fits.
    let mut args = Vec::with_capacity((count as usize).min(1024));
    for _ in 0..count {
        let Some(r) = header_end(buf, pos) else {
            return if buf.len() - pos > INLINE_MAX_BYTES { Err(perr("too big bulk count string")) } else { Ok(None) };
        };
        if buf[pos] != b'$' {
            return Err(ProtoError(format!("Protocol error: expected '$', got '{}'", buf[pos] as char)));
        }
        let len = match string2ll(&buf[pos + 1..r]) {
            Some(n) if n >= 0 && n as u64 <= bulk_max as u64 => n as usize,
            _ => return Err(perr("invalid bulk length")),
        };
        let start = r + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2; // the two bytes after the data are skipped, as Redis does
    }
    Ok(Some((args, pos)))
}

fn parse_inline(buf: &[u8]) -> Result<Option<(Args, usize)>, ProtoError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > INLINE_MAX_BYTES { Err(perr("too big inline request")) } else { Ok(None) };
    };
    let end = if nl > 0 && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
    let args = split_args(&buf[..end]).ok_or_else(|| perr("unbalanced quotes in request"))?;
    Ok(Some((args, nl + 1)))
}

fn perr(what: &str) -> ProtoError {
    ProtoError(format!("Protocol error: {what}"))
}

/// Redis's string2ll: an optional `-`, then digits without leading zeros ("0" alone is zero),
/// nothing else, within i64.
pub fn string2ll(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c)
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Split an inline command like Redis's sdssplitargs: words separated by white space; "double
/// quotes" with \n \r \t \b \a \\ \" and \xHH escapes; 'single quotes' with \' only; a closing
/// quote must be followed by white space or the end. None for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Args> {
    // Redis splits a C string: a NUL byte ends the line.
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            if inq {
                let c = *line.get(i)?; // the end inside quotes: unbalanced
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        cur.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if i + 1 < line.len() && !is_space(line[i + 1]) {
                        return None; // closing quote must be followed by a space or nothing
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if insq {
                let c = *line.get(i)?;
                if c == b'\\' && i + 1 < line.len() && line[i + 1] == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < line.len() && !is_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else {
                match line.get(i) {
                    // Redis ends a bare word at these only (not at \v or \f, which it skips
                    // between words).
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(&c) => cur.push(c),
                }
            }
            i += 1;
        }
        args.push(cur);
    }
}

/// Reply encoding (RESP2).
pub mod reply {
    pub fn ok(out: &mut Vec<u8>) {
        out.extend_from_slice(b"+OK\r\n");
    }
    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.push(b'+');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    /// An error reply; `msg` starts with its code (`ERR ...`, `WRONGTYPE ...`). Newlines in it
    /// become spaces (a reply is one line).
    pub fn error(out: &mut Vec<u8>, msg: &str) {
        out.push(b'-');
        out.extend(msg.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
        out.extend_from_slice(b"\r\n");
    }
    pub fn int(out: &mut Vec<u8>, n: i64) {
        out.push(b':');
        out.extend_from_slice(n.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.push(b'$');
        out.extend_from_slice(b.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    pub fn null(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }
    pub fn array(out: &mut Vec<u8>, n: usize) {
        out.push(b'*');
        out.extend_from_slice(n.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    pub fn opt_bulk(out: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            Some(b) => bulk(out, b),
            None => null(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &[u8]) -> Result<Option<(Vec<String>, usize)>, ProtoError> {
        parse(s, BULK_MAX_BYTES).map(|o| o.map(|(a, n)| (a.into_iter().map(|x| String::from_utf8(x).unwrap()).collect(), n)))
    }

    #[test]
    fn multibulk_requests_parse_and_wait_for_their_bytes() {
        let req = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
        assert_eq!(one(req).unwrap(), Some((vec!["GET".into(), "key".into()], req.len())));
        for cut in 0..req.len() {
            assert_eq!(one(&req[..cut]).unwrap(), None, "cut at {cut}");
        }
        // Pipelined: the first request only.
        let two = [&req[..], &req[..]].concat();
        assert_eq!(one(&two).unwrap().unwrap().1, req.len());
        // Empty and negative counts are skipped without a reply.
        assert_eq!(one(b"*0\r\n").unwrap(), Some((vec![], 4)));
        assert_eq!(one(b"*-1\r\n").unwrap(), Some((vec![], 5)));
        // Binary-safe, empty argument.
        assert_eq!(parse(b"*2\r\n$0\r\n\r\n$2\r\n\r\n\r\n", 100).unwrap(), Some((vec![vec![], b"\r\n".to_vec()], 18)));
    }

    #[test]
    fn malformed_requests_get_redis_error_texts() {
        let e = |s: &[u8]| parse(s, 16).unwrap_err().0;
        assert_eq!(e(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*01\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*3000000000\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\r\n+x\r\n"), "Protocol error: expected '$', got '+'");
        assert_eq!(e(b"*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n$17\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(e(&[b"*".as_slice(), &[b'1'; 70000]].concat()), "Protocol error: too big mbulk count string");
        assert_eq!(e(&[b"GET ".as_slice(), &[b'k'; 70000]].concat()), "Protocol error: too big inline request");
        assert_eq!(e(b"SET \"a\"b c\r\n"), "Protocol error: unbalanced quotes in request");
        assert_eq!(e(b"SET 'a c\r\n"), "Protocol error: unbalanced quotes in request");
    }

    #[test]
    fn inline_commands_split_like_redis() {
        let a = |s: &[u8]| split_args(s).unwrap();
        assert_eq!(a(b"  set  k   v "), vec![b"set".to_vec(), b"k".to_vec(), b"v".to_vec()]);
        assert_eq!(a(b"set \"a b\\n\\x41\" 'it\\'s'"), vec![b"set".to_vec(), b"a b\nA".to_vec(), b"it's".to_vec()]);
        assert_eq!(a(b""), Vec::<Vec<u8>>::new());
        assert_eq!(a(b"\"\""), vec![Vec::<u8>::new()]);
        assert_eq!(one(b"PING\r\n").unwrap(), Some((vec!["PING".into()], 6)));
        assert_eq!(one(b"PING\n").unwrap(), Some((vec!["PING".into()], 5)));
        assert_eq!(one(b"\r\n").unwrap(), Some((vec![], 2)));
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    proptest::proptest! {
        /// Any bytes: an answer (a request, "more", or an error), never a panic, and a
        /// request never claims more bytes than there are.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(Some((_, used))) = parse(&data, 64) {
                proptest::prop_assert!(used > 0 && used <= data.len());
            }
        }

        /// Encoded requests come back whole, and every strict prefix asks for more.
        #[test]
        fn encoded_requests_round_trip(args in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 1..6)) {
            let bytes = encode(&args);
            proptest::prop_assert_eq!(parse(&bytes, BULK_MAX_BYTES).unwrap(), Some((args.clone(), bytes.len())));
            for cut in 0..bytes.len() {
                proptest::prop_assert_eq!(parse(&bytes[..cut], BULK_MAX_BYTES).unwrap(), None);
            }
        }
    }

    #[test]
    fn numbers_follow_string2ll() {
        for (s, v) in [("0", Some(0)), ("-1", Some(-1)), ("9223372036854775807", Some(i64::MAX)), ("-9223372036854775808", Some(i64::MIN))]
        {
            assert_eq!(string2ll(s.as_bytes()), v, "{s}");
        }
        for s in ["", "-", "-0", "01", "+1", " 1", "1 ", "9223372036854775808", "1e3"] {
            assert_eq!(string2ll(s.as_bytes()), None, "{s}");
        }
    }
}
