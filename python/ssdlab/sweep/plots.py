"""A sweep's default plots: OUT/plots/<metric>.png, one per chosen metric."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .points import _fmt, canonical_json
from .spec import Spec


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _short(key: str, keys: Sequence[str]) -> str:
    last = key.rsplit(".", 1)[-1]
    return last if sum(k.rsplit(".", 1)[-1] == last for k in keys) == 1 else key


def _plot(spec: Spec, rows: List[Dict[str, Any]], metric: str, path: Path) -> bool:
    """x = the first grid axis (else the first zip key); one line (or bar series) per combination
    of the other axes. Returns False when the metric has no numeric value to plot."""
    if not any(_is_number(r[metric]) for r in rows):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # x: the first axis (grid, then zip) that takes more than one value; an axis pinned to one
    # value is no line of its own.
    varying = [k for k in spec.axes if len({canonical_json(r[k]) for r in rows}) > 1] or spec.axes[:1]
    x_key = varying[0]
    # Zip keys move together: when x is a zip key, its siblings are not separate lines.
    others = [k for k in varying[1:] if not (x_key in spec.zip and k in spec.zip)]
    xs: List[Any] = list(dict.fromkeys(canonical_json(r[x_key]) for r in rows))
    x_vals = [json.loads(x) for x in xs]
    groups: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        # One other axis: its name is the legend's title, the values are enough.
        label = (_fmt(r[others[0]]) if len(others) == 1 else
                 ", ".join(f"{_short(k, spec.axes)}={_fmt(r[k])}" for k in others))
        if _is_number(r[metric]):  # failed points leave a gap
            groups.setdefault(label, {})[canonical_json(r[x_key])] = r[metric]
    numeric_x = all(_is_number(x) for x in x_vals)
    fig, ax = plt.subplots(figsize=(6.5 if len(groups) <= 4 else 9, 4))
    if numeric_x:
        order = sorted(range(len(xs)), key=lambda i: x_vals[i])
        for label, ys in groups.items():
            ax.plot([x_vals[i] for i in order], [ys.get(xs[i], math.nan) for i in order], "o-", label=label or None)
    else:
        width = 0.8 / max(1, len(groups))
        for gi, (label, ys) in enumerate(groups.items()):
            pos = [i - 0.4 + width * (gi + 0.5) for i in range(len(xs))]
            ax.bar(pos, [ys.get(x, math.nan) for x in xs], width=width, label=label or None)
        ax.set_xticks(range(len(xs)), [_fmt(v) for v in x_vals])
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    ax.set_title(f"{spec.name}: {metric}")
    ax.grid(alpha=0.3)
    if len(groups) > 1:
        where = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0)) if len(groups) > 4 else {}
        ax.legend(fontsize=8, title=_short(others[0], spec.axes) if len(others) == 1 else None,
                  title_fontsize=8, **where)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_name(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", metric) + ".png"
