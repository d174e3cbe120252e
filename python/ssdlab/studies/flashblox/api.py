"""flashblox's user API: virtual SSDs with hardware isolation and uniform lifetime on an
open-channel SSD.

The vSSD layer of *FlashBlox* (FAST'17; seed 003), on ssdlab's open-channel device: vSSDs
isolated by channel, die or soft-plane, a block-granular device-level map kept in 16-byte OOB
records (rebuilt after a crash), the log-structured API (``alloc_block``, ``write_data``,
``read_data``, ``free_block``) and wear-levelling by channel/die swaps.

>>> from ssdlab.studies.flashblox import api
>>> fb = api.FlashBlox("quick", storage="data", geometry={"blocks_per_plane": 16, "pages_per_block": 4})
>>> v = fb.alloc_virtual_ssd("channel", capacity=1)
>>> b = v.alloc_block()
>>> _ = v.write_data(b, 0, b"x" * v.unit_bytes)
>>> v.read_data(b, 0, 1)[:4]
b'xxxx'

Experiments: :func:`run` (timed tenants), :func:`lifetime` (wear to end of life),
:func:`swap_plan` (the swap-frequency analysis), :func:`layer_cost` (the layer's simulator
cost); ``ssdlab reproduce flashblox`` runs the document's experiments and writes
reports/flashblox/.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ... import _native, config

WEEK_NS = 7 * 24 * 3600 * 10**9
WEEKS_PER_YEAR = 365.25 / 7


def device_config(device: Union[str, Mapping[str, Any]] = "quick", **overrides: Any) -> Dict[str, Any]:
    """A complete open-channel device config: one of the case study's devices (``paper``:
    1 TiB, 16 channels x 4 dies; ``quick``: the same shape at 4 GiB; ``lifetime``: small chunks,
    no timing) or a config dict, with section overrides (``geometry={...}``, ``storage=...``)."""
    base = _native.vssd_device(device) if isinstance(device, str) else dict(device)
    cfg = config.merge(base, overrides)
    resolved: Dict[str, Any] = _native.config_resolve(cfg, "<flashblox device>")
    return resolved


class VirtualSSD:
    """A vSSD of a :class:`FlashBlox`: the log-structured API over its blocks."""

    def __init__(self, owner: "FlashBlox", vid: int):
        self._fb = owner
        self.id = vid

    def _geo(self) -> Tuple[int, int, int, int, int]:
        g: Tuple[int, int, int, int, int] = self._fb._n.geometry_of(self.id)
        return g

    @property
    def blocks(self) -> int:
        return self._geo()[0]

    @property
    def free_blocks(self) -> int:
        return self._geo()[1]

    @property
    def block_sectors(self) -> int:
        return self._geo()[2]

    @property
    def unit_sectors(self) -> int:
        """Sectors per write unit: writes come in multiples of it."""
        return self._geo()[3]

    @property
    def sector_bytes(self) -> int:
        return self._geo()[4]

    @property
    def unit_bytes(self) -> int:
        g = self._geo()
        return g[3] * g[4]

    @property
    def block_bytes(self) -> int:
        g = self._geo()
        return g[2] * g[4]

    def alloc_block(self) -> int:
        """``AllocBlock``: a free block (erased chunks on each of the vSSD's dies)."""
        return int(self._fb._n.alloc_block(self.id))

    def write_data(self, block: int, offset: int, data: bytes) -> int:
        """``WriteData``: append ``data`` (whole write units) at sector ``offset``, the block's
        write pointer. Returns the completion time (simulated ns)."""
        return int(self._fb._n.write_data(self.id, block, offset, bytes(data)))

    def read_data(self, block: int, offset: int, sectors: int) -> bytes:
        """``ReadData``: ``sectors`` written sectors from ``offset``."""
        return bytes(self._fb._n.read_data(self.id, block, offset, sectors))

    def free_block(self, block: int) -> None:
        """``FreeBlock``: erase the block and give it back."""
        self._fb._n.free_block(self.id, block)

    def __repr__(self) -> str:
        return f"VirtualSSD(id={self.id}, blocks={self.blocks}, block_bytes={self.block_bytes})"


class FlashBlox:
    """The vSSD layer on an emulated open-channel SSD.

    ``device``: a case-study device name or a config dict; ``config``: the layer's settings
    (``reserve_fraction``, ``soft_planes_per_die``, ``die_queue_depth``, the
    ``tput_to_channels``/``tput_to_dies``/``tput_to_soft_planes`` maps, ``wear``);
    other keywords override device config sections (``storage="data"`` keeps contents).
    """

    def __init__(self, device: Union[str, Mapping[str, Any]] = "quick", config: Optional[Mapping[str, Any]] = None,
                 **overrides: Any):
        self.device = device_config(device, **overrides)
        self._n = _native.NativeFlashBlox(self.device, dict(config or {}))

    @property
    def now_ns(self) -> int:
        return int(self._n.now())

    def alloc_virtual_ssd(self, isolation: str, tput_level: int = 0, capacity: int = 0,
                          channels: Optional[Sequence[int]] = None, spread: bool = False) -> VirtualSSD:
        """``AllocVirtualSSD``: ``isolation`` is channel, die, soft-plane or none; the vSSD gets
        max(tputToX(tput_level), ceil(capacity / capacityPerX)) units. ``channels`` limits where
        it may go; ``spread`` deals its dies or soft-planes across them."""
        placement = {"channels": list(channels or []), "spread": bool(spread)}
        return VirtualSSD(self, self._n.alloc_virtual_ssd(isolation, int(tput_level), int(capacity), placement))

    def dealloc_virtual_ssd(self, v: VirtualSSD) -> None:
        """``DeallocVirtualSSD``: erase its blocks, give its units back (merged where whole)."""
        self._n.dealloc_virtual_ssd(v.id)

    def swap_channels(self, a: int, b: int) -> None:
        """Swap two physical channels (and their dies) now; the vSSDs on them do not notice."""
        self._n.swap_channels(a, b)

    def summary(self) -> Dict[str, Any]:
        """Geometry, vSSDs, erase counts per channel and die, migration totals."""
        s: Dict[str, Any] = self._n.summary()
        return s

    def wear(self) -> Tuple[List[int], List[int]]:
        """Erase counts per physical channel and per physical die."""
        w = self.summary()["wear"]
        return w["channel_erases"], w["die_erases"]

    def layout(self) -> Dict[str, Any]:
        """The table the host persists beside the device (allocations, homes, a swap in progress)."""
        t: Dict[str, Any] = self._n.layout()
        return t

    def crash_and_recover(self, layout: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Drop every in-memory map, keep the device and ``layout`` (default: the current
        table), and rebuild from the OOB records. Returns the recovery report."""
        r: Dict[str, Any] = self._n.crash_and_recover(None if layout is None else dict(layout))
        return r

    def check_invariants(self) -> None:
        self._n.check_invariants()


def run(spec: Mapping[str, Any], device: Union[str, Mapping[str, Any]] = "quick", progress: bool = False) -> Tuple[Dict[str, Any], float]:
    """A timed multi-tenant run (``spec``: tenants, warmup_ms, duration_ms, ...; see
    ``_native.vssd_defaults()["run"]``; ``progress``: a bar on stderr). Returns (summary, wall
    seconds); Ctrl-C raises KeyboardInterrupt, in the tenants' set-up too."""
    dev = device_config(device) if isinstance(device, str) else dict(device)
    s, wall, interrupted = _native.vssd_run(dev, dict(spec), progress=progress)
    if interrupted:
        raise KeyboardInterrupt
    return s, wall


def lifetime(spec: Mapping[str, Any], device: Union[str, Mapping[str, Any]] = "lifetime", progress: bool = False) -> Tuple[Dict[str, Any], float]:
    """A wear study to end of life (``spec``: tenants with write shares of M, ideal_years,
    max_weeks, flashblox.wear; ``progress``: a bar on stderr). Returns (result, wall seconds)."""
    dev = device_config(device) if isinstance(device, str) else dict(device)
    s, wall = _native.vssd_lifetime(dev, dict(spec), progress=progress)
    return s, wall


def swap_plan(channels: int = 16, years: float = 5.0, a: float = 0.9, d: float = 0.1) -> Dict[str, Any]:
    """The swap-frequency analysis: K >= (N - 1 - d) / (N d) rounds, N K swaps in a L, a swap
    every a L / (N K)."""
    p: Dict[str, Any] = _native.vssd_swap_plan(int(channels), float(years), float(a), float(d))
    return p


def layer_cost(device: Union[str, Mapping[str, Any]] = "quick", rounds: int = 5) -> Dict[str, Any]:
    """Wall-clock cost per sector of writing through the vSSD layer vs the raw device."""
    dev = device_config(device) if isinstance(device, str) else dict(device)
    c: Dict[str, Any] = _native.vssd_layer_cost(dev, int(rounds))
    return c
