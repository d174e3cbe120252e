"""flac's figures: the microbenchmark, thread scaling, the applications and the checkpoints,
from the report's rows averaged over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from .runner import ENGINES

LABEL = {"flac": "FlacFS", "pagecache": "page-cache FS", "dax": "DAX FS", "ext4": "ext4 (kernel, loop)"}


def figures(out: Path, micro: List[Dict[str, Any]], scaling: List[Dict[str, Any]], apps: List[Dict[str, Any]],
             shim: List[Dict[str, Any]], checkpoint: List[Dict[str, Any]], n_seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    over = f"mean of {n_seeds} seeds" if n_seeds > 1 else "1 seed"
    colors = {"flac": "tab:blue", "pagecache": "tab:orange", "dax": "tab:green", "ext4": "tab:gray"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("read", "write"), strict=True):
        for engine in ENGINES:
            for regime, style in (("cached", "-o"), ("larger", "--s")):
                pts = [r for r in micro if r["engine"] == engine and r["op"] == op and r["regime"] == regime]
                if pts:
                    ax.plot([p["io_bytes"] / 1024 for p in pts], [p["gb_s"] for p in pts], style, color=colors[engine],
                            label=f"{LABEL[engine]} ({'fits the cache' if regime == 'cached' else 'data 4x the cache'})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("I/O size (KiB)")
        ax.set_ylabel("throughput (GB/s)")
        ax.set_title(f"Microbenchmark: random {op}s, 1 thread ({over})")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "micro.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, op in zip(axes, ("read", "write"), strict=True):
        for engine in ENGINES:
            pts = [r for r in scaling if r["engine"] == engine and r["op"] == op]
            ax.plot([p["threads"] for p in pts], [p["gb_s"] for p in pts], "-o", color=colors[engine], label=LABEL[engine])
        ax.set_xlabel("threads")
        ax.set_ylabel("throughput (GB/s)")
        ax.set_yscale("log")
        ax.set_title(f"2 MiB {op}s, data in the DRAM cache ({over})")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)
    plt.close(fig)

    groups = [("in process", [(f"{r['app']} ({r['cache']})", r) for r in apps]),
              ("unmodified, via the shim", [(r["app"], r) for r in shim])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (title, items) in zip(axes, groups, strict=True):
        names = list(dict.fromkeys(n for n, _ in items))
        engines = [e for e in [*ENGINES, "ext4"] if any(r["engine"] == e for _, r in items)]
        width = 0.8 / max(len(engines), 1)
        for k, e in enumerate(engines):
            vals = [next((r["seconds"] for n2, r in items if n2 == n and r["engine"] == e), np.nan) for n in names]
            ax.bar(np.arange(len(names)) + k * width, vals, width, color=colors[e], label=LABEL[e])
        ax.set_xticks(np.arange(len(names)) + width * (len(engines) - 1) / 2)
        ax.set_xticklabels(names, fontsize=8)
        ax.set_ylabel("seconds (lower is better)")
        ax.set_title(f"Applications, {title} ({over})")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "apps.png", dpi=120)
    plt.close(fig)

    if checkpoint:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        modes = [r["mode"] for r in checkpoint]
        axes[0].bar(modes, [r["save_s"] for r in checkpoint], color=["tab:blue", "tab:cyan", "tab:gray"])
        axes[0].set_ylabel("seconds per save (median after the first)")
        axes[0].set_title(f"Checkpoint save ({over})")
        axes[1].bar(modes, [r["pm_frames_bytes"] / 2**20 for r in checkpoint], color=["tab:blue", "tab:cyan", "tab:gray"])
        axes[1].axhline(checkpoint[0]["logical_bytes"] / 2**20, color="k", ls="--", lw=1, label="bytes saved")
        axes[1].set_ylabel("MiB held by the checkpoints")
        axes[1].set_title("Checkpoint space")
        axes[1].legend(fontsize=8)
        for ax in axes:
            ax.tick_params(axis="x", labelsize=8)
            ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        fig.savefig(out / "checkpoint.png", dpi=120)
        plt.close(fig)
