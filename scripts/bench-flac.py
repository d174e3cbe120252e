#!/usr/bin/env python3
"""FLAC bench: attach vs memcpy for 4 KiB .. 2 MiB as ratios measured in one run (with 2 MiB
huge pages and with 4 KiB pages), page-fault and remap costs per page, and FlacFS against the
page-cache-style and DAX-style library file systems on grep, tar and bigsort (in process and as
unmodified programs through the LD_PRELOAD shim). Figures and how to rerun them:
docs/PERFORMANCE.md.

    .venv/bin/python scripts/bench-flac.py [--tree 64M] [--ints 8388608] [--json out.json]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from ssdlab.studies.flac import api as flac  # noqa: E402
from ssdlab.studies.flac import runner  # noqa: E402


def attach_table(w, title, log):
    cfg = w.fs("flac", "256M", "1G", name="bench.img")["flac"]
    rows = flac.run({"kind": "attach", "flac": cfg, "sizes": [4096, 16384, 65536, 262144, 524288, 1048576, 2097152], "budget_bytes": 64 << 20})
    faults = flac.run({"kind": "faults", "flac": cfg, "pages": 2048})
    print(f"\n{title}")
    print(f"{'I/O':>8} {'memcpy us':>10} {'attach+touch us':>16} {'memcpy/attach':>14} {'copy to PM us':>14} {'PM copy/attach':>15}")
    for r in rows:
        print(f"{r['bytes'] >> 10:>6}K {r['memcpy_us']:>10.1f} {r['attach_to_buffer_touch_us']:>16.1f} {r['memcpy_over_attach_touch']:>14.2f} "
              f"{r['copy_to_pm_us']:>14.1f} {r['copy_to_pm_over_attach_touch']:>15.1f}")
    print("per page (us): " + ", ".join(f"{k.removesuffix('_us')} {v:.2f}" for k, v in faults.items()))
    alts = flac.run({"kind": "attach_alternatives", "sizes": [4096, 65536, 524288, 2097152], "repeats": 21})
    print(f"attach paths (us per attach with a touch of every page; kernel {alts['kernel']}):")
    for r in alts["rows"]:
        print(f"  {r['bytes'] >> 10:>6}K mmap one call {r['mmap_batch_touch_us']:.1f}, mmap per page {r['mmap_per_page_touch_us']:.1f}, "
              f"mremap DONTUNMAP {r['mremap_touch_us'] or 0:.1f}, UFFDIO_MOVE {r['uffd_move_touch_us'] or 0:.1f}, memcpy {r['memcpy_us']:.1f}")
    return {"attach": rows, "faults": faults, "attach_alternatives": alts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default="64M", help="grep/tar tree size (default 64M)")
    ap.add_argument("--ints", type=int, default=8 << 20, help="bigsort integers (default 8388608)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    log = print
    out = {}
    t0 = time.time()
    with runner.Workdir(True, 8 << 30, log) as w:
        out["huge"] = attach_table(w, f"attach vs memcpy, {'2 MiB' if w.huge else '4 KiB'} pages", log)
        m = {"pm_bytes": "2G", "app_dram": "512M", "tree": {"files": 128, "bytes": args.tree}, "bigsort_ints": args.ints,
             "run_ints": 2 << 20, "shim_tree": {"files": 64, "bytes": args.tree}, "shim_sort_ints": 500_000, "shim_dram": "128M", "shim_big": "64M",
             "ext4": False}
        print("\napplications in process (seconds; FlacFS speedup over page-cache / DAX):")
        apps = runner.run_apps(w, m, 42, lambda s: None)["rows"]
        out["apps"] = apps
        for app, cache in sorted({(r["app"], r["cache"]) for r in apps}):
            t = {r["engine"]: r["seconds"] for r in apps if r["app"] == app and r["cache"] == cache}
            print(f"  {app:<8} {cache:<5} flac {t['flac']:.3f}  pagecache {t['pagecache']:.3f}  dax {t['dax']:.3f}  "
                  f"-> {t['pagecache'] / t['flac']:.2f}x / {t['dax'] / t['flac']:.2f}x; with kernel costs "
                  f"{t['pagecache+kernel'] / t['flac']:.2f}x / {t['dax+kernel'] / t['flac']:.2f}x")
        try:
            flac.shim_path()
            print("\nunmodified programs through the shim (seconds, medians):")
            shim = runner.run_shim(w, m, 42, lambda s: None)["rows"]
            out["shim"] = shim
            for app in runner.SHIM_APPS:
                t = {r["engine"]: r["seconds"] for r in shim if r["app"] == app}
                print(f"  {app:<6} flac {t['flac']:.3f}  pagecache {t['pagecache']:.3f}  dax {t['dax']:.3f}  "
                      f"-> {t['pagecache'] / t['flac']:.2f}x / {t['dax'] / t['flac']:.2f}x")
        except FileNotFoundError as e:
            print(f"\nshim: skipped ({e})")
    if Path("/dev/shm").is_dir():
        with runner.Workdir(False, 4 << 30, log) as w:
            out["small"] = attach_table(w, "attach vs memcpy, 4 KiB pages (no huge-page tmpfs)", log)
    print(f"\n({time.time() - t0:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
