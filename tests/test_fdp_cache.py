"""fdp-cache as a user runs it: `ssdlab reproduce fdp-cache` on a tiny device writes the report,
CSV and figures, and FDP segregation beats mixing; the Python API and trace conversion."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssdlab import _native
from ssdlab.studies.fdp_cache.api import run_cache
from ssdlab.studies.verdict import check_saved, load, table

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# The experiment's own file with a tiny quick mode: 1 GiB raw, 4 handles, a few seconds a run.
TINY_QUICK = """
[quick]
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 2, pages_per_block = 16, blocks_per_plane = 512 }
fdp = { handles = 4, ru_superblocks = 1 }
region_bytes = 131072
loc_write_bytes = 131072
rate_rps = 2000
device_writes = 4.0
utilizations = [0.5, 1.0]
soc_fractions = [0.04, 0.2]
soc_sweep_utilization = 1.0
variants = ["twitter-cluster12"]
variant_utilization = 1.0
variant_device_writes = 1.0
jobs = 1
"""


def tiny_experiments(base: Path, extra: str = "") -> Path:
    """An experiments folder at `base` whose fdp-cache experiment is the shipped one with
    TINY_QUICK's --quick section (plus `extra` keys in it)."""
    text = (ROOT / "experiments" / "fdp-cache" / "experiment.toml").read_text()
    (base / "fdp-cache").mkdir(parents=True)
    (base / "fdp-cache" / "experiment.toml").write_text(text.split("[quick]")[0] + TINY_QUICK + extra)
    return base


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    exp = tiny_experiments(tmp_path_factory.mktemp("experiments"))
    out = tmp_path_factory.mktemp("reports")
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(exp))
    r = subprocess.run([str(BIN / "ssdlab"), "reproduce", "fdp-cache", "--quick", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    return out / "fdp-cache"


def test_resume_reuses_finished_runs_and_reruns_changed_ones(report, tmp_path):
    exp = tiny_experiments(tmp_path / "experiments")
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(exp))
    before = (report / "results.csv").read_bytes()
    # A point whose input no longer matches (or that never finished) is run again.
    stale = report / "runs" / "kvcache_u50_soc4_fdp" / "config.json"
    stale.write_text(stale.read_text().replace('"utilization": 0.5', '"utilization": 0.55'))
    cmd = [str(BIN / "ssdlab"), "reproduce", "fdp-cache", "--quick", "--out", str(report.parent), "--resume"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    rerun = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    assert len(rerun) == 1 and "kvcache_u50_soc4_fdp" in rerun[0], r.stdout
    assert "6 of 7 points reused" in r.stdout
    # Same inputs, same build: the same table, byte for byte.
    assert (report / "results.csv").read_bytes() == before


def test_reproduce_writes_report_csv_and_figures(report):
    for f in ["report.md", "results.csv", "runs.csv", "fig5_dlwa_over_time.png", "fig6_utilization_sweep.png", "soc_sweep_theorem1.png"]:
        assert (report / f).stat().st_size > 0, f
    md = (report / "report.md").read_text()
    assert "| claim | document | ssdlab | effect | verdict | why (measured) |" in md
    assert "Theorem 1" in md
    rows = list(csv.DictReader((report / "runs.csv").read_text().splitlines()))
    assert len(rows) == 7  # 2 utilisations x FDP on/off, one more SOC size, 1 variant x FDP on/off
    runs = sorted(p.name for p in (report / "runs").iterdir())
    assert "kvcache_u100_soc4_fdp" in runs and "twitter-cluster12_u100_soc4_nofdp" in runs
    ts = list(csv.DictReader((report / "runs" / "kvcache_u50_soc4_fdp" / "timeseries.csv").read_text().splitlines()))
    assert len(ts) > 10 and float(ts[-1]["device_writes"]) > 3.0


def test_runs_that_do_not_settle_are_marked_in_the_report(tmp_path):
    # With the steady rule, the variant's 1 device write leaves no room for its windows: it
    # never settles, and every table that shows its DLWA says so.
    steady = "steady = { start_device_writes = 1.0, window_device_writes = 0.5, tolerance = 0.02, windows = 2 }\n"
    exp = tiny_experiments(tmp_path / "experiments", steady)
    r = subprocess.run([str(BIN / "ssdlab"), "reproduce", "fdp-cache", "--quick", "--out", str(tmp_path / "r")],
                       env=dict(os.environ, SSDLAB_EXPERIMENTS=str(exp)), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    out = tmp_path / "r" / "fdp-cache"
    rows = list(csv.DictReader((out / "runs.csv").read_text().splitlines()))
    assert {r["run"] for r in rows if r["steady"] == "False"} >= {"twitter-cluster12_u100_soc4_fdp", "twitter-cluster12_u100_soc4_nofdp"}
    md = (out / "report.md").read_text()
    variants = md[md.index("## Variants"):].split("\n\n")[1].splitlines()[2:]
    assert len(variants) == 2 and all("(not settled)" in row for row in variants), variants


def test_the_verdicts_are_the_judges_and_the_report_shows_them(report):
    doc, judged = load(report / "verdicts.json")
    assert check_saved(report / "verdicts.json") == []
    md = (report / "report.md").read_text()
    assert all(line in md.splitlines() for line in table(judged))
    assert doc["study"] == "fdp-cache" and doc["mode"] == "quick"
    # The document's DLWA claims at 50% and 100% (and their reductions, the headline) are all there.
    whats = [j.claim.what for j in judged]
    for u in ("50%", "100%"):
        for what in (f"DLWA without FDP, {u} utilisation", f"DLWA with FDP, {u} utilisation",
                     f"DLWA reduction by FDP (non-FDP / FDP), {u} utilisation"):
            assert what in whats, what
    assert sorted(j.claim.what for j in judged if j.claim.headline) == [
        "DLWA reduction by FDP (non-FDP / FDP), 100% utilisation", "DLWA reduction by FDP (non-FDP / FDP), 50% utilisation"]


def test_fdp_beats_mixing_and_leaves_the_cache_unchanged(report):
    by = {r["run"]: r for r in csv.DictReader((report / "runs.csv").read_text().splitlines())}
    on, off = by["kvcache_u100_soc4_fdp"], by["kvcache_u100_soc4_nofdp"]
    assert float(on["dlwa"]) < 1.1
    assert float(off["dlwa"]) > 2 * float(on["dlwa"])
    assert float(by["kvcache_u50_soc4_nofdp"]["dlwa"]) < float(off["dlwa"])  # more utilisation, more GC
    assert on["alwa"] == off["alwa"] and on["nvm_hit_ratio"] == off["nvm_hit_ratio"]
    assert float(on["read_p99_us"]) <= float(off["read_p99_us"])
    assert float(on["write_p99_us"]) <= float(off["write_p99_us"])
    # Theorem 3's proxy: less garbage collection, less media time.
    assert float(on["migration_busy_die_s"]) < 0.1 * float(off["migration_busy_die_s"])
    assert float(on["media_busy_die_s"]) < float(off["media_busy_die_s"])
    # SOC DLWA rises with SOC size, as Theorem 1 says.
    big = by["kvcache_u100_soc20_fdp"]
    assert float(big["soc_dlwa"]) > float(on["soc_dlwa"])
    assert abs(float(big["soc_dlwa"]) / float(big["theorem1_dlwa"]) - 1) < 0.16


# The tiny quick mode with the point sets that answer the curve's-shape questions instead of the
# SOC sweep and the variants: another spare and GC by age, LRU regions, Twitter scaled.
TINY_SHAPE = TINY_QUICK.replace('soc_fractions = [0.04, 0.2]', 'soc_fractions = []').replace(
    'variants = ["twitter-cluster12"]', 'variants = []').replace('utilizations = [0.5, 1.0]', 'utilizations = [0.5, 0.9, 1.0]') + """shape = { spare_factors = [0.145, 0.2], gc_streams = ["separate", "by-age"], gc_spare_factors = [0.2], workloads = ["kvcache-sizes"] }
loc_eviction = { policies = ["lru"], utilizations = [1.0] }
twitter = { utilization = 0.5, trace_rps = 4360, paper_flash_bytes = 930e9, paper_dram_bytes = 16e9, ttl = ["kept", "off"], max_requests = 400000 }
"""


def test_the_shape_eviction_and_twitter_point_sets_are_judged_and_shown(tmp_path):
    text = (ROOT / "experiments" / "fdp-cache" / "experiment.toml").read_text()
    (tmp_path / "e" / "fdp-cache").mkdir(parents=True)
    (tmp_path / "e" / "fdp-cache" / "experiment.toml").write_text(text.split("[quick]")[0] + TINY_SHAPE)
    r = subprocess.run([str(BIN / "ssdlab"), "reproduce", "fdp-cache", "--quick", "--out", str(tmp_path / "r")],
                       env=dict(os.environ, SSDLAB_EXPERIMENTS=str(tmp_path / "e")), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    out = tmp_path / "r" / "fdp-cache"
    by = {r["run"]: r for r in csv.DictReader((out / "runs.csv").read_text().splitlines())}
    # Named by what differs from the defaults; the experiment's own curve is not run twice.
    for name in ("kvcache_u50_soc4_nofdp_spare20_gc-by-age", "kvcache_u100_soc4_nofdp_spare20_gc-by-age", "kvcache_u100_soc4_nofdp_spare20",
                 "kvcache-sizes_u50_soc4_nofdp", "kvcache_u100_soc4_fdp_lru", "twitter-cluster12_u50_soc4_nofdp_scaled_nottl"):
        assert name in by, sorted(by)
    assert not any("spare14p5" in n or "gc-separate" in n for n in by)
    assert "kvcache_u50_soc4_nofdp_gc-by-age" not in by  # GC placements are crossed with gc_spare_factors only
    # More spare, less amplification at full utilisation (all else equal).
    assert float(by["kvcache_u100_soc4_nofdp_spare20"]["dlwa"]) < float(by["kvcache_u100_soc4_nofdp"]["dlwa"])
    md = (out / "report.md").read_text()
    shape = md[md.index("## The curve's shape without FDP"):].split("\n## ")[0]
    rows = [ln for ln in shape.splitlines() if ln.startswith("| spare")]
    assert len(rows) == 4 and "(the experiment)" in rows[0], rows  # the experiment, spare 20% x 2 GCs, the other byte split
    assert all(("(ok)" in ln or "(larger)" in ln or "(smaller)" in ln) for ln in rows)
    assert "moves the curve's shape most" in shape and "(measured:" in shape
    assert (out / "shape_ablations.png").stat().st_size > 0
    lru = md[md.index("## LOC region eviction"):].split("\n## ")[0]
    assert sum(1 for ln in lru.splitlines() if ln.startswith("| LRU |")) == 2
    # The trace's TTLs kept: items expire in DRAM long before it evicts them, nothing reaches
    # flash (CacheLib writes no expired item); with TTLs off the device is written.
    tw = md[md.index("## Twitter cluster12, scaled"):].split("\n## ")[0]
    kept = [ln for ln in tw.splitlines() if ln.startswith("| kept |")]
    off = [ln for ln in tw.splitlines() if ln.startswith("| off |")]
    assert len(kept) == 2 and all("no flash writes" in ln for ln in kept), kept
    assert len(off) == 2 and not any("no flash writes" in ln for ln in off), off


def test_the_loc_ring_pattern_settles_only_after_several_loc_cycles(tmp_path):
    # experiments/fdp-cache/loc-ring.toml, the 50% non-FDP run's writes without the cache, as
    # the case-study page tells users to run it: DLWA sits near 1.05-1.2 for the first LOC
    # cycle (3.7 device writes) and settles ~25% higher only after ~10 device writes, which is
    # why the experiment's steady rule needs windows spanning two LOC cycles.
    r = subprocess.run([str(BIN / "ssdlab"), "run", str(ROOT / "experiments" / "fdp-cache" / "loc-ring.toml"),
                        "--out", str(tmp_path / "r"), "-q"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    rows = list(csv.DictReader((tmp_path / "r" / "timeseries.csv").read_text().splitlines()))
    logical = json.loads((tmp_path / "r" / "metrics.json").read_text())["device"]["logical_bytes"]

    def dlwa(lo: float, hi: float) -> float:
        span = [r for r in rows if lo * logical < int(r["host_write_bytes"]) <= hi * logical]
        first, last = span[0], span[-1]
        return ((int(last["nand_write_bytes"]) - int(first["nand_write_bytes"]))
                / (int(last["host_write_bytes"]) - int(first["host_write_bytes"])))

    early, settled = dlwa(1.0, 3.5), dlwa(12.0, 20.0)
    assert early < 1.2 and settled > 1.3, (early, settled)
    assert abs(dlwa(12.0, 16.0) / dlwa(16.0, 20.0) - 1) < 0.02  # settled: the two halves agree


def test_python_api_trace_replay_and_errors(tmp_path):
    dev = {"preset": "fdp-ssd", "geometry": {"channels": 2, "dies_per_channel": 2, "planes_per_die": 2, "pages_per_block": 16, "blocks_per_plane": 512},
           "fdp": {"handles": 4, "ru_superblocks": 1}, "ftl": {"spare_factor": 0.145}, "timing": {"enabled": False},
           "precondition": {"sequential_fill": False, "random_device_writes": 0.0}}
    tw = tmp_path / "tw.txt"
    tw.write_text("".join(f"{i // 10},key{i % 37},5,{300 + 40 * (i % 50)},1,{'get' if i % 5 == 0 else 'set'},300\n" for i in range(3000)))
    csv_path = tmp_path / "tw.csv"
    lines, reqs, skipped = _native.cache_convert_trace(str(tw), "twitter", str(csv_path))
    assert (lines, reqs, skipped) == (3000, 3000, 0)
    spec = {"cache": {"region_bytes": 131072, "loc_write_bytes": 131072, "dram_bytes": 4096}, "stop_requests": 10**9, "stop_device_writes": 0, "prefill_loc": False}
    s, series, _ = run_cache(dev, spec, trace=str(csv_path))
    assert s["requests"] == 3000
    assert s["cache"]["total"]["sets"] == 2400
    assert s["cache"]["total"]["dram_hits"] + s["cache"]["total"]["nvm_hits"] > 0
    with pytest.raises(_native.ConfigError, match="utilization"):
        run_cache(dev, {"cache": {"utilization": 2.0}})
    with pytest.raises(_native.ConfigError, match="unknown field"):
        run_cache(dev, {"cache": {"no_such_key": 1}})
    bad = tmp_path / "bad.csv"
    bad.write_text("key,op,key_bytes,value_bytes,ttl_s,time_s\nk,frob,1,1,0,0\n")
    with pytest.raises(_native.TraceError, match="frob"):
        run_cache(dev, spec, trace=str(bad))


# The 1 GiB test device (4 handles) with the cache at 100%: the `ssdlab cache run` tests' spec.
CLI_SPEC = """[device]
preset = "fdp-ssd"
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 2, pages_per_block = 16, blocks_per_plane = 512 }
fdp = { handles = 4, ru_superblocks = 1 }
ftl = { spare_factor = 0.145 }
[cache]
utilization = 1.0
region_bytes = 131072
loc_write_bytes = 131072
dram_bytes = 40000000
"""


def _cli_spec(path: Path, device_writes: float, workload: str) -> Path:
    path.write_text(f"stop_device_writes = {device_writes}\n" + CLI_SPEC
                    + f'[workload]\npreset = "{workload}"\nkeys = 1000000\n')
    return path


def test_cli_cache_run_and_convert(tmp_path):
    spec = _cli_spec(tmp_path / "spec.toml", 0.5, "kvcache-wo")
    ssd = str(BIN / "ssdlab")
    r = subprocess.run([ssd, "cache", "run", str(spec), "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["cache"]["total"]["gets"] == 0 and s["layout"]["soc_pid"] == 1 and s["layout"]["loc_pid"] == 2
    assert 0.5 <= s["device_writes"] < 0.6
    tw = tmp_path / "tw.txt"
    tw.write_text("1,a,1,10,7,get,0\n2,a,1,10,7,set,60\n")
    r = subprocess.run([ssd, "cache", "convert", str(tw), "--format", "twitter", "--out", str(tmp_path / "tw.csv")], capture_output=True, text=True)
    assert r.returncode == 0 and "2 requests" in r.stdout, r.stderr
    spec.write_text("[cache]\nutilization = 3\n")
    r = subprocess.run([ssd, "cache", "run", str(spec), "--out", str(tmp_path / "bad")], capture_output=True, text=True)
    assert r.returncode == 2 and "utilization" in r.stderr


def test_a_running_point_reports_how_far_it_is(report):
    """A long point tells the sweep how far it is (the sweep prints it every few minutes), and
    the point run again in a worker gives the metrics the reproduction recorded."""
    from ssdlab.sweep.local import _LocalBackend
    from ssdlab.sweep.run import _running_text

    point = sorted((report / "points").glob("*/metrics.json"))[0].parent
    cfg = json.loads((point / "config.json").read_text())
    be = _LocalBackend(1)
    try:
        handle = be.submit(cfg["runner"], json.dumps(cfg["task"]), None)
        seen, result = [], None
        while result is None:
            done = be.wait([handle], timeout=60)
            seen += [f for f in be.progress.values()]
            result = done[0][1] if done else None
    finally:
        be.close()
    assert seen and all(0 <= f <= 1 for f in seen), seen
    assert result["metrics"] == json.loads((point / "metrics.json").read_text())
    assert _running_text("p", 0.25, 600) == "[running] p: 25% after 10 min, about 30 min to go"
    assert _running_text("p", 0.5, 7200) == "[running] p: 50% after 2.0 h, about 2.0 h to go"
    # Resumed from a save at 40%: the time left is from the pace since.
    assert _running_text("p", 0.5, 600, 0.4) == "[running] p: 50% after 10 min (resumed at 40%), about 50 min to go"


def test_cli_cache_run_stopped_by_ctrl_c_goes_on_from_its_save(tmp_path):
    spec = _cli_spec(tmp_path / "spec.toml", 3.0, "kvcache")
    ssd = str(BIN / "ssdlab")
    r = subprocess.run([ssd, "cache", "run", str(spec), "--out", str(tmp_path / "straight")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run"
    cmd = [ssd, "cache", "run", str(spec), "--out", str(out), "--checkpoint-every", "0.002"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "run.ckpt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert (out / "run.ckpt").exists(), "no save while it ran"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "goes on from the save in" in err and "Traceback" not in err
    assert not (out / "summary.json").exists()

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "checkpoint: resumed from " in r.stdout
    assert not (out / "run.ckpt").exists()
    for f in ("summary.json", "timeseries.csv"):
        assert (out / f).read_text() == (tmp_path / "straight" / f).read_text(), f
