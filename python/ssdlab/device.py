"""Devices and run reports: the Python face of the ssdlab core.

``Device`` holds what every personality shares (host I/O in bytes, runs, replays, snapshots,
counters); the commands of one personality live on a sub-object, in the manner of Polars'
``df.str`` / ``df.dt``::

    dev.fdp     FDP placement identifiers, log pages, Reclaim Unit Handle Update (conventional)
    dev.zns     zone info, Zone Append, Zone Management Send/Receive, failure injection (zns)
    dev.ocssd   geometry, chunk info, vector read/write/reset, chunk copy, wear (ocssd)

Asking for the sub-object of another personality raises ``NvmeError`` naming the device's
personality. The sub-objects are ``ssdlab._native`` classes (``ssdlab.Fdp``, ``ssdlab.Zns``,
``ssdlab.Ocssd``), documented in their docstrings and python/ssdlab/_native.pyi.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import _native
from .config import ConfigSource, PathLike, resolve
from .workload import Mix, Workload

__all__ = ["Device", "Report", "Workload", "Mix"]


class Report:
    """The measurements of one run (the ``metrics.json`` schema).

    Every metric is available as ``report["name"]`` and, for the common ones, as an
    attribute (``report.dlwa``). ``report.series`` holds the time series as numpy arrays.
    """

    def __init__(self, metrics: dict[str, Any], series_csv: str, interrupted: bool = False):
        self.metrics = metrics
        self.series_csv = series_csv
        self.interrupted = interrupted
        data = np.genfromtxt(io.StringIO(series_csv), delimiter=",", names=True, dtype=None, encoding="utf-8")
        data = np.atleast_1d(data)
        self.series: dict[str, np.ndarray] = {name: np.asarray(data[name]) for name in data.dtype.names or ()}

    def __getitem__(self, key: str) -> Any:
        return self.metrics[key]

    def __getattr__(self, key: str) -> Any:
        m = self.__dict__.get("metrics", {})
        if key in m:
            return m[key]
        raise AttributeError(key)

    @property
    def latency(self) -> dict[str, dict[str, float]]:
        """Latency summaries per operation (ns): count, p50, p90, p99, p999, p9999, max, mean."""
        return self.metrics["latency_ns"]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.metrics)

    def save(self, out_dir: PathLike) -> Path:
        """Write ``metrics.json`` and ``timeseries.csv`` into ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(self.metrics, indent=2) + "\n")
        (out / "timeseries.csv").write_text(self.series_csv)
        return out

    def __repr__(self) -> str:
        return (f"Report(dlwa={self.metrics.get('dlwa')}, host_write_bytes={self.metrics.get('host_write_bytes')}, "
                f"gc_events={self.metrics.get('gc_events')}, interrupted={self.interrupted})")


def _report(out: tuple[dict[str, Any], str, bool]) -> Report:
    metrics, csv, interrupted = out
    return Report(metrics, csv, interrupted)


FDP_LOGS = ("configurations", "usage", "statistics", "events", "ruh_status")


def _deprecated(old: str, new: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``Device.old``: a thin alias of ``dev.new`` that warns (kept for one release)."""

    def alias(self: Device, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"Device.{old} is deprecated and goes in the next release; use dev.{new}",
                      DeprecationWarning, stacklevel=2)
        return call(self, *args, **kwargs)

    alias.__name__ = old
    alias.__qualname__ = f"Device.{old}"
    alias.__doc__ = f"Deprecated: use ``dev.{new}``."
    return alias


def _fdp_log(dev: Device, which: str) -> Any:
    if which not in FDP_LOGS:
        raise ValueError(f"unknown FDP log {which!r}; valid: {', '.join(FDP_LOGS)}")
    return getattr(dev.fdp, which)()


class Device:
    """An emulated SSD.

    >>> dev = Device("tiny", timing={"enabled": False})
    >>> rep = dev.run(Workload(pattern="uniform", stop_device_writes=0.5))
    >>> rep.dlwa >= 1.0
    True

    Args:
        preset: preset to start from (see ``ssdlab.presets()``).
        config: a TOML file path or a dict in the config's layout.
        **sections: overrides per table, e.g. ``ftl={"gc_policy": "fifo"}``, ``seed=7``.
    """

    _dev: _native.NativeDevice

    def __init__(self, preset: str | None = None, config: ConfigSource = None, **sections: Any):
        self._dev = _native.NativeDevice(resolve(preset, config, **sections))

    @classmethod
    def _wrap(cls, native: _native.NativeDevice) -> Device:
        d = cls.__new__(cls)
        d._dev = native
        return d

    @property
    def config(self) -> dict[str, Any]:
        """The complete configuration in force."""
        return self._dev.config

    @property
    def personality(self) -> str:
        """``"conventional"``, ``"zns"`` or ``"ocssd"``."""
        return self._dev.personality

    @property
    def logical_bytes(self) -> int:
        """Host-visible capacity in bytes."""
        return self._dev.logical_bytes

    @property
    def now_ns(self) -> int:
        """Simulated time reached so far."""
        return self._dev.now_ns

    @property
    def counters(self) -> dict[str, int]:
        """Lifetime counters (host and NAND bytes, erases, GC work)."""
        return self._dev.counters

    @property
    def fdp(self) -> _native.Fdp:
        """FDP commands and log pages (conventional devices; with FDP off they fail with the
        NVMe status FDP Disabled): ``placement_id``, ``configurations``, ``usage``,
        ``statistics``, ``events``, ``ruh_status``, ``ruh_update``."""
        return self._dev.fdp

    @property
    def zns(self) -> _native.Zns:
        """Zoned namespace commands (personality ``zns``): ``info``, ``append``, ``action``,
        ``report``, ``inject_state``."""
        return self._dev.zns

    @property
    def ocssd(self) -> _native.Ocssd:
        """Open-channel commands (personality ``ocssd``): ``geometry``, ``lba``, ``chunk_info``,
        ``vector_write``, ``vector_read``, ``vector_reset``, ``copy_chunk``, ``wear``."""
        return self._dev.ocssd

    def precondition(self, progress: bool = False) -> None:
        """Bring the device to the state its ``[precondition]`` table asks for (not measured)."""
        if self._dev.precondition(progress):
            raise KeyboardInterrupt

    def run(self, workload: Workload | Mix | None = None, progress: bool = False,
            on_progress: Callable[[str, float], None] | None = None) -> Report:
        """Run a workload and return its report.

        With no workload: precondition, then run the config's own ``[workload]``. With a
        workload: run it on the device as it is (call :meth:`precondition` first if wanted).
        The GIL is released while the simulation runs; Ctrl-C stops it and the report says
        ``interrupted``. ``on_progress(phase, fraction)``, if given, is called as each phase
        ("fill", "precondition", "run") advances (not for a Mix); if it raises, the run stops
        as if interrupted.
        """
        if isinstance(workload, Mix):
            parts, stop = workload.tables()
            return _report(self._dev.run_mix(parts, stop, progress))
        if workload is not None and not isinstance(workload, Workload):
            raise TypeError(f"run() takes a Workload or a Mix, got {type(workload).__name__}")
        return _report(self._dev.run(None if workload is None else workload.to_dict(), progress, on_progress))

    def replay(self, trace: PathLike, format: str, queue_depth: int | None = None, max_ops: int = 0,
               progress: bool = False, blkparse_action: str = "Q") -> Report:
        """Replay a block trace (formats: ``ssdlab.trace_formats()``).

        ``queue_depth=None`` honours the trace's timestamps (open loop; needs timing);
        a number ignores them and keeps that many commands in flight.
        """
        return _report(self._dev.replay(os.fspath(trace), format, queue_depth, max_ops, progress, blkparse_action))

    # Host I/O in bytes (offsets and lengths are multiples of the sector size).
    def write(self, offset: int, data: bytes, fua: bool = False, placement: int | None = None) -> int:
        """Write ``data``; returns the simulated completion time (ns).

        ``placement`` is an FDP placement identifier (see ``dev.fdp.placement_id``); it is
        ignored when FDP is off and rejected with :class:`ssdlab.NvmeError` when it names no
        handle.
        """
        return self._dev.write(offset, data, fua, placement)

    def read(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes (never-written sectors read as zeros)."""
        return bytes(self._dev.read(offset, length))

    def trim(self, offset: int, length: int) -> int:
        """Deallocate a range; returns the completion time (ns)."""
        return self._dev.trim(offset, length)

    def flush(self) -> int:
        """Program everything buffered; returns the completion time (ns)."""
        return self._dev.flush()

    def snapshot(self, path: PathLike) -> None:
        """Save the whole device state, so a preconditioned device can be reused."""
        self._dev.snapshot(os.fspath(path))

    @classmethod
    def restore(cls, path: PathLike) -> Device:
        """Load a device saved by :meth:`snapshot`."""
        return cls._wrap(_native.NativeDevice.restore(os.fspath(path)))

    def check_invariants(self) -> None:
        """Assert every FTL invariant (slow; for tests)."""
        self._dev.check_invariants()

    def verify_rebuild(self) -> bool:
        """Whether the mapping rebuilt from the media's OOB alone equals the live mapping."""
        return self._dev.verify_rebuild()

    def __repr__(self) -> str:
        c = self.config
        return (f"Device(preset={c['preset']!r}, personality={c['personality']!r}, logical_bytes={self.logical_bytes}, "
                f"storage={c['storage']!r})")

    # Deprecated aliases of the personality commands (one release; then removed).
    placement_id = _deprecated("placement_id", "fdp.placement_id", lambda d, *a, **k: d.fdp.placement_id(*a, **k))
    fdp_log = _deprecated("fdp_log", "fdp.<log>() (configurations, usage, statistics, events, ruh_status)", _fdp_log)
    ruh_update = _deprecated("ruh_update", "fdp.ruh_update",
                             lambda d, placement_ids: d.fdp.ruh_update(list(placement_ids)))
    zone_info = _deprecated("zone_info", "zns.info", lambda d: d.zns.info())
    zone_append = _deprecated("zone_append", "zns.append", lambda d, *a, **k: d.zns.append(*a, **k))
    zone_action = _deprecated("zone_action", "zns.action", lambda d, *a, **k: d.zns.action(*a, **k))
    zone_report = _deprecated("zone_report", "zns.report", lambda d, *a, **k: d.zns.report(*a, **k))
    inject_zone_state = _deprecated("inject_zone_state", "zns.inject_state", lambda d, zone, state: d.zns.inject_state(zone, state))
    oc_geometry = _deprecated("oc_geometry", "ocssd.geometry", lambda d: d.ocssd.geometry())
    oc_lba = _deprecated("oc_lba", "ocssd.lba", lambda d, *a, **k: d.ocssd.lba(*a, **k))
    oc_chunk_info = _deprecated("oc_chunk_info", "ocssd.chunk_info", lambda d, *a, **k: d.ocssd.chunk_info(*a, **k))
    oc_vector_write = _deprecated("oc_vector_write", "ocssd.vector_write", lambda d, lbas, data: d.ocssd.vector_write(list(lbas), data))
    oc_vector_read = _deprecated("oc_vector_read", "ocssd.vector_read", lambda d, lbas: d.ocssd.vector_read(list(lbas)))
    oc_vector_reset = _deprecated("oc_vector_reset", "ocssd.vector_reset", lambda d, chunk_lbas: d.ocssd.vector_reset(list(chunk_lbas)))
    oc_copy_chunk = _deprecated("oc_copy_chunk", "ocssd.copy_chunk", lambda d, *a, **k: d.ocssd.copy_chunk(*a, **k))
    oc_wear = _deprecated("oc_wear", "ocssd.wear", lambda d: d.ocssd.wear())
