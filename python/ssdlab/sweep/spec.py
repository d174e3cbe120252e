"""What a sweep is: the `Spec` (a base and its axes), read from a sweep file (format:
docs/sweeps.md), from an experiment's points, or built by the Python API, and checked."""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import _native
from ..config import PathLike, load_file, merge, read_toml, sections, top_keys

# Metrics shown when a sweep names none: dotted paths into metrics.json. Latency and throughput
# are empty (and not plotted) when timing is disabled.
DEFAULT_METRICS = ["dlwa", "gc_relocated_pages", "nand_erase_count", "erase_count.max",
                   "latency_ns.write.p99", "latency_ns.read.p99", "throughput.iops"]
# Top-level keys of a sweep file that are not config overrides.
SWEEP_KEYS = ("base", "preset", "experiment", "mode", "points", "name", "description", "metrics", "grid", "zip")
MAX_POINTS = 100_000  # a bound on the product of the axes; more is almost surely a typo


class SweepError(_native.ConfigError):
    """A malformed sweep (file or arguments): says where and what to do."""


@dataclass
class Spec:
    """A sweep: the base (a config's user layer, or an experiment's points) and the axes."""

    base: Dict[str, Any]
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    zip: Dict[str, List[Any]] = field(default_factory=dict)
    metrics: List[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    metrics_chosen: bool = False
    name: str = "sweep"
    description: str = ""
    source: str = "python"
    # An experiment as the base: its points (ssdlab.studies.base.ExperimentPoint), each crossed
    # with the axes; `value_keys` are their own columns, `base` is laid on each one's input.
    experiment: str = ""
    mode: str = ""
    base_points: List[Any] = field(default_factory=list)
    value_keys: List[str] = field(default_factory=list)

    @property
    def axes(self) -> List[str]:
        return list(self.grid) + list(self.zip)


def _check_key(where: str, key: Any) -> str:
    if not isinstance(key, str) or not key or any(not p for p in key.split(".")):
        raise SweepError(f"{where}: {key!r} is not a dotted config key (e.g. \"ftl.spare_factor\", \"seed\")")
    return key


def _check_axes(where: str, table: Any, zipped: bool) -> Dict[str, List[Any]]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise SweepError(f"{where}: must be a table of dotted config keys to lists of values")
    out: Dict[str, List[Any]] = {}
    for key, values in table.items():
        _check_key(f"{where}", key)
        if isinstance(values, Mapping):
            # [grid.ftl] spare_factor = [...] reads as {"ftl": {"spare_factor": [...]}}: flatten it.
            for sub, v in _check_axes(f"{where}", {f"{key}.{k}": v for k, v in values.items()}, zipped).items():
                out[sub] = v
            continue
        if key in sections() and not all(isinstance(v, Mapping) for v in (values if isinstance(values, list) else [values])):
            hint = ("; TOML puts every key after a [table] header into that table: move "
                    f"`{key} = ...` above the first [table]") if key == "metrics" else ""
            raise SweepError(f"{where}: {key} is a config table; vary a key inside it (e.g. \"{key}.<key>\") "
                             f"or give tables as values{hint}")
        if not isinstance(values, (list, tuple)) or len(values) == 0:
            raise SweepError(f"{where}: {key} must be a non-empty list of values, got {values!r}")
        out[key] = list(values)
    if zipped and out:
        lengths = {k: len(v) for k, v in out.items()}
        if len(set(lengths.values())) > 1:
            raise SweepError(f"{where}: zipped lists must have equal lengths; got "
                             + ", ".join(f"{k} ({n})" for k, n in lengths.items()))
    return out


def _check_metrics(where: str, metrics: Any) -> List[str]:
    if not isinstance(metrics, (list, tuple)) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise SweepError(f"{where}: metrics must be a non-empty list of dotted paths into metrics.json, "
                         f"e.g. [\"dlwa\", \"latency_ns.write.p99\"]; got {metrics!r}")
    return list(dict.fromkeys(metrics))


def _base_from(base: Union[PathLike, Mapping[str, Any]]) -> Tuple[Dict[str, Any], str]:
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base)), "dict"
    s = os.fspath(base)
    if s in _native.preset_names():
        return {"preset": s}, f"preset {s}"
    p = Path(s)
    if p.suffix == ".toml" or p.exists():
        return load_file(p), str(p)
    raise SweepError(f"base {s!r} is neither a config file nor a preset; presets: {', '.join(_native.preset_names())}")


def load_sweep(path: PathLike) -> Spec:
    """Read a sweep file (format: docs/sweeps.md)."""
    path = Path(path)
    try:
        doc = read_toml(path, "sweep file")
    except _native.ConfigError as e:
        raise SweepError(str(e)) from None
    where = str(path)
    if "experiment" in doc:
        return _load_experiment_sweep(path, doc)
    for k in ("mode", "points"):
        if k in doc:
            raise SweepError(f"{where}: {k} = ... belongs to an experiment sweep (experiment = \"NAME\")")
    config_top = tuple(k for k in top_keys() if k != "preset") + sections()
    unknown = [k for k in doc if k not in SWEEP_KEYS + config_top]
    if unknown:
        raise SweepError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(SWEEP_KEYS)}, "
                         f"or config overrides ({', '.join(config_top)})")
    if "base" in doc and "preset" in doc:
        raise SweepError(f"{where}: give base = \"config.toml\" or preset = \"NAME\", not both "
                         "(a base file names its own preset)")
    if "base" in doc:
        if not isinstance(doc["base"], str):
            raise SweepError(f"{where}: base must be the path of a config file, relative to the sweep file")
        base_path = (path.parent / doc["base"])
        base = load_file(base_path)
        source = f"{path} (base {doc['base']})"
    elif "preset" in doc:
        if doc["preset"] not in _native.preset_names():
            raise SweepError(f"{where}: preset {doc['preset']!r} is unknown; presets: {', '.join(_native.preset_names())}")
        base = {"preset": doc["preset"]}
        source = f"{path} (preset {doc['preset']})"
    else:
        raise SweepError(f"{where}: name the base config: base = \"config.toml\" (relative to this file) "
                         "or preset = \"NAME\"")
    # `metrics = [...]` (a list) picks the result columns; a [metrics] table is the config's own
    # section (time-series intervals).
    chosen = None
    if "metrics" in doc and not isinstance(doc["metrics"], Mapping):
        chosen = _check_metrics(where, doc.pop("metrics"))
    overrides = {k: v for k, v in doc.items() if k in config_top}
    base = merge(base, overrides)
    grid = _check_axes(f"{where}: [grid]", doc.get("grid"), zipped=False)
    zipped = _check_axes(f"{where}: [zip]", doc.get("zip"), zipped=True)
    both = set(grid) & set(zipped)
    if both:
        raise SweepError(f"{where}: {sorted(both)[0]} is both in [grid] and [zip]")
    if not grid and not zipped:
        raise SweepError(f"{where}: nothing to sweep: add a [grid] table (every combination) and/or a [zip] "
                         "table (lists varied together), keys are dotted config keys")
    spec = Spec(base=base, grid=grid, zip=zipped, source=source,
                name=str(doc.get("name", path.stem)), description=str(doc.get("description", "")))
    if chosen is not None:
        spec.metrics, spec.metrics_chosen = chosen, True
    _count_points(spec, where)
    return spec


def _load_experiment_sweep(path: Path, doc: Dict[str, Any]) -> Spec:
    """`experiment = NAME`: the reproduction's points (all, or those named by `points`) in
    `mode`, each crossed with the axes; other top-level tables are laid on every point's input
    (a device config for gc-policies, [device]/[cache]/[workload] for fdp-cache, ...)."""
    where = str(path)
    for k in ("base", "preset"):
        if k in doc:
            raise SweepError(f"{where}: experiment = {doc['experiment']!r} is the base; {k} = ... cannot go with it "
                             "(set config keys as overrides or axes instead)")
    name, mode = doc["experiment"], doc.get("mode", "quick")
    if not isinstance(name, str) or not isinstance(mode, str):
        raise SweepError(f"{where}: experiment and mode must be strings (experiment = \"fdp-cache\", mode = \"quick\")")
    chosen = None
    if "metrics" in doc:
        chosen = _check_metrics(where, doc.pop("metrics"))
    names = doc.get("points")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names):
        raise SweepError(f"{where}: points must be a non-empty list of the experiment's point names")
    spec = experiment_spec(name, mode, names, where=where)
    spec.base = {k: v for k, v in doc.items() if k not in SWEEP_KEYS}
    spec.grid = _check_axes(f"{where}: [grid]", doc.get("grid"), zipped=False)
    spec.zip = _check_axes(f"{where}: [zip]", doc.get("zip"), zipped=True)
    both = set(spec.grid) & set(spec.zip)
    if both:
        raise SweepError(f"{where}: {sorted(both)[0]} is both in [grid] and [zip]")
    spec.source = f"{path} (experiment {name}, {mode})"
    spec.name = str(doc.get("name", path.stem))
    spec.description = str(doc.get("description", ""))
    if chosen is not None:
        spec.metrics, spec.metrics_chosen = chosen, True
    _count_points(spec, where)
    return spec


def experiment_spec(name: str, mode: str, names: Optional[Sequence[str]] = None, where: str = "") -> Spec:
    """A sweep of experiment `name`'s points in `mode` (those in `names`, or all), no axes."""
    from ..studies.experiments import experiment_of, load_spec

    where = where or f"experiment {name}"
    try:
        exp_spec = load_spec(name)
        exp = experiment_of(exp_spec, name)
        if mode not in exp_spec:
            raise ValueError(f"experiment {name!r} has no {mode!r} mode; modes: "
                             f"{', '.join(k for k in ('quick', 'full') if k in exp_spec)}")
        pts = exp.points(exp_spec, mode)
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise SweepError(f"{where}: {e}") from None
    if names is not None:
        known = {p.name for p in pts}
        missing = [n for n in names if n not in known]
        if missing:
            raise SweepError(f"{where}: experiment {name!r} ({mode}) has no point {missing[0]!r}; its points: "
                             f"{', '.join(sorted(known))}")
        pts = [p for p in pts if p.name in set(names)]
    keys = list(dict.fromkeys(k for p in pts for k in p.values))
    return Spec(base={}, metrics=list(exp.metrics), name=f"{name} ({mode})", source=f"experiment {name} ({mode})",
                experiment=name, mode=mode, base_points=pts, value_keys=keys)


def _count_points(spec: Spec, where: str) -> int:
    n = math.prod(len(v) for v in spec.grid.values())
    if spec.zip:
        n *= len(next(iter(spec.zip.values())))
    if spec.experiment:
        n *= max(1, len(spec.base_points))
    if n > MAX_POINTS:
        raise SweepError(f"{where}: {n} points is more than the limit of {MAX_POINTS}; split the sweep")
    return n
