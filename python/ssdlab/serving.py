"""Running one of ssdlab's servers (NBD, memcached, RESP) from Python in the foreground."""

from __future__ import annotations

import signal
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def foreground(serve: Callable[..., T], *args: Any) -> T:
    """Call ``serve(*args)`` (a native server that returns at SIGINT or SIGTERM) with Python's
    SIGINT handler off meanwhile: the server shuts down cleanly itself and returns its final
    figures, which Python's KeyboardInterrupt after it would lose."""
    previous = None
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals stay with the main thread's handlers
        pass
    try:
        return serve(*args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
