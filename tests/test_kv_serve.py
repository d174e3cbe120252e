"""`ssdlab kv serve`: the LSM store on an emulated ZNS SSD behind the RESP (Redis) protocol,
checked byte for byte against a real redis-server on the same requests, and driven by Redis
clients ssdlab did not write (redis-cli, redis-benchmark, redis-py)."""

import json
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clitools import SSDLAB, Server, free_port, write

redis = pytest.importorskip("redis", reason="redis (redis-py) missing: run scripts/setup.sh (make setup)")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("redis-server", "redis-cli", "redis-benchmark")),
                                reason="redis-server/redis-tools missing: run scripts/setup.sh (make setup)")

# A small ZNS device (data-backed when served): enough zones for a few MB of values and
# their compactions.
SPEC = """
[device]
preset = "zns-ssd"

[lsm]
memtable_bytes = 262144
"""


def start_ssdlab(tmp: Path, *args) -> Server:
    port = free_port()
    spec = write(tmp / f"kv-{port}.toml", SPEC)
    return Server(SSDLAB + ["kv", "serve", str(spec), "--listen", f"127.0.0.1:{port}", *args], port, tmp / f"kv-{port}.log")


def start_redis(tmp: Path) -> Server:
    port = free_port()
    d = tmp / f"redis-{port}"
    d.mkdir()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(d), "--daemonize", "no", "--databases", "1"]
    return Server(argv, port, tmp / f"redis-{port}.log")


@pytest.fixture
def pair(tmp_path):
    ours, ref = start_ssdlab(tmp_path), start_redis(tmp_path)
    yield ours, ref
    assert ours.stop() == 0, ours.log.read_text()
    ref.stop()


def exchange(port: int, data: bytes) -> bytes:
    """Send `data` on a fresh connection and return every reply byte, up to a sentinel ECHO's
    reply (or the server's close)."""
    mark = uuid.uuid4().hex.encode()
    tail = b"$32\r\n" + mark + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(data + b"*2\r\n$4\r\nECHO\r\n$32\r\n" + mark + b"\r\n")
        got = b""
        while not got.endswith(tail):
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    return got[:-len(tail)] if got.endswith(tail) else got + b"<closed>"


def mb(*args) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


# Request sequences, each on its own connection, answered identically by redis-server.
CASES = {
    "set-get": mb("SET", "k", "v") + mb("GET", "k") + mb("GET", "missing"),
    "binary-and-empty-values": mb("SET", b"bin\x00key", b"\x00\r\n\xff") + mb("GET", b"bin\x00key") + mb("SET", "e", "") + mb("GET", "e")
    + mb("STRLEN", "e") + mb("STRLEN", b"bin\x00key"),
    "set-options": mb("SET", "o", "1", "NX") + mb("SET", "o", "2", "NX") + mb("SET", "o", "3", "XX", "GET") + mb("SET", "p", "1", "XX")
    + mb("SET", "o", "4", "NX", "XX") + mb("SET", "o", "4", "GET", "nx") + mb("SET", "o", "5", "EX", "0") + mb("SET", "o", "5", "EX", "x")
    + mb("SET", "o", "5", "EX") + mb("SET", "o", "5", "BOGUS") + mb("GET", "o"),
    "counters": mb("INCR", "c") + mb("INCRBY", "c", "41") + mb("DECR", "c") + mb("DECRBY", "c", "-8") + mb("INCRBY", "c", "x")
    + mb("SET", "s", "abc") + mb("INCR", "s") + mb("SET", "m", "9223372036854775807") + mb("INCR", "m")
    + mb("DECRBY", "c", "-9223372036854775808") + mb("SET", "z", "012") + mb("INCR", "z") + mb("GET", "c"),
    "multi-key": mb("MSET", "a", "1", "b", "2", "c", "3") + mb("MGET", "a", "b", "x", "c") + mb("EXISTS", "a", "a", "x")
    + mb("DEL", "a", "x", "b") + mb("EXISTS", "a", "b", "c") + mb("MSET", "a", "1", "b") + mb("UNLINK", "c"),
    "misc-strings": mb("SETNX", "n", "1") + mb("SETNX", "n", "2") + mb("GETSET", "n", "3") + mb("GETDEL", "n") + mb("GETDEL", "n")
    + mb("APPEND", "ap", "ab") + mb("APPEND", "ap", "cd") + mb("GET", "ap") + mb("TYPE", "ap") + mb("TYPE", "nope"),
    "keyspace": mb("FLUSHDB") + mb("DBSIZE") + mb("MSET", "k1", "a", "k2", "b") + mb("DBSIZE") + mb("FLUSHALL", "SYNC")
    + mb("DBSIZE") + mb("FLUSHDB", "now") + mb("SELECT", "0") + mb("SELECT", "x"),
    "connection": mb("PING") + mb("PING", "hi") + mb("PING", "a", "b") + mb("ECHO", "x") + b"PING\r\n" + b"ECHO \"a b\\x41\"\r\n"
    + b"\r\n" + b"*0\r\n" + mb("CLIENT", "SETNAME", "ab") + mb("CLIENT", "GETNAME") + mb("CLIENT", "SETNAME", "a b")
    + mb("CONFIG", "GET", "save") + mb("CONFIG", "GET", "appendonly"),
    "errors": mb("NOPE", "a", "b") + mb("nope") + mb("GET") + mb("GET", "a", "b") + mb("SET", "k") + mb("CONFIG")
    + mb("CONFIG", "NOPE") + mb("CLIENT", "nope", "x") + mb("MGET") + mb("NOPE", "x" * 200, "y"),
    # Small hashes (Redis keeps their fields in insertion order), and every type clash.
    "hashes": mb("HSET", "h", "f1", "v1", "f2", "v2") + mb("HSET", "h", "f1", "x", "f3", "y") + mb("HGET", "h", "f1")
    + mb("HGET", "h", "nope") + mb("HMGET", "h", "f1", "nope", "f3") + mb("HGETALL", "h") + mb("HLEN", "h") + mb("HEXISTS", "h", "f2")
    + mb("HEXISTS", "h", "zz") + mb("HDEL", "h", "f2", "nope") + mb("HGETALL", "h") + mb("HMSET", "h", "a", "1", "b", "2")
    + mb("HSET", "h", "odd") + mb("HSET", "h", "f", "v", "g") + mb("HMSET", "h", "f") + mb("TYPE", "h") + mb("HGETALL", "missing")
    + mb("HMGET", "missing", "a") + mb("HLEN", "missing") + mb("HDEL", "missing", "a") + mb("HSET", "h", b"\x00bin", b"")
    + mb("HGETALL", "h"),
    "type-clashes": mb("HSET", "h", "f", "v") + mb("GET", "h") + mb("INCR", "h") + mb("APPEND", "h", "x") + mb("STRLEN", "h")
    + mb("GETSET", "h", "x") + mb("GETDEL", "h") + mb("MGET", "h", "nope") + mb("SET", "h", "v", "GET") + mb("SET", "h", "v", "NX")
    + mb("SETNX", "h", "v") + mb("EXISTS", "h") + mb("SET", "s", "v") + mb("HGET", "s", "f") + mb("HSET", "s", "f", "v")
    + mb("HGETALL", "s") + mb("HDEL", "s", "f") + mb("HLEN", "s") + mb("SET", "h", "now-a-string") + mb("TYPE", "h") + mb("GET", "h")
    + mb("HSET", "g", "a", "1", "b", "2") + mb("HDEL", "g", "a", "b") + mb("EXISTS", "g") + mb("TYPE", "g") + mb("DEL", "s")
    + mb("DBSIZE"),
    # Sorted sets as YCSB's Redis binding uses them (ZADD an index, ZRANGEBYSCORE to scan, ZREM).
    "sorted-sets": mb("ZADD", "z", "1", "a", "2", "b", "1.5", "c") + mb("ZADD", "z", "0.1", "d", "-inf", "e", "+inf", "f")
    + mb("ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES") + mb("ZRANGEBYSCORE", "z", "(1", "2")
    + mb("ZRANGEBYSCORE", "z", "1", "(2", "LIMIT", "1", "5") + mb("ZRANGEBYSCORE", "z", "0", "10", "LIMIT", "0", "-1")
    + mb("ZADD", "z", "NX", "5", "a", "6", "g") + mb("ZADD", "z", "XX", "CH", "7", "a", "8", "h") + mb("ZADD", "z", "GT", "CH", "1", "a", "9", "b")
    + mb("ZADD", "z", "LT", "3", "b") + mb("ZSCORE", "z", "a") + mb("ZSCORE", "z", "d") + mb("ZSCORE", "z", "nope") + mb("ZCARD", "z")
    + mb("ZADD", "z", "NX", "XX", "1", "a") + mb("ZADD", "z", "GT", "LT", "1", "a") + mb("ZADD", "z", "1") + mb("ZADD", "z", "x", "a")
    + mb("ZADD", "z", "1", "a", "2") + mb("ZRANGEBYSCORE", "z", "x", "1") + mb("ZRANGEBYSCORE", "z", "0", "1", "BOGUS")
    + mb("ZREM", "z", "a", "nope", "b") + mb("ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES") + mb("TYPE", "z")
    + mb("GET", "z") + mb("HGET", "z", "f") + mb("ZADD", "s2", "1", "x") + mb("ZREM", "s2", "x") + mb("EXISTS", "s2")
    + mb("SET", "str", "v") + mb("ZADD", "str", "1", "m") + mb("ZRANGEBYSCORE", "str", "0", "1") + mb("ZCARD", "missing")
    + mb("ZRANGEBYSCORE", "missing", "0", "1") + mb("ZADD", "z", "1e3", "big", "-2.5e-7", "tiny") + mb("ZRANGEBYSCORE", "z", "-1", "+inf", "WITHSCORES"),
    # SCAN's errors (its order differs from Redis's hash order: the walks are compared as sets below).
    "scan-errors": mb("SCAN") + mb("SCAN", "x") + mb("SCAN", "0", "COUNT", "0") + mb("SCAN", "0", "COUNT", "x")
    + mb("SCAN", "0", "MATCH") + mb("SCAN", "0", "BOGUS", "1") + mb("SET", "only", "1") + mb("SCAN", "0", "COUNT", "100"),
    "string-ranges-and-floats": mb("SET", "s", "Hello") + mb("GETRANGE", "s", "0", "-1") + mb("GETRANGE", "s", "-3", "-1")
    + mb("GETRANGE", "s", "-1", "-5") + mb("GETRANGE", "s", "-100", "2") + mb("GETRANGE", "nope", "0", "-1") + mb("GETRANGE", "s", "x", "1")
    + mb("SETRANGE", "n", "0", "") + mb("EXISTS", "n") + mb("SETRANGE", "n", "3", "ab") + mb("GET", "n") + mb("SETRANGE", "s", "1", "X")
    + mb("SETRANGE", "s", "-1", "x") + mb("SETRANGE", "s", "536870911", "xx") + mb("GET", "s") + mb("SET", "f", "10.5")
    + mb("INCRBYFLOAT", "f", "0.1") + mb("INCRBYFLOAT", "f", "-5e-1") + mb("INCRBYFLOAT", "f", "0x1p-3") + mb("INCRBYFLOAT", "f", "1e300")
    + mb("INCRBYFLOAT", "f", "abc") + mb("INCRBYFLOAT", "f", "inf") + mb("INCRBYFLOAT", "g", "3") + mb("SET", "g", " 1")
    + mb("INCRBYFLOAT", "g", "1") + mb("MSETNX", "a", "1", "b", "2") + mb("MSETNX", "b", "3", "c", "4") + mb("MGET", "a", "b", "c")
    + mb("MSETNX", "a", "1", "b") + mb("HSET", "h", "f", "v") + mb("GETRANGE", "h", "0", "1") + mb("SETRANGE", "h", "0", "x")
    + mb("INCRBYFLOAT", "h", "1"),
    "hash-counters-and-lists": mb("HINCRBY", "h", "n", "5") + mb("HINCRBY", "h", "n", "-7") + mb("HINCRBY", "h", "n", "x")
    + mb("HSET", "h", "s", "abc", "big", "9223372036854775807") + mb("HINCRBY", "h", "s", "1") + mb("HINCRBY", "h", "big", "1")
    + mb("HKEYS", "h") + mb("HVALS", "h") + mb("HKEYS", "nope") + mb("HSETNX", "h", "n", "1") + mb("HSETNX", "h", "new", "v")
    + mb("HINCRBYFLOAT", "h", "f", "1.5") + mb("HINCRBYFLOAT", "h", "f", "0.1") + mb("HINCRBYFLOAT", "h", "s", "1")
    + mb("HINCRBYFLOAT", "h", "f", "inf") + mb("HGETALL", "h") + mb("SET", "str", "v") + mb("HKEYS", "str") + mb("HINCRBY", "str", "f", "1")
    + mb("HSETNX", "str", "f", "v"),
    "sorted-set-ranges": mb("ZADD", "z", "1", "a", "2", "b", "3", "c", "3", "d", "5", "e") + mb("ZRANGE", "z", "0", "-1", "WITHSCORES")
    + mb("ZRANGE", "z", "-2", "-1") + mb("ZRANGE", "z", "0", "-1", "REV") + mb("ZREVRANGE", "z", "0", "1", "WITHSCORES")
    + mb("ZRANGE", "z", "0", "-1", "LIMIT", "0", "2") + mb("ZRANGE", "z", "0", "-1", "LIMIT", "0", "-1") + mb("ZRANGE", "z", "(1", "3", "BYSCORE")
    + mb("ZRANGE", "z", "3", "(1", "BYSCORE", "REV", "WITHSCORES") + mb("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "REV", "LIMIT", "1", "2")
    + mb("ZRANGE", "z", "0", "1", "REV", "REV") + mb("ZRANGE", "z", "0", "1", "WITHSCORES", "BYLEX") + mb("ZRANGE", "z", "[b", "(d", "BYLEX")
    + mb("ZRANGE", "z", "+", "-", "BYLEX", "REV", "LIMIT", "1", "2") + mb("ZRANGE", "z", "a", "b", "BYLEX") + mb("ZREVRANGEBYSCORE", "z", "3", "1")
    + mb("ZRANGEBYSCORE", "z", "", "1") + mb("ZRANK", "z", "c") + mb("ZREVRANK", "z", "c") + mb("ZRANK", "z", "nope") + mb("ZCOUNT", "z", "(1", "3")
    + mb("ZCOUNT", "z", "x", "1") + mb("ZINCRBY", "z", "1.5", "a") + mb("ZINCRBY", "z", "1", "new") + mb("ZADD", "z", "-inf", "m")
    + mb("ZINCRBY", "z", "inf", "m") + mb("ZADD", "z", "INCR", "1", "a") + mb("ZADD", "z", "NX", "INCR", "1", "a") + mb("ZADD", "z", "1e400", "a")
    + mb("ZADD", "z", "1e-310", "tiny") + mb("ZSCORE", "z", "tiny") + mb("SET", "s", "v") + mb("ZRANGE", "s", "0", "1") + mb("ZRANK", "s", "a"),
    "rename-and-keys": mb("MSET", "a", "1", "b", "2") + mb("RENAME", "a", "c") + mb("GET", "c") + mb("RENAME", "a", "c") + mb("RENAME", "c", "c")
    + mb("RENAMENX", "c", "b") + mb("RENAMENX", "c", "d") + mb("EXPIRE", "b", "100") + mb("RENAME", "b", "e") + mb("TTL", "e") + mb("TTL", "b")
    + mb("SET", "f", "1", "EX", "50") + mb("RENAME", "d", "f") + mb("TTL", "f") + mb("TOUCH", "e", "f", "nope", "e") + mb("DEL", "e")
    + mb("KEYS", "[ef]") + mb("KEYS", "*") + mb("RANDOMKEY") + mb("DEL", "f") + mb("RANDOMKEY") + mb("TIME", "x"),
    # Times long enough not to pass during the exchange; TTL rounds to seconds.
    "expiry": mb("SET", "k", "v") + mb("EXPIRE", "nope", "10") + mb("EXPIRE", "k", "100") + mb("TTL", "k") + mb("EXPIRE", "k", "50", "GT")
    + mb("EXPIRE", "k", "200", "GT") + mb("EXPIRE", "k", "300", "LT") + mb("EXPIRE", "k", "10", "NX") + mb("TTL", "k") + mb("PERSIST", "k")
    + mb("PERSIST", "k") + mb("TTL", "k") + mb("TTL", "nope") + mb("PTTL", "k") + mb("EXPIRE", "k", "10", "nx", "xx") + mb("EXPIRE", "k", "10", "gt", "lt")
    + mb("EXPIRE", "k", "10", "bogus") + mb("EXPIRE", "k", "9223372036854775807") + mb("PEXPIRE", "k", "9223372036854775807")
    + mb("EXPIREAT", "k", "9223372036854775") + mb("EXPIRETIME", "k") + mb("PEXPIRETIME", "k") + mb("EXPIRE", "k", "0") + mb("EXISTS", "k")
    + mb("SET", "k", "v") + mb("PEXPIREAT", "k", "1") + mb("GET", "k") + mb("SET", "k", "v", "EX", "10", "EX", "20") + mb("TTL", "k")
    + mb("SET", "k", "v", "EX", "10", "PX", "20") + mb("SET", "k", "v", "KEEPTTL", "EX", "5") + mb("SET", "k", "w", "KEEPTTL") + mb("TTL", "k")
    + mb("SET", "k", "x", "EX", "100", "GET") + mb("SET", "k", "w") + mb("TTL", "k") + mb("SET", "k", "v", "EXAT", "1") + mb("EXISTS", "k")
    + mb("SET", "k", "v", "PX", "-1") + mb("SET", "k", "v", "EX", "9223372036854776") + mb("SETEX", "k", "0", "v") + mb("SETEX", "k", "100", "v")
    + mb("TTL", "k") + mb("PSETEX", "k", "x", "v") + mb("INCR", "c") + mb("EXPIRE", "c", "100") + mb("INCRBYFLOAT", "c", "1.5") + mb("TTL", "c")
    + mb("APPEND", "c", "0") + mb("GETSET", "c", "1") + mb("TTL", "c") + mb("HSET", "h", "f", "v") + mb("EXPIRE", "h", "100") + mb("HSET", "h", "g", "w")
    + mb("TTL", "h") + mb("HDEL", "h", "f", "g") + mb("TTL", "h") + mb("EXPIRE") + mb("TTL", "a", "b"),
    "inline": b"SET il 'it''s'\r\nSET il \"q\"\r\nGET il\r\nset  spaced   value \r\nget spaced\r\n",
    "large-value": mb("SET", "big", "x" * (1 << 20)) + mb("GET", "big") + mb("STRLEN", "big"),
    "pipelined": b"".join(mb("SET", f"p{i}", f"v{i}") for i in range(200)) + b"".join(mb("GET", f"p{i}") for i in range(0, 200, 7)),
    # Malformed requests: an error, then the connection closes (the sentinel never answers).
    "bad-multibulk-length": b"*x\r\n",
    "bad-bulk-length": b"*1\r\n$-5\r\n",
    "expected-dollar": mb("SET", "q", "1") + b"*1\r\n+PING\r\n",
    "unbalanced-quotes": b"SET \"a b\r\n",
    "closing-quote-glued": b"SET \"a\"b c\r\n",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_replies_match_redis_server_byte_for_byte(pair, case):
    ours, ref = pair
    want = exchange(ref.port, CASES[case])
    got = exchange(ours.port, CASES[case])
    assert got == want, f"\nredis-server: {want[:600]!r}\nssdlab:       {got[:600]!r}"


def read_reply(buf: bytes, at: int = 0):
    """One RESP2 reply from `buf` at `at`: (value, next position). Bulk strings are bytes, errors
    and statuses str (with their first byte), arrays lists, nil None."""
    end = buf.index(b"\r\n", at)
    kind, line = buf[at:at + 1], buf[at + 1:end]
    at = end + 2
    if kind in (b"+", b"-"):
        return kind.decode() + line.decode("latin1"), at
    if kind == b":":
        return int(line), at
    n = int(line)
    if kind == b"$":
        return (None, at) if n < 0 else (buf[at:at + n], at + n + 2)
    items = []
    for _ in range(n):
        item, at = read_reply(buf, at)
        items.append(item)
    return items, at


def read_replies(buf: bytes, n: int) -> list:
    out, at = [], 0
    for _ in range(n):
        item, at = read_reply(buf, at)
        out.append(item)
    assert at == len(buf), buf[at:at + 200]
    return out


def same_reply(kind: str, ours, ref) -> bool:
    """Whether two replies to a command of `kind` agree: exactly, or for the replies that depend
    on the clock or on a server's hash order, as closely as they can."""
    if kind == "time":
        return isinstance(ours, list) and len(ours) == 2 and all(x.isdigit() for x in ours) and abs(int(ours[0]) - int(ref[0])) <= 5
    if kind == "ttl":  # seconds, rounded: the two servers ran the command a moment apart
        return ours == ref or (isinstance(ours, int) and isinstance(ref, int) and ours >= 0 and ref >= 0 and abs(ours - ref) <= 2)
    if kind == "pttl":
        return ours == ref or (isinstance(ours, int) and isinstance(ref, int) and ours >= 0 and ref >= 0 and abs(ours - ref) <= 3000)
    if kind == "keys":
        return isinstance(ours, list) and sorted(ours) == sorted(ref)
    if kind == "randomkey":  # a key of the same keyspace (checked after the batch), or nil on both
        return (ours is None) == (ref is None)
    return ours == ref


def random_command(rng: random.Random, keys: list) -> tuple:
    """One request of the random streams and the kind of its reply (see same_reply). Hash and
    sorted-set commands go to keys of their type's pool three times in four (`keys` has a pool
    of each: h*, z*), the others to the other keys, else to any key."""
    plain = [x for x in keys if not x.startswith((b"h", b"z"))]
    k, k2 = (rng.choice(plain) if rng.random() < 0.9 else rng.choice(keys) for _ in range(2))
    kh = rng.choice([x for x in keys if x.startswith(b"h")]) if rng.random() < 0.75 else k
    kz = rng.choice([x for x in keys if x.startswith(b"z")]) if rng.random() < 0.75 else k
    v = rng.choice([b"", b"7", b"-3", b"2.5", b"v" * rng.randrange(1, 3000), bytes(rng.randrange(256) for _ in range(20))])
    # Hash fields and values stay small (Redis keeps such hashes in insertion order).
    f, hv = f"f{rng.randrange(6)}", rng.choice([str(rng.randrange(1000)), "x", "1.5"])
    num = str(rng.randrange(-20, 20))
    score = rng.choice([str(rng.randrange(-5, 5) / 2), "-inf", "+inf", "1e-3", "x"])
    bound = lambda: rng.choice(["-inf", "+inf", "(1", "2", "-1", "(0.5", "x"])  # noqa: E731
    lex = lambda: rng.choice(["-", "+", "[f1", "(f3", "[f5", "f2"])  # noqa: E731
    # Times far from passing during the test: from 100 s to a day; a few zero or negative (a delete now).
    secs = str(rng.choice([rng.randrange(100, 86400)] * 8 + [0, -5]))
    at = str(int(time.time()) + rng.randrange(100, 86400))
    opt = rng.choice([[], ["NX"], ["XX"], ["GT"], ["LT"], ["NX", "XX"]])
    cmds = [
        (mb("SET", k, v), ""), (mb("GET", k), ""), (mb("DEL", k, k2), ""), (mb("EXISTS", k), ""), (mb("INCR", k), ""),
        (mb("APPEND", k, v), ""), (mb("SETNX", k, v), ""), (mb("GETSET", k, v), ""), (mb("MGET", k, k2), ""),
        (mb("SET", k, v, "NX", "GET"), ""), (mb("STRLEN", k), ""), (mb("GETDEL", k), ""),
        (mb("HSET", kh, f, hv), ""), (mb("HGET", kh, f), ""), (mb("HDEL", kh, f), ""), (mb("HGETALL", kh), ""), (mb("TYPE", k), ""),
        (mb("HMSET", kh, f, hv, "z", "1"), ""), (mb("ZADD", kz, str(rng.randrange(-5, 5) / 2), f), ""),
        (mb("ZADD", kz, *rng.choice([[], ["CH"], ["GT"], ["NX"], ["XX", "CH"]]), score, f, str(rng.randrange(9)), "f9"), ""),
        (mb("ZREM", kz, f), ""), (mb("ZRANGEBYSCORE", kz, "-1", "(2", "WITHSCORES"), ""),
        # The commands of issue 46.
        (mb("KEYS", rng.choice(["*", "k1*", "?", "*[0-5]", "nothing"])), "keys"),
        (mb("ZRANGE", kz, num, str(rng.randrange(-5, 5)), *rng.choice([[], ["WITHSCORES"], ["REV"], ["REV", "WITHSCORES"]])), ""),
        (mb("ZRANGE", kz, bound(), bound(), "BYSCORE", *rng.choice([[], ["REV"], ["WITHSCORES"], ["LIMIT", "1", "2"], ["REV", "LIMIT", "0", "-1"]])), ""),
        (mb("ZRANGE", kz, lex(), lex(), "BYLEX", *rng.choice([[], ["REV"], ["LIMIT", "0", "1"]])), ""),
        (mb("ZREVRANGE", kz, num, "-1", *rng.choice([[], ["WITHSCORES"]])), ""), (mb("RENAME", k, k2), ""), (mb("RENAMENX", k, k2), ""),
        (mb("HINCRBY", kh, f, num), ""), (mb("HKEYS", kh), ""), (mb("HVALS", kh), ""), (mb("HSETNX", kh, f, hv), ""),
        (mb("ZRANK", kz, f), ""), (mb("ZREVRANK", kz, f), ""), (mb("ZCOUNT", kz, bound(), bound()), ""), (mb("ZINCRBY", kz, score, f), ""),
        (mb("GETRANGE", k, num, str(rng.randrange(-30, 30))), ""), (mb("SETRANGE", k, str(rng.randrange(-1, 40)), v[:50]), ""),
        (mb("INCRBYFLOAT", k, rng.choice(["0.1", "-1.5", "1e3", "3", "x", "2.5e-3", "0x1p-4", "inf"])), ""),
        (mb("HINCRBYFLOAT", kh, f, rng.choice(["0.1", "-2", "x", "1e2"])), ""),
        (mb("MSETNX", k, v, k2, "1"), ""), (mb("RANDOMKEY"), "randomkey"), (mb("TOUCH", k, k2), ""), (mb("TIME"), "time"),
        (mb("EXPIRE", k, secs, *opt), ""), (mb("PEXPIRE", k, secs + "000", *opt), ""), (mb("EXPIREAT", k, at, *opt), ""),
        (mb("PEXPIREAT", k, at + "000"), ""), (mb("TTL", k), "ttl"), (mb("PTTL", k), "pttl"), (mb("PERSIST", k), ""),
        (mb("EXPIRETIME", k), "ttl"), (mb("PEXPIRETIME", k), "pttl"),
        (mb("SET", k, v, *rng.choice([["EX", secs], ["PX", secs + "000"], ["EXAT", at], ["PXAT", at + "000"], ["KEEPTTL"], ["EX", secs, "GET"]])), ""),
        (mb("SETEX", k, secs, v), ""), (mb("PSETEX", k, secs + "000", v), ""),
    ]
    return cmds[rng.randrange(len(cmds))]


def test_random_command_streams_match_redis_server(pair):
    """Seeded random mixes of string, hash, sorted-set, keyspace and expiry commands on a small
    key space (so types clash), pipelined in batches, reply by reply; after each batch the two
    keyspaces (KEYS, sorted) are the same. Then keys with short times expire on both."""
    ours, ref = pair
    rng = random.Random(7)
    keys = [b"h0", b"h1", b"h2", b"z0", b"z1", b"z2"] + [f"k{i}".encode() for i in range(10)] + [b"\x00z", b"x y"]
    n = 0
    for _batch in range(8):
        # Now and then the typed pools start again (other commands turn them into strings).
        reqs = [random_command(rng, keys) if i % 50 else (mb("DEL", *keys[:6]), "") for i in range(300)]
        data = b"".join(r for r, _ in reqs)
        got, want = (read_replies(exchange(srv.port, data), len(reqs)) for srv in (ours, ref))
        for (req, kind), g, w in zip(reqs, got, want, strict=True):
            assert same_reply(kind, g, w), f"{req!r}:\nssdlab:       {g!r}\nredis-server: {w!r}"
            if kind == "randomkey" and g is not None:
                assert g in keys, g
        n += len(reqs)
        assert (sorted(read_reply(exchange(ours.port, mb("KEYS", "*")))[0])
                == sorted(read_reply(exchange(ref.port, mb("KEYS", "*")))[0]))
    assert n >= 2000
    assert exchange(ours.port, mb("DBSIZE")) == exchange(ref.port, mb("DBSIZE"))
    # Short times: gone on both once passed, whether read (lazy expiry) or not (active).
    short = b"".join(mb("SET", f"short{i}", "v", "PX", str(100 + 10 * i)) for i in range(20)) + mb("PEXPIRE", "k1", "150")
    assert exchange(ours.port, short) == exchange(ref.port, short)
    time.sleep(0.6)
    probe = mb("EXISTS", *[f"short{i}" for i in range(0, 20, 2)], "k1") + mb("DBSIZE") + mb("GET", "short1")
    assert exchange(ours.port, probe) == exchange(ref.port, probe)


def test_scan_walks_the_same_keys_as_redis_server(pair):
    """redis-py's scan_iter (cursor after cursor) over strings, hashes and sorted sets finds the
    same keys on both servers, for MATCH patterns, TYPE filters and small COUNTs; each key once."""
    import redis

    ours, ref = pair
    clients = [redis.Redis(port=srv.port) for srv in (ours, ref)]
    for c in clients:
        p = c.pipeline(transaction=False)
        for i in range(600):
            p.set(f"user:{i:04d}", i)
        for i in range(40):
            p.hset(f"h:{i}", "f", i)
            p.zadd(f"z[{i}]", {"m": i})
        p.set(b"bin\x00key", b"x")
        p.execute()
    for kw in ({}, {"match": "user:01*"}, {"match": "user:0?5?"}, {"match": "z\\[1*"}, {"match": "h:[1-2]"},
               {"match": "*[^0-9]"}, {"count": 3, "match": "h:*"}, {"_type": "hash"}, {"_type": "zset", "count": 7},
               {"match": "nothing*"}):
        ours_keys = list(clients[0].scan_iter(**kw))
        assert len(ours_keys) == len(set(ours_keys)), f"{kw}: a key came twice"
        assert set(ours_keys) == set(clients[1].scan_iter(**kw)), kw
    for c in clients:
        c.close()


def test_redis_clients_drive_it_and_shutdown_writes_the_figures(tmp_path):
    metrics = tmp_path / "m" / "metrics.json"
    srv = start_ssdlab(tmp_path, "--audit", "--metrics-out", str(tmp_path / "m"))
    try:
        port = str(srv.port)
        bench = subprocess.run(["redis-benchmark", "-p", port, "-t", "set,get", "-n", "3000", "-P", "16", "-r", "500", "-q"],
                               capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0 and "SET:" in bench.stdout and "GET:" in bench.stdout, bench.stdout + bench.stderr
        cli = lambda *a: subprocess.run(["redis-cli", "-p", port, *a], capture_output=True, text=True, timeout=30).stdout  # noqa: E731
        assert cli("SET", "hello", "world").strip() == "OK" and cli("GET", "hello").strip() == "world"
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=30)
        blob = bytes(random.Random(1).randrange(256) for _ in range(100_000))
        assert r.set("blob", blob) and r.get("blob") == blob
        pipe = r.pipeline(transaction=False)
        for i in range(100):
            pipe.set(f"doomed:{i}", b"secret-%d" % i)
        assert all(pipe.execute())
        assert r.delete(*[f"doomed:{i}" for i in range(100)]) == 100
        assert r.get("doomed:5") is None and r.dbsize() >= 3
        assert "ssdlab" in r.info()["redis_version"]
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    m = json.loads(metrics.read_text())
    assert m["total_commands_processed"] >= 6000 and m["protocol_errors"] == 0
    st = m["store"]
    assert st["lsm"]["deletes"] == 100 and st["lsm"]["puts"] >= 3000
    assert st["deletion_persistence"]["deletes"] == 100  # DEL reached the LSM's tracked delete path
    audit = m["closing"]["audit"]
    assert audit["deletes"] == 100  # the NAND was searched for every deleted value
    assert "served" in srv.log.read_text()


def wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_an_expired_key_is_a_tracked_delete_of_the_store(tmp_path):
    """Keys whose time passes are deleted through the store, read (lazy expiry) or not (the
    server's timer): each is a tombstone the deletion tracker counts, like a client's DEL."""
    metrics = tmp_path / "m"
    srv = start_ssdlab(tmp_path, "--audit", "--metrics-out", str(metrics))
    try:
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=30)
        pipe = r.pipeline(transaction=False)
        for i in range(50):
            pipe.set(f"session:{i}", b"secret-%d" % i, px=300)
        pipe.set("keep", "v")
        pipe.set("later", "v", ex=1000)
        pipe.hset("cart", "item", "1")
        pipe.pexpire("cart", 300)
        assert all(pipe.execute())
        assert r.get("session:7") == b"secret-7" and r.ttl("later") in (999, 1000)
        time.sleep(0.35)
        assert r.get("session:3") is None  # read after its time: deleted now, answered as missing
        # The others, never read again, go by the timer.
        assert wait_for(lambda: r.info()["expired_keys"] == 51), r.info()["expired_keys"]
        assert r.dbsize() == 2 and r.exists("keep", "later") == 2 and r.info()["keys_with_expiry"] == 1
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    m = json.loads((metrics / "metrics.json").read_text())
    assert m["expired_keys"] == 51
    st = m["store"]
    assert st["lsm"]["deletes"] == 51 and st["deletion_persistence"]["deletes"] == 51
    assert m["closing"]["audit"]["deletes"] == 51  # the NAND was searched for every expired value


def test_expiry_times_survive_a_restart_and_keys_expire_after_it(tmp_path):
    """--data DIR: a key's time is stored with its value, so a restarted server answers TTL as
    before and deletes a key whose time passed while it was down or after its start, unread."""
    data = tmp_path / "data"
    srv = start_ssdlab(tmp_path, "--data", str(data))
    try:
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=30)
        r.set("long", "v", ex=1000)
        r.set("soon", "v", px=1500)
        r.set("plain", "v")
        r.hset("h", "f", "v")
        r.expire("h", 2000)
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    metrics = tmp_path / "m1"
    srv = start_ssdlab(tmp_path, "--data", str(data), "--metrics-out", str(metrics))
    try:
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=30)
        assert 990 <= r.ttl("long") <= 1000 and 1990 <= r.ttl("h") <= 2000 and r.ttl("plain") == -1
        assert wait_for(lambda: r.info()["expired_keys"] == 1)  # "soon", never read
        assert r.exists("soon") == 0 and r.dbsize() == 3
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    m = json.loads((metrics / "metrics.json").read_text())
    assert m["expired_keys"] == 1 and m["store"]["lsm"]["deletes"] == 1
    srv = start_ssdlab(tmp_path, "--data", str(data))
    try:
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=30)
        assert r.dbsize() == 3 and r.get("soon") is None and 980 <= r.ttl("long") <= 1000
    finally:
        assert srv.stop() == 0, srv.log.read_text()


def test_the_old_metrics_file_option_still_writes_the_figures(tmp_path):
    """--metrics FILE, the spelling before --metrics-out DIR, is kept as a hidden alias."""
    metrics = tmp_path / "old.json"
    srv = start_ssdlab(tmp_path, "--metrics", str(metrics))
    assert srv.stop() == 0, srv.log.read_text()
    assert json.loads(metrics.read_text())["store"]["lsm"]["puts"] == 0


def test_bad_options_are_one_line_errors(tmp_path):
    for args, want in ((["--max-connections", "0"], "--max-connections: 0 is outside 1..65536"),
                       (["--idle-timeout", "x"], "--idle-timeout: 'x' is not a number of seconds"),
                       (["--listen", "0.0.0.0:6399"], "non-loopback")):
        p = subprocess.run(SSDLAB + ["kv", "serve", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and want in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_bad_store_value_names_its_key(tmp_path):
    """A value the store's key cannot hold names the key (it said `[lsm]: OverflowError`)."""
    for value, want in (("-1", "[lsm]: memtable_bytes: OverflowError: can't convert negative int to unsigned"),
                        ("18446744073709551616", "[lsm]: memtable_bytes: 18446744073709551616 is out of range")):
        spec = write(tmp_path / "bad.toml", SPEC.replace("262144", value))
        p = subprocess.run(SSDLAB + ["kv", "serve", str(spec), "--listen", f"127.0.0.1:{free_port()}"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and want in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_store_with_data_loses_no_acknowledged_write_to_kill_9(tmp_path):
    """--data DIR: redis-cli's SETs are answered only once journaled on disk; after kill -9 in the
    middle of them, a server on the same DIR has every acknowledged one (and the DELs), and a
    clean restart after that gives back the same store, counters included."""
    data = tmp_path / "data"
    n = 20000
    cmds = "".join(f"SET key:{i} value-{i}-{'x' * (i % 300)}\n" for i in range(n))
    cmds = "SET doomed secret\nDEL doomed\n" + cmds
    srv = start_ssdlab(tmp_path, "--data", str(data))
    cli = subprocess.Popen(["redis-cli", "-p", str(srv.port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert cli.stdin is not None and cli.stdout is not None
    cli.stdin.write(cmds)
    cli.stdin.close()
    replies = []
    for line in cli.stdout:  # redis-cli runs the commands one at a time, printing each reply
        replies.append(line.strip())
        if len(replies) == 3000:
            srv.stop(signal.SIGKILL)
            break
    cli.kill()
    cli.wait()
    replies += [x.strip() for x in cli.stdout.read().splitlines()]
    acked = sum(1 for x in replies[2:] if x == "OK")
    assert replies[:2] == ["OK", "1"] and 3000 <= acked < n, replies[:5]

    metrics = tmp_path / "m1"
    srv = start_ssdlab(tmp_path, "--data", str(data), "--metrics-out", str(metrics))
    try:
        r = redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=60)
        pipe = r.pipeline(transaction=False)
        for i in range(acked):
            pipe.get(f"key:{i}")
        got = pipe.execute()
        lost = [i for i, v in enumerate(got) if v != f"value-{i}-{'x' * (i % 300)}".encode()]
        assert not lost, f"{len(lost)} acknowledged writes lost, first key:{lost[0]}"
        assert r.get("doomed") is None
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    assert "commands replayed" in srv.log.read_text()
    first = json.loads((metrics / "metrics.json").read_text())["store"]

    metrics = tmp_path / "m2"
    srv = start_ssdlab(tmp_path, "--data", str(data), "--metrics-out", str(metrics))
    assert srv.stop() == 0, srv.log.read_text()
    again = json.loads((metrics / "metrics.json").read_text())["store"]
    for k in ("puts", "deletes", "gets", "flushes", "compaction_write_bytes"):
        assert again["lsm"][k] == first["lsm"][k], k
    assert again["counters"]["nand_write_bytes"] == first["counters"]["nand_write_bytes"]


def test_a_data_directory_made_with_another_config_is_refused(tmp_path):
    data = tmp_path / "data"
    srv = start_ssdlab(tmp_path, "--data", str(data))
    assert srv.stop() == 0, srv.log.read_text()
    other = write(tmp_path / "other.toml", SPEC.replace("262144", "524288"))
    p = subprocess.run(SSDLAB + ["kv", "serve", str(other), "--listen", f"127.0.0.1:{free_port()}", "--data", str(data)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "another configuration" in p.stderr and "Traceback" not in p.stderr, p.stderr


# 48 MiB of zones (4 dies x 48 blocks x 16 pages of 16 KiB): 250 values of 100 KB fill it after a
# couple of rounds of overwrites.
FULL_SPEC = """
[device]
preset = "zns-ssd"
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 1, blocks_per_plane = 48, pages_per_block = 16 }
zns = { zone_capacity = 1.0 }

[lsm]
memtable_bytes = 262144
"""


def test_a_full_device_keeps_serving_reads_and_deletes_and_reuses_what_they_free(tmp_path):
    port = free_port()
    spec = write(tmp_path / "full.toml", FULL_SPEC)
    srv = Server(SSDLAB + ["kv", "serve", str(spec), "--listen", f"127.0.0.1:{port}", "-q"], port, tmp_path / "full.log")
    try:
        r = redis.Redis(port=port, socket_timeout=60)
        value = lambda rnd, i: bytes([rnd, i % 256]) * 50_000  # noqa: E731
        acked: dict = {}
        oom = None
        # Overwrites alone do not fill it (compactions drop the old versions); new keys do.
        for rnd in range(2):
            for i in range(1000):
                if rnd == 0 and i >= 250:
                    break
                try:
                    r.set(f"k{i:03d}", value(rnd, i))
                    acked[f"k{i:03d}"] = value(rnd, i)
                except redis.exceptions.OutOfMemoryError as e:  # Redis's -OOM error class
                    oom = str(e)
                    break
        assert oom is not None, f"the device never filled ({len(acked)} keys of 100 KB): {oom}"
        assert len(acked) > 250
        assert oom.startswith("command not allowed when the device is full"), oom
        # Everything acknowledged is still readable; the other commands work.
        assert r.dbsize() == len(acked)
        for k in list(acked)[::25]:
            assert r.get(k) == acked[k] and r.exists(k) == 1
        # Deletes are taken, and what they free takes new writes.
        doomed = list(acked)[: len(acked) // 2]
        assert r.delete(*doomed) == len(doomed)
        for k in doomed:
            del acked[k]
        for i in range(len(doomed) // 2):
            r.set(f"new{i:03d}", value(9, i))
            acked[f"new{i:03d}"] = value(9, i)
        assert r.dbsize() == len(acked)
        for k in list(acked)[::10]:
            assert r.get(k) == acked[k]
        r.flushall()
        assert r.dbsize() == 0
        r.set("after", b"flush")
        assert r.get("after") == b"flush"
    finally:
        assert srv.stop() == 0, srv.log.read_text()[-2000:]
