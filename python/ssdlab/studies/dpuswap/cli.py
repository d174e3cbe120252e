"""`ssdlab rmml node|run|serve|guest`: a remote memory node, one run of a spec file, a backend
as an NBD disk, one guest swapping onto a backend.

The server flags are every ssdlab server's (``ssdlab.serving.add_listener_arguments``: --listen,
--allow-remote, --max-connections, --idle-timeout, --evict-idle-after, --metrics-out, -q), for
`rmml node` and `rmml serve` alike; their defaults differ by action (the address, the
connection limit)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from ... import _native
from ...config import read_toml
from ...serving import add_listener_arguments, foreground, listener_options
from ...units import parse_size
from .api import BACKENDS, guest_run, run, serve


def _cmd_rmml(args: argparse.Namespace) -> int:
    if args.action == "node":
        cap = parse_size(args.capacity, "--capacity")
        o = listener_options(args)
        st = foreground(_native.rmml_node_serve, o["listen"] or "127.0.0.1:0", cap, o["quiet"], o["allow_remote"],
                        o["max_connections"] or 64, o["idle_timeout_s"], o["evict_idle_after_s"])
        if not args.quiet:
            print(f"rmml node stopped: {st['regions']} regions, {st['used_bytes']} bytes in use")
        return 0
    if args.action == "serve":
        s: Dict[str, Any] = read_toml(args.spec, "dpuswap spec") if args.spec else {"backend": "dpuswap"}
        if args.backend:
            s["backend"] = args.backend
        if args.nodes:
            s["nodes"] = [a.strip() for a in args.nodes.split(",") if a.strip()]
        max_request = parse_size(args.max_request, "--max-request")
        if not 512 <= max_request <= 2**31 - 1:
            raise ValueError(f"--max-request {args.max_request}: must be 512 bytes to 2G - 1")
        o = listener_options(args)
        o["listen"] = o["listen"] or "127.0.0.1:10809"
        o["max_connections"] = o["max_connections"] or 16
        m = serve(s, parse_size(args.size, "--size"), latency=args.latency or "none", max_request=max_request,
                  metrics_out=args.metrics_out, **o)
        if not args.quiet:
            lat = m["latency_ns"]
            print(f"rmml serve: {m['backend']}: {m['nbd']['requests']} requests; modelled read p99 "
                  f"{lat['read']['p99'] / 1e3:.1f} us, write p99 {lat['write']['p99'] / 1e3:.1f} us", file=sys.stderr)
        return 0
    if args.action == "guest":
        return _cmd_guest(args)
    if not args.spec:
        raise ValueError("ssdlab rmml run SPEC.toml [--out DIR]")
    s = read_toml(args.spec, "dpuswap spec")
    res = run(s, progress=not args.quiet and sys.stderr.isatty())
    text = json.dumps(res, indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "summary.json").write_text(text)
    w = res["workload"]
    print(f"{res['backend']}: {w['kind']} completion {w['completion_ns'] / 1e9:.3f} s (modelled)"
          + (f", {res['paging']['major_faults']} faults (+{res['paging']['minor_faults']} read ahead), fault p99 {res['paging']['fault_latency_ns']['p99'] / 1e3:.1f} us" if "paging" in res else "")
          + (f"; wrote {Path(args.out) / 'summary.json'}" if args.out else ""))
    return 0


def _cmd_guest(args: argparse.Namespace) -> int:
    """One guest swap run with the reproduction's tables (experiments/dpuswap/experiment.toml)."""
    from ...vm import VmError
    from ..reproduce import load_spec
    from .experiment import specs
    from .runner import guest_resolve

    spec = load_spec("dpuswap")
    common, m = specs(spec, "quick")
    fraction = float(args.fraction)
    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction {args.fraction}: expected 0 < f <= 1")
    ws = parse_size(args.working_set, "--working-set")
    block = common["rmml"].get("block_bytes", 1 << 20)
    g = {"backend": args.backend or "dpuswap", "local_fraction": fraction, "working_set_bytes": ws, "ops": int(args.ops),
         "memory_bytes": parse_size(args.memory, "--memory"), "seed": spec.get("seed", 42), "latency": args.latency or "emulated",
         "read_fraction": spec["kv"]["read_fraction"], "zipf_theta": spec["kv"]["zipf_theta"],
         "compressibility": spec["kv"]["compressibility"],
         "rmml": dict(common["rmml"], cache_bytes=max(1, int(ws * m["dpu_cache_fraction"]) // block) * block)}
    if g["backend"] == "znswap":
        g["znswap"] = common["znswap"]
    g = guest_resolve({"guest": g})["guest"]
    nodes = [a.strip() for a in (args.nodes or "").split(",") if a.strip()]
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr))
    out = Path(args.out) if args.out else None
    try:
        r = guest_run(g, nodes, out=out, log=say)
    except (VmError, RuntimeError) as e:
        print(f"ssdlab rmml guest: error: {e}", file=sys.stderr)
        return 1
    if out:
        (out / "guest.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    print(f"{g['backend']} at {fraction * 100:.0f}% local: {r['throughput_iops']:.0f} IOPS, clat mean {r['clat_mean_ns'] / 1e3:.1f} us, "
          f"p99 {r['clat_p99_ns'] / 1e3:.0f} us; {r['swap_ins']} swap-ins, {r['swap_outs']} swap-outs (guest wall clock)"
          + (f"; wrote {out / 'guest.json'}" if out else ""))
    return 0


def add_cli(sub: Any) -> None:
    """Register `ssdlab rmml` on the CLI's subparsers."""
    from ...args import int_in

    r = sub.add_parser("rmml", help="dpuswap: serve a remote memory node, run one swap experiment, or serve a backend over NBD",
                       epilog="node: lend --capacity bytes of memory to RMMLs over TCP until Ctrl-C/SIGTERM (prints its address)\n"
                              "run: one run of a spec file (TOML: backend, local_fraction, [workload.kv|sort|fio], [rmml], ...)\n"
                              "serve: the backend of a spec file (or --backend) as an NBD disk until Ctrl-C/SIGTERM:\n"
                              "    ssdlab rmml serve --size 256M &  qemu-io -f raw -c 'write -P 7 0 1M' nbd://127.0.0.1:10809/dpuswap\n"
                              "guest: a Linux guest (ssdlab vm) swapping onto the backend under a memory limit of --fraction\n"
                              "docs: docs/case-studies/dpuswap.md",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("action", choices=["node", "run", "serve", "guest"])
    r.add_argument("spec", nargs="?", help="run: spec file; serve: spec file for the backend and its tables (optional)")
    r.add_argument("--capacity", default="1G", help="node: memory to lend, e.g. 512M, 4G (default %(default)s)")
    r.add_argument("--out", help="run: directory for summary.json; guest: for guest.json and the guest's logs")
    r.add_argument("--backend", choices=BACKENDS, help="serve, guest: the backend (overrides the spec's; default dpuswap)")
    r.add_argument("--fraction", default="0.5", help="guest: local memory as a share of the workload's footprint (default %(default)s)")
    r.add_argument("--working-set", default="32M", help="guest: the working set (default %(default)s)")
    r.add_argument("--ops", default=10000, type=int_in(1, 10**9), help="guest: fio operations (default %(default)s)")
    r.add_argument("--memory", default="512M", help="guest: the guest's RAM (default %(default)s)")
    r.add_argument("--size", default="256M", help="serve: the disk's size, e.g. 1G (rounded up to the backend's unit; default %(default)s)")
    r.add_argument("--nodes", help="serve, guest: remote memory nodes HOST:PORT,HOST:PORT (default: the spec's, else two in-process ones)")
    r.add_argument("--latency", choices=["none", "emulated"],
                   help="serve (default none), guest (default emulated): none: reply when done; emulated: reply at the "
                        "modelled completion time")
    r.add_argument("--max-request", default="32M", help="serve: largest read/write payload (default %(default)s)")
    add_listener_arguments(r, None, listen_help="node: HOST:PORT (port 0: a free one; default 127.0.0.1:0); serve: the NBD "
                                                "address (default 127.0.0.1:10809); loopback unless --allow-remote",
                           max_connections_help="node: clients at once (default 64); serve: clients at once (default 16)",
                           remote="node: the node protocol has no authentication, anyone who can reach the port can read "
                                  "and write the memory it lends; serve: NBD here is unencrypted and unauthenticated",
                           metrics_out="metrics.json (serve; also on SIGUSR1)")
    r.set_defaults(func=_cmd_rmml)
