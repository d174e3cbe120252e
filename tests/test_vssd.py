"""flashblox as a user meets it: the vSSD API with data, crash recovery, errors; the swap
analysis; `ssdlab vssd` and `ssdlab reproduce flashblox` on a small quick mode (its claims
judged by ssdlab.studies.verdict); the seeds reaching every point."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssdlab import ConfigError, DeviceError
from ssdlab.studies import verdict
from ssdlab.studies.flashblox import api as vssd
from ssdlab.studies.flashblox.experiment import points

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMALL = {"geometry": {"blocks_per_plane": 16, "pages_per_block": 4}}


def small_fb(**kw):
    return vssd.FlashBlox("quick", storage="data", **SMALL, **kw)


def test_blocks_round_trip_and_survive_a_crash():
    fb = small_fb()
    a = fb.alloc_virtual_ssd("channel", capacity=1, channels=[2])
    b = fb.alloc_virtual_ssd("soft-plane", tput_level=2, channels=[3], spread=True)
    assert (a.block_sectors, a.unit_sectors, a.sector_bytes) == (128, 8, 4096)
    assert b.block_sectors == 4 * 32  # four soft-planes, one per die
    written = {}
    for v in (a, b):
        for k in range(3):
            blk = v.alloc_block()
            data = bytes((i * 13 + k + v.id) % 251 for i in range(v.unit_bytes * (k + 1)))
            v.write_data(blk, 0, data)
            written[(v.id, blk)] = (v, data)
    report = fb.crash_and_recover()
    assert report["blocks_recovered"] == 6 and report["duplicates"] == 0
    for (_, blk), (v, data) in written.items():
        assert v.read_data(blk, 0, len(data) // 4096) == data
    fb.check_invariants()
    # Wear shows where the data went: freeing a block erases the chunks it wrote (1, 2, 3 of a
    # 4-die stripe for the three blocks).
    for (vid, blk), (v, _) in written.items():
        if vid == a.id:
            v.free_block(blk)
    ch, die = fb.wear()
    assert ch[2] == 6 and sum(ch) == 6 and len(die) == 64


def test_swaps_move_data_between_channels_unseen():
    fb = small_fb()
    v = fb.alloc_virtual_ssd("channel", channels=[0])
    blk = v.alloc_block()
    data = os.urandom(v.block_bytes)
    v.write_data(blk, 0, data)
    fb.swap_channels(0, 9)
    assert v.read_data(blk, 0, v.block_sectors) == data
    s = fb.summary()
    assert s["wear"]["homes"][:4] == [36, 37, 38, 39]
    assert s["migration"]["blocks_moved"] == 4 and s["migration"]["swaps_done"] == 1


def test_api_errors_are_clear():
    fb = small_fb()
    with pytest.raises(ConfigError, match="isolation level"):
        fb.alloc_virtual_ssd("rack")
    v = fb.alloc_virtual_ssd("die", capacity=1)
    blk = v.alloc_block()
    with pytest.raises(ValueError, match="write pointer"):
        v.write_data(blk, 8, b"x" * v.unit_bytes)
    with pytest.raises(ValueError, match="whole units"):
        v.write_data(blk, 0, b"x" * 4096)
    with pytest.raises(ValueError, match="sectors are written"):
        v.read_data(blk, 0, 1)
    with pytest.raises(DeviceError, match="cannot allocate"):
        fb.alloc_virtual_ssd("channel", capacity=10**15)
    fb.dealloc_virtual_ssd(v)
    with pytest.raises(ValueError, match="no vSSD"):
        v.alloc_block()


def test_swap_plan_is_the_documents_example():
    p = vssd.swap_plan(16, 5, 0.9, 0.1)
    assert p["k_min"] == pytest.approx(9.3125)
    assert 10 < p["period_days"] < 12
    assert vssd.swap_plan(32)["period_days"] < p["period_days"] < vssd.swap_plan(8)["period_days"]


def run_cli(*args, env=None):
    return subprocess.run([str(BIN / "ssdlab"), *args], capture_output=True, text=True, timeout=600, env=env)


def test_cli_run_lifetime_plan_and_bad_specs(tmp_path):
    r = run_cli("vssd", "plan")
    assert r.returncode == 0 and "11.0 days" in r.stdout, r.stdout + r.stderr
    spec = tmp_path / "two.toml"
    spec.write_text("""
device = "quick"
warmup_ms = 50
duration_ms = 200
[[tenants]]
name = "kv"
level = "channel"
placement = { channels = [0] }
app = { kind = "ycsb", ycsb = { mix = "B", records = 20000 } }
[[tenants]]
name = "scan"
level = "die"
tput_level = 1
app = { kind = "disk", io = { pattern = "sequential", read_fraction = 1.0, block_bytes = [131072] } }
""")
    r = run_cli("vssd", "run", str(spec), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [t["name"] for t in s["tenants"]] == ["kv", "scan"]
    assert all(t["ops"] > 0 for t in s["tenants"])
    life = tmp_path / "life.toml"
    life.write_text("""
device = "lifetime"
device_config = { media = { pe_limit = 100 } }
max_weeks = 400
[flashblox.wear]
policy = "fixed"
pair = "max-rate-min-wear"
period_ns = 604800000000000
[[tenants]]
name = "hot"
placement = { channels = [0] }
write_share = 1.0
fill = 0.5
""")
    r = run_cli("vssd", "lifetime", str(life), "--out", str(tmp_path / "life"))
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "life" / "lifetime.json").read_text())["summary"]
    assert res["dead"] and res["swaps"] > 50 and res["lifetime_fraction"] > 0.8
    # Bad specs: one line naming what is wrong, exit 2, no traceback.
    bad = tmp_path / "bad.toml"
    bad.write_text('[[tenants]]\nname = "x"\nlevel = "rack"\n')
    r = run_cli("vssd", "run", str(bad), "--out", str(tmp_path / "bad"))
    assert r.returncode == 2 and "rack" in r.stderr and "Traceback" not in r.stderr, r.stderr
    bad.write_text("tenants = [\n")
    r = run_cli("vssd", "run", str(bad), "--out", str(tmp_path / "bad"))
    assert r.returncode == 2 and "bad.toml" in r.stderr and "Traceback" not in r.stderr, r.stderr


SMALL_QUICK = """
[quick]
device = "quick"
lifetime_device = "lifetime"
warmup_ms = 50
duration_ms = 300
[quick.motivation]
threads = 4
io_bytes = 65536
disk_fraction = 0.75
[quick.kv]
store = "leveldb"
leveldb = { level1_bytes = 4194304 }
mixes = ["A"]
mixes_four = []
utilization = 0.5
threads = [4, 8]
knee = 0.95
age_writes = 0.5
ablate_priority = true
ablate_strict = true
[quick.search]
rate_ops = 1000
io_bytes = 8192
mr_threads = 4
mr_io_bytes = 1048576
mr_weights = [0.1, 0.01]
[quick.lifetime]
pe_limit = 200
ideal_years = 5.0
a = 0.9
d = 0.1
fill = 0.9
fixed_weeks = [2]
trace_tenants = 2
trace_weeks = 10
[quick.migration]
utilization = 0.3
threads = 8
duration_ms = 3000
at_ms = 100
series_ms = 100
"""


def test_reproduce_writes_the_claims_table_and_figures(tmp_path):
    exp = tmp_path / "experiments" / "flashblox"
    exp.mkdir(parents=True)
    head = (ROOT / "experiments" / "flashblox" / "experiment.toml").read_text().split("[quick]")[0]
    exp.joinpath("experiment.toml").write_text(head + SMALL_QUICK)
    out = tmp_path / "reports"
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(tmp_path / "experiments"))
    r = run_cli("reproduce", "flashblox", "--quick", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    rep = out / "flashblox"
    md = (rep / "report.md").read_text()
    # Every verdict is the judge's, and the report prints the judged table as saved.
    assert verdict.check_saved(rep / "verdicts.json") == []
    doc, judged = verdict.load(rep / "verdicts.json")
    assert doc["study"] == "flashblox" and doc["mode"] == "quick"
    missing = [line for line in verdict.table(judged) if line not in md.splitlines()]
    assert missing == []
    assert verdict.legend() in md
    assert sum(j.claim.headline for j in judged) == 3
    for fig in ("motivation", "kv_isolation", "kv_knee", "search_mapreduce", "lifetime", "lifetime_erases", "imbalance", "migration"):
        assert (rep / f"{fig}.png").stat().st_size > 1000, fig
    with open(rep / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["claim"] for r in rows] == [j.claim.what for j in judged]
    # Each KV configuration is taken at its knee: the lowest thread count of the sweep within
    # 95% of its best throughput.
    with open(rep / "kv.csv", newline="") as f:
        kv_rows = list(csv.DictReader(f))
    for row in kv_rows:
        runs = {th: json.loads((rep / "runs" / f"kv2_A_{row['level']}_t{th}" / "metrics.json").read_text()) for th in (4, 8)}
        ops = {th: sum(t["ops_per_s"] for t in r["tenants"]) for th, r in runs.items()}
        knee = 4 if ops[4] >= 0.95 * max(ops.values()) else 8
        assert float(row["threads"]) == knee and float(row["ops"]) == pytest.approx(ops[knee]), row
        assert runs[4]["tenants"][0]["app"]["details"]["level_bytes"][1] > 0, "a LevelDB-like tenant with levels"
    assert "## KV ablations" in md and "reads first, suspend on" in md and "limiter strict" in md
    # The hammered channel dies in a sixteenth of the ideal life; the analysis's rotation
    # keeps the device nearly to the ideal.
    life = json.loads((rep / "runs" / "life_none" / "metrics.json").read_text())["summary"]
    rot = json.loads((rep / "runs" / "life_adaptive_rot" / "metrics.json").read_text())["summary"]
    assert life["lifetime_fraction"] < 0.1 and rot["lifetime_fraction"] > 0.85
    # Trace-driven tenants have no configured write share: their ideal life comes from the bytes
    # they wrote, so the fraction is a real number (a lower bound while the device is alive).
    trace = json.loads((rep / "runs" / "trace_none" / "metrics.json").read_text())["summary"]
    assert trace["host_write_bytes"] > 0 and 0 < trace["lifetime_fraction"] <= 1.0
    assert trace["ideal_weeks"] > trace["lifetime_weeks"] or trace["dead"]
    # Channel isolation protects the reader from the batch job.
    ch = json.loads((rep / "runs" / "search_channel" / "metrics.json").read_text())["tenants"][0]
    no = json.loads((rep / "runs" / "search_none" / "metrics.json").read_text())["tenants"][0]
    assert no["latency"]["all"]["p99_us"] > 2 * ch["latency"]["all"]["p99_us"]
    # Runs are deterministic: the same spec twice gives the same bytes.
    first = (rep / "runs" / "kv2_A_die_t8" / "metrics.json").read_text()
    r = run_cli("reproduce", "flashblox", "--quick", "--out", str(out), env=env)
    assert r.returncode == 0
    assert (rep / "runs" / "kv2_A_die_t8" / "metrics.json").read_text() == first


def test_seeds_reach_every_random_choice_and_deterministic_points_run_once():
    import tomllib

    spec = tomllib.loads((ROOT / "experiments" / "flashblox" / "experiment.toml").read_text().split("[quick]")[0]
                        + SMALL_QUICK.replace("[quick]\n", "[quick]\nseeds = [42, 43]\n", 1))
    pts = {p.name: p for p in points(spec, "quick")}
    # The lifetime studies of one hammered channel make no random choice: once, unsuffixed.
    assert sorted(n for n in pts if n.startswith("life_")) == sorted(
        ["life_none", "life_fixed_2w", "life_adaptive_doc", "life_adaptive_rot", "life_fixed_doc_tstar", "life_rot_tstar",
         "life_rot_2tstar"])
    for seed in (42, 43):
        run = pts[f"kv2_A_die_t8_s{seed}"].input
        assert (run["device"]["seed"], run["spec"]["seed"]) == (seed, seed)
        trace = pts[f"trace_adaptive_s{seed}"].input
        assert (trace["device"]["seed"], trace["spec"]["seed"], trace["msr_traces"]["seed"]) == (seed, seed, seed)
        assert pts[f"layer_cost_s{seed}"].input["device"]["seed"] == seed
    # Every point is distinct (two points with one input would share one result).
    assert len({json.dumps(p.input, sort_keys=True) for p in pts.values()}) == len(pts)
