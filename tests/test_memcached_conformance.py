"""`ssdlab cache serve` against the real memcached (Debian's memcached 1.6, installed by
scripts/setup.sh): the same seeded random command sequences sent to both, replies compared
(CAS values and timing-dependent stats excepted); and libmemcached's conformance tool
(memccapable, Debian's libmemcached-tools) run against both, all its text-protocol tests passing.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from test_cache_serve import Served, free_port, stats

# Sized so nothing is evicted: every item of a sequence fits the DRAM tier (64 MiB), as it
# fits memcached's 64 MiB.
SPEC = """
[device]
preset = "fdp-ssd"
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 2, pages_per_block = 16, blocks_per_plane = 256 }
fdp = { handles = 4, ru_superblocks = 1 }

[cache]
dram_bytes = 67108864
utilization = 0.0225
soc_fraction = 0.0025
region_bytes = 1048576
loc_write_bytes = 262144
region_eviction = "fifo"
"""

# Counters whose values do not depend on timing (uptime, bytes, connections and item counts
# that include lazily expired items do).
COMPARED_STATS = ["cmd_get", "cmd_set", "cmd_touch", "get_hits", "get_misses", "delete_hits", "delete_misses", "incr_hits",
                  "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval", "touch_hits", "touch_misses"]

needs_memcached = pytest.mark.skipif(shutil.which("memcached") is None, reason="memcached missing: run scripts/setup.sh")


class Memcached:
    """The real memcached on a free loopback port, killed afterwards."""

    def __init__(self):
        self.port = free_port()
        user = ["-u", "root"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64", "-c", "64"] + user,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"memcached did not start (rc {self.proc.poll()})") from None
                time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    if shutil.which("memcached") is None:
        pytest.skip("memcached missing: run scripts/setup.sh")
    ref = Memcached()
    try:
        ours = Served(tmp_path_factory.mktemp("mc-diff"), spec=SPEC, args=[]).start()
    except BaseException:
        ref.stop()
        raise
    yield ref, ours
    ref.stop()
    assert ours.stop() == 0, ours.log.read_text()


class Conn:
    """A raw connection that sends a request followed by `mn` and reads everything up to the
    `MN` line, so noreply commands and errors cannot leave the two streams out of step."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise AssertionError(f"connection closed; pending {self.buf[:200]!r}")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise AssertionError("connection closed in a value")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def ask(self, req: bytes) -> list:
        self.s.sendall(req + b"mn\r\n")
        out = []
        while True:
            line = self._line()
            if line == b"MN":
                return out
            if line.startswith(b"VALUE "):
                n = int(line.split(b" ")[3])
                out.append((line, self._exact(n + 2)))
            elif line.startswith(b"VA "):
                out.append((line, self._exact(int(line.split(b" ")[1]) + 2)))
            else:
                out.append(line)

    def close(self):
        self.s.close()


def cas_of(reply: list, key: bytes):
    for r in reply:
        if isinstance(r, tuple) and r[0].split(b" ")[1] == key and len(r[0].split(b" ")) == 5:
            return int(r[0].split(b" ")[4])
    return None


META_CODES = (b"VA ", b"HD", b"NS", b"EX", b"NF", b"EN")


def meta_normalized(line: bytes) -> bytes:
    """A meta reply's CAS (c...) and remaining TTL (t..., which may cross a second between
    the two servers) as placeholders."""
    f = line.split(b" ")
    return b" ".join(f[:1] + [b"c<cas>" if t[:1] == b"c" else b"t<ttl>" if t[:1] == b"t" and t != b"t-1" else t for t in f[1:]])


def normalized(reply: list) -> list:
    """CAS uniques differ between servers; STAT lines are reduced to the compared counters."""
    out = []
    for r in reply:
        if isinstance(r, tuple) and r[0].startswith(b"VA "):
            out.append((meta_normalized(r[0]), r[1]))
        elif isinstance(r, bytes) and r.startswith(META_CODES):
            out.append(meta_normalized(r))
        elif isinstance(r, tuple):
            f = r[0].split(b" ")
            out.append((b" ".join(f[:4] + ([b"<cas>"] if len(f) == 5 else [])), r[1]))
        elif r.startswith(b"STAT "):
            k = r.split(b" ")[1].decode()
            if k in COMPARED_STATS:
                out.append(r)
        elif r.startswith(b"VERSION "):
            out.append(b"VERSION")
        else:
            out.append(r)
    return out


KEYS = [b"k%d" % i for i in range(12)] + [b"x" * 250, b"y" * 251, b"k:\xc3\xa9", b"a-b_c.d"]
SIZES = [0, 1, 2, 5, 100, 1000, 4096, 65536, 300_000]
NUMBERS = [b"0", b"1", b"10", b"99", b"100", b"007", b" 5", b"18446744073709551615", b"18446744073709551616", b"-1", b"12abc",
           b"4x", b"", b"  ", b"+3"]
EXPTIMES = [b"0", b"0", b"0", b"-1", b"1000", b"%d" % (int(time.time()) + 100_000), b"1000000000"]


def random_op(rng: random.Random, cas_known: dict):
    """One request: bytes, or a function of the server's index (cas needs each server's own
    CAS unique)."""
    key = rng.choice(KEYS)
    # A storage line refused for its key is followed by its data read as a command (in both
    # servers); keep those data blocks to one known line (in the "bad" list).
    data_key = key if len(key) <= 250 else KEYS[0]
    nr = b" noreply" if rng.random() < 0.2 else b""
    exp = rng.choice(EXPTIMES)
    # Flags past 32 bits: memcached (64-bit build) truncates them to 32 bits, and so must ssdlab.
    flags = rng.choice([b"0", b"1", b"4294967295", b"42", b"4294967296", b"18446744073709551615"])
    kind = rng.choices(["store", "get", "arith", "delete", "touch", "cas", "flush", "misc", "bad", "stats", "meta"],
                       [30, 25, 10, 8, 6, 8, 1, 3, 5, 2, 25])[0]
    if kind == "meta":
        return random_meta(rng, data_key, exp)
    if kind == "store":
        cmd = rng.choice([b"set", b"add", b"replace", b"append", b"prepend"])
        if rng.random() < 0.3:
            data = rng.choice(NUMBERS)
        else:
            data = rng.randbytes(rng.choice(SIZES))
        return b"%s %s %s %s %d%s\r\n%s\r\n" % (cmd, data_key, flags, exp, len(data), nr, data)
    if kind == "get":
        keys = b" ".join(rng.choice(KEYS[:-3]) for _ in range(rng.randint(1, 6)))
        cmd = rng.choice([b"get", b"gets", b"gat", b"gats"])
        if cmd.startswith(b"gat"):
            return b"%s %s %s\r\n" % (cmd, rng.choice([b"0", b"1000", b"-1"]) if rng.random() < 0.9 else exp, keys)
        return b"%s %s\r\n" % (cmd, keys)
    if kind == "arith":
        return b"%s %s %s%s\r\n" % (rng.choice([b"incr", b"decr"]), key, rng.choice(NUMBERS[:-3] + [b"5", b"x"]), nr)
    if kind == "delete":
        return b"delete %s%s%s\r\n" % (key, rng.choice([b"", b"", b" 0", b" 5"]), nr)
    if kind == "touch":
        return b"touch %s %s%s\r\n" % (key, rng.choice([b"0", b"1000", b"-1", b"x"]), nr)
    if kind == "cas":
        how = rng.choice(["good", "bad", "good"])
        data = rng.randbytes(rng.choice(SIZES[:6]))

        def cas_req(i: int) -> bytes:
            c = cas_known[i].get(data_key)
            unique = (c if how == "good" else c + 1_000_000) if c is not None else 12345
            return b"cas %s %s %s %d %d%s\r\n%s\r\n" % (data_key, flags, exp, len(data), unique, nr, data)
        return cas_req
    if kind == "flush":
        return b"flush_all%s%s\r\n" % (rng.choice([b"", b" 0", b" -1"]), nr)
    if kind == "misc":
        return rng.choice([b"verbosity 1\r\n", b"verbosity 1 noreply\r\n", b"verbosity\r\n", b"verbosity x\r\n", b"version\r\n",
                           b"version foo bar\r\n", b"version noreply\r\n"])
    if kind == "bad":
        return rng.choice([b"get\r\n", b"set k0 0 0\r\n", b"bogus\r\n", b"x\r\n", b"incr k0\r\n", b"delete\r\n", b"touch k0\r\n",
                           b"flush_all x y z\r\n", b"stats noreply\r\n", b"stats detail\r\n", b"gat x k0\r\n",
                           b"set k0 0 0 abc\r\nhello\r\n", b"set k0 0 x 1\r\nq\r\n", b"cas k0 0 0 1 x\r\nq\r\n",
                           b"set k0 0 0 3\r\nabcde\r\n", b"set k0 0 0 2000000\r\n" + b"z" * 2_000_000 + b"\r\n",
                           b"set k0 0 0 -1\r\n", b"set " + b"y" * 251 + b" 0 0 1\r\nq\r\n", b"incr k0 -5\r\n", b"decr k0 18446744073709551616\r\n"])
    return rng.choice([b"stats\r\n", b"stats\r\n", b"stats reset\r\n"])


def random_meta(rng: random.Random, key: bytes, exp: bytes):
    """A meta command (mg, ms, md, ma) with a random subset of the flags ssdlab serves, in a
    random order; now and then a malformed one."""
    def pick(flags: list) -> bytes:
        chosen = rng.sample(flags, rng.randint(0, min(4, len(flags))))
        return b"".join(b" " + f for f in chosen)

    opaque = b"O%d" % rng.randrange(1000)
    which = rng.choices(["mg", "ms", "md", "ma", "bad"], [35, 30, 10, 15, 10])[0]
    if which == "mg":
        return b"mg %s%s\r\n" % (key, pick([b"v", b"k", b"c", b"f", b"s", b"t", b"q", opaque, b"T" + exp]))
    if which == "ms":
        data = rng.choice(NUMBERS[:6]) if rng.random() < 0.3 else rng.randbytes(rng.choice(SIZES[:7]))
        flags = [b"c", b"k", b"q", opaque, b"F%d" % rng.choice([0, 7, 4294967295]), b"T" + exp,
                 b"M" + rng.choice([b"E", b"A", b"P", b"R", b"S"])]

        def ms(i: int, cas_known: dict) -> bytes:
            c = cas_known[i].get(key)
            cas = [] if rng_cas is None else [b"C%d" % (c if (c is not None and rng_cas) else 12345)]
            return b"ms %s %d%s%s\r\n%s\r\n" % (key, len(data), chosen, b"".join(b" " + x for x in cas), data)
        rng_cas = rng.choice([None, None, True, False])
        chosen = pick(flags)
        return ("meta-cas", ms)
    if which == "md":
        return b"md %s%s\r\n" % (key, pick([b"k", b"q", opaque]))
    if which == "ma":
        return b"ma %s%s\r\n" % (key, pick([b"v", b"k", b"c", b"t", b"q", opaque, b"N" + rng.choice([b"0", b"1000"]),
                                               b"J%d" % rng.choice([0, 10, 18446744073709551615]),
                                               b"D%d" % rng.choice([1, 3, 100, 18446744073709551615]),
                                               b"M" + rng.choice([b"I", b"D", b"+", b"-"])]))
    return rng.choice([b"mg\r\n", b"ms k0\r\n", b"ms k0 x\r\n", b"mg k0 zz\r\n", b"mg k0 v v\r\n", b"mg k0 O" + b"9" * 33 + b"\r\n",
                       b"ms k0 1 MX\r\n1\r\n", b"ma k0 MX\r\n", b"md " + b"y" * 251 + b"\r\n", b"ms k0 2 T-1\r\nhi\r\n"])


@needs_memcached
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_command_sequences_get_the_same_replies_as_memcached(servers, seed):
    ref, ours = servers
    conns = [Conn(ref.port), Conn(ours.port)]
    try:
        for c in conns:
            c.ask(b"flush_all\r\nstats reset\r\n")
        rng = random.Random(seed)
        cas_known = [{}, {}]
        for step in range(600):
            op = random_op(rng, cas_known)
            replies = []
            for i, c in enumerate(conns):
                if isinstance(op, tuple):  # a meta set whose C token is each server's own CAS
                    req = op[1](i, cas_known)
                else:
                    req = op(i) if callable(op) else op
                replies.append(c.ask(req))
            a, b = (normalized(r) for r in replies)
            shown = (op[1](0, cas_known) if isinstance(op, tuple) else op(0) if callable(op) else op)[:120]
            assert a == b, f"seed {seed} step {step}: {shown!r}\nmemcached: {a[:6]}\nssdlab:    {b[:6]}"
            for i, r in enumerate(replies):
                for key in KEYS:
                    c = cas_of(r, key)
                    if c is not None:
                        cas_known[i][key] = c
            if step % 7 == 0:
                # Learn each server's CAS uniques for the keys (gets), so cas hits are exercised.
                keys = b" ".join(KEYS[:-3])
                r = [c.ask(b"gets %s\r\n" % keys) for c in conns]
                assert normalized(r[0]) == normalized(r[1]), f"seed {seed} step {step}: gets\n{r[0]}\n{r[1]}"
                for i in range(2):
                    cas_known[i] = {k: cas_of(r[i], k) for k in KEYS if cas_of(r[i], k) is not None}
        # The final word: every key's value and the counters.
        r = [c.ask(b"get %s\r\nstats\r\n" % b" ".join(KEYS[:-3])) for c in conns]
        assert normalized(r[0]) == normalized(r[1])
    finally:
        for c in conns:
            c.close()


@needs_memcached
def test_a_2000_key_multiget_is_answered_like_memcached(servers):
    ref, ours = servers
    conns = [Conn(ref.port), Conn(ours.port)]
    keys = [b"mget-%04d-%s" % (i, b"p" * 200) for i in range(2000)]
    for c in conns:
        c.s.sendall(b"".join(b"set %s 0 0 4 noreply\r\nv%03d\r\n" % (k, i % 1000) for i, k in enumerate(keys)))
    r = [normalized(c.ask(b"get " + b" ".join(keys) + b"\r\n")) for c in conns]
    assert len(r[1]) == 2001 and r[0] == r[1]
    for c in conns:
        c.close()


def memccapable(port: int) -> subprocess.CompletedProcess:
    return subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(port), "-a", "-t", "10"], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(shutil.which("memccapable") is None, reason="libmemcached-tools missing: run scripts/setup.sh")
def test_libmemcached_conformance_tool_passes_every_text_protocol_test(tmp_path):
    ours = Served(tmp_path, spec=SPEC, args=[]).start()
    try:
        p = memccapable(ours.port)
    finally:
        assert ours.stop() == 0, ours.log.read_text()
    results = re.findall(r"^(ascii \S+(?: noreply)?)\s+\[(\w+)\]", p.stdout, re.M)
    failed = [name for name, res in results if res != "pass"]
    assert len(results) >= 27 and not failed and p.returncode == 0, f"failed: {failed}\n{p.stdout}\n{p.stderr}"


@pytest.mark.skipif(shutil.which("memccapable") is None or shutil.which("memcached") is None,
                    reason="memcached or libmemcached-tools missing: run scripts/setup.sh")
def test_the_conformance_tool_runs_the_same_tests_on_memcached():
    ref = Memcached()
    try:
        p = memccapable(ref.port)
    finally:
        ref.stop()
    assert p.returncode == 0 and "All tests passed" in p.stdout, p.stdout


def test_binary_protocol_clients_are_refused_at_once(tmp_path):
    ours = Served(tmp_path, spec=SPEC, args=[]).start()
    try:
        s = socket.create_connection(("127.0.0.1", ours.port), timeout=5)
        s.sendall(bytes([0x80, 0x0b]) + bytes(22))  # a binary "version" request
        t = time.time()
        resp = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
        assert time.time() - t < 3
        assert resp[0] == 0x81 and int.from_bytes(resp[6:8], "big") == 0x83 and b"text protocol" in resp[24:]
        s.close()
    finally:
        assert ours.stop() == 0, ours.log.read_text()



SERVE_TOML = Path(__file__).resolve().parent.parent / "experiments" / "fdp-cache" / "serve.toml"


@pytest.mark.parametrize("cachelib_routing", [False, True])
def test_the_shipped_serve_config_holds_20k_items_of_1_1_kb_without_evicting(tmp_path, cachelib_routing):
    """A standard key-value benchmark's load (20 K records of ~1.1 KB, 22 MB: a few percent of
    the cache): with the shipped config every record reads back and nothing is evicted, as with
    memcached; with CacheLib's routing (items up to 2 KiB in 4 KiB SOC buckets) buckets overflow
    early, which is why the shipped config routes items above a quarter bucket to the LOC."""
    from pymemcache.client.base import Client

    spec = SERVE_TOML.read_text()
    if cachelib_routing:
        spec = spec.replace("small_item_max_bytes = 1024", "small_item_max_bytes = 2048")
    ours = Served(tmp_path, spec=spec, args=[]).start()
    try:
        c = Client(("127.0.0.1", ours.port), connect_timeout=10, timeout=60)
        rng = random.Random(7)
        records = {f"user{i:08d}": rng.randbytes(1100) for i in range(20_000)}
        keys = list(records)
        for i in range(0, len(keys), 500):
            assert not c.set_many({k: records[k] for k in keys[i:i + 500]}, noreply=False)
        got = {}
        for i in range(0, len(keys), 500):
            got.update(c.get_many(keys[i:i + 500]))
        s = stats(c)
        c.close()
    finally:
        assert ours.stop() == 0, ours.log.read_text()
    missing = len(keys) - len(got)
    evictions = int(s["evictions"])
    if cachelib_routing:
        assert evictions > 0 and missing > 0, s
    else:
        assert missing == 0 and evictions == 0 and int(s["soc_evictions"]) == 0, s
        assert all(got[k] == v for k, v in records.items())
