"""vm-baseline's runner: :data:`PAIR`, one fio job with one server latency mode run on the host
(:func:`~.api.host_fio`) and then in a guest per disk kind (:func:`ssdlab.vm.run`), each on a
fresh device of one config; its metrics are one row per disk kind."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from ... import _native
from ...config import resolve_config
from ...runners import PROCESS_BYTES, Resources, Result, Runner
from ...units import parse_size
from ...vm import VmError, fio_summary, run as vm_run
from .api import host_fio

# QEMU's own memory beside the guest's RAM (~300 MiB under TCG).
QEMU_BYTES = 300 << 20


def job_row(fio: Dict[str, Any]) -> Dict[str, Any]:
    """The measured (last, non-fill) job of a fio result: IOPS over reads and writes, its queue
    depth and its completion latencies (ns)."""
    rows = [r for r in fio_summary(fio) if r["job"] != "fill"]
    assert rows, "a fio result with no measured job"
    job = rows[-1]["job"]
    mine = [r for r in rows if r["job"] == job]
    by = {r["op"]: r for r in mine}
    opts: Dict[str, Any] = next((j.get("job options", {}) for j in fio.get("jobs", []) if j.get("jobname") == job), {})
    iodepth = int(opts.get("iodepth", fio.get("global options", {}).get("iodepth", 1)))
    return {"job": job, "iops": sum(r["iops"] for r in mine), "iodepth": iodepth,
            "read_p99_ns": by.get("read", {}).get("clat_ns_p99"), "write_p99_ns": by.get("write", {}).get("clat_ns_p99"),
            "write_mean_ns": by.get("write", {}).get("clat_ns_mean"), "write_p50_ns": by.get("write", {}).get("clat_ns_p50")}


def _us(ns: Any) -> Optional[float]:
    return None if ns is None else round(ns / 1e3, 1)


def pair(cfg: Dict[str, Any], job: Path, latency: str, m: Dict[str, Any], out: Path,
         log: Callable[[str], None]) -> List[Dict[str, Any]]:
    """One job with one latency mode: the host run, then a guest run per disk kind (``m``:
    disks, memory, cpus); the runs' files go to ``out``/runs/."""
    name = f"{job.stem}-{latency}"
    t0 = time.monotonic()
    h = host_fio(cfg, job, out / "runs" / f"{name}-host", latency)
    hr = job_row(h["fio"])
    log(f"{job.stem}, latency {latency}, host (fio nbd engine): {hr['iops']:.0f} IOPS, device DLWA {h['metrics']['dlwa']:.3f} "
        f"({time.monotonic() - t0:.0f} s)")
    rows = []
    for disk in m.get("disks", ["nvme"]):
        t0 = time.monotonic()
        rep = vm_run(cfg, fio=job, disk=disk, memory=m.get("memory", "1G"), cpus=m.get("cpus", 2),
                     out=out / "runs" / f"{name}-guest-{disk}", serve_args=("--latency", latency), log=lambda s: None)
        if rep.fio is None:
            raise VmError(f"the guest's fio {job.name} left no JSON (see {rep.out_dir / 'output.txt'})")
        gr = job_row(rep.fio)
        log(f"{job.stem}, latency {latency}, guest ({disk}): {gr['iops']:.0f} IOPS ({gr['iops'] / hr['iops']:.3f}x host), "
            f"device DLWA {rep.dlwa:.3f}, boot to workload {rep.guest['boot_to_workload_s']:.1f} s ({time.monotonic() - t0:.0f} s)")
        hm, gm = h["metrics"], rep.metrics
        rows.append({
            "job": job.stem, "latency": latency, "disk": disk, "accel": rep.guest["accel"],
            "host_iops": round(hr["iops"], 1), "guest_iops": round(gr["iops"], 1),
            "guest_over_host_iops": round(gr["iops"] / hr["iops"], 4),
            "host_write_p99_us": _us(hr["write_p99_ns"]), "guest_write_p99_us": _us(gr["write_p99_ns"]),
            "host_read_p99_us": _us(hr["read_p99_ns"]), "guest_read_p99_us": _us(gr["read_p99_ns"]),
            "host_write_mean_us": _us(hr["write_mean_ns"]), "guest_write_mean_us": _us(gr["write_mean_ns"]),
            "device_host_write_bytes_host": hm["host_write_bytes"], "device_host_write_bytes_guest": gm["host_write_bytes"],
            "device_dlwa_host": round(hm["dlwa"], 4), "device_dlwa_guest": round(gm["dlwa"], 4),
            "device_gc_events_host": hm["gc_events"], "device_gc_events_guest": gm["gc_events"],
            "device_write_p99_us_host": _us(hm["latency_ns"]["write"].get("p99")),
            "device_write_p99_us_guest": _us(gm["latency_ns"]["write"].get("p99")),
            "boot_to_workload_s": rep.guest["boot_to_workload_s"], "guest_workload_s": rep.guest.get("workload_s"),
            "qemu_peak_rss_mib": round(rep.guest["qemu_peak_rss_bytes"] / 2**20, 1),
            "server_peak_rss_mib_guest": round(rep.guest["server_peak_rss_bytes"] / 2**20, 1),
            "server_peak_rss_mib_host": round(h["server_peak_rss_bytes"] / 2**20, 1),
            # Added with the move to ssdlab.studies (the columns above are the old ones).
            "iodepth": gr["iodepth"], "host_write_p50_us": _us(hr["write_p50_ns"]), "guest_write_p50_us": _us(gr["write_p50_ns"]),
            "device_write_p50_us_host": _us(hm["latency_ns"]["write"].get("p50")),
            "device_write_p50_us_guest": _us(gm["latency_ns"]["write"].get("p50")),
            "device_host_trim_bytes_guest": gm.get("host_trim_bytes", 0),
        })
    return rows


def _resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    return {**task, "config": resolve_config(config=task["config"])}


def _resources(task: Dict[str, Any]) -> Resources:
    dev = _native.config_sizing(task["config"])
    server = int(dev["memory_bytes"] + dev["data_bytes_max"]) + PROCESS_BYTES
    # The guest's RAM and QEMU's own; the server, and fio on the host side.
    guest = parse_size(str(task["memory"]), "memory", positive=True) + QEMU_BYTES
    return Resources(memory_bytes=guest + server + PROCESS_BYTES, cpus=int(task["cpus"]) + 1)


def _run(task: Dict[str, Any]) -> Result:
    with tempfile.TemporaryDirectory(prefix="ssdlab-vm-baseline-") as tmp:
        job = Path(tmp) / task["job_name"]
        job.write_text(task["job"])
        out = Path(tmp) / "out"
        rows = pair(task["config"], job, task["latency"], task, out, log=lambda s: None)
        runs = out / "runs"
        files: Dict[str, Union[str, bytes]] = {str(f.relative_to(runs)): f.read_bytes() for f in sorted(runs.rglob("*"))
                                               if f.is_file()}
    return Result(metrics={"rows": rows}, files=files)


PAIR = Runner("ssdlab.studies.vm_baseline.runner:PAIR", _resolve, _resources, _run)
