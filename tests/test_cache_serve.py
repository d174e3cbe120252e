"""`ssdlab cache serve` with memcached clients ssdlab did not write: pymemcache (PyPI) and
libmemcached's memccp/memccat/memcstat (Debian), plus raw sockets for bad input. Values cross
the SOC/LOC threshold, spill from DRAM to flash and out of flash; what comes back is exact or a
miss, never another value."""

import json
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from clitools import SSDLAB, free_port, stop_process, write

pymemcache = pytest.importorskip("pymemcache", reason="pymemcache missing: run scripts/setup.sh (make setup)")
from pymemcache.client.base import Client  # noqa: E402

# 512 MiB raw FDP device (4 handles); a cache small enough that a few MB of values evict from
# every tier: DRAM 256 KiB, SOC 1 MiB (~270 buckets of 4 KiB), LOC 8 regions of 1 MiB.
SPEC = """
[device]
preset = "fdp-ssd"
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 2, pages_per_block = 16, blocks_per_plane = 256 }
fdp = { handles = 4, ru_superblocks = 1 }

[cache]
dram_bytes = 262144
utilization = 0.0225
soc_fraction = 0.0025
region_bytes = 1048576
loc_write_bytes = 262144
region_eviction = "fifo"
"""
MAX_VALUE = 900_000


class Served:
    """`ssdlab cache serve` as a child process, logging to a file."""

    def __init__(self, tmp: Path, spec: str = SPEC, args=()):
        self.spec = write(tmp / f"cache-{time.monotonic_ns()}.toml", spec)
        self.port = free_port()
        self.log = tmp / f"serve-{self.port}.log"
        self.args = list(args)

    def start(self) -> "Served":
        self.logf = open(self.log, "w")  # noqa: SIM115 (the server's log while it runs; closed in stop)
        self.proc = subprocess.Popen(SSDLAB + ["cache", "serve", str(self.spec), "--listen", f"127.0.0.1:{self.port}"] + self.args,
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if "listening on" in self.log.read_text():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"ssdlab cache serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"ssdlab cache serve did not start:\n{self.log.read_text()}")

    def client(self, **kw) -> Client:
        return Client(("127.0.0.1", self.port), connect_timeout=10, timeout=30, **kw)

    def raw(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return s

    def stop(self, sig=signal.SIGTERM) -> int:
        return stop_process(self.proc, self.logf, sig)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("cache-serve"), args=["--max-value-bytes", str(MAX_VALUE)]).start()
    yield s
    assert s.stop() == 0, s.log.read_text()


def stats(c: Client) -> dict:
    out = {}
    for k, v in c.stats().items():
        k = k.decode() if isinstance(k, bytes) else k
        v = v.decode() if isinstance(v, bytes) else v
        try:
            v = int(v)
        except (TypeError, ValueError):
            try:
                v = float(v)
            except (TypeError, ValueError):
                pass
        out[k] = v
    return out


def rnd(n: int, seed) -> bytes:
    return random.Random(seed).randbytes(n)


def recv_until(s: socket.socket, end: bytes) -> bytes:
    buf = b""
    while not buf.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def closed(s: socket.socket) -> bool:
    """The server closed the connection (EOF or reset) within the socket's timeout."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


SIZES = [10, 1024, 2000, 2100, 64 << 10, MAX_VALUE]


def test_values_cross_the_soc_loc_threshold_and_read_back_exact_from_flash(server):
    c = server.client()
    vals = {f"x:{n}:{i}": rnd(n, f"x{n}{i}") for n in SIZES for i in range(2)}
    for k, v in vals.items():
        assert c.set(k, v, noreply=False)
        assert c.get(k) == v  # from DRAM
    s0 = stats(c)
    # Large filler pushes everything out of the 256 KiB DRAM tier into the LOC, past the SOC.
    for j in range(4):
        c.set(f"filler:{j}", rnd(200_000, j), noreply=False)
    got = c.get_many(list(vals))
    assert got == vals, "values read back from SOC and LOC differ"
    s1 = stats(c)
    assert s1["nvm_hits"] - s0["nvm_hits"] >= len(vals) - 2, (s0, s1)
    assert s1["soc_items"] >= 6 and s1["loc_items"] >= 6
    assert s1["device_host_write_bytes"] > s0["device_host_write_bytes"]
    c.close()


def test_eviction_from_every_tier_is_a_miss_never_wrong_data(server):
    c = server.client()
    s0 = stats(c)
    last = {}
    rng = random.Random(5)
    # ~1.6 MB of small items for a 1 MiB SOC, ~14 MB of large ones for an 8 MiB LOC; some keys
    # are set again after their first value went to flash.
    for i in range(1600):
        k = f"s:{i % 1300}"
        last[k] = rnd(rng.choice([50, 700, 1500, 2000]), f"s{i}")
        c.set(k, last[k])
    for i in range(60):
        k = f"l:{i % 50}"
        last[k] = rnd(rng.choice([3000, 100_000, 400_000]), f"l{i}")
        c.set(k, last[k])
    hits = misses = 0
    for k in sorted(last):
        v = c.get(k)
        if v is None:
            misses += 1
        else:
            assert v == last[k], f"{k}: not its last value"
            hits += 1
    s1 = stats(c)
    assert hits > 200 and misses > 200, (hits, misses)
    assert s1["soc_evictions"] > s0["soc_evictions"] and s1["loc_regions_evicted"] > s0["loc_regions_evicted"], s1
    assert s1["nvm_hits"] > s0["nvm_hits"]
    c.close()


def test_add_replace_cas_delete_touch_semantics(server):
    c = server.client()
    assert c.add("sem:a", b"1", noreply=False) is True
    assert c.add("sem:a", b"2", noreply=False) is False
    assert c.get("sem:a") == b"1"
    assert c.replace("sem:none", b"x", noreply=False) is False
    assert c.get("sem:none") is None
    assert c.replace("sem:a", b"3", noreply=False) is True
    v, cas = c.gets("sem:a")
    assert v == b"3"
    assert c.cas("sem:a", b"4", int(cas) + 1, noreply=False) is False  # EXISTS
    assert c.cas("sem:a", b"4", cas, noreply=False) is True
    assert c.cas("sem:a", b"5", cas, noreply=False) is False  # its CAS changed
    assert c.cas("sem:gone", b"x", 1, noreply=False) is None  # NOT_FOUND
    v2, cas2 = c.gets("sem:a")
    assert v2 == b"4" and cas2 != cas
    # Multi-key gets: every item with its own CAS unique.
    for i in range(5):
        c.set(f"sem:m{i}", str(i).encode())
    many = c.gets_many([f"sem:m{i}" for i in range(5)] + ["sem:missing"])
    assert {k: v for k, (v, _) in many.items()} == {f"sem:m{i}": str(i).encode() for i in range(5)}
    assert len({cas for _, cas in many.values()}) == 5
    assert c.delete("sem:a", noreply=False) is True
    assert c.delete("sem:a", noreply=False) is False
    assert c.get("sem:a") is None
    # touch: keeps the value and its CAS, changes the expiry.
    c.set("sem:t", b"short", expire=1)
    c.set("sem:u", b"extended", expire=1)
    _, cas_u = c.gets("sem:u")
    assert c.touch("sem:u", 100, noreply=False) is True
    assert c.touch("sem:nope", 100, noreply=False) is False
    assert c.gets("sem:u") == (b"extended", cas_u)
    # A value on flash keeps its flags and CAS too.
    c.set("sem:flags", b"f", noreply=False)
    time.sleep(2.2)
    assert c.get("sem:t") is None  # expired
    assert c.get("sem:u") == b"extended"
    c.set("sem:neg", b"gone", expire=-1, noreply=False)
    assert c.get("sem:neg") is None
    c.close()


def test_stats_fields_and_hit_ratios_move(server):
    c = server.client()
    s0 = stats(c)
    for f in ["pid", "uptime", "version", "curr_items", "total_items", "get_hits", "get_misses", "cmd_get", "cmd_set",
              "curr_connections", "dlwa", "alwa", "dram_hit_ratio", "nvm_hit_ratio", "device_host_write_bytes",
              "device_media_write_bytes", "dlwa_handle_1", "dlwa_handle_2", "soc_handle", "loc_handle"]:
        assert f in s0, f"stats lacks {f}"
    assert s0["pid"] == server.proc.pid
    assert (s0["soc_handle"], s0["loc_handle"]) == (1, 2)
    assert 0.9 <= s0["dlwa"] < 3 and s0["alwa"] > 1
    # DRAM hits raise the DRAM hit ratio; misses count as misses.
    c.set("st:hot", b"v" * 100)
    for _ in range(50):
        assert c.get("st:hot") == b"v" * 100
    for i in range(10):
        assert c.get(f"st:absent{i}") is None
    s1 = stats(c)
    assert s1["get_hits"] - s0["get_hits"] == 50 and s1["get_misses"] - s0["get_misses"] == 10
    assert s1["cmd_get"] - s0["cmd_get"] == 60 and s1["cmd_set"] - s0["cmd_set"] == 1
    assert s1["dram_hit_ratio"] > s0["dram_hit_ratio"]
    # Flash hits raise the NVM hit ratio.
    keys = [f"st:nvm{i}" for i in range(20)]
    for k in keys:
        c.set(k, k.encode() * 40)
    for j in range(3):
        c.set(f"st:big{j}", rnd(200_000, j))
    before = stats(c)
    assert all(c.get(k) == k.encode() * 40 for k in keys)
    s2 = stats(c)
    assert s2["nvm_hits"] - before["nvm_hits"] == 20
    assert s2["nvm_hit_ratio"] > before["nvm_hit_ratio"]
    assert s2["device_media_write_bytes"] >= before["device_media_write_bytes"]
    c.close()


def test_bad_commands_get_memcacheds_errors_and_drop_only_their_connection(server):
    good = server.client()
    good.set("bad:keep", b"kept", noreply=False)
    s = server.raw()
    s.sendall(b"frobnicate\r\n")
    assert recv_until(s, b"\r\n") == b"ERROR\r\n"
    s.sendall(b"get " + b"k" * 251 + b"\r\n")
    assert recv_until(s, b"\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    s.sendall(b"set big 0 0 %d\r\n" % (MAX_VALUE + 1) + b"z" * (MAX_VALUE + 1) + b"\r\n")
    assert recv_until(s, b"\r\n") == b"SERVER_ERROR object too large for cache\r\n"
    s.sendall(b"set ok 0 0 2\r\nhi\r\nget ok\r\n")  # the stream is still in step
    assert recv_until(s, b"END\r\n") == b"STORED\r\nVALUE ok 0 2\r\nhi\r\nEND\r\n"
    s.sendall(b"set k 0 0 3\r\nabcde\r\n")  # memcached reads 3 + 2 bytes, then the rest as a command
    assert recv_until(s, b"ERROR\r\n") == b"CLIENT_ERROR bad data chunk\r\nERROR\r\n"
    s.sendall(b"set k 0 0 lots\r\n")
    assert recv_until(s, b"\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    s.sendall(b"set " + b"x " * 5000 + b"\r\n")  # only multi-get lines may be long
    assert recv_until(s, b"\r\n").startswith(b"CLIENT_ERROR line longer than 8192 bytes")
    assert closed(s)
    s.close()
    assert good.get("bad:keep") == b"kept"  # others are unaffected
    deadline = time.time() + 10
    while stats(good)["protocol_errors"] < 1:  # counted when the dropped connection's task ends
        assert time.time() < deadline
        time.sleep(0.05)
    good.close()


@pytest.mark.skipif(shutil.which("nc") is None, reason="nc missing: run scripts/setup.sh")
def test_printf_nc_example_from_the_docs(server):
    p = subprocess.run(f"printf 'set greeting 0 0 5\\r\\nhello\\r\\nget greeting\\r\\nquit\\r\\n' | nc -N 127.0.0.1 {server.port}",
                       shell=True, capture_output=True, timeout=30)
    assert p.stdout == b"STORED\r\nVALUE greeting 0 5\r\nhello\r\nEND\r\n", p


@pytest.mark.skipif(any(shutil.which(t) is None for t in ["memccp", "memccat", "memcstat"]),
                    reason="libmemcached-tools missing: run scripts/setup.sh")
def test_libmemcached_tools(server, tmp_path):
    srv = f"--servers=127.0.0.1:{server.port}"
    f = tmp_path / "blob.bin"
    data = rnd(300_000, "blob")  # a LOC item
    f.write_bytes(data)
    subprocess.run(["memccp", srv, str(f)], check=True, timeout=30, cwd=tmp_path)
    got = subprocess.run(["memccat", srv, "blob.bin"], check=True, capture_output=True, timeout=30)
    assert got.stdout == data + b"\n"  # memccat ends what it prints with a newline
    st = subprocess.run(["memcstat", srv], check=True, capture_output=True, text=True, timeout=30).stdout
    assert "dlwa:" in st and "nvm_hit_ratio:" in st and "curr_items:" in st, st


def test_connection_limit_and_sigint_shutdown(tmp_path):
    s = Served(tmp_path, args=["--max-connections", "2", "--evict-idle-after", "0"]).start()
    try:
        a, b = s.client(), s.client()
        # Round trips: both connections are being served before the third arrives (a connection
        # whose task has not started yet counts as in its handshake, and would give its slot).
        assert a.set("a", b"1", noreply=False) and b.set("b", b"2", noreply=False)
        third = s.raw()
        assert recv_until(third, b"\r\n") == b"SERVER_ERROR too many open connections (--max-connections 2)\r\n"
        assert closed(third)
        a.close()
        time.sleep(0.3)
        c = s.client()
        assert c.get("b") == b"2"
        c.close()
        b.close()
    finally:
        rc = s.stop(signal.SIGINT)
    log = s.log.read_text()
    assert rc == 0, log
    assert "refused" in log and "--max-connections" in log, log
    assert "served" in log and "DLWA" in log, log


def test_sigterm_shutdown_with_open_clients(tmp_path):
    s = Served(tmp_path, args=["--metrics-out", str(tmp_path / "metrics")]).start()
    c = s.client()
    for i in range(1000):  # 3 MB: past DRAM and the LOC's write buffer, onto the device
        c.set(f"k{i}", rnd(3000, i))
    assert c.get("k999") == rnd(3000, 999)  # a round trip: the server has seen every set
    t0 = time.time()
    rc = s.stop(signal.SIGTERM)
    assert rc == 0 and time.time() - t0 < 10
    log = s.log.read_text()
    assert "shutting down" in log and "served 1 connections" in log and "DLWA" in log, log
    # --metrics-out: the final stats, as the summary line gives them.
    m = json.loads((tmp_path / "metrics" / "metrics.json").read_text())
    assert m["cmd_set"] == 1000 and m["total_connections"] == 1, m
    # The write buffer goes to NAND at shutdown: what it held is not reported as a DLWA below 1.
    assert int(m["device_media_write_bytes"]) >= int(m["device_host_write_bytes"]) > 0, m
    assert float(m["dlwa"]) >= 1.0, m["dlwa"]


@pytest.mark.parametrize("change, args, message", [
    ("[device]\npreset = \"zns-ssd\"\n", [], "personality"),
    (SPEC.replace("region_eviction", "invalidate_on_set = false\nregion_eviction"), [], "invalidate_on_set"),
    (SPEC.replace("utilization = 0.0225", "utilization = 0.0025"), [], "needs a LOC"),
    (SPEC, ["--max-value-bytes", "2M"], "--max-value-bytes 2097152: an item"),
    (SPEC, ["--listen", "0.0.0.0:11211"], "loopback"),
    ("bogus = 1\n" + SPEC, [], "unknown top-level key(s) bogus"),
    (SPEC.replace("dram_bytes", "dram_byte"), [], "unknown field `dram_byte`"),
], ids=["zns", "no-invalidate", "no-loc", "value-over-region", "non-loopback", "top-level-key", "cache-key"])
def test_bad_configs_are_refused_clearly(tmp_path, change, args, message):
    spec = write(tmp_path / "bad.toml", change)
    cmd = SSDLAB + ["cache", "serve", str(spec)] + (args if "--listen" in args else ["--listen", f"127.0.0.1:{free_port()}"] + args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "ssdlab: error:" in p.stderr and message in p.stderr and "line 1 column" not in p.stderr, p.stderr


def test_replies_to_whole_commands_are_not_held_back_behind_a_partial_one(server):
    """Pipelined commands are answered though the next one is still arriving (a command line,
    or a value block, cut short): memcached answers what it has."""
    with server.raw() as s:
        s.settimeout(5)
        s.sendall(b"set held 0 0 1\r\nx\r\nget held\r\nget hel")
        assert recv_until(s, b"END\r\n") == b"STORED\r\nVALUE held 0 1\r\nx\r\nEND\r\n"
        s.sendall(b"d\r\nset blk 0 0 10\r\n12345")
        assert recv_until(s, b"END\r\n") == b"VALUE held 0 1\r\nx\r\nEND\r\n"
        s.sendall(b"67890\r\nget blk\r\n")
        assert recv_until(s, b"END\r\n") == b"STORED\r\nVALUE blk 0 10\r\n1234567890\r\nEND\r\n"


def test_allow_remote_opens_a_non_loopback_listen_as_on_the_other_servers(tmp_path):
    """`--allow-remote` (which the loopback refusal suggests) is accepted: the server listens on
    the address given and serves."""
    from clitools import Server

    spec = write(tmp_path / "spec.toml", SPEC)
    port = free_port()
    s = Server(SSDLAB + ["cache", "serve", str(spec), "--listen", f"0.0.0.0:{port}", "--allow-remote"], port,
               tmp_path / "remote.log")
    try:
        c = Client(("127.0.0.1", port), connect_timeout=5, timeout=10)
        c.set("k", b"v")
        assert c.get("k") == b"v"
        c.close()
    finally:
        assert s.stop() == 0, s.log.read_text()
