"""`ssdlab nvme serve`: an emulated SSD as an NVMe/TCP subsystem, for real NVMe hosts (the Linux
kernel's nvme-tcp, nvme-cli).

The target runs in Rust (crates/nvmet); see docs/nvme-tcp.md for what it implements and how a
host connects.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from . import _native
from .args import int_in
from .serving import add_force_argument, add_listener_arguments, foreground, listener_options

DEFAULT_NQN = "nqn.2026-11.dev.ssdlab:ssd"


def serve(config: Dict[str, Any], listen: str = "127.0.0.1:4420", image: Optional[str] = None,
          latency: str = "none", nqn: str = DEFAULT_NQN, max_connections: int = 64,
          metrics_out: Optional[str] = None, snapshot_every: int = 0, quiet: bool = False,
          idle_timeout_s: float = 0.0, evict_idle_after_s: Optional[float] = None,
          allow_remote: bool = False) -> Dict[str, Any]:
    """Serve a device (a resolved config, conventional or FDP) as NVMe/TCP subsystem ``nqn`` with
    one namespace until SIGINT/SIGTERM; returns the final metrics. ``image``: contents and device
    state persist there (the NBD server's image format and journal); ``latency`` "emulated":
    completions leave at the device's modelled completion time. ``allow_remote`` permits a
    non-loopback ``listen`` (NVMe/TCP here has no authentication or encryption)."""
    opts = {"listen": listen, "image": image, "latency": latency, "nqn": nqn, "max_connections": max_connections,
            "metrics_out": metrics_out, "snapshot_every": snapshot_every, "quiet": quiet,
            "idle_timeout_s": idle_timeout_s, "evict_idle_after_s": evict_idle_after_s, "allow_remote": allow_remote}
    return foreground(_native.nvme_serve, config, opts)


def stats(addr: str, nqn: str = DEFAULT_NQN) -> Dict[str, Any]:
    """Live metrics of the target at HOST:PORT, read as an NVMe host reads them (a controller's
    vendor log page C0h, which `nvme get-log /dev/nvmeX --log-id=0xc0 --log-len=N` reads too)."""
    return _native.nvme_stats(addr, nqn)


def cmd_stats(args) -> int:
    m = stats(args.address, args.nqn)
    text = json.dumps(m, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        sys.stdout.write(text)
    elif not args.out:
        c = m["nvme"]["counters"]
        w = m["latency_ns"]["write"]
        print(f"DLWA {m['dlwa']:.4f}  host writes {m['host_write_bytes'] / 2**30:.3f} GiB  "
              f"NAND writes {m['nand_write_bytes'] / 2**30:.3f} GiB  commands {c['commands']} ({c['io_commands']} I/O)  "
              f"controllers {m['nvme']['controllers']}")
        if w.get("count"):
            print(f"write latency p50 {w['p50'] / 1e3:.1f} us  p99 {w['p99'] / 1e3:.1f} us")
    return 0


def cmd_serve(args) -> int:
    from .config import resolve

    if args.image and Path(args.image).is_dir():
        raise ValueError(f"--image {args.image}: is a directory; give an image file (created if missing)")
    cfg = resolve(config=args.config)
    m = serve(cfg, image=args.image, latency=args.latency, nqn=args.nqn, metrics_out=args.metrics_out,
              snapshot_every=args.snapshot_every, **listener_options(args))
    if not args.quiet:
        c = m["nvme"]["counters"]
        print(f"served {c['commands']} commands ({c['io_commands']} I/O) on {m['nvme']['connections_total']} "
              f"connections; DLWA {m['dlwa']:.4f}, host writes {m['host_write_bytes'] / 2**30:.2f} GiB", file=sys.stderr)
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("nvme", help="NVMe/TCP: serve an emulated SSD to NVMe hosts (Linux nvme-tcp, nvme-cli)",
                       description="NVMe over TCP. `ssdlab nvme serve CONFIG` makes the device of CONFIG an NVMe "
                                   "subsystem with one namespace; a Linux host connects with `nvme connect -t tcp "
                                   "-a 127.0.0.1 -s 4420 -n NQN`. See docs/nvme-tcp.md.")
    a = p.add_subparsers(dest="action", required=True)
    s = a.add_parser("serve", help="serve the device of CONFIG over NVMe/TCP until Ctrl-C or SIGTERM",
                     description="Serve the device of CONFIG (conventional or FDP personality) as an NVMe/TCP "
                                 "subsystem: a discovery controller and one namespace (NSID 1) whose logical "
                                 "block is the device's sector. SIGUSR1 writes metrics.json to --metrics-out.")
    s.add_argument("config", help="device config (conventional or FDP personality)")
    s.add_argument("--image", help="image file: contents + device state persist across restarts "
                                   "(default: in memory, gone when the target stops)")
    s.add_argument("--latency", choices=["none", "emulated"], default="none",
                   help="none: complete when done; emulated: complete at the emulated SSD's completion time")
    s.add_argument("--nqn", default=DEFAULT_NQN, help="the subsystem's NVMe qualified name (default %(default)s)")
    s.add_argument("--snapshot-every", type=int_in(0, 2**62), default=0,
                   help="journal records between device-state snapshots (default 1048576)")
    add_force_argument(s)
    add_listener_arguments(s, "127.0.0.1:4420", max_connections=64,
                           remote="NVMe/TCP here has no authentication or encryption: anyone who reaches the port "
                                  "reads and writes the namespace",
                           metrics_out="metrics.json and timeseries.csv (also on SIGUSR1)")
    s.set_defaults(func=cmd_serve)

    st = a.add_parser("stats", help="live metrics of a running `ssdlab nvme serve` (read as an NVMe host)",
                      description="Connect to the target at ADDRESS as an NVMe/TCP host and read its live metrics "
                                  "(the controller's vendor log page C0h).")
    st.add_argument("address", help="HOST:PORT of the target")
    st.add_argument("--nqn", default=DEFAULT_NQN, help="the subsystem's NQN (default %(default)s)")
    st.add_argument("--json", action="store_true", help="print the whole metrics.json")
    st.add_argument("--out", help="write metrics.json here")
    st.set_defaults(func=cmd_stats)
