"""Moving here from ssdlab.lsm (temporary shim)."""

from ...lsm import add_cli

__all__ = ["add_cli"]
