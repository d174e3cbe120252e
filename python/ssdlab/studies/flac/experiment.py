"""Moving here from ssdlab.flacrepro (temporary shim)."""

from ...flacrepro import EXPERIMENT

__all__ = ["EXPERIMENT"]
