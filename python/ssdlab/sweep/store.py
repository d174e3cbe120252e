"""A sweep's directory: OUT/sweep.json, and each point's OUT/points/<hash>/ (its input, and its
metrics or its error), written atomically; a point whose directory holds its input and its
metrics is done, and a sweep run again (resume) does not run it twice."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import _native
from .points import Point, canonical_json
from .spec import Spec


def _point_dir(out: Path, pt: Point) -> Path:
    return out / "points" / pt.hash


def _load_done(out: Path, pt: Point) -> Optional[Dict[str, Any]]:
    """The metrics of a point finished by an earlier run, if its directory holds this input."""
    d = _point_dir(out, pt)
    try:
        if canonical_json(json.loads((d / "config.json").read_text())) != canonical_json(pt.doc()):
            return None
        return json.loads((d / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def _safe_name(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts and name not in ("config.json", "metrics.json", "error.txt")


def _write_point(out: Path, pt: Point, result: Optional[Dict[str, Any]] = None) -> None:
    """Write a point's directory atomically (a temporary directory renamed into place): its
    input, and the worker's ``result`` (metrics, files, run-info.json), or ``pt.error`` in
    error.txt."""
    final = _point_dir(out, pt)
    tmp = final.parent / f".tmp-{pt.hash}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg = pt.doc() if pt.config is not None else pt.user
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if result is not None and "metrics" in result:
        (tmp / "metrics.json").write_text(json.dumps(result["metrics"], indent=2) + "\n")
        for name, data in result.get("files", {}).items():
            if not _safe_name(name):
                raise ValueError(f"point {pt.index}: the runner returned a file named {name!r}")
            f = tmp / name
            f.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                f.write_bytes(data)
            else:
                f.write_text(data)
        # Wall-clock facts: here, never in metrics.json or results.csv.
        info = {k: result.get(k) for k in ("wall_seconds", "peak_rss_bytes")}
        info["memory_estimate_bytes"] = pt.resources.memory_bytes if pt.resources else None
        (tmp / "run-info.json").write_text(json.dumps(info, indent=2) + "\n")
    else:
        (tmp / "error.txt").write_text(pt.error.rstrip("\n") + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def _describe(spec: Spec, points: List[Point]) -> Dict[str, Any]:
    rows: List[Dict[str, Any]] = [{"point": p.index, "values": p.values, "hash": p.hash} for p in points]
    d: Dict[str, Any] = {
        "name": spec.name, "description": spec.description, "source": spec.source,
        "ssdlab_version": _native.__version__, "base": spec.base, "grid": spec.grid, "zip": spec.zip,
        "metrics": spec.metrics, "points": rows,
    }
    if spec.experiment:
        d["experiment"], d["mode"] = spec.experiment, spec.mode
        for p, row in zip(points, rows, strict=True):
            row["name"], row["experiment_values"], row["runner"] = p.name, p.base_values, p.runner
    return d
