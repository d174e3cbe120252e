"""Moving here from ssdlab.vmbaseline (temporary shim)."""

from ...vmbaseline import EXPERIMENT

__all__ = ["EXPERIMENT"]
