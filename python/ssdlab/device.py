"""Devices, workloads and run reports: the Python face of the ssdlab core."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _native

PathLike = Union[str, "os.PathLike[str]"]

SECTIONS = ("geometry", "timing", "media", "ftl", "fdp", "zns", "workload", "precondition", "metrics")


def _merge(base: Dict[str, Any], over: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_toml(path: Path) -> Dict[str, Any]:
    from .args import read_text

    text = read_text(path, "a TOML device config")
    # Validate with the core (file/line/key in errors), then read back the resolved config.
    return json.loads(_native.config_from_toml(text, str(path)))


def resolve_config(preset: Optional[str] = None, config: Union[None, PathLike, Mapping[str, Any]] = None,
                   **sections: Mapping[str, Any]) -> Dict[str, Any]:
    """Build a complete, validated config: a preset, then a file or dict, then section overrides.

    >>> cfg = resolve_config("tiny", ftl={"gc_policy": "fifo"})
    >>> cfg["ftl"]["gc_policy"]
    'fifo'
    """
    user: Dict[str, Any] = {}
    if config is not None:
        if isinstance(config, Mapping):
            user = dict(config)
        else:
            user = _load_toml(Path(config))
    if preset is not None:
        user = {**user, "preset": preset}
    for name, values in sections.items():
        if name in ("seed", "storage", "personality"):
            user[name] = values
            continue
        if name not in SECTIONS:
            raise TypeError(f"unknown config section {name!r}; valid: seed, storage, personality, {', '.join(SECTIONS)}")
        user = _merge(user, {name: dict(values)})
    return json.loads(_native.config_resolve(json.dumps(user)))


@dataclass
class Workload:
    """A synthetic workload (the ``[workload]`` table of a config).

    ``block_bytes`` may be one size or a list (with ``block_weights``). Stop after
    ``stop_device_writes`` times the logical capacity, ``stop_ops`` commands,
    ``stop_host_write_bytes`` or ``stop_sim_ns`` (whichever comes first; 0 = no limit).
    """

    pattern: str = "uniform"
    zipf_theta: float = 0.99
    hot_space: float = 0.2
    hot_writes: float = 0.8
    read_fraction: float = 0.0
    trim_fraction: float = 0.0
    block_bytes: Union[int, Sequence[int]] = 4096
    block_weights: Optional[Sequence[float]] = None
    offset: float = 0.0
    span: float = 1.0
    placement: int = -1
    queue_depth: int = 32
    rate_iops: float = 0.0
    arrival: str = "poisson"
    stop_ops: int = 0
    stop_host_write_bytes: int = 0
    stop_sim_ns: int = 0
    stop_device_writes: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        sizes = [d["block_bytes"]] if isinstance(d["block_bytes"], int) else list(d["block_bytes"])
        d["block_bytes"] = sizes
        d["block_weights"] = list(d["block_weights"]) if d["block_weights"] is not None else [1.0] * len(sizes)
        if not any((d["stop_ops"], d["stop_host_write_bytes"], d["stop_sim_ns"], d["stop_device_writes"])):
            d["stop_device_writes"] = 1.0
        return d


@dataclass
class Mix:
    """Several workloads interleaved by weight (per command), e.g. a sequential stream on one
    FDP placement handle and random overwrites on another::

        Mix([(Workload(pattern="sequential", span=0.5, block_bytes=131072, placement=0), 1),
             (Workload(pattern="uniform", offset=0.5, span=0.4, placement=1), 32)],
            stop_device_writes=2.0)

    Stop conditions and the queue depth (or rate) come from this object, not the parts.
    """

    parts: Sequence[Any]
    stop_device_writes: float = 0.0
    stop_ops: int = 0
    stop_host_write_bytes: int = 0
    stop_sim_ns: int = 0
    queue_depth: int = 32
    rate_iops: float = 0.0
    arrival: str = "poisson"

    def _json(self):
        parts = [[w.to_dict(), float(weight)] for w, weight in self.parts]
        stop = Workload(stop_device_writes=self.stop_device_writes, stop_ops=self.stop_ops,
                        stop_host_write_bytes=self.stop_host_write_bytes, stop_sim_ns=self.stop_sim_ns,
                        queue_depth=self.queue_depth, rate_iops=self.rate_iops, arrival=self.arrival).to_dict()
        return json.dumps(parts), json.dumps(stop)


class Report:
    """The measurements of one run (the ``metrics.json`` schema).

    Every metric is available as ``report["name"]`` and, for the common ones, as an
    attribute (``report.dlwa``). ``report.series`` holds the time series as numpy arrays.
    """

    def __init__(self, metrics: Dict[str, Any], series_csv: str, interrupted: bool = False):
        self.metrics = metrics
        self.series_csv = series_csv
        self.interrupted = interrupted
        data = np.genfromtxt(io.StringIO(series_csv), delimiter=",", names=True, dtype=None, encoding=None)
        data = np.atleast_1d(data)
        self.series: Dict[str, np.ndarray] = {name: np.asarray(data[name]) for name in data.dtype.names}

    def __getitem__(self, key: str) -> Any:
        return self.metrics[key]

    def __getattr__(self, key: str) -> Any:
        m = self.__dict__.get("metrics", {})
        if key in m:
            return m[key]
        raise AttributeError(key)

    @property
    def latency(self) -> Dict[str, Dict[str, float]]:
        """Latency summaries per operation (ns): count, p50, p90, p99, p999, p9999, max, mean."""
        return self.metrics["latency_ns"]

    def to_dict(self) -> Dict[str, Any]:
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

    def __init__(self, preset: Optional[str] = None, config: Union[None, PathLike, Mapping[str, Any]] = None,
                 **sections: Any):
        cfg = resolve_config(preset, config, **sections)
        self._dev = _native.NativeDevice(json.dumps(cfg))

    @classmethod
    def _wrap(cls, native: Any) -> "Device":
        d = cls.__new__(cls)
        d._dev = native
        return d

    @property
    def config(self) -> Dict[str, Any]:
        """The complete configuration in force."""
        return json.loads(self._dev.config_json())

    @property
    def logical_bytes(self) -> int:
        return self._dev.logical_bytes

    @property
    def now_ns(self) -> int:
        """Simulated time reached so far."""
        return self._dev.now_ns

    @property
    def counters(self) -> Dict[str, int]:
        """Lifetime counters (host and NAND bytes, erases, GC work)."""
        return json.loads(self._dev.counters_json())

    def precondition(self, progress: bool = False) -> None:
        """Bring the device to the state its ``[precondition]`` table asks for (not measured)."""
        if self._dev.precondition(progress):
            raise KeyboardInterrupt

    def run(self, workload: Union[None, Workload, "Mix"] = None, progress: bool = False) -> Report:
        """Run a workload and return its report.

        With no workload: precondition, then run the config's own ``[workload]``. With a
        workload: run it on the device as it is (call :meth:`precondition` first if wanted).
        The GIL is released while the simulation runs; Ctrl-C stops it and the report says
        ``interrupted``.
        """
        if isinstance(workload, Mix):
            parts, stop = workload._json()
            metrics, csv, interrupted = self._dev.run_mix(parts, stop, progress)
            return Report(json.loads(metrics), csv, interrupted)
        w = None if workload is None else json.dumps(workload.to_dict())
        metrics, csv, interrupted = self._dev.run(w, progress)
        return Report(json.loads(metrics), csv, interrupted)

    def replay(self, trace: PathLike, format: str, queue_depth: Optional[int] = None, max_ops: int = 0,
               progress: bool = False, blkparse_action: str = "Q") -> Report:
        """Replay a block trace (formats: ``ssdlab.trace_formats()``).

        ``queue_depth=None`` honours the trace's timestamps (open loop; needs timing);
        a number ignores them and keeps that many commands in flight.
        """
        metrics, csv, interrupted = self._dev.replay(os.fspath(trace), format, queue_depth, max_ops, progress,
                                                     blkparse_action)
        return Report(json.loads(metrics), csv, interrupted)

    # Host I/O in bytes (offsets and lengths are multiples of the sector size).
    def write(self, offset: int, data: bytes, fua: bool = False, placement: Optional[int] = None) -> int:
        """Write ``data``; returns the simulated completion time (ns).

        ``placement`` is an FDP placement identifier (see :meth:`placement_id`); it is ignored
        when FDP is off and rejected with :class:`ssdlab.NvmeError` when it names no handle.
        """
        return self._dev.write(offset, data, fua, placement)

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self._dev.read(offset, length))

    def trim(self, offset: int, length: int) -> int:
        return self._dev.trim(offset, length)

    def flush(self) -> int:
        return self._dev.flush()

    # FDP (NVMe TP4146) host interface.
    def placement_id(self, reclaim_group: int = 0, handle: int = 0) -> int:
        """The placement identifier of (reclaim group, placement handle)."""
        return self._dev.placement_id(reclaim_group, handle)

    def fdp_log(self, which: str) -> Any:
        """An FDP log page or status: ``configurations``, ``usage`` (reclaim unit handle usage),
        ``statistics`` (hbmw / mbmw / mbe bytes), ``events``, ``ruh_status`` (available media
        writes per handle)."""
        return json.loads(self._dev.fdp_log(which))

    def ruh_update(self, placement_ids: Iterable[int]) -> None:
        """Reclaim Unit Handle Update: move each handle to a new, empty reclaim unit."""
        self._dev.ruh_update(list(placement_ids))

    # ZNS (NVMe zoned namespace) host interface; see docs/personalities.md.
    def zone_info(self) -> Dict[str, int]:
        """Zone count, size and capacity (logical blocks), the open/active limits and the
        number of conventional zones (the first ones; random writes, no write pointer)."""
        n, size, cap, mo, ma, conv = self._dev.zone_info()
        return {"zones": n, "zone_size": size, "zone_capacity": cap, "max_open": mo, "max_active": ma,
                "conventional_zones": conv}

    def zone_append(self, zslba: int, data: bytes, fua: bool = False) -> int:
        """Append ``data`` to the zone starting at LBA ``zslba``; returns the LBA written."""
        return self._dev.zone_append(zslba, data, fua)[0]

    def zone_action(self, lba: int, action: str, select_all: bool = False) -> None:
        """Zone Management Send: ``open``, ``close``, ``finish``, ``reset`` or ``offline``."""
        self._dev.zone_action(lba, action, select_all)

    def zone_report(self, lba: int = 0, filter: str = "all", max_zones: Optional[int] = None) -> List[Dict[str, Any]]:
        """Report Zones from ``lba``: zone_type, state, zslba, zcap, wp, reset_count per zone."""
        return json.loads(self._dev.zone_report(lba, filter, 2**32 - 1 if max_zones is None else max_zones))

    # Open-channel (OCSSD 2.0-style) host interface; see docs/personalities.md.
    def oc_geometry(self) -> Dict[str, int]:
        """Geometry report: num_grp, num_pu, num_chk, clba, ws_min, ws_opt, mw_cunits, maxoc,
        sector_bytes and typical media times (ns)."""
        return json.loads(self._dev.oc_geometry())

    def oc_lba(self, group: int, pu: int, chunk: int, sector: int = 0) -> int:
        """The LBA of (group, parallel unit, chunk, sector)."""
        return self._dev.oc_lba(group, pu, chunk, sector)

    def oc_chunk_info(self, group: Optional[int] = None, pu: Optional[int] = None) -> List[Dict[str, Any]]:
        """Chunk information: slba, state, wp, cnlb, erase_count per chunk."""
        return json.loads(self._dev.oc_chunk_info(group, pu))

    def oc_vector_write(self, lbas: Sequence[int], data: bytes) -> int:
        """Vector write (at most 64 LBAs, one sector of ``data`` each)."""
        return self._dev.oc_vector_write(list(lbas), data)

    def oc_vector_read(self, lbas: Sequence[int]) -> bytes:
        return bytes(self._dev.oc_vector_read(list(lbas)))

    def oc_vector_reset(self, chunk_lbas: Sequence[int]) -> int:
        return self._dev.oc_vector_reset(list(chunk_lbas))

    def oc_copy_chunk(self, src_lba: int, dst_lba: int) -> int:
        """Copy a chunk's data to a free chunk, on any parallel unit (wear-levelling moves)."""
        return self._dev.oc_copy_chunk(src_lba, dst_lba)

    def oc_wear(self) -> Dict[str, List[int]]:
        """Erase counts per group (channel) and per parallel unit (die)."""
        per_group, per_pu = self._dev.oc_wear()
        return {"per_group": list(per_group), "per_pu": list(per_pu)}

    def inject_zone_state(self, zone: int, state: str) -> None:
        """Failure injection: make a zone ``read-only`` or ``offline``."""
        self._dev.inject_zone_state(zone, state)

    def snapshot(self, path: PathLike) -> None:
        """Save the whole device state, so a preconditioned device can be reused."""
        self._dev.snapshot(os.fspath(path))

    @classmethod
    def restore(cls, path: PathLike) -> "Device":
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
        return f"Device(preset={c['preset']!r}, logical_bytes={self.logical_bytes}, storage={c['storage']!r})"
