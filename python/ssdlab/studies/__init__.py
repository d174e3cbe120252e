"""The case studies: ssdlab's reproductions of its source documents, one folder each.

``ssdlab reproduce NAME`` runs study NAME's experiment (experiments/NAME/experiment.toml) on the
sweep engine and writes reports/NAME/: report.md, whose claims table comes from the one judge
(:mod:`ssdlab.studies.verdict`), verdicts.json, CSV tables and figures. ``ssdlab.studies.base``
says which file of a study does what; this module is the one registry of studies.
"""

from __future__ import annotations

import importlib
from typing import Dict, List

from .base import Experiment, ExperimentPoint, PointResult, Study, per_seed, seeded, seeds

# Every study, by package under ssdlab.studies (each package's STUDY record names it).
PACKAGES = ("gc_policies", "fdp_cache", "vm_baseline", "flashblox", "flac", "lsm_deletion", "dpuswap", "uio_kv")


def all_studies() -> List[Study]:
    """Every registered study, in the registry's order."""
    return [importlib.import_module(f"{__name__}.{p}").STUDY for p in PACKAGES]


def registry() -> Dict[str, Study]:
    """Study name (``ssdlab reproduce`` NAME, or an experiment file's ``kind``) -> Study."""
    return {s.name: s for s in all_studies()}


def get(kind: str) -> Study:
    studies = registry()
    if kind not in studies:
        raise ValueError(f"unknown study {kind!r}; studies: {', '.join(sorted(studies))}")
    return studies[kind]


__all__ = ["Experiment", "ExperimentPoint", "PointResult", "Study", "PACKAGES", "all_studies", "registry", "get",
           "seeds", "seeded", "per_seed"]
