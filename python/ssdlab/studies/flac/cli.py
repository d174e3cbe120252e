"""Moving here from ssdlab.flac (temporary shim)."""

from ...flac import add_cli

__all__ = ["add_cli"]
