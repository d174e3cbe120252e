"""lsm-deletion's figures, the ones seed 000 section 2 shows: total SSTable size over time,
tombstone-file lifetime against cumulative tombstones, compaction writes / GC migration / write
amplification against the delete share, read latency percentiles of phases 2 and 3, and the
deletion persistence latency against D_th (LSM and erase level). Figures of one run show the
first seed's; the delete-share figure shows the mean over seeds, with the 95% interval where
there are several."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..verdict import Estimate
from .runs import Run, row

COLORS = {"baseline": "C3", "fade": "C1", "zone-aware": "C0", "zone-aware-ttl": "C2"}
LABELS = {"baseline": "baseline (RocksDB+ZenFS)", "fade": "Lethe-FADE", "zone-aware": "zone-aware",
          "zone-aware-ttl": "zone-aware + TTL trigger (ablation)"}


def figures(m: Dict[str, Any], dref: float, out: Path, runs: Dict[Tuple[str, float], List[Run]]) -> List[Tuple[str, str]]:
    """Write the figures into ``out``; returns (file, caption) of each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = m["delete_fractions"]
    pols = m["policies"]
    one = {p: runs[(p, dref)][0] for p in pols}
    seed = next(iter(one.values())).seed
    figs = []

    # Total SSTable size over time, default vs FADE.
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for p in ("baseline", "fade"):
        if p in one:
            rr = list(csv.DictReader(io.StringIO((one[p].dir / "timeseries.csv").read_text())))
            ax.plot([float(r["time_s"]) for r in rr], [int(r["sst_bytes"]) / 2**20 for r in rr], COLORS[p] + "-", label=LABELS[p])
            ax.plot([float(r["time_s"]) for r in rr], [int(r["live_user_bytes"]) / 2**20 for r in rr], COLORS[p] + ":", alpha=0.6)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("MiB")
    ax.set_title(f"Total SSTable size (solid) and live data (dotted), {int(dref * 100)}% deletes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "sst_size_over_time.png", dpi=120)
    plt.close(fig)
    figs.append(("sst_size_over_time.png",
                 f"Total SSTable size over time, baseline vs FADE, seed {seed} (seed: 'SStable文件总大小随时间变化')"))

    # Tombstone-file lifetime vs cumulative tombstones.
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for p in pols:
        rows = one[p].s["tombstone_file_lifetimes"]["rows"]
        if rows:
            ax.scatter([r[0] for r in rows], [r[1] for r in rows], s=4, alpha=0.35, color=COLORS[p], label=LABELS[p])
    ax.axhline(one[pols[0]].s["delete_threshold_ns"] / 1e9, color="k", ls="--", lw=1, label="D_th")
    ax.set_xlabel("cumulative tombstones (deletes issued)")
    ax.set_ylabel("tombstone-file lifetime (s)")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_title(f"Tombstone-file lifetime, {int(dref * 100)}% deletes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, markerscale=3)
    fig.tight_layout()
    fig.savefig(out / "tombstone_file_lifetime.png", dpi=120)
    plt.close(fig)
    figs.append(("tombstone_file_lifetime.png",
                 f"Tombstone-file lifetime vs cumulative tombstones, seed {seed} (seed: '墓碑文件寿命与累计墓碑数')"))

    # Compaction writes, GC migration, write amplification vs delete percentage (means over seeds).
    panels = [("compaction_write_bytes", "compaction writes (GiB)", 2**30), ("gc_migrated_bytes", "zone-GC migration (MiB)", 2**20),
              ("wa_total", "write amplification (NAND / app)", 1)]
    fig, axs = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (col, label, div) in zip(axs, panels, strict=True):
        for p in pols:
            dd = [d for d in ds if (p, d) in runs]  # an ablation may run at some shares only
            ests = [Estimate.of([row(r)[col] / div for r in runs[(p, d)]]) for d in dd]
            err = [[e.mean - (e.lo if e.lo is not None else e.mean) for e in ests],
                   [(e.hi if e.hi is not None else e.mean) - e.mean for e in ests]]
            ax.errorbar([d * 100 for d in dd], [e.mean for e in ests], yerr=err, fmt=COLORS[p] + "o-", label=LABELS[p], capsize=3)
        ax.set_xlabel("deletes (% of operations)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "writes_vs_delete_pct.png", dpi=120)
    plt.close(fig)
    figs.append(("writes_vs_delete_pct.png", "Compaction writes, GC migration and write amplification vs delete percentage, "
                                             "means over the seeds with 95% intervals where there are several "
                                             "(seed: '合并写入量 / 垃圾回收迁移量 / 写放大倍数与删除百分比')"))

    # Read latency percentiles in phases 2 and 3.
    qs = [("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)]
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, phase, title in zip(axs, ("mixed", "lookups"), ("phase 2 (mixed, deletes)", "phase 3 (lookups)"), strict=True):
        width = 0.8 / len(pols)
        for j, p in enumerate(pols):
            ph = {x["name"]: x for x in one[p].s["phases"]}[phase]["latency_ns"]["get"]
            ax.bar([i + j * width for i in range(len(qs))], [ph.get(q, 0) / 1e3 for q, _ in qs], width, color=COLORS[p], label=LABELS[p])
        ax.set_xticks([i + width * (len(pols) - 1) / 2 for i in range(len(qs))])
        ax.set_xticklabels([f"p{v}" for _, v in qs])
        ax.set_ylabel("read latency (us)")
        ax.set_yscale("log")
        ax.set_title(f"{title}, {int(dref * 100)}% deletes")
        ax.grid(alpha=0.3, axis="y")
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "read_latency_phases.png", dpi=120)
    plt.close(fig)
    figs.append(("read_latency_phases.png", f"Read latency percentiles in phases 2 and 3, seed {seed} (seed: '第二/三阶段不同百分位读延迟')"))

    # Deletion persistence latency vs D_th, LSM and erase level.
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, level, title in zip(axs, ("lsm_level", "erase_level"),
                                ("LSM level (older versions gone from live files)", "erase level (their zones reset)"), strict=True):
        for p in pols:
            s = one[p].s
            cdf = s["deletion_persistence"][level]["cdf_ns"]
            dth = s["delete_threshold_ns"]
            pts = [(v / dth, q) for q, v in enumerate(cdf) if v is not None]
            ax.plot([x for x, _ in pts], [y for _, y in pts], color=COLORS[p], label=LABELS[p])
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_xlabel("persistence latency / D_th")
        ax.set_title(title, fontsize=10)
        ax.set_xscale("symlog", linthresh=0.1)
        ax.grid(alpha=0.3)
    axs[0].set_ylabel("% of deletes persisted (CDF)")
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "persistence_latency.png", dpi=120)
    plt.close(fig)
    figs.append(("persistence_latency.png", f"Deletion persistence latency against D_th, seed {seed}; deletes not persisted by "
                                            "the end of the run are the CDF's missing top"))
    return figs
