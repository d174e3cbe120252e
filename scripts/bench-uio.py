#!/usr/bin/env python3
"""UIO queue depth bench (issue 44): redis-benchmark SET and GET through `ssdlab uio kv-serve`
on device 0 of a two-device system (`ssdlab uio device` processes; GME sends half the keys to
device 1 over NET), at pipelines of 1 (queue depth 1) and of 16, with the same clients, keys
and value size; a fresh system per round, the two depths in alternating order, medians of the
rounds. Prints requests/s, the ratio (goal >= 4x), and the CPU time each process used during
each run (what competes for the machine's cores). `--baseline DIR` runs another build too in
each round (DIR: its `python` directory with its native module, e.g. an older checkout's):
redis-benchmark's pipelining saves round trips to the server even where the device runs one
command at a time, so the baseline's own ratio is the part that is not queue depth.

    .venv/bin/python scripts/bench-uio.py [--requests 50000] [--rounds 5] [--pipeline 16] [--baseline DIR]
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchtools import free_port, redis_benchmark, wait_port

from ssdlab.studies.uio_kv.api import Devices

SSDLAB = str(Path(sys.executable).parent / "ssdlab")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process `pid` has used."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def bench(port: int, requests: int, keyspace: int, clients: int, pipeline: int, pids: dict) -> dict:
    before = {n: cpu_s(p) for n, p in pids.items()}
    t = time.monotonic()
    got: dict = redis_benchmark(port, requests, keyspace, clients, pipeline, timeout=1200)
    wall = time.monotonic() - t
    got["cpu"] = {n: (cpu_s(p) - before[n]) / wall for n, p in pids.items()}
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=50_000, help="requests per test (default %(default)s)")
    ap.add_argument("--keyspace", type=int, default=10_000, help="distinct keys (default %(default)s)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark clients (default %(default)s)")
    ap.add_argument("--pipeline", type=int, default=16, help="the deep run's pipeline (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default %(default)s)")
    ap.add_argument("--baseline", metavar="DIR", help="another build's python directory, run in each round too")
    a = ap.parse_args()
    if shutil.which("redis-benchmark") is None:
        raise SystemExit("redis-benchmark missing: run scripts/setup.sh (make setup)")
    depths = [1, a.pipeline]
    builds = {"this build": None} | ({"baseline": a.baseline} if a.baseline else {})
    results: dict = {(b, p): [] for b in builds for p in depths}
    for r in range(a.rounds):
        for b, path in builds.items():
            env_path = os.environ.get("PYTHONPATH")
            if path:
                os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (path, env_path) if x)
            try:
                run_round(a, r, b, depths, results)
            finally:
                if env_path is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = env_path
    print(f"\nmedians of {a.rounds} rounds, {a.requests} requests each, {a.keyspace} keys (half on device 1), 64-byte values, "
          f"{a.clients} clients:")
    for b in builds:
        med = {p: {t: statistics.median(x[t] for x in results[b, p]) for t in ("SET", "GET")} for p in depths}
        for p, m in med.items():
            cpu = {n: statistics.median(x["cpu"][n] for x in results[b, p]) for n in results[b, p][0]["cpu"]}
            print(f"  {b}: -P {p:<3d} SET {m['SET']:>9,.0f}/s  GET {m['GET']:>9,.0f}/s  (median cores busy: "
                  + ", ".join(f"{n} {c:.2f}" for n, c in cpu.items()) + ")")
        deep, one = med[a.pipeline], med[1]
        per = {t: [x[t] / y[t] for x, y in zip(results[b, a.pipeline], results[b, 1], strict=True)] for t in ("SET", "GET")}
        print(f"  {b}: -P {a.pipeline} / -P 1 (ratio of medians): SET {deep['SET'] / one['SET']:.2f}x, "
              f"GET {deep['GET'] / one['GET']:.2f}x")
        print(f"  {b}: -P {a.pipeline} / -P 1 (median of per-round ratios): SET {statistics.median(per['SET']):.2f}x "
              f"[{min(per['SET']):.2f}-{max(per['SET']):.2f}], GET {statistics.median(per['GET']):.2f}x "
              f"[{min(per['GET']):.2f}-{max(per['GET']):.2f}]; goal >= 4x")
    return 0


def run_round(a, r: int, build: str, depths: list, results: dict) -> None:
    """One round on a fresh two-device system: each depth once, in alternating order."""
    with tempfile.TemporaryDirectory(prefix="bench-uio-") as tmp, Devices(2, dir=tmp) as d:
        port = free_port()
        with open(Path(tmp) / "kv-serve.log", "w") as log:
            kv = subprocess.Popen([SSDLAB, "uio", "kv-serve", "--attach", d.sockets[0], "--listen", f"127.0.0.1:{port}"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_port(port, kv)
            pids = {"device 0": d.procs[0].pid, "device 1": d.procs[1].pid, "kv-serve": kv.pid}
            for p in depths if r % 2 == 0 else depths[::-1]:
                got = bench(port, a.requests, a.keyspace, a.clients, p, pids)
                results[build, p].append(got)
                cpu = ", ".join(f"{n} {c:.2f}" for n, c in got["cpu"].items())
                print(f"round {r + 1}: {build}: -P {p:<3d} SET {got['SET']:>9,.0f}/s  GET {got['GET']:>9,.0f}/s  "
                      f"(cores busy: {cpu})", flush=True)
        finally:
            kv.send_signal(signal.SIGTERM)
            try:
                kv.wait(60)
            except subprocess.TimeoutExpired:
                kv.kill()
                kv.wait()


if __name__ == "__main__":
    sys.exit(main())
