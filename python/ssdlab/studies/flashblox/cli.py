"""flashblox's command: ``ssdlab vssd run|lifetime|plan`` (timed multi-tenant runs, lifetime
studies and the swap-frequency analysis from spec files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

from ... import config
from .api import device_config, lifetime, run, swap_plan

EPILOG = """spec files (TOML):
  run:       device = "quick" | "paper"; [device_config] overrides (geometry, timing, storage);
             [flashblox] layer settings; warmup_ms, duration_ms, series_ms, seed; and
             [[tenants]] name, level (channel | die | soft-plane | none), tput_level, capacity_bytes,
             placement = {channels = [...], spread = false}, weight, threads | rate_ops, age_writes,
             app = {kind = "ycsb", store = "log" | "leveldb", ycsb = {mix = "A", records = 100000},
                    kv = {...} (the log store's keys), leveldb = {memtable_bytes, table_bytes, level1_bytes, ...}}
                 | {kind = "disk", io = {pattern = "uniform", read_fraction = 0.5, block_bytes = [65536]}}
                 | {kind = "trace", path = "trace.csv", format = "msr", speed = 1.0}
  lifetime:  device = "lifetime"; [flashblox.wear] policy (none | fixed | adaptive), pair, period_ns,
             threshold_bytes; ideal_years, max_weeks; [[tenants]] with write_share (of M) and fill, or
             trace = {path, format, weeks_per_trace_second}
docs: docs/case-studies/flashblox.md"""


def _load_spec(path: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    d = config.read_toml(path, "flashblox spec")
    name = d.pop("device", None)
    over = d.pop("device_config", {})
    return d, device_config(name or "quick", **over) if name or over else {}


def _cmd(args: argparse.Namespace) -> int:
    if args.action == "plan":
        p = swap_plan(args.channels, args.years, args.a, args.d)
        print(f"N = {p['channels']}, d = {p['d']}, a = {p['a']}, {args.years} years: K >= {p['k_min']:.3f} rounds, "
              f"{p['swaps']:.0f} swaps, one every {p['period_days']:.1f} days ({p['period_days_bound']:.1f} days at K = 1/d)")
        return 0
    if not args.spec or not args.out:
        raise ValueError(f"ssdlab vssd {args.action} SPEC.toml --out DIR")
    spec, dev = _load_spec(args.spec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.action == "run":
        res, wall = run(spec, dev or "quick", progress=sys.stderr.isatty())
        (out / "summary.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        for t in res["tenants"]:
            a = t["latency"]["all"]
            print(f"{t['name']:<12} {t['level']:<10} {t['ops_per_s']:9.0f} ops/s  {t['read_mb_per_s'] + t['write_mb_per_s']:8.1f} MB/s  "
                  f"mean {a.get('mean_us', 0):8.0f} us  p99 {a.get('p99_us', 0):8.0f} us")
    else:
        res, wall = lifetime(spec, dev or "lifetime", progress=sys.stderr.isatty())
        (out / "lifetime.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        s = res["summary"]
        print(f"lifetime {s['lifetime_weeks']:.1f} weeks of an ideal {s['ideal_weeks']:.1f} ({s['lifetime_fraction'] * 100:.1f}%), "
              f"{s['swaps']} swaps, swap write amplification {s['write_amplification_swaps']:.4f}"
              + (f"; dead: {s['death']}" if s["dead"] else "; alive"))
    (out / "run-info.json").write_text(json.dumps({"wall_seconds": round(wall, 3)}) + "\n")
    print(f"wrote {out} ({wall:.1f} s)")
    return 0


def add_cli(sub: Any) -> None:
    """Register `ssdlab vssd` on the CLI's subparsers."""
    c = sub.add_parser("vssd", help="flashblox: timed multi-tenant vSSD runs, lifetime studies, the swap-frequency analysis",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("action", choices=["run", "lifetime", "plan"])
    c.add_argument("spec", nargs="?", help="spec file (run, lifetime)")
    c.add_argument("--out", help="output directory (run, lifetime)")
    c.add_argument("--channels", type=int, default=16, help="plan: channels N (default %(default)s)")
    c.add_argument("--years", type=float, default=5.0, help="plan: service life L in years (default %(default)s)")
    c.add_argument("--a", type=float, default=0.9, help="plan: share of L after which x <= 1 + d (default %(default)s)")
    c.add_argument("--d", type=float, default=0.1, help="plan: imbalance bound d (default %(default)s)")
    c.set_defaults(func=_cmd)
