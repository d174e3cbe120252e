"""`ssdlab reproduce vm-baseline`: the same fio jobs on the host (fio's nbd engine) and in a guest
(`ssdlab vm`), each on a fresh device of one config, to measure what the guest adds.

For every job of experiments/vm-baseline/experiment.toml: a host run (a fresh `ssdlab serve`,
fio --ioengine=nbd), then a guest run per disk kind (:func:`ssdlab.vm.run`). The report puts
side by side fio's IOPS and completion latency, the device's DLWA, host bytes and write
latency, the guest's boot-to-workload time and the memory of QEMU and the server.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import _native  # noqa: E402
from .config import resolve_config  # noqa: E402
from .experiments import Experiment, ExperimentPoint, PointResult  # noqa: E402
from .runners import PROCESS_BYTES, Resources, Result, Runner  # noqa: E402
from .nbd import stats  # noqa: E402
from .serving import free_port  # noqa: E402
from .vm import (EXPORT, VmError, _exit_text, _parse_fio, _stop, _tail, _wait_server,  # noqa: E402
                 config_toml, fio_summary, run as vm_run)


def host_fio(config: Dict[str, Any], job: Path, out: Path, latency: str = "none") -> Dict[str, Any]:
    """Run fio job ``job`` with the nbd engine against a fresh `ssdlab serve --latency LATENCY`
    of ``config``;
    writes fio.json, metrics.json, timeseries.csv and server.log into ``out``. Returns
    {"fio": fio's JSON, "metrics": the device's, "server_peak_rss_bytes", "wall_s"}."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "device.toml"
    cfg_path.write_text(config_toml(config))
    addr = f"127.0.0.1:{free_port()}"
    server_log = out / "server.log"
    started = time.monotonic()
    with open(server_log, "wb") as slog:
        server = subprocess.Popen([sys.executable, "-m", "ssdlab.cli", "serve", str(cfg_path), "--listen", addr,
                                   "--metrics-out", str(out), "--latency", latency], stdout=slog, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        try:
            _wait_server(server, addr, server_log)
            size = stats(addr)["device"]["logical_bytes"]
            # Before the job file, these are defaults the job may override (as in the guest).
            p = subprocess.run(["fio", "--output-format=json", "--ioengine=nbd", f"--uri=nbd://{addr}/{EXPORT}",
                                f"--size={size}", str(job)], capture_output=True, text=True)
        except BaseException:
            _stop(server)
            raise
        code, rss = _stop(server, signal.SIGTERM, timeout_s=120)
    (out / "fio.json").write_text(p.stdout)
    if p.returncode != 0:
        raise VmError(f"host fio {job.name} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    if code != 0:
        raise VmError(f"ssdlab serve ended with {_exit_text(code)}; its log:\n{_tail(server_log)}")
    fio = _parse_fio(p.stdout)
    if fio is None:
        raise VmError(f"host fio {job.name} printed no JSON (see {out / 'fio.json'})")
    return {"fio": fio, "metrics": json.loads((out / "metrics.json").read_text()), "server_peak_rss_bytes": rss,
            "wall_s": round(time.monotonic() - started, 3)}


def _job_row(fio: Dict[str, Any]) -> Dict[str, Any]:
    """The measured (last, non-fill) job of a fio result: IOPS over reads and writes, p99s."""
    rows = [r for r in fio_summary(fio) if r["job"] != "fill"]
    assert rows, "a fio result with no measured job"
    job = rows[-1]["job"]
    mine = [r for r in rows if r["job"] == job]
    by = {r["op"]: r for r in mine}
    return {"job": job, "iops": sum(r["iops"] for r in mine),
            "read_p99_ns": by.get("read", {}).get("clat_ns_p99"), "write_p99_ns": by.get("write", {}).get("clat_ns_p99"),
            "write_mean_ns": by.get("write", {}).get("clat_ns_mean")}


def _device(spec: Dict[str, Any], mode: str) -> Dict[str, Any]:
    m = spec[mode]
    device = dict(spec.get("device", {}))
    device["seed"] = spec.get("seed", 42)
    if "geometry" in m:
        device["geometry"] = {**device.get("geometry", {}), **m["geometry"]}
    return resolve_config(config=device)


def _points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    """A point per (job, latency mode): its host run and a guest run per disk kind, one after
    another on one machine (they measure wall-clock speed, so they hold the CPUs they use)."""
    from .experiments import experiments_root

    m = spec[mode]
    cfg = _device(spec, mode)
    jobs_dir = experiments_root() / "vm"
    pts = []
    for job_name in m["jobs"]:
        job = jobs_dir / job_name
        if not job.is_file():
            raise FileNotFoundError(f"vm-baseline: job {job} not found")
        for latency in m.get("latency", ["none"]):
            task = {"config": cfg, "job_name": job_name, "job": job.read_text(), "latency": latency,
                    "disks": list(m.get("disks", ["nvme"])), "memory": m.get("memory", "1G"), "cpus": m.get("cpus", 2)}
            pts.append(ExperimentPoint(f"{job.stem}-{latency}", {"job": job.stem, "latency": latency}, PAIR.name, task))
    return pts


def _pair_resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    return {**task, "config": resolve_config(config=task["config"])}


def _pair_resources(task: Dict[str, Any]) -> Resources:
    from .runners import parse_bytes

    dev = _native.config_sizing(task["config"])
    server = int(dev["memory_bytes"] + dev["data_bytes_max"]) + PROCESS_BYTES
    # The guest's RAM and QEMU's own (~300 MiB under TCG); the server, and fio on the host side.
    guest = parse_bytes(str(task["memory"]), "memory") + (300 << 20)
    return Resources(memory_bytes=guest + server + PROCESS_BYTES, cpus=int(task["cpus"]) + 1)


def _pair_run(task: Dict[str, Any]) -> Result:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ssdlab-vm-baseline-") as tmp:
        job = Path(tmp) / task["job_name"]
        job.write_text(task["job"])
        out = Path(tmp) / "out"
        rows = _pair(task["config"], job, task["latency"], task, out, log=lambda s: None)
        runs = out / "runs"
        files = {str(f.relative_to(runs)): f.read_bytes() for f in sorted(runs.rglob("*")) if f.is_file()}
    return Result(metrics={"rows": rows}, files=files)


PAIR = Runner("ssdlab.vmbaseline:PAIR", _pair_resolve, _pair_resources, _pair_run)


def _write_report(spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult],
                  log: Callable[[str], None]) -> Path:
    cfg = _device(spec, mode)
    rows: List[Dict[str, Any]] = [r for p in _points(spec, mode) for r in results[p.name].metrics["rows"]]
    with open(out / "baseline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _plot(rows, out / "iops.png")
    md = out / "report.md"
    md.write_text(_report(mode, cfg, rows))
    return md


def _describe(m: Dict[str, Any]) -> str:
    return ", ".join(f"{r['disk']}: guest/host IOPS {r['guest_over_host_iops']:.3f}" for r in m["rows"])


def _pair(cfg: Dict[str, Any], job: Path, latency: str, m: Dict[str, Any], out: Path,
          log: Callable[[str], None]) -> List[Dict[str, Any]]:
    """One job with one latency mode: the host run, then a guest run per disk kind."""
    name = f"{job.stem}-{latency}"
    t0 = time.monotonic()
    h = host_fio(cfg, job, out / "runs" / f"{name}-host", latency)
    hr = _job_row(h["fio"])
    log(f"{job.stem}, latency {latency}, host (fio nbd engine): {hr['iops']:.0f} IOPS, device DLWA {h['metrics']['dlwa']:.3f} "
        f"({time.monotonic() - t0:.0f} s)")
    rows = []
    for disk in m.get("disks", ["nvme"]):
        t0 = time.monotonic()
        rep = vm_run(cfg, fio=job, disk=disk, memory=m.get("memory", "1G"), cpus=m.get("cpus", 2),
                     out=out / "runs" / f"{name}-guest-{disk}", serve_args=("--latency", latency), log=lambda s: None)
        if rep.fio is None:
            raise VmError(f"the guest's fio {job.name} left no JSON (see {rep.out_dir / 'output.txt'})")
        gr = _job_row(rep.fio)
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
        })
    return rows


def _us(ns: Any) -> Any:
    return None if ns is None else round(ns / 1e3, 1)


def _plot(rows: List[Dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    labels = [f"{r['job']}\n{r['latency']}, {r['disk']}" for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["host_iops"] for r in rows], width=0.4, label="host: fio nbd engine")
    ax.bar([i + 0.2 for i in x], [r["guest_iops"] for r in rows], width=0.4, label="guest: fio libaio in ssdlab vm")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("IOPS")
    ax.set_yscale("log")
    ax.set_title("Same fio job, same device config: host vs guest")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report(mode: str, cfg: Dict[str, Any], rows: List[Dict[str, Any]]) -> str:
    g = cfg["geometry"]
    accel = sorted({r["accel"] for r in rows})
    lines = [
        "# vm-baseline: the same fio jobs on the host and in a guest", "",
        f"Mode `{mode}`. Device: preset `{cfg['preset']}`, {g['channels']}x{g['dies_per_channel']} dies, "
        f"{g['blocks_per_plane']} blocks per plane, spare factor {cfg['ftl']['spare_factor']}, timing "
        f"{'on' if cfg['timing']['enabled'] else 'off'}; a fresh empty device for every run. Host: fio's nbd engine "
        "straight to `ssdlab serve`. Guest: `ssdlab vm` (fio with libaio and O_DIRECT on the raw disk; "
        f"accelerator {', '.join(accel)}). Jobs: experiments/vm/.", "",
        "| job | latency | disk | host IOPS | guest IOPS | guest / host | write p99 host / guest | read p99 host / guest | "
        "device host writes host / guest | device DLWA host / guest | device write p99 host / guest |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        same = "same" if r["device_host_write_bytes_host"] == r["device_host_write_bytes_guest"] else "differ"
        lines.append(
            f"| {r['job']} | {r['latency']} | {r['disk']} | {r['host_iops']:.0f} | {r['guest_iops']:.0f} | {r['guest_over_host_iops']:.3f} | "
            f"{_fmt_us(r['host_write_p99_us'])} / {_fmt_us(r['guest_write_p99_us'])} | "
            f"{_fmt_us(r['host_read_p99_us'])} / {_fmt_us(r['guest_read_p99_us'])} | "
            f"{r['device_host_write_bytes_host'] / 2**20:.1f} / {r['device_host_write_bytes_guest'] / 2**20:.1f} MiB ({same}) | "
            f"{r['device_dlwa_host']:.4f} / {r['device_dlwa_guest']:.4f} | "
            f"{_fmt_us(r['device_write_p99_us_host'])} / {_fmt_us(r['device_write_p99_us_guest'])} |")
    lines += ["", "![IOPS, host vs guest](iops.png)", "",
              "| job | latency | disk | boot to workload | guest workload | QEMU peak RSS | server peak RSS (guest run / host run) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['job']} | {r['latency']} | {r['disk']} | {r['boot_to_workload_s']:.2f} s | {r['guest_workload_s'] or 0:.1f} s | "
                     f"{r['qemu_peak_rss_mib']:.0f} MiB | {r['server_peak_rss_mib_guest']:.0f} / {r['server_peak_rss_mib_host']:.0f} MiB |")
    lines += [
        "",
        "What the columns say. The host run is the NBD path alone; the guest run adds a kernel's block layer, QEMU's "
        "device model and QEMU's NBD client, under TCG binary translation on this machine (KVM does not work here, "
        "see docs/vm.md). Two server latency modes: `none` replies as soon as the work is done, so fio measures the "
        "plumbing, and a fast client can send more than the emulated device completes in the same wall time: its "
        "simulated queue, and so the device's write latency, then grow (the host rows); `emulated` replies at the "
        "device's completion time (as FEMU does), so both sides wait for the device and fio's latencies include it. "
        "The device sees the same commands from both sides when the guest adds no file system and fio's amounts are "
        "fixed (not timed): the same host bytes, and DLWA equal up to the garbage collection that runs on idle dies, "
        "which depends on when commands arrive (served devices follow the wall clock, so served runs are not "
        "byte-identical).", "",
        "Raw runs (fio.json, metrics.json, console and server logs) are in `runs/`; the table is `baseline.csv`.",
    ]
    return "\n".join(lines) + "\n"


def _fmt_us(us: Any) -> str:
    if us is None:
        return "-"
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} us"


EXPERIMENT = Experiment(title="The same fio jobs in a guest (ssdlab vm) and on the host, on fresh emulated SSDs (docs/vm.md)", points=_points, report=_write_report, describe=_describe,
                        metrics=("rows.0.guest_over_host_iops", "rows.0.device_dlwa_host", "rows.0.device_dlwa_guest"))
