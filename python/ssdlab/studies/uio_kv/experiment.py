"""uio-kv's points: per seed, the put/get latency sweep in four settings: simulated time on the
document-simulator link profile (every module hop a System V message queue hop measured on this
machine when the point runs, NAND timing off), wall clock through device processes, and
simulated time on the hardware-like link profile with NAND timing off and on (the simulated
settings also run the mixes that check the document's equation 1)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

from ...config import merge
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .runner import RUN

# The settings, in the report's order, and how the report names them.
SETTINGS = ("docsim", "wall", "nand_off", "nand_on")
LABELS = {"docsim": "simulated, document-simulator links (measured message queue hops), NAND timing off",
          "wall": "wall clock, processes",
          "nand_off": "simulated, hardware links, NAND timing off",
          "nand_on": "simulated, hardware links, NAND timing on"}


def plan(spec: Dict[str, Any], mode: str, seed: int) -> List[Tuple[str, Dict[str, Any], Dict[str, Any]]]:
    """(setting, coordinates, runner input) of each setting for one seed."""
    base = merge(copy.deepcopy(spec.get("plan", {})), spec[mode])
    base.pop("seeds", None)
    base["seed"] = seed
    # Wall-clock points run through processes: fewer operations (wall_ops) keep them short.
    wall_ops = base.pop("wall_ops", base.get("ops", 500))
    pts = [(f"nand_{'on' if t else 'off'}", {"nand_timing": t, "clock": "simulated", "profile": "hardware", "seed": seed},
            {"plan": dict(base, timings=[t], profile="hardware")}) for t in (False, True)]
    # The document's simulator: its message queue hops measured when the point runs, its medium in memory.
    docsim = ("docsim", {"nand_timing": False, "clock": "simulated", "profile": "document-simulator", "seed": seed},
              {"plan": dict(base, timings=[False], profile="document-simulator")})
    wall = {"plan": dict(base, timings=[False], ops=wall_ops), "wall": True}
    return [docsim, ("wall", {"nand_timing": False, "clock": "wall", "seed": seed}, wall), *pts]


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
