"""The SPI NOR emulator as its users meet it: the real flashrom over serprog against
`ssdlab spi serve` for every preset, and the Python API a firmware test would use."""

import doctest
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import ssdlab.spi as spi_module
import ssdlab.spi_campaign as spi_campaign_module
from clitools import SSDLAB, ssdlab
from ssdlab.spi import Flash, chips

FLASHROM = shutil.which("flashrom") or "/usr/sbin/flashrom"

# preset -> (flashrom's name for it, size). The Macronix ID C2 20 17 is shared by four flashrom
# definitions (a real MX25L6436F probes the same way), so operations name the family with -c.
PRESETS = {
    "W25Q128JV": ("W25Q128.V", 16 << 20),
    "MX25L6436F": ("MX25L6436E/MX25L6445E/MX25L6465E/MX25L6473E/MX25L6473F", 8 << 20),
    "W25Q16JV": ("W25Q16.V", 2 << 20),
}


def random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


class Server:
    """`ssdlab spi serve` started from the test process on a free port; stopped by PID."""

    def __init__(self, chip: str, image: Path, *extra: str):
        self.proc = subprocess.Popen(SSDLAB + ["spi", "serve", "--chip", chip, "--image", str(image), "--listen",
                                               "127.0.0.1:0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if "on serprog" not in line:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.addr = line.split("on serprog ")[1].split()[0]
        self.port = int(self.addr.rsplit(":", 1)[1])
        # Listening: a connection succeeds (and is closed at once: a disconnect must not hurt).
        socket.create_connection(("127.0.0.1", self.port), timeout=5).close()

    def stop(self) -> str:
        """SIGTERM, wait, return stdout; the server must exit 0 after a clean stop."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"server ignored SIGTERM\n{out}\n{err}") from None
        assert self.proc.returncode == 0, f"server exited {self.proc.returncode}\n{out}\n{err}"
        return out

    def flashrom(self, *args, chip=None, timeout=600, check=True):
        cmd = [FLASHROM, "-p", f"serprog:ip=127.0.0.1:{self.port}"] + (["-c", chip] if chip else []) + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p.stdout + p.stderr


def flushed_lines(path: Path, timeout: float = 10.0) -> list:
    """The lines of a trace the server writes, once it has flushed them: it flushes after the
    client disconnects, which can be just after flashrom has exited, and a buffer written out
    earlier may end mid-line. Waits until the file ends with a newline and its size holds over
    three polls 50 ms apart."""
    deadline = time.monotonic() + timeout
    sizes = []
    while True:
        data = path.read_bytes()
        sizes = (sizes + [len(data)])[-3:]
        if data.endswith(b"\n") and len(sizes) == 3 and len(set(sizes)) == 1:
            return data.decode().splitlines()
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never settled on whole lines ({len(data)} bytes)")
        time.sleep(0.05)


def test_setup_installed_flashrom():
    assert os.access(FLASHROM, os.X_OK), "scripts/setup.sh installs the Debian flashrom package"


@pytest.mark.parametrize("chip", list(PRESETS))
def test_flashrom_probes_and_reads_every_preset(tmp_path, chip):
    fr_name, size = PRESETS[chip]
    image = tmp_path / "flash.bin"
    content = random_bytes(size, seed=len(chip))
    image.write_bytes(content)
    srv = Server(chip, image)
    try:
        # A probe without -c: flashrom identifies the chip from RDID alone. (For the Macronix ID it
        # lists every definition sharing it and exits 1 asking for -c, as with the real part.)
        out = srv.flashrom(check=chip.startswith("W"))
        assert f'Found {"Winbond" if chip.startswith("W") else "Macronix"} flash chip "{fr_name}"' in out, out
        out = srv.flashrom("-r", tmp_path / "read.bin", chip=fr_name)
        assert "Reading flash... done" in out
    finally:
        log = srv.stop()
    assert (tmp_path / "read.bin").read_bytes() == content
    assert "stopped" in log


def test_flashrom_writes_verifies_and_erases_a_whole_chip(tmp_path):
    """The full cycle on the 16 Mbit part: erase + program over old data, verify, erase."""
    chip = "W25Q16JV"
    fr_name, size = PRESETS[chip]
    image = tmp_path / "flash.bin"
    old = random_bytes(size, seed=1)
    new = random_bytes(size, seed=2)
    image.write_bytes(old)
    (tmp_path / "new.bin").write_bytes(new)
    trace = tmp_path / "trace.jsonl"
    srv = Server(chip, image, "--trace", str(trace))
    try:
        out = srv.flashrom("-w", tmp_path / "new.bin", chip=fr_name)
        assert "Erase/write done" in out and "VERIFIED" in out, out
        out = srv.flashrom("-v", tmp_path / "new.bin", chip=fr_name)
        assert "VERIFIED" in out
        srv.flashrom("-r", tmp_path / "after-write.bin", chip=fr_name)
        out = srv.flashrom("-E", chip=fr_name)
        assert "Erase/write done" in out or "done" in out, out
        srv.flashrom("-r", tmp_path / "after-erase.bin", chip=fr_name)
    finally:
        log = srv.stop()
    assert (tmp_path / "after-write.bin").read_bytes() == new
    assert (tmp_path / "after-erase.bin").read_bytes() == b"\xff" * size
    assert image.read_bytes() == b"\xff" * size, "the image file follows the chip"
    # The trace shows flashrom's real command stream: erases, programs, busy polling, and
    # frames the chip ignored because it was busy never happen (flashrom polls WIP correctly).
    ops = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        ops[rec.get("op", "advance")] = ops.get(rec.get("op", "advance"), 0) + 1
    assert ops["02 PP"] == size // 256
    assert ops.get("20 SE", 0) + ops.get("52 BE32", 0) + ops.get("d8 BE64", 0) + ops.get("60 CE", 0) + ops.get("c7 CE", 0) >= 2
    assert ops["05 RDSR"] > ops["02 PP"]
    assert "frames" in log


@pytest.mark.parametrize("chip", ["W25Q128JV", "MX25L6436F"])
def test_flashrom_writes_a_region_of_the_larger_parts(tmp_path, chip):
    """Program and erase go through every preset: a 128 KiB layout region (full-chip writes of
    the 8 and 16 MiB parts take minutes because flashrom polls WIP every 10 us per page)."""
    fr_name, size = PRESETS[chip]
    image = tmp_path / "flash.bin"
    old = random_bytes(size, seed=3)
    image.write_bytes(old)
    start, length = 0x40000, 0x20000
    new = bytearray(old)
    new[start:start + length] = random_bytes(length, seed=4)
    (tmp_path / "new.bin").write_bytes(new)
    (tmp_path / "layout.txt").write_text(f"{start:08x}:{start + length - 1:08x} part\n")
    srv = Server(chip, image)
    try:
        out = srv.flashrom("-l", tmp_path / "layout.txt", "-i", "part", "-w", tmp_path / "new.bin", chip=fr_name)
        assert "VERIFIED" in out, out
        srv.flashrom("-r", tmp_path / "read.bin", chip=fr_name)
    finally:
        srv.stop()
    assert (tmp_path / "read.bin").read_bytes() == bytes(new)
    assert image.read_bytes() == bytes(new)


def test_protection_bits_decode_like_flashroms_own_tables(tmp_path):
    """flashrom 1.3 has its own decoder of the W25Q128 protection bits (--wp-range/--wp-list):
    let it set ranges through the emulator, replay the status writes it sent (from the trace)
    on a fresh chip and check that our table protects exactly the range flashrom meant."""
    trace = tmp_path / "trace.jsonl"
    srv = Server("W25Q128JV", tmp_path / "f.bin", "--trace", str(trace))
    ranges = [(0xFC0000, 0x40000), (0, 0x1000), (0xFF8000, 0x8000), (0, 0x800000), (0x400000, 0xC00000),
              (0x1000, 0xFFF000), (0, 0x1000000), (0, 0)]
    try:
        for start, length in ranges:
            out = srv.flashrom(f"--wp-range={start:#x},{length:#x}")
            assert f"start=0x{start:08x} length=0x{length:08x}" in out, out
            f = Flash(chip="W25Q128JV")
            for line in flushed_lines(trace):
                rec = json.loads(line)
                if rec.get("op", "")[:2] in ("06", "04", "50", "01", "31", "11") and not rec["result"].startswith("ignored"):
                    f.transfer(bytes.fromhex(rec["mosi"]))
                    f.wait_ready()
            assert f.protected_range == ((start, start + length) if length else (0, 0)), (hex(start), hex(length))
    finally:
        srv.stop()


def test_server_survives_a_client_that_disconnects_mid_command_and_garbage(tmp_path):
    srv = Server("W25Q16JV", tmp_path / "f.bin")
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(bytes([0x13, 0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x9F]))  # O_SPIOP cut short
        s.close()
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(bytes([0x42, 0x00, 0x10]))  # unknown, NOP, SYNCNOP
        got = b""
        while len(got) < 4:
            chunk = s.recv(16)
            assert chunk
            got += chunk
        assert got == bytes([0x15, 0x06, 0x15, 0x06])
        s.close()
        assert 'Found Winbond flash chip "W25Q16.V"' in srv.flashrom()
    finally:
        srv.stop()


def test_wp_pin_low_locks_the_status_register_against_flashrom(tmp_path):
    """SRP = 1 (persisted in IMAGE.status) with --wp low: flashrom cannot change the protection."""
    image = tmp_path / "f.bin"
    (tmp_path / "f.bin.status").write_bytes(bytes([0x80 | 0x04, 0x02, 0x60]))  # SRP, BP0; QE; DRV
    srv = Server("W25Q128JV", image, "--wp", "low")
    try:
        out = srv.flashrom("--wp-range=0,0", check=False)
        status = srv.flashrom("--wp-status")
    finally:
        srv.stop()
    assert "start=0x00fc0000 length=0x00040000" in status, out + status
    assert (tmp_path / "f.bin.status").read_bytes()[0] == 0x84


def test_serve_stops_cleanly_on_sigint(tmp_path):
    srv = Server("W25Q16JV", tmp_path / "f.bin")
    srv.proc.send_signal(signal.SIGINT)
    out, err = srv.proc.communicate(timeout=15)
    assert srv.proc.returncode == 0, err
    assert "stopped" in out


def test_cli_lists_chips_and_rejects_unknown_ones(tmp_path):
    out = ssdlab("spi", "chips").stdout
    for name in PRESETS:
        assert name in out
    assert "datasheet" in out
    p = ssdlab("spi", "serve", "--chip", "NOPE", "--image", tmp_path / "x.bin", check=False)
    assert p.returncode == 2
    assert "unknown chip" in p.stderr and "W25Q128JV" in p.stderr


def test_python_api_firmware_style_busy_polling(tmp_path):
    f = Flash(chip="W25Q128JV", trace=tmp_path / "t.jsonl")
    assert f.transfer(b"\x9f\x00\x00\x00")[1:] == bytes([0xEF, 0x40, 0x18])
    f.transfer(b"\x06")
    f.transfer(b"\x02\x00\x10\x00" + bytes(range(256)))
    assert f.busy and f.read_status() == 0x03
    assert f.read(0x1000, 4) == b"\xff\xff\xff\xff", "reads are ignored while busy (MISO floats high)"
    polls = f.wait_ready(poll_ns=10_000)
    # tPP 0.7 ms typical; each poll is a 10 us delay plus 2 bytes at 8 MHz (2 us).
    assert 700_000 / 12_000 - 2 <= polls <= 700_000 / 12_000 + 2
    assert f.read(0x1000, 4) == bytes([0, 1, 2, 3])
    assert f.read_status() & 0x02 == 0, "WEL cleared at completion"
    f.transfer(b"\x06")
    f.transfer(b"\x20\x00\x10\x00")
    t0 = f.now_ns
    f.wait_ready(poll_ns=1_000_000)
    assert 45_000_000 <= f.now_ns - t0 < 47_000_000, "tSE 45 ms typical"
    assert f.erase_counts()[1] == 1 and sum(f.erase_counts()) == 1
    assert f.stats["programs"] == 1 and f.stats["sector_erases"] == 1
    f.flush()
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert lines[0]["op"] == "9f RDID" and lines[0]["src"] == "python"
    assert any(x.get("result") == "ignored: busy" for x in lines)


def test_python_api_max_timing_protection_and_faults(tmp_path):
    f = Flash(chip="W25Q16JV", timing="max", stuck_bits=[(0, 7, 0)], erase_fail_after=1)
    assert f.contents()[0] == 0x7F
    f.transfer(b"\x06")
    f.transfer(b"\x01\x04")  # BP0: top 64 KiB
    f.wait_ready()
    assert f.protected_range == (2 * 1024 * 1024 - 65536, 2 * 1024 * 1024)
    f.transfer(b"\x06")
    f.transfer(b"\x20\x1f\xf0\x00")
    assert not f.busy, "erase of a protected sector refused"
    f.transfer(b"\x20\x00\x00\x00")
    assert f.busy_until_ns - f.now_ns == 400_000_000, "tSE max"
    with pytest.raises(ValueError, match="unknown chip"):
        Flash(chip="AT25XYZ")
    with pytest.raises(ValueError, match="image is"):
        (tmp_path / "small.bin").write_bytes(b"\xff" * 10)
        Flash(chip="W25Q16JV", image=tmp_path / "small.bin")
    assert {c["name"] for c in chips()} == set(PRESETS)


def test_a_driver_that_skips_busy_polling_loses_its_writes():
    """What the emulator is for: QEMU's m25p80 applies program/erase at once, so this bug
    passes there; a real chip (and this model) ignores commands while busy."""
    def careless_write(f, addr, data):          # WREN + PP per page, never reads WIP
        for off in range(0, len(data), 256):
            a = addr + off
            f.transfer(b"\x06")
            f.transfer(bytes([0x02, a >> 16 & 0xFF, a >> 8 & 0xFF, a & 0xFF]) + data[off:off + 256])

    def careful_write(f, addr, data):
        for off in range(0, len(data), 256):
            a = addr + off
            f.transfer(b"\x06")
            f.transfer(bytes([0x02, a >> 16 & 0xFF, a >> 8 & 0xFF, a & 0xFF]) + data[off:off + 256])
            f.wait_ready()

    data = random_bytes(1024, seed=9)
    f = Flash(chip="W25Q16JV")
    careless_write(f, 0, data)
    f.wait_ready()
    assert f.read(0, 1024) != data
    assert f.read(0, 256) == data[:256], "only the first page made it"
    assert f.stats["ignored_busy"] == 6, "3 x (WREN + PP) while the first page was programming"
    g = Flash(chip="W25Q16JV")
    careful_write(g, 0, data)
    assert g.read(0, 1024) == data


def test_module_doctest():
    assert doctest.testmod(spi_module).failed == 0
    assert doctest.testmod(spi_campaign_module).failed == 0


def test_a_second_flashrom_is_refused_with_a_message_while_the_first_is_connected(tmp_path):
    srv = Server("W25Q16JV", tmp_path / "f.bin")
    try:
        first = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        first.sendall(bytes([0x13, 1, 0, 0, 3, 0, 0, 0x9F]))  # RDID: the chip is ours now
        assert first.recv(4)[:1] == b"\x06"
        p = subprocess.run([FLASHROM, "-p", f"serprog:ip=127.0.0.1:{srv.port}"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)  # an error, not a hang or SIGPIPE
        assert "chip in use" in p.stdout + p.stderr
        first.sendall(b"\x00")
        assert first.recv(1) == b"\x06"  # the first client still has the chip
        first.close()
        assert 'Found Winbond flash chip "W25Q16.V"' in srv.flashrom()
    finally:
        out = srv.stop()
    assert "clients served, 1 refused" in out


def test_an_idle_client_does_not_lock_out_flashrom(tmp_path):
    srv = Server("W25Q16JV", tmp_path / "f.bin", "--evict-idle-after", "1")
    try:
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        idle.sendall(b"\x00")
        assert idle.recv(1) == b"\x06"
        import time

        time.sleep(1.2)
        assert 'Found Winbond flash chip "W25Q16.V"' in srv.flashrom()
        idle.settimeout(5)
        assert idle.recv(1) == b""  # cut for the newcomer
    finally:
        srv.stop()


def test_spi_serve_bad_values_are_one_line_errors(tmp_path):
    img = tmp_path / "x.bin"
    for args, want in [(["--clock-hz", "-1"], "--clock-hz"), (["--erase-fail-after", "-3"], "--erase-fail-after"),
                       (["--stuck-bit", "99999999999:9:7"], "address"), (["--stuck-bit", "0x10:9:1"], "bit 9"),
                       (["--stuck-bit", "0x10:1:5"], "value 5"), (["--stuck-bit", "zz:1:1"], "address is not"),
                       (["--stuck-bit", "1:2"], "ADDR:BIT:VALUE"), (["--timing", "fast"], "--timing"),
                       (["--timing", "scale=-2"], "--timing"), (["--listen", "0.0.0.0:0"], "--allow-remote"),
                       (["--listen", "nonsense"], "HOST:PORT"), (["--image", str(tmp_path)], "is a directory"),
                       (["--evict-idle-after", "x"], "--evict-idle-after"),
                       (["--idle-evict", "x"], "--idle-evict")]:  # the old spelling, still accepted
        a = ["spi", "serve", "--chip", "W25Q16JV", "--listen", "127.0.0.1:0"]
        a += [] if "--image" in args else ["--image", img]
        p = ssdlab(*a, *args, check=False, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert want in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    # The address is blamed for a bad address, the bit number for a bad bit.
    p = ssdlab("spi", "serve", "--chip", "W25Q16JV", "--image", img, "--stuck-bit", "0x10:9:1", check=False)
    assert "address" not in p.stderr.split("bit 9")[1]


def test_instant_timing_keeps_datasheet_busy_time_in_the_stats(tmp_path):
    f = Flash(chip="W25Q16JV", timing="instant")
    f.transfer(b"\x06")
    f.transfer(b"\x20\x00\x10\x00")
    assert not f.busy and f.read_status() & 1 == 0
    assert f.stats["busy_ns_datasheet"] == 45_000_000 and f.stats["busy_ns"] == 0
    g = Flash(chip="W25Q16JV", timing="scale=0.01")
    g.transfer(b"\x06")
    g.transfer(b"\x20\x00\x10\x00")
    assert g.busy_until_ns - g.now_ns == 450_000 and g.stats["busy_ns_datasheet"] == 45_000_000
    d = Flash(chip="W25Q16JV")  # datasheet (typical) stays the default
    d.transfer(b"\x06")
    d.transfer(b"\x20\x00\x10\x00")
    assert d.busy_until_ns - d.now_ns == 45_000_000 and d.stats["busy_ns"] == 45_000_000
    with pytest.raises(ValueError, match="scale=X"):
        Flash(chip="W25Q16JV", timing="scale=x")


# --- power cuts and firmware in the loop (crates/spi-fw) -------------------------------------

def test_python_power_cut_mid_erase_partial_state_and_power_up_timing():
    f = Flash("W25Q16JV", power_seed=5)
    f.transfer(b"\x06")
    f.transfer(b"\x02\x00\x10\x00" + bytes(256))           # zeros into page 0x1000
    f.wait_ready()
    f.transfer(b"\x06")
    f.transfer(b"\x20\x00\x10\x00")                         # sector erase: busy for tSE (45 ms)
    f.power_cut(at_ns=f.now_ns + 9_000_000)                 # 20% of the way through
    f.advance(10_000_000)
    assert not f.powered and f.transfer(b"\x9f\x00\x00\x00") == b"\xff" * 4
    cut = f.last_power_cut()
    assert cut["interrupted"] == "erase" and abs(cut["fraction"] - 0.2) < 0.01
    sector = f.contents()[0x1000:0x2000]
    assert sector not in (b"\xff" * 4096, bytes(256) + b"\xff" * (4096 - 256))   # neither erased nor intact
    f.power_up()
    assert f.read_status() == 0xFF                          # ignored for tVSL (MISO floats high)
    f.advance(20_000)
    f.transfer(b"\x06")
    assert f.read_status() & 0x02 == 0                      # WREN ignored until tPUW
    f.advance(5_000_000)
    f.transfer(b"\x06")
    assert f.read_status() & 0x03 == 0x02
    with pytest.raises(ValueError, match="wear-out"):
        Flash("W25Q16JV", wear_out="melts")


def test_campaign_cli_reports_a_clean_run_and_catches_the_broken_driver(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('ops = 40\ncuts = 80\nseed = 3\n')
    ssdlab("spi", "campaign", cfg, "--out", tmp_path / "good")
    r = json.loads((tmp_path / "good" / "report.json").read_text())
    assert r["cut_points"] >= 70 and not r["violations"] and not r["workload_errors"]
    assert r["config"]["driver"] == "w25q32jv" and r["simulated_ns"] > 0 and r["sector_erases"] > 0
    page = (tmp_path / "good" / "report.md").read_text()
    assert "littlefs kept its promise at every cut point" in page
    # The driver without status polling: caught (exit 1), with what broke in the report.
    bad = ssdlab("spi", "campaign", cfg, "--driver", "no-poll", "--out", tmp_path / "bad", check=False)
    assert bad.returncode == 1, bad.stderr
    rb = json.loads((tmp_path / "bad" / "report.json").read_text())
    assert rb["violations"] or rb["workload_errors"]
    # A replay of one cut point runs that cut alone.
    one = ssdlab("spi", "campaign", cfg, "--only-frame", str(r["frames_total"] // 2), "--out", tmp_path / "one")
    assert json.loads((tmp_path / "one" / "report.json").read_text())["cut_points"] == 1, one.stderr


def test_campaign_settings_are_checked_in_one_line(tmp_path):
    for text, want in (('chip = "W25Q999"\n', "known chips"), ("fs_blocks = 7\n", "64, 128 or 256"),
                       ("cutz = 5\n", "cutz"), ("ops = [\n", "c.toml")):
        cfg = tmp_path / "c.toml"
        cfg.write_text(text)
        p = ssdlab("spi", "campaign", cfg, "--out", tmp_path / "o", check=False)
        assert p.returncode != 0 and want in p.stderr and "Traceback" not in p.stderr, (text, p.stderr)
    p = ssdlab("spi", "chips", "extra.toml", check=False)
    assert p.returncode != 0 and "only campaign takes a config" in p.stderr
