"""The LSM store on an emulated ZNS SSD, as a user calls it from Python.

::

    >>> from ssdlab.studies.lsm_deletion.api import Store
    >>> s = Store({"preset": "zns-ssd", "geometry": {"blocks_per_plane": 16}}, policy="fade",
    ...           delete_threshold_ns=10**9, track_deletes=True)
    >>> _ = s.put(b"k", b"v" * 100); s.get(b"k") == b"v" * 100
    True

:func:`run_lsm` makes a measured run (the same runs the reproduction makes), :func:`generate`
writes a run's phases as workload files (the K-V workload generator's format), :func:`serve`
puts the store behind the RESP protocol for Redis clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ... import _native
from ...config import merge
from ...serving import EVICT_IDLE_AFTER, foreground, resp_options

POLICIES = ("baseline", "fade", "zone-aware")

# Variants run as ablations beside the policies: name -> the ``lsm`` keys that make one.
# "zone-aware-ttl": the zone-aware design with FADE's TTL trigger added (an expired tombstone
# file starts a compaction by itself), to show what the trigger costs and buys.
ABLATIONS: Dict[str, Dict[str, Any]] = {
    "zone-aware-ttl": {"policy": "zone-aware", "zone_aware": {"ttl_trigger": True}},
}


def policy_keys(name: str) -> Dict[str, Any]:
    """The ``lsm`` keys of a policy or ablation named in an experiment's ``policies``."""
    if name in POLICIES:
        return {"policy": name}
    if name in ABLATIONS:
        return ABLATIONS[name]
    raise ValueError(f"policy {name!r}: expected one of {', '.join(POLICIES + tuple(ABLATIONS))}")


class Store:
    """The LSM store on a fresh ZNS device.

    ``device``: a device config (preset plus tables; the personality must be zns, the device
    is made data-backed). Keyword arguments are ``lsm`` keys (docs/case-studies/lsm-deletion.md):
    ``policy`` ("baseline" | "fade" | "zone-aware"), ``delete_threshold_ns``,
    ``memtable_bytes``, ``track_deletes``, ...

    Every operation is timed on the emulated device; the store's clock (``now_ns``) moves to
    each operation's completion, or where :meth:`advance_to` puts it.
    """

    def __init__(self, device: Optional[Dict[str, Any]] = None, **lsm: Any) -> None:
        device = device or {"preset": "zns-ssd"}
        self._s = _native.LsmStore(device, lsm)

    def put(self, key: bytes, value: bytes) -> int:
        """Write; returns the WAL write's completion time (ns)."""
        return self._s.put(key, value)

    def delete(self, key: bytes) -> int:
        return self._s.delete(key)

    def get(self, key: bytes, snapshot: Optional[int] = None) -> Optional[bytes]:
        return self._s.get(key, snapshot)

    def scan(self, start: bytes, end: Optional[bytes] = None, limit: int = 1000,
             snapshot: Optional[int] = None) -> List[Tuple[bytes, bytes]]:
        """Live pairs with start <= key <= end, in key order."""
        return self._s.scan(start, end, limit, snapshot)

    def snapshot(self) -> int:
        """A snapshot id: reads with it see the store as it is now until :meth:`release`."""
        return self._s.snapshot()

    def release(self, snapshot: int) -> None:
        self._s.release(snapshot)

    def flush(self) -> None:
        self._s.flush()

    def advance_to(self, t_ns: int) -> None:
        self._s.advance_to(t_ns)

    @property
    def now_ns(self) -> int:
        return self._s.now_ns

    def stats(self) -> Dict[str, Any]:
        """Store, zone-layer and device counters, level shape, and per-delete persistence
        records (with ``track_deletes``)."""
        return self._s.stats()

    def audit(self) -> Dict[str, Any]:
        """Search the raw NAND for deleted values; survivors with their state and age."""
        return self._s.audit()


def run_lsm(device: Dict[str, Any], spec: Dict[str, Any], files: Optional[Sequence[str]] = None,
            progress: bool = False) -> Tuple[Dict[str, Any], str, float]:
    """One measured run: ``spec`` overrides ``_native.lsm_defaults()`` (keys ``lsm``,
    ``phases``, ``seed``, ``ops_per_s``, ``delete_threshold_fraction``, ``series_points``,
    ``audit``). With ``files``, phase i replays files[i] (K-V workload generator format).
    ``progress``: a bar on stderr. Returns (summary, time-series CSV, wall seconds)."""
    s, series, wall, interrupted = _native.lsm_run(device, merge(_native.lsm_defaults(), spec),
                                                   [str(f) for f in files] if files else None, progress=progress)
    if interrupted:
        raise KeyboardInterrupt
    return s, series, wall


def generate(spec: Dict[str, Any], out_dir: str) -> List[Tuple[str, int]]:
    """Write the phases of ``spec`` as workload files (one per phase); returns (path, ops)."""
    return _native.lsm_generate(merge(_native.lsm_defaults(), spec), Path(out_dir))


def serve(device: Optional[Dict[str, Any]] = None, lsm: Optional[Dict[str, Any]] = None, listen: str = "127.0.0.1:6379",
          max_connections: int = 128, idle_timeout_s: float = 0.0, evict_idle_after_s: float = EVICT_IDLE_AFTER,
          allow_remote: bool = False, quiet: bool = False, audit: bool = False,
          data: Optional[str] = None) -> Dict[str, Any]:
    """Serve the LSM store (``lsm``: store keys) on a fresh ZNS device (``device``: a device
    config, made data-backed) to Redis clients (RESP: GET, SET, DEL, MGET, MSET, INCR, ...) until
    SIGINT or SIGTERM. Returns the final figures: the front-end's counters under the top level,
    the store's (write amplification, deletion persistence) under ``store``, and with ``audit``
    the search of the NAND for deleted values under ``closing``.

    ``data``: a directory where the store persists (its command journal, Redis's append-only
    file with fsync always): a server started again on it replays the journal and goes on
    with the same data, device state and clock; a write is answered once it is on disk, so a
    kill -9 loses no acknowledged write. It must be served with the configuration that made it."""
    opts = resp_options(listen, max_connections, idle_timeout_s, evict_idle_after_s, allow_remote, quiet)
    full = merge(_native.lsm_defaults()["lsm"], lsm or {})
    return foreground(_native.kv_serve, device or {"preset": "zns-ssd"}, full, opts, audit, data)
