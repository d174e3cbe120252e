"""Moving here from ssdlab.dpuswap (temporary shim)."""

from ...dpuswap import add_cli

__all__ = ["add_cli"]
