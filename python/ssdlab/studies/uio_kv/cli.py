"""Moving here from ssdlab.uio (temporary shim)."""

from ...uio import add_cli

__all__ = ["add_cli"]
