#!/usr/bin/env python3
"""RESP front-end bench: redis-benchmark SET and GET (random keys over a key space, 64-byte
values, 50 clients, pipelines of 16) against `ssdlab kv serve` (the LSM store on an emulated
ZNS SSD, every value written to and read from the emulated NAND) and against redis-server
(memory only, no persistence) on the same machine, interleaved rounds, medians. Prints
requests/s and the ratios.

    .venv/bin/python scripts/bench-resp.py [--requests 200000] [--rounds 3]
"""

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchtools import free_port, redis_benchmark, wait_port

SSDLAB = str(Path(sys.executable).parent / "ssdlab")


def bench(port: int, requests: int, keyspace: int) -> dict:
    return redis_benchmark(port, requests, keyspace)


def start(argv, port: int, log) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200_000, help="requests per test (default %(default)s)")
    ap.add_argument("--keyspace", type=int, default=100_000, help="distinct keys (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s)")
    a = ap.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} missing: run scripts/setup.sh (make setup)")
    results: dict = {"ssdlab kv serve": [], "redis-server": []}
    with tempfile.TemporaryDirectory(prefix="bench-resp-") as tmp, open(Path(tmp) / "servers.log", "w") as log:
        for r in range(a.rounds):
            for name in results:
                port = free_port()
                if name == "redis-server":
                    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                            "--dir", tmp]
                else:
                    argv = [SSDLAB, "kv", "serve", "--listen", f"127.0.0.1:{port}", "--quiet"]
                proc = start(argv, port, log)
                try:
                    got = bench(port, a.requests, a.keyspace)
                finally:
                    stop(proc)
                results[name].append(got)
                print(f"round {r + 1}: {name:16s} SET {got['SET']:>10,.0f}/s  GET {got['GET']:>10,.0f}/s", flush=True)
    print(f"\nmedians of {a.rounds} rounds, {a.requests} requests each, {a.keyspace} keys, 64-byte values, 50 clients, pipelines of 16:")
    med = {n: {t: statistics.median(x[t] for x in rs) for t in ("SET", "GET")} for n, rs in results.items()}
    for n, m in med.items():
        print(f"  {n:16s} SET {m['SET']:>10,.0f}/s  GET {m['GET']:>10,.0f}/s")
    ours, ref = med["ssdlab kv serve"], med["redis-server"]
    print(f"  ssdlab / redis-server (ratio of medians): SET {ours['SET'] / ref['SET']:.2f}x, GET {ours['GET'] / ref['GET']:.2f}x")
    # The machine's speed drifts between rounds; each round's pair ran back to back, so the
    # median of the per-round ratios is the steadier figure.
    per = {t: [o[t] / x[t] for o, x in zip(results["ssdlab kv serve"], results["redis-server"], strict=True)] for t in ("SET", "GET")}
    print(f"  ssdlab / redis-server (median of per-round ratios): SET {statistics.median(per['SET']):.2f}x "
          f"[{min(per['SET']):.2f}-{max(per['SET']):.2f}], GET {statistics.median(per['GET']):.2f}x "
          f"[{min(per['GET']):.2f}-{max(per['GET']):.2f}]; goal >= 0.5x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
