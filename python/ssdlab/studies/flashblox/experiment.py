"""Moving here from ssdlab.vssd (temporary shim)."""

from ...vssd import EXPERIMENT

__all__ = ["EXPERIMENT"]
