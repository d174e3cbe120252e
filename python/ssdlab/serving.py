"""What ssdlab's servers (NBD, NVMe/TCP, memcached, RESP, serprog, the rmml node and the dpuswap
NBD disk) share on the Python side: running one in the foreground, one set of listener options
with one spelling and one check on every command (--listen, --allow-remote, --max-connections,
--handshake-timeout, --idle-timeout, --evict-idle-after, --tls-cert/--tls-key, --metrics-out,
--quiet; :func:`add_listener_arguments` adds them, :func:`listener_options` turns them into the
native servers' keyword arguments), and a free port for tests and helpers."""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypeVar

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


def _ephemeral_range() -> Tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, chosen at random below the OS's ephemeral range: the OS
    hands ephemeral ports to every client connection and every bind to port 0, so a port taken
    from that range can be given to someone else between this call and the server's bind (seen
    with tests on two workers). Ports below it are only ever taken by name; from 20000 up, clear
    of Ray's worker ports (10002-19999 by default), which a Ray head started on the chosen port
    refuses to overlap."""
    lo, _ = _ephemeral_range()
    low = 20000 if lo > 22000 else 1024
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, lo)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that range is full: the OS's choice
        s.bind((host, 0))
        return s.getsockname()[1]


def address_in_use(err: BaseException) -> bool:
    """``err`` says a listener's address was taken (errno 98, in an OSError or a server's log)."""
    return "Address already in use" in str(err)


# When every slot is taken, a connection idle this many seconds gives its slot to a new client
# (the server core's DEFAULT_EVICT_IDLE_AFTER): idle clients cannot keep a good one out.
EVICT_IDLE_AFTER = 1.0


def add_listener_arguments(p: argparse.ArgumentParser, listen: Optional[str], *, what: str = "",
                           max_connections: Optional[int] = 16, evict_idle_after: Optional[float] = EVICT_IDLE_AFTER,
                           handshake_timeout: Optional[float] = None, tls: Optional[str] = None,
                           remote: str = "it has no authentication here", metrics_out: Optional[str] = "metrics.json",
                           listen_help: Optional[str] = None, max_connections_help: Optional[str] = None) -> None:
    """A server's listener options, spelled and checked the same on every serving command:
    --listen, --allow-remote, --max-connections, --handshake-timeout, --idle-timeout,
    --evict-idle-after (old spelling --idle-evict, still accepted), --tls-cert/--tls-key,
    --metrics-out, -q. :func:`listener_options` turns them into the native servers' keyword
    arguments.

    ``listen``: the default address (None: the command picks one per action, and says so in
    ``listen_help``); ``what``: a prefix for the help lines of a command with several actions
    ("serve"); ``max_connections`` / ``evict_idle_after`` / ``handshake_timeout``: their
    defaults, None for a server without the setting (``max_connections_help`` for a default
    that depends on the action: then the default is None); ``tls``: the help of --tls-cert for a
    server with TLS (None: no TLS flags); ``remote``: why a non-loopback address needs
    --allow-remote; ``metrics_out``: the files written to --metrics-out at exit (None: the
    server writes none)."""
    from .args import int_in, seconds

    pre = f"{what}: " if what else ""
    p.add_argument("--listen", default=listen,
                   help=listen_help or f"{pre}HOST:PORT (default %(default)s; port 0: a free one; loopback unless "
                                       "--allow-remote)")
    p.add_argument("--allow-remote", action="store_true", help=f"{pre}allow a non-loopback --listen: {remote}")
    if max_connections is not None or max_connections_help:
        p.add_argument("--max-connections", type=int_in(1, 65536), default=max_connections,
                       help=max_connections_help or f"{pre}clients served at once, 1..65536 (default %(default)s)")
    if handshake_timeout is not None:
        p.add_argument("--handshake-timeout", type=seconds(positive=True), default=handshake_timeout, metavar="S",
                       help=f"{pre}seconds a client has for its whole handshake (default %(default)s)")
    p.add_argument("--idle-timeout", type=seconds(positive=False), default=0.0, metavar="S",
                   help=f"{pre}close a connection idle this many seconds (default 0: never)")
    if evict_idle_after is not None:
        p.add_argument("--evict-idle-after", type=seconds(positive=False), default=evict_idle_after, metavar="S",
                       help=f"{pre}when every slot is taken, a client idle this many seconds gives its slot to a new "
                            "client (default %(default)s; 0: never)")
        deprecated_alias(p, "--idle-evict", "--evict-idle-after", type=seconds(positive=False))
    if tls is not None:
        p.add_argument("--tls-cert", help=f"{pre}{tls}")
        p.add_argument("--tls-key", help=f"{pre}PEM private key of --tls-cert")
    if metrics_out is not None:
        p.add_argument("--metrics-out", metavar="DIR", help=f"{pre}write {metrics_out} to this directory at shutdown")
    p.add_argument("-q", "--quiet", action="store_true", help=f"{pre}no log lines")


def add_force_argument(p: argparse.ArgumentParser, what: str = "") -> None:
    """--force: build the device even if its memory estimate exceeds the memory available
    (the check itself is the core's, when the device is built; `ssdlab config check` shows the
    estimate). A server refused without it says so in one line, before allocating anything."""
    pre = f"{what}: " if what else ""
    p.add_argument("--force", action="store_true",
                   help=f"{pre}build the device even if its memory estimate exceeds the memory available")


def deprecated_alias(p: argparse.ArgumentParser, old: str, new: str, **kw: Any) -> None:
    """``old`` still accepted for ``new`` (hidden from --help; kept for a release)."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, dest=dest, help=argparse.SUPPRESS, **kw)


def listener_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The keyword arguments of the serving functions (``ssdlab.nbd.serve``, ``ssdlab.nvme.serve``,
    ``Flash.serve``, the cache, kv and rmml servers) from :func:`add_listener_arguments`'s
    flags: ``listen``, ``allow_remote``, ``idle_timeout_s``, ``quiet``, and those the command has
    of ``max_connections``, ``handshake_timeout_s``, ``evict_idle_after_s``, ``tls_cert`` and
    ``tls_key``. --tls-cert without --tls-key (or the other way round) is refused here."""
    o: Dict[str, Any] = {"listen": args.listen, "allow_remote": args.allow_remote, "idle_timeout_s": args.idle_timeout,
                         "quiet": args.quiet}
    for flag, key in (("max_connections", "max_connections"), ("handshake_timeout", "handshake_timeout_s"),
                      ("evict_idle_after", "evict_idle_after_s"), ("tls_cert", "tls_cert"), ("tls_key", "tls_key")):
        if hasattr(args, flag):
            o[key] = getattr(args, flag)
    if bool(o.get("tls_cert")) != bool(o.get("tls_key")):
        raise ValueError("--tls-cert and --tls-key go together")
    return o


def write_metrics(metrics_out: Optional[str], metrics: Mapping[str, Any]) -> Optional[Path]:
    """DIR/metrics.json for --metrics-out (the directory is made); None without it."""
    if not metrics_out:
        return None
    d = Path(metrics_out)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "metrics.json"
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return path


def resp_options(listen: str = "127.0.0.1:6379", max_connections: int = 128, idle_timeout_s: float = 0.0,
                 evict_idle_after_s: float = EVICT_IDLE_AFTER, allow_remote: bool = False, quiet: bool = False) -> Dict[str, Any]:
    """A RESP server's options, as the native servers take them."""
    return {"listen": listen, "max_connections": max_connections, "idle_timeout_s": idle_timeout_s,
            "evict_idle_after_s": evict_idle_after_s, "allow_remote": allow_remote, "quiet": quiet}


def add_resp_arguments(p: argparse.ArgumentParser, what: str = "serve") -> None:
    """The RESP servers' options (`ssdlab kv serve`, `ssdlab uio kv-serve`); --metrics FILE is
    the deprecated spelling of --metrics-out DIR."""
    add_listener_arguments(p, "127.0.0.1:6379", what=what, max_connections=128, remote="RESP has no authentication here")
    p.add_argument("--metrics", help=argparse.SUPPRESS)


def resp_options_of(args: argparse.Namespace) -> Dict[str, Any]:
    """resp_options from the arguments of :func:`add_resp_arguments`."""
    return resp_options(**listener_options(args))


def write_resp_metrics(args: argparse.Namespace, metrics: Mapping[str, Any]) -> Optional[Path]:
    """A RESP server's final figures to --metrics-out DIR (or the deprecated --metrics FILE)."""
    if getattr(args, "metrics", None):
        Path(args.metrics).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        return Path(args.metrics)
    return write_metrics(args.metrics_out, metrics)
