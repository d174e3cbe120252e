#!/usr/bin/env python3
"""Stress FlacFS's flush and sync paths: writer threads do random writes, truncates, renames
and deletes on files of their own (so each thread's end state is known whatever the
interleaving) while the background flusher runs every millisecond and a small DRAM cache
forces evictions; then every file is checked against an in-memory model, before and after a
remount, for both flush modes.

    .venv/bin/python scripts/flac-stress.py [--rounds 6] [--threads 3] [--dram 8M]

Exit code 1 when some file differs (each difference is printed), 3 when the writers hang.

On 2026-11-27 (2 cores) about one run in two reported a difference under the lock-free
flush: a page cut off by a truncate while a background flush of it was in flight came back
with its old bytes when the file grew again (the truncate made it a plain hole; the flush then
committed the old frame under it). Fixed in `Flac::pzero`; since then (4 threads, 8 rounds,
five runs) none. tests/test_flac.py runs a short form of this script.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Tuple

from ssdlab.studies.flac.api import FlacFS


def worker(fs: FlacFS, tid: int, model: Dict[str, bytes], seed: int, steps: int, errors: List[Tuple[int, str]]) -> None:
    rng = random.Random(seed)
    try:
        for _ in range(steps):
            name = f"/w{tid}_{rng.randrange(6)}"
            op = rng.random()
            if op < 0.55:
                off = rng.randrange(0, 3 << 20)
                data = rng.randbytes(rng.choice([1, 100, 4096, 10240, 65536, 300000]))
                with fs.open(name, "r+" if name in model else "w") as f:
                    f.seek(off)
                    f.write(data)
                cur = bytearray(model.get(name, b""))
                cur.extend(b"\0" * max(0, off - len(cur)))
                cur[off:off + len(data)] = data
                model[name] = bytes(cur)
            elif op < 0.7 and name in model:
                size = rng.randrange(0, len(model[name]) + 100000)
                with fs.open(name, "r+") as f:
                    f.truncate(size)
                model[name] = model[name][:size] + b"\0" * max(0, size - len(model[name]))
            elif op < 0.85 and name in model:
                dst = f"/w{tid}_{rng.randrange(6)}"
                if dst != name:
                    fs.rename(name, dst)
                    model[dst] = model.pop(name)
            elif name in model:
                fs.remove(name)
                model.pop(name)
            if rng.random() < 0.02:
                fs.sync()
    except Exception as e:  # reported by the caller
        errors.append((tid, repr(e)))


def check(fs: FlacFS, want: Dict[str, bytes], label: str) -> int:
    bad = 0
    names = set(fs.listdir("/"))
    if names != {k.lstrip("/") for k in want}:
        print(f"{label}: files differ: {sorted(names ^ {k.lstrip('/') for k in want})}")
        bad += 1
    for k, v in sorted(want.items()):
        if k.lstrip("/") in names:
            got = fs.read_bytes(k)
            if got != v:
                first = next((i for i in range(min(len(got), len(v))) if got[i] != v[i]), min(len(got), len(v)))
                print(f"{label}: {k}: {len(got)} bytes, want {len(v)}; first difference at byte {first}")
                bad += 1
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400, help="operations per thread and round")
    ap.add_argument("--dram", default="8M")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="flac-stress-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    bad = 0
    try:
        for r in range(args.rounds):
            for lockfree in (True, False):
                label = f"round {r}, {'lock-free' if lockfree else 'copying'} flush"
                img = base / "img"
                models: List[Dict[str, bytes]] = [{} for _ in range(args.threads)]
                errors: List[Tuple[int, str]] = []
                with FlacFS(img, engine="flac", create="1G", dram=args.dram, pm_cost=True, dram_dir=base,
                            lockfree_flush=lockfree, flush_interval_ms=1) as fs:
                    threads = [threading.Thread(target=worker, args=(fs, t, models[t], r * 10 + t, args.steps, errors), daemon=True)
                               for t in range(args.threads)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(300)
                    if any(t.is_alive() for t in threads):
                        print(f"{label}: the writers hang")
                        return 3
                    for tid, e in errors:
                        print(f"{label}: thread {tid}: {e}")
                    bad += len(errors)
                    want = {k: v for m in models for k, v in m.items()}
                    bad += check(fs, want, f"{label}, before the remount")
                with FlacFS(img, engine="flac", dram=args.dram, dram_dir=base) as fs:
                    bad += check(fs, want, f"{label}, after the remount")
                img.unlink()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
