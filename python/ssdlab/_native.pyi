"""Type stubs of ssdlab._native, the compiled core (crates/py). The user-facing API is the
ssdlab package; tests/test_stubs.py checks these stubs against the built module."""

from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any, Literal, TypedDict, final, type_check_only

__all__ = [
    "SsdlabError", "ConfigError", "TraceError", "DeviceError", "SnapshotError", "NvmeError", "__version__", "NativeDevice", "Fdp", "Zns",
    "Ocssd", "config_from_toml", "config_resolve", "config_sizing", "config_show", "config_markdown", "preset_names", "trace_formats",
    "workload_defaults", "waf_fifo", "waf_greedy", "nbd_serve", "nbd_stats", "SpiFlash", "spi_chips", "cache_serve",
    "cache_run", "cache_defaults", "cache_workload", "cache_workloads", "cache_convert_trace", "cache_theorem1",
]

__version__: str

class SsdlabError(Exception):
    """Base class of ssdlab errors."""

class ConfigError(SsdlabError):
    """A configuration key is unknown, malformed or out of range."""

class TraceError(SsdlabError):
    """A trace line cannot be parsed."""

class DeviceError(SsdlabError):
    """The device cannot serve the request (worn out, full, bad command)."""

class SnapshotError(SsdlabError):
    """A snapshot file cannot be read."""

class NvmeError(DeviceError):
    """The device rejected a command with an NVMe status (named in the message), or the command
    belongs to another personality."""

_Path = str | PathLike[str]
_Config = dict[str, Any]
_RunOut = tuple[dict[str, Any], str, bool]

# ---------------------------------------------------------------------------------------------
# Shapes of the dicts the device returns.

@type_check_only
class EffectiveSpare(TypedDict):
    spare_factor: float
    waf_greedy: float | None
    waf_fifo: float | None

@type_check_only
class Sizing(TypedDict):
    logical_bytes: int
    physical_bytes: int
    good_blocks: int
    memory_bytes: int
    data_bytes_max: int
    reserve_blocks: int | None
    spare_blocks: float | None
    reserve_steady_blocks: float | None
    spare_factor: float | None
    effective: EffectiveSpare | None
    available_memory_bytes: int | None

@type_check_only
class ZoneInfo(TypedDict):
    zones: int
    zone_size: int
    zone_capacity: int
    max_open: int
    max_active: int
    conventional_zones: int

@type_check_only
class ZoneDescriptor(TypedDict):
    index: int
    zone_type: Literal["sequential-write-required", "conventional"]
    state: str
    zslba: int
    zcap: int
    wp: int
    reset_count: int

@type_check_only
class OcGeometry(TypedDict):
    num_grp: int
    num_pu: int
    num_chk: int
    clba: int
    ws_min: int
    ws_opt: int
    mw_cunits: int
    maxoc: int
    sector_bytes: int
    trdt_ns: int
    tprt_ns: int
    tbet_ns: int

@type_check_only
class ChunkInfo(TypedDict):
    slba: int
    state: Literal["free", "open", "closed", "offline"]
    wp: int
    cnlb: int
    erase_count: int

@type_check_only
class Wear(TypedDict):
    per_group: list[int]
    per_pu: list[int]

@type_check_only
class FdpStatistics(TypedDict):
    hbmw: int
    mbmw: int
    mbe: int

@type_check_only
class RuhStatus(TypedDict):
    pid: int
    reclaim_group: int
    handle: int
    ruhid: int
    handle_type: str
    ruamw: int

@type_check_only
class FdpEvent(TypedDict):
    kind: str
    code: int
    pid: int | None
    reclaim_group: int
    time_ns: int

# ---------------------------------------------------------------------------------------------
# Devices

@final
class NativeDevice:
    """An emulated device (see ssdlab.Device for the documented API)."""

    def __new__(cls, config: _Config) -> NativeDevice: ...
    @property
    def config(self) -> _Config: ...
    @property
    def logical_bytes(self) -> int: ...
    @property
    def now_ns(self) -> int: ...
    @property
    def free_blocks(self) -> int: ...
    @property
    def counters(self) -> dict[str, int]: ...
    @property
    def personality(self) -> str: ...
    @property
    def fdp(self) -> Fdp: ...
    @property
    def zns(self) -> Zns: ...
    @property
    def ocssd(self) -> Ocssd: ...
    def precondition(self, progress: bool = False) -> bool: ...
    def run(self, workload: _Config | None = None, progress: bool = False) -> _RunOut: ...
    def run_mix(self, parts: Sequence[tuple[_Config, float]], stop: _Config, progress: bool = False) -> _RunOut: ...
    def replay(self, path: _Path, format: str, queue_depth: int | None = None, max_ops: int = 0, progress: bool = False,
               blkparse_action: str = "Q") -> _RunOut: ...
    def write(self, offset: int, data: bytes, fua: bool = False, placement: int | None = None) -> int: ...
    def read(self, offset: int, length: int) -> bytes: ...
    def trim(self, offset: int, length: int) -> int: ...
    def flush(self) -> int: ...
    def snapshot(self, path: _Path) -> None: ...
    @staticmethod
    def restore(path: _Path) -> NativeDevice: ...
    def check_invariants(self) -> None: ...
    def verify_rebuild(self) -> bool: ...

@final
class Fdp:
    """FDP commands of a conventional device (``dev.fdp``). With FDP off every command fails
    with the NVMe status FDP Disabled."""

    def placement_id(self, reclaim_group: int = 0, handle: int = 0) -> int: ...
    def configurations(self) -> dict[str, Any]: ...
    def usage(self) -> list[str]: ...
    def statistics(self) -> FdpStatistics: ...
    def events(self) -> list[FdpEvent]: ...
    def ruh_status(self) -> list[RuhStatus]: ...
    def ruh_update(self, placement_ids: Sequence[int]) -> None: ...

@final
class Zns:
    """Commands of a ZNS device (``dev.zns``)."""

    def info(self) -> ZoneInfo: ...
    def append(self, zslba: int, data: bytes, fua: bool = False) -> int: ...
    def action(self, lba: int, action: Literal["open", "close", "finish", "reset", "offline"], select_all: bool = False) -> int: ...
    def report(self, lba: int = 0, filter: str = "all", max_zones: int | None = None) -> list[ZoneDescriptor]: ...
    def inject_state(self, zone: int, state: Literal["read-only", "offline"]) -> None: ...

@final
class Ocssd:
    """Commands of an open-channel device (``dev.ocssd``)."""

    def geometry(self) -> OcGeometry: ...
    def lba(self, group: int, pu: int, chunk: int, sector: int = 0) -> int: ...
    def chunk_info(self, group: int | None = None, pu: int | None = None) -> list[ChunkInfo]: ...
    def vector_write(self, lbas: Sequence[int], data: bytes) -> int: ...
    def vector_read(self, lbas: Sequence[int]) -> bytes: ...
    def vector_reset(self, chunk_lbas: Sequence[int]) -> int: ...
    def copy_chunk(self, src_lba: int, dst_lba: int) -> int: ...
    def wear(self) -> Wear: ...

# ---------------------------------------------------------------------------------------------
# Configs and models

def config_from_toml(text: str, origin: str = "<config>") -> _Config: ...
def config_resolve(config: _Config, origin: str = "<config>") -> _Config: ...
def config_sizing(config: _Config) -> Sizing: ...
def config_show(preset: str) -> str: ...
def config_markdown() -> str: ...
def preset_names() -> list[str]: ...
def trace_formats() -> list[str]: ...
def workload_defaults() -> dict[str, Any]: ...
def waf_fifo(alpha: float) -> float: ...
def waf_greedy(alpha: float, sectors_per_block: int) -> float: ...

# ---------------------------------------------------------------------------------------------
# Front-ends: NBD, SPI NOR, fdp-cache

def nbd_serve(config: _Config, options: dict[str, Any]) -> dict[str, Any]: ...
def nbd_stats(addr: str, tls_ca: _Path | None = None) -> dict[str, Any]: ...

@final
class SpiFlash:
    def __new__(cls, chip: str, image: _Path | None = None, timing: str = "typical", clock_hz: int = 8_000_000,
                stuck_bits: Sequence[tuple[int, int, bool]] = ..., erase_fail_after: int | None = None,
                unique_id: Sequence[int] | None = None, trace: _Path | None = None) -> SpiFlash: ...
    def transfer(self, data: bytes) -> bytes: ...
    def advance(self, ns: int) -> None: ...
    @property
    def now_ns(self) -> int: ...
    @property
    def busy(self) -> bool: ...
    @property
    def busy_until_ns(self) -> int: ...
    @property
    def clock_hz(self) -> int: ...
    @clock_hz.setter
    def clock_hz(self, hz: int) -> None: ...
    def set_wp(self, high: bool) -> None: ...
    def erase_counts(self) -> list[int]: ...
    def sectors_beyond_endurance(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...
    def registers(self) -> tuple[int, int, int]: ...
    def protected_range(self) -> tuple[int, int]: ...
    def contents(self) -> bytes: ...
    def flush(self) -> None: ...
    def serve(self, listen: str, on_listening: Callable[[str], object] | None = None) -> dict[str, Any]: ...

def spi_chips() -> list[dict[str, Any]]: ...
def cache_run(device: _Config, spec: dict[str, Any], trace: _Path | None = None) -> tuple[dict[str, Any], str, float, bool]: ...
def cache_defaults() -> dict[str, Any]: ...
def cache_workload(name: str) -> dict[str, Any]: ...
def cache_workloads() -> list[str]: ...
def cache_convert_trace(src: _Path, format: str, dst: _Path) -> tuple[int, int, int]: ...
def cache_theorem1(soc_bytes: float, soc_physical_bytes: float) -> float | None: ...
def cache_serve(device: _Config, cache: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]: ...
