"""Parameter sweeps: run a grid of points on a local process pool or a Ray cluster.

A sweep is a base plus axes. The base is a config (every point runs it as `ssdlab run` would)
or an experiment (``experiment = NAME``: the points of ``ssdlab reproduce NAME``, each with the
runner it names, see ``ssdlab.runners``). Every point of the grid is resolved into its complete
input; the SHA-256 of its canonical JSON names the point's directory, so a point that already
has its ``metrics.json`` is never run twice, whichever sweep or reproduction asked for it::

    OUT/sweep.json                      what was swept (base, axes, metrics, points)
    OUT/points/<hash>/config.json       the point's complete input (a device config, or runner + task)
    OUT/points/<hash>/metrics.json      its measurements (+ the runner's files), or error.txt
    OUT/points/<hash>/run-info.json     wall time, peak memory and its estimate
    OUT/results.csv                     one row per point: its values, status, hash, metrics
    OUT/results.parquet                 the same, when pyarrow is importable
    OUT/plots/<metric>.png              one default plot per chosen metric

Each point's peak memory and CPUs are estimated before anything runs; the local pool starts a
point only when it fits beside the running ones, Ray gets them as task resources. Workers only
simulate: they get a point's input and return its results; this process writes every file, so
a worker killed by Ctrl-C (or a lost Ray node) can never leave a half-written point. The file
format is documented in docs/sweeps.md.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import itertools
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import pkgutil
import re
import shutil
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from . import runners as _runners
from .config import PathLike, load_file, merge, read_toml, sections, set_dotted, top_keys
from .runners import CHECKPOINT_EVERY_S, DEVICE, Resources, available_memory_bytes, get_runner, run_task
from .units import human_bytes

# Metrics shown when a sweep names none: dotted paths into metrics.json. Latency and throughput
# are empty (and not plotted) when timing is disabled.
DEFAULT_METRICS = ["dlwa", "gc_relocated_pages", "nand_erase_count", "erase_count.max",
                   "latency_ns.write.p99", "latency_ns.read.p99", "throughput.iops"]
# Top-level keys of a sweep file that are not config overrides.
SWEEP_KEYS = ("base", "preset", "experiment", "mode", "points", "name", "description", "metrics", "grid", "zip")
MAX_POINTS = 100_000  # a bound on the product of the axes; more is almost surely a typo
HASH_CHARS = 16       # directory names: 64 bits of the SHA-256, checked against config.json


class SweepError(_native.ConfigError):
    """A malformed sweep (file or arguments): says where and what to do."""


@dataclass
class Spec:
    """A sweep: the base (a config's user layer, or an experiment's points) and the axes."""

    base: Dict[str, Any]
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    zip: Dict[str, List[Any]] = field(default_factory=dict)
    metrics: List[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    metrics_chosen: bool = False
    name: str = "sweep"
    description: str = ""
    source: str = "python"
    # An experiment as the base: its points (ssdlab.experiments.ExperimentPoint), each crossed
    # with the axes; `value_keys` are their own columns, `base` is laid on each one's input.
    experiment: str = ""
    mode: str = ""
    base_points: List[Any] = field(default_factory=list)
    value_keys: List[str] = field(default_factory=list)

    @property
    def axes(self) -> List[str]:
        return list(self.grid) + list(self.zip)


@dataclass
class Point:
    index: int
    values: Dict[str, Any]      # axis key -> value, grid keys then zip keys
    user: Dict[str, Any]        # the base with this point's values set (what the runner resolves)
    config: Optional[Dict[str, Any]] = None   # resolved; None when it was rejected
    hash: str = ""
    error: str = ""
    status: str = "not-run"     # ok | failed | not-run (interrupted before it ran)
    metrics: Optional[Dict[str, Any]] = None
    name: str = ""              # an experiment point's name
    base_values: Dict[str, Any] = field(default_factory=dict)  # an experiment point's own values
    runner: str = DEVICE.name
    resources: Optional[Resources] = None

    def label(self) -> str:
        vals = ", ".join(f"{k}={_fmt(v)}" for k, v in self.values.items())
        return f"{self.name} ({vals})" if self.name and vals else self.name or vals

    def doc(self) -> Dict[str, Any]:
        """What config.json holds and the hash is taken over: a device config as it is (the
        point of a plain sweep), else the runner's name and its task."""
        assert self.config is not None
        return self.config if self.runner == DEVICE.name else {"runner": self.runner, "task": self.config}


# ---------------------------------------------------------------------------------------------
# Building the sweep


def _fmt(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def canonical_json(cfg: Mapping[str, Any]) -> str:
    """The form a point's hash is taken over: sorted keys, no whitespace."""
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def config_hash(cfg: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()


def _check_key(where: str, key: Any) -> str:
    if not isinstance(key, str) or not key or any(not p for p in key.split(".")):
        raise SweepError(f"{where}: {key!r} is not a dotted config key (e.g. \"ftl.spare_factor\", \"seed\")")
    return key


def _check_axes(where: str, table: Any, zipped: bool) -> Dict[str, List[Any]]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise SweepError(f"{where}: must be a table of dotted config keys to lists of values")
    out: Dict[str, List[Any]] = {}
    for key, values in table.items():
        _check_key(f"{where}", key)
        if isinstance(values, Mapping):
            # [grid.ftl] spare_factor = [...] reads as {"ftl": {"spare_factor": [...]}}: flatten it.
            for sub, v in _check_axes(f"{where}", {f"{key}.{k}": v for k, v in values.items()}, zipped).items():
                out[sub] = v
            continue
        if key in sections() and not all(isinstance(v, Mapping) for v in (values if isinstance(values, list) else [values])):
            hint = ("; TOML puts every key after a [table] header into that table: move "
                    f"`{key} = ...` above the first [table]") if key == "metrics" else ""
            raise SweepError(f"{where}: {key} is a config table; vary a key inside it (e.g. \"{key}.<key>\") "
                             f"or give tables as values{hint}")
        if not isinstance(values, (list, tuple)) or len(values) == 0:
            raise SweepError(f"{where}: {key} must be a non-empty list of values, got {values!r}")
        out[key] = list(values)
    if zipped and out:
        lengths = {k: len(v) for k, v in out.items()}
        if len(set(lengths.values())) > 1:
            raise SweepError(f"{where}: zipped lists must have equal lengths; got "
                             + ", ".join(f"{k} ({n})" for k, n in lengths.items()))
    return out


def _check_metrics(where: str, metrics: Any) -> List[str]:
    if not isinstance(metrics, (list, tuple)) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise SweepError(f"{where}: metrics must be a non-empty list of dotted paths into metrics.json, "
                         f"e.g. [\"dlwa\", \"latency_ns.write.p99\"]; got {metrics!r}")
    return list(dict.fromkeys(metrics))


def _base_from(base: Union[PathLike, Mapping[str, Any]]) -> Tuple[Dict[str, Any], str]:
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base)), "dict"
    s = os.fspath(base)
    if s in _native.preset_names():
        return {"preset": s}, f"preset {s}"
    p = Path(s)
    if p.suffix == ".toml" or p.exists():
        return load_file(p), str(p)
    raise SweepError(f"base {s!r} is neither a config file nor a preset; presets: {', '.join(_native.preset_names())}")


def load_sweep(path: PathLike) -> Spec:
    """Read a sweep file (format: docs/sweeps.md)."""
    path = Path(path)
    try:
        doc = read_toml(path, "sweep file")
    except _native.ConfigError as e:
        raise SweepError(str(e)) from None
    where = str(path)
    if "experiment" in doc:
        return _load_experiment_sweep(path, doc)
    for k in ("mode", "points"):
        if k in doc:
            raise SweepError(f"{where}: {k} = ... belongs to an experiment sweep (experiment = \"NAME\")")
    config_top = tuple(k for k in top_keys() if k != "preset") + sections()
    unknown = [k for k in doc if k not in SWEEP_KEYS + config_top]
    if unknown:
        raise SweepError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(SWEEP_KEYS)}, "
                         f"or config overrides ({', '.join(config_top)})")
    if "base" in doc and "preset" in doc:
        raise SweepError(f"{where}: give base = \"config.toml\" or preset = \"NAME\", not both "
                         "(a base file names its own preset)")
    if "base" in doc:
        if not isinstance(doc["base"], str):
            raise SweepError(f"{where}: base must be the path of a config file, relative to the sweep file")
        base_path = (path.parent / doc["base"])
        base = load_file(base_path)
        source = f"{path} (base {doc['base']})"
    elif "preset" in doc:
        if doc["preset"] not in _native.preset_names():
            raise SweepError(f"{where}: preset {doc['preset']!r} is unknown; presets: {', '.join(_native.preset_names())}")
        base = {"preset": doc["preset"]}
        source = f"{path} (preset {doc['preset']})"
    else:
        raise SweepError(f"{where}: name the base config: base = \"config.toml\" (relative to this file) "
                         "or preset = \"NAME\"")
    # `metrics = [...]` (a list) picks the result columns; a [metrics] table is the config's own
    # section (time-series intervals).
    chosen = None
    if "metrics" in doc and not isinstance(doc["metrics"], Mapping):
        chosen = _check_metrics(where, doc.pop("metrics"))
    overrides = {k: v for k, v in doc.items() if k in config_top}
    base = merge(base, overrides)
    grid = _check_axes(f"{where}: [grid]", doc.get("grid"), zipped=False)
    zipped = _check_axes(f"{where}: [zip]", doc.get("zip"), zipped=True)
    both = set(grid) & set(zipped)
    if both:
        raise SweepError(f"{where}: {sorted(both)[0]} is both in [grid] and [zip]")
    if not grid and not zipped:
        raise SweepError(f"{where}: nothing to sweep: add a [grid] table (every combination) and/or a [zip] "
                         "table (lists varied together), keys are dotted config keys")
    spec = Spec(base=base, grid=grid, zip=zipped, source=source,
                name=str(doc.get("name", path.stem)), description=str(doc.get("description", "")))
    if chosen is not None:
        spec.metrics, spec.metrics_chosen = chosen, True
    _count_points(spec, where)
    return spec


def _load_experiment_sweep(path: Path, doc: Dict[str, Any]) -> Spec:
    """`experiment = NAME`: the reproduction's points (all, or those named by `points`) in
    `mode`, each crossed with the axes; other top-level tables are laid on every point's input
    (a device config for gc-policies, [device]/[cache]/[workload] for fdp-cache, ...)."""
    where = str(path)
    for k in ("base", "preset"):
        if k in doc:
            raise SweepError(f"{where}: experiment = {doc['experiment']!r} is the base; {k} = ... cannot go with it "
                             "(set config keys as overrides or axes instead)")
    name, mode = doc["experiment"], doc.get("mode", "quick")
    if not isinstance(name, str) or not isinstance(mode, str):
        raise SweepError(f"{where}: experiment and mode must be strings (experiment = \"fdp-cache\", mode = \"quick\")")
    chosen = None
    if "metrics" in doc:
        chosen = _check_metrics(where, doc.pop("metrics"))
    names = doc.get("points")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names):
        raise SweepError(f"{where}: points must be a non-empty list of the experiment's point names")
    spec = experiment_spec(name, mode, names, where=where)
    spec.base = {k: v for k, v in doc.items() if k not in SWEEP_KEYS}
    spec.grid = _check_axes(f"{where}: [grid]", doc.get("grid"), zipped=False)
    spec.zip = _check_axes(f"{where}: [zip]", doc.get("zip"), zipped=True)
    both = set(spec.grid) & set(spec.zip)
    if both:
        raise SweepError(f"{where}: {sorted(both)[0]} is both in [grid] and [zip]")
    spec.source = f"{path} (experiment {name}, {mode})"
    spec.name = str(doc.get("name", path.stem))
    spec.description = str(doc.get("description", ""))
    if chosen is not None:
        spec.metrics, spec.metrics_chosen = chosen, True
    _count_points(spec, where)
    return spec


def experiment_spec(name: str, mode: str, names: Optional[Sequence[str]] = None, where: str = "") -> Spec:
    """A sweep of experiment `name`'s points in `mode` (those in `names`, or all), no axes."""
    from .studies.reproduce import experiment_of, load_spec

    where = where or f"experiment {name}"
    try:
        exp_spec = load_spec(name)
        exp = experiment_of(exp_spec, name)
        if mode not in exp_spec:
            raise ValueError(f"experiment {name!r} has no {mode!r} mode; modes: "
                             f"{', '.join(k for k in ('quick', 'full') if k in exp_spec)}")
        pts = exp.points(exp_spec, mode)
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise SweepError(f"{where}: {e}") from None
    if names is not None:
        known = {p.name for p in pts}
        missing = [n for n in names if n not in known]
        if missing:
            raise SweepError(f"{where}: experiment {name!r} ({mode}) has no point {missing[0]!r}; its points: "
                             f"{', '.join(sorted(known))}")
        pts = [p for p in pts if p.name in set(names)]
    keys = list(dict.fromkeys(k for p in pts for k in p.values))
    return Spec(base={}, metrics=list(exp.metrics), name=f"{name} ({mode})", source=f"experiment {name} ({mode})",
                experiment=name, mode=mode, base_points=pts, value_keys=keys)


def _count_points(spec: Spec, where: str) -> int:
    n = math.prod(len(v) for v in spec.grid.values())
    if spec.zip:
        n *= len(next(iter(spec.zip.values())))
    if spec.experiment:
        n *= max(1, len(spec.base_points))
    if n > MAX_POINTS:
        raise SweepError(f"{where}: {n} points is more than the limit of {MAX_POINTS}; split the sweep")
    return n


def expand(spec: Spec) -> List[Point]:
    """Every point of the sweep, in a fixed order (an experiment's points in its order, each
    with the axes: the last grid axis varies fastest, then zip), each resolved by its runner
    and sized, or carrying the error that rejected it."""
    combos: List[Dict[str, Any]] = []
    grid_keys = list(spec.grid)
    zip_rows = [dict(zip(spec.zip, vals, strict=True)) for vals in zip(*spec.zip.values(), strict=True)] if spec.zip else [{}]
    for vals in itertools.product(*spec.grid.values()):
        for zrow in zip_rows:
            combos.append({**dict(zip(grid_keys, vals, strict=True)), **zrow})
    if spec.experiment:
        bases = [(b.name, b.values, b.runner, merge(b.input, spec.base)) for b in spec.base_points]
    else:
        bases = [("", {}, DEVICE.name, spec.base)]
    points = []
    for name, base_values, runner_name, base in bases:
        runner = get_runner(runner_name)
        for values in combos:
            user = copy.deepcopy(base)
            for k, v in values.items():
                set_dotted(user, k, v)
            pt = Point(index=len(points), values=values, user=user, name=name, base_values=dict(base_values),
                       runner=runner_name)
            try:
                pt.config = runner.resolve(user)
                pt.hash = config_hash(pt.doc())[:HASH_CHARS]
                pt.resources = runner.resources(pt.config)
            except (_native.SsdlabError, ValueError) as e:
                pt.error = f"point {pt.index} ({pt.label()}): {e}"
                if not pt.hash:
                    pt.hash = config_hash({"runner": runner_name, "user": user})[:HASH_CHARS]
                pt.config = None
                pt.status = "failed"
            except TypeError as e:  # e.g. a value JSON cannot carry
                raise SweepError(f"point {pt.index} ({pt.label()}): {e}") from None
            points.append(pt)
    if points and all(p.config is None for p in points):
        # Nothing could run: a typo in an axis key or a broken base, not a sweep result.
        raise SweepError(f"no point has a valid config; the first: {points[0].error}")
    return points


# ---------------------------------------------------------------------------------------------
# Workers


def run_point(config_json: str) -> Dict[str, Any]:
    """Simulate one device config (precondition + its configured workload) in this process;
    returns the measurements or the error, never raises for a failing point."""
    return run_task(DEVICE.name, config_json)


# How often a worker tells the parent how far its point is.
PROGRESS_SEND_S = 5.0
# How often the parent prints how far each long-running point is.
PROGRESS_PRINT_S = 300.0


def _worker_main(runner: str, task_json: str, conn: Any, checkpoint: Optional[Tuple[str, float]] = None) -> None:
    # The parent owns Ctrl-C: it stops the workers itself and keeps finished points.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A process group of its own, which the processes the point starts (remote memory nodes,
    # servers, QEMU) join: whatever stops this worker stops them too (`_after_worker`).
    os.setpgid(0, 0)

    # Stopped by the pool (SIGTERM): unwind, so the point's `with` blocks stop what it started
    # and remove its temporary files (a core run sees it at its next progress check; the pool
    # kills a worker that has not gone within 10 s, and `_after_worker` tidies after it then).
    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    sent = [float("-inf")]  # the first report goes at once

    def progress(fraction: float) -> None:
        if time.monotonic() - sent[0] >= PROGRESS_SEND_S:
            sent[0] = time.monotonic()
            with contextlib.suppress(OSError):
                conn.send({"progress": float(fraction)})

    _runners._progress_sink = progress
    _runners._checkpoint = checkpoint
    result = run_task(runner, task_json)
    try:
        conn.send(result)
        conn.close()
    except OSError:
        pass  # the parent stopped listening (interrupted): nobody waits for this point


def _running_text(label: str, fraction: float, elapsed_s: float, first: float = 0.0) -> str:
    """How far a running point is, for the log: "[running] NAME: 37% after 28 min, about 48 min to go".
    ``first``: the fraction it reported first (a point resumed from a save starts part-way; the
    time left is then from its pace since)."""
    def span(s: float) -> str:
        return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min"
    done = fraction - first
    left = elapsed_s * (1 - fraction) / done if done > 0 else float("nan")
    since = f" (resumed at {first * 100:.0f}%)" if first >= 0.005 else ""
    return f"[running] {label}: {fraction * 100:.0f}% after {span(elapsed_s)}{since}, about {span(left)} to go"


def _exit_text(code: Optional[int]) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def _package_modules() -> List[str]:
    """Every module of the ssdlab package, for the fork server to import before it forks any
    worker: the points of a sweep then all run the code it started with, even when the
    installed files change under a run of hours (an upgrade, or a checkout in an editable
    install; a worker importing a runner's module afresh would mix old and new code)."""
    import ssdlab

    return ["ssdlab._native"] + [m.name for m in pkgutil.walk_packages(ssdlab.__path__, "ssdlab.")
                                 if not m.name.rpartition(".")[2].startswith("_")]


def _start_forkserver_deaf_to_ctrl_c() -> None:
    """Start the fork server with SIGINT ignored: an ignored signal stays ignored across exec,
    and workers forked from the server keep its disposition, so a Ctrl-C that reaches the whole
    process group cannot interrupt a worker that is still starting (the parent owns Ctrl-C: it
    stops the workers itself). A Ctrl-C in the few milliseconds the server takes to start is
    lost; one already running (started by an earlier sweep in this process) is kept as it is."""
    if threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import forkserver

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _end_group(pgid: int, grace_s: float = 5.0) -> None:
    """Stop what is left of a worker's process group (the worker is its leader, `pgid` its
    pid): SIGTERM, then SIGKILL for anything still there after `grace_s`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return  # nothing left
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _after_worker(pid: int, runner: str) -> None:
    """After a worker died or was stopped mid-point: stop what is left of its process group,
    then run its runner's tidying, if it has any (a failure there must not hide the point's
    own outcome)."""
    _end_group(pid)
    try:
        reap = get_runner(runner).reap
        if reap is not None:
            reap()
    except Exception as e:
        print(f"ssdlab: tidying after {runner} failed: {e}", file=sys.stderr)


class _LocalBackend:
    """A process per point (forkserver, so no worker inherits the parent's threads; each
    point's peak memory is its own process's, and a worker that dies takes only its point)."""

    name = "local"

    def __init__(self, jobs: int):
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            self._ctx.set_forkserver_preload(_package_modules())
            _start_forkserver_deaf_to_ctrl_c()
        self.capacity = jobs
        self._procs: Dict[Any, Tuple[Any, str]] = {}  # the result pipe's end -> (process, runner)
        self.progress: Dict[Any, float] = {}  # the result pipe's end -> fraction its point reported
        self.first_progress: Dict[Any, float] = {}  # ... and the first it reported (a resumed point's start)

    def submit(self, runner: str, task_json: str, res: Resources, checkpoint: Optional[Tuple[str, float]] = None):
        recv, send = self._ctx.Pipe(duplex=False)
        p = self._ctx.Process(target=_worker_main, args=(runner, task_json, send, checkpoint), daemon=True)
        p.start()
        send.close()
        self._procs[recv] = (p, runner)
        return recv

    def wait(self, handles: List[Any], timeout: float) -> List[Tuple[Any, Dict[str, Any]]]:
        out = []
        for conn in multiprocessing.connection.wait(handles, timeout=timeout):
            try:
                result = conn.recv()
            except (EOFError, OSError):
                result = None
            if result is not None and set(result) == {"progress"}:
                self.progress[conn] = result["progress"]  # still running
                self.first_progress.setdefault(conn, result["progress"])
                continue
            p, runner = self._procs.pop(conn)
            self.progress.pop(conn, None)
            self.first_progress.pop(conn, None)
            if result is None:
                p.join(timeout=10)
                result = {"error": f"the worker process died ({_exit_text(p.exitcode)}); re-run to retry"}
                _after_worker(p.pid, runner)
            conn.close()
            p.join(timeout=10)
            out.append((conn, result))
        return out

    def abort(self, handles: List[Any]) -> None:
        for conn in handles:
            p, runner = self._procs.pop(conn, (None, ""))
            if p is not None:
                p.terminate()
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
                _after_worker(p.pid, runner)
            conn.close()

    def close(self) -> None:
        self.abort(list(self._procs))


def _is_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("auto", "localhost", "::1") or host.startswith("127.")


def _ray_token_available() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").is_file())


def local_ray_env(token: bool = True) -> Dict[str, str]:
    """Environment for a Ray that must talk to nothing but this machine (``--ray auto``, and
    what to give ``ray start`` for a cluster on 127.0.0.1; the tests use it).

    - No usage statistics; and the "usage disabled" notice a `ray start` cluster still sends
      goes to a closed loopback port.
    - RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray's single-node mode. Otherwise, on Linux, Ray
      replaces 127.0.0.1 by the machine's routable address.
    - Ray's head process probes cloud metadata servers (169.254.169.254 and a DNS name) even
      with usage statistics off; its HTTP goes through a proxy on a closed loopback port
      instead. Ray's own gRPC ignores proxies, and loopback is exempt anyway.
    - Token authentication, as Ray chooses by default for a new cluster, but said explicitly
      (no warning; and needed to join a cluster by address).
    """
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens, connections are refused
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": dead + "/",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[k] = dead
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost,::1"
    if token:
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "token")
    return env


class _RayBackend:
    """Ray tasks: ``auto`` starts a local Ray; an address joins a running cluster.

    Usage statistics are always off and no dashboard is started. A local Ray (``auto``, or an
    address on 127.0.0.0/8) talks only on the loopback interface (see ``local_ray_env``)."""

    name = "ray"

    def __init__(self, address: str, jobs: Optional[int]):
        import logging

        self._loopback = _is_loopback(address)
        if self._loopback:
            env = local_ray_env(token=address == "auto" or _ray_token_available())
        else:
            env = {"RAY_USAGE_STATS_ENABLED": "0"}
        # Set for this process and the Ray processes it starts; restored by close().
        self._env_saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            import ray
            import ray._private.ray_constants as ray_constants
        except ImportError:
            self._restore_env()
            raise SweepError("the Ray backend needs Ray: pip install 'ssdlab[ray]'") from None
        self._ray = ray
        # Read once at import: set it too in case Ray was imported before this point.
        self._cluster_flag = ray_constants.ENABLE_RAY_CLUSTER
        if self._loopback:
            ray_constants.ENABLE_RAY_CLUSTER = False
        common = dict(logging_level=logging.WARNING, log_to_driver=False)
        # A local Ray keeps its sessions (logs, sockets, spilled objects) in a directory of its
        # own that close() removes; by default they would pile up in $TMPDIR/ray.
        self._temp_dir: Optional[str] = None
        try:
            if address == "auto":
                import tempfile

                self._temp_dir = tempfile.mkdtemp(prefix="ssdlab-ray-")  # short: socket paths fit 107 bytes
                # The point's estimates are its memory resources: offer Ray what is available
                # (its default keeps 30% for an object store that points do not use).
                avail = available_memory_bytes()
                mem = dict(_memory=int(avail * 0.95), object_store_memory=256 << 20) if avail else {}
                ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
                         num_cpus=jobs or os.cpu_count(), _temp_dir=self._temp_dir, **mem, **common)
            else:
                extra = {"_node_ip_address": "127.0.0.1"} if self._loopback else {}
                ray.init(address=address, **common, **extra)
        except (ConnectionError, ValueError, RuntimeError) as e:
            self.close()
            raise SweepError(f"cannot {'start a local Ray' if address == 'auto' else 'join the Ray cluster at ' + address}: "
                             f"{e}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = max(1, cpus)
        # What the largest node offers: a point needing more could never be scheduled.
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        self.node_memory_bytes = int(max((n.get("memory", 0) for n in nodes), default=0)) or None
        self.node_cpus = int(max((n.get("CPU", 0) for n in nodes), default=0)) or self.capacity
        # No retries: a point whose worker dies is recorded as failed, as with the local pool.
        # A fresh worker per point: its memory is returned and its peak is the point's own.
        self._task = ray.remote(num_cpus=1, max_retries=0, max_calls=1)(run_task)

    def _restore_env(self) -> None:
        for k, v in self._env_saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def submit(self, runner: str, task_json: str, res: Resources, checkpoint: Optional[Tuple[str, float]] = None):
        # No checkpoints on Ray: a task may run on any node, and its save would stay on that one.
        return self._task.options(num_cpus=res.cpus, memory=res.memory_bytes).remote(runner, task_json)

    def wait(self, handles: List[Any], timeout: float) -> List[Tuple[Any, Dict[str, Any]]]:
        ray = self._ray
        ready, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out = []
        for ref in ready:
            try:
                out.append((ref, ray.get(ref)))
            except ray.exceptions.RayError as e:
                out.append((ref, {"error": f"{type(e).__name__}: {e}"}))
        return out

    def abort(self, handles: List[Any]) -> None:
        for ref in handles:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # already finished or its worker is gone
                pass
        self.close()

    def close(self) -> None:
        if self._ray.is_initialized():
            self._ray.shutdown()
        import ray._private.ray_constants as ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = self._cluster_flag
        self._restore_env()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None


# ---------------------------------------------------------------------------------------------
# Running


def _point_dir(out: Path, pt: Point) -> Path:
    return out / "points" / pt.hash


def _load_done(out: Path, pt: Point) -> Optional[Dict[str, Any]]:
    """The metrics of a point finished by an earlier run, if its directory holds this input."""
    d = _point_dir(out, pt)
    try:
        if canonical_json(json.loads((d / "config.json").read_text())) != canonical_json(pt.doc()):
            return None
        return json.loads((d / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def _safe_name(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts and name not in ("config.json", "metrics.json", "error.txt")


def _write_point(out: Path, pt: Point, result: Optional[Dict[str, Any]] = None) -> None:
    """Write a point's directory atomically (a temporary directory renamed into place): its
    input, and the worker's ``result`` (metrics, files, run-info.json), or ``pt.error`` in
    error.txt."""
    final = _point_dir(out, pt)
    tmp = final.parent / f".tmp-{pt.hash}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg = pt.doc() if pt.config is not None else pt.user
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if result is not None and "metrics" in result:
        (tmp / "metrics.json").write_text(json.dumps(result["metrics"], indent=2) + "\n")
        for name, data in result.get("files", {}).items():
            if not _safe_name(name):
                raise ValueError(f"point {pt.index}: the runner returned a file named {name!r}")
            f = tmp / name
            f.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                f.write_bytes(data)
            else:
                f.write_text(data)
        # Wall-clock facts: here, never in metrics.json or results.csv.
        info = {k: result.get(k) for k in ("wall_seconds", "peak_rss_bytes")}
        info["memory_estimate_bytes"] = pt.resources.memory_bytes if pt.resources else None
        (tmp / "run-info.json").write_text(json.dumps(info, indent=2) + "\n")
    else:
        (tmp / "error.txt").write_text(pt.error.rstrip("\n") + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def _lookup(metrics: Mapping[str, Any], path: str) -> Any:
    cur: Any = metrics
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def _rows(spec: Spec, points: List[Point]) -> List[Dict[str, Any]]:
    rows = []
    for pt in points:
        row: Dict[str, Any] = {"point": pt.index}
        if spec.experiment:
            row["name"] = pt.name
            row.update({k: pt.base_values.get(k) for k in spec.value_keys})
        row.update(pt.values)
        row["status"] = pt.status
        row["hash"] = pt.hash
        for m in spec.metrics:
            row[m] = _lookup(pt.metrics, m) if pt.metrics is not None else None
        row["error"] = pt.error.splitlines()[0] if pt.error else ""
        rows.append(row)
    return rows


def _columns(spec: Spec) -> List[str]:
    own = ["name", *spec.value_keys] if spec.experiment else []
    return ["point", *own, *spec.axes, "status", "hash", *spec.metrics, "error"]


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v)


def _write_tables(out: Path, spec: Spec, rows: List[Dict[str, Any]]) -> List[Path]:
    cols = _columns(spec)
    written = []
    tmp = out / "results.csv.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_csv_cell(r[c]) for c in cols])
    os.replace(tmp, out / "results.csv")
    written.append(out / "results.csv")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    data = {}
    for c in cols:
        vals = [r[c] for r in rows]
        kinds = {type(v) for v in vals if v is not None}
        if not (kinds <= {int, float} or (len(kinds) == 1 and kinds <= {bool, str})):
            vals = [None if v is None else _csv_cell(v) for v in vals]  # lists, tables, mixed: as text
        data[c] = vals
    pq.write_table(pa.table(data), out / "results.parquet")
    written.append(out / "results.parquet")
    return written


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _short(key: str, keys: Sequence[str]) -> str:
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def _plot(spec: Spec, rows: List[Dict[str, Any]], metric: str, path: Path) -> bool:
    """x = the first grid axis (else the first zip key); one line (or bar series) per combination
    of the other axes. Returns False when the metric has no numeric value to plot."""
    if not any(_is_number(r[metric]) for r in rows):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # x: the first axis (grid, then zip) that takes more than one value; an axis pinned to one
    # value is no line of its own.
    varying = [k for k in spec.axes if len({canonical_json(r[k]) for r in rows}) > 1] or spec.axes[:1]
    x_key = varying[0]
    # Zip keys move together: when x is a zip key, its siblings are not separate lines.
    others = [k for k in varying[1:] if not (x_key in spec.zip and k in spec.zip)]
    xs: List[Any] = list(dict.fromkeys(canonical_json(r[x_key]) for r in rows))
    x_vals = [json.loads(x) for x in xs]
    groups: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        # One other axis: its name is the legend's title, the values are enough.
        label = (_fmt(r[others[0]]) if len(others) == 1 else
                 ", ".join(f"{_short(k, spec.axes)}={_fmt(r[k])}" for k in others))
        if _is_number(r[metric]):  # failed points leave a gap
            groups.setdefault(label, {})[canonical_json(r[x_key])] = r[metric]
    numeric_x = all(_is_number(x) for x in x_vals)
    fig, ax = plt.subplots(figsize=(6.5 if len(groups) <= 4 else 9, 4))
    if numeric_x:
        order = sorted(range(len(xs)), key=lambda i: x_vals[i])
        for label, ys in groups.items():
            ax.plot([x_vals[i] for i in order], [ys.get(xs[i], math.nan) for i in order], "o-", label=label or None)
    else:
        width = 0.8 / max(1, len(groups))
        for gi, (label, ys) in enumerate(groups.items()):
            pos = [i - 0.4 + width * (gi + 0.5) for i in range(len(xs))]
            ax.bar(pos, [ys.get(x, math.nan) for x in xs], width=width, label=label or None)
        ax.set_xticks(range(len(xs)), [_fmt(v) for v in x_vals])
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    ax.set_title(f"{spec.name}: {metric}")
    ax.grid(alpha=0.3)
    if len(groups) > 1:
        where = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0)) if len(groups) > 4 else {}
        ax.legend(fontsize=8, title=_short(others[0], spec.axes) if len(others) == 1 else None,
                  title_fontsize=8, **where)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_name(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", metric) + ".png"


def _describe(spec: Spec, points: List[Point]) -> Dict[str, Any]:
    d = {
        "name": spec.name, "description": spec.description, "source": spec.source,
        "ssdlab_version": _native.__version__, "base": spec.base, "grid": spec.grid, "zip": spec.zip,
        "metrics": spec.metrics,
        "points": [{"point": p.index, "values": p.values, "hash": p.hash} for p in points],
    }
    if spec.experiment:
        d["experiment"], d["mode"] = spec.experiment, spec.mode
        for p, row in zip(points, d["points"], strict=True):
            row["name"], row["experiment_values"], row["runner"] = p.name, p.base_values, p.runner
    return d


def run_sweep(spec: Spec, out: PathLike, backend: str = "local", jobs: Optional[int] = None,
              ray_address: Optional[str] = None, progress: Optional[bool] = None,
              log: Callable[[str], None] = lambda s: None, resume: bool = True,
              memory_bytes: Optional[int] = None,
              describe: Optional[Callable[[Dict[str, Any]], str]] = None,
              points: Optional[List[Point]] = None,
              checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Run ``spec`` into ``out``; returns (rows, summary). Raises nothing for failing points.

    ``resume``: reuse points whose directory holds the same input and its metrics (else every
    point runs again). ``memory_bytes``: what the points running at once may take together
    (local pool; default: the memory available now). ``describe(metrics)``: a few words on a
    finished point for its log line. ``points``: the expanded points, if the caller has them.
    ``checkpoint_every_s``: how often a long point that can save its state (fdp-cache runs) does
    so, in OUT/checkpoints/ (local pool; 0: never); a point killed or interrupted goes on from
    its latest save when the sweep runs again with ``resume``."""
    out = Path(out)
    if backend not in ("local", "ray"):
        raise SweepError(f"backend {backend!r} is unknown; use \"local\" (a process pool) or \"ray\"")
    if jobs is not None and jobs < 1:
        raise SweepError(f"jobs must be at least 1, got {jobs}")
    if memory_bytes is not None and memory_bytes <= 0:
        raise SweepError(f"the memory budget must be positive, got {memory_bytes}")
    if not checkpoint_every_s >= 0:
        raise SweepError(f"the checkpoint interval must be >= 0 seconds, got {checkpoint_every_s}")
    started = time.time()
    if points is None:
        points = expand(spec)
    out.mkdir(parents=True, exist_ok=True)
    (out / "points").mkdir(exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(_describe(spec, points), indent=2) + "\n")
    if not resume:  # every point runs again from its start
        shutil.rmtree(out / "checkpoints", ignore_errors=True)

    # Resume: a point whose directory holds this input and its metrics.json is done.
    todo: Dict[str, List[Point]] = {}  # hash -> points (two points may resolve to one input)
    skipped = 0
    for pt in points:
        if pt.config is None:
            _write_point(out, pt)
            continue
        done = _load_done(out, pt) if resume else None
        if done is not None:
            pt.status, pt.metrics = "ok", done
            skipped += 1
        else:
            todo.setdefault(pt.hash, []).append(pt)

    interrupted = False
    ran = 0
    if todo:
        ran, interrupted = _dispatch(out, todo, backend, jobs, ray_address, progress, log, memory_bytes,
                                     describe or (lambda m: "ok"), checkpoint_every_s)
    with contextlib.suppress(OSError):  # only if no point left a save there
        (out / "checkpoints").rmdir()

    rows = _rows(spec, points)
    tables = _write_tables(out, spec, rows)
    plots, warnings = [], []
    for m in spec.metrics:
        vals = [r[m] for r in rows if r["status"] == "ok"]
        if vals and all(v is None for v in vals) and spec.metrics_chosen:
            warnings.append(f"metric {m!r} is in no point's metrics.json (a typo? timing disabled?)")
        elif any(isinstance(v, (dict, list)) for v in vals):
            warnings.append(f"metric {m!r} is a table, not a number: name a value inside it (e.g. {m}.<key>)")
        if spec.axes and _plot(spec, rows, m, out / "plots" / _plot_name(m)):
            plots.append(out / "plots" / _plot_name(m))
    failed = [p for p in points if p.status == "failed"]
    summary = {
        "points": len(points), "ran": ran, "skipped": skipped,
        "ok": sum(p.status == "ok" for p in points), "failed": len(failed),
        "not_run": sum(p.status == "not-run" for p in points), "interrupted": interrupted,
        "failures": [{"point": p.index, "name": p.name, "values": p.values, "hash": p.hash, "error": p.error,
                      "error_file": str(_point_dir(out, p) / "error.txt")} for p in failed],
        "backend": backend, "tables": [str(t) for t in tables], "plots": [str(p) for p in plots],
        "warnings": warnings, "wall_seconds": round(time.time() - started, 3),
    }
    # Wall time and backend go here, never into results.csv: results do not depend on them.
    (out / "run-info.json").write_text(json.dumps({k: summary[k] for k in (
        "backend", "points", "ran", "skipped", "ok", "failed", "not_run", "interrupted", "wall_seconds")}, indent=2) + "\n")
    return rows, summary


@contextlib.contextmanager
def _sigint_deferred():
    """Hold a Ctrl-C until the block is done, then raise it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and previous is not signal.SIG_IGN:
        if callable(previous):
            previous(signal.SIGINT, None)  # Python's default handler raises KeyboardInterrupt
        else:
            raise KeyboardInterrupt


def _too_big(res: Resources, budget: Optional[int], where: str) -> Optional[str]:
    """Why a point cannot run at all here (its memory estimate exceeds what there is), if so."""
    if budget is None or res.memory_bytes <= budget:
        return None
    if os.environ.get("SSDLAB_IGNORE_MEMORY_ESTIMATE", "") not in ("", "0"):
        return None
    return (f"needs about {human_bytes(res.memory_bytes)} of memory and {where} offers {human_bytes(budget)}; "
            "run it on a larger machine (or Ray node), or force it with --force (SSDLAB_IGNORE_MEMORY_ESTIMATE=1)")


def _dispatch(out: Path, todo: Dict[str, List[Point]], backend: str, jobs: Optional[int],
              ray_address: Optional[str], progress: Optional[bool], log: Callable[[str], None],
              memory_bytes: Optional[int], describe: Callable[[Dict[str, Any]], str],
              checkpoint_every_s: float = 0.0) -> Tuple[int, bool]:
    from tqdm import tqdm

    if progress is None:
        progress = sys.stderr.isatty()
    if backend == "ray":
        be: Any = _RayBackend(ray_address or "auto", jobs)
        budget, where = be.node_memory_bytes, "the largest Ray node"
        window = 2 * be.capacity  # Ray queues by resources; keep a bounded number submitted
    else:
        be = _LocalBackend(min(jobs or os.cpu_count() or 1, len(todo)))
        budget, where = memory_bytes or available_memory_bytes(), "this machine"
        if memory_bytes:
            where = "the memory budget (--memory)"
        window = be.capacity
    pending = deque(todo.items())
    inflight: Dict[Any, Tuple[str, Resources]] = {}
    started: Dict[Any, float] = {}
    last_print = time.monotonic()
    ran = failed = 0
    bar = tqdm(total=len(todo), desc=f"sweep ({be.name}, {be.capacity} workers)", unit="point",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)

    def res_of(h: str) -> Resources:
        r = todo[h][0].resources or Resources(0)
        return Resources(r.memory_bytes, max(1, min(r.cpus, getattr(be, "node_cpus", be.capacity))))

    def fits(r: Resources) -> bool:
        if not inflight:
            return True
        if len(inflight) >= window:
            return False
        if backend == "ray":
            return True
        used = [x for _, x in inflight.values()]
        return (sum(x.cpus for x in used) + r.cpus <= be.capacity
                and (budget is None or sum(x.memory_bytes for x in used) + r.memory_bytes <= budget))

    def finish(h: str, result: Dict[str, Any]) -> None:
        nonlocal ran, failed
        pts = todo[h]
        with _sigint_deferred():  # the point's files and its row agree, even on Ctrl-C
            for pt in pts:
                if "metrics" not in result:
                    pt.error = f"point {pt.index} ({pt.label()}): {result['error']}"
            _write_point(out, pts[0], result)
            for pt in pts:
                if "metrics" in result:
                    pt.status, pt.metrics = "ok", result["metrics"]
                else:
                    pt.status = "failed"
            ran += 1
            failed += "metrics" not in result
        bar.update(1)
        bar.set_postfix(failed=failed, refresh=False)
        wall = f" ({result['wall_seconds']:.1f} s)" if result.get("wall_seconds") is not None else ""
        msg = f"[{ran}/{len(todo)}] {pts[0].label()}: " + (
            describe(result["metrics"]) + wall if "metrics" in result else "FAILED " + result["error"].splitlines()[0])
        if progress:
            if "metrics" not in result:
                bar.write(msg, file=sys.stderr)
        else:
            log(msg)

    clean = False
    try:
        while pending or inflight:
            # Start, in order, every pending point that fits beside the running ones (a point
            # that fits nowhere fails at once).
            for _ in range(len(pending)):
                h, pts = pending.popleft()
                r = res_of(h)
                why = _too_big(r, budget, where)
                if why is not None:
                    finish(h, {"error": why})
                elif fits(r):
                    ck = (str(out / "checkpoints" / f"{h}.ckpt"), checkpoint_every_s) if checkpoint_every_s > 0 else None
                    if ck:
                        (out / "checkpoints").mkdir(exist_ok=True)
                    handle = be.submit(pts[0].runner, json.dumps(pts[0].config), r, ck)
                    inflight[handle] = (h, r)
                    started[handle] = time.monotonic()
                else:
                    pending.append((h, pts))
            finished = be.wait(list(inflight), timeout=0.5)
            if not finished:
                bar.refresh()  # keep the elapsed time moving while long points run
            if time.monotonic() - last_print >= PROGRESS_PRINT_S:
                last_print = time.monotonic()
                for handle, (h, _) in inflight.items():
                    f = getattr(be, "progress", {}).get(handle)
                    if f:
                        first = getattr(be, "first_progress", {}).get(handle, 0.0)
                        msg = _running_text(todo[h][0].label(), f, time.monotonic() - started[handle], first)
                        if progress:
                            bar.write(msg, file=sys.stderr)
                        else:
                            log(msg)
            for handle, result in finished:
                h, _ = inflight.pop(handle)
                started.pop(handle, None)
                if result.get("interrupted"):
                    continue  # stopped before the end: not a result, runs again next time
                finish(h, result)
        clean = True
    except KeyboardInterrupt:
        clean = False
    finally:
        bar.close()
        if not clean:  # Ctrl-C (or an error here): stop the workers; finished points are written
            be.abort(list(inflight))
    be.close()
    return ran, not clean


# ---------------------------------------------------------------------------------------------
# Python API


class SweepTable(list):
    """The result table when pandas is not importable: a list of row dicts, with ``attrs``
    (like ``DataFrame.attrs``) holding the run summary."""

    def __init__(self, rows: List[Dict[str, Any]], attrs: Dict[str, Any]):
        super().__init__(rows)
        self.attrs = attrs


def sweep(base: Union[PathLike, Mapping[str, Any], None] = None, axes: Optional[Mapping[str, Sequence[Any]]] = None,
          backend: str = "local", jobs: Optional[int] = None, out: Optional[PathLike] = None,
          zip: Optional[Mapping[str, Sequence[Any]]] = None, metrics: Optional[Sequence[str]] = None,
          ray_address: Optional[str] = None, progress: Optional[bool] = None, name: str = "sweep",
          experiment: Optional[str] = None, mode: str = "quick", memory: Optional[int] = None):
    """Run a parameter sweep and return its table: one row per point with the axis values,
    ``status`` (ok / failed / not-run), ``hash`` and the chosen metrics.

    >>> t = ssdlab.sweep("tiny", {"ftl.spare_factor": [0.1, 0.2], "ftl.gc_policy": ["greedy", "fifo"]},
    ...                  out="runs/op-x-gc")                                      # doctest: +SKIP

    Args:
        base: a config dict (may name a ``preset``), a TOML config path, or a preset name; or,
            with ``experiment``, overrides laid on every point's input (or None).
        axes: dotted config key -> values; every combination is run (the grid).
        zip: dotted config key -> values of one length, varied together (crossed with the grid).
        experiment, mode: the points of ``ssdlab reproduce EXPERIMENT --MODE`` as the base,
            each crossed with the axes (which may then be empty).
        backend: ``"local"`` (a process pool of ``jobs`` workers, default all cores) or ``"ray"``.
        ray_address: with ``backend="ray"``: ``"auto"`` (default) starts a local Ray on
            127.0.0.1; ``"host:port"`` joins a running cluster.
        out: where points, results.csv and plots go; points already there are not run again.
            ``None``: a temporary directory, removed afterwards.
        metrics: dotted paths into metrics.json (default: DLWA, GC work, erases, latency, IOPS,
            or the experiment's).
        memory: bytes the points running at once may take together (local pool; default: the
            memory available).

    Returns a pandas DataFrame when pandas is importable, else a list of dicts; either way
    ``table.attrs["summary"]`` says how many points ran, were skipped or failed.
    """
    if experiment is not None:
        spec = experiment_spec(experiment, mode)
        spec.base = copy.deepcopy(dict(base or {}))
        spec.grid = _check_axes("axes", axes, zipped=False)
        spec.zip = _check_axes("zip", zip, zipped=True)
        spec.name = name if name != "sweep" else spec.name
    else:
        if base is None:
            raise SweepError("give a base (a config dict, a config file or a preset name) or an experiment")
        base_user, source = _base_from(base)
        spec = Spec(base=base_user, grid=_check_axes("axes", axes, zipped=False),
                    zip=_check_axes("zip", zip, zipped=True), source=source, name=name)
        if not spec.axes:
            raise SweepError("nothing to sweep: give axes (a grid) and/or zip")
    if set(spec.grid) & set(spec.zip):
        raise SweepError(f"{sorted(set(spec.grid) & set(spec.zip))[0]} is both in axes and zip")
    if metrics is not None:
        spec.metrics = _check_metrics("metrics", metrics)
        spec.metrics_chosen = True
    _count_points(spec, "sweep")
    if backend == "ray" and ray_address is None:
        ray_address = "auto"
    if out is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ssdlab-sweep-") as tmp:
            rows, summary = run_sweep(spec, tmp, backend, jobs, ray_address, progress, memory_bytes=memory)
    else:
        rows, summary = run_sweep(spec, out, backend, jobs, ray_address, progress, memory_bytes=memory)
    if summary["interrupted"]:
        raise KeyboardInterrupt
    try:
        import pandas as pd
    except ImportError:
        return SweepTable(rows, {"summary": summary})
    df = pd.DataFrame(rows, columns=_columns(spec))
    df.attrs["summary"] = summary
    return df
