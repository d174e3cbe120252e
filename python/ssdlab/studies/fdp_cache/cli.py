"""Moving here from ssdlab.fdpcache (temporary shim)."""

from ...fdpcache import add_cli

__all__ = ["add_cli"]
