"""Running a sweep: `run_sweep` (resume, dispatch to a backend, then the tables and plots),
the dispatch loop (start what fits, write what finishes, print how far long points are, stop
cleanly on Ctrl-C), and `sweep()`, the Python API."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from ..config import PathLike
from ..runners import CHECKPOINT_EVERY_S, Resources, available_memory_bytes
from ..units import human_bytes
from .local import _LocalBackend
from .plots import _plot, _plot_name
from .points import Point, expand
from .ray import _RayBackend
from .spec import Spec, SweepError, _base_from, _check_axes, _check_metrics, _count_points, experiment_spec
from .store import _describe, _load_done, _point_dir, _write_point
from .tables import SweepTable, _columns, _rows, _write_tables

# How often the parent prints how far each long-running point is.
PROGRESS_PRINT_S = 300.0


class Backend(Protocol):
    """Where points run (local.py, ray.py): ``submit`` starts one and returns its handle,
    ``wait`` returns the (handle, result) of those finished within ``timeout`` seconds.
    Optional: ``progress`` and ``first_progress`` (handle -> fraction its point reported, the
    latest and the first), ``node_cpus`` (the CPUs one point may have at most)."""

    name: str
    capacity: int

    def submit(self, runner: str, task_json: str, res: Resources,
               checkpoint: Optional[Tuple[str, float]] = None) -> Any: ...

    def wait(self, handles: List[Any], timeout: float) -> List[Tuple[Any, Dict[str, Any]]]: ...

    def abort(self, handles: List[Any]) -> None: ...

    def close(self) -> None: ...


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
def _stops_deferred() -> Iterator[None]:
    """Hold a Ctrl-C or a SIGTERM until the block is done, then act on it as its handler
    would (the first one caught; the block's work is then whole: a point's files and its row
    agree, a worker being started is started and known, so it is stopped with the others)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: List[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        handler = previous[signal.Signals(caught[0])]
        if callable(handler):
            handler(caught[0], None)  # Python's Ctrl-C handler raises KeyboardInterrupt; the CLI's SIGTERM one too
        elif handler == signal.SIG_DFL and caught[0] == signal.SIGINT:
            raise KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(caught[0])  # ends the process, as it would have


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
    be: Backend
    budget: Optional[int]
    if backend == "ray":
        ray_be = _RayBackend(ray_address or "auto", jobs)
        be, budget, where = ray_be, ray_be.node_memory_bytes, "the largest Ray node"
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
        with _stops_deferred():  # the point's files and its row agree, even on Ctrl-C
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
                    # A stop while a worker starts would leave it half-started (reading its
                    # task from a closed pipe, with a traceback) and unknown to the abort.
                    with _stops_deferred():
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
        if base is not None and not isinstance(base, Mapping):
            raise SweepError("with an experiment, base is a dict of overrides laid on every point's input "
                             f"(the experiment is the base), not {base!r}")
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
