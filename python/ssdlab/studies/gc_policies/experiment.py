"""gc-policies' points: every (spare factor, policy, seed) of the mode, uniform random
single-sector overwrites at steady state on the core's device runner."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ... import _native
from ...config import merge
from ...runners import DEVICE
from ..base import Experiment, ExperimentPoint, seeded, seeds


def point_name(sf: float, policy: str) -> str:
    return f"sf{sf}_{policy}"


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    s = spec[mode]
    all_seeds = seeds(spec, mode)
    # The experiment's device, its mode's geometry on top; the core fills the rest.
    device = merge(spec.get("device", {}), {"geometry": s.get("geometry", {}), "timing": {"enabled": False}})
    sector = _native.config_resolve(device, f"experiment {mode}")["geometry"]["sector_bytes"]
    workload: Dict[str, Any] = {"pattern": "uniform", "block_bytes": [sector]}
    if "steady" in s:
        # Stop once DLWA has settled (the core's rule), at most max_device_writes.
        st = s["steady"]
        workload.update(stop="steady", steady_window_device_writes=st["window_device_writes"],
                        steady_tolerance=st["tolerance"], steady_windows=st["windows"],
                        stop_device_writes=st["max_device_writes"])
    else:
        workload["stop_device_writes"] = s["measure_device_writes"]
    pts = []
    for sf in s["spare_factors"]:
        for pol in s["policies"]:
            for seed in all_seeds:
                cfg = merge(device, {"seed": seed, "ftl": {"spare_factor": sf, "gc_policy": pol},
                                     "precondition": {"sequential_fill": True, "random_device_writes": s["warmup_device_writes"]},
                                     "workload": workload})
                pts.append(ExperimentPoint(seeded(point_name(sf, pol), seed, all_seeds),
                                           {"spare_factor": sf, "policy": pol, "seed": seed}, DEVICE.name, cfg))
    return pts


def dlwa_of(m: Dict[str, Any]) -> Tuple[float, bool]:
    """The figure a point reports: the steady windows' DLWA when it settled, else the whole
    run's; and whether it settled."""
    st = m.get("steady")
    if st and st.get("reached"):
        return st["dlwa"], True
    return m["dlwa"], False


def describe(m: Dict[str, Any]) -> str:
    dlwa, settled = dlwa_of(m)
    st = m.get("steady")
    return f"DLWA {dlwa:.3f}" + ("" if st is None else " (steady)" if settled else " (not settled)")



EXPERIMENT = Experiment(points=points, report="ssdlab.studies.gc_policies.report:write_report", describe=describe,
                        metrics=("dlwa", "steady.dlwa", "steady.reached", "steady.steady_from_host_bytes",
                                 "host_write_bytes", "gc_relocated_pages", "nand_erase_count"))
