#!/usr/bin/env python3
"""NBD server bench: fio (ioengine=nbd, 4 KiB random read and random write, iodepth 32)
against `ssdlab serve` (latency none, contents in memory) and against `nbdkit memory` on the
same machine, and against `ssdlab serve --image` (a persistent raw image file plus the journal,
written before each reply) and `nbdkit file` on a sparse file in the same directory. Prints
IOPS and the ratios; the goals are >= 1.0x nbdkit memory in memory and >= 0.9x nbdkit file
with --image, while ssdlab does the FTL work.

    .venv/bin/python scripts/bench-nbd.py [--size 1G] [--runtime 10]
"""

import argparse
import json
import shutil
import statistics
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from benchtools import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]
SSDLAB = str(Path(sys.executable).parent / "ssdlab")


def fio(uri: str, rw: str, size: str, runtime: int) -> float:
    p = subprocess.run(["fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
                        f"--size={size}", "--iodepth=32", f"--runtime={runtime}", "--time_based",
                        "--randrepeat=1", "--output-format=json"], capture_output=True, text=True, check=True)
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    return job["read" if "read" in rw else "write"]["iops"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="region fio touches (default %(default)s)")
    ap.add_argument("--runtime", type=int, default=5, help="seconds per fio run (default %(default)s)")
    ap.add_argument("--only", choices=["memory", "image"], help="run one pair of servers")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds over all servers; each figure is the median (default %(default)s)")
    a = ap.parse_args()
    for tool in ("fio", "nbdkit"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: run `make setup`")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.toml"
        # The default preset's FTL (32 GiB, timing model on), answering as soon as the work is done.
        cfg.write_text('preset = "default"\n')
        image = Path(tmp) / "disk.img"
        plain = Path(tmp) / "nbdkit.img"
        with open(plain, "wb") as f:
            f.truncate(32 << 30)  # sparse, like ssdlab's new image
        servers = {
            "ssdlab": lambda port: [SSDLAB, "serve", str(cfg), "--listen", f"127.0.0.1:{port}", "-q"],
            "nbdkit": lambda port: ["nbdkit", "-f", "-p", str(port), "-i", "127.0.0.1", "memory", "32G"],
            "ssdlab-image": lambda port: [SSDLAB, "serve", str(cfg), "--listen", f"127.0.0.1:{port}", "-q",
                                          "--image", str(image)],
            "nbdkit-file": lambda port: ["nbdkit", "-f", "-p", str(port), "-i", "127.0.0.1", "file", str(plain)],
        }
        if a.only == "memory":
            servers = {k: v for k, v in servers.items() if k in ("ssdlab", "nbdkit")}
        elif a.only == "image":
            servers = {k: v for k, v in servers.items() if k in ("ssdlab-image", "nbdkit-file")}
        procs, uris = {}, {}
        try:
            for name, cmd in servers.items():
                port = free_port()
                procs[name] = subprocess.Popen(cmd(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_port(port, procs[name])
                uris[name] = f"nbd://127.0.0.1:{port}" + ("/ssdlab" if name.startswith("ssdlab") else "")
                # Fill the region once so reads hit written data on every server.
                subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={uris[name]}", "--rw=write",
                                "--bs=1M", f"--size={a.size}", "--iodepth=8"], capture_output=True, check=True)
            # Rounds interleave the servers, so a noisy moment does not favour one of them.
            for _ in range(a.rounds):
                for name in servers:
                    for rw in ("randread", "randwrite"):
                        results.setdefault((name, rw), []).append(fio(uris[name], rw, a.size, a.runtime))
        finally:
            for proc in procs.values():
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    results = {k: statistics.median(v) for k, v in results.items()}
    for rw in ("randread", "randwrite"):
        if ("ssdlab", rw) in results:
            s, n = results[("ssdlab", rw)], results[("nbdkit", rw)]
            print(f"nbd 4 KiB {rw:<9} iodepth 32: ssdlab serve {s / 1e3:7.1f} k IOPS, nbdkit memory {n / 1e3:7.1f} k IOPS "
                  f"-> {s / n:.2f}x (goal >= 1.0x)")
    for rw in ("randread", "randwrite"):
        if ("ssdlab-image", rw) in results:
            i, n = results[("ssdlab-image", rw)], results[("nbdkit-file", rw)]
            print(f"nbd 4 KiB {rw:<9} iodepth 32: ssdlab serve --image (file + journal) {i / 1e3:7.1f} k IOPS, "
                  f"nbdkit file {n / 1e3:7.1f} k IOPS -> {i / n:.2f}x (goal >= 0.9x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
