"""`ssdlab cache ...`: run a cache spec file, serve it to memcached clients, convert cache
traces, list the workload presets."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict

from ... import _native
from ...args import number
from ...runners import CHECKPOINT_EVERY_S
from ...serving import add_force_argument, add_listener_arguments, listener_options, write_metrics
from ...units import parse_size
from .api import load_cache_spec, mean_value_bytes, run_cache_noted, serve

CACHE_EPILOG = """spec file (TOML):
  [device]                  a device config (preset + tables), e.g. preset = "fdp-ssd"
  [cache]                   cache keys (utilization, soc_fraction, dram_bytes, region_bytes, ...)
  [workload]                preset = "kvcache" | "kvcache-wo" | "kvcache-sizes" | "twitter-cluster12", then overrides
  stop_device_writes = 2.0  and the other run keys (stop_requests, warmup_fraction, prefill_loc,
                            device_trace = "PATH": every device command as an MSR trace for
                            `ssdlab replay --format msr`)

serve: the [device] (made data-backed) and [cache] of a spec behind the memcached
text protocol until Ctrl-C or SIGTERM; real clients' values go through DRAM, SOC and LOC on
the emulated SSD; `stats` shows DLWA, hit ratios and ALWA
docs: docs/case-studies/fdp-cache.md"""


def cmd_serve(args: argparse.Namespace, device: Dict[str, Any], spec: Dict[str, Any]) -> int:
    """`ssdlab cache serve SPEC`: ``device`` and ``spec`` come from the cache spec file."""
    known = set(_native.cache_defaults())
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"{args.path}: unknown top-level key(s) {', '.join(unknown)}; a cache spec has [device], "
                         f"[cache] and the run keys ({', '.join(sorted(known))})")
    cache = spec.get("cache", {})
    if not isinstance(cache, dict):
        raise ValueError(f"{args.path}: [cache] must be a table")
    max_value = parse_size(args.max_value_bytes, "--max-value-bytes") if args.max_value_bytes else 0
    if args.max_value_bytes and max_value < 1:
        raise ValueError(f"--max-value-bytes {args.max_value_bytes}: at least 1 byte")
    if not args.quiet and set(spec) - {"cache"}:
        print("ssdlab cache serve: the spec's [workload] and run keys are for `cache run`; serving uses [device] and [cache]",
              file=sys.stderr)
    m = serve(device, cache, max_value_bytes=max_value, **listener_options(args))
    written = write_metrics(args.metrics_out, m)
    if not args.quiet:
        print(f"served {m['total_connections']} connections: {m['cmd_get']} gets (hit ratio DRAM {m['dram_hit_ratio']:.3f}, "
              f"NVM {m['nvm_hit_ratio']:.3f}), {m['cmd_set']} stores; DLWA {m['dlwa']:.3f}, ALWA {m['alwa']:.3f}, "
              f"device host writes {m['device_host_write_bytes'] / 2**20:.1f} MiB"
              + (f"; final stats in {written}" if written else ""), file=sys.stderr)
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    if args.action == "workloads":
        for n in _native.cache_workloads():
            w = _native.cache_workload(n)
            life = w.get("lifecycle")
            keys = (f"key lifecycles: {life['one_hit_keys']:.2%} of keys one-hit, {life['requests_per_key']} requests/key, "
                    f"later requests {life['reaccess_mean_s']} s after the SET on average" if life else
                    f"zipf {w['zipf_alpha']} one-hit requests {w['one_hit_fraction']}")
            print(f"{n:<18} get {w['get_fraction']:.2f} set {w['set_fraction']:.2f} "
                  f"mean value {mean_value_bytes(w):.0f} B ttl {w['ttl_s']} s {keys}")
        return 0
    if args.action == "convert":
        if not args.format or not args.out:
            raise ValueError("ssdlab cache convert SRC --format FORMAT --out DST.csv")
        lines, reqs, skipped = _native.cache_convert_trace(args.path, args.format, args.out)
        print(f"{args.out}: {reqs} requests from {lines} lines ({skipped} skipped)")
        return 0
    if args.action == "serve":
        if not args.path:
            raise ValueError("ssdlab cache serve SPEC.toml [--listen 127.0.0.1:11211]")
        device, spec = load_cache_spec(args.path)
        return cmd_serve(args, device, spec)
    if not args.path or not args.out:
        raise ValueError("ssdlab cache run SPEC.toml --out DIR [--trace CSV]")
    device, spec = load_cache_spec(args.path)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = out / "run.ckpt" if args.checkpoint_every > 0 and not args.trace else None
    try:
        summary, series, wall, note = run_cache_noted(device, spec, args.trace, str(ck) if ck else None,
                                                      args.checkpoint_every * 60)
    except KeyboardInterrupt:
        if ck is not None and ck.exists():
            print(f"ssdlab cache run: interrupted; the same command goes on from the save in {ck}", file=sys.stderr)
        raise
    if note:
        print(f"checkpoint: {note}")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    (out / "timeseries.csv").write_text(series)
    (out / "run-info.json").write_text(json.dumps({"wall_seconds": round(wall, 3)}, indent=2) + "\n")
    lat = summary["latency_ns"]
    print(f"{summary['requests']} requests ({wall:.1f} s wall): DLWA {summary['dlwa']:.3f} (SOC {summary['soc_dlwa']}, "
          f"Theorem 1 {summary['theorem1']['dlwa_fifo']}), ALWA {summary['alwa']:.3f}, hit ratio DRAM "
          f"{summary['dram_hit_ratio']:.3f} NVM {summary['nvm_hit_ratio']:.3f}, p99 read {lat['read'].get('p99', 0) / 1e3:.1f} us "
          f"write {lat['write'].get('p99', 0) / 1e3:.1f} us")
    print(f"wrote {out / 'summary.json'}, {out / 'timeseries.csv'}"
          + (f", and the device's commands to {spec['device_trace']}" if spec.get("device_trace") else ""))
    return 0


def add_cli(sub: Any) -> None:
    """Register `ssdlab cache` on the CLI's subparsers."""
    c = sub.add_parser("cache", help="fdp-cache: run a hybrid flash cache, serve it to memcached clients, convert cache traces",
                       epilog=CACHE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("action", choices=["run", "serve", "convert", "workloads"])
    c.add_argument("path", nargs="?", help="spec file (run, serve) or source trace (convert)")
    c.add_argument("--out", help="output directory (run) or CSV file (convert)")
    c.add_argument("--trace", help="run: replay this ssdlab cache-trace CSV instead of the generator")
    c.add_argument("--checkpoint-every", metavar="MIN", type=number(0.0, 1e6, "a number of minutes"),
                   default=CHECKPOINT_EVERY_S / 60,
                   help="run: save the whole run to OUT/run.ckpt this often; the same command after a crash or "
                        "Ctrl-C goes on from the latest save, with the same results (default %(default)s; 0: never; "
                        "not with --trace)")
    c.add_argument("--format", choices=["cachelib-kvcache", "twitter"], help="convert: the source trace's format")
    add_listener_arguments(c, "127.0.0.1:11211", what="serve", max_connections=64,
                           remote="memcached's protocol has no authentication: anyone who reaches the port reads "
                                  "and writes the cache",
                           metrics_out="metrics.json (the final stats)")
    c.add_argument("--max-value-bytes", help="serve: largest value, e.g. 512K (default 1M, or what a LOC region holds)")
    add_force_argument(c, "serve")
    c.set_defaults(func=_cmd_cache)
