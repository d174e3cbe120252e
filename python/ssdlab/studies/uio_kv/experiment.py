"""Moving here from ssdlab.uio (temporary shim)."""

from ...uio import EXPERIMENT

__all__ = ["EXPERIMENT"]
