"""The `ssdlab` command as a user runs it: files in, reports out, clear errors, clean Ctrl-C."""

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clitools import SSDLAB, ssdlab, write
from ssdlab import _native
from ssdlab.config import check_file

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"


TINY_RUN = """preset = "tiny"
[precondition]
random_device_writes = 0.5
[workload]
pattern = "zipf"
read_fraction = 0.3
queue_depth = 8
stop_device_writes = 0.5
"""


def test_run_writes_metrics_series_report_and_plots(tmp_path):
    cfg = write(tmp_path / "c.toml", TINY_RUN)
    p = ssdlab("run", cfg, "--out", tmp_path / "out")
    assert "DLWA" in p.stdout
    out = tmp_path / "out"
    m = json.loads((out / "metrics.json").read_text())
    for key in ["host_read_bytes", "host_write_bytes", "host_trim_bytes", "nand_read_bytes", "nand_write_bytes",
                "nand_erase_count", "gc_relocated_pages", "dlwa", "latency_ns", "throughput", "erase_count",
                "busy_fraction"]:
        assert key in m, key
    for op in ("read", "write", "trim"):
        assert op in m["latency_ns"]
    assert {"p50", "p90", "p99", "p999", "p9999", "max", "mean"} <= set(m["latency_ns"]["write"])
    assert {"min", "mean", "max", "stddev", "histogram"} <= set(m["erase_count"])
    assert m["dlwa"] == pytest.approx(m["nand_write_bytes"] / m["host_write_bytes"], rel=1e-5)
    header = (out / "timeseries.csv").read_text().splitlines()[0]
    assert header.startswith("sim_time_ns,host_write_bytes")
    for png in ("dlwa.png", "latency_cdf.png", "erase_counts.png"):
        assert (out / png).stat().st_size > 5000, png
    assert "DLWA" in (out / "report.md").read_text()


def test_same_config_same_metrics_bytes(tmp_path):
    cfg = write(tmp_path / "c.toml", TINY_RUN)
    ssdlab("run", cfg, "--out", tmp_path / "a", "-q")
    ssdlab("run", cfg, "--out", tmp_path / "b", "-q")
    assert (tmp_path / "a" / "metrics.json").read_bytes() == (tmp_path / "b" / "metrics.json").read_bytes()
    assert (tmp_path / "a" / "timeseries.csv").read_bytes() == (tmp_path / "b" / "timeseries.csv").read_bytes()


def test_report_rerenders_a_run_dir(tmp_path):
    cfg = write(tmp_path / "c.toml", TINY_RUN)
    ssdlab("run", cfg, "--out", tmp_path / "r", "-q")
    (tmp_path / "r" / "report.md").unlink()
    ssdlab("report", tmp_path / "r")
    assert (tmp_path / "r" / "report.md").exists()


@pytest.mark.parametrize("text, where, what", [
    ("seed = 1\n[ftl\nx=1\n", ":2", "expected"),
    ("[ftl]\ngc_polcy = \"greedy\"\n", ":2: ftl.gc_polcy", "valid keys here"),
    ("[geometry]\nchannels = 0\n", ":2: geometry.channels", "1 to 256"),
    ("[ftl]\ngc_policy = \"lru\"\n", ":2: ftl.gc_policy", "greedy | cost-benefit | fifo | d-choices"),
    ("[geometry]\npage_bytes = 5000\n", ":2: geometry.page_bytes", "multiple of sector_bytes"),
    ("[workload]\nstop_device_writes = 0\n", "stop", "no stop condition"),
])
def test_bad_config_gives_file_line_key_and_no_traceback(tmp_path, text, where, what):
    cfg = write(tmp_path / "bad.toml", text)
    p = ssdlab("run", cfg, "--out", tmp_path / "o", check=False)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "panicked" not in p.stderr
    assert "bad.toml" in p.stderr and where in p.stderr and what in p.stderr, p.stderr


def test_missing_config_file_is_a_clear_error(tmp_path):
    p = ssdlab("run", tmp_path / "nope.toml", "--out", tmp_path / "o", check=False)
    assert p.returncode == 2 and "nope.toml" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("fmt, name", [
    ("msr", "sample.msr.csv"), ("blkparse", "sample.blkparse.txt"), ("fio", "sample.fio-v2.log"),
    ("fio", "sample.fio-v3.log"), ("disksim", "sample.disksim.txt"), ("mqsim", "sample.mqsim.txt"),
])
def test_replay_each_trace_format(tmp_path, fmt, name):
    ssdlab("replay", TRACES / name, "--format", fmt, "--preset", "tiny", "--timestamps", "--out", tmp_path / "o", "-q")
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["host_read_cmds"] + m["host_write_cmds"] + m["host_trim_cmds"] + m["host_flush_cmds"] > 0


def test_replay_garbage_line_names_file_and_line(tmp_path):
    trace = write(tmp_path / "t.csv", "128166372003061629,hm,0,Read,0,4096,100\nthis is not a trace line\n")
    p = ssdlab("replay", trace, "--format", "msr", "--preset", "tiny", "--out", tmp_path / "o", check=False)
    assert p.returncode == 2
    assert "t.csv:2:" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_config_show_is_a_valid_commented_config(tmp_path):
    p = ssdlab("config", "show", "mqsim-default")
    assert "# Page size" in p.stdout and 'preset = "mqsim-default"' in p.stdout
    cfg = write(tmp_path / "m.toml", p.stdout)
    assert ": ok: " in ssdlab("config", "check", cfg).stdout.splitlines()[0]


def test_config_docs_are_current():
    """docs/CONFIG.md is generated from the key table; regenerate with `make docs`."""
    p = ssdlab("config", "keys")
    assert (ROOT / "docs" / "CONFIG.md").read_text() == p.stdout


def test_ctrl_c_stops_cleanly_with_partial_metrics(tmp_path):
    cfg = write(tmp_path / "long.toml", 'preset = "default"\n[timing]\nenabled = false\n[precondition]\nsequential_fill = false\nrandom_device_writes = 0\n[workload]\nstop_device_writes = 1000\n')
    proc = subprocess.Popen(SSDLAB + ["run", str(cfg), "--out", str(tmp_path / "o")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["interrupted"] is True
    assert m["host_write_bytes"] > 0


def test_reproduce_writes_report_table_figure_and_verdicts(tmp_path):
    exp = tmp_path / "experiments" / "gc-mini"
    exp.mkdir(parents=True)
    (exp / "experiment.toml").write_text("""kind = "gc-policies"
seed = 1
[device]
preset = "tiny"
geometry = { channels = 1, dies_per_channel = 1 }
[quick]
seeds = [1, 2]
geometry = { blocks_per_plane = 512 }
spare_factors = [0.15, 0.28]
policies = ["fifo", "greedy"]
warmup_device_writes = 2.0
measure_device_writes = 1.0
""")
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(tmp_path / "experiments"))
    p = subprocess.run(SSDLAB + ["reproduce", "gc-mini", "--quick", "--out", str(tmp_path / "reports")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "8 points (2 seeds)" in p.stdout
    out = tmp_path / "reports" / "gc-mini"
    rows = list(csv.DictReader((out / "dlwa.csv").open()))
    assert len(rows) == 4 and all(r["seeds"] == "2" and float(r["dlwa_lo"]) <= float(r["dlwa"]) <= float(r["dlwa_hi"])
                                  for r in rows)
    assert (out / "dlwa_vs_spare.png").stat().st_size > 10000
    md = (out / "report.md").read_text()
    assert "| 0.15 | fifo |" in md
    # Four model claims (FIFO and greedy at two spare factors), each judged from two seeds.
    doc = json.loads((out / "verdicts.json").read_text())
    assert [c["claim"]["what"] for c in doc["claims"]] == [f"DLWA, {p} GC, spare factor {sf}" for sf in ("0.15", "0.28")
                                                           for p in ("FIFO", "greedy")]
    assert all(c["ours"]["n"] == 2 for c in doc["claims"])
    from ssdlab.studies.verdict import check_saved

    assert check_saved(out / "verdicts.json") == []
    # The headline table gathers the headline claims (the lowest spare factor's) from reports/.
    p = subprocess.run(SSDLAB + ["reproduce", "--headline", "--out", str(tmp_path / "reports")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "spare factor 0.15" in p.stdout and "spare factor 0.28" not in p.stdout


def test_reproduce_list_says_what_each_experiment_is_and_how_big(tmp_path):
    shipped = sorted(p.parent.name for p in (Path(__file__).resolve().parents[1] / "experiments").glob("*/experiment.toml"))
    lines = ssdlab("reproduce", "--list").stdout.splitlines()
    assert lines[0].split() == ["NAME", "QUICK", "FULL", "WHAT"]
    rows = {line.split()[0]: line.split(None, 3) for line in lines[1:lines.index("")]}
    assert sorted(rows) == shipped
    for name, (_, quick, full, what) in rows.items():
        # points/seeds per mode
        assert all(int(x) > 0 for x in quick.split("/") + full.split("/")) and len(what) > 20, (name, what)
    assert "(docs/case-studies/flashblox.md)" in rows["flashblox"][3]
    # A broken experiment file is listed with why, not a traceback.
    exp = tmp_path / "experiments"
    (exp / "bad").mkdir(parents=True)
    (exp / "bad" / "experiment.toml").write_text('kind = "no-such-kind"\n')
    p = subprocess.run(SSDLAB + ["reproduce", "--list"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SSDLAB_EXPERIMENTS=str(exp)))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert p.stdout.splitlines()[1].startswith("bad") and "cannot read it: " in p.stdout and "no-such-kind" in p.stdout


# 8 TiB of 4 KiB pages, metadata-only: about 25 GiB of maps.
HUGE = """preset = "default"
[geometry]
blocks_per_plane = 65536
page_bytes = 4096
"""


def test_config_check_sizes_the_device_and_refuses_what_run_refuses(tmp_path):
    ok = write(tmp_path / "ok.toml", TINY_RUN)
    p = ssdlab("config", "check", ok)
    assert "ok:" in p.stdout and "memory: about" in p.stdout and "FTL reserve:" in p.stdout
    # A zone width the device cannot build: check says so exactly as run does.
    bad = write(tmp_path / "zns.toml", 'preset = "tiny"\npersonality = "zns"\n[zns]\nzone_width = 3\n')
    c = ssdlab("config", "check", bad, check=False)
    r = ssdlab("run", bad, "--out", tmp_path / "z", check=False)
    assert c.returncode == 2 and r.returncode == 2, (c.stderr, r.stderr)
    assert "zone_width" in c.stderr and c.stderr.strip().splitlines()[-1] == r.stderr.strip().splitlines()[-1]


# The default preset at half its blocks (16 GiB, 8 dies), timing off: uniform 4 KiB overwrites.
PILOT_RUN = """preset = "default"
[geometry]
blocks_per_plane = 128
[timing]
enabled = false
[precondition]
sequential_fill = true
random_device_writes = 2.0
[workload]
pattern = "uniform"
stop_device_writes = 1.0
"""


def test_config_check_predicts_the_runs_waf_from_the_reserve_the_ftl_holds(tmp_path):
    """The estimate from the settings misses the reserve by a few blocks (free blocks float around
    the GC watermark); the pilot measures it, and Desnoyers' greedy model at it gives the run's
    DLWA within 0.5%."""
    cfg = write(tmp_path / "p.toml", PILOT_RUN)
    c = ssdlab("config", "check", cfg)
    assert "measuring the reserve" in c.stderr
    line = next(x for x in c.stdout.splitlines() if "at the measured spare" in x)
    predicted = float(line.split("WAF about ")[1].split()[0])
    r = ssdlab("run", cfg, "--out", tmp_path / "o", "-q")
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert abs(predicted / m["dlwa"] - 1) < 0.005, (predicted, m["dlwa"], c.stdout, r.stdout)
    # --no-pilot: the estimate only, at once.
    q = ssdlab("config", "check", cfg, "--no-pilot")
    assert "measured" not in q.stdout and "FTL reserve: about" in q.stdout


def test_a_device_too_big_for_memory_is_refused_up_front(tmp_path):
    cfg = write(tmp_path / "huge.toml", HUGE)
    size = _native.config_sizing(check_file(cfg))
    if size["available_memory_bytes"] is None or size["memory_bytes"] <= size["available_memory_bytes"]:
        pytest.skip("this machine has the memory for the test's big device")
    c = ssdlab("config", "check", cfg, check=False)
    assert c.returncode == 1 and "memory" in c.stderr, c.stderr
    t0 = time.time()
    r = ssdlab("run", cfg, "--out", tmp_path / "o", check=False)
    assert r.returncode == 2 and "GiB of memory" in r.stderr and "--force" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert time.time() - t0 < 30, "refused before allocating"


def test_output_into_a_closed_pipe_ends_quietly():
    """`ssdlab config keys | head -1`: the reader has gone; no error line, no traceback."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write, so the outcome does not race
    try:
        p = subprocess.run([*SSDLAB, "config", "keys"], stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 141, p.stderr
    assert p.stderr == ""
