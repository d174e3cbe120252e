"""uio-kv's points: per seed, the put/get latency sweep in three settings: wall clock through
device processes, and simulated time with NAND timing off and on (the latter two also run the
mixes that check the document's equation 1)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

from ...config import merge
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .runner import RUN

# The settings, in the report's order, and how the report names them.
SETTINGS = ("wall", "nand_off", "nand_on")
LABELS = {"wall": "wall clock, processes", "nand_off": "simulated, NAND timing off", "nand_on": "simulated, NAND timing on"}


def plan(spec: Dict[str, Any], mode: str, seed: int) -> List[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """(setting, coordinates, runner input) of each setting for one seed."""
    base = merge(copy.deepcopy(spec.get("plan", {})), spec[mode])
    base.pop("seeds", None)
    base["seed"] = seed
    # Wall-clock points run through processes: fewer operations (wall_ops) keep them short.
    wall_ops = base.pop("wall_ops", base.get("ops", 500))
    pts = [(f"nand_{'on' if t else 'off'}", {"nand_timing": t, "clock": "simulated", "seed": seed},
            {"plan": dict(base, timings=[t])}) for t in (False, True)]
    wall = {"plan": dict(base, timings=[False], ops=wall_ops), "wall": True}
    return [("wall", {"nand_timing": False, "clock": "wall", "seed": seed}, wall), *pts]


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    all_seeds = seeds(spec, mode)
    by_setting: Dict[str, List[ExperimentPoint]] = {s: [] for s in SETTINGS}
    for seed in all_seeds:
        for name, values, task in plan(spec, mode, seed):
            by_setting[name].append(ExperimentPoint(seeded(name, seed, all_seeds), values, RUN.name, task))
    return [p for s in SETTINGS for p in by_setting[s]]


def describe(m: Dict[str, Any]) -> str:
    (_, a, b), = m["fits"]
    return f"a = {a:.1%}, b = {b:+.1%}"



EXPERIMENT = Experiment(points=points, report="ssdlab.studies.uio_kv.report:write_report", describe=describe, metrics=("fits", "wall_s"))
