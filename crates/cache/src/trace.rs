//! Trace replay in ssdlab's cache-trace CSV, and converters from two public formats.
//!
//! ssdlab cache-trace CSV (one request per line, a header line first):
//!
//! ```text
//! key,op,key_bytes,value_bytes,ttl_s,time_s
//! user:42,get,7,310,0,0.000
//! user:42,set,7,310,300,0.125
//! ```
//!
//! `key` is any string without commas (hashed to the cache key), `op` is get, set or delete,
//! `ttl_s` 0 means no expiry, `time_s` is the arrival time in seconds (decimals allowed; the
//! first request's time is the origin; times must not go backwards). Converters:
//! - `cachelib-kvcache`: Meta's kvcache traces published with CacheLib. Columns are found by
//!   their header names: `key`, `op`, `size` (required), `key_size`, `op_count`, `op_time`,
//!   `ttl` (optional). GET/GET_LEASE -> get, SET/SET_LEASE -> set, DELETE -> delete; a row with
//!   `op_count` n becomes n requests.
//! - `twitter`: Twitter's cache-trace (github.com/twitter/cache-trace), no header; columns
//!   timestamp (s), anonymized key, key size, value size, client id, operation, TTL.
//!   get/gets -> get; set/add/replace/cas/append/prepend -> set; delete -> delete; incr/decr
//!   are skipped (counted).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::error::{CacheError, Result};
use crate::hash::key_of;
use crate::run::RequestSource;
use crate::workload::{Op, Request};

pub const HEADER: &str = "key,op,key_bytes,value_bytes,ttl_s,time_s";
pub const FORMATS: &[&str] = &["cachelib-kvcache", "twitter"];
/// Longest accepted line (bytes).
const MAX_LINE: usize = 64 * 1024;

fn terr(path: &str, line: u64, msg: impl Into<String>) -> CacheError {
    CacheError::Trace { path: path.to_string(), line, msg: msg.into() }
}

fn num<T: std::str::FromStr>(s: &str, what: &str, path: &str, line: u64) -> Result<T> {
    s.trim().parse::<T>().map_err(|_| terr(path, line, format!("{what} {s:?} is not a valid number")))
}

/// Reads the ssdlab cache-trace CSV.
pub struct TraceReader {
    path: String,
    rd: Box<dyn BufRead + Send>,
    line: u64,
    buf: String,
    t0: Option<f64>,
    last: f64,
}

impl TraceReader {
    pub fn open(path: &Path) -> Result<TraceReader> {
        let f = File::open(path).map_err(|e| CacheError::Input(format!("{}: {e}", path.display())))?;
        Self::new(Box::new(BufReader::new(f)), &path.display().to_string())
    }

    pub fn new(rd: Box<dyn BufRead + Send>, name: &str) -> Result<TraceReader> {
        let mut t = TraceReader { path: name.to_string(), rd, line: 0, buf: String::new(), t0: None, last: 0.0 };
        match t.read_line()? {
            Some(h) if h.trim() == HEADER => Ok(t),
            Some(h) => Err(terr(name, 1, format!("expected the header {HEADER:?}, got {:?}", h.trim()))),
            None => Err(terr(name, 1, "empty trace")),
        }
    }

    fn read_line(&mut self) -> Result<Option<String>> {
        self.buf.clear();
        let n = self.rd.read_line(&mut self.buf).map_err(|e| terr(&self.path, self.line + 1, e.to_string()))?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if self.buf.len() > MAX_LINE {
            return Err(terr(&self.path, self.line, format!("line longer than {MAX_LINE} bytes")));
        }
        Ok(Some(self.buf.clone()))
    }

    fn parse(&mut self, l: &str) -> Result<Request> {
        let (p, n) = (self.path.clone(), self.line);
        let f: Vec<&str> = l.trim_end_matches(['\n', '\r']).split(',').collect();
        if f.len() != 6 {
            return Err(terr(&p, n, format!("expected 6 comma-separated fields ({HEADER}), got {}", f.len())));
        }
        let op = match f[1].trim() {
            "get" => Op::Get,
            "set" => Op::Set,
            "delete" => Op::Delete,
            o => return Err(terr(&p, n, format!("op {o:?} is not get, set or delete"))),
        };
        let key_bytes: u32 = num(f[2], "key_bytes", &p, n)?;
        let value_bytes: u32 = num(f[3], "value_bytes", &p, n)?;
        if key_bytes == 0 || key_bytes > 65_535 {
            return Err(terr(&p, n, format!("key_bytes {key_bytes} is not in 1..=65535")));
        }
        if value_bytes > 1 << 30 {
            return Err(terr(&p, n, format!("value_bytes {value_bytes} exceeds 1 GiB")));
        }
        let ttl_s: u32 = num(f[4], "ttl_s", &p, n)?;
        let t: f64 = num(f[5], "time_s", &p, n)?;
        if !t.is_finite() || t < 0.0 {
            return Err(terr(&p, n, format!("time_s {t} must be a non-negative number")));
        }
        let t0 = *self.t0.get_or_insert(t);
        if t < self.last {
            return Err(terr(&p, n, format!("time_s {t} is earlier than the previous request's {}", self.last)));
        }
        self.last = t;
        Ok(Request { key: key_of(f[0].as_bytes()), op, key_bytes, value_bytes, ttl_s, time_ns: ((t - t0) * 1e9) as u64 })
    }
}

impl RequestSource for TraceReader {
    fn next_request(&mut self) -> Option<Result<Request>> {
        loop {
            let l = match self.read_line() {
                Ok(Some(l)) => l,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            if l.trim().is_empty() || l.starts_with('#') {
                continue;
            }
            return Some(self.parse(&l));
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ConvertStats {
    pub lines: u64,
    pub requests: u64,
    pub skipped: u64,
}

/// Convert a trace in `format` (see [`FORMATS`]) to ssdlab's cache-trace CSV.
pub fn convert(src: &Path, format: &str, dst: &Path) -> Result<ConvertStats> {
    let name = src.display().to_string();
    let rd = BufReader::new(File::open(src).map_err(|e| CacheError::Input(format!("{name}: {e}")))?);
    let mut out = BufWriter::new(File::create(dst).map_err(|e| CacheError::Input(format!("{}: {e}", dst.display())))?);
    writeln!(out, "{HEADER}")?;
    let mut st = ConvertStats::default();
    let emit = |out: &mut BufWriter<File>, key: &str, op: &str, kb: u32, vb: u32, ttl: u32, t: f64, n: u64| -> Result<()> {
        for _ in 0..n {
            writeln!(out, "{key},{op},{kb},{vb},{ttl},{t}")?;
        }
        Ok(())
    };
    let mut last_t = 0.0f64;
    match format {
        "cachelib-kvcache" => {
            let mut cols: Option<std::collections::HashMap<String, usize>> = None;
            for (i, l) in rd.lines().enumerate() {
                let n = i as u64 + 1;
                let l = l.map_err(|e| terr(&name, n, e.to_string()))?;
                st.lines += 1;
                if l.trim().is_empty() {
                    continue;
                }
                let f: Vec<&str> = l.split(',').map(|s| s.trim()).collect();
                let Some(c) = &cols else {
                    let m: std::collections::HashMap<String, usize> = f.iter().enumerate().map(|(i, s)| (s.to_string(), i)).collect();
                    for need in ["key", "op", "size"] {
                        if !m.contains_key(need) {
                            return Err(terr(&name, n, format!("header lacks the {need:?} column (found {l:?})")));
                        }
                    }
                    cols = Some(m);
                    continue;
                };
                let get = |k: &str| c.get(k).and_then(|&i| f.get(i)).copied();
                let key = get("key").ok_or_else(|| terr(&name, n, "missing key field"))?;
                let op = match get("op").unwrap_or("") {
                    "GET" | "GET_LEASE" => "get",
                    "SET" | "SET_LEASE" => "set",
                    "DELETE" => "delete",
                    _ => {
                        st.skipped += 1;
                        continue;
                    }
                };
                let vb: u32 = num(get("size").unwrap_or(""), "size", &name, n)?;
                let kb: u32 = match get("key_size") {
                    Some(s) if !s.is_empty() => num(s, "key_size", &name, n)?,
                    _ => key.len().max(1) as u32,
                };
                let cnt: u64 = match get("op_count") {
                    Some(s) if !s.is_empty() => num(s, "op_count", &name, n)?,
                    _ => 1,
                };
                let ttl: u32 = match get("ttl") {
                    Some(s) if !s.is_empty() => num::<f64>(s, "ttl", &name, n)? as u32,
                    _ => 0,
                };
                let t: f64 = match get("op_time") {
                    Some(s) if !s.is_empty() => num(s, "op_time", &name, n)?,
                    _ => last_t,
                };
                let t = t.max(last_t);
                last_t = t;
                emit(&mut out, &key.replace(',', "_"), op, kb, vb, ttl, t, cnt.min(1_000_000))?;
                st.requests += cnt.min(1_000_000);
            }
        }
        "twitter" => {
            for (i, l) in rd.lines().enumerate() {
                let n = i as u64 + 1;
                let l = l.map_err(|e| terr(&name, n, e.to_string()))?;
                st.lines += 1;
                if l.trim().is_empty() {
                    continue;
                }
                // The key may itself contain commas in principle: take the fixed fields from
                // both ends.
                let f: Vec<&str> = l.split(',').collect();
                if f.len() < 7 {
                    return Err(terr(
                        &name,
                        n,
                        format!("expected 7 fields (timestamp,key,key size,value size,client id,operation,TTL), got {}", f.len()),
                    ));
                }
                let k = f.len();
                let key = f[1..k - 5].join("_");
                let t: f64 = num(f[0], "timestamp", &name, n)?;
                let kb: u32 = num(f[k - 5], "key size", &name, n)?;
                let vb: u32 = num(f[k - 4], "value size", &name, n)?;
                let op = match f[k - 2].trim() {
                    "get" | "gets" => "get",
                    "set" | "add" | "replace" | "cas" | "append" | "prepend" => "set",
                    "delete" => "delete",
                    _ => {
                        st.skipped += 1;
                        continue;
                    }
                };
                let ttl: u32 = num(f[k - 1], "TTL", &name, n)?;
                let t = t.max(last_t);
                last_t = t;
                emit(&mut out, &key, op, kb.max(1), vb, ttl, t, 1)?;
                st.requests += 1;
            }
        }
        other => return Err(CacheError::Input(format!("unknown trace format {other:?}; known: {}", FORMATS.join(", ")))),
    }
    out.flush()?;
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of one test's files, removed when the test ends, passed or failed.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(test: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("ssdlab-cache-trace-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
        fn file(&self, name: &str, text: &str) -> std::path::PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn all(p: &Path) -> Result<Vec<Request>> {
        let mut r = TraceReader::open(p)?;
        let mut v = vec![];
        while let Some(x) = r.next_request() {
            v.push(x?);
        }
        Ok(v)
    }

    #[test]
    fn converts_twitter_and_kvcache_formats() {
        let dir = Dir::new("converts_twitter_and_kvcache_formats");
        let tw = dir.file("tw", "0,nz:u:abc,9,300,1,get,0\n1,nz:u:abc,9,300,1,set,300\n2,k2,2,10,1,incr,0\n3,k2,2,10,2,delete,0\n");
        let out = dir.file("tw.csv", "");
        let st = convert(&tw, "twitter", &out).unwrap();
        assert_eq!((st.requests, st.skipped), (3, 1));
        let v = all(&out).unwrap();
        assert_eq!(v.iter().map(|r| r.op).collect::<Vec<_>>(), vec![Op::Get, Op::Set, Op::Delete]);
        assert_eq!(v[1].ttl_s, 300);
        assert_eq!(v[1].time_ns, 1_000_000_000);
        assert_eq!(v[0].key, v[1].key);
        let kv = dir.file(
            "kv",
            "op_time,key,key_size,op,op_count,size,cache_hits,ttl\n10,abc,3,GET,2,100,1,\n11,abc,3,SET,1,120,0,3600\n12,x,1,WEIRD,1,1,0,\n",
        );
        let st = convert(&kv, "cachelib-kvcache", &out).unwrap();
        assert_eq!((st.requests, st.skipped), (3, 1));
        let v = all(&out).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!((v[2].op, v[2].value_bytes, v[2].ttl_s, v[2].time_ns), (Op::Set, 120, 3600, 1_000_000_000));
        let kv2 = dir.file("kv2", "key,op,size,op_count,key_size\nk,GET,50,1,8\n");
        convert(&kv2, "cachelib-kvcache", &out).unwrap();
        assert_eq!(all(&out).unwrap()[0].key_bytes, 8);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let dir = Dir::new("bad_lines_name_file_and_line");
        let p = dir.file("bad", &format!("{HEADER}\na,get,3,10,0,0\na,put,3,10,0,1\n"));
        let e = all(&p).err().unwrap().to_string();
        assert!(e.contains(":3:") && e.contains("put"), "{e}");
        let p = dir.file("back", &format!("{HEADER}\na,get,3,10,0,5\na,get,3,10,0,1\n"));
        assert!(all(&p).err().unwrap().to_string().contains("earlier"));
        let p = dir.file("hdr", "k,o\n");
        assert!(TraceReader::open(&p).err().unwrap().to_string().contains("header"));
        let bad = dir.file("tw-bad", "x,y\n");
        assert!(convert(&bad, "twitter", &dir.file("o", "")).err().unwrap().to_string().contains("7 fields"));
        assert!(convert(&bad, "nope", &dir.file("o2", "")).is_err());
    }
}
