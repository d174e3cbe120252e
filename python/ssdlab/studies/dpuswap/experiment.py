"""Moving here from ssdlab.dpuswap (temporary shim)."""

from ...dpuswap import EXPERIMENT

__all__ = ["EXPERIMENT"]
