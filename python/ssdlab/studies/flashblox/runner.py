"""flashblox's runner on the sweep engine: one point is a timed multi-tenant run, a lifetime
study (optionally replaying block traces it generates, seeded) or the layer's cost."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from ... import _native
from ...runners import PROCESS_BYTES, Resources, Result, Runner, report_progress


def write_msr_traces(out: Path, n: int, seed: int, disk_bytes: int) -> List[Path]:
    """Synthetic block traces in the MSR Cambridge format: tenant i writes 2^i times as fast
    (64 KiB-aligned random writes over a hot fifth of its disk 80% of the time), with reads
    between; 200 s of trace each; every random choice from ``seed``."""
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        p = out / trace_name(i)
        ticks_per_s = 10_000_000  # FILETIME: 100 ns
        rate = 20 * 2 ** i  # writes per trace second
        lines = []
        t = 128166372000000000
        for _ in range(int(200 * rate)):
            t += int(rng.expovariate(rate) * ticks_per_s) + 1
            hot = rng.random() < 0.8
            span = disk_bytes // 5 if hot else disk_bytes
            off = rng.randrange(0, max(1, span // 65536 - 1)) * 65536
            op = "Write" if rng.random() < 0.7 else "Read"
            lines.append(f"{t},src{i},0,{op},{off},65536,100")
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def trace_name(i: int) -> str:
    return f"tenant{i}.msr.csv"


def _resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    kind = task.get("kind")
    if kind not in ("run", "lifetime", "cost"):
        raise ValueError(f"flashblox point: kind {kind!r}; expected run, lifetime or cost")
    return {**task, "device": _native.config_resolve(dict(task["device"]), "<flashblox device>")}


def _resources(task: Dict[str, Any]) -> Resources:
    s = _native.config_sizing(dict(task["device"]))
    g = task["device"]["geometry"]
    chunks = g["channels"] * g["dies_per_channel"] * g["blocks_per_plane"]
    # The layer's maps (4 bytes per logical unit, an owner per chunk) and each KV's index
    # (~80 bytes per record: key, location, hash-table slack).
    maps = chunks * (g["planes_per_die"] * g["pages_per_block"] * 4 + 64)
    kv = sum(80 * int(t.get("app", {}).get("ycsb", {}).get("records", 0)) for t in task.get("spec", {}).get("tenants", []))
    return Resources(memory_bytes=int(s["memory_bytes"] + s["data_bytes_max"]) + maps + kv + PROCESS_BYTES)


def _run(task: Dict[str, Any]) -> Result:
    dev, kind = task["device"], task["kind"]
    if kind == "cost":
        return Result(metrics=_native.vssd_layer_cost(dev, int(task["rounds"])))
    if kind == "run":
        res, _, interrupted = _native.vssd_run(dev, task["spec"], report_progress)
        return Result(metrics=res, interrupted=interrupted)
    gen = task.get("msr_traces")
    if gen is None:
        return Result(metrics=_native.vssd_lifetime(dev, task["spec"], report_progress)[0])
    with tempfile.TemporaryDirectory(prefix="ssdlab-vssd-") as d:
        paths = write_msr_traces(Path(d), gen["count"], gen["seed"], gen["disk_bytes"])
        sp = json.loads(json.dumps(task["spec"]))
        for t in sp["tenants"]:
            if "trace" in t:
                t["trace"]["path"] = str(Path(d) / t["trace"]["path"])
        res = _native.vssd_lifetime(dev, sp, report_progress)[0]
        # The traces replayed, kept beside the point's result.
        files: Dict[str, str | bytes] = {p.name: p.read_text() for p in paths}
        return Result(metrics=res, files=files)


VSSD = Runner("ssdlab.studies.flashblox.runner:VSSD", _resolve, _resources, _run)
