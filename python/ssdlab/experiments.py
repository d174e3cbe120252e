"""Temporary shim while the case studies move into ssdlab.studies (see ssdlab.studies.base)."""

from __future__ import annotations

from typing import Any

from .studies import base as _base
from .studies.base import ExperimentPoint, PointResult
from .studies.reproduce import ReproductionError, experiments_root, listing, load_spec, reproduce


def Experiment(title: str = "", **kw: Any) -> _base.Experiment:  # noqa: N802
    return _base.Experiment(**kw)


__all__ = ["Experiment", "ExperimentPoint", "PointResult", "ReproductionError", "experiments_root", "listing", "load_spec",
           "reproduce"]
