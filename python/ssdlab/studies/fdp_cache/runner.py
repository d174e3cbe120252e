"""fdp-cache's runner on the sweep engine: :data:`CACHE`, one cache run. Its input is the run
spec of `ssdlab cache run` (``device`` plus the RunSpec keys: cache, workload, stop_*, ...)
and optionally ``seed``, which seeds the device, the cache and the request stream together."""

from __future__ import annotations

from typing import Any, Dict, Tuple, Union

from ... import _native
from ...config import merge, resolve
from ...runners import PROCESS_BYTES, Resources, Result, Runner, point_checkpoint, report_progress


def _resolve(user: Dict[str, Any]) -> Dict[str, Any]:
    user = dict(user)
    device_user = dict(user.pop("device", {"preset": "fdp-ssd"}))
    # One `seed` (a sweep axis) seeds the whole run: the device, the cache and the request stream.
    if "seed" in user:
        seed = user.pop("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise _native.ConfigError(f"cache run: seed must be a non-negative integer, got {seed!r}")
        device_user["seed"] = seed
        user["cache"] = dict(user.get("cache", {}), seed=seed)
        user["workload"] = dict(user.get("workload", {}), seed=seed)
    if user.get("device_trace"):
        raise _native.ConfigError("cache run: device_trace records one run's device commands: use `ssdlab cache run "
                                  "SPEC --out DIR` (in a sweep or reproduction every point would write the one file)")
    device = resolve(config=device_user, origin="[device]")
    unknown = sorted(set(user) - set(_native.cache_defaults()))
    if unknown:
        raise _native.ConfigError(f"cache run: unknown key {unknown[0]!r}; valid: device, seed, "
                                  f"{', '.join(sorted(_native.cache_defaults()))}")
    return {"device": device, **merge(_native.cache_defaults(), user)}


def _split(task: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    spec = dict(task)
    return spec.pop("device"), spec


def _resources(task: Dict[str, Any]) -> Resources:
    device, spec = _split(task)
    return Resources(int(_native.cache_sizing(device, spec)["memory_bytes"]) + PROCESS_BYTES)


def _run(task: Dict[str, Any]) -> Result:
    device, spec = _split(task)
    ck = point_checkpoint()
    summary, series, _wall, interrupted, note = _native.cache_run(
        device, spec, progress=report_progress, checkpoint=ck[0] if ck else None,
        checkpoint_every_s=ck[1] if ck else 0.0)
    files: Dict[str, Union[str, bytes]] = {"timeseries.csv": series}
    if note:  # resumed from a save, or saved along the way: how this run went, beside its results
        files["checkpoint.txt"] = note + "\n"
    return Result(metrics=summary, files=files, interrupted=interrupted)


CACHE = Runner("ssdlab.studies.fdp_cache.runner:CACHE", _resolve, _resources, _run)
