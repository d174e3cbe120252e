"""fdp-cache from Python: one cache run (:func:`run_cache`), a cache spec file read
(:func:`load_cache_spec`), and the cache behind the memcached text protocol (:func:`serve`).

A run is ``ssdlab._native.cache_run`` (crates/cache) on a device config and a run spec; the
server is crates/memcached over the data-backed engines of crates/cache.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

from ... import _native
from ...config import merge, read_toml
from ...runners import CHECKPOINT_EVERY_S
from ...serving import EVICT_IDLE_AFTER, foreground


def run_cache(device: Dict[str, Any], spec: Dict[str, Any], trace: Optional[str] = None,
              checkpoint: Optional[str] = None, checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> Tuple[Dict[str, Any], str, float]:
    """Run one cache experiment.

    ``device``: a device config (``{"preset": "fdp-ssd", "ftl": {...}, ...}``); ``spec``: a run
    spec overriding ``_native.cache_defaults()`` (keys ``cache``, ``workload``,
    ``stop_device_writes``, ``stop_requests``, ``warmup_fraction``, ``prefill_loc``,
    ``series_points``, ``carbon``, ``device_trace``: a file to record every device command to,
    as an MSR Cambridge trace); ``trace``: an ssdlab cache-trace CSV to replay instead of the
    generator. ``checkpoint``: a file where the run saves its whole state every
    ``checkpoint_every_s`` seconds and from which it starts when the file is there (a killed
    run goes on from its latest save with the same results; not with ``trace``). Returns
    (summary, time-series CSV text, wall seconds).
    """
    summary, series, wall, _ = run_cache_noted(device, spec, trace, checkpoint, checkpoint_every_s)
    return summary, series, wall


def run_cache_noted(device: Dict[str, Any], spec: Dict[str, Any], trace: Optional[str] = None,
                    checkpoint: Optional[str] = None,
                    checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> Tuple[Dict[str, Any], str, float, str]:
    """:func:`run_cache` with the checkpoint's note (how the run resumed or saved; "" without
    one) as a fourth item. Raises KeyboardInterrupt when the run was interrupted."""
    full = merge(_native.cache_defaults(), spec)
    summary, series, wall, interrupted, note = _native.cache_run(device, full, trace, checkpoint=checkpoint,
                                                                 checkpoint_every_s=checkpoint_every_s)
    if interrupted:
        raise KeyboardInterrupt
    return summary, series, wall, note


def load_cache_spec(path: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(device config, run spec) from a cache spec file: ``[device]``, ``[cache]``,
    ``[workload]`` (``preset = NAME`` then overrides) and the run keys."""
    d = read_toml(path, "cache spec")
    device = d.pop("device", {"preset": "fdp-ssd"})
    w = d.get("workload")
    if isinstance(w, dict) and "preset" in w:
        w = dict(w)
        base = _native.cache_workload(w.pop("preset"))
        d["workload"] = {**base, **w}
    return device, d


def mean_value_bytes(workload: Dict[str, Any]) -> float:
    """The mean value size of a workload preset (log-uniform inside each of its value bins)."""
    tw = sum(b["weight"] for b in workload["value_bins"])
    tot = 0.0
    for b in workload["value_bins"]:
        lo, hi = b["min"], b["max"]
        mean = (hi - lo) / math.log(hi / lo) if hi > lo else lo
        tot += b["weight"] / tw * mean
    return tot


def mean_item_bytes(workload: Dict[str, Any]) -> float:
    """The mean key + value size of a workload preset (keys uniform in their range)."""
    return mean_value_bytes(workload) + (workload["key_bytes_min"] + workload["key_bytes_max"]) / 2


def serve(device: Dict[str, Any], cache: Optional[Dict[str, Any]] = None, listen: str = "127.0.0.1:11211",
          max_connections: int = 64, max_value_bytes: int = 0, quiet: bool = False, idle_timeout_s: float = 0.0,
          evict_idle_after_s: float = EVICT_IDLE_AFTER, allow_remote: bool = False) -> Dict[str, Any]:
    """Serve the cache ``cache`` (the ``[cache]`` keys of a cache spec) on the device ``device``
    (a device config: preset + tables; its storage is switched to data-backed) behind the
    memcached text protocol until SIGINT or SIGTERM (`ssdlab cache serve`). ``max_value_bytes``
    0 means 1 MiB, or less if a LOC region holds less. Returns the final stats (memcached's
    ``stats`` fields and ssdlab's: DLWA, hit ratios, ALWA, ...). ``allow_remote`` permits a
    non-loopback ``listen`` (memcached's protocol has no authentication: anyone who reaches the
    port reads and writes the cache)."""
    opts = {"listen": listen, "max_connections": max_connections, "max_value_bytes": max_value_bytes, "quiet": quiet,
            "idle_timeout_s": idle_timeout_s, "evict_idle_after_s": evict_idle_after_s, "allow_remote": allow_remote}
    full_cache = {**_native.cache_defaults()["cache"], **(cache or {})}
    return foreground(_native.cache_serve, device, full_cache, opts)


__all__ = ["run_cache", "run_cache_noted", "load_cache_spec", "mean_value_bytes", "serve"]
