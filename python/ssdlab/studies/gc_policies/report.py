"""gc-policies' report: measured DLWA per spare factor and policy beside Desnoyers' FIFO and
greedy models, each model claim judged by ``ssdlab.studies.verdict``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable, Dict, List

from ... import _native
from ...config import merge
from ..base import PointResult, per_seed, seeds
from ..verdict import Claim, Estimate, Verdicts, Why, legend
from .experiment import dlwa_of, point_name

MODELS = {"fifo": "FIFO", "greedy": "greedy"}


def _model(policy: str, alpha: float, spb: int) -> float:
    return _native.waf_fifo(alpha) if policy == "fifo" else _native.waf_greedy(alpha, spb)


def write_report(spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult],
                 log: Callable[[str], None]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter

    s = spec[mode]
    all_seeds = seeds(spec, mode)
    device = merge(spec.get("device", {}), {"geometry": s.get("geometry", {})})
    g = _native.config_resolve(device, "experiment")["geometry"]
    spb = g["pages_per_block"] * g["page_bytes"] // g["sector_bytes"]
    rows: List[Dict[str, Any]] = []
    verdicts = Verdicts("gc-policies", mode)
    for sf in s["spare_factors"]:
        # What the FTL holds back from the configured spare (open blocks, GC watermarks): the
        # models assume every spare sector holds data.
        eff = _native.config_sizing(merge(device, {"ftl": {"spare_factor": sf}}))["effective"]
        assert eff is not None, "a conventional device has an effective spare"
        for pol in s["policies"]:
            ms = [r.metrics for r in per_seed(results, point_name(sf, pol), all_seeds)]
            dl = [dlwa_of(m) for m in ms]
            samples = [d for d, _ in dl]
            est = Estimate.of(samples)
            alpha = 1 / (1 - sf)
            rows.append({"spare_factor": sf, "policy": pol, "dlwa": est.mean, "dlwa_lo": est.lo, "dlwa_hi": est.hi,
                         "seeds": est.n, "settled": all(ok for _, ok in dl),
                         "dlwa_whole_run": sum(m["dlwa"] for m in ms) / len(ms),
                         "device_writes": round(sum(m["host_write_bytes"] / m["device"]["logical_bytes"] for m in ms) / len(ms), 3),
                         "model_fifo": _native.waf_fifo(alpha), "model_greedy": _native.waf_greedy(alpha, spb),
                         "effective_spare_factor": eff["spare_factor"],
                         "gc_events": sum(m["gc_events"] for m in ms) / len(ms), "erases": sum(m["nand_erase_count"] for m in ms) / len(ms)})
            if pol not in MODELS:
                continue
            model = _model(pol, alpha, spb)
            at_eff = _model(pol, 1 / (1 - eff["spare_factor"]), spb)
            claim = Claim(f"DLWA, {MODELS[pol]} GC, spare factor {sf:.2f}", model, "ratio", source=f"{MODELS[pol]} model",
                          headline=(sf == min(s["spare_factors"])))
            why = None
            if est.mean > model * 1.01 and at_eff > model:
                why = Why("The FTL keeps erased blocks in reserve and one open block per write stream, so the spare that holds "
                          "data is smaller than configured; the model at that effective spare is beside it",
                          f"effective spare {eff['spare_factor'] * 100:.2f}% of {sf * 100:.0f}%; model there {at_eff:.3f}")
            verdicts.add(claim, samples, why)
    with open(out / "dlwa.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    # Figure: measured points per policy (with their intervals), analytic curves.
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sfs = np.linspace(min(s["spare_factors"]) * 0.9, max(s["spare_factors"]) * 1.05, 100)
    ax.plot(sfs, [_native.waf_fifo(1 / (1 - x)) for x in sfs], "k-", label="FIFO model (Desnoyers)")
    ax.plot(sfs, [_native.waf_greedy(1 / (1 - x), spb) for x in sfs], "k--", label="greedy model (Desnoyers)")
    markers = {"fifo": "o", "greedy": "s", "cost-benefit": "^", "d-choices": "D"}
    for pol in s["policies"]:
        pts = [r for r in rows if r["policy"] == pol]
        err = None
        if all(r["dlwa_lo"] is not None for r in pts):
            err = [[r["dlwa"] - r["dlwa_lo"] for r in pts], [r["dlwa_hi"] - r["dlwa"] for r in pts]]
        ax.errorbar([r["spare_factor"] for r in pts], [r["dlwa"] for r in pts], yerr=err, fmt=markers.get(pol, "x"),
                    label=f"ssdlab {pol}", markersize=7, alpha=0.8, capsize=3)
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
        f"Mode `{mode}`, {len(all_seeds)} seed{'s' if len(all_seeds) != 1 else ''} ({', '.join(map(str, all_seeds))}). "
        f"Uniform random single-sector overwrites at steady state (sequential fill, then "
        f"{s['warmup_device_writes']} device writes of warm-up, {how}), timing off. Models: Desnoyers, *Analytic "
        "Modeling of SSD Write Performance* (SYSTOR 2012): FIFO WAF = 1/(1 - d), d = -W0(-a e^-a)/a, and greedy "
        "~ WAF_fifo(k a)/k with k = 1 + 1/(2 Np).", "",
        "## Against the models", "", *verdicts.table(), "", legend(), "",
        "## Every point", "",
        "| spare factor | policy | ssdlab DLWA (mean [95%]) | whole run | FIFO model | greedy model | effective spare | device writes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" [{r['dlwa_lo']:.3f}, {r['dlwa_hi']:.3f}]" if r["dlwa_lo"] is not None else ""
        mark = "" if r["settled"] or "steady" not in s else " (not settled)"
        lines.append(f"| {r['spare_factor']:.2f} | {r['policy']} | {r['dlwa']:.3f}{ci}{mark} | {r['dlwa_whole_run']:.3f} | "
                     f"{r['model_fifo']:.3f} | {r['model_greedy']:.3f} | {r['effective_spare_factor'] * 100:.2f}% | "
                     f"{r['device_writes']:.2f} |")
    lines += [
        "", "![DLWA versus spare factor](dlwa_vs_spare.png)", "",
        "Cost-benefit and d-choices (best of `ftl.gc_d` random full blocks) have no closed-form model: their rows are "
        "measured, not judged.",
        "",
        "Every point's metrics.json and timeseries.csv are in `runs/` (links into `points/`); results.csv has "
        "one row per point, dlwa.csv the table above, verdicts.json the judged claims.",
    ]
    verdicts.save(out)
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md
