"""The flac study's fair comparisons (issue 43): where a program's time goes (calls, time inside
them, read/write sizes) counted in process and through the shim, the kernel's per-call costs
measured and charged to a library file system, and the attach paths' table."""

import json
import os
import subprocess

import pytest

from ssdlab.studies.flac import api as flac
from ssdlab.studies.flac.fairness import app_why, ceiling, io_share

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (tmpfs) for PM images")


def test_calls_sizes_and_time_are_counted_per_kind(shm):
    with flac.FlacFS(shm / "a.img", create="96M", dram="32M", pm_cost=False) as fs:
        fs.write_bytes("/small", b"x" * 100)
        fs.write_bytes("/big", b"y" * (3 << 20))
        assert fs.read_bytes("/big") == b"y" * (3 << 20)
        fs.stat("/small")
        io = fs.stats()["io"]
    assert io["calls"]["open"] >= 3 and io["calls"]["close"] >= 3 and io["calls"]["stat"] >= 1
    assert io["write_sizes"]["<4K"] >= 1 and io["write_sizes"][">=2M"] >= 1
    assert sum(io["read_sizes"].values()) >= 1
    assert io["call_ns_total"] > 0 and io["charged_ns"] == 0


def test_a_kernel_cost_is_charged_on_every_call_of_a_baseline(shm):
    kc = flac.kernel_costs(shm)
    assert set(kc) == {"read_ns", "write_ns", "open_ns", "close_ns", "stat_ns", "seek_ns"}
    assert all(v > 0 for v in kc.values())
    with flac.FlacFS(shm / "k.img", engine="pagecache", create="96M", dram="32M", pm_cost=False, kernel_cost=kc) as fs:
        fs.write_bytes("/f", b"z" * 8192)
        io = fs.stats()["io"]
    charged = sum(io["calls"][k[:-3]] * v for k, v in kc.items())
    assert io["charged_ns"] == charged > 0
    assert io["call_ns_total"] >= charged


def test_an_in_process_program_reports_only_its_own_io(shm):
    cfg = flac.fs_config(shm / "g.img", engine="dax", create="256M", dram="64M", pm_cost=False)
    tree = {"root": "/t", "files": 8, "total_bytes": 1 << 20, "match_fraction": 0.01, "pattern": "persistent", "seed": 1}
    r = flac.run({"kind": "app", "fs": cfg, "app": {"app": "grep", "cold": True, "tree": tree}})
    prog, whole = r["program"], r["stats"]
    # The tree was written before the program: its writes are in the file system's totals only.
    assert prog["writes"] == 0 and whole["writes"] > 0
    assert prog["read_bytes"] == r["result"]["bytes_read"]
    assert 0 < prog["io"]["call_ns_total"] / 1e9 <= r["result"]["seconds"] * 1.05 + 0.01


def test_shim_stats_split_a_programs_time(shim_built, shm):
    src = shm / "src.bin"
    src.write_bytes(os.urandom(4 << 20))
    stats = shm / "dd.stats"
    env = flac.shim_env(shm / "s.img", mount="/flacfs-fair", create="128M", dram="32M", pm_cost=False)
    subprocess.run(["cp", str(src), "/flacfs-fair/b"], env=env, check=True)
    env["FLACFS_STATS"] = str(stats)
    p = subprocess.run(["dd", "if=/flacfs-fair/b", "of=/dev/null", "bs=2M"], env=env, capture_output=True)
    assert p.returncode == 0, p.stderr
    s = json.loads(stats.read_text().splitlines()[-1])
    assert s["io"]["read_sizes"][">=2M"] >= 2
    assert s["mapped_bytes"] == 4 << 20, "dd's 2 MiB page-aligned reads are attached"
    assert 0 < s["io"]["call_ns_total"] / 1e9 < s["wall_s"] + 0.01


@pytest.fixture
def shim_built():
    try:
        return flac.shim_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_a_bad_kernel_cost_stops_the_shim_with_its_name(shim_built, shm):
    env = flac.shim_env(shm / "e.img", mount="/flacfs-fair", create="64M", dram="16M")
    env["FLACFS_KERNEL_COST"] = "{not json"
    p = subprocess.run(["ls", "/flacfs-fair"], env=env, capture_output=True, text=True)
    assert "FLACFS_KERNEL_COST" in p.stderr


def test_the_explanation_follows_the_measured_io_share():
    base = {"engine": "dax", "seconds": 1.0, "io_s": 0.2, "mapped_bytes": 0, "copied_bytes": 10}
    ours = {"engine": "flac", "seconds": 0.9, "io_s": 0.1, "mapped_bytes": 5, "copied_bytes": 5}
    assert io_share(base) == pytest.approx(0.2) and ceiling(base) == pytest.approx(1.25)
    w = app_why([base], [ours], 6.7, "DAX FS", "grep")
    assert "at most 1.25x faster" in w.text and "20%" in w.measured
    heavy = {**base, "io_s": 0.95}
    w = app_why([heavy], [{**ours, "copied_bytes": 50}], 6.7, "DAX FS", "grep")
    assert "copied most" in w.text


def test_attach_paths_are_measured_at_each_size():
    r = flac.run({"kind": "attach_alternatives", "sizes": [4096, 2 << 20], "repeats": 3})
    assert [x["bytes"] for x in r["rows"]] == [4096, 2 << 20]
    assert all(x["mmap_batch_touch_us"] > 0 and x["mmap_per_page_touch_us"] > 0 for x in r["rows"])
    if not r["uffd_move"]:
        assert r["uffd_note"], "the report says why UFFDIO_MOVE was not measured"
