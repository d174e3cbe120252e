"""`ssdlab serve` (an emulated SSD over NBD) and `ssdlab stats` (its live metrics).

The server runs in Rust (crates/nbd); see docs/nbd.md for clients, exports and crash safety.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import _native
from .serving import add_force_argument, add_listener_arguments, foreground, listener_options
from .args import int_in
from .units import parse_size

def parse_export(text: str) -> Dict[str, Any]:
    """NAME=START:SIZE[:PLACEMENT] -> an export (placement = an FDP placement identifier)."""
    m = re.fullmatch(r"([^=]+)=([^:]+):([^:]+)(?::(\d+))?", text)
    if not m:
        raise ValueError(f"--export {text!r}: expected NAME=START:SIZE[:PLACEMENT], e.g. logs=0:4G:1")
    name, start, size, pid = m.groups()
    return {"name": name, "offset": parse_size(start, "--export START"), "size": parse_size(size, "--export SIZE"),
            "placement": None if pid is None else int(pid), "read_only": False,
            "description": f"bytes {start}+{size}" + (f", placement {pid}" if pid else "")}


def serve(config: Dict[str, Any], listen: str = "127.0.0.1:10809", image: Optional[str] = None,
          latency: str = "none", exports: Optional[List[Dict[str, Any]]] = None, per_handle: bool = False,
          max_connections: int = 16, max_request: int = 32 << 20, metrics_out: Optional[str] = None,
          snapshot_every: int = 0, quiet: bool = False, tls_cert: Optional[str] = None,
          tls_key: Optional[str] = None, handshake_timeout_s: float = 10.0, idle_timeout_s: float = 0.0,
          allow_remote: bool = False, evict_idle_after_s: Optional[float] = None) -> Dict[str, Any]:
    """Serve a device (a resolved config) until SIGINT/SIGTERM; returns the final metrics.
    With ``tls_cert`` and ``tls_key`` (PEM files) every client must use TLS. A client has
    ``handshake_timeout_s`` for its whole handshake; ``idle_timeout_s`` > 0 closes connections
    idle that long in transmission; when every slot is taken, a connection idle
    ``evict_idle_after_s`` (default 1 s; 0: never) gives its slot to a new client. ``allow_remote`` permits a non-loopback ``listen`` without
    TLS (unencrypted, unauthenticated: see docs/nbd.md)."""
    opts = {"listen": listen, "image": image, "latency": latency, "exports": exports, "per_handle": per_handle,
            "max_connections": max_connections, "max_request": max_request, "metrics_out": metrics_out,
            "snapshot_every": snapshot_every, "quiet": quiet, "tls_cert": tls_cert, "tls_key": tls_key,
            "handshake_timeout_s": handshake_timeout_s, "idle_timeout_s": idle_timeout_s,
            "evict_idle_after_s": evict_idle_after_s, "allow_remote": allow_remote}
    return foreground(_native.nbd_serve, config, opts)


def stats(addr: str, tls_ca: Optional[str] = None) -> Dict[str, Any]:
    """Live metrics of the server at HOST:PORT (read from its ssdlab-metrics export). For a TLS
    server give the CA certificate (PEM file, or a directory holding ca-cert.pem)."""
    if tls_ca and Path(tls_ca).is_dir():
        tls_ca = str(Path(tls_ca) / "ca-cert.pem")
    return _native.nbd_stats(addr, tls_ca)


def cmd_serve(args) -> int:
    from .config import resolve

    max_request = parse_size(args.max_request, "--max-request")
    if not 512 <= max_request <= 2**31 - 1:
        raise ValueError(f"--max-request {args.max_request}: must be 512 bytes to 2G - 1 (a client must be able to "
                         "read and write a sector)")
    if args.image and Path(args.image).is_dir():
        raise ValueError(f"--image {args.image}: is a directory; give an image file (created if missing)")
    listener = listener_options(args)
    cfg = resolve(config=args.config)
    exports = [parse_export(e) for e in args.export] if args.export else None
    m = serve(cfg, image=args.image, latency=args.latency, exports=exports, per_handle=args.per_handle_exports,
              max_request=max_request, metrics_out=args.metrics_out, snapshot_every=args.snapshot_every, **listener)
    if not args.quiet:
        print(f"served {m['nbd']['requests']} requests on {m['nbd']['connections_total']} connections; "
              f"DLWA {m['dlwa']:.4f}, host writes {m['host_write_bytes'] / 2**30:.2f} GiB", file=sys.stderr)
    return 0


def cmd_stats(args) -> int:
    m = stats(args.address, args.tls_ca)
    text = json.dumps(m, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    if args.json or not args.out:
        if args.json:
            sys.stdout.write(text)
        elif "dlwa" not in m:  # another disk than the emulated SSD (`ssdlab rmml serve`)
            lat = m.get("latency_ns", {})
            d = m.get("device", {})
            print(f"{m.get('backend', 'disk')}: requests {m['nbd']['requests']}  connections {m['nbd']['connections_active']} open  "
                  + "  ".join(f"{k} p99 {v['p99'] / 1e3:.1f} us" for k, v in lat.items() if v.get("count"))
                  + (f"  DPU cache hit {d['cache_hit_ratio']:.3f}" if isinstance(d.get("cache_hit_ratio"), float) else ""))
        else:
            w = m["latency_ns"]["write"]
            print(f"DLWA {m['dlwa']:.4f}  host writes {m['host_write_bytes'] / 2**30:.3f} GiB  "
                  f"NAND writes {m['nand_write_bytes'] / 2**30:.3f} GiB  GC events {m['gc_events']}  "
                  f"requests {m['nbd']['requests']}  connections {m['nbd']['connections_active']} open")
            if w.get("count"):
                print(f"write latency p50 {w['p50'] / 1e3:.1f} us  p99 {w['p99'] / 1e3:.1f} us")
    return 0


def add_cli(sub) -> None:
    s = sub.add_parser("serve", help="serve an emulated SSD over NBD (qemu, fio, nbdcopy, ... use it as a disk)",
                       description="Serve the device of CONFIG over the NBD protocol until Ctrl-C or SIGTERM. "
                                   "SIGUSR1 writes metrics.json to --metrics-out. See docs/nbd.md.")
    s.add_argument("config", help="device config (conventional or FDP personality)")
    s.add_argument("--image", help="image file: contents + device state persist across restarts "
                                   "(default: in memory, gone when the server stops)")
    s.add_argument("--latency", choices=["none", "emulated"], default="none",
                   help="none: reply when done; emulated: reply at the emulated SSD's completion time")
    s.add_argument("--export", action="append", metavar="NAME=START:SIZE[:PLACEMENT]",
                   help="an export (repeatable); default: the whole device as 'ssdlab'")
    s.add_argument("--per-handle-exports", action="store_true",
                   help="FDP: also one export per placement handle (handle0, handle1, ...), each a slice")
    s.add_argument("--max-request", default="32M", help="largest read/write payload, 512 to 2G-1 (default %(default)s)")
    s.add_argument("--snapshot-every", type=int_in(0, 2**62), default=0,
                   help="journal records between device-state snapshots (default 1048576)")
    add_force_argument(s)
    add_listener_arguments(s, "127.0.0.1:10809", handshake_timeout=10.0,
                           tls="PEM certificate (chain): clients must then use TLS (NBD STARTTLS)",
                           remote="without TLS anyone who reaches the port reads and writes the disk unencrypted "
                                  "(docs/nbd.md); with --tls-cert it is allowed",
                           metrics_out="metrics.json and timeseries.csv (also on SIGUSR1)")
    s.set_defaults(func=cmd_serve)

    st = sub.add_parser("stats", help="live metrics of a running `ssdlab serve`")
    st.add_argument("address", help="HOST:PORT of the server")
    st.add_argument("--json", action="store_true", help="print the whole metrics.json")
    st.add_argument("--out", help="write metrics.json here")
    st.add_argument("--tls-ca", help="TLS servers: the CA certificate (PEM file, or a directory with ca-cert.pem)")
    st.set_defaults(func=cmd_stats)
