"""`ssdlab cache serve`: the fdp-cache hybrid flash cache behind the memcached text protocol.

Real memcached clients (pymemcache, libmemcached's memccp/memccat/memcstat, ``nc``) store and
read values whose bytes go through the DRAM tier, the small-object cache's buckets and the
large-object cache's regions on an emulated (FDP) SSD. The server runs in Rust
(crates/memcached over the data-backed engines of crates/cache); see
docs/case-studies/fdp-cache.md, "Serving real clients".
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, Optional

from . import _native
from .serving import foreground


def serve(device: Dict[str, Any], cache: Optional[Dict[str, Any]] = None, listen: str = "127.0.0.1:11211",
          max_connections: int = 64, max_value_bytes: int = 0, quiet: bool = False, idle_timeout_s: float = 0.0,
          evict_idle_after_s: float = 5.0) -> Dict[str, Any]:
    """Serve the cache ``cache`` (the ``[cache]`` keys of a cache spec) on the device ``device``
    (a device config: preset + tables; its storage is switched to data-backed) until SIGINT or
    SIGTERM. ``max_value_bytes`` 0 means 1 MiB, or less if a LOC region holds less. Returns
    the final stats (memcached's ``stats`` fields and ssdlab's: DLWA, hit ratios, ALWA, ...)."""
    opts = {"listen": listen, "max_connections": max_connections, "max_value_bytes": max_value_bytes, "quiet": quiet,
            "idle_timeout_s": idle_timeout_s, "evict_idle_after_s": evict_idle_after_s}
    full_cache = {**_native.cache_defaults()["cache"], **(cache or {})}
    return foreground(_native.cache_serve, device, full_cache, opts)


def cmd_serve(args, device: Dict[str, Any], spec: Dict[str, Any]) -> int:
    """`ssdlab cache serve SPEC`: ``device`` and ``spec`` come from the cache spec file."""
    from .units import parse_size

    known = set(_native.cache_defaults())
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"{args.path}: unknown top-level key(s) {', '.join(unknown)}; a cache spec has [device], "
                         f"[cache] and the run keys ({', '.join(sorted(known))})")
    cache = spec.get("cache", {})
    if not isinstance(cache, dict):
        raise ValueError(f"{args.path}: [cache] must be a table")
    if args.max_connections < 1:
        raise ValueError(f"--max-connections {args.max_connections}: at least 1")
    for name, v in (("--idle-timeout", args.idle_timeout), ("--evict-idle-after", args.evict_idle_after)):
        if not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} {v}: seconds >= 0 (0: never)")
    max_value = parse_size(args.max_value_bytes, "--max-value-bytes") if args.max_value_bytes else 0
    if args.max_value_bytes and max_value < 1:
        raise ValueError(f"--max-value-bytes {args.max_value_bytes}: at least 1 byte")
    if not args.quiet and set(spec) - {"cache"}:
        print("ssdlab cache serve: the spec's [workload] and run keys are for `cache run`; serving uses [device] and [cache]",
              file=sys.stderr)
    m = serve(device, cache, listen=args.listen, max_connections=args.max_connections, max_value_bytes=max_value,
              quiet=args.quiet, idle_timeout_s=args.idle_timeout, evict_idle_after_s=args.evict_idle_after)
    if not args.quiet:
        print(f"served {m['total_connections']} connections: {m['cmd_get']} gets (hit ratio DRAM {m['dram_hit_ratio']:.3f}, "
              f"NVM {m['nvm_hit_ratio']:.3f}), {m['cmd_set']} stores; DLWA {m['dlwa']:.3f}, ALWA {m['alwa']:.3f}, "
              f"device host writes {m['device_host_write_bytes'] / 2**20:.1f} MiB", file=sys.stderr)
    return 0
