"""dpuswap: a compressed remote-memory swap space managed on a DPU (seed 000, section 3).

The Rust side (crates/rmml) holds the remote memory management layer (RMML), the remote
memory node service, the ZNSwap-like and Infiniswap-like baselines, the userfaultfd paging
runtime and the workloads. This module gives:

- :func:`run`: one run from a spec dict (backend, local-memory fraction, workload, tables);
- :class:`Nodes`: remote memory nodes as separate processes (``ssdlab rmml node``) on loopback;
- :func:`serve`: a backend as an NBD disk (qemu-io, fio, nbdcopy, the kernel's nbd client);
- ``ssdlab rmml node``, ``ssdlab rmml run`` and ``ssdlab rmml serve`` on the command line;
- :data:`EXPERIMENT`: ``ssdlab reproduce dpuswap [--quick|--full]`` on the sweep engine (each
  point a run of the runner :data:`SWAP`, which starts its own remote memory nodes), writing
  reports/dpuswap/ with the document's numbers beside ssdlab's.

See docs/case-studies/dpuswap.md.
"""

from __future__ import annotations

import copy
import csv
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _native
from .config import merge, read_toml
from .experiments import Experiment, ExperimentPoint, PointResult
from .units import parse_size as parse_bytes
from .runners import PROCESS_BYTES, Resources, Result, Runner

BACKENDS = ("dpuswap", "infiniswap", "znswap")
LABELS = {"dpuswap": "DPUSwap (RMML)", "infiniswap": "Infiniswap-like", "znswap": "ZNSwap-like", "local": "all local"}
COLORS = {"dpuswap": "C0", "infiniswap": "C1", "znswap": "C2", "local": "k"}

# What the document reports (seed 000, section 3), as ratios of the named backends.
DOC = {
    # Remote swap (an existing disaggregated-memory system) against everything local.
    "motivation": {0.75: {"throughput": -0.467, "completion": 0.599, "mean": 0.566, "p99": 3.6},
                   0.5: {"throughput": -0.699, "completion": 2.1, "mean": 2.1, "p99": 6.5}},
    # DPUSwap's throughput gain over each baseline.
    "throughput": {0.75: {"infiniswap": 0.26, "znswap": 0.533}, 0.5: {"infiniswap": 0.555, "znswap": 1.1}},
    # DPUSwap's reduction of completion time, mean and p99 latency.
    "reduction": {0.75: {"infiniswap": (0.10, 0.20, 0.334), "znswap": (0.341, 0.319, 0.476)},
                  0.5: {"infiniswap": (0.331, 0.388, 0.318), "znswap": (0.521, 0.514, 0.494)}},
    "fio_read": {"znswap": 0.817, "infiniswap": 0.179},
    "fio_write": {"znswap": 1.28, "infiniswap": 0.204},
}


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
          quiet: bool = False) -> Dict[str, Any]:
    """Serve the swap backend of ``spec`` (``backend`` and its tables as in :func:`run`; a
    workload is ignored) with ``size_bytes`` of room over NBD until SIGINT/SIGTERM: the export
    is named after the backend (``nbd://127.0.0.1:10809/dpuswap``). ``latency="emulated"``
    replies at the modelled completion time. A ZNSwap-like backend without a ``znswap`` table
    gets the reproduction's (experiments/dpuswap/experiment.toml). Returns the final metrics."""
    from .config import resolve
    from .experiments import load_spec
    from .serving import foreground

    s = {k: v for k, v in dict(spec).items() if k not in ("workload", "local_fraction", "paging")}
    if s.get("backend") not in BACKENDS:
        raise _native.ConfigError(f"rmml serve: backend = {s.get('backend')!r}: expected one of {', '.join(BACKENDS)}")
    if s["backend"] == "znswap":
        z = dict(s.get("znswap") or load_spec("dpuswap")["znswap"])
        z["device"] = resolve(config=z.get("device", {"preset": "zns-ssd"}), origin="znswap.device")
        z.setdefault("capacity_bytes", 0)
        s["znswap"] = z
    opts = {"listen": listen, "latency": latency, "max_connections": max_connections, "max_request": max_request,
            "metrics_out": metrics_out, "quiet": quiet}
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
        self.procs: List[subprocess.Popen] = []
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

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- the reproduction ----

def _specs(spec: Dict[str, Any], mode: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(common run-spec tables, the mode's table) of an experiment file."""
    m = spec[mode]
    common: Dict[str, Any] = {k: copy.deepcopy(spec.get(k, {})) for k in ("rmml", "paging", "infiniswap")}
    common["rmml"] = merge(common["rmml"], m.get("rmml", {}))
    z = copy.deepcopy(spec.get("znswap", {}))
    z["device"] = merge(z.get("device", {"preset": "zns-ssd"}), m.get("znswap_device", {}))
    z["device"]["seed"] = spec.get("seed", 42)
    common["znswap"] = z
    return common, m


def _workloads(spec: Dict[str, Any], m: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    seed = spec.get("seed", 42)
    return {"kv": {"kv": dict(spec.get("kv", {}), **m.get("kv", {}), seed=seed)},
            "sort": {"sort": dict(spec.get("sort", {}), **m.get("sort", {}), seed=seed)}}


def _row(name: str, r: Dict[str, Any]) -> Dict[str, Any]:
    w = r["workload"]
    p = r.get("paging", {})
    b = p.get("backend", r.get("device", {}))
    lat = w.get("latency", {})
    # Faults that read their page from the device (a read-ahead page found in memory is a minor fault).
    fl = p.get("major_fault_latency_ns") or p.get("fault_latency_ns", {})
    fw = p.get("fault_latency_wall_ns", {})
    return {
        "run": name, "backend": r["backend"], "workload": w["kind"], "local_fraction": r.get("local_fraction", ""),
        "completion_s": w["completion_ns"] / 1e9,
        "throughput": w.get("throughput_ops_per_s") or w.get("throughput_elements_per_s") or w.get("bandwidth_bytes_per_s"),
        "latency_mean_us": lat.get("mean_ns", 0) / 1e3, "latency_p99_us": lat.get("p99_ns", 0) / 1e3,
        "faults": p.get("major_faults", 0), "minor_faults": p.get("minor_faults", 0), "fault_p50_us": fl.get("p50", 0) / 1e3, "fault_p99_us": fl.get("p99", 0) / 1e3,
        "fault_wall_p50_us": fw.get("p50", 0) / 1e3, "fault_wall_p99_us": fw.get("p99", 0) / 1e3,
        "cache_hit_ratio": b.get("cache_hit_ratio", ""), "compression_ratio": b.get("compression_ratio", ""),
        "remote_bytes": b.get("remote_region_bytes", ""), "wall_s": r.get("wall_s", 0),
    }


def _fractions(m: Dict[str, Any]) -> List[float]:
    fractions = [float(f) for f in m["fractions"]]
    return fractions if 1.0 in fractions else [1.0, *fractions]


def _plan(spec: Dict[str, Any], mode: str) -> List[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """Every run of the experiment: (name, its values, the runner's input)."""
    common, m = _specs(spec, mode)
    fractions = _fractions(m)
    nodes = spec.get("nodes", {})
    remote = {"count": int(nodes.get("count", 2)), "capacity_bytes": parse_bytes(str(nodes.get("capacity", "2G")))}
    runs: List[Tuple[str, Dict[str, Any], Dict[str, Any]]] = []

    def add(name: str, backend: str, workload: Dict[str, Any], fraction: float, cache_bytes: int, **rmml: Any) -> None:
        s = dict(copy.deepcopy(common), backend=backend, local_fraction=fraction, workload=workload)
        s["rmml"] = dict(s["rmml"], cache_bytes=cache_bytes, **rmml)
        values = {"workload": next(iter(workload)), "backend": backend, "local_fraction": fraction,
                  "dpu_cache_bytes": cache_bytes, "codec": s["rmml"].get("codec", "")}
        runs.append((name, values, {"spec": s, "remote_nodes": remote}))

    lo = min(fractions)
    for wname, wl in _workloads(spec, m).items():
        cache_bytes = _cache_bytes(wl[wname], wname, m["dpu_cache_fraction"], common["rmml"])
        for f in fractions:
            for b in (["local"] if f >= 1.0 else BACKENDS):
                add(f"{wname}_{b}_{int(round(f * 100))}", b, wl, f, cache_bytes)
        if wname == "kv":
            # What the result rests on: the DPU cache size (at every swapped fraction), and the
            # codec (at the smallest).
            for f in fractions:
                for cf in _cache_sweep(m) if f < 1.0 else []:
                    if cf != m["dpu_cache_fraction"]:
                        add(_cache_run(f, cf), "dpuswap", wl, f, _cache_bytes(wl[wname], wname, cf, common["rmml"]))
            for codec in m.get("codecs", []):
                add(f"kv_dpuswap_{int(round(lo * 100))}_{codec}", "dpuswap", wl, lo, cache_bytes, codec=codec)
    fio = dict(spec.get("fio", {}), **m.get("fio", {}), seed=spec.get("seed", 42))
    fio_cache = _cache_bytes({"span_bytes": fio["span_bytes"]}, "fio", m["dpu_cache_fraction"], common["rmml"])
    for rw in ("randread", "randwrite"):
        for b in BACKENDS:
            add(f"fio_{rw}_{b}", b, {"fio": dict(fio, rw=rw)}, 1.0, fio_cache)
    return runs


# ---- the runner: one run, with its remote memory nodes as separate processes ----

SPEC_KEYS = ("backend", "local_fraction", "workload", "paging", "rmml", "infiniswap", "znswap", "nodes", "local_nodes", "local_node_bytes")


def _swap_resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    """The complete input of a run: every table filled from the defaults, the ZNS device
    resolved by the core; bad keys are refused here, before anything runs."""
    from .config import resolve

    task = copy.deepcopy(dict(task))
    unknown = sorted(set(task) - {"spec", "remote_nodes"})
    if unknown or "spec" not in task:
        raise _native.ConfigError(f"dpuswap run: expected keys spec and remote_nodes, got {sorted(task)}")
    s = dict(task["spec"])
    bad = sorted(set(s) - set(SPEC_KEYS))
    if bad:
        raise _native.ConfigError(f"dpuswap spec: unknown key {bad[0]!r}; valid: {', '.join(SPEC_KEYS)}")
    if s.get("backend") not in (*BACKENDS, "local"):
        raise _native.ConfigError(f"dpuswap spec: backend = {s.get('backend')!r}: expected one of {', '.join((*BACKENDS, 'local'))}")
    d = _native.rmml_defaults()
    for t in ("rmml", "paging", "infiniswap"):
        s[t] = merge(d[t], s.get(t, {}))
    w = s.get("workload")
    if not isinstance(w, dict) or len(w) != 1 or next(iter(w)) not in ("kv", "sort", "fio"):
        raise _native.ConfigError("dpuswap spec: workload: expected one table of kv, sort or fio")
    kind = next(iter(w))
    s["workload"] = {kind: merge(d[kind], w[kind])}
    if "znswap" in s:
        z = dict(s["znswap"])
        z["device"] = resolve(config=z.get("device", {"preset": "zns-ssd"}), origin="znswap.device")
        z.setdefault("capacity_bytes", 0)
        s["znswap"] = z
    remote = dict(task.get("remote_nodes", {"count": 0, "capacity_bytes": 0}))
    return {"spec": s, "remote_nodes": {"count": int(remote.get("count", 0)), "capacity_bytes": int(remote.get("capacity_bytes", 0))}}


def _working_set_bytes(s: Dict[str, Any]) -> int:
    kind, w = next(iter(s["workload"].items()))
    return {"kv": lambda: w["records"] * w["record_bytes"], "sort": lambda: w["elements"] * 8, "fio": lambda: w["span_bytes"]}[kind]()


def _swap_resources(task: Dict[str, Any]) -> Resources:
    """The paged region (or the fio span's buffers), the DPU cache, what the remote nodes hold
    (the working set at most, before compression, with the regions' slack), the ZNS device's
    model, and the node processes themselves."""
    s = task["spec"]
    ws = _working_set_bytes(s)
    mem = ws + s["rmml"]["cache_bytes"] + PROCESS_BYTES
    if s["backend"] in ("dpuswap", "infiniswap"):
        mem += int(ws * (1 + s["rmml"]["region_slack"])) + task["remote_nodes"]["count"] * PROCESS_BYTES
    if s["backend"] == "znswap" and "znswap" in s:
        z = _native.config_sizing(s["znswap"]["device"])
        mem += int(z["memory_bytes"] + z["data_bytes_max"])
    return Resources(memory_bytes=mem)


def _swap_run(task: Dict[str, Any]) -> Result:
    s = copy.deepcopy(task["spec"])
    r = task["remote_nodes"]
    if s["backend"] in ("dpuswap", "infiniswap") and r["count"] > 0 and not s.get("nodes"):
        with Nodes(r["count"], r["capacity_bytes"]) as nodes:
            s["nodes"] = nodes.addrs
            res = run(s)
        res["remote_nodes"] = {"count": r["count"], "process": True}
    else:
        res = run(s)
    return Result(metrics=res)


SWAP = Runner("ssdlab.dpuswap:SWAP", _swap_resolve, _swap_resources, _swap_run)


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

GUEST_KEYS = ("backend", "local_fraction", "working_set_bytes", "ops", "memory_bytes", "read_fraction", "zipf_theta",
              "compressibility", "seed", "rmml", "znswap", "disk_bytes", "latency")


def _guest_resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    task = copy.deepcopy(dict(task))
    g = dict(task.get("guest", {}))
    bad = sorted(set(g) - set(GUEST_KEYS))
    if bad or set(task) - {"guest", "remote_nodes"}:
        raise _native.ConfigError(f"dpuswap guest run: unknown key {(bad or sorted(set(task) - {'guest', 'remote_nodes'}))[0]!r}; "
                                  f"valid: {', '.join(GUEST_KEYS)}")
    if g.get("backend") not in (*BACKENDS, "local"):
        raise _native.ConfigError(f"dpuswap guest run: backend = {g.get('backend')!r}")
    if not 0 < float(g.get("local_fraction", 0)) <= 1:
        raise _native.ConfigError(f"dpuswap guest run: local_fraction = {g.get('local_fraction')!r}: expected 0 < f <= 1")
    g["rmml"] = merge(_native.rmml_defaults()["rmml"], g.get("rmml", {}))
    return {"guest": g, "remote_nodes": task.get("remote_nodes", {"count": 0, "capacity_bytes": 0})}


def _guest_resources(task: Dict[str, Any]) -> Resources:
    """The guest's RAM (QEMU), the server with its DPU cache, the nodes holding the swapped
    working set, the ZNS model; two CPUs (QEMU's vCPU threads keep both busy)."""
    g = task["guest"]
    mem = g["memory_bytes"] + g["rmml"]["cache_bytes"] + 2 * g["working_set_bytes"] + 3 * PROCESS_BYTES
    if g["backend"] == "znswap":
        z = _native.config_sizing(g["znswap"]["device"]) if "znswap" in g else {"memory_bytes": 1 << 30, "data_bytes_max": 0}
        mem += int(z["memory_bytes"] + z["data_bytes_max"])
    return Resources(memory_bytes=mem, cpus=2)


def _vmstat(text: str) -> Dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def guest_run(g: Dict[str, Any], nodes: Optional[List[str]] = None, out: Optional[Path] = None,
              log: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """One guest run: `ssdlab rmml serve` of backend ``g["backend"]`` (``local``: the RMML, never
    used) as the guest's NVMe disk, the guest kernel swapping onto it under a memory limit of
    ``g["local_fraction"]`` of the workload's footprint, fio on a tmpfs working set. Returns the
    guest's fio summary, its swap counters and the disk's metrics (latency mode as given,
    default emulated: replies at the modelled completion times)."""
    import tempfile

    from . import vm

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
        fj = vm._parse_fio(files["fio.json"].decode(errors="replace")) or {}
        before, after = _vmstat(files["vmstat-before.txt"].decode()), _vmstat(files["vmstat-after.txt"].decode())
        memory = _vmstat(files["memory.txt"].decode().replace("limit max", "limit 0"))
        disk_m = json.loads((work / "metrics.json").read_text())
    job = fj["jobs"][0]
    rd, wr = job["read"], job["write"]
    p99 = lambda x: x["clat_ns"].get("percentile", {}).get("99.000000", 0)  # noqa: E731
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


def _guest_run(task: Dict[str, Any]) -> Result:
    g, r = task["guest"], task["remote_nodes"]
    if g["backend"] in ("dpuswap", "infiniswap") and r.get("count", 0) > 0:
        with Nodes(int(r["count"]), int(r["capacity_bytes"])) as nodes:
            res = guest_run(g, nodes.addrs)
    else:
        res = guest_run(g)
    return Result(metrics=res)


GUEST = Runner("ssdlab.dpuswap:GUEST", _guest_resolve, _guest_resources, _guest_run)


def _guest_plan(spec: Dict[str, Any], mode: str) -> List[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """The guest runs of the mode's ``guest`` table (none without one): every fraction, every
    backend below 100%."""
    common, m = _specs(spec, mode)
    gt = m.get("guest")
    if not gt:
        return []
    nodes = spec.get("nodes", {})
    remote = {"count": int(nodes.get("count", 2)), "capacity_bytes": parse_bytes(str(nodes.get("capacity", "2G")))}
    ws = parse_bytes(str(gt["working_set"]))
    kv = spec.get("kv", {})
    base = {"working_set_bytes": ws, "ops": int(gt["ops"]), "memory_bytes": parse_bytes(str(gt.get("memory", "512M"))),
            "read_fraction": kv.get("read_fraction", 0.5), "zipf_theta": kv.get("zipf_theta", 0.99),
            "compressibility": kv.get("compressibility", 0.7), "seed": spec.get("seed", 42),
            "latency": gt.get("latency", "emulated")}
    cache = max(1, int(ws * m["dpu_cache_fraction"]) // common["rmml"].get("block_bytes", 1 << 20)) * common["rmml"].get("block_bytes", 1 << 20)
    runs = []
    for f in _fractions(m):
        for b in (["local"] if f >= 1.0 else BACKENDS):
            g = dict(base, backend=b, local_fraction=f, rmml=dict(common["rmml"], cache_bytes=cache))
            if b == "znswap":
                g["znswap"] = common["znswap"]
            runs.append((f"guest_{b}_{int(round(f * 100))}", {"workload": "guest", "backend": b, "local_fraction": f,
                                                                  "dpu_cache_bytes": cache, "codec": g["rmml"].get("codec", "")},
                         {"guest": g, "remote_nodes": remote}))
    return runs


def _points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    return ([ExperimentPoint(name, values, SWAP.name, task) for name, values, task in _plan(spec, mode)]
            + [ExperimentPoint(name, values, GUEST.name, task) for name, values, task in _guest_plan(spec, mode)])


def _describe(r: Dict[str, Any]) -> str:
    if r.get("kind") == "guest":
        return (f"guest {r['backend']} {r['local_fraction'] * 100:.0f}%: {r['throughput_iops']:.0f} IOPS, "
                f"{r['swap_ins']} swap-ins, {r['swap_outs']} swap-outs")
    w = r["workload"]
    p = r.get("paging", {})
    tail = f", {p['major_faults']} faults, fault p99 {p['fault_latency_ns'].get('p99', 0) / 1e3:.1f} us" if p.get("major_faults") else ""
    return f"{w['kind']} completion {w['completion_ns'] / 1e9:.3f} s (modelled){tail}"


def _write_report(spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult],
                  log: Callable[[str], None]) -> Path:
    common, m = _specs(spec, mode)
    fractions = _fractions(m)
    names = [n for n, _, _ in _plan(spec, mode)]
    rows = [_row(n, results[n].metrics) for n in names]
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    by = {r["run"]: r for r in rows}
    _figures(out, by, fractions, m)
    md = out / "report.md"
    node_count = int(spec.get("nodes", {}).get("count", 2))
    text = _report(spec, mode, by, fractions, m, common, node_count, sum(r["wall_s"] for r in rows))
    guest = {n: results[n].metrics for n, _, _ in _guest_plan(spec, mode)}
    if guest:
        text += _guest_report(out, guest, fractions, m["guest"])
    md.write_text(text)
    return md


def _guest_report(out: Path, runs: Dict[str, Dict[str, Any]], fractions: List[float], gt: Dict[str, Any]) -> str:
    """The guest-kernel section of the report, its figure and guest.csv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def g(b: str, f: float) -> Dict[str, Any]:
        return runs[f"guest_{b}_{int(round(f * 100))}"]

    swap = sorted((f for f in fractions if f < 1.0), reverse=True)
    loc = g("local", 1.0)
    rows = [{"backend": r["backend"], "local_fraction": r["local_fraction"], "iops": r["throughput_iops"], "runtime_s": r["runtime_s"],
             "clat_mean_us": r["clat_mean_ns"] / 1e3, "clat_p99_us": r["clat_p99_ns"] / 1e3, "swap_ins": r["swap_ins"],
             "swap_outs": r["swap_outs"], "memory_limit_bytes": r["memory"].get("limit", 0),
             "dpu_cache_hit": r["disk"]["device"].get("cache_hit_ratio", ""),
             "compression": r["disk"]["device"].get("compression_ratio", "")} for r in runs.values()]
    with open(out / "guest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    xs = list(range(len(swap)))
    for i, b in enumerate(BACKENDS):
        ax.bar([x + (i - 1) * 0.25 for x in xs], [g(b, f)["throughput_iops"] for f in swap], width=0.25, color=COLORS[b], label=LABELS[b])
    ax.axhline(loc["throughput_iops"], color="k", ls="--", label="all local")
    ax.set_xticks(xs, [f"{int(f * 100)}% local" for f in swap])
    ax.set_ylabel("guest fio IOPS (wall clock)")
    ax.set_title("guest kernel swapping over NBD", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "guest.png", dpi=120)
    plt.close(fig)
    L = ["## A guest kernel swapping onto each backend (the document's own set-up)", "",
         f"`ssdlab rmml serve` exports each backend over NBD (replies at the modelled completion time, `--latency "
         f"{gt.get('latency', 'emulated')}`) as the NVMe disk of a Linux guest under QEMU ({loc['guest']['accel']}, "
         f"{loc['guest']['memory_bytes'] >> 20} MiB); the guest makes it its swap device and runs fio through mmap on a "
         f"{parse_bytes(str(gt['working_set'])) >> 20} MiB tmpfs working set (which the kernel swaps like anonymous memory): "
         f"{int(gt['ops'])} Zipfian 4 KiB reads and writes, buffers compressible as the key-value values. A cgroup v2 memory.max "
         "holds the workload to the given share of its footprint (the file plus fio's own memory, measured in the guest first). "
         "Figures are the guest's, in **wall-clock** time: the kernel's swap path, QEMU's NVMe emulation and NBD on loopback add "
         "their own costs to the modelled device times, and the guest runs under "
         f"{loc['guest']['accel'].upper()}.", "",
         "| backend | local | IOPS | mean clat (us) | p99 clat (us) | swap-ins | swap-outs | DPU cache hit | compression |",
         "|---|---|---|---|---|---|---|---|---|"]
    for f in fractions:
        for b in (["local"] if f >= 1.0 else BACKENDS):
            r = g(b, f)
            dev = r["disk"]["device"] if b != "local" else {}
            L.append(f"| {LABELS[b]} | {int(f * 100)}% | {r['throughput_iops']:.0f} | {r['clat_mean_ns'] / 1e3:.1f} | "
                     f"{r['clat_p99_ns'] / 1e3:.0f} | {r['swap_ins']} | {r['swap_outs']} | {_opt(dev.get('cache_hit_ratio'))} | "
                     f"{_opt(dev.get('compression_ratio'))} |")
    L += ["", "| row | document | ssdlab (guest) |", "|---|---|---|"]
    for f in swap:
        i = g("infiniswap", f)
        if f in DOC["motivation"]:
            dm = DOC["motivation"][f]
            L.append(f"| motivation, {int(f * 100)}%: Infiniswap-like vs all local: throughput, mean, p99 | {_pct(dm['throughput'])}, "
                     f"{_mult(dm['mean'])}, {dm['p99']}x | {_pct(_ratio(i['throughput_iops'], loc['throughput_iops']))}, "
                     f"{_xr(i['clat_mean_ns'], loc['clat_mean_ns'])}, {i['clat_p99_ns'] / max(loc['clat_p99_ns'], 1):.1f}x |")
        if f in DOC["throughput"]:
            dp = g("dpuswap", f)
            doc = f"+{DOC['throughput'][f]['infiniswap'] * 100:.0f}% / +{DOC['throughput'][f]['znswap'] * 100:.0f}%"
            L.append(f"| throughput, {int(f * 100)}%: DPUSwap vs Infiniswap / ZNSwap | {doc} | "
                     f"{_pct(_ratio(dp['throughput_iops'], i['throughput_iops']))} / "
                     f"{_pct(_ratio(dp['throughput_iops'], g('znswap', f)['throughput_iops']))} |")
            for b in ("infiniswap", "znswap"):
                o = g(b, f)
                _, dmn, dpp = DOC["reduction"][f][b]
                L.append(f"| mean, p99 at {int(f * 100)}%: DPUSwap vs {LABELS[b]} | -{dmn * 100:.1f}%, -{dpp * 100:.1f}% | "
                         f"{_pct(_ratio(dp['clat_mean_ns'], o['clat_mean_ns']))}, {_pct(_ratio(dp['clat_p99_ns'], o['clat_p99_ns']))} |")
    L += ["", "![guest](guest.png)", "", "All guest rows: `guest.csv`; each run's guest and disk figures: `runs/guest_*/metrics.json`.", ""]
    return "\n".join(L)


EXPERIMENT = Experiment(
    title="DPUSwap: compressed remote-memory swap managed on a DPU, against Infiniswap- and ZNSwap-like swap",
    points=_points, report=_write_report, describe=_describe,
    metrics=("workload.completion_ns", "workload.throughput_ops_per_s", "workload.bandwidth_bytes_per_s", "workload.latency.mean_ns",
             "workload.latency.p99_ns", "paging.major_faults", "paging.minor_faults", "paging.fault_latency_ns.p99", "paging.backend.cache_hit_ratio",
             "paging.backend.compression_ratio", "device.cache_hit_ratio", "wall_s"))


def _cache_bytes(ws: Dict[str, Any], wname: str, fraction: float, rmml: Dict[str, Any]) -> int:
    """DPU cache = ``fraction`` of the workload's working set, in whole blocks (at least one)."""
    d = _native.rmml_defaults()
    if wname == "kv":
        k = dict(d["kv"], **ws)
        region = k["records"] * k["record_bytes"]
    elif wname == "sort":
        region = dict(d["sort"], **ws)["elements"] * 8
    else:
        region = ws["span_bytes"]
    block = int(rmml.get("block_bytes", d["rmml"]["block_bytes"]))
    return max(1, int(region * fraction) // block) * block


def _cache_sweep(m: Dict[str, Any]) -> List[float]:
    """The DPU cache sizes swept (shares of the working set), the mode's own one among them."""
    sweep = [float(x) for x in m.get("cache_sweep", [])]
    return sorted({*sweep, float(m["dpu_cache_fraction"])}) if sweep else []


def _cache_run(f: float, cf: float) -> str:
    """The key-value DPUSwap run at local fraction ``f`` with a DPU cache of ``cf`` of the working set."""
    return f"kv_dpuswap_{int(round(f * 100))}_cache{cf:g}"


def _cache_row(by: Dict[str, Dict[str, Any]], m: Dict[str, Any], f: float, cf: float) -> Dict[str, Any]:
    return by[f"kv_dpuswap_{int(round(f * 100))}" if cf == m["dpu_cache_fraction"] else _cache_run(f, cf)]


def _crossover(by: Dict[str, Dict[str, Any]], m: Dict[str, Any], f: float, b: str) -> Optional[float]:
    """The smallest swept DPU cache share from which on DPUSwap's key-value throughput leads
    backend ``b``'s at local fraction ``f`` (None: not within the sweep)."""
    base = by[f"kv_{b}_{int(round(f * 100))}"]["throughput"]
    lead = None
    for cf in reversed(_cache_sweep(m)):
        if _cache_row(by, m, f, cf)["throughput"] <= base:
            break
        lead = cf
    return lead


def _ratio(a: float, b: float) -> float:
    return a / b - 1 if b else float("inf")


def _figures(out: Path, by: Dict[str, Dict[str, Any]], fractions: List[float], m: Dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swap = [f for f in fractions if f < 1.0]
    for wname, panels in (("kv", [("throughput", "throughput (ops/s)"), ("completion_s", "completion time (s)"),
                                  ("latency_mean_us", "mean latency (us)"), ("latency_p99_us", "p99 latency (us)")]),
                          ("sort", [("completion_s", "completion time (s)"), ("fault_p99_us", "p99 fault latency (us)")])):
        fig, axs = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.4))
        loc = by[f"{wname}_local_100"]
        for ax, (col, label) in zip(axs, panels, strict=True):
            xs = list(range(len(swap)))
            wdt = 0.8 / len(BACKENDS)
            for i, b in enumerate(BACKENDS):
                ax.bar([x + i * wdt for x in xs], [by[f"{wname}_{b}_{int(round(f * 100))}"][col] for f in swap], wdt,
                       label=LABELS[b], color=COLORS[b])
            if loc[col]:
                ax.axhline(loc[col], color="k", ls="--", lw=1, label="all local")
            ax.set_xticks([x + wdt for x in xs], [f"{int(f * 100)}%" for f in swap])
            ax.set_xlabel("local memory")
            ax.set_title(label, fontsize=10)
            ax.grid(alpha=0.3, axis="y")
        axs[0].legend(fontsize=7)
        fig.suptitle({"kv": "YCSB-style key-value (modelled time)", "sort": "in-memory sort (modelled time)"}[wname])
        fig.tight_layout()
        fig.savefig(out / f"{wname}.png", dpi=120)
        plt.close(fig)
    fig, axs = plt.subplots(1, 2, figsize=(8, 3.4))
    for ax, rw in zip(axs, ("randread", "randwrite"), strict=True):
        vals = [by[f"fio_{rw}_{b}"]["throughput"] / 1e6 for b in BACKENDS]
        ax.bar([LABELS[b] for b in BACKENDS], vals, color=[COLORS[b] for b in BACKENDS])
        ax.set_title(f"fio-style {rw}, 4 KiB, QD1", fontsize=10)
        ax.set_ylabel("MB/s (modelled)")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "fio.png", dpi=120)
    plt.close(fig)
    sweep = _cache_sweep(m)
    if sweep:
        fig, axs = plt.subplots(1, len(swap), figsize=(4.6 * len(swap), 3.6), squeeze=False)
        for ax, f in zip(axs[0], swap, strict=True):
            ax.plot([x * 100 for x in sweep], [_cache_row(by, m, f, x)["throughput"] for x in sweep], "o-", color=COLORS["dpuswap"], label=LABELS["dpuswap"])
            for b in ("infiniswap", "znswap"):
                ax.axhline(by[f"kv_{b}_{int(round(f * 100))}"]["throughput"], color=COLORS[b], ls="--", label=LABELS[b])
            ax.set_xscale("log", base=2)
            ax.set_xticks([x * 100 for x in sweep], [f"{x * 100:g}" for x in sweep])
            ax.set_xlabel("DPU cache (% of the working set)")
            ax.set_ylabel("throughput (ops/s, modelled)")
            ax.set_title(f"key-value at {int(round(f * 100))}% local memory", fontsize=10)
            ax.grid(alpha=0.3)
        axs[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "cache_sweep.png", dpi=120)
        plt.close(fig)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _report(spec, mode, by, fractions, m, common, node_count, wall) -> str:
    swap = sorted((f for f in fractions if f < 1.0), reverse=True)
    k = lambda b, f: by[f"kv_{b}_{int(round(f * 100))}"]  # noqa: E731
    loc = by["kv_local_100"]
    r = common["rmml"]
    d = _native.rmml_defaults()
    rm = dict(d["rmml"], **r)
    pg = dict(d["paging"], **common["paging"])
    L = [
        "# dpuswap: compressed remote-memory swap managed on a DPU", "",
        f"Mode `{mode}`, {wall:.0f} s of run wall time. Source: seed 000, section 3 (DPUSwap). Every figure is in **modelled time** "
        "(PCIe and RDMA link models, DPU codec speeds, the emulated ZNS SSD's NAND timing); the remote memory nodes are "
        f"{node_count} separate processes reached over TCP on loopback, whose own latency is reported separately as wall-clock "
        "fault latency. Paging: a userfaultfd region in-process, FIFO reclaim in batches of "
        f"{pg['evict_batch']} pages, swap readahead of up to {pg['readahead_pages']} slots (Linux's adaptive window; a fault "
        "that finds its page read ahead is a minor fault, counted apart); the budget is the local-memory fraction of the "
        "working set.", "",
        f"RMML: {rm['block_bytes'] >> 20} MiB blocks, {rm['group_blocks']} blocks per group, {rm['codec']}, DPU cache "
        f"{m['dpu_cache_fraction'] * 100:g}% of the working set ({rm['cache_policy']}), PCIe {rm['pcie']['latency_ns']} ns + "
        f"{rm['pcie']['bytes_per_s'] / 1e9:g} GB/s, RDMA {rm['rdma']['latency_ns'] / 1e3:g} us + {rm['rdma']['bytes_per_s'] / 1e9:g} GB/s.", "",
        "## The document's numbers and ssdlab's", "",
        "| row | document | ssdlab | why they differ |", "|---|---|---|---|",
    ]
    mot = DOC["motivation"]
    for f in swap:
        if f not in mot:
            continue
        i = k("infiniswap", f)
        dm = mot[f]
        L.append(f"| motivation, {int(f * 100)}% local: remote swap (Infiniswap-like) vs all local: throughput, completion, mean, p99 | "
                 f"{_pct(dm['throughput'])}, {_mult(dm['completion'])}, {_mult(dm['mean'])}, {dm['p99']}x | "
                 f"{_pct(_ratio(i['throughput'], loc['throughput']))}, {_xr(i['completion_s'], loc['completion_s'])}, "
                 f"{_xr(i['latency_mean_us'], loc['latency_mean_us'])}, {i['latency_p99_us'] / max(loc['latency_p99_us'], 1e-9):.1f}x | "
                 f"{_why_motivation(i, loc)} |")
    for f in swap:
        if f not in DOC["throughput"]:
            continue
        dp = k("dpuswap", f)
        cells = []
        for b in ("infiniswap", "znswap"):
            cells.append(f"vs {LABELS[b]} {_pct(_ratio(dp['throughput'], k(b, f)['throughput']))}")
        doc = f"+{DOC['throughput'][f]['infiniswap'] * 100:.0f}% / +{DOC['throughput'][f]['znswap'] * 100:.0f}%"
        L.append(f"| throughput, {int(f * 100)}% local: DPUSwap vs Infiniswap / ZNSwap | {doc} | {'; '.join(cells)} | "
                 f"{_why_tput(dp, k('infiniswap', f), k('znswap', f))} |")
    for f in swap:
        if f not in DOC["reduction"]:
            continue
        dp = k("dpuswap", f)
        for b in ("infiniswap", "znswap"):
            o = k(b, f)
            dc, dmn, dpp = DOC["reduction"][f][b]
            L.append(f"| completion, mean, p99 at {int(f * 100)}%: DPUSwap vs {LABELS[b]} | -{dc * 100:.1f}%, -{dmn * 100:.1f}%, -{dpp * 100:.1f}% | "
                     f"{_pct(_ratio(dp['completion_s'], o['completion_s']))}, {_pct(_ratio(dp['latency_mean_us'], o['latency_mean_us']))}, "
                     f"{_pct(_ratio(dp['latency_p99_us'], o['latency_p99_us']))} | {_why_lat(b, dp, o)} |")
    fr = {b: by[f"fio_randread_{b}"]["throughput"] for b in BACKENDS}
    fw = {b: by[f"fio_randwrite_{b}"]["throughput"] for b in BACKENDS}
    L.append(f"| fio random read: DPUSwap vs ZNSwap / Infiniswap | +81.7% / +17.9% | {_pct(_ratio(fr['dpuswap'], fr['znswap']))} / "
             f"{_pct(_ratio(fr['dpuswap'], fr['infiniswap']))} | {_why_fio_read(by)} |")
    L.append(f"| fio random write: DPUSwap vs ZNSwap / Infiniswap | \"提升1.28倍\" (read as +128%, i.e. 2.28x; 1.28x on the other reading) / +20.4% | "
             f"{fw['dpuswap'] / fw['znswap']:.2f}x / {_pct(_ratio(fw['dpuswap'], fw['infiniswap']))} | {_why_fio_write(by)} |")
    met, detail = _targets(k, swap)
    L += ["", f"Target (DPUSwap ahead of both baselines at {', '.join(f'{int(f * 100)}%' for f in swap)} in throughput, completion time, "
          f"mean and p99 latency, ZNSwap-like last, the gains larger with less local memory): **{'met' if met else 'missed'}**. {detail}", ""]
    L += ["## Key-value (YCSB-style)", "",
          "| backend | local | throughput (ops/s) | completion (s) | mean (us) | p99 (us) | faults: read / read ahead | read fault p50 / p99 (us) | wall fault p50 / p99 (us) | DPU cache hit | compression |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in fractions:
        for b in (["local"] if f >= 1.0 else BACKENDS):
            x = by[f"kv_{b}_{int(round(f * 100))}"]
            L.append(f"| {LABELS[b]} | {int(f * 100)}% | {x['throughput']:.0f} | {x['completion_s']:.3f} | {x['latency_mean_us']:.2f} | "
                     f"{x['latency_p99_us']:.2f} | {x['faults']} / {x['minor_faults']} | {x['fault_p50_us']:.1f} / {x['fault_p99_us']:.1f} | "
                     f"{x['fault_wall_p50_us']:.0f} / {x['fault_wall_p99_us']:.0f} | {_opt(x['cache_hit_ratio'])} | {_opt(x['compression_ratio'])} |")
    L += ["", "![key-value](kv.png)", "", "## In-memory sort", "",
          "| backend | local | completion (s) | faults: read / read ahead | read fault p50 / p99 (us) | DPU cache hit | compression |", "|---|---|---|---|---|---|---|"]
    for f in fractions:
        for b in (["local"] if f >= 1.0 else BACKENDS):
            x = by[f"sort_{b}_{int(round(f * 100))}"]
            L.append(f"| {LABELS[b]} | {int(f * 100)}% | {x['completion_s']:.3f} | {x['faults']} / {x['minor_faults']} | {x['fault_p50_us']:.1f} / {x['fault_p99_us']:.1f} | "
                     f"{_opt(x['cache_hit_ratio'])} | {_opt(x['compression_ratio'])} |")
    L += ["", "![sort](sort.png)", "", "## fio-style random I/O on the swap device (4 KiB, queue depth 1)", "",
          "| backend | randread MB/s | randread p99 (us) | randwrite MB/s | randwrite p99 (us) | DPU cache hit (read) |", "|---|---|---|---|---|---|"]
    for b in BACKENDS:
        rr, ww = by[f"fio_randread_{b}"], by[f"fio_randwrite_{b}"]
        L.append(f"| {LABELS[b]} | {rr['throughput'] / 1e6:.0f} | {rr['latency_p99_us']:.1f} | {ww['throughput'] / 1e6:.0f} | {ww['latency_p99_us']:.1f} | {_opt(rr['cache_hit_ratio'])} |")
    L += ["", "![fio](fio.png)", ""]
    sweep = _cache_sweep(m)
    if sweep:
        L += ["## What DPUSwap's lead rests on: the DPU cache (key-value)", "",
              "The document gives neither the DPU cache's size nor the working sets' (a BlueField-2 carries 16 GB of DRAM). "
              "DPUSwap's key-value throughput against each baseline, by the share of the working set the DPU cache holds:", "",
              "| local | DPU cache (% of working set) | throughput (ops/s) | hit ratio | p99 (us) | vs Infiniswap-like | vs ZNSwap-like |",
              "|---|---|---|---|---|---|---|"]
        for f in swap:
            for x in sweep:
                y = _cache_row(by, m, f, x)
                L.append(f"| {int(round(f * 100))}% | {x * 100:g}% | {y['throughput']:.0f} | {_opt(y['cache_hit_ratio'])} | {y['latency_p99_us']:.2f} | "
                         f"{_pct(_ratio(y['throughput'], k('infiniswap', f)['throughput']))} | {_pct(_ratio(y['throughput'], k('znswap', f)['throughput']))} |")
        L.append("")
        for f in swap:
            lead = {b: _crossover(by, m, f, b) for b in ("infiniswap", "znswap")}
            L.append(f"- At {int(round(f * 100))}% local memory DPUSwap leads "
                     + " and ".join(f"{LABELS[b]} " + (f"once the DPU cache holds {c * 100:g}% of the working set" if c is not None
                                                       else f"at no cache size up to {sweep[-1] * 100:g}%") for b, c in lead.items()) + ".")
        L += ["", "A hit crosses PCIe only and is the cheapest fault of the three; a miss fetches the whole compressed block over "
              "RDMA and decompresses it on a DPU core, about a hundred Infiniswap-like faults' worth, so the lead turns on how "
              "rarely DPUSwap misses.", "", "![cache sweep](cache_sweep.png)", ""]
    codecs = m.get("codecs", [])
    if codecs:
        f = min(fractions)
        L += [f"## Codecs (key-value, {int(f * 100)}% local)", "", "| codec | compression ratio | remote memory (MiB) | throughput (ops/s) | fault p99 (us) |", "|---|---|---|---|---|"]
        for c in codecs:
            y = by[f"kv_dpuswap_{int(round(f * 100))}_{c}"]
            L.append(f"| {c} | {_opt(y['compression_ratio'])} | {float(y['remote_bytes'] or 0) / 2**20:.1f} | {y['throughput']:.0f} | {y['fault_p99_us']:.1f} |")
        L.append("")
    L += ["Compression is measured on the pages the runs swap out: key-value records (8-byte key, 8-byte version, a value whose "
          f"{dict(d['kv'], **spec.get('kv', {}))['compressibility'] * 100:.0f}% is text-like words and the rest random bytes, in "
          "16-byte runs), sort keys (8-byte integers below elements x 16), and fio buffers (half text-like).", "",
          "Every run's summary is in `runs/NAME/metrics.json`; all rows are in `runs.csv` (and the sweep's `results.csv`). How the model works: docs/case-studies/dpuswap.md.", ""]
    return "\n".join(L)


def _opt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else "-"


def _mult(x: float) -> str:
    """A document increase: fractions below 1 as a percentage, others as a multiple."""
    return f"+{x * 100:.1f}%" if x < 1 else f"{x}x"


def _xr(a: float, b: float) -> str:
    q = a / b if b else float("inf")
    return f"{(q - 1) * 100:+.1f}%" if q < 2 else f"{q:.2f}x"


def _targets(k, swap) -> Tuple[bool, str]:
    ok = True
    notes = []
    for f in swap:
        dp, ii, zz = k("dpuswap", f), k("infiniswap", f), k("znswap", f)
        for o in (ii, zz):
            if not (dp["throughput"] > o["throughput"] and dp["completion_s"] < o["completion_s"]
                    and dp["latency_mean_us"] < o["latency_mean_us"] and dp["latency_p99_us"] < o["latency_p99_us"]):
                ok = False
                notes.append(f"at {int(f * 100)}% DPUSwap is not ahead of {LABELS[o['backend']]} on every measure")
        if not ii["throughput"] > zz["throughput"]:
            ok = False
            notes.append(f"at {int(f * 100)}% ZNSwap-like is not last")
    if len(swap) >= 2:
        hi, lo = swap[0], swap[-1]
        for b in ("infiniswap", "znswap"):
            g_hi = k("dpuswap", hi)["throughput"] / k(b, hi)["throughput"]
            g_lo = k("dpuswap", lo)["throughput"] / k(b, lo)["throughput"]
            if not g_lo > g_hi:
                ok = False
                notes.append(f"the gain over {LABELS[b]} does not grow from {int(hi * 100)}% to {int(lo * 100)}%")
    return ok, ("; ".join(notes) + ".") if notes else ""


def _why_motivation(i, loc) -> str:
    return ("The share of an operation spent in faults sets the loss. ssdlab charges each key-value operation a fixed "
            "2 us of computation and each fault its modelled swap path; the document's workload and host are not stated, so "
            "the size of the loss differs while its growth from 75% to 50% follows the fault rate.")


def _why_tput(dp, ii, zz) -> str:
    ahead = dp["throughput"] > ii["throughput"] and dp["throughput"] > zz["throughput"]
    return (f"DPU cache hit ratio {_opt(dp['cache_hit_ratio'])}. A hit crosses PCIe only; a miss fetches the whole compressed "
            "1 MiB block and decompresses it on a DPU core, queued behind the write-backs' compression. Swap readahead serves "
            f"{dp['minor_faults']} faults from pages read ahead (most of them would have been DPU cache hits), so the faults "
            f"that read from DPUSwap are mostly misses: p50 {dp['fault_p50_us']:.1f} us, p99 {dp['fault_p99_us']:.0f} us, "
            f"against p50 {ii['fault_p50_us']:.1f} us for an Infiniswap-like RDMA read and {zz['fault_p50_us']:.1f} us for a "
            "ZNSwap-like NAND read. "
            + ("The hits carry it." if ahead else
               "Here the misses outweigh the hits: at this DPU cache size (a share of the working set the document does not give) "
               "and with software codecs at Arm-core speeds, a miss costs a hundred Infiniswap-like faults."))


def _why_lat(b, dp, o) -> str:
    if dp["latency_p99_us"] < o["latency_p99_us"]:
        return ("Tail faults on the ZNS SSD wait for NAND reads queued behind programs and zone reclaim on the same die."
                if b == "znswap" else "Most DPUSwap faults are PCIe-only cache hits; an Infiniswap-like fault always pays RDMA.")
    return ("DPUSwap's tail is its cache misses: an RDMA fetch of the compressed block, 1 MiB of decompression, and the wait for "
            "DPU cores busy compressing evicted blocks.")


def _why_fio_read(by) -> str:
    d = by["fio_randread_dpuswap"]
    return (f"Uniform 4 KiB reads at queue depth 1 over a span 8x the DPU cache: hit ratio {_opt(d['cache_hit_ratio'])}, so nearly every "
            "read fetches and decompresses 1 MiB to return 4 KiB; the document's fio job (span, cache size) is not given.")


def _why_fio_write(by) -> str:
    return ("A 4 KiB write to an uncached block must keep the block's other pages: the RMML fetches and decompresses the block, "
            "and evicting a dirty block compresses 1 MiB and may compact its group. Infiniswap-like writes are one RDMA each, "
            "ZNSwap-like ones land in the SSD's write buffer. The document's \"1.28倍\" is read as +128% (as its \"1.1倍\" throughput "
            "gain is +110%).")


# ---- command line: `ssdlab rmml node|run` ----

def _cmd_rmml(args) -> int:
    if args.action == "node":
        cap = parse_bytes(args.capacity)
        st = _native.rmml_node_serve(args.listen or "127.0.0.1:0", cap, args.quiet)
        if not args.quiet:
            print(f"rmml node stopped: {st['regions']} regions, {st['used_bytes']} bytes in use")
        return 0
    if args.action == "serve":
        s = read_toml(args.spec, "dpuswap spec") if args.spec else {"backend": "dpuswap"}
        if args.backend:
            s["backend"] = args.backend
        if args.nodes:
            s["nodes"] = [a.strip() for a in args.nodes.split(",") if a.strip()]
        max_request = parse_bytes(args.max_request)
        if not 512 <= max_request <= 2**31 - 1:
            raise ValueError(f"--max-request {args.max_request}: must be 512 bytes to 2G - 1")
        m = serve(s, parse_bytes(args.size), listen=args.listen or "127.0.0.1:10809", latency=args.latency or "none",
                  max_connections=args.max_connections, max_request=max_request, metrics_out=args.metrics_out,
                  quiet=args.quiet)
        if not args.quiet:
            lat = m["latency_ns"]
            print(f"rmml serve: {m['backend']}: {m['nbd']['requests']} requests; modelled read p99 "
                  f"{lat['read']['p99'] / 1e3:.1f} us, write p99 {lat['write']['p99'] / 1e3:.1f} us", file=sys.stderr)
        return 0
    if args.action == "guest":
        return _cmd_guest(args)
    if not args.spec:
        raise ValueError("ssdlab rmml run SPEC.toml [--out DIR]")
    s = read_toml(args.spec, "dpuswap spec")
    res = run(s, progress=not args.quiet and sys.stderr.isatty())
    text = json.dumps(res, indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "summary.json").write_text(text)
    w = res["workload"]
    print(f"{res['backend']}: {w['kind']} completion {w['completion_ns'] / 1e9:.3f} s (modelled)"
          + (f", {res['paging']['major_faults']} faults (+{res['paging']['minor_faults']} read ahead), fault p99 {res['paging']['fault_latency_ns']['p99'] / 1e3:.1f} us" if "paging" in res else "")
          + (f"; wrote {Path(args.out) / 'summary.json'}" if args.out else ""))
    return 0


def _cmd_guest(args) -> int:
    """One guest swap run with the reproduction's tables (experiments/dpuswap/experiment.toml)."""
    from .experiments import load_spec

    spec = load_spec("dpuswap")
    common, m = _specs(spec, "quick")
    fraction = float(args.fraction)
    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction {args.fraction}: expected 0 < f <= 1")
    ws = parse_bytes(args.working_set)
    block = common["rmml"].get("block_bytes", 1 << 20)
    g = {"backend": args.backend or "dpuswap", "local_fraction": fraction, "working_set_bytes": ws, "ops": int(args.ops),
         "memory_bytes": parse_bytes(args.memory), "seed": spec.get("seed", 42), "latency": args.latency or "emulated",
         "read_fraction": spec["kv"]["read_fraction"], "zipf_theta": spec["kv"]["zipf_theta"],
         "compressibility": spec["kv"]["compressibility"],
         "rmml": dict(common["rmml"], cache_bytes=max(1, int(ws * m["dpu_cache_fraction"]) // block) * block)}
    if g["backend"] == "znswap":
        g["znswap"] = common["znswap"]
    g = _guest_resolve({"guest": g})["guest"]
    nodes = [a.strip() for a in (args.nodes or "").split(",") if a.strip()]
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr))
    out = Path(args.out) if args.out else None
    from .vm import VmError

    try:
        r = guest_run(g, nodes, out=out, log=say)
    except (VmError, RuntimeError) as e:
        print(f"ssdlab rmml guest: error: {e}", file=sys.stderr)
        return 1
    if out:
        (out / "guest.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    print(f"{g['backend']} at {fraction * 100:.0f}% local: {r['throughput_iops']:.0f} IOPS, clat mean {r['clat_mean_ns'] / 1e3:.1f} us, "
          f"p99 {r['clat_p99_ns'] / 1e3:.0f} us; {r['swap_ins']} swap-ins, {r['swap_outs']} swap-outs (guest wall clock)"
          + (f"; wrote {out / 'guest.json'}" if out else ""))
    return 0


def add_cli(sub) -> None:
    """Register `ssdlab rmml` on the CLI's subparsers."""
    import argparse

    from .args import int_in

    r = sub.add_parser("rmml", help="dpuswap: serve a remote memory node, run one swap experiment, or serve a backend over NBD",
                       epilog="node: lend --capacity bytes of memory to RMMLs over TCP until Ctrl-C/SIGTERM (prints its address)\n"
                              "run: one run of a spec file (TOML: backend, local_fraction, [workload.kv|sort|fio], [rmml], ...)\n"
                              "serve: the backend of a spec file (or --backend) as an NBD disk until Ctrl-C/SIGTERM:\n"
                              "    ssdlab rmml serve --size 256M &  qemu-io -f raw -c 'write -P 7 0 1M' nbd://127.0.0.1:10809/dpuswap\n"
                              "guest: a Linux guest (ssdlab vm) swapping onto the backend under a memory limit of --fraction\n"
                              "docs: docs/case-studies/dpuswap.md",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("action", choices=["node", "run", "serve", "guest"])
    r.add_argument("spec", nargs="?", help="run: spec file; serve: spec file for the backend and its tables (optional)")
    r.add_argument("--listen", help="node: HOST:PORT (port 0: a free one; default 127.0.0.1:0); "
                                    "serve: the NBD address, loopback (default 127.0.0.1:10809)")
    r.add_argument("--capacity", default="1G", help="node: memory to lend, e.g. 512M, 4G (default %(default)s)")
    r.add_argument("--out", help="run: directory for summary.json; guest: for guest.json and the guest's logs")
    r.add_argument("--backend", choices=BACKENDS, help="serve, guest: the backend (overrides the spec's; default dpuswap)")
    r.add_argument("--fraction", default="0.5", help="guest: local memory as a share of the workload's footprint (default %(default)s)")
    r.add_argument("--working-set", default="32M", help="guest: the working set (default %(default)s)")
    r.add_argument("--ops", default=10000, type=int_in(1, 10**9), help="guest: fio operations (default %(default)s)")
    r.add_argument("--memory", default="512M", help="guest: the guest's RAM (default %(default)s)")
    r.add_argument("--size", default="256M", help="serve: the disk's size, e.g. 1G (rounded up to the backend's unit; default %(default)s)")
    r.add_argument("--nodes", help="serve, guest: remote memory nodes HOST:PORT,HOST:PORT (default: the spec's, else two in-process ones)")
    r.add_argument("--latency", choices=["none", "emulated"],
                   help="serve (default none), guest (default emulated): none: reply when done; emulated: reply at the "
                        "modelled completion time")
    r.add_argument("--max-connections", type=int_in(1, 65536), default=16, help="serve: clients at once (default %(default)s)")
    r.add_argument("--max-request", default="32M", help="serve: largest read/write payload (default %(default)s)")
    r.add_argument("--metrics-out", help="serve: directory for metrics.json at exit and on SIGUSR1")
    r.add_argument("-q", "--quiet", action="store_true")
    r.set_defaults(func=_cmd_rmml)
