"""`ssdlab reproduce NAME`: experiments with their reports under reports/NAME/.

Each experiment lives in experiments/NAME/experiment.toml (what to run) and in a Python module
(how): an :class:`Experiment` that expands the file into points (each a runner and its input,
see ``ssdlab.runners``) and turns the points' results into a report (table, CSV, figures, the
reference numbers beside ssdlab's). The points run on the sweep engine (``ssdlab.sweep``), so
every reproduction takes ``--jobs N`` and ``--ray ADDRESS|auto``, resumes, records failing
points without stopping the others, sizes each point's memory before starting it, and writes
one results table (OUT/NAME/results.csv); ``experiment = NAME`` in a sweep file runs the same
points crossed with axes. docs/sweeps.md ("Reproductions on the sweep engine") says how to add
one.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import _native  # noqa: E402
from .config import merge, read_toml  # noqa: E402
from .runners import CHECKPOINT_EVERY_S, DEVICE, human_bytes  # noqa: E402

# kind -> the module attribute holding its Experiment ("module:name", imported when used).
KINDS: Dict[str, str] = {
    "gc-policies": "ssdlab.experiments:GC_POLICIES",
    "fdp-cache": "ssdlab.fdpcache:EXPERIMENT",
    "vm-baseline": "ssdlab.vmbaseline:EXPERIMENT",
    "flashblox": "ssdlab.vssd:EXPERIMENT",
    "flac": "ssdlab.flacrepro:EXPERIMENT",
    "lsm-deletion": "ssdlab.lsm:EXPERIMENT",
    "dpuswap": "ssdlab.dpuswap:EXPERIMENT",
    "uio-kv": "ssdlab.uio:EXPERIMENT",
}


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
    """How a kind of experiment runs: ``points(spec, mode)`` lists its points;
    ``report(spec, mode, out, results, log)`` writes its report from the finished points
    (``results``: point name -> PointResult) and returns report.md; ``metrics`` are the dotted
    paths into each point's metrics.json that results.csv shows; ``describe(metrics)`` is the
    progress line of a finished point."""

    points: Callable[[Dict[str, Any], str], List[ExperimentPoint]]
    report: Callable[[Dict[str, Any], str, Path, Dict[str, PointResult], Callable[[str], None]], Path]
    metrics: Tuple[str, ...] = ("dlwa",)
    describe: Callable[[Dict[str, Any]], str] = field(default=lambda m: "ok")
    # What it reproduces, in a line (``ssdlab reproduce --list``).
    title: str = ""


class ReproductionError(RuntimeError):
    """Some points of a reproduction failed (the others finished and were kept)."""


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


def listing() -> List[str]:
    """``ssdlab reproduce --list``: each experiment with its points in --quick and --full, what
    it reproduces and its page under docs/."""
    rows = [("NAME", "QUICK", "FULL", "WHAT")]
    root = experiments_root()
    for name in available():
        try:
            spec = load_spec(name)
            ex = get_experiment(spec, name)
            counts = [str(len(ex.points(spec, m))) if m in spec else "-" for m in ("quick", "full")]
            what = ex.title
        except Exception as e:  # a broken experiment file still shows up, with why
            counts, what = ["?", "?"], f"cannot read it: {e}"
        page = root.parent / "docs" / "case-studies" / f"{name}.md"
        if page.exists():
            what += f" (docs/case-studies/{name}.md)"
        rows.append((name, *counts, what))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]}" for r in rows]


def load_spec(name: str) -> Dict[str, Any]:
    """experiments/NAME/experiment.toml."""
    path = experiments_root() / name / "experiment.toml"
    if not path.exists():
        raise FileNotFoundError(f"unknown experiment {name!r}; available: {', '.join(available())}")
    return read_toml(path, "experiment file")


def get_experiment(spec: Dict[str, Any], name: str) -> Experiment:
    kind = spec.get("kind", name)
    if kind not in KINDS:
        raise ValueError(f"experiment {name!r} has unknown kind {kind!r}; kinds: {', '.join(sorted(KINDS))}")
    module, _, attr = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), attr)


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
    from .sweep import experiment_spec, expand, run_sweep

    spec = load_spec(name)
    exp = get_experiment(spec, name)
    sw = experiment_spec(name, mode)
    out = Path(out_root) / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps({"name": name, "mode": mode, "spec": spec}, indent=2) + "\n")
    points = expand(sw)
    sized = [p.resources.memory_bytes for p in points if p.resources]
    log(f"{name} ({mode}): {len(points)} points, estimated peak memory per point "
        f"{human_bytes(min(sized, default=None))} to {human_bytes(max(sized, default=None))}")
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
    return exp.report(spec, mode, out, results, log)


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
# gc-policies: DLWA versus spare factor for every GC policy, beside Desnoyers' models.


def _gc_points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    s = spec[mode]
    # The experiment's device, its mode's geometry on top; the core fills the rest.
    device = merge(spec.get("device", {}), {"seed": spec.get("seed", 42), "geometry": s.get("geometry", {}),
                                            "timing": {"enabled": False}})
    sector = _native.config_resolve(device, f"experiment {mode}")["geometry"]["sector_bytes"]
    workload: Dict[str, Any] = {"pattern": "uniform", "block_bytes": [sector]}
    if "steady" in s:
        # Stop once DLWA has settled (the core's rule), at most max_device_writes.
        st = s["steady"]
        workload.update(stop="steady", steady_window_device_writes=st["window_device_writes"],
                        steady_tolerance=st["tolerance"], steady_windows=st["windows"],
                        stop_device_writes=st["max_device_writes"])
    else:
        workload["stop_device_writes"] = s["measure_device_writes"]
    pts = []
    for sf in s["spare_factors"]:
        for pol in s["policies"]:
            cfg = merge(device, {"ftl": {"spare_factor": sf, "gc_policy": pol},
                                 "precondition": {"sequential_fill": True, "random_device_writes": s["warmup_device_writes"]},
                                 "workload": workload})
            pts.append(ExperimentPoint(f"sf{sf}_{pol}", {"spare_factor": sf, "policy": pol}, DEVICE.name, cfg))
    return pts


def _gc_dlwa(m: Dict[str, Any]) -> Tuple[float, bool]:
    """The figure a gc-policies point reports: the steady windows' DLWA when it settled, else
    the whole run's; and whether it settled."""
    st = m.get("steady")
    if st and st.get("reached"):
        return st["dlwa"], True
    return m["dlwa"], False


def _gc_report(spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult],
               log: Callable[[str], None]) -> Path:
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter

    s = spec[mode]
    rows = []
    g = _native.config_resolve(merge(spec.get("device", {}), {"geometry": s.get("geometry", {})}), "experiment")["geometry"]
    spb = g["pages_per_block"] * g["page_bytes"] // g["sector_bytes"]
    for sf in s["spare_factors"]:
        for pol in s["policies"]:
            m = results[f"sf{sf}_{pol}"].metrics
            dlwa, settled = _gc_dlwa(m)
            alpha = 1 / (1 - sf)
            st = m.get("steady") or {}
            rows.append({"spare_factor": sf, "policy": pol, "dlwa": dlwa, "dlwa_whole_run": m["dlwa"], "settled": settled,
                         "device_writes": round(m["host_write_bytes"] / m["device"]["logical_bytes"], 3),
                         "steady_from_device_writes": (round(st["steady_from_host_bytes"] / m["device"]["logical_bytes"], 3)
                                                       if st.get("reached") else None),
                         "model_fifo": _native.waf_fifo(alpha), "model_greedy": _native.waf_greedy(alpha, spb),
                         "gc_events": m["gc_events"], "erases": m["nand_erase_count"]})
    with open(out / "dlwa.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    # Figure: measured points per policy, analytic curves.
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sfs = np.linspace(min(s["spare_factors"]) * 0.9, max(s["spare_factors"]) * 1.05, 100)
    ax.plot(sfs, [_native.waf_fifo(1 / (1 - x)) for x in sfs], "k-", label="FIFO model (Desnoyers)")
    ax.plot(sfs, [_native.waf_greedy(1 / (1 - x), spb) for x in sfs], "k--", label="greedy model (Desnoyers)")
    markers = {"fifo": "o", "greedy": "s", "cost-benefit": "^", "d-choices": "D"}
    for pol in s["policies"]:
        pts = [(r["spare_factor"], r["dlwa"]) for r in rows if r["policy"] == pol]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], markers.get(pol, "x"), label=f"ssdlab {pol}", markersize=7, alpha=0.8)
    ax.set_xlabel("spare factor (physical - logical) / physical")
    ax.set_ylabel("DLWA")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_title("Write amplification, uniform random 4 KiB overwrites")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "dlwa_vs_spare.png", dpi=120)
    plt.close(fig)
    if "steady" in s:
        st = s["steady"]
        how = (f"then measured until DLWA settled: the last {st['windows']} windows of {st['window_device_writes']} device "
               f"writes agree within {st['tolerance'] * 100:g}% (at most {st['max_device_writes']} device writes). The "
               "DLWA is the steady windows'; the whole measured run's is beside it")
    else:
        how = f"then {s['measure_device_writes']} device writes measured"
    lines = [
        "# GC policies: DLWA versus spare factor", "",
        f"Mode `{mode}`. Uniform random single-sector overwrites at steady state (sequential fill, then "
        f"{s['warmup_device_writes']} device writes of warm-up, {how}), timing off. Models: Desnoyers, *Analytic "
        "Modeling of SSD Write Performance* (SYSTOR 2012): FIFO WAF = 1/(1 - d), d = -W0(-a e^-a)/a, and greedy "
        "~ WAF_fifo(k a)/k with k = 1 + 1/(2 Np).", "",
        "| spare factor | policy | ssdlab DLWA | whole run | FIFO model | greedy model | ssdlab / model | device writes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        model = r["model_fifo"] if r["policy"] == "fifo" else r["model_greedy"] if r["policy"] == "greedy" else None
        ratio = f"{r['dlwa'] / model:.3f}" if model else "-"
        mark = "" if r["settled"] or "steady" not in s else " (not settled)"
        lines.append(f"| {r['spare_factor']:.2f} | {r['policy']} | {r['dlwa']:.3f}{mark} | {r['dlwa_whole_run']:.3f} | "
                     f"{r['model_fifo']:.3f} | {r['model_greedy']:.3f} | {ratio} | {r['device_writes']:.2f} |")
    lines += [
        "", "![DLWA versus spare factor](dlwa_vs_spare.png)", "",
        "Why measured and modelled values differ: the models assume every spare sector can hold data; ssdlab "
        "keeps a few erased blocks in reserve for garbage collection and one open block per plane and die per "
        "write stream, so its effective spare is slightly smaller, and the difference grows with the number of "
        "dies relative to the block count. Cost-benefit and d-choices have no closed form here. Under uniform "
        "traffic cost-benefit sits near greedy. d-choices (best of `ftl.gc_d` = 8 random full blocks) tends "
        "to greedy as d grows and to random selection (WAF = alpha / (alpha - 1)) at d = 1; with large blocks, "
        "where FIFO is already close to greedy, d = 8 lands slightly above FIFO.",
        "",
        "Every point's metrics.json and timeseries.csv are in `runs/` (links into `points/`); results.csv has "
        "one row per point, dlwa.csv the table above.",
    ]
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def _gc_describe(m: Dict[str, Any]) -> str:
    dlwa, settled = _gc_dlwa(m)
    st = m.get("steady")
    return f"DLWA {dlwa:.3f}" + ("" if st is None else " (steady)" if settled else " (not settled)")


GC_POLICIES = Experiment(title="DLWA against spare factor for every GC policy, beside Desnoyers' analytic models (docs/gc-models.md)", points=_gc_points, report=_gc_report, describe=_gc_describe,
                         metrics=("dlwa", "steady.dlwa", "steady.reached", "steady.steady_from_host_bytes",
                                  "host_write_bytes", "gc_relocated_pages", "nand_erase_count"))
