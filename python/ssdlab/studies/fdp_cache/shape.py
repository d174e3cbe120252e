"""The non-FDP utilisation curve's shape (document §6.3, Fig. 6): DLWA 1.3 at 50%, "similar" up
to 90%, 3.5 at 100%. The experiment's ``shape`` point set runs that curve at every combination
of the drive's spare and where the FTL writes relocated data (``ftl.gc_streams``), and with
other workloads' SOC/LOC byte splits; this module judges every point of every curve against the
document's value there (the one judge, :func:`~ssdlab.studies.verdict.judge`), says which
combinations, if any, give the document's shape, and which feature moves the shape most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..verdict import BAND, REPRODUCED, Claim, Judged, Why, judge
from .experiment import GC_DEFAULT, run_key, shape_combos

# The document's curve without FDP: 1.3 from 50 to 90% ("we omit 50-90% because they are
# similar to 50%"), 3.5 at 100%.
FLAT = 1.3
FULL = 3.5
# Which utilisations are "the flat part".
FLAT_TOP = 0.9 + 1e-9

Rows = Callable[[str], List[Dict[str, Any]]]


@dataclass
class Curve:
    """One combination's non-FDP DLWA per utilisation (per-seed samples) and their verdicts."""

    spare: float
    gc: str
    workload: str
    dlwa: Dict[float, List[float]] = field(default_factory=dict)
    judged: Dict[float, Judged] = field(default_factory=dict)

    def mean(self, u: float) -> float:
        xs = self.dlwa[u]
        return math.fsum(xs) / len(xs)

    @property
    def matches(self) -> bool:
        """Every point of the curve within the judge's band of the document's value there."""
        return bool(self.judged) and all(j.verdict == REPRODUCED for j in self.judged.values())

    def rise(self, lo: float, hi: float) -> float:
        """DLWA at ``hi`` over DLWA at ``lo``: 1 for the document's flat part."""
        return self.mean(hi) / self.mean(lo)

    def flat_rise(self) -> Optional[float]:
        """The rise over the document's flat part, 50% to 90% (None: the curve lacks either)."""
        u90 = next((u for u in self.dlwa if abs(u - 0.9) < 1e-9), None)
        return self.rise(0.5, u90) if 0.5 in self.dlwa and u90 is not None else None

    def label(self, default_spare: float) -> str:
        parts = [f"spare {self.spare * 100:g}%", f"GC {self.gc}"]
        if self.workload != "kvcache":
            parts.append(self.workload)
        s = ", ".join(parts)
        return s + " (the experiment)" if self.is_default(default_spare) else s

    def is_default(self, default_spare: float) -> bool:
        return abs(self.spare - default_spare) < 1e-9 and self.gc == GC_DEFAULT and self.workload == "kvcache"


def claim_at(u: float) -> Claim:
    if u <= FLAT_TOP:
        return Claim(f"DLWA without FDP, {u * 100:.0f}% utilisation", FLAT, "ratio", source="§6.3",
                     doc_text="1.3 at 50%, 50-90% 'similar to 50%'")
    return Claim(f"DLWA without FDP, {u * 100:.0f}% utilisation", FULL, "ratio", source="§6.3, Fig. 6")


def curves(m: Dict[str, Any], default_spare: float, rows: Rows, has: Callable[[str], bool]) -> List[Curve]:
    """The shape point set's curves (the experiment's own first), judged point by point."""
    shape = m.get("shape") or {}
    utils = list(m["utilizations"])
    combos: List[Tuple[float, str, str]] = [(default_spare, GC_DEFAULT, "kvcache")]
    combos += [(sf, g, "kvcache") for sf, g in shape_combos(shape, default_spare)]
    for wl in shape.get("workloads", []):
        combos.append((default_spare, GC_DEFAULT, wl))
    out: List[Curve] = []
    seen = set()
    for sf, g, wl in combos:
        key = (round(sf, 9), g, wl)
        if key in seen:
            continue
        seen.add(key)
        c = Curve(sf, g, wl)
        spare = None if abs(sf - default_spare) < 1e-9 else sf
        for u in utils:
            base = run_key(u, False, workload=wl, spare=spare, gc=g)
            if not has(base):
                break
            c.dlwa[u] = [r["dlwa"] for r in rows(base)]
            c.judged[u] = judge(claim_at(u), c.dlwa[u])
        if c.dlwa:
            out.append(c)
    return out


def _spread(cs: Sequence[Curve], f: Callable[[Curve], float]) -> Tuple[float, Curve, Curve]:
    lo = min(cs, key=f)
    hi = max(cs, key=f)
    return f(hi) - f(lo), lo, hi


def decider(cs: List[Curve], default_spare: float) -> Optional[Why]:
    """Which feature moves the curve's shape most, one at a time from the experiment's defaults:
    the spread of the rise from 50% to 90% (the document's flat part: 1) over each feature's
    values, the other features at their defaults. The feature with the largest spread is named."""
    if not cs or any(c.flat_rise() is None for c in cs):
        return None

    def rise(c: Curve) -> float:
        r = c.flat_rise()
        assert r is not None
        return r

    d = next((c for c in cs if c.is_default(default_spare)), None)
    if d is None:
        return None
    features = {
        "the drive's spare": [c for c in cs if c.gc == d.gc and c.workload == d.workload],
        "where GC writes go (ftl.gc_streams)": [c for c in cs if abs(c.spare - d.spare) < 1e-9 and c.workload == d.workload],
        "the SOC/LOC byte split": [c for c in cs if abs(c.spare - d.spare) < 1e-9 and c.gc == d.gc],
    }
    spreads = {k: _spread(v, rise) for k, v in features.items() if len(v) > 1}
    if not spreads:
        return None
    name, (sp, lo, hi) = max(spreads.items(), key=lambda kv: kv[1][0])
    measured = "; ".join(
        f"{k}: rise 50->90% from {rise(lo_):.2f} ({lo_.label(default_spare)}) to {rise(hi_):.2f} ({hi_.label(default_spare)})"
        for k, (_, lo_, hi_) in spreads.items())
    return Why(f"Of the features tried one at a time from the experiment's defaults, {name} moves the curve's shape "
               f"most (the rise of DLWA from 50% to 90%, which the document has flat, spans {sp:.2f} over its values)",
               measured)


def markdown(cs: List[Curve], default_spare: float, model: Optional[Dict[float, float]] = None) -> List[str]:
    """The shape table; ``model``: Desnoyers' greedy WAF for uniform random overwrites of each
    utilisation's span at the experiment's spare, shown as a last row with its ratio to the
    experiment's curve."""
    if len(cs) < 2:
        return []
    utils = sorted({u for c in cs for u in c.dlwa})
    L = ["## The curve's shape without FDP", "",
         f"Each row a combination of the drive's spare, where GC writes go (`ftl.gc_streams`) and the workload's "
         f"SOC/LOC byte split; each cell the non-FDP DLWA (mean over seeds) and the judge's verdict against the "
         f"document's value there ({FLAT} from 50 to 90%, {FULL} at 100%). \"Shape\": every point reproduced; "
         "\"rise\": DLWA at 90% over DLWA at 50% (the document's: about 1).", "",
         "| combination | " + " | ".join(f"{u * 100:.0f}%" for u in utils) + " | rise 50->90% | shape |",
         "|---|" + "---|" * len(utils) + "---|---|"]
    for c in cs:
        cells = [f"{c.mean(u):.2f} {_short(c.judged[u].verdict)}" if u in c.dlwa else "-" for u in utils]
        fr = c.flat_rise()
        rise = "-" if fr is None else f"{fr:.2f}"
        L.append(f"| {c.label(default_spare)} | " + " | ".join(cells) + f" | {rise} | {'yes' if c.matches else 'no'} |")
    if model:
        u90 = _u90(utils)
        d = next((c for c in cs if c.is_default(default_spare)), None)
        L.append("| greedy model, uniform random overwrites of the cache's span (Desnoyers) | "
                 + " | ".join(f"{model[u]:.2f}" if u in model else "-" for u in utils) + " | "
                 + (f"{model[u90] / model[0.5]:.2f}" if 0.5 in model and u90 in model else "-")
                 + " | - |")
        if d is not None:
            ratios = [d.mean(u) / model[u] for u in utils if u in d.dlwa and u in model]
            if ratios:
                top = 1 + BAND[1] * (FLAT - 1)
                past = next((f"from {u * 100:.0f}% on" for u in utils if u in model and u <= FLAT_TOP and model[u] > top),
                            "at none of 50-90%")
                L += ["", f"The experiment's curve lies {min(ratios):.2f}-{max(ratios):.2f}x above the model at every "
                      "utilisation: it has the shape of uniform random overwrites over the cache's span. The model itself "
                      f"is past the judge's band of the document's flat {FLAT} (above {top:.3f}) {past}: keeping {FLAT} there takes a "
                      "drive that does better than uniform random overwrites with this workload, and no variant tried here "
                      "(all write host data through one stream) does."]
    good = [c for c in cs if c.matches]
    L += ["", ("Combinations that give the document's shape: " + "; ".join(c.label(default_spare) for c in good) + ".")
          if good else "No combination gives the document's shape (every point within the band of its value)."]
    w = decider(cs, default_spare)
    if w:
        L += ["", w.render()]
    return L + [""]


def _u90(utils: Sequence[float]) -> Optional[float]:
    return next((u for u in utils if abs(u - 0.9) < 1e-9), None)


def _short(verdict: str) -> str:
    return {"reproduced": "(ok)", "larger": "(larger)", "smaller": "(smaller)", "no effect": "(no effect)"}.get(
        verdict, f"({verdict})")


def figure(out: Path, cs: List[Curve], default_spare: float, model: Optional[Dict[float, float]] = None) -> List[str]:
    """One panel per GC placement, a line per spare (and per other byte split), the document's
    curve and the judge's band around it, and ``model`` (the greedy model of uniform random
    overwrites of each utilisation's span at the experiment's spare) dotted."""
    if len(cs) < 2:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gcs = list(dict.fromkeys(c.gc for c in cs))
    fig, axs = plt.subplots(1, len(gcs), figsize=(4.2 * len(gcs), 3.8), sharey=True, squeeze=False)
    for ax, g in zip(axs[0], gcs, strict=True):
        us = sorted({u for c in cs for u in c.dlwa})
        doc = [FLAT if u <= FLAT_TOP else FULL for u in us]
        lo = [1 + 0.75 * (d - 1) for d in doc]
        hi = [1 + 1.25 * (d - 1) for d in doc]
        ax.fill_between([u * 100 for u in us], lo, hi, color="0.85", label="judge's band")
        ax.plot([u * 100 for u in us], doc, "k--", label="document")
        if model:
            mu = [u for u in us if u in model]
            ax.plot([u * 100 for u in mu], [model[u] for u in mu], ":", color="0.4",
                    label=f"random overwrites, greedy (spare {default_spare * 100:g}%)")
        for c in (c for c in cs if c.gc == g):
            xs = sorted(c.dlwa)
            ax.plot([u * 100 for u in xs], [c.mean(u) for u in xs], "o-", label=c.label(default_spare).replace(f", GC {g}", ""))
        ax.set_title(f"GC writes: {g}")
        ax.set_xlabel("device utilisation (%)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axs[0][0].set_ylabel("DLWA without FDP")
    fig.suptitle("kvcache, SOC 4%, non-FDP: what shapes the utilisation curve (document Fig. 6: 1.3 flat, 3.5 at 100%)")
    fig.tight_layout()
    fig.savefig(out / "shape_ablations.png", dpi=120)
    plt.close(fig)
    return ["![The curve's shape: ablations](shape_ablations.png)", ""]
