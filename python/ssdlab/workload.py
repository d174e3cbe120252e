"""Synthetic workloads for ``Device.run``: one ``[workload]`` table, or several mixed by weight.

A ``Workload`` holds only the keys you set; every other key takes the core's default
(``Workload.defaults()``, the same table ``ssdlab config show`` prints under ``[workload]``), so
the defaults live in one place. Stop conditions you give replace the default one (2 device
writes in today's core) rather than racing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _native


def _given(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if getattr(obj, f.name) is not None}


@dataclass
class Workload:
    """A synthetic workload (the ``[workload]`` table of a config; docs/CONFIG.md has every key).

    ``block_bytes`` may be one size or a list (with ``block_weights``, equal when not given).
    A run stops at the first of ``stop_device_writes`` times the logical capacity, ``stop_ops``
    commands, ``stop_host_write_bytes`` or ``stop_sim_ns`` that it reaches; with none given it
    stops where the core's default says.

    >>> Workload(pattern="zipf", stop_ops=1000).to_dict()
    {'pattern': 'zipf', 'stop_ops': 1000}
    """

    pattern: str | None = None
    zipf_theta: float | None = None
    hot_space: float | None = None
    hot_writes: float | None = None
    read_fraction: float | None = None
    trim_fraction: float | None = None
    block_bytes: int | Sequence[int] | None = None
    block_weights: Sequence[float] | None = None
    offset: float | None = None
    span: float | None = None
    placement: int | None = None
    queue_depth: int | None = None
    rate_iops: float | None = None
    arrival: str | None = None
    stop_ops: int | None = None
    stop_host_write_bytes: int | None = None
    stop_sim_ns: int | None = None
    stop_device_writes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The keys set, as the ``[workload]`` table the core completes."""
        d = _given(self)
        if "block_bytes" in d:
            sizes = [d["block_bytes"]] if isinstance(d["block_bytes"], int) else list(d["block_bytes"])
            d["block_bytes"] = sizes
            if "block_weights" not in d:
                d["block_weights"] = [1.0] * len(sizes)
        if "block_weights" in d:
            d["block_weights"] = [float(x) for x in d["block_weights"]]
        return d

    @staticmethod
    def defaults() -> dict[str, Any]:
        """The core's ``[workload]`` defaults (what every key left unset takes)."""
        return _native.workload_defaults()

    def __repr__(self) -> str:
        return f"Workload({', '.join(f'{k}={v!r}' for k, v in _given(self).items())})"


@dataclass
class Mix:
    """Several workloads interleaved by weight (per command), e.g. a sequential stream on one
    FDP placement handle and random overwrites on another::

        Mix([(Workload(pattern="sequential", span=0.5, block_bytes=131072, placement=0), 1),
             (Workload(pattern="uniform", offset=0.5, span=0.4, placement=1), 32)],
            stop_device_writes=2.0)

    Stop conditions and the queue depth (or rate) come from this object, not the parts; those
    left unset take the core's defaults, as in a ``Workload``. ``mix_order="even"`` spreads
    each part's commands evenly (weighted round-robin) instead of picking parts at random.
    """

    parts: Sequence[tuple[Workload, float]]
    stop_device_writes: float | None = None
    stop_ops: int | None = None
    stop_host_write_bytes: int | None = None
    stop_sim_ns: int | None = None
    queue_depth: int | None = None
    rate_iops: float | None = None
    arrival: str | None = None
    mix_order: str | None = None  # "random" (default) or "even"

    def tables(self) -> tuple[list[tuple[dict[str, Any], float]], dict[str, Any]]:
        """(parts as ``[workload]`` tables with their weights, the run's stop table)."""
        parts = [(w.to_dict(), float(weight)) for w, weight in self.parts]
        stop = {k: v for k, v in _given(self).items() if k != "parts"}
        return parts, stop
