"""No set of clients keeps a good one out, on every TCP server ssdlab runs, with its defaults:
200 clients that connect and stay idle, or that trickle a request one byte at a time (a
slow-loris), and a good client is still served within 2 s. The servers' slots are taken by
the attackers first; the core gives a slot to the newcomer from the connection receiving a
request for longest (a second or more) or idle longest (the server's --evict-idle-after)."""

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from clitools import SSDLAB, Server, free_port, write

CLIENTS = 200
TRICKLE_S = 0.4  # one byte per client this often: never idle for a second, never done


class Attack:
    """CLIENTS connections, each sent `opening` (a handshake, or nothing) and then, for a
    slow-loris, one byte of `trickle` (a request that is never whole) every TRICKLE_S."""

    def __init__(self, port: int, opening=None, trickle: bytes = b""):
        self.socks = []
        for _ in range(CLIENTS):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                if opening:
                    opening(s)
                self.socks.append(s)
            except OSError:
                pass  # refused: the server is full, as the attack wants
        self.trickle, self.stop = trickle, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        i = 0
        while self.trickle and not self.stop.wait(TRICKLE_S):
            b = self.trickle[i % len(self.trickle):][:1]
            i += 1
            for s in self.socks:
                try:
                    s.send(b)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError(f"closed after {len(b)} of {n} bytes")
        b += chunk
    return b


def ask(port: int, request: bytes, want: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(request)
        return recv_exact(s, want)


# --- the servers and their good clients ------------------------------------------------

IHAVEOPT = 0x49484156454F5054


def nbd_handshake(s: socket.socket) -> None:
    """NBD newstyle handshake to transmission (NBD_OPT_GO of the default export)."""
    assert recv_exact(s, 18)[:8] == b"NBDMAGIC"
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", 6) + b"ssdlab" + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, 7, len(data)) + data)
    while True:
        _, _, kind, n = struct.unpack(">QIII", recv_exact(s, 20))
        recv_exact(s, n)
        if kind == 1:
            return
        assert kind & 0x80000000 == 0, f"option error {kind:#x}"


def nbd_good(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        nbd_handshake(s)
        s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 7, 0, 4096))  # READ 4 KiB at 0
        magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
        assert (magic, err, cookie) == (0x67446698, 0, 7)
        recv_exact(s, 4096)


def resp_good(port: int) -> None:
    assert ask(port, b"*1\r\n$4\r\nPING\r\n", 7) == b"+PONG\r\n"


def memcached_good(port: int) -> None:
    assert ask(port, b"version\r\n", 8).startswith(b"VERSION ")


def serprog_good(port: int) -> None:
    assert ask(port, b"\x00", 1) == b"\x06"  # NOP: ACK


NVME_NQN = b"nqn.2026-11.dev.ssdlab:ssd"


def nvme_icreq(s: socket.socket) -> None:
    """NVMe/TCP ICReq -> ICResp (no digests)."""
    s.sendall(struct.pack("<BBBBI", 0, 0, 128, 0, 128).ljust(128, b"\0"))
    r = recv_exact(s, 128)
    assert r[0] == 0x01, f"PDU type {r[0]:#x}, not ICResp"


def nvme_good(port: int) -> None:
    """ICReq, then Connect of an admin queue with its 1 KiB of data in the capsule."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        nvme_icreq(s)
        sqe = bytearray(64)
        sqe[0], sqe[1], sqe[2:4], sqe[4] = 0x7F, 0x40, struct.pack("<H", 1), 0x01
        sqe[32:36], sqe[39] = struct.pack("<I", 1024), 0x01
        sqe[44:46] = struct.pack("<H", 31)
        data = bytearray(1024)
        data[16:18] = b"\xff\xff"
        data[256:256 + len(NVME_NQN)] = NVME_NQN
        data[512:530] = b"nqn.2014-08.test:h"
        s.sendall(struct.pack("<BBBBI", 0x04, 0, 72, 72, 72 + 1024) + sqe + data)
        r = recv_exact(s, 24)
        assert r[0] == 0x05 and struct.unpack("<H", r[22:24])[0] >> 1 == 0, r.hex()


# A RESP SET whose value is never whole; a memcached line never ended; an NBD request header
# never whole; a serprog SPI operation whose parameters never arrive.
RESP_TRICKLE = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n" + b"v" * 10_000
MEMCACHED_TRICKLE = b"get " + b"k" * 4000
NBD_TRICKLE = struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, 0, 4096)
SERPROG_TRICKLE = b"\x13" + b"\x00" * 6
NVME_TRICKLE = struct.pack("<BBBBI", 0x04, 0, 72, 72, 72 + 4096) + bytes(64) + b"\x00" * 4096


def start(kind: str, tmp: Path):
    port = free_port()
    listen = ["--listen", f"127.0.0.1:{port}", "-q"]
    if kind == "nbd":
        cfg = write(tmp / "nbd.toml", 'preset = "tiny"\n[timing]\nenabled = false\n')
        return Server(SSDLAB + ["serve", str(cfg), *listen], port, tmp / "serve.log")
    if kind == "resp":
        cfg = write(tmp / "kv.toml", '[device]\npreset = "zns-ssd"\n')
        return Server(SSDLAB + ["kv", "serve", str(cfg), *listen], port, tmp / "kv.log")
    if kind == "memcached":
        spec = Path(__file__).resolve().parents[1] / "experiments" / "fdp-cache" / "serve.toml"
        return Server(SSDLAB + ["cache", "serve", str(spec), *listen], port, tmp / "cache.log")
    if kind == "serprog":
        return Server(SSDLAB + ["spi", "serve", "--chip", "W25Q128JV", "--image", str(tmp / "chip.bin"), *listen], port,
                      tmp / "spi.log")
    if kind == "nvme":
        cfg = write(tmp / "nvme.toml", 'preset = "tiny"\n[timing]\nenabled = false\n')
        return Server(SSDLAB + ["nvme", "serve", str(cfg), *listen], port, tmp / "nvme.log")
    raise ValueError(kind)


SERVERS = {
    # kind: (good client, opening of an attacking client, trickle, --evict-idle-after default)
    "nbd": (nbd_good, nbd_handshake, NBD_TRICKLE, 1.0),
    "resp": (resp_good, None, RESP_TRICKLE, 1.0),
    "memcached": (memcached_good, None, MEMCACHED_TRICKLE, 1.0),
    "serprog": (serprog_good, None, SERPROG_TRICKLE, 5.0),
    "nvme": (nvme_good, nvme_icreq, NVME_TRICKLE, 1.0),
}


def served_within(good, port: int, seconds: float) -> float:
    """Time `good` took, at its first attempt (no retry: a refusal fails the test)."""
    t0 = time.monotonic()
    good(port)
    took = time.monotonic() - t0
    assert took < seconds, f"served after {took:.2f} s"
    return took


@pytest.mark.parametrize("attack", ["idle", "slow-loris"])
@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_a_good_client_is_served_within_2_s_of_200_attacking_clients(tmp_path, kind, attack):
    good, opening, trickle, evict_idle_after = SERVERS[kind]
    srv = start(kind, tmp_path)
    try:
        good(srv.port)
        a = Attack(srv.port, opening, trickle if attack == "slow-loris" else b"")
        try:
            # Idle clients yield after --evict-idle-after; trickling ones a second into their
            # request (or, in a handshake, at once).
            time.sleep((evict_idle_after if attack == "idle" else 1.0) + 0.3)
            served_within(good, srv.port, 2.0)
            assert srv.proc.poll() is None
        finally:
            a.close()
        good(srv.port)
    finally:
        assert srv.stop() == 0, srv.log.read_text()[-3000:]


# --- no open port by default -----------------------------------------------------------------

def listening(pid: int) -> list:
    """(address, port) of every TCP socket process `pid` listens on (what `ss -ltnp` shows)."""
    import os

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr, port = f[1].split(":")
                raw = bytes.fromhex(addr)
                if len(raw) == 4:
                    ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
                else:
                    ip = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
                out.append((ip, int(port, 16)))
    return out


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.parametrize("kind", ["nbd", "resp", "memcached", "serprog", "rmml-node", "nvme"])
def test_every_server_listens_on_loopback_only_with_its_defaults(tmp_path, kind):
    """Started with no --listen at all, each server's listening sockets are loopback ones."""
    import subprocess

    spec = Path(__file__).resolve().parents[1] / "experiments" / "fdp-cache" / "serve.toml"
    argv, port = {
        "nbd": (["serve", str(write(tmp_path / "n.toml", 'preset = "tiny"\n[timing]\nenabled = false\n'))], 10809),
        "resp": (["kv", "serve", str(write(tmp_path / "kv.toml", '[device]\npreset = "zns-ssd"\n'))], 6379),
        "memcached": (["cache", "serve", str(spec)], 11211),
        "serprog": (["spi", "serve", "--chip", "W25Q128JV", "--image", str(tmp_path / "chip.bin")], 2222),
        "rmml-node": (["rmml", "node"], None),
        "nvme": (["nvme", "serve", str(write(tmp_path / "nv.toml", 'preset = "tiny"\n[timing]\nenabled = false\n'))], 4420),
    }[kind]
    if port is not None and not port_free(port):
        pytest.skip(f"the default port {port} is taken on this machine")
    log = tmp_path / "log"
    with open(log, "w") as logf:
        proc = subprocess.Popen(SSDLAB + argv + ["-q"] * (kind != "rmml-node"), stdout=logf, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            found: list = []
            while time.time() < deadline and not found:
                assert proc.poll() is None, log.read_text()
                found = listening(proc.pid)
                time.sleep(0.1)
            assert found, f"no listening socket: {log.read_text()}"
            assert all(ip in ("127.0.0.1", "::1") for ip, _ in found), found
            if port is not None:
                assert ("127.0.0.1", port) in found, found
        finally:
            proc.terminate()
            proc.wait(30)


def test_the_uio_net_link_refuses_a_non_loopback_address_without_allow_remote(tmp_path):
    import subprocess

    for argv in (["uio", "device", "--id", "0", "--net", f"0.0.0.0:{free_port()}", "--socket", str(tmp_path / "u.sock")],
                 ["uio", "host", "--attach", str(tmp_path / "none.sock"), "--net", f"0.0.0.0:{free_port()}"]):
        p = subprocess.run(SSDLAB + argv, capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "--allow-remote" in p.stderr, (argv, p.stderr)
