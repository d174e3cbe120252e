"""A new user's first steps (issue 46): `ssdlab config show` -> `run` -> `report` gives a small
time series, a readable report and nothing on stderr; a run logged to a file says how far it
is; `config presets`, `config --help` and `reproduce --list` explain themselves."""

import io
import json
import os
import re

from clitools import ssdlab, write
from ssdlab import _native
from ssdlab.config import SERIES_ROWS
from ssdlab.progress import PROGRESS_EVERY_ENV, LogProgress, clock, progress_line
from ssdlab.preset_table import HEADER, NOTES

# A small device the FTL's reserve leaves most spare to (so `run` has nothing to warn about),
# with the defaults of everything else: precondition, 2 device writes, timing on.
SMALL = 'preset = "tiny"\n[geometry]\nblocks_per_plane = 256\n'

PROGRESS = re.compile(r"^ssdlab run: \d+\.\d% \((fill|precondition|run) \d+\.\d%\), .+/s of host writes, "
                      r"\d+:\d\d:\d\d elapsed, ETA \d+:\d\d:\d\d$")


def quiet_env(**extra):
    """The environment with Python's warnings shown (none may be hidden by a filter)."""
    env = dict(os.environ, PYTHONWARNINGS="default")
    env.pop(PROGRESS_EVERY_ENV, None)
    env.update(extra)
    return env


def test_default_run_and_report_write_a_small_series_and_no_warnings(tmp_path):
    """A config as `config show` writes it (every key, [metrics] at its defaults), run and
    reported: under 1 MB of time series in about SERIES_ROWS rows, nothing on stderr."""
    shown = ssdlab("config", "show", "tiny").stdout
    cfg = write(tmp_path / "my.toml", shown.replace("blocks_per_plane = 64", "blocks_per_plane = 256", 1))
    assert "series_interval_ns = 10000000" in shown
    run = ssdlab("run", cfg, "--out", tmp_path / "my", env=quiet_env())
    assert run.stderr == ""
    rep = ssdlab("report", tmp_path / "my", env=quiet_env())
    assert rep.stderr == "" and rep.stdout.strip().endswith("report.md")
    series = tmp_path / "my" / "timeseries.csv"
    rows = series.read_text().count("\n") - 1
    assert series.stat().st_size < 1 << 20
    assert SERIES_ROWS / 2 <= rows <= SERIES_ROWS + 2, rows
    m = json.loads((tmp_path / "my" / "metrics.json").read_text())
    # The interval chosen is in the run's own record of its config: 1/SERIES_ROWS of its writes.
    planned = 2 * m["device"]["logical_bytes"]
    assert m["config"]["metrics"] == {"series_interval_ns": 0, "series_interval_host_bytes": -(-planned // SERIES_ROWS)}
    for png in ("dlwa.png", "latency_cdf.png", "erase_counts.png"):
        assert (tmp_path / "my" / png).stat().st_size > 5000, png
    assert "trailing window" in (tmp_path / "my" / "report.md").read_text()


def test_series_rows_option_and_own_intervals(tmp_path):
    cfg = write(tmp_path / "c.toml", SMALL + "[timing]\nenabled = false\n[workload]\nstop_device_writes = 0.5\n")
    ssdlab("run", cfg, "--out", tmp_path / "fine", "--series-rows", "5000", "-q")
    ssdlab("run", cfg, "--out", tmp_path / "fine2", "--series-rows", "5000", "-q")
    fine = (tmp_path / "fine" / "timeseries.csv").read_bytes()
    assert fine == (tmp_path / "fine2" / "timeseries.csv").read_bytes()  # same config, same bytes
    assert 4000 <= fine.count(b"\n") - 1 <= 5002
    # A [metrics] interval of the file's own is kept when no --series-rows is given.
    own = write(tmp_path / "own.toml", cfg.read_text() + "[metrics]\nseries_interval_host_bytes = 67108864\n")
    ssdlab("run", own, "--out", tmp_path / "own", "-q")
    m = json.loads((tmp_path / "own" / "metrics.json").read_text())
    assert m["config"]["metrics"]["series_interval_host_bytes"] == 64 << 20
    assert (tmp_path / "own" / "timeseries.csv").read_text().count("\n") - 1 < 12


def test_series_rows_is_checked():
    p = ssdlab("run", "x.toml", "--out", "o", "--series-rows", "1", check=False)
    assert p.returncode == 2 and "--series-rows" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    """A run longer than the progress interval prints progress lines to a non-terminal stderr
    (the interval from SSDLAB_PROGRESS_EVERY here; 10 s by default), none with -q."""
    cfg = write(tmp_path / "long.toml", SMALL + "[timing]\nenabled = false\n[precondition]\nsequential_fill = false\n"
                                               "random_device_writes = 0\n[workload]\nstop_device_writes = 10\n")
    p = ssdlab("run", cfg, "--out", tmp_path / "o", env=quiet_env(**{PROGRESS_EVERY_ENV: "0.05"}))
    lines = p.stderr.splitlines()
    assert lines and all(PROGRESS.match(line) for line in lines), p.stderr
    assert "DLWA" in p.stdout and "ssdlab run:" not in p.stdout
    q = ssdlab("run", cfg, "--out", tmp_path / "q", "-q", env=quiet_env(**{PROGRESS_EVERY_ENV: "0.05"}))
    assert q.stderr == "" and q.stdout == ""


def test_progress_printer_throttles_and_weighs_phases():
    now = [100.0]
    out = io.StringIO()
    lp = LogProgress("ssdlab run", {"fill": 1.0, "precondition": 1.0, "run": 2.0}, bytes_per_unit=2**30,
                     every_s=10.0, stream=out, now=lambda: now[0])
    lp("fill", 0.5)  # before the first interval: nothing
    now[0] = 110.0
    lp("precondition", 0.5)  # 1.5 of 4 device writes done in 10 s
    now[0] = 115.0
    lp("run", 0.1)  # within the next interval: nothing
    now[0] = 131.0
    lp("run", 0.5)  # 3 of 4 in 31 s
    assert out.getvalue().splitlines() == [
        "ssdlab run: 37.5% (precondition 50.0%), 153.6 MiB/s of host writes, 0:00:10 elapsed, ETA 0:00:17",
        "ssdlab run: 75.0% (run 50.0%), 99.1 MiB/s of host writes, 0:00:31 elapsed, ETA 0:00:10",
    ]
    assert clock(3725) == "1:02:05"
    assert progress_line("x", 0.0, 5.0) == "x: 0.0%, 0:00:05 elapsed, ETA -"


def test_progress_interval_from_the_environment(monkeypatch):
    from ssdlab.progress import progress_every_s

    monkeypatch.setenv(PROGRESS_EVERY_ENV, "2.5")
    assert progress_every_s() == 2.5
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv(PROGRESS_EVERY_ENV, bad)
        assert progress_every_s() == 10.0


def test_config_presets_is_a_table_of_every_preset():
    lines = ssdlab("config", "presets").stdout.splitlines()
    assert lines[0].split() == list(HEADER)
    names = _native.preset_names()
    rows = {line.split()[0]: line for line in lines[1:1 + len(names)]}
    assert list(rows) == list(names)
    assert set(NOTES) == set(names), "every preset needs what it models and its source in ssdlab/presets.py"
    assert "conventional" in rows["default"] and "32.0 GiB" in rows["default"] and "4x2x2x256x512, 16K" in rows["default"]
    assert " zns " in rows["zns-ssd"] and "ZN540" in rows["zns-ssd"]
    assert any(line.startswith("GEOMETRY") or "GEOMETRY:" in line for line in lines[len(names) + 1:])


def test_config_help_describes_every_subcommand():
    text = ssdlab("config", "--help").stdout
    for action, words in (("show", "complete config"), ("keys", "every config key"), ("check", "validate"),
                          ("presets", "list the presets")):
        assert re.search(rf"^\s+{action}\s+\S", text, re.M), (action, text)
        assert words in text, (words, text)
        sub = ssdlab("config", action, "--help").stdout
        assert sub.startswith(f"usage: ssdlab config {action}") and len(sub.splitlines()) > 4, sub


def test_reproduce_list_explains_its_columns():
    lines = ssdlab("reproduce", "--list").stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "QUICK", "FULL"]
    note = lines[-1]
    assert note.startswith("QUICK, FULL:") and "runs / seeds" in note and "--quick" in note and "--full" in note
