"""vm-baseline's points: every (fio job, server latency mode, seed) of the mode, each a host run
and a guest run per disk kind on fresh devices of one config (:data:`~.runner.PAIR`).

The seed is the device's (``seed`` of its config) and fio's: a job file's ``randseed=`` lines
are set to it (the shipped jobs say ``randseed=42``, so seed 42 runs them unchanged; a job
without one gets a ``[global]`` section with it at the top)."""

from __future__ import annotations

import re
from typing import Any, Dict, List

from ...config import resolve_config
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .runner import PAIR

_RANDSEED = re.compile(r"(?m)^(\s*randseed\s*=\s*)\S+")


def device(spec: Dict[str, Any], mode: str, seed: int) -> Dict[str, Any]:
    """The experiment's device with the mode's geometry on top, seeded ``seed``, resolved."""
    m = spec[mode]
    dev = dict(spec.get("device", {}))
    dev["seed"] = seed
    if "geometry" in m:
        dev["geometry"] = {**dev.get("geometry", {}), **m["geometry"]}
    return resolve_config(config=dev)


def seeded_job(text: str, seed: int) -> str:
    """A fio job file's text with fio's random seed set to ``seed``."""
    if _RANDSEED.search(text):
        return _RANDSEED.sub(lambda mo: f"{mo.group(1)}{seed}", text)
    return f"[global]\nrandseed={seed}\n\n{text}"


def point_name(job: str, latency: str) -> str:
    return f"{job}-{latency}"


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    """A point per (job, latency mode, seed): its host run and a guest run per disk kind, one
    after another on one machine (they measure wall-clock speed, so they hold the CPUs they use)."""
    from ..reproduce import experiments_root

    m = spec[mode]
    all_seeds = seeds(spec, mode)
    jobs_dir = experiments_root() / "vm"
    pts = []
    for job_name in m["jobs"]:
        job = jobs_dir / job_name
        if not job.is_file():
            raise FileNotFoundError(f"vm-baseline: job {job} not found")
        text = job.read_text()
        for latency in m.get("latency", ["none"]):
            for seed in all_seeds:
                task = {"config": device(spec, mode, seed), "job_name": job_name, "job": seeded_job(text, seed),
                        "latency": latency, "disks": list(m.get("disks", ["nvme"])), "memory": m.get("memory", "1G"),
                        "cpus": m.get("cpus", 2)}
                pts.append(ExperimentPoint(seeded(point_name(job.stem, latency), seed, all_seeds),
                                           {"job": job.stem, "latency": latency, "seed": seed}, PAIR.name, task))
    return pts


def describe(m: Dict[str, Any]) -> str:
    return ", ".join(f"{r['disk']}: guest/host IOPS {r['guest_over_host_iops']:.3f}" for r in m["rows"])



EXPERIMENT = Experiment(points=points, report="ssdlab.studies.vm_baseline.report:write_report", describe=describe,
                        metrics=("rows.0.guest_over_host_iops", "rows.0.device_dlwa_host", "rows.0.device_dlwa_guest"))
