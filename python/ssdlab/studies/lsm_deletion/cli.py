"""`ssdlab kv run|serve|generate`: one measured run of the LSM store from a spec file (or
workload files), the store served to Redis clients, a run's phases written as workload files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

from ...config import read_toml
from ...serving import add_force_argument, add_resp_arguments, listener_options, write_resp_metrics
from .api import generate, run_lsm, serve

KV_EPILOG = """serve: Redis clients (redis-cli, redis-benchmark, redis-py) on the store: strings, hashes, sorted sets,
  keys and expiry times (GET, SET [NX|XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL], DEL, MGET, INCRBYFLOAT, HSET, ZADD, ZRANGE,
  KEYS, SCAN, RENAME, EXPIRE, TTL, ...; no lists or sets); DEL and an expired key become tombstones tracked to erasure.
  --data DIR keeps the store across restarts (and kill -9: a write is answered once journaled on disk).
spec file (TOML):
  [device]                a ZNS device config, e.g. preset = "zns-ssd"
  [lsm]                   store keys: policy = "fade", memtable_bytes, size_ratio, ...
  ops_per_s, delete_threshold_fraction, seed, audit = true
  [[phases]]              name, inserts, updates, point_deletes, point_lookups, ... (K-V generator counts)
docs: docs/case-studies/lsm-deletion.md"""


def load_kv_spec(path: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A `kv` spec file: its [device] table (default the zns-ssd preset) and the rest."""
    d = read_toml(path, "kv spec")
    device = d.pop("device", {"preset": "zns-ssd"})
    return device, d


def _cmd_serve(args: argparse.Namespace) -> int:
    device, spec = load_kv_spec(args.path) if args.path else ({"preset": "zns-ssd"}, {})
    extra = sorted(set(spec) - {"lsm"})
    if extra and not args.quiet:
        print(f"ssdlab kv serve: {', '.join(extra)} of the spec are for `kv run`; serving uses [device] and [lsm]", file=sys.stderr)
    lsm = spec.get("lsm", {})
    if not isinstance(lsm, dict):
        raise ValueError(f"{args.path}: [lsm] must be a table")
    if args.audit:
        lsm = dict(lsm, track_deletes=True)
    m = serve(device, lsm, audit=args.audit, data=args.data, **listener_options(args))
    written = write_resp_metrics(args, m)
    if not args.quiet:
        st = m["store"]
        print(f"served {m['total_connections_received']} connections, {m['total_commands_processed']} commands; store: "
              f"{st['lsm']['puts']} puts, {st['lsm']['deletes']} deletes, WA {st['write_amplification']['total']:.2f}"
              + (f"; metrics in {written}" if written else ""), file=sys.stderr)
        a = (m.get("closing") or {}).get("audit")
        if a:
            print(f"audit: {a['survivors_pending'] + a['survivors_lsm_persisted']} deleted values still on the NAND (not erased yet), "
                  f"{a['survivors_erase_persisted']} after erase-level persistence", file=sys.stderr)
    return 0


def _cmd_kv(args: argparse.Namespace) -> int:
    if args.action == "serve":
        return _cmd_serve(args)
    if not args.path:
        raise ValueError(f"ssdlab kv {args.action} SPEC.toml ...")
    device, spec = load_kv_spec(args.path)
    if args.action == "generate":
        if not args.out:
            raise ValueError("ssdlab kv generate SPEC.toml --out DIR")
        for p, n in generate(spec, args.out):
            print(f"{p}: {n} operations")
        return 0
    if not args.out:
        raise ValueError("ssdlab kv run SPEC.toml --out DIR [--workload PHASE1.txt PHASE2.txt ...]")
    summary, series, wall = run_lsm(device, spec, files=args.workload, progress=sys.stderr.isatty())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (out / "timeseries.csv").write_text(series)
    (out / "run-info.json").write_text(json.dumps({"wall_seconds": round(wall, 3)}, indent=2) + "\n")
    p = summary["deletion_persistence"]
    wa = summary["write_amplification"]
    print(f"{summary['ops']} operations ({wall:.1f} s wall, {summary['sim_seconds']:.1f} s simulated), policy {summary['policy']}: "
          f"WA {wa['total']:.2f} (LSM {wa['lsm']:.2f}), compaction {summary['counters']['compaction_write_bytes'] / 2**20:.0f} MiB, "
          f"zone GC {summary['counters']['gc_migrated_bytes'] / 2**20:.0f} MiB")
    if p:
        print(f"deletes persisted within D_th ({summary['delete_threshold_ns'] / 1e9:.2f} s): LSM level "
              f"{p['lsm_level']['fraction_within_threshold'] * 100:.1f}%, erase level {p['erase_level']['fraction_within_threshold'] * 100:.1f}% "
              f"of {p['lsm_level']['eligible']}")
    if summary.get("audit"):
        a = summary["audit"]
        print(f"audit: {a['survivors_pending'] + a['survivors_lsm_persisted']} deleted values still on the NAND (not erased yet), "
              f"{a['survivors_erase_persisted']} after erase-level persistence")
    print(f"wrote {out / 'summary.json'}, {out / 'timeseries.csv'}")
    return 0


def add_cli(sub: Any) -> None:
    """Register `ssdlab kv` on the CLI's subparsers."""
    k = sub.add_parser("kv", help="lsm-deletion: run the LSM store on a ZNS device, serve it to Redis clients, write workload files",
                       epilog=KV_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    k.add_argument("action", choices=["run", "serve", "generate"])
    k.add_argument("path", nargs="?", help="spec file (TOML; optional for serve)")
    k.add_argument("--out", help="output directory")
    k.add_argument("--workload", nargs="+", help="run: replay these workload files, one per phase, instead of generating")
    add_resp_arguments(k)
    k.add_argument("--data", metavar="DIR",
                   help="serve: keep the store in DIR (a command journal, fsync before each write is answered); "
                        "serving DIR again replays it: same data, device state and clock")
    k.add_argument("--audit", action="store_true", help="serve: track deletes and, at shutdown, search the NAND for deleted values")
    add_force_argument(k)
    k.set_defaults(func=_cmd_kv)
