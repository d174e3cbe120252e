//! The commands: a table of names and arities (Redis's: n > 0 exactly n words with the name,
//! n < 0 at least -n), Redis 7.0's error texts for unknown commands, unknown subcommands and
//! wrong arities, and each command's effect on the [`Backend`]: strings ([`strings`]), hashes
//! ([`hashes`]), sorted sets ([`zsets`]), the keyspace ([`keys`]) and expiry times
//! ([`expiry`], whose module text tells how an expired key becomes a delete of the store).
//! Lists, sets, streams, transactions and pub/sub are not served.
//!
//! This file holds the table and the dispatch; beside it: the connection and server
//! commands ([`conn`]), what handlers read and write through ([`ctx`]) and a stored value's
//! encoding ([`value`]).

use crate::proto::{reply, string2ll, Args};
use crate::{ldouble, Backend, ReplyError, StoreError};

mod conn;
mod ctx;
pub mod expiry;
mod hashes;
mod keys;
mod strings;
mod value;
mod zsets;

use conn::*;
use expiry::*;
pub use expiry::{housekeeping, Expiries};
use hashes::*;
pub use keys::glob_match;
use keys::*;
use strings::*;
use value::*;
use zsets::*;

/// What the connection does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// QUIT: send the replies, then close.
    Close,
}

/// Per-connection state.
#[derive(Debug, Default, Clone)]
pub struct Session {
    pub id: u64,
    pub name: Option<Vec<u8>>,
}

/// Counters for INFO and the shutdown metrics.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counters {
    pub commands: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub rejected_commands: u64,
    pub errors: u64,
    /// Keys deleted because their expiry time passed (on access or by the active expiry).
    pub expired_keys: u64,
}

type Handler = fn(&mut Ctx<'_>, &Args) -> Result<(), ReplyError>;

struct Cmd {
    name: &'static str,
    arity: i32,
    run: Handler,
}

const fn c(name: &'static str, arity: i32, run: Handler) -> Cmd {
    Cmd { name, arity, run }
}

/// Keys looked up (MGET) or removed (FLUSHALL) per hold of the store's lock: a long command
/// goes on in chunks of this many, and other clients' commands run in between.
pub const CHUNK: usize = 1024;

/// The rest of a command too long for one hold of the store's lock: the server takes the lock
/// again for each chunk ([`resume`]) until it is done. Its reply is written as it goes.
#[derive(Debug)]
pub enum Long {
    /// MGET: the keys from `next` on are still to be looked up.
    Mget { keys: Args, next: usize },
    /// FLUSHALL / FLUSHDB: keys are left to remove.
    Flush,
}

/// Everything a handler may touch.
pub struct Ctx<'a> {
    pub store: &'a mut dyn Backend,
    pub session: &'a mut Session,
    pub counters: &'a mut Counters,
    pub out: &'a mut Vec<u8>,
    /// INFO's `# Server` and `# Clients` lines, filled by the server.
    pub info: &'a dyn Fn() -> String,
    /// What the server keeps about the keyspace besides the store: SCAN's cursors, the expiry
    /// index.
    pub db: &'a mut Db,
    /// Wall-clock unix time in microseconds when the command runs (injected: tests fix it).
    pub now_us: i64,
    close: bool,
    /// Set by a command that goes on in chunks: the server calls [`resume`] with it.
    pub long: Option<Long>,
}

/// The keyspace state the server keeps beside the store, shared by the connections.
#[derive(Debug, Default)]
pub struct Db {
    /// SCAN's cursors (a cursor works on any connection, as in Redis).
    pub cursors: Cursors,
    /// Which keys expire when (see [`expiry`]).
    pub expiries: Expiries,
    /// RANDOMKEY's generator state.
    rng: u64,
}

impl Db {
    /// A pseudo-random number (splitmix64), seeded from `seed` the first time.
    fn random(&mut self, seed: i64) -> u64 {
        if self.rng == 0 {
            self.rng = seed as u64 | 1;
        }
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// SCAN cursors. Redis's cursor is a position in its hash table; an LSM store walks keys in
/// order, so a cursor here names the last key a SCAN returned, kept by the server: a cursor is
/// an id into this table (the newest `CURSORS_KEPT`; an older one is "ERR invalid cursor").
/// A full iteration returns every key present from its start to its end, in key order, each
/// once.
#[derive(Debug, Default)]
pub struct Cursors {
    next: u64,
    last_key: std::collections::HashMap<u64, Vec<u8>>,
    order: std::collections::VecDeque<u64>,
}

pub const CURSORS_KEPT: usize = 65536;

impl Cursors {
    fn issue(&mut self, last_key: Vec<u8>) -> u64 {
        self.next += 1;
        let id = self.next;
        self.last_key.insert(id, last_key);
        self.order.push_back(id);
        while self.order.len() > CURSORS_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.last_key.remove(&old);
            }
        }
        id
    }
}

/// Commands with subcommands (`CONFIG GET`): their table and what Redis calls them in errors.
const CONTAINERS: &[(&str, &[Cmd])] = &[("config", CONFIG), ("client", CLIENT), ("command", COMMAND)];

const COMMANDS: &[Cmd] = &[
    c("get", 2, get),
    c("set", -3, set),
    c("setnx", 3, setnx),
    c("getset", 3, getset),
    c("getdel", 2, getdel),
    c("mget", -2, mget),
    c("mset", -3, mset),
    c("del", -2, del),
    c("unlink", -2, del),
    c("exists", -2, exists),
    c("type", 2, type_),
    c("incr", 2, |x, a| incr_by(x, &a[1], 1)),
    c("decr", 2, |x, a| incr_by(x, &a[1], -1)),
    c("incrby", 3, |x, a| incr_arg(x, a, false)),
    c("decrby", 3, |x, a| incr_arg(x, a, true)),
    c("append", 3, append),
    c("strlen", 2, strlen),
    c("dbsize", 1, dbsize),
    c("scan", -2, scan),
    c("flushdb", -1, flush),
    c("flushall", -1, flush),
    c("select", 2, select),
    c("ping", -1, ping),
    c("echo", 2, |x, a| {
        reply::bulk(x.out, &a[1]);
        Ok(())
    }),
    c("quit", -1, |x, _| {
        reply::ok(x.out);
        x.close = true;
        Ok(())
    }),
    c("info", -1, info),
    c("hset", -4, |x, a| hset(x, a, false)),
    c("hmset", -4, |x, a| hset(x, a, true)),
    c("hget", 3, hget),
    c("hmget", -3, hmget),
    c("hgetall", 2, hgetall),
    c("hdel", -3, hdel),
    c("hlen", 2, |x, a| {
        let n = x.hash(&a[1])?.len();
        reply::int(x.out, n as i64);
        Ok(())
    }),
    c("zadd", -4, |x, a| zadd(x, a, false)),
    c("zrem", -3, zrem),
    c("zcard", 2, |x, a| {
        let n = x.zset(&a[1])?.len();
        reply::int(x.out, n as i64);
        Ok(())
    }),
    c("zscore", 3, |x, a| {
        let z = x.zset(&a[1])?;
        match z.iter().find(|(_, m)| *m == a[2]) {
            Some((sc, _)) => reply::bulk(x.out, fmt_score(*sc).as_bytes()),
            None => reply::null(x.out),
        }
        Ok(())
    }),
    c("zrangebyscore", -4, |x, a| zrange(x, a, Some(By::Score), Some(false))),
    c("zrevrangebyscore", -4, |x, a| zrange(x, a, Some(By::Score), Some(true))),
    c("zrangebylex", -4, |x, a| zrange(x, a, Some(By::Lex), Some(false))),
    c("zrevrangebylex", -4, |x, a| zrange(x, a, Some(By::Lex), Some(true))),
    c("zrange", -4, |x, a| zrange(x, a, None, None)),
    c("zrevrange", -4, |x, a| zrange(x, a, Some(By::Rank), Some(true))),
    c("zrank", 3, |x, a| zrank(x, a, false)),
    c("zrevrank", 3, |x, a| zrank(x, a, true)),
    c("zcount", 4, zcount),
    c("zincrby", 4, |x, a| zadd(x, a, true)),
    c("hkeys", 2, |x, a| hkeys(x, a, false)),
    c("hvals", 2, |x, a| hkeys(x, a, true)),
    c("hsetnx", 4, hsetnx),
    c("hincrby", 4, hincrby),
    c("hincrbyfloat", 4, hincrbyfloat),
    c("getrange", 4, getrange),
    c("setrange", 4, setrange),
    c("incrbyfloat", 3, incrbyfloat),
    c("msetnx", -3, msetnx),
    c("setex", 4, |x, a| setex(x, a, true, "setex")),
    c("psetex", 4, |x, a| setex(x, a, false, "psetex")),
    c("keys", 2, keys),
    c("rename", 3, |x, a| rename(x, a, false)),
    c("renamenx", 3, |x, a| rename(x, a, true)),
    c("randomkey", 1, randomkey),
    c("touch", -2, exists),
    c("time", 1, time),
    c("expire", -3, |x, a| expire(x, a, "expire", 1000, true)),
    c("pexpire", -3, |x, a| expire(x, a, "pexpire", 1, true)),
    c("expireat", -3, |x, a| expire(x, a, "expireat", 1000, false)),
    c("pexpireat", -3, |x, a| expire(x, a, "pexpireat", 1, false)),
    c("ttl", 2, |x, a| ttl(x, a, false, false)),
    c("pttl", 2, |x, a| ttl(x, a, true, false)),
    c("expiretime", 2, |x, a| ttl(x, a, false, true)),
    c("pexpiretime", 2, |x, a| ttl(x, a, true, true)),
    c("persist", 2, persist),
    c("hexists", 3, |x, a| {
        let there = x.hash(&a[1])?.iter().any(|(f, _)| *f == a[2]);
        reply::int(x.out, there as i64);
        Ok(())
    }),
];

/// Container commands called alone (Redis looks the container itself up, then checks its
/// arity, -2: "wrong number of arguments for 'config' command").
const CONTAINER_ARITY: i32 = -2;

const CONFIG: &[Cmd] = &[c("get", -3, config_get), c("set", -4, config_set), c("resetstat", 2, |x, _| ok(x))];
const CLIENT: &[Cmd] = &[
    c("setname", 3, client_setname),
    c("getname", 2, |x, _| {
        reply::opt_bulk(x.out, x.session.name.as_deref());
        Ok(())
    }),
    c("setinfo", 4, |x, _| ok(x)),
    c("id", 2, |x, _| {
        reply::int(x.out, x.session.id as i64);
        Ok(())
    }),
];
const COMMAND: &[Cmd] = &[
    c("count", 2, |x, _| {
        reply::int(x.out, (COMMANDS.len() + CONTAINERS.len()) as i64);
        Ok(())
    }),
    // redis-cli asks for command docs (for its hints) when it starts; it copes with none.
    c("docs", -2, |x, _| {
        reply::array(x.out, 0);
        Ok(())
    }),
];

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

/// `%.Ns` of a C string: up to the first NUL, at most `max` bytes.
fn c_str(b: &[u8], max: usize) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len()).min(max);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn arity_ok(arity: i32, argc: usize) -> bool {
    if arity > 0 {
        argc == arity as usize
    } else {
        argc >= (-arity) as usize
    }
}

fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Run one request (non-empty `args`), appending its reply to `ctx.out`.
pub fn execute(ctx: &mut Ctx<'_>, args: &Args) -> Flow {
    debug_assert!(!args.is_empty());
    ctx.counters.commands += 1;
    let name = lower(&args[0]);
    let (cmd, fullname) = if let Some((cname, table)) = CONTAINERS.iter().find(|(n, _)| *n == name) {
        if args.len() == 1 {
            ctx.counters.rejected_commands += 1;
            reply::error(ctx.out, &wrong_arity(cname));
            return Flow::Continue;
        }
        debug_assert!(arity_ok(CONTAINER_ARITY, args.len()));
        match table.iter().find(|s| s.name == lower(&args[1])) {
            Some(s) => (s, format!("{cname}|{}", s.name)),
            None => {
                ctx.counters.rejected_commands += 1;
                let msg = format!("ERR unknown subcommand '{}'. Try {} HELP.", c_str(&args[1], 128), cname.to_uppercase());
                reply::error(ctx.out, &msg);
                return Flow::Continue;
            }
        }
    } else {
        match COMMANDS.iter().find(|c| c.name == name) {
            Some(c) => (c, c.name.to_string()),
            None => {
                ctx.counters.rejected_commands += 1;
                reply::error(ctx.out, &unknown_command(args));
                return Flow::Continue;
            }
        }
    };
    if !arity_ok(cmd.arity, args.len()) {
        ctx.counters.rejected_commands += 1;
        reply::error(ctx.out, &wrong_arity(&fullname));
        return Flow::Continue;
    }
    if let Err(e) = (cmd.run)(ctx, args) {
        ctx.counters.errors += 1;
        reply::error(ctx.out, e.text());
    }
    if std::mem::take(&mut ctx.close) {
        Flow::Close
    } else {
        Flow::Continue
    }
}

/// Redis's text: the name and the first arguments, quoted, about 128 bytes of them.
fn unknown_command(args: &Args) -> String {
    let mut list = String::new();
    for a in &args[1..] {
        if list.len() >= 128 {
            break;
        }
        let room = 128 - list.len();
        list.push('\'');
        list.push_str(&c_str(a, room));
        list.push_str("' ");
    }
    format!("ERR unknown command '{}', with args beginning with: {list}", c_str(&args[0], 128))
}

fn ok(x: &mut Ctx<'_>) -> Result<(), ReplyError> {
    reply::ok(x.out);
    Ok(())
}

const SYNTAX: &str = "ERR syntax error";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

fn integer(b: &[u8]) -> Result<i64, ReplyError> {
    string2ll(b).ok_or_else(|| NOT_INTEGER.into())
}

/// Go on with a long command for one chunk; true when it is done (its reply complete).
pub fn resume(x: &mut Ctx<'_>, long: &mut Long) -> bool {
    match long {
        Long::Mget { keys, next } => {
            let end = keys.len().min(*next + CHUNK);
            for k in &keys[*next..end] {
                match mget_value(x, k) {
                    Ok(v) => reply::opt_bulk(x.out, v.as_deref()),
                    Err(e) => {
                        x.counters.errors += 1;
                        reply::error(x.out, e.text());
                    }
                }
            }
            *next = end;
            end == keys.len()
        }
        Long::Flush => match x.store.clear_some(CHUNK) {
            Ok(false) => false,
            Ok(true) => {
                x.db.expiries.clear(true);
                reply::ok(x.out);
                true
            }
            Err(e) => {
                x.counters.errors += 1;
                reply::error(x.out, ReplyError::from(e).text());
                true
            }
        },
    }
}

/// The front-end's state in one for the commands' unit tests: a store in memory, the keyspace
/// state and a clock the test moves.
#[cfg(test)]
pub(crate) mod harness {
    use super::*;
    use crate::MemoryStore;

    pub struct T {
        pub store: MemoryStore,
        pub db: Db,
        pub counters: Counters,
        /// Unix time in microseconds: 2023-11-14 22:13:20 to start with.
        pub now_us: i64,
    }

    impl T {
        pub fn new() -> T {
            T { store: MemoryStore::default(), db: Db::default(), counters: Counters::default(), now_us: 1_700_000_000_000_000 }
        }

        pub fn now_ms(&self) -> i64 {
            self.now_us / 1000
        }

        /// One inline command's reply.
        pub fn run(&mut self, line: &str) -> String {
            let args = crate::proto::split_args(line.as_bytes()).unwrap();
            self.run_args(&args)
        }

        pub fn run_args(&mut self, args: &Args) -> String {
            let (mut s, mut out) = (Session::default(), vec![]);
            let info = || String::from("# Server\r\n");
            execute(&mut Ctx::new(&mut self.store, &mut s, &mut self.counters, &mut out, &info, &mut self.db, self.now_us), args);
            String::from_utf8_lossy(&out).into_owned()
        }

        /// The server's housekeeping now; the keys it deleted.
        pub fn housekeeping(&mut self) -> usize {
            housekeeping(&mut self.store, &mut self.counters, &mut self.db, self.now_us).unwrap()
        }

        pub fn advance_ms(&mut self, ms: i64) {
            self.now_us += ms * 1000;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::harness::T;
    use super::*;

    /// A store that takes values of at most 16 stored bytes.
    fn store() -> T {
        let mut t = T::new();
        t.store.max_value_bytes = 16;
        t
    }

    fn run(t: &mut T, line: &str) -> String {
        t.run(line)
    }

    #[test]
    fn glob_matches_as_redis() {
        for (p, k, want) in [
            ("*", "", true),
            ("k*", "key:1", true),
            ("k?y:*", "key:1", true),
            ("*:1", "key:12", false),
            ("*1*2", "x1y1z2", true),
            ("h[ae]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("a[\\]]", "a]", true),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), k.as_bytes()), want, "{p:?} vs {k:?}");
        }
    }

    #[test]
    fn scan_walks_every_key_once_with_cursors() {
        let mut m = T::new();
        for i in 0..25 {
            m.store.map.insert(format!("k{i:02}").into_bytes(), vec![0, b'v']);
        }
        let (mut cursor, mut seen) = (b"0".to_vec(), vec![]);
        loop {
            let args = vec![b"SCAN".to_vec(), cursor.clone(), b"COUNT".to_vec(), b"7".to_vec(), b"MATCH".to_vec(), b"k1*".to_vec()];
            let text = m.run_args(&args);
            let lines: Vec<&str> = text.split("\r\n").collect();
            cursor = lines[2].as_bytes().to_vec();
            seen.extend(lines[4..].iter().filter(|l| l.starts_with('k')).map(|l| l.to_string()));
            if cursor == b"0" {
                break;
            }
        }
        assert_eq!(seen, (10..20).map(|i| format!("k{i}")).collect::<Vec<_>>());
        assert_eq!(run(&mut m, "SCAN 99"), "-ERR invalid cursor\r\n");
        assert_eq!(run(&mut m, "SCAN x"), "-ERR invalid cursor\r\n");
        assert_eq!(run(&mut m, "SCAN 0 COUNT 0"), "-ERR syntax error\r\n");
        assert_eq!(run(&mut m, "SCAN 0 MATCH"), "-ERR syntax error\r\n");
    }

    #[test]
    fn string_commands_answer_as_redis() {
        let m = &mut store();
        assert_eq!(run(m, "SET k v"), "+OK\r\n");
        assert_eq!(run(m, "get k"), "$1\r\nv\r\n");
        assert_eq!(run(m, "SET k w NX"), "$-1\r\n");
        assert_eq!(run(m, "SET k w NX GET"), "$1\r\nv\r\n");
        assert_eq!(run(m, "SET k w XX GET"), "$1\r\nv\r\n");
        assert_eq!(run(m, "SET n 1 XX"), "$-1\r\n");
        assert_eq!(run(m, "SET k w NX XX"), "-ERR syntax error\r\n");
        assert_eq!(run(m, "SET k w EX 0"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(run(m, "SET k w EX x"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(run(m, "INCR c"), ":1\r\n");
        assert_eq!(run(m, "INCRBY c 41"), ":42\r\n");
        assert_eq!(run(m, "DECRBY c -9223372036854775808"), "-ERR decrement would overflow\r\n");
        assert_eq!(run(m, "INCR k"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(run(m, "MSET a 1 b"), "-ERR wrong number of arguments for 'mset' command\r\n");
        assert_eq!(run(m, "MGET k nope"), "*2\r\n$1\r\nw\r\n$-1\r\n");
        assert_eq!(run(m, "EXISTS k k nope"), ":2\r\n");
        assert_eq!(run(m, "DEL k nope"), ":1\r\n");
        assert_eq!(run(m, "APPEND k abc"), ":3\r\n");
        assert_eq!(run(m, "SET big 01234567890123456789"), "-ERR value of 20 bytes: this store takes values of at most 15 bytes\r\n");
        assert_eq!(run(m, "DBSIZE"), ":2\r\n");
    }

    #[test]
    fn unknown_commands_and_arities_use_redis_texts() {
        let m = &mut store();
        assert_eq!(run(m, "GETX a b"), "-ERR unknown command 'GETX', with args beginning with: 'a' 'b' \r\n");
        assert_eq!(run(m, "GET"), "-ERR wrong number of arguments for 'get' command\r\n");
        assert_eq!(run(m, "CONFIG"), "-ERR wrong number of arguments for 'config' command\r\n");
        assert_eq!(run(m, "CONFIG GET"), "-ERR wrong number of arguments for 'config|get' command\r\n");
        assert_eq!(run(m, "config nope"), "-ERR unknown subcommand 'nope'. Try CONFIG HELP.\r\n");
        assert_eq!(run(m, "CONFIG GET save appendonly"), "*4\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$4\r\nsave\r\n$0\r\n\r\n");
        assert_eq!(run(m, "PING a b"), "-ERR wrong number of arguments for 'ping' command\r\n");
    }

    #[test]
    fn scores_print_as_printf_17g() {
        for (v, want) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (-2.25, "-2.25"),
            (1e20, "1e+20"),
            (123456789.0, "123456789"),
            (1e-5, "1.0000000000000001e-05"),
            (f64::INFINITY, "inf"),
            (0.0, "0"),
        ] {
            assert_eq!(fmt_score(v), want, "{v}");
        }
    }

    #[test]
    fn stored_values_round_trip_and_truncated_ones_are_errors() {
        for v in [
            Value::Str(b"x\0y".to_vec()),
            Value::Hash(vec![(b"f".to_vec(), vec![]), (vec![], b"v".to_vec())]),
            Value::Zset(vec![(-1.5, b"a".to_vec()), (f64::INFINITY, vec![])]),
        ] {
            for ttl in [None, Some(1_700_000_000_123)] {
                let b = v.encode(ttl);
                assert_eq!(Value::decode(&b).unwrap(), (v.clone(), ttl));
                assert_eq!(Value::decode_owned(b.clone()).unwrap(), (v.clone(), ttl));
            }
            let b = v.encode(None);
            if !matches!(v, Value::Str(_)) {
                assert!(Value::decode(&b[..b.len() - 1]).is_err());
            }
        }
        assert!(Value::decode(&[]).is_err() && Value::decode(&[7]).is_err());
    }

    #[test]
    fn glob_matches_like_config_get() {
        assert!(glob("*", "save") && glob("sa?e", "save") && glob("*only", "appendonly") && !glob("s", "save"));
    }
}
