"""Moving here from ssdlab.lsm (temporary shim)."""

from ...lsm import EXPERIMENT

__all__ = ["EXPERIMENT"]
