"""The points of a sweep: every combination of the axes laid on the base (or on each of an
experiment's points), resolved by its runner into its complete input, sized, and named by the
SHA-256 of that input's canonical JSON."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .. import _native
from ..config import merge, set_dotted
from ..runners import DEVICE, Resources, get_runner
from .spec import Spec, SweepError

HASH_CHARS = 16       # directory names: 64 bits of the SHA-256, checked against config.json


@dataclass
class Point:
    index: int
    values: Dict[str, Any]      # axis key -> value, grid keys then zip keys
    user: Dict[str, Any]        # the base with this point's values set (what the runner resolves)
    config: Optional[Dict[str, Any]] = None   # resolved; None when it was rejected
    hash: str = ""
    error: str = ""
    status: str = "not-run"     # ok | failed | not-run (interrupted before it ran)
    metrics: Optional[Dict[str, Any]] = None
    name: str = ""              # an experiment point's name
    base_values: Dict[str, Any] = field(default_factory=dict)  # an experiment point's own values
    runner: str = DEVICE.name
    resources: Optional[Resources] = None

    def label(self) -> str:
        vals = ", ".join(f"{k}={_fmt(v)}" for k, v in self.values.items())
        return f"{self.name} ({vals})" if self.name and vals else self.name or vals

    def doc(self) -> Dict[str, Any]:
        """What config.json holds and the hash is taken over: a device config as it is (the
        point of a plain sweep), else the runner's name and its task."""
        assert self.config is not None
        return self.config if self.runner == DEVICE.name else {"runner": self.runner, "task": self.config}


def _fmt(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def canonical_json(cfg: Mapping[str, Any]) -> str:
    """The form a point's hash is taken over: sorted keys, no whitespace."""
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def config_hash(cfg: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()


def expand(spec: Spec) -> List[Point]:
    """Every point of the sweep, in a fixed order (an experiment's points in its order, each
    with the axes: the last grid axis varies fastest, then zip), each resolved by its runner
    and sized, or carrying the error that rejected it."""
    combos: List[Dict[str, Any]] = []
    grid_keys = list(spec.grid)
    zip_rows = [dict(zip(spec.zip, vals, strict=True)) for vals in zip(*spec.zip.values(), strict=True)] if spec.zip else [{}]
    for vals in itertools.product(*spec.grid.values()):
        for zrow in zip_rows:
            combos.append({**dict(zip(grid_keys, vals, strict=True)), **zrow})
    if spec.experiment:
        bases = [(b.name, b.values, b.runner, merge(b.input, spec.base)) for b in spec.base_points]
    else:
        bases = [("", {}, DEVICE.name, spec.base)]
    points: List[Point] = []
    for name, base_values, runner_name, base in bases:
        runner = get_runner(runner_name)
        for values in combos:
            user = copy.deepcopy(base)
            for k, v in values.items():
                set_dotted(user, k, v)
            pt = Point(index=len(points), values=values, user=user, name=name, base_values=dict(base_values),
                       runner=runner_name)
            try:
                pt.config = runner.resolve(user)
                pt.hash = config_hash(pt.doc())[:HASH_CHARS]
                pt.resources = runner.resources(pt.config)
            except (_native.SsdlabError, ValueError) as e:
                pt.error = f"point {pt.index} ({pt.label()}): {e}"
                if not pt.hash:
                    pt.hash = config_hash({"runner": runner_name, "user": user})[:HASH_CHARS]
                pt.config = None
                pt.status = "failed"
            except TypeError as e:  # e.g. a value JSON cannot carry
                raise SweepError(f"point {pt.index} ({pt.label()}): {e}") from None
            points.append(pt)
    if points and all(p.config is None for p in points):
        # Nothing could run: a typo in an axis key or a broken base, not a sweep result.
        raise SweepError(f"no point has a valid config; the first: {points[0].error}")
    return points
