"""uio-kv's runner on the sweep engine: one latency plan per point, in simulated time (the
native model) or, with ``wall``, in wall-clock time through device processes."""

from __future__ import annotations

import time
from typing import Any, Dict

from ... import _native
from ...config import merge
from ...runners import PROCESS_BYTES, Resources, Result, Runner
from .api import defaults, wall_latency


def _resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    if not set(task) <= {"plan", "wall"} or "plan" not in task:
        raise _native.ConfigError(f"uio-kv run: expected the keys plan and wall, got {sorted(task)}")
    return {"plan": _native.uio_resolve(merge(defaults(), task["plan"])), "wall": bool(task.get("wall", False))}


def _resources(task: Dict[str, Any]) -> Resources:
    """What the devices' flash holds (each record once, plus what GC has not erased yet: at
    most the flash, bounded here by twice what is written) and the device models."""
    p = task["plan"]
    sweep = 2 * p["ops"] * (max(p["value_bytes"]) + p["key_bytes"] + 10)
    mix = p["mix_ops"] * (sum(p["value_bytes"]) // len(p["value_bytes"]) + p["key_bytes"] + 10)
    devices = max([p["devices"], *p["mix_devices"]])
    if task.get("wall"):
        # Two systems of device processes (and host daemons), each holding what it stores.
        return Resources(memory_bytes=PROCESS_BYTES * (1 + 3 * p["devices"]) + 2 * sweep)
    return Resources(memory_bytes=PROCESS_BYTES + 2 * (sweep + mix) + devices * (4 << 20))


def _run(task: Dict[str, Any]) -> Result:
    t0 = time.monotonic()
    r = wall_latency(task["plan"]) if task.get("wall") else _native.uio_latency(task["plan"], False)
    r["wall_s"] = time.monotonic() - t0
    return Result(metrics=r)


RUN = Runner("ssdlab.studies.uio_kv.runner:RUN", _resolve, _resources, _run)
