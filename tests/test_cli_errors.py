"""Every subcommand, given bad values, ends with one line naming the option or file and what
was expected: no Python traceback, no usage dump, exit status 2 (1 for a failed run)."""

import os
import socket

import pytest

from clitools import SSDLAB, Server, ssdlab, write
from ssdlab.serving import free_port


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "binary.toml").write_bytes(b"\x00\xff\xfe\x80" * 8)
    (d / "empty.csv").write_text("")
    (d / "onlybad.csv").write_text("not,a,trace\n")
    (d / "garbage.blk").write_bytes(bytes(range(256)) * 4)
    (d / "dev.toml").write_text('preset = "tiny"\n[timing]\nenabled = false\n')
    (d / "badkey.toml").write_text('preset = "tiny"\n[ftl]\nspare_factor = "lots"\n')
    (d / "spec.toml").write_text('[device]\npreset = "tiny"\n[cache]\nnope = 1\n')
    return d


CASES = [
    # (arguments, text the one line must contain)
    (["run", "{d}/missing.toml", "--out", "{d}/o"], "missing.toml"),
    (["run", "{d}/binary.toml", "--out", "{d}/o"], "UTF-8"),
    (["run", "{d}", "--out", "{d}/o"], "is a directory"),
    (["run", "{d}/badkey.toml", "--out", "{d}/o"], "spare_factor"),
    (["replay", "{d}/empty.csv", "--format", "msr", "--preset", "tiny", "--out", "{d}/o"], "empty"),
    (["replay", "{d}/onlybad.csv", "--format", "msr", "--preset", "tiny", "--out", "{d}/o"], "no valid msr record"),
    (["replay", "{d}/garbage.blk", "--format", "blkparse", "--preset", "tiny", "--out", "{d}/o"], "lines skipped"),
    (["replay", "{d}/empty.csv", "--format", "nope", "--out", "{d}/o"], "--format"),
    (["replay", "{d}/empty.csv", "--format", "msr", "--queue-depth", "0", "--out", "{d}/o"], "--queue-depth"),
    (["replay", "{d}/empty.csv", "--format", "msr", "--max-ops", "-1", "--out", "{d}/o"], "--max-ops"),
    (["replay", "{d}", "--format", "msr", "--out", "{d}/o"], "is a directory"),
    (["report", "{d}/missing-run"], "missing-run"),
    (["config", "check", "{d}/binary.toml"], "UTF-8"),
    (["config", "check", "{d}/missing.toml"], "missing.toml"),
    (["config", "show", "no-such-preset"], "no-such-preset"),
    (["config", "frobnicate"], "action"),
    (["reproduce", "no-such-experiment"], "no-such-experiment"),
    (["sweep", "{d}/missing.toml", "--out", "{d}/o"], "missing.toml"),
    (["sweep", "{d}/binary.toml", "--out", "{d}/o"], "UTF-8"),
    (["cache", "run", "{d}/binary.toml", "--out", "{d}/o"], "UTF-8"),
    (["sweep", "{d}/dev.toml", "--out", "{d}/o", "--jobs", "0"], "--jobs"),
    (["serve", "{d}/dev.toml", "--max-connections", "0"], "--max-connections"),
    (["serve", "{d}/dev.toml", "--max-request", "0"], "--max-request"),
    (["serve", "{d}/dev.toml", "--listen", "0.0.0.0:0"], "loopback"),
    (["serve", "{d}/dev.toml", "--export", "bad"], "--export"),
    (["stats", "nonsense"], "nonsense"),
    (["stats", "127.0.0.1:{port}"], "127.0.0.1"),
    (["spi", "serve", "--image", "{d}/f.bin", "--clock-hz", "-1"], "--clock-hz"),
    (["spi", "serve", "--image", "{d}/f.bin", "--stuck-bit", "99999999999:9:7"], "address"),
    (["spi", "serve", "--image", "{d}/f.bin", "--timing", "warp"], "--timing"),
    (["spi", "frobnicate"], "spi_action"),
    (["cache", "serve", "{d}/spec.toml", "--max-connections", "0"], "--max-connections"),
    (["cache", "run", "{d}/missing.toml", "--out", "{d}/o"], "missing.toml"),
    (["cache", "run", "{d}/spec.toml", "--out", "{d}/o"], "nope"),
    (["cache", "convert", "{d}/empty.csv"], "--format"),
    (["nonsense-command"], "invalid choice"),
]


@pytest.mark.parametrize("args,want", CASES, ids=[" ".join(a[:2]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_values_give_one_line_errors(files, args, want):
    port = free_port()
    argv = [a.format(d=files, port=port) for a in args]
    p = ssdlab(*argv, check=False, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode in (1, 2), (argv, p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, (argv, p.stderr)
    assert len(lines) == 1, (argv, p.stderr)
    assert want in lines[0], (argv, want, p.stderr)


def test_replay_reports_skipped_lines_by_number(tmp_path):
    from pathlib import Path

    trace = Path(__file__).parent / "data" / "traces" / "sample.blkparse.txt"
    p = ssdlab("replay", trace, "--format", "blkparse", "--preset", "tiny", "--out", tmp_path / "o")
    assert "7 records replayed, 19 lines skipped (lines 15, 16, 17, 18, 19, 26," in p.stderr, p.stderr
    import json

    t = json.loads((tmp_path / "o" / "metrics.json").read_text())["trace"]
    assert t["records"] == 7 and t["skipped_lines"] == 19 and t["skipped_line_numbers"][:2] == [15, 16]


# A data-backed device of 8 TiB: about 25 GiB of maps before the host writes anything.
BIG_DATA = 'preset = "default"\nstorage = "data"\n[geometry]\nblocks_per_plane = 65536\n'
CACHE_SPEC = '[device]\npreset = "fdp-ssd"\n[cache]\n'


def _memory_env(limit: int) -> dict:
    """The environment of a machine with `limit` bytes available (SSDLAB_MEMORY_AVAILABLE, the
    core's own budget setting: the least of it, MemAvailable and the cgroup's limit counts)."""
    return {**os.environ, "SSDLAB_MEMORY_AVAILABLE": str(limit)}


@pytest.mark.parametrize("command", [["run", "{big}", "--out", "{d}/o"], ["serve", "{big}"], ["kv", "serve"],
                                     ["cache", "serve", "{cache}"]], ids=["run", "serve", "kv serve", "cache serve"])
def test_a_device_past_the_available_memory_is_refused_before_allocating(tmp_path, command):
    """The estimate is checked before anything is allocated: one line naming it and what is
    available, exit 2 (a 2 GiB allocation used to abort with a backtrace, exit 134)."""
    big = write(tmp_path / "big.toml", BIG_DATA)
    cache = write(tmp_path / "cache.toml", CACHE_SPEC)
    argv = [a.format(big=big, cache=cache, d=tmp_path) for a in command]
    limit = (8 << 30) if "{big}" in command else (1 << 20)
    p = ssdlab(*argv, "--listen" if "serve" in command else "--quiet", *([f"127.0.0.1:{free_port()}"] if "serve" in command else []),
               check=False, env=_memory_env(limit), timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    want = "8.0 GiB are available" if limit == 8 << 30 else "1.0 MiB are available"
    assert "this device needs about" in lines[0] and want in lines[0] and "--force" in lines[0], lines[0]


def test_force_builds_a_device_past_the_estimate(tmp_path, monkeypatch):
    """--force: a run and a server go ahead on a machine that says it has too little memory
    (a small device and a small budget, so that nothing big is allocated)."""
    cfg = write(tmp_path / "dev.toml", 'preset = "tiny"\n[timing]\nenabled = false\n[workload]\nstop_device_writes = 0.05\n')
    monkeypatch.setenv("SSDLAB_MEMORY_AVAILABLE", "1024")
    assert ssdlab("run", cfg, "--out", tmp_path / "o", "--quiet", check=False).returncode == 2
    ssdlab("run", cfg, "--out", tmp_path / "o", "--quiet", "--force")
    assert (tmp_path / "o" / "metrics.json").exists()
    port = free_port()
    s = Server([*SSDLAB, "kv", "serve", "--listen", f"127.0.0.1:{port}", "--force"], port, tmp_path / "kv.log")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"PING\r\n")
            assert c.recv(64) == b"+PONG\r\n"
    finally:
        assert s.stop() == 0, s.log.read_text()
