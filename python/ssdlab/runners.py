"""Point runners: what one point of a sweep or a reproduction runs, on a worker process or a
Ray node.

A runner has three parts:

- ``resolve(user) -> task``: the point's complete input from what the sweep or experiment
  gave (the core fills defaults and checks it here, in the driver, before anything runs);
  raises ``ssdlab.SsdlabError`` (or ``ValueError``) for a bad point. The task is JSON data: it
  is hashed (the point's directory name), written to the point's ``config.json``, and sent to
  the worker.
- ``resources(task) -> Resources``: peak memory and CPUs of running it, known up front, so the
  scheduler starts only the points that fit (Ray gets them as task resources).
- ``run(task) -> Result``: runs in the worker. Returns the point's ``metrics`` (its
  ``metrics.json``: what tables and reports read) and ``files`` (name -> bytes or text, written
  beside it); raises for a failure (the point is recorded as failed with the message). A long
  run calls ``report_progress(fraction)`` as it goes (the cache runner hands it to the core),
  and the sweep prints how far each running point is every few minutes.

Runners are named ``"module:attribute"`` inside the ssdlab package (``"ssdlab.runners:DEVICE"``);
a worker imports the module by that name, so experiments added later need no registration
here. docs/sweeps.md ("Reproductions on the sweep engine") shows how to write one.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

from . import _native
from .units import parse_size

# What a worker process costs beyond the simulation: the interpreter, ssdlab, numpy.
PROCESS_BYTES = 64 << 20

# The environment of every point's worker: one thread for numpy's BLAS (and OpenMP). A point
# is one process on one of the sweep's CPUs; OpenBLAS's pool would otherwise start a thread per
# core in each worker, and its threads spin after every BLAS call, taking CPU from the points
# beside it (measured on the 2-core machine: 17% of a dpuswap point's CPU time, 0.1 s of spin
# per worker start). A value the user set is kept.
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def worker_env() -> Dict[str, str]:
    """WORKER_ENV without the variables already set in this process's environment."""
    return {k: v for k, v in WORKER_ENV.items() if k not in os.environ}


@dataclass(frozen=True)
class Resources:
    memory_bytes: int
    cpus: int = 1


@dataclass
class Result:
    """What a runner returns: the point's metrics and the files to keep beside them."""

    metrics: Dict[str, Any]
    files: Dict[str, Union[str, bytes]] = field(default_factory=dict)
    interrupted: bool = False


@dataclass(frozen=True)
class Runner:
    name: str
    resolve: Callable[[Dict[str, Any]], Dict[str, Any]]
    resources: Callable[[Dict[str, Any]], Resources]
    run: Callable[[Dict[str, Any]], Result]
    # Tidies what a worker killed in one of this runner's points left outside its process
    # (mounts, files in /dev/shm); the local pool calls it once such a worker is gone.
    reap: Optional[Callable[[], None]] = None


# Where the point running in this process reports its progress (the local pool's worker sets
# it; on Ray nobody listens).
_progress_sink: Optional[Callable[[float], None]] = None

# Where the point running in this process may save itself, and how often (file, seconds): the
# local pool's worker sets it from `--checkpoint-every`; None on Ray and with 0.
_checkpoint: Optional[Tuple[str, float]] = None

# How often a long run that can save its state does so by default (`--checkpoint-every`).
CHECKPOINT_EVERY_S = 1800.0


def report_progress(fraction: float) -> None:
    """How far the point running in this process is (0..1); a no-op where nobody listens."""
    if _progress_sink is not None:
        _progress_sink(fraction)


def point_checkpoint() -> Optional[Tuple[str, float]]:
    """(file, seconds): where and how often the point running in this process may save its
    state so that a killed run goes on from there (long runners that can: fdp-cache's), or
    None."""
    return _checkpoint


def get_runner(name: str) -> Runner:
    """The runner called ``name`` ("module:attribute" in the ssdlab package)."""
    module, _, attr = name.partition(":")
    if not (module == "ssdlab" or module.startswith("ssdlab.")) or not attr:
        raise ValueError(f"runner {name!r}: expected \"ssdlab.<module>:<name>\"")
    try:
        r = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"runner {name!r} not found: {e}") from None
    if not isinstance(r, Runner):
        raise ValueError(f"runner {name!r} is not a ssdlab.runners.Runner")
    return r


def run_task(runner: str, task_json: str) -> Dict[str, Any]:
    """Run one point in this (worker) process. Returns {"metrics", "files", "wall_seconds",
    "peak_rss_bytes"}, {"interrupted": True}, or {"error": message}; never raises for a
    failing point."""
    started = time.monotonic()
    try:
        res = get_runner(runner).run(json.loads(task_json))
    except _native.SsdlabError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # a bug, or an error the runner raised: keep the traceback in error.txt
        brief = f"{type(e).__name__}: {e}"
        return {"error": brief if isinstance(e, (ValueError, OSError)) else f"{brief}\n\n{traceback.format_exc()}"}
    except BaseException as e:  # pyo3's PanicException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return {"error": f"{type(e).__name__} (the core panicked): {e}"}
    if res.interrupted:
        return {"interrupted": True}
    # A fresh worker runs each point (see the backends), so the process's peak is the point's.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"metrics": res.metrics, "files": res.files, "wall_seconds": round(time.monotonic() - started, 3),
            "peak_rss_bytes": rss}


# ---------------------------------------------------------------------------------------------
# The device runner: a config run as `ssdlab run` runs it (what plain sweeps run).


def _device_resolve(user: Dict[str, Any]) -> Dict[str, Any]:
    from .config import resolve

    return resolve(config=user)


def _device_resources(cfg: Mapping[str, Any]) -> Resources:
    s = _native.config_sizing(dict(cfg))
    return Resources(memory_bytes=int(s["memory_bytes"] + s["data_bytes_max"]) + PROCESS_BYTES)


def _device_phases(cfg: Mapping[str, Any]) -> Dict[str, float]:
    """How much of a device run each phase is, in device writes (the run's own stop volume, or
    one device write when it stops otherwise), so the phases' fractions add up to one."""
    pre, w = cfg.get("precondition", {}), cfg.get("workload", {})
    return {"fill": 1.0 if pre.get("sequential_fill") else 0.0,
            "precondition": float(pre.get("random_device_writes") or 0.0),
            "run": float(w.get("stop_device_writes") or 0.0) or 1.0}


def _device_run(cfg: Dict[str, Any]) -> Result:
    from .device import Device

    phases = _device_phases(cfg)
    total, start, done = sum(phases.values()), {}, 0.0
    for name, size in phases.items():  # each phase's start, in device writes
        start[name], done = done, done + size

    def progress(phase: str, fraction: float) -> None:
        if phase in phases:
            report_progress((start[phase] + fraction * phases[phase]) / total)

    rep = Device(config=cfg).run(on_progress=progress)
    return Result(metrics=rep.metrics, files={"timeseries.csv": rep.series_csv}, interrupted=rep.interrupted)


DEVICE = Runner("ssdlab.runners:DEVICE", _device_resolve, _device_resources, _device_run)


def available_memory_bytes() -> Optional[int]:
    """Memory available to new processes, if known: the core's figure (MemAvailable, the room
    under a cgroup memory limit, SSDLAB_MEMORY_AVAILABLE; the least of them)."""
    avail = _native.available_memory()
    return None if avail is None else avail[0]


def parse_bytes(text: str, where: str = "--memory") -> int:
    """"20G", "512M", "1.5GiB", "1000000" -> bytes (more than 0)."""
    return parse_size(text, where, positive=True)
