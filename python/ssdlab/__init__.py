"""ssdlab: a fast, deterministic flash-storage emulation lab.

>>> import ssdlab
>>> dev = ssdlab.Device("tiny", timing={"enabled": False})
>>> report = dev.run(ssdlab.Workload(pattern="uniform", stop_device_writes=1.0))
>>> round(report.dlwa, 1) >= 1.0
True
"""

from . import _native
from ._native import ConfigError, DeviceError, Fdp, NvmeError, Ocssd, SnapshotError, SsdlabError, TraceError, Zns
from .config import resolve_config
from .device import Device, Report
from .sweep import SweepError, sweep
from .workload import Mix, Workload

__version__: str = _native.__version__

__all__ = [
    "Device", "Workload", "Mix", "Report", "Fdp", "Zns", "Ocssd", "resolve_config", "NvmeError", "presets",
    "trace_formats", "config_show", "waf_fifo", "waf_greedy", "SsdlabError", "ConfigError", "TraceError", "DeviceError",
    "SnapshotError", "sweep", "SweepError",
]


def presets() -> list[str]:
    """Names of the device presets."""
    return list(_native.preset_names())


def trace_formats() -> list[str]:
    """Trace formats ``Device.replay`` reads."""
    return list(_native.trace_formats())


def config_show(preset: str = "default") -> str:
    """A complete, commented TOML config for ``preset``."""
    return _native.config_show(preset)


def waf_fifo(alpha: float) -> float:
    """FIFO/LRU write amplification under uniform random overwrites (Desnoyers 2012);
    ``alpha`` = physical / logical sectors."""
    return _native.waf_fifo(alpha)


def waf_greedy(alpha: float, sectors_per_block: int) -> float:
    """Desnoyers' approximation of greedy GC write amplification."""
    return _native.waf_greedy(alpha, sectors_per_block)
