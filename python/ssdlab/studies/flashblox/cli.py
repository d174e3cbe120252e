"""Moving here from ssdlab.vssd (temporary shim)."""

from ...vssd import add_cli

__all__ = ["add_cli"]
