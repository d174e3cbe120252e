"""A sweep's result tables: one row per point (its values, status, hash and chosen metrics),
written as OUT/results.csv (and OUT/results.parquet when pyarrow is importable), and the
table the Python API returns when pandas is not importable."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping

from .points import Point
from .spec import Spec


def _lookup(metrics: Mapping[str, Any], path: str) -> Any:
    cur: Any = metrics
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def _rows(spec: Spec, points: List[Point]) -> List[Dict[str, Any]]:
    rows = []
    for pt in points:
        row: Dict[str, Any] = {"point": pt.index}
        if spec.experiment:
            row["name"] = pt.name
            row.update({k: pt.base_values.get(k) for k in spec.value_keys})
        row.update(pt.values)
        row["status"] = pt.status
        row["hash"] = pt.hash
        for m in spec.metrics:
            row[m] = _lookup(pt.metrics, m) if pt.metrics is not None else None
        row["error"] = pt.error.splitlines()[0] if pt.error else ""
        rows.append(row)
    return rows


def _columns(spec: Spec) -> List[str]:
    own = ["name", *spec.value_keys] if spec.experiment else []
    return ["point", *own, *spec.axes, "status", "hash", *spec.metrics, "error"]


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v)


def _write_tables(out: Path, spec: Spec, rows: List[Dict[str, Any]]) -> List[Path]:
    cols = _columns(spec)
    written = []
    tmp = out / "results.csv.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_csv_cell(r[c]) for c in cols])
    os.replace(tmp, out / "results.csv")
    written.append(out / "results.csv")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    data = {}
    for c in cols:
        vals = [r[c] for r in rows]
        kinds = {type(v) for v in vals if v is not None}
        if not (kinds <= {int, float} or (len(kinds) == 1 and kinds <= {bool, str})):
            vals = [None if v is None else _csv_cell(v) for v in vals]  # lists, tables, mixed: as text
        data[c] = vals
    pq.write_table(pa.table(data), out / "results.parquet")
    written.append(out / "results.parquet")
    return written


class SweepTable(list):
    """The result table when pandas is not importable: a list of row dicts, with ``attrs``
    (like ``DataFrame.attrs``) holding the run summary."""

    def __init__(self, rows: List[Dict[str, Any]], attrs: Dict[str, Any]):
        super().__init__(rows)
        self.attrs = attrs
