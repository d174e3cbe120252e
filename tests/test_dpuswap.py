"""dpuswap as a user runs it: `ssdlab reproduce dpuswap` on a tiny working set writes the report
(the document's rows beside ssdlab's), CSV and figures, with remote memory nodes as separate
processes; runs through separate-process nodes give the same modelled figures as in-process
ones; `ssdlab rmml run|node` and their errors."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssdlab import _native
from ssdlab.dpuswap import Nodes, run

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# The experiment's own file with a tiny quick mode: 8 MiB key-value and 4 MiB sort working sets.
TINY_QUICK = """
[quick]
fractions = [1.0, 0.75, 0.5]
dpu_cache_fraction = 0.125
kv = { records = 8192, ops = 20000 }
sort = { elements = 524288 }
fio = { span_bytes = 8388608, ops = 500 }
cache_sweep = [0.25]
codecs = ["zstd"]
"""

SMALL_ZNS = {"preset": "zns-ssd", "storage": "data",
             "geometry": {"channels": 2, "dies_per_channel": 2, "planes_per_die": 1, "blocks_per_plane": 64, "pages_per_block": 64},
             "zns": {"zone_capacity": 1.0}}


def spec(backend, fraction=0.5, **kw):
    s = {"backend": backend, "local_fraction": fraction, "workload": {"kv": {"records": 4096, "ops": 8000}},
         "rmml": {"cache_bytes": 1 << 20, "group_blocks": 4}, "local_node_bytes": 256 << 20,
         "znswap": {"device": SMALL_ZNS, "reserve_zones": 2, "host_request_ns": 1000,
                    "pcie": {"latency_ns": 600, "bytes_per_s": 16e9}}}
    s.update(kw)
    return s


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    exp = tmp_path_factory.mktemp("experiments")
    text = (ROOT / "experiments" / "dpuswap" / "experiment.toml").read_text()
    (exp / "dpuswap").mkdir()
    (exp / "dpuswap" / "experiment.toml").write_text(text.split("[quick]")[0] + TINY_QUICK)
    out = tmp_path_factory.mktemp("reports")
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(exp))
    r = subprocess.run([str(BIN / "ssdlab"), "reproduce", "dpuswap", "--quick", "--out", str(out), "--jobs", "2"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    return out / "dpuswap"


def test_reproduce_writes_the_table_csv_and_figures(report):
    for f in ["report.md", "results.csv", "runs.csv", "kv.png", "sort.png", "fio.png", "cache_sweep.png"]:
        assert (report / f).stat().st_size > 0, f
    md = (report / "report.md").read_text()
    assert "| row | document | ssdlab | why they differ |" in md
    for row in ["motivation, 75% local", "motivation, 50% local", "throughput, 75% local", "throughput, 50% local",
                "completion, mean, p99 at 75%: DPUSwap vs ZNSwap-like", "fio random read", "fio random write"]:
        assert row in md, row
    rows = {r["run"]: r for r in csv.DictReader((report / "runs.csv").read_text().splitlines())}
    # 2 workloads x (local + 3 backends x 2 fractions), a cache size, a codec, 2 fio x 3 backends.
    assert len(rows) == 2 * 7 + 2 + 6
    assert (report / "runs" / "kv_dpuswap_50" / "metrics.json").is_file()


def test_swapping_costs_time_and_the_dpu_cache_is_used(report):
    rows = {r["run"]: r for r in csv.DictReader((report / "runs.csv").read_text().splitlines())}
    local = float(rows["kv_local_100"]["completion_s"])
    assert int(rows["kv_local_100"]["faults"]) == 0
    for b in ("dpuswap", "infiniswap", "znswap"):
        for f in (75, 50):
            r = rows[f"kv_{b}_{f}"]
            assert int(r["faults"]) > 100, r
            assert float(r["completion_s"]) > local, r
        # Less local memory, more faults.
        assert int(rows[f"kv_{b}_50"]["faults"]) > int(rows[f"kv_{b}_75"]["faults"])
    dp = rows["kv_dpuswap_50"]
    assert 0 < float(dp["cache_hit_ratio"]) <= 1
    # The key-value pages are 70% text-like: lz4 packs them, zstd tighter.
    assert float(dp["compression_ratio"]) > 1.2
    assert float(rows["kv_dpuswap_50_zstd"]["compression_ratio"]) > float(dp["compression_ratio"])
    # A larger DPU cache hits more.
    assert float(rows["kv_dpuswap_50_cache0.25"]["cache_hit_ratio"]) > float(dp["cache_hit_ratio"])


def test_separate_process_nodes_give_the_in_process_figures():
    local = run(spec("dpuswap"))
    with Nodes(2, 256 << 20) as nodes:
        remote = run(spec("dpuswap", nodes=nodes.addrs))
        inf = run(spec("infiniswap", nodes=nodes.addrs))
    assert remote["workload"] == local["workload"]
    assert remote["paging"]["fault_latency_ns"] == local["paging"]["fault_latency_ns"]
    assert inf["paging"]["major_faults"] == local["paging"]["major_faults"]  # same eviction, other backend
    # Both nodes hold regions: the RMML balances over them.
    nb = remote["paging"]["backend"]
    assert nb["compression_ratio"] > 1.0


def test_runs_are_deterministic_and_errors_are_one_line(tmp_path):
    a, b = run(spec("znswap")), run(spec("znswap"))
    assert a["workload"] == b["workload"] and a["paging"]["fault_latency_ns"] == b["paging"]["fault_latency_ns"]
    with pytest.raises(_native.ConfigError, match="backend"):
        run(spec("nvme"))
    with pytest.raises(_native.ConfigError, match="local_fraction"):
        run(spec("dpuswap", fraction=1.5))
    bad = tmp_path / "bad.toml"
    bad.write_text('backend = "dpuswap"\nlocal_fraction = 0.5\n[workload.kv]\nrecords = 4096\nrecord_bytess = 1024\n')
    r = subprocess.run([str(BIN / "ssdlab"), "rmml", "run", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "record_bytess" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_rmml_run_through_a_node_process(tmp_path):
    with Nodes(1, 128 << 20) as nodes:
        s = tmp_path / "run.toml"
        s.write_text(f'backend = "dpuswap"\nlocal_fraction = 0.5\nnodes = ["{nodes.addrs[0]}"]\n'
                     '[workload.kv]\nrecords = 2048\nops = 4000\n[rmml]\ncache_bytes = 1048576\ngroup_blocks = 2\n')
        r = subprocess.run([str(BIN / "ssdlab"), "rmml", "run", str(s), "--out", str(tmp_path / "out"), "-q"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "faults" in r.stdout and (tmp_path / "out" / "summary.json").is_file()
    # A node that is not there: a one-line error naming it.
    r = subprocess.run([str(BIN / "ssdlab"), "rmml", "run", str(s)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and nodes.addrs[0] in r.stderr and "Traceback" not in r.stderr, r.stderr
