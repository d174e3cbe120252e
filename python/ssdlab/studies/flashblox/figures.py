"""flashblox's figures (measurements only; the verdicts are in report.md): motivation, KV
isolation, search + batch, lifetimes, erase counts, imbalance against the analysis, a channel
swap under a KV."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

from .experiment import LEVELS


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def motivation(out: Path, rows: List[Dict[str, Any]], readers: Sequence[str]) -> None:
    plt = _plt()
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    x = range(len(rows))
    for ax, (hk, sk), lab, div in ((axs[0], ("hw_mb_s", "sw_mb_s"), "MB/s", 1.0),
                                   (axs[1], ("hw_mean_us", "sw_mean_us"), "mean latency (ms)", 1e3)):
        ax.bar([i - 0.2 for i in x], [r[hk] / div for r in rows], 0.4, label="hardware (1, 2, 2, 3 channels)")
        ax.bar([i + 0.2 for i in x], [r[sk] / div for r in rows], 0.4, label="software (weights 1/8, 1/4, 1/4, 3/8)")
        ax.set_xticks(list(x), [f"{r['job']}\n{'read' if r['job'] in readers else 'write'}" for r in rows])
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3, axis="y")
    axs[0].legend(fontsize=8)
    fig.suptitle("Motivation: four 64 KiB jobs on 8 channels")
    fig.tight_layout()
    fig.savefig(out / "motivation.png", dpi=120)
    plt.close(fig)


def kv_knee(out: Path, rows: List[Dict[str, Any]], mix: str, knee: float) -> None:
    """Throughput against threads per instance, two instances of ``mix``, one line per isolation
    level: where each reaches its knee."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for lv in dict.fromkeys(r["level"] for r in rows):
        pts = [(r["threads"], r["ops"]) for r in rows if r["level"] == lv]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lv)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("threads per instance")
    ax.set_ylabel("ops/s, two instances")
    ax.grid(alpha=0.3)
    ax.set_title(f"KV x2, mix {mix}: throughput by threads\n(each level's knee: the fewest within {knee:.0%} of its best)",
                 fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "kv_knee.png", dpi=120)
    plt.close(fig)


def kv_isolation(out: Path, kv_rows: List[Dict[str, Any]], kv_mixes: Sequence[Tuple[int, str]]) -> None:
    plt = _plt()
    fig, axs = plt.subplots(2, 2, figsize=(11, 6.5))
    for col, n in enumerate((2, 4)):
        mixes = [mix for k, mix in kv_mixes if k == n]
        for r, (key, lab) in enumerate((("ops", "throughput (ops/s)"), ("p99_us", "p99 latency (us)"))):
            ax = axs[r][col]
            for j, lv in enumerate(LEVELS):
                vals = [next(x[key] for x in kv_rows if x["instances"] == n and x["mix"] == mix and x["level"] == lv) for mix in mixes]
                ax.bar([i + (j - 1.5) * 0.2 for i in range(len(mixes))], vals, 0.2, label=lv)
            ax.set_xticks(range(len(mixes)), mixes)
            ax.set_title(f"{n} KV instances: {lab}")
            ax.grid(alpha=0.3, axis="y")
    axs[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "kv_isolation.png", dpi=120)
    plt.close(fig)


def search(out: Path, sw_rows: List[Dict[str, Any]], channel: Tuple[float, float], none: Tuple[float, float]) -> None:
    """``channel``/``none``: (batch MB/s, search p99 us)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot([r["mb_s"] for r in sw_rows], [r["p99_us"] / 1e3 for r in sw_rows], "C2o-", label="software isolation (batch weight swept)")
    for r in sw_rows:
        ax.annotate(f"{r['weight']}", (r["mb_s"], r["p99_us"] / 1e3), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.plot([channel[0]], [channel[1] / 1e3], "C0s", markersize=9, label="channel isolation")
    ax.plot([none[0]], [none[1] / 1e3], "C3^", markersize=9, label="no isolation")
    ax.set_yscale("log")
    ax.set_xlabel("batch job bandwidth (MB/s)")
    ax.set_ylabel("search p99 latency (ms)")
    ax.set_title("Latency-sensitive reader beside a batch job")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "search_mapreduce.png", dpi=120)
    plt.close(fig)


def lifetime(out: Path, once: Callable[[str], Dict[str, Any]], fixed_weeks: Sequence[int], n: int, aL: float, d: float) -> None:
    plt = _plt()
    fig, axs = plt.subplots(1, 3, figsize=(15, 4))
    for ax, name, title in ((axs[0], "life_none", "no swaps"), (axs[1], "life_adaptive_doc", "adaptive, document's pair"),
                            (axs[2], "life_adaptive_rot", "adaptive, analysis's pair")):
        ser = once(name)["series"]
        wks = [p["week"] for p in ser]
        for c in range(n):
            ax.plot(wks, [p["channel_erases"][c] for p in ser], lw=0.8, color="C3" if c == 0 else "0.6")
        ax.set_title(f"{title}: {once(name)['lifetime_weeks']:.0f} weeks")
        ax.set_xlabel("weeks")
        ax.grid(alpha=0.3)
    axs[0].set_ylabel("chunk erases per channel (red: first home of the writes)")
    fig.tight_layout()
    fig.savefig(out / "lifetime_erases.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    names = ["life_none"] + [f"life_fixed_{w}w" for w in fixed_weeks] + ["life_adaptive_doc", "life_adaptive_rot", "life_fixed_doc_tstar"]
    ax.bar(range(len(names)), [once(x)["lifetime_fraction"] * 100 for x in names], color="C0")
    ax.axhline(95, color="k", ls="--", lw=0.8)
    ax.set_xticks(range(len(names)), [x.replace("life_", "").replace("_", "\n") for x in names], fontsize=8)
    ax.set_ylabel("lifetime (% of ideal)")
    ax.set_title("One channel hammered: lifetime by swap policy")
    fig.tight_layout()
    fig.savefig(out / "lifetime.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, style, lab in (("life_rot_tstar", "C0-", "rotation every T*"), ("life_rot_2tstar", "C3-", "every 2 T*")):
        ser = once(name)["series"]
        ax.plot([p["week"] for p in ser], [p["imbalance"] for p in ser], style, lw=0.8, label=lab)
    ax.axhline(1 + d, color="k", ls="--", lw=0.8, label="1 + d")
    ax.axvline(aL, color="0.5", ls=":", lw=0.8, label="a L")
    ax.set_ylim(0.95, 1.6)
    ax.set_xlabel("weeks")
    ax.set_ylabel("x = s_max / s_avg")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "imbalance.png", dpi=120)
    plt.close(fig)


def migration(out: Path, none: Dict[str, Any], swap: Dict[str, Any], series_ms: float) -> None:
    """One seed's runs (the first): a KV without and with a channel swap."""
    plt = _plt()
    ser = swap["tenants"][0]["series"]
    ser0 = none["tenants"][0]["series"]
    fig, axs = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for s_, lab, c in ((ser0, "no swap", "0.5"), (ser, "channel swap", "C0")):
        axs[0].plot([r[0] / 1e3 for r in s_], [r[1] / (series_ms / 1e3) for r in s_], color=c, lw=0.9, label=lab)
        axs[1].plot([r[0] / 1e3 for r in s_], [r[2] / 1e3 for r in s_], color=c, lw=0.9, label=lab)
    w = swap["swap_window_ms"]
    for ax in axs:
        if w and w[1] is not None and w[1] == w[1]:
            ax.axvspan(w[0] / 1e3, w[1] / 1e3, color="C1", alpha=0.15, label="migration")
        ax.grid(alpha=0.3)
    axs[0].set_ylabel("KV ops/s")
    axs[1].set_ylabel("KV p99 per interval (ms)")
    axs[1].set_yscale("log")
    axs[1].set_xlabel("seconds")
    axs[0].legend(fontsize=8)
    fig.suptitle("A channel swap under a running KV (YCSB A, first seed)")
    fig.tight_layout()
    fig.savefig(out / "migration.png", dpi=120)
    plt.close(fig)
