"""flac's points: one per step of the reproduction (experiments/flac/experiment.toml) and seed.

The bench (attach vs memcpy, per-page costs) measures primitives and runs once, and so does
guest-dax (one QEMU guest, in modes with a ``guest_dax`` table); every other
step (micro, scaling, apps, shim, ablations, checkpoint) runs once per seed of the mode, the
seed feeding its data generators (data sets, trees, integers, model state), so each judged
claim has one sample per seed.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ..base import Experiment, ExperimentPoint, seeded, seeds
from .runner import STEP, STEPS, UNSEEDED

MODE_KEYS = ("pm_bytes", "io_sizes", "cached", "larger", "point_bytes", "small_point_bytes", "threads", "repeats", "tree",
             "bigsort_ints", "run_ints", "app_dram", "shim_tree", "shim_sort_ints", "shim_dram", "shim_big", "ablation_flush", "ablation_load",
             "checkpoint")


# What the guest-dax step reads of its mode's table besides its own (the work directory holding
# the NVDIMM's file: huge pages or not, and its size from the PM image's).
GUEST_WORKDIR_KEYS = ("huge_pages", "pm_bytes")


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    m = spec[mode]
    missing = [k for k in MODE_KEYS if k not in m]
    if missing:
        raise ValueError(f"experiments/flac/experiment.toml [{mode}]: missing {', '.join(missing)}")
    all_seeds = seeds(spec, mode)
    # The mode's table without its seeds (the point's seed is its own input); the guest step's
    # table goes to the guest step only, so that adding or changing it leaves the other points'
    # inputs as they were (`--resume` reuses them).
    guest = m.get("guest_dax")
    m = {k: v for k, v in m.items() if k not in ("seeds", "guest_dax")}
    pts = []
    for step in STEPS:
        if step == "guest-dax":
            # Only where the mode asks for it; its data set from the mode's first seed. Its input
            # is its own table and the work directory's settings, so that changing another
            # step's settings leaves it as it was (`--resume` reuses it).
            if guest is not None:
                own = {k: m[k] for k in GUEST_WORKDIR_KEYS if k in m}
                pts.append(ExperimentPoint(step, {"step": step, "seed": None}, STEP.name,
                                           {"step": step, "mode": mode, "seed": all_seeds[0], "m": {**own, "guest_dax": guest}}))
            continue
        if step in UNSEEDED:
            pts.append(ExperimentPoint(step, {"step": step, "seed": None}, STEP.name, {"step": step, "mode": mode, "m": m}))
            continue
        for seed in all_seeds:
            pts.append(ExperimentPoint(seeded(step, seed, all_seeds), {"step": step, "seed": seed}, STEP.name,
                                       {"step": step, "mode": mode, "seed": seed, "m": m}))
    return pts


def describe(metrics: Dict[str, Any]) -> str:
    r, step = metrics["result"], metrics["step"]
    if step == "bench":
        big = max(r["attach"], key=lambda x: x["bytes"])
        return f"{big['bytes'] >> 10} KiB: memcpy / attach {big['memcpy_over_attach_touch']:.1f}x ({metrics['seconds']:.0f} s)"
    if step == "guest-dax":
        if "skipped" in r:
            return f"skipped: {r['skipped']}"
        return (f"{len(r['runs'])} runs in the guest, boot {r['guest'].get('boot_to_workload_s') or 0:.1f} s, "
                f"workload {r['guest'].get('workload_s') or 0:.0f} s ({metrics['seconds']:.0f} s)")
    if step == "ablations":
        return (f"flush lock-free {r['flush_lockfree']['gb_s']:.2f} vs copying {r['flush_copying']['gb_s']:.2f} GB/s, load async "
                f"{r['load_async']['gb_s']:.2f} vs sync {r['load_sync']['gb_s']:.2f} GB/s ({metrics['seconds']:.0f} s)")
    rows = r["rows"] if isinstance(r, dict) else r
    return f"{len(rows)} rows ({metrics['seconds']:.0f} s)"



EXPERIMENT = Experiment(points=points, report="ssdlab.studies.flac.report:write_report", describe=describe, metrics=("step", "huge_pages", "seconds"))
