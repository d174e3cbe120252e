"""uio-kv as a user meets it: a latency plan from Python, its errors, and `ssdlab reproduce
uio-kv --quick` with its report, figure and tables."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from ssdlab import ConfigError, uio

BIN = Path(sys.executable).parent


def test_uio_is_faster_remotely_and_pays_only_gme_locally():
    r = uio.latency({"ops": 50, "value_bytes": [64, 4096], "mix_devices": [2], "mix_ops": 100, "timings": [False]})
    rows = {(x["value_bytes"], x["op"], x["remote"], x["path"]): x for x in r["rows"]}
    assert len(rows) == 2 * 2 * 2 * 2
    links = r["plan"]["links"]
    for vb in (64, 4096):
        for op in ("put", "get"):
            u, t = rows[(vb, op, True, "uio")], rows[(vb, op, True, "traditional")]
            assert u["ops"] == t["ops"] == 50
            assert u["mean_ns"] < t["mean_ns"], (vb, op)
            # Locally, with media in RAM, UIO differs by GME's route alone (16-byte keys).
            u, t = rows[(vb, op, False, "uio")], rows[(vb, op, False, "traditional")]
            gme = links["gme_ns"] + round(16 * 1e9 / links["gme_bytes_per_s"])
            assert u["mean_ns"] - t["mean_ns"] == pytest.approx(gme)
    (timing, a, b), = r["fits"]
    assert not timing and 0 < a < 1 and b > 0
    mix, = r["mixes"]
    assert mix["devices"] == 2 and 0.4 < mix["remote_fraction"] < 0.6
    assert mix["measured_ratio"] < 1
    # Same plan, same numbers.
    assert uio.latency({"ops": 50, "value_bytes": [64, 4096], "mix_devices": [2], "mix_ops": 100, "timings": [False]}) == r


@pytest.mark.parametrize("plan, text", [
    ({"devices": 1}, "needs a remote device"),
    ({"device": "huge"}, "expected one of paper, quick"),
    ({"key_bytes": 0}, "key_bytes = 0"),
    ({"value_bytes": []}, "must not be empty"),
    ({"utl": {"gc_free_blocks": 1}}, "utl.gc_free_blocks = 1: expected >= 2"),
    ({"ops": 5, "nope": 1}, "nope"),
])
def test_bad_plans_are_refused_with_the_key(plan, text):
    with pytest.raises(ConfigError, match=text):
        uio.latency(plan)


def test_reproduce_quick_writes_report_figure_and_tables(tmp_path):
    r = subprocess.run([str(BIN / "ssdlab"), "reproduce", "uio-kv", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    rep = tmp_path / "uio-kv"
    md = (rep / "report.md").read_text()
    assert "| remote put, mean over value sizes | -8.2% |" in md
    assert "model u' (by count)" in md
    assert (rep / "latency_vs_value.png").stat().st_size > 10_000
    with open(rep / "latency.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 7 * 2 * 2 * 2  # timings x value sizes x put/get x local/remote x paths
    with open(rep / "mix.csv", newline="") as f:
        mixes = list(csv.DictReader(f))
    assert [int(m["devices"]) for m in mixes] == [2, 4, 8, 2, 4, 8]
    # More devices, more remote operations: the mix moves toward the remote ratio.
    off = [float(m["measured_ratio"]) for m in mixes if m["nand_timing"] == "False"]
    assert off[0] > off[1] > off[2]
