"""`ssdlab uio`: a UIO system of device processes (up, device, host) and hosts attached to a
device (kv-serve: Redis clients through it; console: put/get lines)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from ... import _native
from ...serving import add_resp_arguments, foreground, resp_options_of, write_resp_metrics
from .api import CONSOLE_HELP, Devices, console


def _cmd_up(args: argparse.Namespace) -> int:
    """`ssdlab uio up N`: a whole system until Ctrl-C/SIGTERM; prints where each device is."""
    if not args.count:
        raise ValueError("ssdlab uio up --count N [--dir DIR] [--traditional]")
    stop = []
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        with Devices(args.count, device=args.device, dir=args.dir, traditional=args.traditional, data=args.data) as d:
            for i, sock in enumerate(d.sockets):
                print(f"device {i}: NET {d.net[i]}, host socket {sock}" + (f", host daemon {d.daemons[i]}" if d.daemons else ""),
                      flush=True)
            print(f"attach a host: ssdlab uio kv-serve --attach {d.sockets[0]} (Ctrl-C stops the system)", flush=True)
            try:
                while not stop:
                    signal.pause()
            except KeyboardInterrupt:
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _cmd_uio(args: argparse.Namespace) -> int:
    if args.action == "up":
        return _cmd_up(args)
    if args.action == "console":
        if not args.attach:
            raise ValueError("ssdlab uio console --attach SOCKET")
        if sys.stdin.isatty():
            print(f"attached to {args.attach}; {CONSOLE_HELP}", file=sys.stderr)
        return 1 if console(args.attach, sys.stdin) and not sys.stdin.isatty() else 0
    if args.action == "device":
        if args.id is None or not args.net or not args.socket:
            raise ValueError("ssdlab uio device --id I --net HOST:PORT,HOST:PORT,... --socket PATH")
        st = foreground(_native.uio_device_serve, args.id, args.net.split(","), args.socket, args.device, args.quiet,
                        args.relay, args.allow_remote, args.data, args.nand_timing)
        print(json.dumps(st, sort_keys=True), flush=True)
        return 0
    if args.action == "host":
        if not args.attach or not args.net:
            raise ValueError("ssdlab uio host --attach SOCKET --net HOST:PORT")
        n = foreground(_native.uio_host_serve, args.attach, args.net, args.quiet, args.allow_remote)
        print(json.dumps({"forwarded": n}), flush=True)
        return 0
    if not args.attach:
        raise ValueError("ssdlab uio kv-serve --attach SOCKET [--listen HOST:PORT]")
    m = foreground(_native.uio_kv_serve, args.attach, resp_options_of(args))
    write_resp_metrics(args, m)
    if not args.quiet:
        print(f"served {m['total_connections_received']} connections, {m['total_commands_processed']} commands "
              f"({m['store']['puts']} puts, {m['store']['gets']} gets through the device)", file=sys.stderr)
    return 0


def add_cli(sub: Any) -> None:
    """Register `ssdlab uio` on the CLI's subparsers."""
    from ...args import int_in

    u = sub.add_parser("uio", help="uio-kv: run a UIO device process, or serve Redis clients through one as its host",
                       epilog="up: start --count device processes (and with --traditional their host daemons), print their\n"
                              "  sockets, run until Ctrl-C/SIGTERM\n"
                              "device: one device of a UIO system until Ctrl-C/SIGTERM: NET for its peers on --net's entry\n"
                              "  --id, hosts attach on --socket; prints a ready line, then its counters (JSON) at exit\n"
                              "kv-serve: attach to a device as its host and serve RESP clients (SET, GET) through it\n"
                              "console: attach as a host and run put/get typed (or piped) one per line\n"
                              "host: the traditional path's host daemon: attached to its device (run with --relay this --net),\n"
                              "  it takes the requests the device relays from its peers and submits them back through its queues\n"
                              "docs: docs/case-studies/uio-kv.md",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    u.add_argument("action", choices=["up", "device", "kv-serve", "host", "console"])
    u.add_argument("--count", type=int_in(1, 64), help="up: devices in the system")
    u.add_argument("--dir", help="up: where the sockets and logs go (default: a temporary directory)")
    u.add_argument("--traditional", action="store_true", help="up: the traditional path's system (devices with host daemons)")
    u.add_argument("--id", type=int_in(0, 63), help="device: this device's id (its index in --net)")
    u.add_argument("--net", help="device: every device's NET address, by id, comma-separated; host: HOST:PORT to serve on "
                                 "(loopback addresses unless --allow-remote)")
    u.add_argument("--socket", help="device: the Unix socket its host attaches on")
    u.add_argument("--device", default="quick", choices=["quick", "paper"], help="up, device: the flash (default %(default)s)")
    u.add_argument("--relay", help="device: the traditional path's device: hosts route, peers' requests go to the host daemon at "
                                   "this HOST:PORT")
    u.add_argument("--attach", help="kv-serve, host, console: the device's socket")
    u.add_argument("--nand-timing", action="store_true",
                   help="device: add the flash's time (FEMU's black-box SSD timings) to each command's simulated latency, "
                        "which the device accounts beside wall-clock time and returns in the command's completion")
    u.add_argument("--data", help="device: keep the flash in DATA/flash.img and recover it at start (a device killed and "
                                  "restarted serves every acknowledged put); up: DATA/deviceI for device I")
    add_resp_arguments(u, "kv-serve")
    u.set_defaults(func=_cmd_uio)
