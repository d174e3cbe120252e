"""Running one of ssdlab's servers (NBD, memcached, RESP) from Python in the foreground, and
the RESP servers' common options (`ssdlab kv serve`, `ssdlab uio kv-serve`)."""

from __future__ import annotations

import signal
from typing import Any, Callable, Dict, TypeVar

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


def resp_options(listen: str = "127.0.0.1:6379", max_connections: int = 128, idle_timeout_s: float = 0.0,
                 evict_idle_after_s: float = 5.0, allow_remote: bool = False, quiet: bool = False) -> Dict[str, Any]:
    """A RESP server's options, as the native servers take them."""
    return {"listen": listen, "max_connections": max_connections, "idle_timeout_s": idle_timeout_s,
            "evict_idle_after_s": evict_idle_after_s, "allow_remote": allow_remote, "quiet": quiet}


def add_resp_arguments(p, what: str = "serve") -> None:
    """The RESP server's options on an argparse parser (help lines prefixed by ``what``)."""
    from .args import int_in, seconds

    p.add_argument("--listen", default="127.0.0.1:6379", help=f"{what}: HOST:PORT (default %(default)s; loopback unless --allow-remote)")
    p.add_argument("--allow-remote", action="store_true", help=f"{what}: listen on a non-loopback address (RESP has no authentication here)")
    p.add_argument("--max-connections", type=int_in(1, 65536), default=128, help=f"{what}: clients served at once (default %(default)s)")
    p.add_argument("--idle-timeout", type=seconds(False), default=0.0, help=f"{what}: cut a connection idle this many seconds (default 0: never)")
    p.add_argument("--evict-idle-after", type=seconds(False), default=5.0,
                   help=f"{what}: when every slot is taken, one idle this many seconds gives its slot to a new client (default %(default)s)")
    p.add_argument("--metrics", help=f"{what}: write the final figures (JSON) here at shutdown")
    p.add_argument("-q", "--quiet", action="store_true", help=f"{what}: no log lines")


def resp_options_of(args) -> Dict[str, Any]:
    """resp_options from the arguments of :func:`add_resp_arguments`."""
    return resp_options(args.listen, args.max_connections, args.idle_timeout, args.evict_idle_after, args.allow_remote, args.quiet)
