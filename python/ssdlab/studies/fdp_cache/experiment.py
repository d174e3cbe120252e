"""Moving here from ssdlab.fdpcache (temporary shim)."""

from ...fdpcache import EXPERIMENT

__all__ = ["EXPERIMENT"]
