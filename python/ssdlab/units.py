"""Sizes and figures as ssdlab reads and prints them, in one place: byte sizes with binary
units ("64M", "1.5GiB"), and percentages, multiples and ratios in reports."""

from __future__ import annotations

import math
import re
from typing import Optional, Union

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)


def parse_size(value: Union[int, str], what: str = "size", positive: bool = False) -> int:
    """Bytes from 4096, "4096", "64K", "1.5G", "2GiB", "512MB" (binary multiples either way).
    A bad or negative value (or 0 when ``positive``) raises ValueError naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a size like 4096, 64K, 256M or 2G, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(str(value))
        if not m:
            raise ValueError(f"{what}: expected a size like 4096, 64K, 256M or 2G, got {value!r}")
        n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if n < 0 or (positive and n == 0):
        raise ValueError(f"{what}: {value!r} must be {'more than 0' if positive else '0 or more'}")
    return n


def human_bytes(n: Optional[float]) -> str:
    """1536 -> "1.5 KiB"; None -> "?"."""
    if n is None:
        return "?"
    for unit, div in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def ratio(a: float, b: float) -> float:
    """a / b, inf when b is 0 (nan when both are)."""
    if b:
        return a / b
    return math.nan if not a else math.copysign(math.inf, a)


def pct(x: Optional[float], signed: bool = True, digits: int = 1) -> str:
    """0.123 -> "+12.3%" (a change) or "12.3%" (a share, ``signed=False``); None -> "-"."""
    if x is None or math.isnan(x):
        return "-"
    return f"{x * 100:{'+' if signed else ''}.{digits}f}%"


def change(a: float, b: float) -> str:
    """The relative change from b to a: change(1.2, 1.0) -> "+20.0%"."""
    return pct(ratio(a, b) - 1)


def times(x: Optional[float], digits: int = 2) -> str:
    """1.234 -> "1.23x"; None -> "-"."""
    if x is None or math.isnan(x):
        return "-"
    return f"{x:.{digits}f}x"
