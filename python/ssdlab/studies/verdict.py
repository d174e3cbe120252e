"""The one judge of every reproduction: a document's claim, ssdlab's measurement, one verdict.

A :class:`Claim` is what a source document states: a quantity, the document's value and its kind.
ssdlab's side is an :class:`Estimate`, the mean over seeds with a 95% Student-t interval (one
seed: no interval, and the report says so). :func:`judge` compares them through the effect size

- ``ratio`` (no change = 1):            e = (r - 1) / (R - 1)
- ``change`` (a relative change, 0):    e = q / p
- ``fraction`` (a share, none = 0):     e = q / p
- ``value`` (an absolute quantity):     e = q / p   (no "no change": nothing to be opposite to)

and names one verdict from one vocabulary:

- **reproduced**: 0.75 <= e <= 1.25 (a bound claim, "at least X" / "at most X": the bound holds);
- **smaller** / **larger**: the document's direction, outside that band;
- **no effect**: the interval includes no change (one seed: the value is no change);
- **opposite**: the other direction, the interval excluding no change;
- **not measured**: this run has no number for it.

A qualitative claim is **reproduced** or **not reproduced**, decided by a measurement printed
beside it. Every explanation a report gives is a :class:`Why`: a sentence and the measured
quantity that chose it; a sentence with nothing measured behind it cannot be built.

Reports render their claims with :func:`table` and save them with :func:`save`
(``verdicts.json`` beside report.md); :func:`check_saved` recomputes every saved verdict, which
the suite does for every study, and ``ssdlab reproduce --headline`` gathers the headline claims
of all reports into README.md's table.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Literal, Optional, Sequence, Union

Kind = Literal["ratio", "change", "fraction", "value", "qualitative"]
Bound = Literal["at_least", "at_most"]

KINDS: tuple[str, ...] = ("ratio", "change", "fraction", "value", "qualitative")
# The band of effect sizes called "reproduced", both ends included.
BAND = (0.75, 1.25)
LEVEL = 0.95

REPRODUCED = "reproduced"
SMALLER = "smaller"
LARGER = "larger"
NO_EFFECT = "no effect"
OPPOSITE = "opposite"
NOT_MEASURED = "not measured"
NOT_REPRODUCED = "not reproduced"
VERDICTS: tuple[str, ...] = (REPRODUCED, SMALLER, LARGER, NO_EFFECT, OPPOSITE, NOT_MEASURED, NOT_REPRODUCED)

# A relative tolerance for the band's edges (an effect computed as 0.75 from a ratio of floats
# is 0.7499999999999999 as often as not).
_EDGE = 1e-9


Scale = Literal["linear", "log", "log1p"]


@dataclass(frozen=True)
class Estimate:
    """ssdlab's value: the mean of the ``n`` samples (one per seed) that are defined, and its
    95% interval (``lo``/``hi``; None with one defined sample).

    ``scale``: where the mean and the interval are taken. "log" (ratios): the geometric mean,
    the interval on log r, so it never crosses 0; "log1p" (relative changes): on log(1 + q),
    so a change never goes below -100%; "linear" otherwise, and whenever a sample is outside
    the log scale's domain. ``undefined``: samples that were not finite (a ratio over zero, a
    run that measured nothing); they are left out and the report says how many."""

    mean: float
    lo: Optional[float]
    hi: Optional[float]
    n: int
    samples: tuple[float, ...] = ()
    scale: str = "linear"
    undefined: int = 0

    @classmethod
    def of(cls, samples: Union[float, Iterable[float]], level: float = LEVEL, scale: Scale = "linear") -> "Estimate":
        """The mean of ``samples`` with a Student-t interval at ``level``, on ``scale``."""
        xs = (float(samples),) if isinstance(samples, (int, float)) else tuple(float(x) for x in samples)
        if not xs:
            raise ValueError("an estimate needs at least one sample")
        ok = [x for x in xs if math.isfinite(x)]
        undefined = len(xs) - len(ok)
        if not ok:
            return cls(math.nan, None, None, len(xs), xs, "linear", undefined)
        to, back = _SCALES[scale]
        if scale != "linear" and not all(_in_domain(scale, x) for x in ok):
            scale, (to, back) = "linear", _SCALES["linear"]
        ys = [to(x) for x in ok]
        n = len(ys)
        m = math.fsum(ys) / n
        if n == 1:
            return cls(back(m), None, None, len(xs), xs, scale, undefined)
        from scipy.stats import t

        sd = math.sqrt(math.fsum((y - m) ** 2 for y in ys) / (n - 1))
        half = float(t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
        return cls(back(m), back(m - half), back(m + half), len(xs), xs, scale, undefined)

    @property
    def identical(self) -> bool:
        """Every defined sample the same (the seeds reached no randomness of the measurement)."""
        ok = [x for x in self.samples if math.isfinite(x)]
        return len(ok) > 1 and max(ok) == min(ok)

    def includes(self, x: float) -> bool:
        if self.lo is None or self.hi is None:
            return self.mean == x
        return self.lo <= x <= self.hi


_SCALES = {"linear": (lambda x: x, lambda y: y), "log": (math.log, math.exp),
           "log1p": (math.log1p, math.expm1)}


def _in_domain(scale: str, x: float) -> bool:
    return x > 0 if scale == "log" else x > -1 if scale == "log1p" else True


@dataclass(frozen=True)
class Claim:
    """A document's claim: ``what`` is measured, the document's ``value`` and its ``kind``.

    ``bound``: the document states a bound ("at least" / "at most" ``value``) rather than a
    value. ``doc_text``: the document's words for the value where they say more than the number
    (a range, an ambiguity). ``source``: where in the document. ``unit``/``fmt``: how values of
    kind "value" print. ``headline``: shown in README's table of results."""

    what: str
    value: Optional[float]
    kind: Kind
    bound: Optional[Bound] = None
    doc_text: str = ""
    source: str = ""
    unit: str = ""
    fmt: str = ".3g"
    headline: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.what!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "qualitative":
            if self.value is not None or self.bound is not None:
                raise ValueError(f"claim {self.what!r}: a qualitative claim has no value or bound")
            return
        if self.value is None or not math.isfinite(self.value):
            raise ValueError(f"claim {self.what!r}: needs a finite document value")
        if self.value == self.neutral or (self.kind == "value" and self.value == 0):
            raise ValueError(f"claim {self.what!r}: the document's value is {'no change' if self.value else '0'}; "
                             "there is no effect size to compare (state it as a qualitative claim)")
        if self.bound not in (None, "at_least", "at_most"):
            raise ValueError(f"claim {self.what!r}: bound {self.bound!r} is not at_least or at_most")

    @property
    def scale(self) -> Scale:
        """Where per-seed samples of this claim are averaged (see :class:`Estimate`)."""
        return "log" if self.kind == "ratio" else "log1p" if self.kind == "change" else "linear"

    @property
    def neutral(self) -> Optional[float]:
        """The value meaning no change (None for absolute values and qualitative claims)."""
        return {"ratio": 1.0, "change": 0.0, "fraction": 0.0}.get(self.kind)

    def effect(self, x: float) -> float:
        """The effect size of ``x`` against the document's value."""
        assert self.value is not None
        if self.kind == "ratio":
            return (x - 1.0) / (self.value - 1.0)
        return x / self.value

    def show(self, x: Optional[float]) -> str:
        """``x`` printed as this claim's kind prints values."""
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "-"
        if self.kind == "ratio":
            return f"{x:.3g}x" if abs(x) < 100 else f"{x:.0f}x"
        if self.kind == "change":
            return f"{x * 100:+.1f}%"
        if self.kind == "fraction":
            return f"{x * 100:.1f}%"
        return f"{x:{self.fmt}}" + (f" {self.unit}" if self.unit else "")

    def document_text(self) -> str:
        if self.kind == "qualitative":
            return self.doc_text or "-"
        sign = {"at_least": ">= ", "at_most": "<= "}.get(self.bound or "", "")
        shown = sign + self.show(self.value)
        return f"{shown} ({self.doc_text})" if self.doc_text else shown


@dataclass(frozen=True)
class Why:
    """An explanation and the measured quantity that chose it (printed beside it)."""

    text: str
    measured: str

    def __post_init__(self) -> None:
        if not self.text.strip() or not self.measured.strip():
            raise ValueError("an explanation needs its sentence and the measured quantity behind it")

    def render(self) -> str:
        return f"{self.text} (measured: {self.measured})"


@dataclass(frozen=True)
class Judged:
    """A claim with ssdlab's value, the effect size and the verdict."""

    claim: Claim
    ours: Optional[Estimate]
    verdict: str
    effect: Optional[float]
    holds: Optional[bool] = None  # qualitative claims
    measured: str = ""  # what decided a qualitative claim, or what ssdlab's value is made of
    why: Optional[Why] = None

    def ours_text(self) -> str:
        if self.claim.kind == "qualitative":
            return self.measured or "-"
        if self.ours is None:
            return "not measured"
        e = self.ours
        s = self.claim.show(e.mean)
        if e.lo is not None and e.hi is not None:
            s += f" [{self.claim.show(e.lo)}, {self.claim.show(e.hi)}]"
        s += f", {e.n} seed{'s' if e.n != 1 else ''}"
        if e.identical:
            s += " (identical)"
        if e.undefined:
            s += f" ({e.undefined} undefined, left out)"
        return s + (f"; {self.measured}" if self.measured else "")

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"claim": asdict(self.claim), "verdict": self.verdict, "effect": self.effect,
                             "ours": None if self.ours is None else asdict(self.ours), "holds": self.holds,
                             "measured": self.measured, "why": None if self.why is None else asdict(self.why)}
        if d["ours"] is not None:
            d["ours"]["samples"] = list(self.ours.samples)  # type: ignore[union-attr]
        return d


def _verdict(claim: Claim, est: Estimate) -> tuple[str, Optional[float]]:
    x = est.mean
    if math.isnan(x):
        return NOT_MEASURED, None
    effect = claim.effect(x)
    neutral = claim.neutral
    if neutral is not None and est.includes(neutral):
        # Within noise of no change; a bound that no change satisfies still holds.
        if claim.bound is not None and _bound_holds(claim, x):
            return REPRODUCED, effect
        return NO_EFFECT, effect
    if neutral is not None and effect < 0:
        # The other side of no change: whatever the document states, a bound included.
        return (REPRODUCED if claim.bound is not None and _bound_holds(claim, x) else OPPOSITE), effect
    if claim.bound is not None:
        if _bound_holds(claim, x):
            return REPRODUCED, effect
        return (SMALLER if effect < 1 else LARGER), effect
    lo, hi = BAND
    if effect < lo * (1 - _EDGE):
        return SMALLER, effect
    if effect > hi * (1 + _EDGE):
        return LARGER, effect
    return REPRODUCED, effect


def _bound_holds(claim: Claim, x: float) -> bool:
    assert claim.value is not None
    tol = abs(claim.value) * _EDGE
    return x >= claim.value - tol if claim.bound == "at_least" else x <= claim.value + tol


def judge(claim: Claim, ours: Union[None, float, Sequence[float], Estimate], why: Optional[Why] = None,
          measured: str = "") -> Judged:
    """The verdict on ``claim`` given ssdlab's value: an Estimate, the per-seed samples, one
    number, or None (not measured). ``measured``: what the value is made of, printed beside it
    (e.g. the two throughputs a ratio divides)."""
    if claim.kind == "qualitative":
        raise ValueError(f"claim {claim.what!r} is qualitative: judge it with judge_qualitative")
    if ours is None:
        return Judged(claim, None, NOT_MEASURED, None, measured=measured, why=why)
    est = ours if isinstance(ours, Estimate) else Estimate.of(ours, scale=claim.scale)
    verdict, effect = _verdict(claim, est)
    return Judged(claim, est, verdict, effect, measured=measured, why=why)


def judge_qualitative(claim: Claim, holds: Optional[bool], measured: str, why: Optional[Why] = None) -> Judged:
    """A qualitative claim: reproduced when ``holds``; ``measured`` is the measurement that
    decides it (required: a verdict must show what it rests on). ``holds`` None: not measured."""
    if claim.kind != "qualitative":
        raise ValueError(f"claim {claim.what!r} has kind {claim.kind}: judge it with judge")
    if holds is None:
        return Judged(claim, None, NOT_MEASURED, None, None, measured, why)
    if not measured.strip():
        raise ValueError(f"claim {claim.what!r}: a qualitative verdict needs the measurement that decides it")
    return Judged(claim, None, REPRODUCED if holds else NOT_REPRODUCED, None, bool(holds), measured, why)


def effect_text(j: Judged) -> str:
    if j.effect is None or j.claim.bound is not None:
        return "-"
    if math.isinf(j.effect):
        return "inf"
    return f"{j.effect:.2f}"


def table(judged: Sequence[Judged], effect: bool = True) -> List[str]:
    """The claims table of a report (markdown lines): claim, document, ssdlab (mean [95%
    interval], seeds), effect size (unless ``effect`` is false: the pages' tables), verdict,
    and why, with what was measured."""
    head = ["claim", "document", "ssdlab", *(["effect"] if effect else []), "verdict", "why (measured)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j in judged:
        cells = [j.claim.what + (f" ({j.claim.source})" if j.claim.source else ""), j.claim.document_text(), j.ours_text(),
                 *([effect_text(j)] if effect else []), f"**{j.verdict}**", j.why.render() if j.why else "-"]
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    return lines


def legend() -> str:
    """One paragraph saying how to read the verdict column (every report prints it)."""
    lo, hi = BAND
    return (f"Verdicts (one judge for every study, `ssdlab.studies.verdict`): the effect size e is (r - 1) / (R - 1) for a "
            f"ratio r against the document's R, q / p for a change, share or value; **reproduced** when {lo} <= e <= {hi} "
            "(a bound: when it holds), **smaller** / **larger** in the document's direction outside that band, **no effect** "
            "when the 95% interval includes no change, **opposite** when it excludes it on the other side. ssdlab's values are "
            "means over seeds with a 95% Student-t interval in brackets (ratios: geometric means, the interval on the log "
            "scale; changes: on log(1 + q)); one seed has no interval, and its verdict takes the value as measured, "
            "run-to-run noise unknown; \"identical\": every seed gave the same value.")


def save(path: Path, study: str, mode: str, judged: Sequence[Judged]) -> Path:
    """verdicts.json: the study's judged claims, read back by the headline table and the suite."""
    doc = {"study": study, "mode": mode, "claims": [j.to_json() for j in judged]}
    path.write_text(json.dumps(doc, indent=2, allow_nan=True) + "\n")
    return path


def _claim_of(d: Dict[str, Any]) -> Claim:
    return Claim(**d)


def _estimate_of(d: Optional[Dict[str, Any]]) -> Optional[Estimate]:
    if d is None:
        return None
    return Estimate(d["mean"], d["lo"], d["hi"], d["n"], tuple(d.get("samples", ())), d.get("scale", "linear"),
                    d.get("undefined", 0))


def load(path: Path) -> tuple[Dict[str, Any], List[Judged]]:
    """A verdicts.json, as saved."""
    doc = json.loads(Path(path).read_text())
    out = []
    for c in doc["claims"]:
        why = Why(**c["why"]) if c.get("why") else None
        out.append(Judged(_claim_of(c["claim"]), _estimate_of(c["ours"]), c["verdict"], c["effect"], c.get("holds"),
                          c.get("measured", ""), why))
    return doc, out


def check_saved(path: Path) -> List[str]:
    """Problems with a saved verdicts.json: a verdict or an effect size the judge would not give
    from the saved samples, an estimate that is not its samples' mean and interval on the claim's
    scale, a measured claim without its samples, a qualitative verdict without its measurement,
    an unknown verdict. Empty when every verdict is the judge's."""
    _, judged = load(path)
    bad = []
    for j in judged:
        if j.verdict not in VERDICTS:
            bad.append(f"{j.claim.what}: unknown verdict {j.verdict!r}")
            continue
        try:
            if j.claim.kind == "qualitative":
                again = judge_qualitative(j.claim, j.holds, j.measured, j.why)
            else:
                if j.ours is not None:
                    if not j.ours.samples:
                        bad.append(f"{j.claim.what}: an estimate without its samples")
                        continue
                    redo = Estimate.of(j.ours.samples, scale=j.claim.scale)
                    if not _same(redo, j.ours):
                        bad.append(f"{j.claim.what}: the saved estimate is not its samples' ({redo} vs {j.ours})")
                again = judge(j.claim, None if j.ours is None else j.ours.samples, j.why, j.measured)
        except ValueError as e:
            bad.append(f"{j.claim.what}: {e}")
            continue
        if again.verdict != j.verdict:
            bad.append(f"{j.claim.what}: saved {j.verdict!r}, the judge says {again.verdict!r}")
        elif not _eq(again.effect, j.effect):
            bad.append(f"{j.claim.what}: saved effect {j.effect}, the judge's {again.effect}")
    return bad


def _eq(x: Optional[float], y: Optional[float]) -> bool:
    if x is None or y is None:
        return x is y
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y)) or x == y


def _same(a: Estimate, b: Estimate) -> bool:
    return (a.n == b.n and a.scale == b.scale and a.undefined == b.undefined and _eq(a.mean, b.mean)
            and _eq(a.lo, b.lo) and _eq(a.hi, b.hi))


@dataclass
class Verdicts:
    """A report's claims as it judges them, in order: ``add`` each, then ``table()`` for the
    markdown and ``save()`` for verdicts.json."""

    study: str
    mode: str
    judged: List[Judged] = field(default_factory=list)

    def add(self, claim: Claim, ours: Union[None, float, Sequence[float], Estimate], why: Optional[Why] = None,
            measured: str = "") -> Judged:
        j = judge(claim, ours, why, measured)
        self.judged.append(j)
        return j

    def add_qualitative(self, claim: Claim, holds: Optional[bool], measured: str, why: Optional[Why] = None) -> Judged:
        j = judge_qualitative(claim, holds, measured, why)
        self.judged.append(j)
        return j

    def table(self) -> List[str]:
        return table(self.judged)

    def save(self, out: Path) -> Path:
        return save(Path(out) / "verdicts.json", self.study, self.mode, self.judged)

    def counts(self) -> Dict[str, int]:
        c: Dict[str, int] = {}
        for j in self.judged:
            c[j.verdict] = c.get(j.verdict, 0) + 1
        return c
