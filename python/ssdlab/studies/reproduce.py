"""`ssdlab reproduce NAME`: a study's experiment on the sweep engine, its report under
reports/NAME/, and the headline table of every report's verdicts.

Each experiment lives in experiments/NAME/experiment.toml (what to run) and in its study's
package (how, see ``ssdlab.studies.base``). The points run on the sweep engine
(``ssdlab.sweep``), so every reproduction takes ``--jobs N`` and ``--ray ADDRESS|auto``,
resumes, records failing points without stopping the others, sizes each point's memory before
starting it, and writes one results table (OUT/NAME/results.csv); ``experiment = NAME`` in a
sweep file runs the same points crossed with axes. docs/case-studies/README.md ("Adding a study")
says how to add one.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..runners import CHECKPOINT_EVERY_S
from ..units import human_bytes
from . import registry
from .base import PointResult, seeds
from .experiments import available, experiment_of, experiments_root, load_spec
from .verdict import REPRODUCED, Judged, check_saved, load, table


class ReproductionError(RuntimeError):
    """Some points of a reproduction failed (the others finished and were kept)."""


def listing() -> List[str]:
    """``ssdlab reproduce --list``: each experiment with the points and seeds of --quick and
    --full, what it reproduces, its commands and its page under docs/."""
    rows: List[Tuple[str, ...]] = [("NAME", "QUICK", "FULL", "WHAT")]
    root = experiments_root()
    studies = registry()
    for name in available():
        try:
            spec = load_spec(name)
            ex = experiment_of(spec, name)
            counts = [f"{len(ex.points(spec, m))}/{len(seeds(spec, m))}" if m in spec else "-" for m in ("quick", "full")]
            st = studies[spec.get("kind", name)]
            what = st.title + (f"; commands: {', '.join('ssdlab ' + c for c in st.commands)}" if st.commands else "")
        except Exception as e:  # a broken experiment file still shows up, with why
            counts, what = ["?", "?"], f"cannot read it: {e}"
        page = root.parent / "docs" / "case-studies" / f"{name}.md"
        if page.exists():
            what += f" (docs/case-studies/{name}.md)"
        rows.append((name, *counts, what))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]}" for r in rows]
    return lines + ["", "QUICK, FULL: runs / seeds of `ssdlab reproduce NAME --quick` (the default: minutes on a laptop) and "
                        "`--full` (the full-scale version), a point counted once per seed it runs with (gc-policies' 36/3: 12 "
                        "points x 3 seeds); -: no such mode. WHAT: what it reproduces, its commands and its page."]


def reproduce(name: str, mode: str = "quick", out_root: Path = Path("reports"), log: Callable[[str], None] = print,
              resume: bool = False, backend: str = "local", jobs: Optional[int] = None, ray_address: Optional[str] = None,
              memory_bytes: Optional[int] = None, progress: Optional[bool] = False,
              checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> Path:
    """Run experiment ``name`` in ``mode`` (quick or full) on the sweep engine and write its
    report; returns report.md.

    ``resume``: reuse points already in OUT/NAME/points whose input is unchanged (an
    interrupted reproduction goes on where it stopped); without it every point runs again.
    ``backend``/``jobs``/``ray_address``/``memory_bytes``/``checkpoint_every_s``: as for
    ``ssdlab.sweep.run_sweep`` (a save is used only with ``resume``).
    Raises :class:`ReproductionError` (after writing results.csv) when points failed, and
    KeyboardInterrupt when interrupted (finished points are kept)."""
    from ..sweep import experiment_spec, expand, run_sweep

    spec = load_spec(name)
    exp = experiment_of(spec, name)
    sw = experiment_spec(name, mode)
    out = Path(out_root) / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps({"name": name, "mode": mode, "spec": spec}, indent=2) + "\n")
    points = expand(sw)
    sized = [p.resources.memory_bytes for p in points if p.resources]
    n_seeds = len(seeds(spec, mode))
    log(f"{name} ({mode}): {len(points)} points ({n_seeds} seed{'s' if n_seeds != 1 else ''}), estimated peak memory "
        f"per point {human_bytes(min(sized, default=None))} to {human_bytes(max(sized, default=None))}")
    _, summary = run_sweep(sw, out, backend, jobs, ray_address, progress, log, resume=resume,
                           memory_bytes=memory_bytes, describe=exp.describe, points=points,
                           checkpoint_every_s=checkpoint_every_s)
    _link_runs(out, points)
    if resume:
        log(f"{summary['skipped']} of {summary['points']} points reused (their input unchanged)")
    if summary["interrupted"]:
        raise KeyboardInterrupt
    if summary["failed"]:
        lines = [f"  {f['name']}: {f['error'].split(': ', 1)[-1].splitlines()[0]}  [{f['error_file']}]" for f in summary["failures"]]
        raise ReproductionError(f"{summary['failed']} of {summary['points']} points of {name} failed (the others are in "
                                f"{out / 'results.csv'}; rerun with --resume to run only what is missing):\n" + "\n".join(lines))
    results = {p.name: PointResult(p.name, p.base_values, p.metrics or {}, out / "points" / p.hash) for p in points}
    return exp.write_report(spec, mode, out, results, log)


def _link_runs(out: Path, points: List[Any]) -> None:
    """OUT/runs/<point name> -> ../points/<hash>: the points under their names."""
    runs = out / "runs"
    if runs.is_symlink() or runs.is_file():
        runs.unlink()
    elif runs.is_dir() and any(not p.is_symlink() for p in runs.iterdir()):
        shutil.rmtree(runs)  # an older layout's run directories
    runs.mkdir(exist_ok=True)
    for link in runs.iterdir():
        link.unlink()
    for p in points:
        if p.name and (out / "points" / p.hash).is_dir():
            (runs / p.name).symlink_to(Path("..") / "points" / p.hash)


# ---------------------------------------------------------------------------------------------
# The headline table: every report's headline claims, from their verdicts.json.

HEADLINE_BEGIN = "<!-- headline table: generated by `ssdlab reproduce --headline`; do not edit by hand -->"
HEADLINE_END = "<!-- end of headline table -->"


def _load_checked(path: Path, name: str) -> Tuple[Dict[str, Any], List[Judged]]:
    """A study's saved verdicts, refused unless the judge gives them again from their samples."""
    problems = check_saved(path)
    if problems:
        raise ValueError(f"{path}: its verdicts are not the judge's ({problems[0]}); reproduce {name} again")
    return load(path)


def headline(reports: Path, names: Optional[Sequence[str]] = None) -> Tuple[List[str], List[str]]:
    """The headline table (markdown lines) from REPORTS/*/verdicts.json (registered studies
    first, in the registry's order), and the registered studies with no verdicts.json there."""
    studies = list(registry())
    if names is None:
        found = sorted(p.parent.name for p in Path(reports).glob("*/verdicts.json"))
        names = [n for n in studies if n in found] + [n for n in found if n not in studies]
        missing = [n for n in studies if n not in found]
    else:
        missing = []
    lines = ["| study | claim | document | ssdlab | verdict | why not reproduced (measured) |", "|---|---|---|---|---|---|"]
    for name in names:
        path = Path(reports) / name / "verdicts.json"
        if not path.exists():
            missing.append(name)
            continue
        doc, judged = _load_checked(path, name)
        for j in (j for j in judged if j.claim.headline):
            why = "" if j.verdict == REPRODUCED else (j.why.render() if j.why else "")
            cells = [f"{name} ({doc['mode']})", j.claim.what, j.claim.document_text(), j.ours_text(), f"**{j.verdict}**", why or "-"]
            lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    return lines, missing


CLAIMS_BEGIN = "<!-- claims of {name}: generated by `ssdlab reproduce --headline --write`; do not edit by hand -->"
CLAIMS_END = "<!-- end of claims of {name} -->"


def claims_table(reports: Path, name: str) -> List[str]:
    """Every judged claim of study ``name``'s report (REPORTS/NAME/verdicts.json), as a page
    shows it: claim, document, ssdlab, verdict, why."""
    doc, judged = _load_checked(Path(reports) / name / "verdicts.json", name)
    return [f"From `ssdlab reproduce {name} --{doc['mode']}` (its report.md has the effect sizes):", "",
            *table(judged, effect=False)]


def write_headline(reports: Path, files: Sequence[Path]) -> List[str]:
    """Put the headline table between its markers, and each study's claims between its own
    (``<!-- claims of NAME ... -->``), in each of ``files``; returns the registered studies
    missing from ``reports``. A file with neither marker is an error (nothing is written)."""
    lines, missing = headline(reports)
    body = "\n".join([HEADLINE_BEGIN, *lines, HEADLINE_END])
    head = re.compile(re.escape(HEADLINE_BEGIN) + r".*?" + re.escape(HEADLINE_END), re.S)
    claims = re.compile(re.escape(CLAIMS_BEGIN).replace(r"\{name\}", r"(?P<name>[a-z0-9-]+)") + r".*?"
                        + re.escape(CLAIMS_END).replace(r"\{name\}", r"(?P=name)"), re.S)

    def fill(m: "re.Match[str]") -> str:
        name = m.group("name")
        return "\n".join([CLAIMS_BEGIN.format(name=name), *claims_table(reports, name), CLAIMS_END.format(name=name)])

    texts = {}
    for f in files:
        text = Path(f).read_text()
        if not head.search(text) and not claims.search(text):
            raise ValueError(f"{f}: has no headline or claims table markers ({HEADLINE_BEGIN} ... {HEADLINE_END})")
        texts[f] = claims.sub(fill, head.sub(lambda _: body, text))
    for f, t in texts.items():
        Path(f).write_text(t)
    return missing
