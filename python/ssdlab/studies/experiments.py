"""The experiment files: experiments/NAME/experiment.toml, where to find them, and which study's
Experiment runs each. ``ssdlab reproduce`` and the sweep engine's ``experiment = NAME`` both
read them through here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

from ..config import read_toml
from . import get, registry
from .base import Experiment


def experiments_root() -> Path:
    """The experiments/ folder of the checkout (or SSDLAB_EXPERIMENTS)."""
    env = os.environ.get("SSDLAB_EXPERIMENTS")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for p in [Path.cwd(), *here.parents]:
        if (p / "experiments").is_dir():
            return p / "experiments"
    raise FileNotFoundError("cannot find the experiments/ folder; set SSDLAB_EXPERIMENTS")


def available() -> List[str]:
    return sorted(p.parent.name for p in experiments_root().glob("*/experiment.toml"))


def load_spec(name: str) -> Dict[str, Any]:
    """experiments/NAME/experiment.toml."""
    path = experiments_root() / name / "experiment.toml"
    if not path.exists():
        raise FileNotFoundError(f"unknown experiment {name!r}; available: {', '.join(available())}")
    return read_toml(path, "experiment file")


def experiment_of(spec: Dict[str, Any], name: str) -> Experiment:
    """The Experiment that runs experiment file ``name`` (its ``kind``, default its name)."""
    kind = spec.get("kind", name)
    try:
        study = get(kind)
    except ValueError:
        raise ValueError(f"experiment {name!r} has unknown kind {kind!r}; kinds: {', '.join(sorted(registry()))}") from None
    return study.load_experiment()
