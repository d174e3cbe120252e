"""Parameter sweeps as a user runs them: `ssdlab sweep` on a local pool and on a Ray cluster on
loopback, the same table both ways, resume, failing points, clean Ctrl-C, clear file errors."""

import csv
import json
import os
import shutil
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import ssdlab
from ssdlab.sweep import expand, experiment_spec, load_sweep, local_ray_env

from clitools import free_port, ssdlab as ssdlab_cli, write

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SSDLAB = [str(BIN / "ssdlab")]

# Tiny device, timing off, half a device of writes: each point takes well under a second.
TINY = """preset = "tiny"
seed = 7
metrics = ["dlwa", "gc_relocated_pages", "nand_erase_count", "erase_count.max"]

[timing]
enabled = false

[precondition]
random_device_writes = 0.5

[workload]
pattern = "uniform"
stop_device_writes = 0.5
"""

GRID = TINY + """
[grid]
"ftl.spare_factor" = [0.1, 0.25]
"ftl.gc_policy" = ["greedy", "fifo"]
"""

TINY_BASE = {"preset": "tiny", "seed": 7, "timing": {"enabled": False},
             "precondition": {"random_device_writes": 0.5}, "workload": {"stop_device_writes": 0.5}}




def read_csv(path: Path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rows_of(table):
    """The returned table as a list of dicts, whether it is a DataFrame or a list."""
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


def _live_processes(field: int, value: int):
    """Live processes whose /proc/PID/stat field (after the name; 2 = process group,
    3 = session) is `value`."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[field]) == value and fields[0] != "Z":  # zombies are already dead
                out.append(int(d.name))
    return out


def processes_in_group(pgid: int):
    return _live_processes(2, pgid)


def processes_in_session(sid: int):
    """What a command started with start_new_session=True left running: sweep workers have
    process groups of their own, in its session."""
    return _live_processes(3, sid)


@pytest.fixture(scope="module")
def ray_cluster(request):
    """A one-node Ray cluster on 127.0.0.1 (no dashboard, no usage stats), stopped afterwards.

    `ray start` runs in a new session, so every Ray process it leaves behind is in its process
    group; the finalizer kills that group (what `ray stop --force` does, but only for this
    cluster, not for every Ray process on the machine)."""
    temp = tempfile.mkdtemp(prefix="ssdlab-ray-")  # short: Ray's socket paths must fit 107 bytes
    port = free_port()
    # The cluster's own authentication token (Ray's token mode), in the temp dir: `ray start`
    # does not create one, and a fresh machine has no ~/.ray/auth_token. The sweeps that join
    # the cluster find it through the same variable.
    token = Path(temp) / "auth_token"
    token.write_text(secrets.token_hex(32))
    saved_token_path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    env = {**os.environ, **local_ray_env()}  # loopback only, no usage stats, no metadata probes
    start = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--disable-usage-stats", "--include-dashboard=false", "--num-cpus=2", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def stop():
        if start.poll() is None:
            start.kill()
        try:
            os.killpg(start.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.time() + 30
        while processes_in_group(start.pid) and time.time() < deadline:
            time.sleep(0.2)
        shutil.rmtree(temp, ignore_errors=True)
        if saved_token_path is None:
            os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        else:
            os.environ["RAY_AUTH_TOKEN_PATH"] = saved_token_path

    request.addfinalizer(stop)
    out, _ = start.communicate(timeout=120)
    assert start.returncode == 0, out
    assert "Local node IP: 127.0.0.1" in out, out
    return f"127.0.0.1:{port}"


def test_grid_gives_the_same_table_on_the_local_pool_and_on_ray(tmp_path, ray_cluster):
    sweep = write(tmp_path / "grid.toml", GRID)
    local = ssdlab_cli("sweep", sweep, "--out", tmp_path / "local", "--jobs", "2")
    ray = ssdlab_cli("sweep", sweep, "--out", tmp_path / "ray", "--ray", ray_cluster)
    assert "4 points: 4 run" in local.stdout and "4 points: 4 run" in ray.stdout, (local.stdout, ray.stdout)
    assert json.loads((tmp_path / "ray" / "run-info.json").read_text())["backend"] == "ray"

    # Nothing wall-clock or backend-specific in the results: the files are byte-identical.
    a, b = tmp_path / "local" / "results.csv", tmp_path / "ray" / "results.csv"
    assert a.read_bytes() == b.read_bytes()
    rows = read_csv(a)
    assert [(r["ftl.spare_factor"], r["ftl.gc_policy"]) for r in rows] == [
        ("0.1", "greedy"), ("0.1", "fifo"), ("0.25", "greedy"), ("0.25", "fifo")]
    for r in rows:
        assert r["status"] == "ok"
        point = tmp_path / "local" / "points" / r["hash"]
        assert (point / "metrics.json").read_bytes() == (tmp_path / "ray" / "points" / r["hash"] / "metrics.json").read_bytes()
        m = json.loads((point / "metrics.json").read_text())
        # Each point ran with its own axis values, and the table holds that run's numbers.
        assert m["config"]["ftl"]["spare_factor"] == float(r["ftl.spare_factor"])
        assert m["config"]["ftl"]["gc_policy"] == r["ftl.gc_policy"]
        assert float(r["dlwa"]) == m["dlwa"] and int(r["gc_relocated_pages"]) == m["gc_relocated_pages"]
    # More spare space, less write amplification: the grid measured what it varied.
    dlwa = {(r["ftl.spare_factor"], r["ftl.gc_policy"]): float(r["dlwa"]) for r in rows}
    for pol in ("greedy", "fifo"):
        assert dlwa[("0.25", pol)] < dlwa[("0.1", pol)] - 0.5


def test_ray_auto_starts_a_local_ray_with_the_same_results(tmp_path):
    sweep = write(tmp_path / "grid.toml", GRID)
    ssdlab_cli("sweep", sweep, "--out", tmp_path / "local", "-q")
    p = ssdlab_cli("sweep", sweep, "--out", tmp_path / "auto", "--ray", "auto")
    assert "4 points: 4 run" in p.stdout and "Traceback" not in p.stderr
    assert (tmp_path / "local" / "results.csv").read_bytes() == (tmp_path / "auto" / "results.csv").read_bytes()


def test_api_resume_skips_finished_points(tmp_path):
    out = tmp_path / "sw"
    axes = {"ftl.spare_factor": [0.1, 0.25], "ftl.gc_policy": ["greedy", "fifo"]}
    first = ssdlab.sweep(TINY_BASE, axes, out=out, jobs=2, metrics=["dlwa", "nand_erase_count"])
    s1 = first.attrs["summary"]
    assert (s1["ran"], s1["skipped"], s1["failed"]) == (4, 0, 0)
    rows1 = rows_of(first)
    assert [r["status"] for r in rows1] == ["ok"] * 4 and all(r["dlwa"] > 1.0 for r in rows1)
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("points/*/metrics.json")}
    assert len(mtimes) == 4

    again = ssdlab.sweep(TINY_BASE, axes, out=out, jobs=2, metrics=["dlwa", "nand_erase_count"])
    s2 = again.attrs["summary"]
    assert (s2["ran"], s2["skipped"]) == (0, 4)
    assert rows_of(again) == rows1
    assert {p: p.stat().st_mtime_ns for p in out.glob("points/*/metrics.json")} == mtimes

    # A wider grid runs only its new points; the shared ones come from disk.
    wider = ssdlab.sweep(TINY_BASE, {**axes, "ftl.spare_factor": [0.1, 0.25, 0.4]}, out=out, jobs=2,
                         metrics=["dlwa", "nand_erase_count"])
    s3 = wider.attrs["summary"]
    assert (s3["ran"], s3["skipped"], s3["points"]) == (2, 4, 6)


def test_api_accepts_a_preset_name_or_a_config_file_as_base(tmp_path):
    cfg = write(tmp_path / "base.toml", 'preset = "tiny"\nseed = 7\n[timing]\nenabled = false\n'
                '[precondition]\nrandom_device_writes = 0.5\n[workload]\nstop_device_writes = 0.5\n')
    from_file = rows_of(ssdlab.sweep(cfg, {"ftl.gc_policy": ["greedy", "fifo"]}, out=tmp_path / "f", jobs=1))
    from_dict = rows_of(ssdlab.sweep(TINY_BASE, {"ftl.gc_policy": ["greedy", "fifo"]}, out=tmp_path / "d", jobs=1))
    assert [r["hash"] for r in from_file] == [r["hash"] for r in from_dict]
    # A preset name: the preset's own config, here with the seed as the axis.
    by_seed = rows_of(ssdlab.sweep("tiny", {"timing.enabled": [False], "seed": [1, 2]}, jobs=2,
                                   metrics=["dlwa"], out=tmp_path / "p"))
    assert [r["seed"] for r in by_seed] == [1, 2] and by_seed[0]["dlwa"] != by_seed[1]["dlwa"]
    with pytest.raises(ssdlab.ConfigError, match="neither a config file nor a preset"):
        ssdlab.sweep("no-such-preset", {"seed": [1]})


def test_broken_points_are_reported_and_the_others_finish(tmp_path):
    # spare_factor 2.0 is rejected by the config check; pe_limit = 2 wears the device out mid-run.
    sweep = write(tmp_path / "broken.toml", TINY + """
[grid]
"ftl.spare_factor" = [0.15, 0.25, 2.0]

[zip]
"media.pe_limit" = [3000, 2]
"seed" = [7, 8]
""")
    p = ssdlab_cli("sweep", sweep, "--out", tmp_path / "o", check=False)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert "6 points: 4 run, 0 skipped (done before), 4 failed" in p.stdout  # 2 fail mid-run
    assert "4 of 6 points failed" in p.stderr
    assert "ftl.spare_factor=2.0" in p.stderr and "out of range" in p.stderr
    assert "ftl.spare_factor=0.15, media.pe_limit=2, seed=8" in p.stderr and "worn out" in p.stderr
    rows = read_csv(tmp_path / "o" / "results.csv")
    status = {(r["ftl.spare_factor"], r["media.pe_limit"]): r["status"] for r in rows}
    assert status == {("0.15", "3000"): "ok", ("0.15", "2"): "failed", ("0.25", "3000"): "ok",
                      ("0.25", "2"): "failed", ("2.0", "3000"): "failed", ("2.0", "2"): "failed"}
    for r in rows:
        point = tmp_path / "o" / "points" / r["hash"]
        if r["status"] == "ok":
            assert float(r["dlwa"]) > 1.0 and (point / "metrics.json").exists()
        else:
            assert r["dlwa"] == "" and not (point / "metrics.json").exists()
            assert r["error"] and r["error"] in (point / "error.txt").read_text()

    # Re-running keeps the finished points and tries the failed ones again.
    p2 = ssdlab_cli("sweep", sweep, "--out", tmp_path / "o", check=False)
    assert p2.returncode == 1 and "6 points: 2 run, 2 skipped (done before), 4 failed" in p2.stdout


def test_cli_writes_results_table_sweep_description_and_plots(tmp_path):
    sweep = write(tmp_path / "grid.toml", GRID)
    p = ssdlab_cli("sweep", sweep, "--out", tmp_path / "o")
    out = tmp_path / "o"
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == ["point", "ftl.spare_factor", "ftl.gc_policy", "status", "hash", "dlwa", "gc_relocated_pages",
                      "nand_erase_count", "erase_count.max", "error"]
    desc = json.loads((out / "sweep.json").read_text())
    assert desc["grid"] == {"ftl.spare_factor": [0.1, 0.25], "ftl.gc_policy": ["greedy", "fifo"]}
    assert [pt["hash"] for pt in desc["points"]] == [r["hash"] for r in read_csv(out / "results.csv")]
    for metric in ("dlwa", "gc_relocated_pages", "nand_erase_count", "erase_count.max"):
        png = out / "plots" / f"{metric}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000, metric
    assert "4 plots" in p.stdout
    if (pa := _try_import("pyarrow.parquet")) is not None:
        t = pa.read_table(out / "results.parquet").to_pylist()
        assert [r["dlwa"] for r in t] == [float(r["dlwa"]) for r in read_csv(out / "results.csv")]


def _try_import(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        return None


@pytest.mark.parametrize("text, what", [
    (TINY + "[grid\n", "not valid TOML"),
    (TINY, "nothing to sweep"),
    ('[grid]\n"seed" = [1, 2]\n', "name the base config"),
    ('preset = "tiny"\nbase = "x.toml"\n[grid]\nseed = [1]\n', "not both"),
    ('preset = "tinyy"\n[grid]\nseed = [1]\n', "preset 'tinyy' is unknown"),
    ('base = "missing.toml"\n[grid]\nseed = [1]\n', "missing.toml: no such config file"),
    ('base = "bad-base.toml"\n[grid]\nseed = [1]\n', "bad-base.toml:2: ftl.gc_polcy"),
    ('experiment = "fdp-cache"\n[grid]\n"cache.seedz" = [1]\n', "cache.seedz"),
    ('experiment = "fdp-cache"\n[grid]\ndevice_trace = ["/tmp/t.msr"]\n', "every point would write the one file"),
    ('preset = "tiny"\naxes = 1\n[grid]\nseed = [1]\n', "unknown key 'axes'"),
    (TINY + '[grid]\n"ftl.spare_factor" = 0.1\n', "must be a non-empty list"),
    (TINY + '[zip]\n"ftl.spare_factor" = [0.1, 0.2]\nseed = [1]\n', "equal lengths"),
    (TINY.replace('metrics = [', 'metrics = 1 #') + '[grid]\nseed = [1]\n', "metrics must be a non-empty list"),
    (TINY + '[grid]\nseed = [1]\nmetrics = ["dlwa"]\n', "move `metrics = ...` above the first [table]"),
    (TINY + '[grid]\n"ftl.spare_facter" = [0.1, 0.2]\n', "point 0 (ftl.spare_facter=0.1)"),
])
def test_malformed_sweep_file_is_a_clear_error_with_exit_code_2(tmp_path, text, what):
    write(tmp_path / "bad-base.toml", '[ftl]\ngc_polcy = "greedy"\n')
    sweep = write(tmp_path / "s.toml", text)
    p = ssdlab_cli("sweep", sweep, "--out", tmp_path / "o", check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert what in p.stderr, p.stderr


def test_ray_missing_says_how_to_install(tmp_path):
    # A Python where `import ray` fails, as after `pip install ssdlab` without the extra.
    blocker = write(tmp_path / "ray.py", "raise ImportError('no ray here')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    sweep = write(tmp_path / "grid.toml", GRID)
    p = ssdlab_cli("sweep", sweep, "--out", tmp_path / "o", "--ray", "auto", check=False, env=env)
    assert p.returncode == 2 and "pip install 'ssdlab[ray]'" in p.stderr and "Traceback" not in p.stderr


def _stop_sweep(proc, how):
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    else:
        # `kill PID`, `timeout` or a scheduler: the sweep's own process only, not its workers
        # (they lead process groups of their own); the sweep stops them as on Ctrl-C.
        proc.send_signal(signal.SIGTERM)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_stopped_sweep_stops_its_workers_keeps_finished_points_and_resumes(tmp_path, how):
    # Eight points of about a second each on two workers: the stop lands mid-sweep.
    sweep = write(tmp_path / "long.toml", TINY.replace("[timing]", "[geometry]\nblocks_per_plane = 2048\n\n[timing]")
                  + '\n[grid]\n"ftl.spare_factor" = [0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.24]\n')
    out = tmp_path / "o"
    proc = subprocess.Popen(SSDLAB + ["sweep", str(sweep), "--out", str(out), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    while not list(out.glob("points/*/metrics.json")) and time.time() < deadline:
        time.sleep(0.1)
    _stop_sweep(proc, how)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "interrupted" in stderr
    deadline = time.time() + 10
    while processes_in_session(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert processes_in_session(proc.pid) == []  # no worker left behind
    rows = read_csv(out / "results.csv")
    done = [r for r in rows if r["status"] == "ok"]
    assert 1 <= len(done) < 8 and all(r["status"] in ("ok", "not-run") for r in rows)
    for r in done:
        assert json.loads((out / "points" / r["hash"] / "metrics.json").read_text())["interrupted"] is False

    p = ssdlab_cli("sweep", sweep, "--out", out)
    assert f"8 points: {8 - len(done)} run, {len(done)} skipped" in p.stdout
    assert all(r["status"] == "ok" for r in read_csv(out / "results.csv"))


def test_a_killed_cache_point_goes_on_from_its_save_with_the_results_of_an_unbroken_run(tmp_path):
    # One fdp-cache point of a few seconds, saving itself every 0.3 s; the whole sweep (its
    # process and the worker) killed at once, as a crash or a lost machine would stop it.
    sweep = write(tmp_path / "one.toml", 'experiment = "fdp-cache"\nmode = "quick"\n'
                  'points = ["kvcache_u50_soc4_fdp_s42"]\nstop_device_writes = 3.0\n')
    ssdlab_cli("sweep", sweep, "--out", tmp_path / "straight", "--checkpoint-every", "0")
    out = tmp_path / "o"
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("pymp-*"))
    cmd = SSDLAB + ["sweep", str(sweep), "--out", str(out), "--checkpoint-every", "0.005"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while not list(out.glob("checkpoints/*.ckpt")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert list(out.glob("checkpoints/*.ckpt")), "no save while the point ran"
    for pid in processes_in_session(proc.pid):
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    for d in set(tmp.glob("pymp-*")) - before:  # the killed forkserver's directory
        shutil.rmtree(d, ignore_errors=True)
    assert not list(out.glob("points/*/metrics.json")), "killed before the end"

    p = ssdlab_cli("sweep", sweep, "--out", out, "--checkpoint-every", "0.005")
    assert "1 run, 0 skipped" in p.stdout
    note = next(out.glob("points/*/checkpoint.txt")).read_text()
    assert note.startswith("resumed from ") and " at " in note, note
    assert not (out / "checkpoints").exists(), "the save goes once the point is done"
    row = read_csv(out / "results.csv")[0]
    assert row["status"] == "ok"
    assert row == read_csv(tmp_path / "straight" / "results.csv")[0]
    h = row["hash"]
    for f in ("metrics.json", "timeseries.csv"):
        assert (out / "points" / h / f).read_text() == (tmp_path / "straight" / "points" / h / f).read_text(), f


def test_example_sweeps_are_valid():
    files = sorted((ROOT / "experiments" / "sweeps").glob("*.toml"))
    assert files
    for f in files:
        points = expand(load_sweep(f))
        assert points and all(p.config is not None for p in points), f


@pytest.mark.parametrize("name", ["gc-policies", "fdp-cache"])
@pytest.mark.parametrize("mode", ["quick", "full"])
def test_shipped_experiments_measure_until_dlwa_settles(name, mode):
    # Their reported DLWA is the steady windows' (a run that does not settle by its cap says so),
    # not a fixed volume's: every point's input asks the core for the steady stop, with room
    # for its windows before the cap.
    for p in expand(experiment_spec(name, mode)):
        c = p.config
        if name == "gc-policies":  # a device config: the rule is its workload's
            w = c["workload"]
            start, cap = 0.0, w["stop_device_writes"]
        else:  # a cache run: the rule is the run's
            w = c
            start, cap = w["steady_start_device_writes"], w["stop_device_writes"]
        assert w["stop"] == "steady", p.name
        assert start + w["steady_window_device_writes"] * w["steady_windows"] < cap, p.name


def test_seed_axis_over_the_fdp_cache_experiment_seeds_device_cache_and_workload(tmp_path):
    f = write(tmp_path / "seeds.toml", 'experiment = "fdp-cache"\n[grid]\nseed = [7, 8]\n')
    points = expand(load_sweep(f))
    assert points and all(p.config is not None for p in points), [p.error for p in points if p.error][:1]
    for p in points:
        seed = p.values["seed"]
        assert p.config["device"]["seed"] == p.config["cache"]["seed"] == p.config["workload"]["seed"] == seed
    by_name = {}
    for p in points:
        by_name.setdefault(p.name, set()).add(p.hash)
    assert all(len(h) == 2 for h in by_name.values())  # each seed is its own point

    bad = write(tmp_path / "bad.toml", 'experiment = "fdp-cache"\n[grid]\nseed = [-1]\n')
    with pytest.raises(Exception, match="seed must be a non-negative integer"):
        expand(load_sweep(bad))


def _flac_workdirs():
    from ssdlab.studies.flac.runner import Workdir

    return sorted(Workdir.base().glob(Workdir.PREFIX + "*"))


def _guest_dirs():
    return sorted(Path(tempfile.gettempdir()).glob("dpuswap-guest-*"))


def _have_guest():
    from ssdlab import vm

    return shutil.which("qemu-system-x86_64") is not None and (vm.guest_dir() / "vmlinuz").exists()


# Points that start processes (remote memory nodes, QEMU), mount a huge-page tmpfs (flac's
# work directory, with its PM image) or fill a temporary directory (a guest's disk and files),
# and run for many seconds.
LEFTOVER_POINTS = {
    "dpuswap": ('experiment = "dpuswap"\nmode = "quick"\npoints = ["kv_dpuswap_75_s42"]\n',
                lambda sid: any(b"rmml" in Path(f"/proc/{p}/cmdline").read_bytes() for p in processes_in_session(sid))),
    "dpuswap-guest": ('experiment = "dpuswap"\nmode = "quick"\npoints = ["guest_dpuswap_75"]\n', lambda sid: bool(_guest_dirs())),
    "flac": ('experiment = "flac"\nmode = "quick"\npoints = ["micro_s42"]\n', lambda sid: bool(_flac_workdirs())),
}


@pytest.mark.serial  # looks for flac work directories and mounts machine-wide
@pytest.mark.parametrize("to", ["group", "sweep"])
@pytest.mark.parametrize("name", sorted(LEFTOVER_POINTS))
def test_ctrl_c_leaves_no_processes_or_mounts_a_point_made(tmp_path, name, to):
    # An interrupt mid-point stops the point's worker; what the point started outside that
    # process (node servers, QEMU, a tmpfs of GiBs in /dev/shm, temporary files) must go with
    # it, whether the SIGINT reaches the whole process group (a terminal's Ctrl-C) or the sweep
    # alone (`kill -INT`).
    if name == "dpuswap-guest" and not _have_guest():
        pytest.skip("no QEMU or guest: run `make setup` (scripts/build-guest.sh)")
    text, started = LEFTOVER_POINTS[name]
    assert not _flac_workdirs() and not _guest_dirs()
    sweep = write(tmp_path / "one.toml", text)
    proc = subprocess.Popen(SSDLAB + ["sweep", str(sweep), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    while not started(proc.pid) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # well under way (a node still starting dies with its pipe anyway)
    assert started(proc.pid) and proc.poll() is None, "the point did not get going"
    (os.killpg if to == "group" else os.kill)(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr, stderr
    deadline = time.time() + 10
    while processes_in_session(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert processes_in_session(proc.pid) == []
    assert _flac_workdirs() == [] and _guest_dirs() == []
    with open("/proc/mounts") as f:
        assert "ssdlab-flac" not in f.read()


# A point of each runner that takes minutes: a cache run (the quick 100% non-FDP point held
# to 64 device writes: a tolerance of 0 never settles), and a device run (a tiny device's
# shape with 1024 times its blocks, 100 device writes).
LONG_POINTS = {
    "cache": 'experiment = "fdp-cache"\nmode = "quick"\npoints = ["kvcache_u100_soc4_nofdp_s42"]\n'
             '[grid]\nsteady_tolerance = [0.0]\nstop_device_writes = [64.0]\n',
    # A lifetime study on the paper-scale mode's lifetime device (~25 s).
    "flashblox": 'experiment = "flashblox"\nmode = "full"\npoints = ["life_adaptive_rot"]\n',
    # An LSM store with deletes tracked and audited (minutes).
    "lsm": 'experiment = "lsm-deletion"\nmode = "quick"\npoints = ["baseline_d10_s42"]\n',
    "device": TINY.replace("[timing]", "[geometry]\nblocks_per_plane = 65536\n\n[timing]")
    + '\n[grid]\n"workload.stop_device_writes" = [100.0]\n',
}


@pytest.mark.parametrize("runner", sorted(LONG_POINTS))
def test_progress_lines_reach_a_pipe_while_a_long_point_runs(tmp_path, runner):
    # `ssdlab sweep ... > log` under nohup: the "[running] ... % after ..." lines must be in the
    # log while the point runs (hours, on a paper-scale run), not when it ends. The CLI's own
    # main() runs with the progress period cut from minutes to a second.
    sweep = write(tmp_path / "one.toml", LONG_POINTS[runner])
    code = ("import sys, ssdlab.sweep.run; sys.modules['ssdlab.sweep.run'].PROGRESS_PRINT_S = 1.0; from ssdlab.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "sweep", str(sweep), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no progress line from the sweep in 120 s"
        line = proc.stdout.readline()
        assert line.startswith("[running] "), line
        assert proc.poll() is None  # printed while the point runs
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)


def test_a_sweep_runs_the_code_it_started_with_when_the_package_changes_under_it(tmp_path):
    """An upgrade or a checkout during a run of hours: every point runs the package as it was
    when the sweep started (the pool's fork server imports all of it first), not a mix of the
    old native module and new Python files picked up by later workers."""
    pkg = tmp_path / "site" / "ssdlab"
    shutil.copytree(Path(ssdlab.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    # Two flashblox lifetime studies one after the other (their runner's module is imported by
    # the worker that runs a point); the first runs for a few seconds.
    sweep = write(tmp_path / "two.toml", 'experiment = "flashblox"\nmode = "quick"\npoints = ["life_adaptive_rot", "life_fixed_1w"]\n')
    code = ("import sys, ssdlab.sweep.run; sys.modules['ssdlab.sweep.run'].PROGRESS_PRINT_S = 0.5; from ssdlab.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=str(pkg.parent), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, "-c", code, "sweep", str(sweep), "--out", str(tmp_path / "o"), "--jobs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no progress line from the sweep in 120 s"
        line = proc.stdout.readline()
        assert line.startswith("[running] "), line  # the first point runs: its worker is up
        # The package changes: the module of the points' runner is now broken.
        changed = pkg / "studies" / "flashblox" / "runner.py"
        changed.write_text(changed.read_text() + "\nraise RuntimeError('the package changed under the sweep')\n")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.communicate(timeout=60)
    assert proc.returncode == 0, line + out + err
    rows = read_csv(tmp_path / "o" / "results.csv")
    assert [r["status"] for r in rows] == ["ok", "ok"], rows


def test_workers_run_numpy_on_one_blas_thread_and_the_users_setting_wins():
    """A point is one process on one of the pool's CPUs: its numpy runs one BLAS thread (a
    thread per core spinning after each BLAS call took CPU from the point beside it), unless
    the user set the variable; the caller's own environment is left as it was."""
    from ssdlab.sweep.local import _LocalBackend, _worker_environment

    saved = os.environ.pop("OPENBLAS_NUM_THREADS", None)
    try:
        with _worker_environment():
            assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
        assert "OPENBLAS_NUM_THREADS" not in os.environ
        os.environ["OPENBLAS_NUM_THREADS"] = "3"
        with _worker_environment():
            assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
        assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
        if saved is not None:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    be = _LocalBackend(1)
    try:
        # What a worker of the pool sees (its exit status carries the value).
        p = be._ctx.Process(target=exec, args=("import os, sys; sys.exit(int(os.environ.get('OPENBLAS_NUM_THREADS', '0')))",))
        p.start()
        p.join(60)
    finally:
        be.close()
    assert p.exitcode == int(saved or 1)
