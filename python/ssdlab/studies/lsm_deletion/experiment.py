"""lsm-deletion's points: a measured run per (delete share, policy, seed) of the mode, each a
point of the sweep engine on :data:`~ssdlab.studies.lsm_deletion.runner.RUN`.

Every run loads keys, then runs a mixed phase whose deletes are a share of its operations, then
a lookup phase (:func:`phases`). A mode's ``seeds`` apply to the delete shares in its
``seeded_delete_fractions`` (default: every share); the other shares run the first seed only.
The seed is the device's and the workload generator's. Ablations (``api.ABLATIONS``) run at the
shares in ``ablation_delete_fractions`` (default: every share). A mode's ``sensitivity`` list
names variants (``{name = ..., lsm = {...}, workload = {...}, geometry = {...}, zns = {...}}``)
that rerun the three policies at the reference share, first seed, with those keys changed: the
sweep over the parameters the document leaves open.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ...config import merge
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .api import ABLATIONS, POLICIES, policy_keys
from .runner import RUN


def phases(w: Dict[str, Any], delete_fraction: float) -> List[Dict[str, Any]]:
    """The three phases: load, a mixed phase where deletes are ``delete_fraction`` of the
    operations, and a lookup phase."""
    n2 = int(w["mixed_ops"])
    mix = w.get("mix", {"inserts": 0.35, "lookups": 0.20})
    e = int(w.get("entry_bytes", 1024))
    ins, look = float(mix["inserts"]), float(mix["lookups"])
    upd = max(0.0, 1.0 - ins - look - delete_fraction)
    return [
        {"name": "load", "inserts": int(w["load_keys"]), "entry_bytes": e},
        {"name": "mixed", "inserts": int(n2 * ins), "updates": int(n2 * upd), "point_deletes": int(n2 * delete_fraction),
         "point_lookups": int(n2 * look), "entry_bytes": e},
        {"name": "lookups", "point_lookups": int(w["lookup_ops"]), "range_lookups": int(w.get("range_lookups", 0)),
         "range_lookup_selectivity": float(w.get("range_lookup_selectivity", 0.0)), "entry_bytes": e},
    ]


def key(policy: str, d: float) -> str:
    """A run's name before its seed: ``fade_d10`` is FADE at 10% deletes."""
    return f"{policy}_d{int(round(d * 100)):02d}"


def seeds_at(spec: Dict[str, Any], mode: str, d: float) -> List[int]:
    """The seeds the runs at delete share ``d`` run: every seed of the mode where ``d`` is one
    of its ``seeded_delete_fractions`` (default: all), else the first seed only."""
    all_seeds = seeds(spec, mode)
    m = spec[mode]
    seeded_ds = m.get("seeded_delete_fractions", m["delete_fractions"])
    return all_seeds if any(abs(d - x) < 1e-12 for x in seeded_ds) else all_seeds[:1]


def point_name(policy: str, d: float, seed: int, all_seeds: List[int]) -> str:
    return seeded(key(policy, d), seed, all_seeds)


def reference_fraction(spec: Dict[str, Any], mode: str) -> float:
    """The delete share the claims are judged at: 10% (the document's), else the largest run."""
    ds = spec[mode]["delete_fractions"]
    return 0.1 if 0.1 in ds else max(ds)


def policies_at(spec: Dict[str, Any], mode: str, d: float) -> List[str]:
    """The policies run at delete share ``d``: the mode's policies, its ablations only where
    ``ablation_delete_fractions`` (default: every share) has ``d``."""
    m = spec[mode]
    at = m.get("ablation_delete_fractions", m["delete_fractions"])
    return [p for p in m["policies"] if p not in ABLATIONS or any(abs(d - x) < 1e-12 for x in at)]


def variants(spec: Dict[str, Any], mode: str) -> List[Dict[str, Any]]:
    """The mode's sensitivity variants, each checked: a unique ``name`` and only the tables
    ``lsm``, ``workload``, ``geometry``, ``zns``."""
    vs = spec[mode].get("sensitivity", [])
    names = [v.get("name") for v in vs]
    for v in vs:
        extra = sorted(set(v) - {"name", "lsm", "workload", "geometry", "zns"})
        if not isinstance(v.get("name"), str) or not v["name"] or extra:
            raise ValueError(f"[{mode}] sensitivity: each variant needs a name and only lsm, workload, geometry, zns "
                             f"tables; got {v}")
    if len(set(names)) != len(names):
        raise ValueError(f"[{mode}] sensitivity: repeated variant name in {names}")
    return list(vs)


def variant_point(policy: str, d: float, variant: str) -> str:
    return f"{key(policy, d)}_{variant}"


def _point(spec: Dict[str, Any], mode: str, p: str, d: float, seed: int, name: str, values: Dict[str, Any],
           variant: Dict[str, Any]) -> ExperimentPoint:
    m = spec[mode]
    device = merge(spec.get("device", {}), {k: merge(m.get(k, {}), variant.get(k, {})) for k in ("geometry", "zns")
                                            if k in m or k in variant})
    w = merge(merge(spec.get("workload", {}), m.get("workload", {})), variant.get("workload", {}))
    lsm = merge(merge(spec.get("lsm", {}), m.get("lsm", {})), variant.get("lsm", {}))
    task = {"device": dict(device, seed=seed), "lsm": merge(dict(lsm, track_deletes=True), policy_keys(p)),
            "phases": phases(w, d), "seed": seed, "ops_per_s": float(w["ops_per_s"]),
            "delete_threshold_fraction": float(w["delete_threshold_fraction"]),
            "series_points": int(w.get("series_points", 100)), "audit": bool(m.get("audit", True)) and d > 0}
    return ExperimentPoint(name, values, RUN.name, task)


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    """A run per (delete share, policy, seed) of the mode, then the sensitivity variants'."""
    m = spec[mode]
    pts = []
    for d in m["delete_fractions"]:
        ss = seeds_at(spec, mode, d)
        for p in policies_at(spec, mode, d):
            for seed in ss:
                pts.append(_point(spec, mode, p, d, seed, point_name(p, d, seed, ss),
                                  {"policy": p, "delete_fraction": d, "seed": seed, "variant": ""}, {}))
    dref, first = reference_fraction(spec, mode), seeds(spec, mode)[0]
    for v in variants(spec, mode):
        for p in POLICIES:
            pts.append(_point(spec, mode, p, dref, first, variant_point(p, dref, v["name"]),
                              {"policy": p, "delete_fraction": dref, "seed": first, "variant": v["name"]}, v))
    return pts


def describe(s: Dict[str, Any]) -> str:
    p = s["deletion_persistence"]["lsm_level"]
    c = s["counters"]
    return (f"WA {s['write_amplification']['total']:.2f}, compaction {c['compaction_write_bytes'] / 2**20:.0f} MiB, "
            f"GC {c['gc_migrated_bytes'] / 2**20:.0f} MiB, deletes within D_th {p['fraction_within_threshold']:.3f}")



EXPERIMENT = Experiment(
    points=points, report="ssdlab.studies.lsm_deletion.report:write_report", describe=describe,
    metrics=("write_amplification.total", "write_amplification.lsm", "counters.compaction_write_bytes",
             "counters.gc_migrated_bytes", "deletion_persistence.lsm_level.fraction_within_threshold",
             "deletion_persistence.erase_level.fraction_within_threshold", "audit.survivors_erase_persisted"))
