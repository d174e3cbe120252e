"""lsm-deletion as a user meets it: the Store API, `ssdlab kv generate` / `kv run` on workload
files in the K-V workload generator's format, and `ssdlab reproduce lsm-deletion` on a tiny
device writing its report (claims judged by ssdlab.studies.verdict), CSV and figures."""

import copy
import csv
import json
import os
from pathlib import Path

import pytest

from clitools import ssdlab, write
from ssdlab import ConfigError
from ssdlab.studies.lsm_deletion.api import Store, run_lsm
from ssdlab.studies.verdict import check_saved, load, table

ROOT = Path(__file__).resolve().parents[1]

# 4 dies x 1 plane, 512 KiB blocks: 2 MiB zones, 32 of them.
TINY = {"preset": "zns-ssd", "geometry": {"channels": 2, "dies_per_channel": 2, "planes_per_die": 1, "blocks_per_plane": 32,
                                          "pages_per_block": 32}, "zns": {"zone_capacity": 1.0}}
TINY_LSM = {"memtable_bytes": 65536, "sst_target_bytes": 65536, "level1_bytes": 262144, "size_ratio": 4}

TINY_QUICK = """
[quick]
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 1, blocks_per_plane = 32, pages_per_block = 32 }
lsm = { memtable_bytes = 65536, sst_target_bytes = 65536, level1_bytes = 262144, size_ratio = 4 }
workload = { load_keys = 4000, mixed_ops = 12000, lookup_ops = 2000, entry_bytes = 256 }
delete_fractions = [0.0, 0.1]
policies = ["baseline", "fade", "zone-aware", "zone-aware-ttl"]
ablation_delete_fractions = [0.1]
sensitivity = [{ name = "dth64", workload = { delete_threshold_fraction = 0.64 } }]
"""


def test_store_api_reads_its_writes_and_snapshots():
    s = Store(TINY, policy="fade", delete_threshold_ns=50_000_000, track_deletes=True, **TINY_LSM)
    for i in range(3000):
        s.put(b"k%05d" % i, bytes([i % 251]) * 200)
    snap = s.snapshot()
    for i in range(0, 3000, 3):
        s.delete(b"k%05d" % i)
    assert s.get(b"k00001") == bytes([1]) * 200
    assert s.get(b"k00003") is None
    assert s.get(b"k00003", snapshot=snap) == bytes([3]) * 200
    assert [k for k, _ in s.scan(b"k00000", b"k00007")] == [b"k00001", b"k00002", b"k00004", b"k00005", b"k00007"]
    s.release(snap)
    s.advance_to(s.now_ns + 2_000_000_000)
    for i in range(3000, 6000):
        s.put(b"k%05d" % i, b"x" * 200)
    st = s.stats()
    assert st["lsm"]["flushes"] > 5 and st["lsm"]["compactions_ttl"] > 0, st["lsm"]
    assert st["device"]["nand_write_bytes"] > st["lsm"]["app_write_bytes"]
    assert len(st["deletes"]) == 1000
    a = s.audit()
    assert a["survivors_erase_persisted"] == 0
    with pytest.raises(ValueError, match="key of 0 bytes"):
        s.put(b"", b"v")


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match="lsm.delete_threshold_ns"):
        Store(TINY, policy="fade")
    with pytest.raises(ConfigError, match="unknown field `polcy`"):
        Store(TINY, polcy="fade")


def test_kv_generate_then_run_replays_the_files(tmp_path):
    spec = write(tmp_path / "kv.toml", """
ops_per_s = 20000
delete_threshold_fraction = 0.16
audit = true
[device]
preset = "zns-ssd"
geometry = { channels = 2, dies_per_channel = 2, planes_per_die = 1, blocks_per_plane = 32, pages_per_block = 32 }
zns = { zone_capacity = 1.0 }
[lsm]
policy = "fade"
memtable_bytes = 65536
sst_target_bytes = 65536
level1_bytes = 262144
size_ratio = 4
[[phases]]
name = "load"
inserts = 3000
entry_bytes = 128
[[phases]]
name = "mixed"
inserts = 3000
updates = 3000
point_deletes = 1000
point_lookups = 1000
range_lookups = 20
range_lookup_selectivity = 0.001
entry_bytes = 128
""")
    gen = ssdlab("kv", "generate", spec, "--out", tmp_path / "w")
    files = sorted((tmp_path / "w").glob("*.txt"))
    assert [f.name for f in files] == ["load.txt", "mixed.txt"], gen.stdout
    first = files[0].read_text().splitlines()[0].split(" ")
    assert first[0] == "I" and first[1].isdigit() and len(first[2]) == 124
    r = ssdlab("kv", "run", spec, "--out", tmp_path / "run", "--workload", files[0], files[1])
    assert "LSM level 100.0%" in r.stdout, r.stdout
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["ops"] == 11020 and s["lsm"]["scans"] == 20
    # The same phases generated in memory give the same run.
    ssdlab("kv", "run", spec, "--out", tmp_path / "run2")
    s2 = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert s2["counters"] == s["counters"]
    # A broken workload line is named by file and line.
    files[1].write_text("I 1 abc\nX 5\n")
    bad = ssdlab("kv", "run", spec, "--out", tmp_path / "run3", "--workload", files[0], files[1], check=False)
    assert bad.returncode == 2 and f"{files[1]}:2: unknown operation" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_reproduce_lsm_deletion_writes_report_and_figures(tmp_path):
    exp = tmp_path / "experiments"
    (exp / "lsm-deletion").mkdir(parents=True)
    text = (ROOT / "experiments" / "lsm-deletion" / "experiment.toml").read_text()
    (exp / "lsm-deletion" / "experiment.toml").write_text(text.split("[quick]")[0] + TINY_QUICK)
    out = tmp_path / "reports"
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(exp))
    ssdlab("reproduce", "lsm-deletion", "--quick", "--out", out, env=env, timeout=600)
    rep = out / "lsm-deletion"
    md = (rep / "report.md").read_text()
    for fig in ("sst_size_over_time.png", "tombstone_file_lifetime.png", "writes_vs_delete_pct.png", "read_latency_phases.png",
                "persistence_latency.png"):
        assert (rep / fig).stat().st_size > 10_000 and fig in md
    with open(rep / "lsm-deletion.csv") as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    assert len(rows) == 7, sorted(rows)  # 3 policies x 2 delete shares, the ablation at 10% only
    assert "zone-aware-ttl_d10" in rows and "zone-aware-ttl_d00" not in rows
    assert float(rows["fade_d10"]["lsm_within_dth"]) == 1.0
    assert float(rows["baseline_d10"]["lsm_within_dth"]) < 1.0
    assert rows["fade_d10"]["audit_survivors_erase_persisted"] == "0"
    # Every verdict is the judge's, and the report shows the judged table as saved.
    assert check_saved(rep / "verdicts.json") == []
    _doc, judged = load(rep / "verdicts.json")
    for line in table(judged):
        assert line in md, line
    verdict = {j.claim.what.split(",")[0]: j.verdict for j in judged}
    assert verdict["FADE: deletes persisted within D_th at LSM level"] == "reproduced"
    assert "1 seed (42)" in md
    # The runs are points of the sweep engine: its table has one row per run, and a resumed
    # reproduction reuses every finished run.
    with open(rep / "results.csv") as f:
        sweep = list(csv.DictReader(f))
    variant_runs = [f"{p}_d10_dth64" for p in ("baseline", "fade", "zone-aware")]
    assert sorted(r["name"] for r in sweep) == sorted([*rows, *variant_runs]) and all(r["status"] == "ok" for r in sweep)
    # The sensitivity variant reran the three policies with D_th at 64% of the run.
    v = json.loads((rep / "runs" / "fade_d10_dth64" / "metrics.json").read_text())
    assert v["delete_threshold_ns"] == 4 * json.loads((rep / "runs" / "fade_d10" / "metrics.json").read_text())["delete_threshold_ns"]
    assert "## Sensitivity to the open parameters" in md and "| dth64 |" in md and "## The regime" in md
    ssdlab("reproduce", "lsm-deletion", "--quick", "--out", out, "--resume", env=env, timeout=120)
    info = json.loads((rep / "run-info.json").read_text())
    assert (info["ran"], info["skipped"]) == (0, 10), info
    assert (rep / "report.md").read_text() == md


def test_no_deleted_value_survives_on_the_nand_after_its_erase_was_reported():
    """The quick reproduction's baseline run at 10% deletes: the deletion tracker reports a
    delete persisted at erase level only when no byte of any version is left on the NAND, as
    the audit (a search of every NAND page for the deleted values) confirms. Its SST blocks
    straddle zones: one reset while the other still holds the block's first bytes used to be
    taken for the block being gone."""
    from ssdlab.sweep import experiment_spec

    pt = experiment_spec("lsm-deletion", "quick", ["baseline_d10_s42"]).base_points[0]
    spec = copy.deepcopy(pt.input)
    device = spec.pop("device")
    summary, _series, _wall = run_lsm(device, spec)
    audit = summary["audit"]
    assert audit["deletes"] == 30000 and audit["scanned_bytes"] > 0
    assert audit["survivors_erase_persisted"] == 0, [s for s in audit["survivors"] if s["state"] == "erase-persisted"][:3]
    # Survivors of deletes not yet persisted are expected: they are what D_th bounds.
    assert audit["survivors_pending"] + audit["survivors_lsm_persisted"] > 0


def test_quick_seeds_reach_the_device_and_the_workload_of_the_claims_runs():
    """--quick runs three seeds at every delete share, the ablation at 10% deletes only; each
    run's seed is its device's and its workload generator's."""
    from ssdlab.studies.lsm_deletion.experiment import points
    from ssdlab.studies.reproduce import load_spec

    pts = points(load_spec("lsm-deletion"), "quick")
    names = {p.name: p for p in pts}
    assert len(pts) == 3 * 5 * 3 + 3
    for pol in ("baseline", "fade", "zone-aware"):
        for d in ("00", "02", "05", "10", "20"):
            for seed in (42, 43, 44):
                task = names[f"{pol}_d{d}_s{seed}"].input
                assert (task["seed"], task["device"]["seed"]) == (seed, seed)
    assert "zone-aware-ttl_d05_s42" not in names and "zone-aware-ttl_d10_s44" in names
    # The ablation is the zone-aware design with FADE's TTL trigger; the design has none.
    assert names["zone-aware-ttl_d10_s42"].input["lsm"]["policy"] == "zone-aware"
    assert names["zone-aware-ttl_d10_s42"].input["lsm"]["zone_aware"]["ttl_trigger"] is True
    assert "zone_aware" not in names["zone-aware_d10_s42"].input["lsm"]


def test_full_adds_the_sensitivity_variants_each_changing_one_setting():
    from ssdlab.studies.lsm_deletion.experiment import points, variants
    from ssdlab.studies.reproduce import load_spec

    spec = load_spec("lsm-deletion")
    quick = {p.name: p for p in points(spec, "quick")}
    full = {p.name: p for p in points(spec, "full")}
    base = full["fade_d10_s42"].input
    for v in variants(spec, "full"):
        for pol in ("baseline", "fade", "zone-aware"):
            task = full[f"{pol}_d10_{v['name']}"].input
            assert task["seed"] == 42 and task["lsm"]["policy"] == pol
        task = full[f"fade_d10_{v['name']}"].input
        changed = {k for k in ("delete_threshold_fraction",) if task[k] != base[k]}
        changed |= {f"lsm.{k}" for k in task["lsm"] if task["lsm"][k] != base["lsm"].get(k)}
        changed |= {f"geometry.{k}" for k in task["device"]["geometry"] if task["device"]["geometry"][k] != base["device"]["geometry"][k]}
        assert changed, f"variant {v['name']} changes nothing"
    # --full's main runs are --quick's (the same inputs, so --resume reuses them) plus the ablation everywhere.
    assert all(full[n].input == p.input for n, p in quick.items())
    spec["full"]["sensitivity"] = [{"name": "x", "lsm": {}}, {"name": "x", "workload": {}}]
    with pytest.raises(ValueError, match="repeated variant name"):
        variants(spec, "full")
    spec["full"]["sensitivity"] = [{"name": "x", "device": {}}]
    with pytest.raises(ValueError, match="only lsm, workload, geometry, zns"):
        variants(spec, "full")


def test_an_unknown_policy_name_lists_the_known_ones():
    from ssdlab.studies.lsm_deletion.api import policy_keys

    with pytest.raises(ValueError, match="baseline, fade, zone-aware, zone-aware-ttl"):
        policy_keys("lethe")
