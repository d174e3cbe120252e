"""dpuswap's figures: key-value and sort by backend and local memory, fio, the DPU cache sweep
(means over the seeds), and the guest runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List

from .api import BACKENDS, LABELS
from .experiment import cache_run, cache_sweep, pct_key

COLORS = {"dpuswap": "C0", "infiniswap": "C1", "znswap": "C2", "local": "k"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(out: Path, runs: Any, fractions: List[float], m: Dict[str, Any]) -> None:
    """kv.png, sort.png, fio.png and cache_sweep.png from ``runs`` (report.Runs)."""
    plt = _plt()
    swap = [f for f in fractions if f < 1.0]
    for wname, panels in (("kv", [("throughput", "throughput (ops/s)"), ("completion_s", "completion time (s)"),
                                  ("latency_mean_us", "mean latency (us)"), ("latency_p99_us", "p99 latency (us)")]),
                          ("sort", [("completion_s", "completion time (s)"), ("fault_p99_us", "p99 fault latency (us)")])):
        fig, axs = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.4))
        loc = runs.mean(f"{wname}_local_100")
        for ax, (col, label) in zip(axs, panels, strict=True):
            xs = list(range(len(swap)))
            wdt = 0.8 / len(BACKENDS)
            for i, b in enumerate(BACKENDS):
                ax.bar([x + i * wdt for x in xs], [runs.mean(f"{wname}_{b}_{pct_key(f)}")[col] for f in swap], wdt,
                       label=LABELS[b], color=COLORS[b])
            if loc[col]:
                ax.axhline(loc[col], color="k", ls="--", lw=1, label="all local")
            ax.set_xticks([x + wdt for x in xs], [f"{pct_key(f)}%" for f in swap])
            ax.set_xlabel("local memory")
            ax.set_title(label, fontsize=10)
            ax.grid(alpha=0.3, axis="y")
        axs[0].legend(fontsize=7)
        fig.suptitle({"kv": "YCSB-style key-value (modelled time)", "sort": "in-memory sort (modelled time)"}[wname])
        fig.tight_layout()
        fig.savefig(out / f"{wname}.png", dpi=120)
        plt.close(fig)
    fig, axs = plt.subplots(1, 2, figsize=(8, 3.4))
    for ax, rw in zip(axs, ("randread", "randwrite"), strict=True):
        vals = [runs.mean(f"fio_{rw}_{b}")["throughput"] / 1e6 for b in BACKENDS]
        ax.bar([LABELS[b] for b in BACKENDS], vals, color=[COLORS[b] for b in BACKENDS])
        ax.set_title(f"fio-style {rw}, 4 KiB, QD1", fontsize=10)
        ax.set_ylabel("MB/s (modelled)")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "fio.png", dpi=120)
    plt.close(fig)
    sweep = cache_sweep(m)
    if sweep:
        fig, axs = plt.subplots(1, len(swap), figsize=(4.6 * len(swap), 3.6), squeeze=False)
        for ax, f in zip(axs[0], swap, strict=True):
            ax.plot([x * 100 for x in sweep], [runs.first(cache_run(f, x, m))["throughput"] for x in sweep], "o-",
                    color=COLORS["dpuswap"], label=LABELS["dpuswap"])
            for b in ("infiniswap", "znswap"):
                ax.axhline(runs.first(f"kv_{b}_{pct_key(f)}")["throughput"], color=COLORS[b], ls="--", label=LABELS[b])
            ax.set_xscale("log", base=2)
            ax.set_xticks([x * 100 for x in sweep], [f"{x * 100:g}" for x in sweep])
            ax.set_xlabel("DPU cache (% of the working set)")
            ax.set_ylabel("throughput (ops/s, modelled)")
            ax.set_title(f"key-value at {pct_key(f)}% local memory (seed {runs.first_seed})", fontsize=10)
            ax.grid(alpha=0.3)
        axs[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "cache_sweep.png", dpi=120)
        plt.close(fig)


def _label(ax: Any, ylabel: str, title: str) -> None:
    """A bar panel's y label, title, legend and grid, as every panel here has them."""
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def fetch_units_figure(out: Path, runs: Any, swap: List[float], units: List[str]) -> None:
    """fetch_unit.png: per fetch unit, the DPU misses' median and p99 (the queued part shaded)
    and the key-value throughput beside the baselines', at each swapped fraction."""
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    name = {u: (lambda f, u=u: f"kv_dpuswap_{pct_key(f)}" + ("" if u == units[0] else f"_{u}")) for u in units}
    xs = list(range(len(swap)))
    wdt = 0.8 / (2 * len(units))
    for i, u in enumerate(units):
        for j, q in enumerate(("p50", "p99")):
            at = [x + (2 * i + j) * wdt for x in xs]
            rows = [runs.mean(name[u](f)) for f in swap]
            a.bar(at, [r[f"miss_{q}_us"] for r in rows], wdt, color=COLORS["dpuswap"], alpha=0.45 + 0.5 * (i == 0),
                  edgecolor="k", lw=0.5, label=f"{u}: miss {q}")
            a.bar(at, [r[f"miss_wait_{q}_us"] for r in rows], wdt, color="none", hatch="///", edgecolor="k", lw=0.0,
                  label="queued part" if i == j == 0 else None)
    a.set_yscale("log")
    a.set_xticks([x + 0.4 - wdt / 2 for x in xs], [f"{pct_key(f)}% local" for f in swap])
    _label(a, "DPU-cache miss on the DPU (us, modelled)", "what a miss costs, by fetch unit")
    series = [(f"DPUSwap ({u})", name[u], COLORS["dpuswap"], 1.0 if i == 0 else 0.45) for i, u in enumerate(units)]
    series += [(LABELS[o], (lambda f, o=o: f"kv_{o}_{pct_key(f)}"), COLORS[o], 1.0) for o in ("infiniswap", "znswap")]
    wdt = 0.8 / len(series)
    for i, (label, nm, color, alpha) in enumerate(series):
        b.bar([x + i * wdt for x in xs], [runs.mean(nm(f))["throughput"] for f in swap], wdt, color=color, alpha=alpha, label=label)
    b.set_xticks([x + 0.4 - wdt / 2 for x in xs], [f"{pct_key(f)}% local" for f in swap])
    _label(b, "key-value throughput (ops/s, modelled)", "key-value throughput")
    fig.tight_layout()
    fig.savefig(out / "fetch_unit.png", dpi=120)
    plt.close(fig)


def guest(out: Path, g: Callable[[str, float], Dict[str, Any]], swap: List[float], loc: Dict[str, Any]) -> None:
    """guest.png: the guest's fio IOPS per backend and local fraction."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    xs = list(range(len(swap)))
    for i, b in enumerate(BACKENDS):
        ax.bar([x + (i - 1) * 0.25 for x in xs], [g(b, f)["throughput_iops"] for f in swap], width=0.25, color=COLORS[b], label=LABELS[b])
    ax.axhline(loc["throughput_iops"], color="k", ls="--", label="all local")
    ax.set_xticks(xs, [f"{pct_key(f)}% local" for f in swap])
    _label(ax, "guest fio IOPS (wall clock)", "guest kernel swapping over NBD")
    fig.tight_layout()
    fig.savefig(out / "guest.png", dpi=120)
    plt.close(fig)
