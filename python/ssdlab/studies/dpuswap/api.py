"""dpuswap as a user calls it from Python: one run of a backend under the paging runtime
(:func:`run`), a backend as an NBD disk (:func:`serve`), remote memory nodes as separate
processes (:class:`Nodes`), and one guest kernel swapping onto a backend (:func:`guest_run`).

The Rust side (crates/rmml) holds the remote memory management layer (RMML), the remote memory
node service, the ZNSwap-like and Infiniswap-like baselines, the userfaultfd paging runtime and
the workloads; docs/case-studies/dpuswap.md describes the model.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ... import _native

BACKENDS = ("dpuswap", "infiniswap", "znswap")
LABELS = {"dpuswap": "DPUSwap (RMML)", "infiniswap": "Infiniswap-like", "znswap": "ZNSwap-like", "local": "all local"}


def defaults() -> Dict[str, Any]:
    """The defaults of every table of a run spec (rmml, paging, infiniswap, kv, sort, fio)."""
    return _native.rmml_defaults()


def run(spec: Dict[str, Any], progress: bool = False) -> Dict[str, Any]:
    """One run. ``spec`` keys: ``backend`` ("dpuswap", "infiniswap", "znswap", "local"),
    ``local_fraction`` (local memory / working set, default 1.0), ``workload`` (``{"kv": {...}}``,
    ``{"sort": {...}}`` or ``{"fio": {...}}``), and optionally ``paging``, ``rmml``,
    ``infiniswap``, ``znswap`` (``{"device": a ZNS device config, "reserve_zones": 2,
    "host_request_ns": 1000, "pcie": {...}}``), ``nodes`` (HOST:PORT of remote memory nodes;
    none: in-process nodes). Returns the run's summary: the workload's throughput, completion
    time and latency percentiles in modelled time, the paging runtime's fault counts and
    latencies (modelled and wall clock) and the backend's counters."""
    spec = dict(spec)
    if "znswap" in spec:
        z = dict(spec["znswap"])
        z.setdefault("capacity_bytes", 0)
        spec["znswap"] = z
    return _native.rmml_run(spec, progress)


def serve(spec: Dict[str, Any], size_bytes: int, listen: str = "127.0.0.1:10809", latency: str = "none",
          max_connections: int = 16, max_request: int = 32 << 20, metrics_out: Optional[str] = None,
          quiet: bool = False, allow_remote: bool = False, idle_timeout_s: float = 0.0,
          evict_idle_after_s: Optional[float] = None) -> Dict[str, Any]:
    """Serve the swap backend of ``spec`` (``backend`` and its tables as in :func:`run`; a
    workload is ignored) with ``size_bytes`` of room over NBD until SIGINT/SIGTERM: the export
    is named after the backend (``nbd://127.0.0.1:10809/dpuswap``). ``latency="emulated"``
    replies at the modelled completion time. A ZNSwap-like backend without a ``znswap`` table
    gets the reproduction's (experiments/dpuswap/experiment.toml). The listener options are the
    NBD server's (``allow_remote``: a non-loopback ``listen``, unencrypted and unauthenticated;
    ``idle_timeout_s`` 0: never; ``evict_idle_after_s`` None: 1 s, 0: never). Returns the final
    metrics."""
    from ...config import resolve
    from ...serving import foreground
    from ..reproduce import load_spec

    s = {k: v for k, v in dict(spec).items() if k not in ("workload", "local_fraction", "paging")}
    if s.get("backend") not in BACKENDS:
        raise _native.ConfigError(f"rmml serve: backend = {s.get('backend')!r}: expected one of {', '.join(BACKENDS)}")
    if s["backend"] == "znswap":
        z = dict(s.get("znswap") or load_spec("dpuswap")["znswap"])
        z["device"] = resolve(config=z.get("device", {"preset": "zns-ssd"}), origin="znswap.device")
        z.setdefault("capacity_bytes", 0)
        s["znswap"] = z
    opts = {"listen": listen, "latency": latency, "max_connections": max_connections, "max_request": max_request,
            "metrics_out": metrics_out, "quiet": quiet, "allow_remote": allow_remote, "idle_timeout_s": idle_timeout_s,
            "evict_idle_after_s": evict_idle_after_s}
    return foreground(_native.rmml_serve, s, size_bytes, opts)


class Nodes:
    """``count`` remote memory nodes, each a separate ``ssdlab rmml node`` process on loopback
    lending ``capacity_bytes``; a context manager (stops them by PID on exit).

    >>> with Nodes(2, 1 << 30) as nodes:
    ...     run({"backend": "dpuswap", "nodes": nodes.addrs, ...})
    """

    def __init__(self, count: int, capacity_bytes: int, host: str = "127.0.0.1"):
        if count < 1:
            raise ValueError("nodes: count must be at least 1")
        self.count, self.capacity_bytes, self.host = count, capacity_bytes, host
        self.procs: List[subprocess.Popen[str]] = []
        self.addrs: List[str] = []

    def start(self) -> "Nodes":
        try:
            for _ in range(self.count):
                self.addrs.append(self.start_one())
        except BaseException:
            self.stop()
            raise
        return self

    def start_one(self, listen: Optional[str] = None) -> str:
        """Start one node (on ``listen``, default a free port); returns its address."""
        # A node prints its address and then nothing on stdout (-q); its stderr goes to an
        # unlinked temporary file (the node keeps it open), not a pipe nobody reads, so it can
        # never block on it.
        with tempfile.TemporaryFile(mode="w+") as err:
            p = subprocess.Popen([sys.executable, "-m", "ssdlab.cli", "rmml", "node", "--listen", listen or f"{self.host}:0",
                                  "--capacity", str(self.capacity_bytes), "-q"],
                                 stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)
            self.procs.append(p)
            line = p.stdout.readline().strip() if p.stdout else ""
            if not line or p.poll() is not None:
                p.wait()
                err.seek(0)
                raise OSError(f"rmml node did not start: {err.read().strip() or 'no address printed'}")
        return line

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        self.procs.clear()

    def __enter__(self) -> "Nodes":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ---- the document's own set-up: a guest kernel swapping onto the backend over NBD ----

# The guest's workload (busybox sh, run by `ssdlab vm`'s init with $SSDLAB_DISK and $SSDLAB_OUT;
# WS, OPS, PCT, READ_PCT, ZIPF, COMPRESS_PCT and SEED are prepended). The working set is a tmpfs
# file, whose pages the kernel swaps like anonymous memory, accessed through mmap by fio
# (Zipfian 4 KiB reads and writes, buffers COMPRESS_PCT% compressible). The memory limit is a
# cgroup v2 memory.max of PCT% of the workload's footprint: the file plus fio's own memory,
# measured first by a small fio run in a cgroup of its own.
GUEST_SCRIPT = """set -e
mkswap "$SSDLAB_DISK" >/dev/null
swapon "$SSDLAB_DISK"
mount -t cgroup2 none /sys/fs/cgroup
echo +memory > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /mnt/ws /sys/fs/cgroup/probe /sys/fs/cgroup/app
mount -t tmpfs -o size=$((WS + 67108864)) tmpfs /mnt/ws
echo $$ > /sys/fs/cgroup/probe/cgroup.procs
fio --name=probe --filename=/mnt/ws/probe --size=4194304 --ioengine=mmap --rw=randrw --bs=4k --number_ios=256 >/dev/null
rm /mnt/ws/probe
overhead=$(( $(cat /sys/fs/cgroup/probe/memory.peak) - 4194304 ))
if [ "$PCT" -ge 100 ]; then limit=max; else limit=$(( (WS + overhead) / 100 * PCT )); fi
echo "$limit" > /sys/fs/cgroup/app/memory.max
echo $$ > /sys/fs/cgroup/app/cgroup.procs
grep -E '^pswp(in|out) ' /proc/vmstat > "$SSDLAB_OUT/vmstat-before.txt"
fio --name=kv --filename=/mnt/ws/data --size=$WS --ioengine=mmap --rw=randrw --rwmixread=$READ_PCT --bs=4k \\
    --number_ios=$OPS --random_distribution=zipf:$ZIPF --randseed=$SEED --buffer_compress_percentage=$COMPRESS_PCT \\
    --refill_buffers --output-format=json --output="$SSDLAB_OUT/fio.json"
grep -E '^pswp(in|out) ' /proc/vmstat > "$SSDLAB_OUT/vmstat-after.txt"
{ echo "overhead $overhead"; echo "limit $limit"; echo "peak $(cat /sys/fs/cgroup/app/memory.peak)"; } > "$SSDLAB_OUT/memory.txt"
echo "footprint $((WS + overhead)) bytes, limit $limit, peak $(cat /sys/fs/cgroup/app/memory.peak)"
"""


def _vmstat(text: str) -> Dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def guest_run(g: Dict[str, Any], nodes: Optional[List[str]] = None, out: Optional[Path] = None,
              log: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """One guest run: `ssdlab rmml serve` of backend ``g["backend"]`` (``local``: the RMML, never
    used) as the guest's NVMe disk, the guest kernel swapping onto it under a memory limit of
    ``g["local_fraction"]`` of the workload's footprint, fio on a tmpfs working set (its random
    choices from ``g["seed"]``). Returns the guest's fio summary, its swap counters and the
    disk's metrics (latency mode as given, default emulated: replies at the modelled completion
    times)."""
    from ... import vm

    backend = "dpuswap" if g["backend"] == "local" else g["backend"]
    with tempfile.TemporaryDirectory(prefix="dpuswap-guest-") as tmp:
        work = Path(out) if out else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        serve_spec: Dict[str, Any] = {"backend": backend, "nodes": list(nodes or []), "rmml": g["rmml"]}
        if backend == "znswap" and g.get("znswap"):
            serve_spec["znswap"] = g["znswap"]
        spec_text = vm.config_toml(serve_spec)
        spec_file = work / "serve.toml"
        spec_file.write_text(spec_text)
        pct = int(round(float(g["local_fraction"]) * 100))
        script = work / "swap.sh"
        script.write_text(f"WS={int(g['working_set_bytes'])}\nOPS={int(g['ops'])}\nPCT={pct}\n"
                          f"READ_PCT={int(round(float(g.get('read_fraction', 0.5)) * 100))}\nZIPF={float(g.get('zipf_theta', 0.99))}\n"
                          f"COMPRESS_PCT={int(round(float(g.get('compressibility', 0.7)) * 100))}\nSEED={int(g.get('seed', 42))}\n"
                          + GUEST_SCRIPT)
        disk = int(g.get("disk_bytes") or 2 * g["working_set_bytes"] + (64 << 20))

        def serve_cmd(addr: str) -> List[str]:
            return [sys.executable, "-m", "ssdlab.cli", "rmml", "serve", str(spec_file), "--size", str(disk), "--listen", addr,
                    "--latency", g.get("latency", "emulated"), "--metrics-out", str(work)]

        info, status, files = vm.boot(serve_cmd, backend, 4096, "script", script, memory=int(g["memory_bytes"]), cpus=2,
                                      disk="nvme", out=work, timeout_s=1800, log=log,
                                      info={"server_name": "ssdlab rmml serve"}, server_what=f"ssdlab rmml serve ({backend})")
        output = files.get("output.txt", b"").decode(errors="replace")
        if status != 0 or "fio.json" not in files:
            raise RuntimeError(f"guest swap run ({g['backend']}, {pct}%) failed with status {status}: {output[-1500:]}")
        fj = vm.parse_fio(files["fio.json"].decode(errors="replace")) or {}
        before, after = _vmstat(files["vmstat-before.txt"].decode()), _vmstat(files["vmstat-after.txt"].decode())
        memory = _vmstat(files["memory.txt"].decode().replace("limit max", "limit 0"))
        disk_m = json.loads((work / "metrics.json").read_text())
    job = fj["jobs"][0]
    rd, wr = job["read"], job["write"]

    def p99(x: Dict[str, Any]) -> Any:
        return x["clat_ns"].get("percentile", {}).get("99.000000", 0)

    ios = rd["total_ios"] + wr["total_ios"]
    return {
        "kind": "guest", "backend": g["backend"], "local_fraction": float(g["local_fraction"]),
        "throughput_iops": rd["iops"] + wr["iops"], "runtime_s": job["job_runtime"] / 1e3,
        "read": {"iops": rd["iops"], "clat_mean_ns": rd["clat_ns"]["mean"], "clat_p99_ns": p99(rd)},
        "write": {"iops": wr["iops"], "clat_mean_ns": wr["clat_ns"]["mean"], "clat_p99_ns": p99(wr)},
        "clat_mean_ns": (rd["clat_ns"]["mean"] * rd["total_ios"] + wr["clat_ns"]["mean"] * wr["total_ios"]) / max(ios, 1),
        "clat_p99_ns": max(p99(rd), p99(wr)),
        "swap_ins": after.get("pswpin", 0) - before.get("pswpin", 0), "swap_outs": after.get("pswpout", 0) - before.get("pswpout", 0),
        "memory": memory, "guest": {k: info.get(k) for k in ("accel", "boot_to_workload_s", "workload_s", "memory_bytes")},
        "disk": {"requests": disk_m["nbd"]["requests"], "latency_ns": disk_m["latency_ns"], "device": disk_m["device"]},
        "wall_s": info.get("wall_s", 0),
    }
