"""`ssdlab serve` with real NBD clients: nbdinfo, qemu-io, nbdcopy, fio; crash safety (kill -9),
live metrics, FDP exports, emulated latency, and bad clients."""

import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from clitools import SSDLAB, TINY_FDP_TOML, free_port, ssdlab, write

CLIENTS = ["nbdinfo", "nbdcopy", "qemu-io", "fio"]
pytestmark = pytest.mark.skipif(any(shutil.which(c) is None for c in CLIENTS),
                                reason="NBD clients missing: run scripts/setup.sh (make setup)")

# A small device without timing: the data path and the FTL, fast.
PLAIN = """preset = "tiny"
[timing]
enabled = false
"""
MiB = 1 << 20


class Server:
    """`ssdlab serve` as a child process, logging to a file; stopped by PID."""

    def __init__(self, tmp: Path, config: str = PLAIN, image: Path = None, args=(), port: int = None):
        self.tmp = tmp
        self.cfg = write(tmp / f"serve-{time.monotonic_ns()}.toml", config)
        self.image = image
        self.args = list(args)
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.log = tmp / f"serve-{self.port}-{time.monotonic_ns()}.log"
        self.proc = None

    def uri(self, export="ssdlab") -> str:
        return f"nbd://{self.addr}/{export}"

    def start(self) -> "Server":
        cmd = SSDLAB + ["serve", str(self.cfg), "--listen", self.addr] + self.args
        if self.image:
            cmd += ["--image", str(self.image)]
        self.logf = open(self.log, "w")  # noqa: SIM115 (the server's log while it runs; closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if "listening on" in self.log.read_text():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"ssdlab serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"ssdlab serve did not start:\n{self.log.read_text()}")

    def stop(self, sig=signal.SIGTERM, timeout=60) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode

    def stats(self) -> dict:
        p = ssdlab("stats", self.addr, "--json")
        return json.loads(p.stdout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def run(*cmd, timeout=300, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def qemu_io(uri, *cmds, check=True):
    args = ["qemu-io", "-f", "raw"]
    for c in cmds:
        args += ["-c", c]
    return run(*args, uri, check=check)


def test_nbdinfo_sees_the_exports_size_and_flags(tmp_path):
    with Server(tmp_path) as srv:
        info = json.loads(run("nbdinfo", "--json", srv.uri()).stdout)
        e = info["exports"][0]
        logical = srv.stats()["device"]["logical_bytes"]
        assert e["export-size"] == logical
        for flag in ("can_flush", "can_fua", "can_trim", "can_zero", "can_multi_conn", "can_fast_zero", "can_df"):
            assert e[flag] is True, flag
        assert e["is_read_only"] is False and e["block_size_preferred"] == 4096
        assert "base:allocation" in e["contexts"]
        names = run("nbdinfo", "--list", "--json", f"nbd://{srv.addr}").stdout
        assert {x["export-name"] for x in json.loads(names)["exports"]} == {"ssdlab", "ssdlab-metrics"}
        m = json.loads(run("nbdinfo", "--json", srv.uri("ssdlab-metrics")).stdout)["exports"][0]
        assert m["is_read_only"] is True


def test_qemu_io_patterns_discard_and_write_zeroes(tmp_path):
    with Server(tmp_path) as srv:
        u = srv.uri()
        qemu_io(u, "write -P 0xab 0 1M", "write -P 0xcd 4k 8k", "write -P 0x11 1000 300", "flush")
        qemu_io(u, "read -P 0xab 0 1000", "read -P 0x11 1000 300", "read -P 0xab 1300 2796",
                "read -P 0xcd 4k 8k", "read -P 0xab 12k 1012k")
        qemu_io(u, "discard 256k 256k", "read -P 0 256k 256k", "write -z 512k 64k", "read -P 0 512k 64k")
        # A pattern mismatch really fails (the test can tell).
        assert qemu_io(u, "read -P 0xab 256k 4k", check=False).returncode != 0
        m = srv.stats()
        assert m["host_write_bytes"] >= MiB and m["host_trim_bytes"] >= 256 * 1024
        # Unaligned writes reach the device as whole sectors.
        assert m["host_write_bytes"] % 4096 == 0


def test_nbdcopy_round_trip_of_random_data(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(24 * MiB))
    with Server(tmp_path) as srv:
        run("nbdcopy", src, srv.uri())
        back = tmp_path / "back.bin"
        # Copy the whole export back and compare the first 24 MiB.
        run("nbdcopy", srv.uri(), back)
        with open(back, "rb") as f:
            got = f.read(24 * MiB)
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(src.read_bytes()).hexdigest()
        assert srv.stats()["host_write_bytes"] >= 24 * MiB


@pytest.mark.parametrize("bs", ["--bs=4k", "--bssplit=4k/50:16k/25:64k/15:256k/10"])
def test_fio_nbd_engine_verifies_crc32c(tmp_path, bs):
    with Server(tmp_path) as srv:
        p = run("fio", "--name=verify", "--ioengine=nbd", f"--uri={srv.uri()}", "--rw=randwrite", bs,
                "--size=48M", "--iodepth=16", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
                "--randrepeat=1", "--output-format=json", timeout=600)
        job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
        assert job["error"] == 0
        assert job["write"]["io_bytes"] >= 48 * MiB and job["read"]["io_bytes"] >= 48 * MiB  # verified
        assert srv.stats()["host_write_bytes"] >= 48 * MiB


def test_kill_9_keeps_flushed_data_and_the_device_state(tmp_path):
    image = tmp_path / "disk.img"
    srv = Server(tmp_path, image=image).start()
    patterns = []
    try:
        for rnd in range(3):
            base = rnd * 4 * MiB
            pat = 0x21 + rnd
            qemu_io(srv.uri(), f"write -P {pat:#x} {base} 2M", "flush")
            patterns.append((base, pat))
            before = srv.stats()["device_lifetime"]
            # Unflushed writes in flight when the server dies.
            writer = subprocess.Popen(["qemu-io", "-f", "raw", "-c", f"write -P 0x77 {64 * MiB} 32M", srv.uri()],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            srv.proc.kill()
            srv.proc.wait()
            srv.logf.close()
            writer.wait(timeout=60)
            srv = Server(tmp_path, image=image, port=srv.port).start()
            log = srv.log.read_text()
            assert "journal records replayed" in log, log
            for b, p in patterns:
                qemu_io(srv.uri(), f"read -P {p:#x} {b} 2M")
            after = srv.stats()["device_lifetime"]
            # The FTL state came back too: nothing it had seen was forgotten.
            assert after["host_write_bytes"] >= before["host_write_bytes"] > 0
            assert after["nand_write_bytes"] >= before["nand_write_bytes"]
    finally:
        srv.stop()
    # A clean stop leaves a snapshot and an empty journal; the next start needs no replay.
    with Server(tmp_path, image=image) as srv2:
        assert "snapshot in" in srv2.log.read_text()
        qemu_io(srv2.uri(), "read -P 0x21 0 2M")


def test_stats_sigusr1_and_clean_shutdown(tmp_path):
    out = tmp_path / "metrics"
    image = tmp_path / "disk.img"
    srv = Server(tmp_path, image=image, args=["--metrics-out", str(out)]).start()
    try:
        qemu_io(srv.uri(), "write -P 1 0 4M")
        text = ssdlab("stats", srv.addr).stdout
        assert "DLWA" in text and "requests" in text
        srv.proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 10
        while not (out / "metrics.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        m = json.loads((out / "metrics.json").read_text())
        assert m["host_write_bytes"] == 4 * MiB and m["schema"] == 1
    finally:
        assert srv.stop(signal.SIGTERM) == 0
    assert "shutting down" in srv.log.read_text()
    assert Path(str(image) + ".ssdlab-state").exists()
    assert json.loads((out / "metrics.json").read_text())["nbd"]["requests"] >= 1


def test_ctrl_c_stops_cleanly_with_a_summary(tmp_path):
    srv = Server(tmp_path).start()
    qemu_io(srv.uri(), "write -P 3 0 1M")
    assert srv.stop(signal.SIGINT) == 0
    log = srv.log.read_text()
    assert "shutting down" in log and "served" in log and "Traceback" not in log


def test_bad_clients_get_dropped_and_the_server_keeps_serving(tmp_path):
    with Server(tmp_path, args=["--max-connections", "4"]) as srv:
        for garbage in [b"", b"\xff" * 4, b"\x00\x00\x00\x03" + b"GARBAGE" * 10, os.urandom(300)]:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
                s.recv(18)
                try:
                    s.sendall(garbage)
                    s.shutdown(socket.SHUT_WR)
                    while s.recv(4096):
                        pass
                except OSError:
                    pass  # the server may drop us before we finish: that is the point
        # Out-of-range I/O is an error, not a crash.
        size = srv.stats()["device"]["logical_bytes"]
        assert qemu_io(srv.uri(), f"read {size} 4k", check=False).returncode != 0
        qemu_io(srv.uri(), "write -P 5 0 64k", "read -P 5 0 64k")
        assert srv.proc.poll() is None
        assert srv.stats()["nbd"]["protocol_errors"] >= 1


IHAVEOPT = 0x49484156454F5054


def _recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError("closed")
        b += chunk
    return b


def nbd_go(port: int, export: str = "ssdlab") -> socket.socket:
    """A client that completes the handshake (NBD_OPT_GO) and then just holds the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    assert _recv_exact(s, 18)[:8] == b"NBDMAGIC"
    s.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes
    name = export.encode()
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, 7, len(data)) + data)
    while True:
        _, _, kind, n = struct.unpack(">QIII", _recv_exact(s, 20))
        _recv_exact(s, n)
        if kind == 1:  # NBD_REP_ACK
            return s
        assert kind & 0x80000000 == 0, f"option error {kind:#x}"


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        while s.recv(4096):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_connections_beyond_the_limit_are_refused_until_one_closes(tmp_path):
    with Server(tmp_path, args=["--max-connections", "1", "--evict-idle-after", "0"]) as srv:
        hold = nbd_go(srv.port)  # in transmission, and idle connections are never evicted here
        assert run("nbdinfo", srv.uri(), check=False).returncode != 0
        assert "refused" in srv.log.read_text()
        hold.close()
        deadline = time.time() + 10
        while run("nbdinfo", srv.uri(), check=False).returncode != 0:
            assert time.time() < deadline, "the slot was not given back"
            time.sleep(0.1)


def test_non_loopback_listen_is_refused(tmp_path):
    cfg = write(tmp_path / "c.toml", PLAIN)
    p = ssdlab("serve", cfg, "--listen", "0.0.0.0:10809", check=False, timeout=60)
    assert p.returncode == 2 and "loopback" in p.stderr and "--allow-remote" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_slow_loris_handshakes_are_cut_while_good_clients_are_served(tmp_path):
    """16 clients trickling an option byte every 0.3 s hold every slot of a 16-slot server:
    good clients still get in (the longest handshake gives way) and the trickling ones are cut
    at the 2 s handshake deadline, although bytes keep arriving."""
    with Server(tmp_path, args=["--max-connections", "16", "--handshake-timeout", "2"]) as srv:
        loris = []
        for _ in range(16):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            _recv_exact(s, 18)
            s.sendall(struct.pack(">I", 3))
            loris.append(s)
        opt = struct.pack(">QII", IHAVEOPT, 7, 64)
        t0 = time.time()
        for i in range(4):
            for s in loris:
                try:
                    s.sendall(opt[i:i + 1])
                except OSError:
                    pass
            time.sleep(0.3)
        qemu_io(srv.uri(), "write -P 7 0 64k", "read -P 7 0 64k")
        assert time.time() - t0 < 4
        cut = sum(closed_by_server(s, 4) for s in loris)
        assert cut == 16
        qemu_io(srv.uri(), "read -P 7 0 64k")
        n = srv.stats()["nbd"]
        assert n["handshake_timeouts"] + n["connections_evicted"] >= 16


def test_idle_connections_and_floods_do_not_lock_out_good_clients(tmp_path):
    with Server(tmp_path, args=["--max-connections", "16", "--idle-timeout", "1.5"]) as srv:
        # 64 clients that connect and say nothing.
        silent = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(64)]
        qemu_io(srv.uri(), "write -P 9 0 64k")
        # 15 clients that finish the handshake and go idle: cut after --idle-timeout.
        for s in silent:
            s.close()
        idle = [nbd_go(srv.port) for _ in range(15)]
        qemu_io(srv.uri(), "read -P 9 0 64k")
        assert sum(closed_by_server(s, 4) for s in idle) == 15
        # A flood: 2000 connections opened and dropped at once.
        t0 = time.time()
        for _ in range(2000):
            socket.create_connection(("127.0.0.1", srv.port), timeout=5).close()
        assert time.time() - t0 < 30
        qemu_io(srv.uri(), "read -P 9 0 64k")
        threads = int(next(line.split()[1] for line in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines()
                           if line.startswith("Threads:")))
        assert threads < 24, f"{threads} threads"
        assert srv.stats()["nbd"]["idle_timeouts"] >= 15
    # Refusals, timeouts and evictions are logged a few lines at a time, not one per client.
    assert len(srv.log.read_text().splitlines()) < 30, srv.log.read_text()


def test_unusable_limits_and_bad_paths_are_one_line_errors(tmp_path):
    cfg = write(tmp_path / "c.toml", PLAIN)
    for args, want in [(["--max-request", "0"], "--max-request"), (["--max-connections", "0"], "--max-connections"),
                       (["--max-connections", "-5"], "--max-connections"), (["--handshake-timeout", "0"], "--handshake-timeout"),
                       (["--idle-timeout", "-1"], "--idle-timeout"), (["--image", str(tmp_path)], "is a directory"),
                       (["--tls-cert", str(cfg)], "--tls-key"), (["--snapshot-every", "x"], "--snapshot-every")]:
        p = ssdlab("serve", cfg, "--listen", "127.0.0.1:0", *args, check=False, timeout=60)
        assert p.returncode == 2, (args, p.stderr)
        assert want in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x00\xff\xfe" * 10)
    p = ssdlab("serve", binary, check=False, timeout=60)
    assert p.returncode == 2 and str(binary) in p.stderr and "UTF-8" in p.stderr, p.stderr


def test_stats_fails_fast_on_a_port_that_is_not_nbd(tmp_path):
    # A server that accepts and waits for the client to speak first (as memcached does).
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        t0 = time.time()
        p = ssdlab("stats", f"127.0.0.1:{ls.getsockname()[1]}", check=False, timeout=60)
        assert time.time() - t0 < 10
        assert p.returncode == 2 and "not an NBD server" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    p = ssdlab("stats", f"127.0.0.1:{free_port()}", check=False, timeout=60)
    assert p.returncode == 2 and "refused" in p.stderr.lower() and "Traceback" not in p.stderr


FDP = TINY_FDP_TOML


def test_fdp_exports_write_through_their_placement_handles(tmp_path):
    with Server(tmp_path, config=FDP, args=["--per-handle-exports"]) as srv:
        names = {x["export-name"] for x in json.loads(run("nbdinfo", "--list", "--json", f"nbd://{srv.addr}").stdout)["exports"]}
        assert {"ssdlab", "handle0", "handle1", "handle2", "handle3"} <= names
        qemu_io(srv.uri("handle1"), "write -P 1 0 3M", "flush")
        qemu_io(srv.uri("handle2"), "write -P 2 0 1M", "flush")
        h = {x["handle"]: x["host_write_bytes"] for x in srv.stats()["fdp"]["handles"]}
        assert h[1] == 3 * MiB and h[2] == 1 * MiB and h[3] == 0
        # Handle 2's export is the third quarter of the device.
        size = srv.stats()["device"]["logical_bytes"]
        quarter = size // 4 // 4096 * 4096
        qemu_io(srv.uri(), f"read -P 2 {2 * quarter} 1M")


TIMED = """preset = "tiny"
[ftl]
write_buffer_bytes = 0
"""


def _fio_clat_us(uri) -> float:
    p = run("fio", "--name=lat", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite", "--bs=4k", "--size=16M",
            "--iodepth=1", "--runtime=2", "--time_based", "--output-format=json")
    return json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]["write"]["clat_ns"]["mean"] / 1e3


def test_emulated_latency_delays_replies_to_the_devices_completion(tmp_path):
    with Server(tmp_path, config=TIMED, args=["--latency", "none"]) as srv:
        fast = _fio_clat_us(srv.uri())
    with Server(tmp_path, config=TIMED, args=["--latency", "emulated"]) as srv:
        slow = _fio_clat_us(srv.uri())
        dev = srv.stats()["latency_ns"]["write"]["mean"] / 1e3
    # Without a write buffer every 4 KiB write waits for a page program (1.6 ms on this part):
    # emulated replies carry that latency, immediate ones do not.
    assert dev > 1000
    assert slow >= 0.9 * dev, (slow, dev)
    assert fast < 0.5 * dev, (fast, dev)


def _pki(d: Path) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1, in libnbd's directory layout."""
    d.mkdir()
    ossl = lambda *a: run("openssl", *a)  # noqa: E731
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "ca-key.pem", "-out", d / "ca-cert.pem",
         "-days", "2", "-subj", "/CN=ssdlab test CA")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "server-key.pem", "-out", d / "server.csr",
         "-subj", "/CN=localhost")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\n")
    ossl("x509", "-req", "-in", d / "server.csr", "-CA", d / "ca-cert.pem", "-CAkey", d / "ca-key.pem",
         "-CAcreateserial", "-out", d / "server-cert.pem", "-days", "2", "-extfile", d / "ext.cnf")
    return d


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing: run make setup")
def test_tls_is_required_and_works_with_libnbd(tmp_path):
    pki = _pki(tmp_path / "pki")
    args = ["--tls-cert", str(pki / "server-cert.pem"), "--tls-key", str(pki / "server-key.pem")]
    with Server(tmp_path, args=args) as srv:
        tls_uri = f"nbds://{srv.addr}/ssdlab?tls-certificates={pki}"
        info = json.loads(run("nbdinfo", "--json", tls_uri).stdout)
        assert info["TLS"] is True and info["exports"][0]["export-size"] > 0
        # Without TLS the server refuses the export.
        assert run("nbdinfo", srv.uri(), check=False).returncode != 0
        src = tmp_path / "src.bin"
        src.write_bytes(os.urandom(4 * MiB))
        run("nbdcopy", src, tls_uri)
        back = tmp_path / "back.bin"
        run("nbdcopy", tls_uri, back)
        with open(back, "rb") as f:
            assert f.read(4 * MiB) == src.read_bytes()
        m = json.loads(ssdlab("stats", srv.addr, "--json", "--tls-ca", pki).stdout)
        assert m["host_write_bytes"] >= 4 * MiB
        assert ssdlab("stats", srv.addr, check=False).returncode == 2  # plain NBD is refused
    # A non-loopback address without TLS is refused (checked before binding).
    assert "TLS" in ssdlab("serve", srv.cfg, "--listen", "0.0.0.0:10809", check=False).stderr
