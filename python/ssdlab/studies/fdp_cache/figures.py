"""fdp-cache's figures (measurements, not verdicts): Fig. 5 (DLWA over time), Fig. 6 (the
utilisation sweep), the SOC-size sweep beside Theorem 1, and latency against offered load."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

Row = Dict[str, Any]


def draw(out: Path, agg: Callable[[str], Row], util_key: Callable[..., str], u_list: Sequence[float],
         su: float, socs: Sequence[float], soc_bases: Sequence[str], loads: Sequence[float],
         load_base: Callable[[float, bool], str]) -> List[str]:
    """Writes the PNGs into ``out``; returns the markdown lines that show them. ``agg(base)``:
    a run's row (numbers averaged over its seeds, ``series`` the first seed's time series)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown: List[str] = []
    # Figure 5: DLWA over time at 50% (or the lowest utilisation), FDP vs non-FDP.
    u5 = 0.5 if any(abs(u - 0.5) < 1e-9 for u in u_list) else u_list[0]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for fdp, style in ((False, "C3-"), (True, "C0-")):
        rr = list(csv.DictReader(io.StringIO(agg(util_key(u5, fdp))["series"])))
        ax.plot([float(r["time_s"]) / 3600 for r in rr], [float(r["dlwa_interval"]) for r in rr], style,
                label="FDP (SOC, LOC on own handles)" if fdp else "non-FDP")
    ax.set_xlabel("workload time (simulated hours)")
    ax.set_ylabel("interval DLWA")
    ax.set_title(f"kvcache, {int(u5 * 100)}% utilisation, SOC 4%, first seed (document Fig. 5)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig5_dlwa_over_time.png", dpi=120)
    plt.close(fig)
    shown += ["![DLWA over time](fig5_dlwa_over_time.png)", ""]

    # Figure 6: utilisation sweep (means over each run's seeds).
    panels = [("dlwa", "DLWA"), ("dram_hit_ratio", "DRAM hit ratio"), ("nvm_hit_ratio", "NVM hit ratio"),
              ("throughput_rps_simulated", "throughput (req/s, simulated)"), ("read_p99_us", "p99 read (us)"),
              ("write_p99_us", "p99 write (us)")]
    fig, axs = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (col, label) in zip(axs.flat, panels, strict=True):
        for fdp, style in ((False, "C3o-"), (True, "C0s-")):
            ax.plot([u * 100 for u in u_list], [agg(util_key(u, fdp))[col] for u in u_list], style,
                    label="FDP" if fdp else "non-FDP")
        ax.set_xlabel("device utilisation (%)")
        ax.set_title(label)
        if col.endswith("_us"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axs[0][0].legend()
    fig.suptitle("kvcache, SOC 4%: utilisation sweep (document Fig. 6)")
    fig.tight_layout()
    fig.savefig(out / "fig6_utilization_sweep.png", dpi=120)
    plt.close(fig)
    shown += ["![Utilisation sweep](fig6_utilization_sweep.png)", ""]

    # SOC-size sweep with Theorem 1.
    fig, ax = plt.subplots(figsize=(6.5, 4))
    rows = [agg(b) for b in soc_bases]
    xs = [s * 100 for s in socs]
    ax.plot(xs, [r["theorem1_dlwa"] for r in rows], "k--", label="Theorem 1 (Lambert W)")
    ax.plot(xs, [r["theorem1_greedy_dlwa"] for r in rows], "k:", label="same spare, greedy cleaning (Desnoyers)")
    ax.plot(xs, [r["soc_dlwa"] for r in rows], "C0o-", label="ssdlab: SOC DLWA (all GC moves of its data)")
    ax.plot(xs, [r["dlwa"] for r in rows], "C2^:", label="ssdlab: device DLWA")
    ax.set_xlabel("SOC size (% of the device)")
    ax.set_ylabel("DLWA")
    ax.set_title(f"FDP, {int(su * 100)}% utilisation: SOC size vs Theorem 1")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "soc_sweep_theorem1.png", dpi=120)
    plt.close(fig)
    shown += ["![SOC size vs Theorem 1](soc_sweep_theorem1.png)", ""]

    # Offered load at the SOC sweep's utilisation.
    if loads:
        fig, axs = plt.subplots(1, 2, figsize=(11, 4))
        for ax, op in zip(axs, ("read", "write"), strict=True):
            for fdp, c in ((False, "C3"), (True, "C0")):
                lab = "FDP" if fdp else "non-FDP"
                ax.plot(loads, [agg(load_base(r, fdp))[f"{op}_p99_us"] for r in loads], c + "o-", label=f"{lab} p99")
                ax.plot(loads, [agg(load_base(r, fdp))[f"{op}_p50_us"] for r in loads], c + ":", label=f"{lab} p50")
            ax.set_yscale("log")
            ax.set_xlabel("offered load (requests/s)")
            ax.set_ylabel(f"device {op} latency (us)")
            ax.set_title(f"{op}s, kvcache, {int(su * 100)}% utilisation, SOC 4%")
            ax.grid(alpha=0.3)
        axs[0].legend()
        fig.tight_layout()
        fig.savefig(out / "latency_vs_load.png", dpi=120)
        plt.close(fig)
        shown += ["![Latency vs offered load](latency_vs_load.png)", ""]
    return shown
