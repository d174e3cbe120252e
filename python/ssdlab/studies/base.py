"""What every study is made of: the :class:`Study` record, its :class:`Experiment` (points and
report), the points' results as a report reads them, and the seeds a mode runs.

A study lives in ``ssdlab/studies/<name>/`` (name = its ``ssdlab reproduce`` name with
underscores) in files named by role:

- ``__init__.py``: the docstring and the ``STUDY`` record (names only: importing it is cheap);
- ``api.py``: what a user calls from Python (where the study has a tool of its own);
- ``runner.py``: the sweep engine's runners (``ssdlab.runners.Runner``) for its points;
- ``experiment.py``: ``EXPERIMENT``: experiments/NAME/experiment.toml expanded into points;
- ``report.py``: the report: claims judged by ``ssdlab.studies.verdict``, tables, figures;
- ``cli.py``: ``add_cli(sub)``, the study's own ``ssdlab`` commands (where it has any).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Log = Callable[[str], None]


@dataclass
class ExperimentPoint:
    """One run of an experiment: a unique name, its coordinates (the results table's columns),
    the runner that runs it ("module:name", see ssdlab.runners) and the runner's input."""

    name: str
    values: Dict[str, Any]
    runner: str
    input: Dict[str, Any]


@dataclass
class PointResult:
    """A finished point, as a report reads it: its metrics.json and its directory (the
    runner's files)."""

    name: str
    values: Dict[str, Any]
    metrics: Dict[str, Any]
    dir: Path


@dataclass(frozen=True)
class Experiment:
    """How a study's experiment runs: ``points(spec, mode)`` lists its points; ``report`` is the
    "module:function" that writes its report, ``function(spec, mode, out, results, log)`` from
    the finished points (``results``: point name -> PointResult), returning report.md (imported
    when a report is written: points and workers need none of the plotting); ``metrics`` are the
    dotted paths into each point's metrics.json that results.csv shows; ``describe(metrics)`` is
    the progress line of a finished point."""

    points: Callable[[Dict[str, Any], str], List[ExperimentPoint]]
    report: str
    metrics: Tuple[str, ...] = ("dlwa",)
    describe: Callable[[Dict[str, Any]], str] = field(default=lambda m: "ok")

    def write_report(self, spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult], log: Log) -> Path:
        write: Callable[[Dict[str, Any], str, Path, Dict[str, PointResult], Log], Path] = _attr(self.report)
        return write(spec, mode, out, results, log)


@dataclass(frozen=True)
class Study:
    """A reproduction, registered in ``ssdlab.studies.REGISTRY``.

    ``name``: its ``ssdlab reproduce`` name (and experiments/NAME/, docs/case-studies/NAME.md,
    reports/NAME/); ``title``: what it reproduces, in a line; ``document``: the source it
    reproduces; ``experiment``: "module:attribute" of its :class:`Experiment`; ``cli``:
    "module:function" that adds its own commands to the ``ssdlab`` parser; ``commands``: the
    names of those commands (a study's tool keeps the tool's name: ``ssdlab cache`` is
    fdp-cache's, ``ssdlab vssd`` flashblox's)."""

    name: str
    title: str
    document: str
    experiment: str
    cli: Optional[str] = None
    commands: Tuple[str, ...] = ()

    @property
    def package(self) -> str:
        return "ssdlab.studies." + self.name.replace("-", "_")

    def load_experiment(self) -> Experiment:
        return _attr(self.experiment)

    def add_cli(self, sub: Any) -> None:
        if self.cli:
            _attr(self.cli)(sub)


def _attr(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


# ---------------------------------------------------------------------------------------------
# Seeds: a mode's `seeds = [...]` (every point runs once per seed) or the experiment's `seed`.


def seeds(spec: Mapping[str, Any], mode: str) -> List[int]:
    """The seeds a mode runs: its ``seeds`` list, else the experiment's ``seed`` (default 42)."""
    s = spec.get(mode, {}).get("seeds")
    if s is None:
        return [int(spec.get("seed", 42))]
    if not isinstance(s, list) or not s or not all(isinstance(x, int) and not isinstance(x, bool) for x in s):
        raise ValueError(f"[{mode}] seeds must be a non-empty list of integers, e.g. seeds = [42, 43, 44]")
    if len(set(s)) != len(s):
        raise ValueError(f"[{mode}] seeds has a repeated seed: {s}")
    return list(s)


def seeded(name: str, seed: int, all_seeds: Sequence[int]) -> str:
    """A point's name for one seed: ``name`` itself when the mode runs one seed, else
    ``name_s<seed>``."""
    return name if len(all_seeds) == 1 else f"{name}_s{seed}"


def per_seed(results: Mapping[str, Any], name: str, all_seeds: Sequence[int]) -> List[Any]:
    """The results of point ``name`` for every seed, in seed order."""
    return [results[seeded(name, s, all_seeds)] for s in all_seeds]
