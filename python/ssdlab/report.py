"""Render a run directory (metrics.json + timeseries.csv) as Markdown with PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .units import human_bytes  # noqa: E402


def _load(run_dir: Path) -> tuple:
    mpath = run_dir / "metrics.json"
    if not mpath.exists():
        raise FileNotFoundError(f"{run_dir}: no metrics.json (is this a run directory?)")
    metrics = json.loads(mpath.read_text())
    series = None
    spath = run_dir / metrics.get("series_csv", "timeseries.csv")
    if spath.exists():
        series = np.genfromtxt(spath, delimiter=",", names=True)
        series = np.atleast_1d(series)
    return metrics, series


def _fmt_ns(ns: Any) -> str:
    if ns is None:
        return "-"
    ns = float(ns)
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


# The window the DLWA over time is smoothed over: this share of the run's host writes (or one
# sample interval when the series is coarser).
DLWA_WINDOW_SHARE = 0.01


def _byte_axis(total: float) -> tuple:
    """(divisor, unit) for an axis of host bytes up to ``total``."""
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if total >= 2 * div:
            return div, unit
    return 1, "bytes"


def windowed_dlwa(host: np.ndarray, nand: np.ndarray, window: float) -> tuple:
    """DLWA over a trailing window of ``window`` host bytes at each sample: NAND bytes over host
    bytes written since the last sample at least ``window`` bytes earlier. Returns (x, dlwa)
    for the samples with a full window behind them."""
    # j[i]: the latest sample at or before host[i] - window.
    j = np.searchsorted(host, host - window, side="right") - 1
    ok = j >= 0
    i = np.nonzero(ok)[0]
    j = j[ok]
    dh = host[i] - host[j]
    keep = dh > 0
    i, j, dh = i[keep], j[keep], dh[keep]
    return host[i], (nand[i] - nand[j]) / dh


def plot_dlwa(series, out: Path, steady: Optional[float] = None) -> bool:
    """DLWA over the run: above, smoothed over a trailing window of 1% of the run's host writes
    (stated in the legend); below, cumulative (whole run so far), each on its own scale."""
    host = np.asarray(series["host_write_bytes"], dtype=float)
    nand = np.asarray(series["nand_write_bytes"], dtype=float)
    total = float(host[-1]) if host.size else 0.0
    if total <= 0:
        return False
    steps = np.diff(host)
    step = float(np.median(steps[steps > 0])) if np.any(steps > 0) else total
    window = max(total * DLWA_WINDOW_SHARE, step)
    div, unit = _byte_axis(total)
    x, w = windowed_dlwa(host, nand, window)
    cum = series["dlwa_cumulative"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5), sharex=True, height_ratios=(3, 2))
    share = f"{window / total * 100:.2g}% of the run" if window > total * DLWA_WINDOW_SHARE else "1% of the run"
    top.plot(x / div, w, color="tab:blue", linewidth=1,
             label=f"over the last {human_bytes(window)} of host writes ({share})")
    if steady is not None:
        top.axhline(steady, color="tab:red", linestyle="--", linewidth=1, label=f"steady state: {steady:.3f}")
    top.set_ylabel("DLWA (window)")
    top.set_title("Device write amplification (NAND / host bytes written)")
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    top.legend(loc="lower right", fontsize="small")
    bottom.plot(host / div, cum, color="tab:orange", linewidth=2, label=f"cumulative since the run started: {cum[-1]:.3f} at the end")
    bottom.set_ylabel("DLWA (cumulative)")
    bottom.set_xlabel(f"host writes ({unit})")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    bottom.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_latency_cdf(metrics: Dict[str, Any], out: Path) -> bool:
    cdf = metrics.get("latency_cdf_ns", {})
    if not any(cdf.get(op) for op in ("read", "write", "trim")):
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for op in ("read", "write", "trim"):
        pts = cdf.get(op) or []
        if not pts:
            continue
        v = np.array([p[0] for p in pts], dtype=float) / 1e3
        q = np.array([p[1] for p in pts], dtype=float)
        # Tail view: -log10(1 - q), so p99, p99.9 and p99.99 are evenly spaced.
        y = -np.log10(np.clip(1 - q, 1e-5, 1))
        ax.plot(v, y, drawstyle="steps-post", label=op)
    ax.set_xscale("log")
    ax.set_yticks([0, 1, 2, 3, 4, 5])
    ax.set_yticklabels(["0", "90", "99", "99.9", "99.99", "99.999"])
    ax.set_xlabel("latency (us)")
    ax.set_ylabel("percentile")
    ax.set_title("Latency CDF (tail)")
    ax.grid(alpha=0.3, which="major")
    ax.grid(alpha=0.1, which="minor")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_erase_histogram(metrics: Dict[str, Any], out: Path) -> bool:
    h = metrics.get("erase_count", {}).get("histogram")
    if not h:
        return False
    edges = np.array(h["bin_edges"], dtype=float)
    counts = np.array(h["counts"], dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    # A bin [a, b) holds the whole erase counts a .. b-1: its bar spans a-0.5 .. b-0.5, so each
    # count sits under its own integer tick.
    ax.bar(edges[:-1] - 0.5, counts, width=np.diff(edges), align="edge", edgecolor="black", linewidth=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
    ax.set_xlabel("erase count")
    ax.set_ylabel("blocks")
    ax.set_title("Erase-count distribution")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def render(run_dir: Path) -> Path:
    """Write report.md and PNG plots into ``run_dir``; returns the Markdown path."""
    run_dir = Path(run_dir)
    m, series = _load(run_dir)
    dev = m.get("device", {})
    lines: List[str] = [f"# ssdlab run: {run_dir.name}", ""]
    if m.get("interrupted"):
        lines += ["**Interrupted**: the numbers cover the part of the run that completed.", ""]
    lines += [
        f"Device: preset `{dev.get('preset')}`, {human_bytes(dev.get('logical_bytes', 0))} logical / "
        f"{human_bytes(dev.get('physical_bytes', 0))} raw, spare factor {dev.get('spare_factor')}, "
        f"GC `{dev.get('gc_policy')}`, storage `{dev.get('storage')}`, timing {'on' if dev.get('timing') else 'off'}; seed {m.get('seed')}.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| host writes | {human_bytes(m['host_write_bytes'])} |",
        f"| host reads | {human_bytes(m['host_read_bytes'])} |",
        f"| host trims | {human_bytes(m['host_trim_bytes'])} |",
        f"| NAND writes | {human_bytes(m['nand_write_bytes'])} |",
        f"| NAND reads | {human_bytes(m['nand_read_bytes'])} |",
        f"| **DLWA** | **{m['dlwa']:.4f}** |",
        f"| block erases | {m['nand_erase_count']} |",
        f"| GC events (foreground / background) | {m['gc_events']} ({m.get('gc_foreground_events', 0)} / {m.get('gc_background_events', 0)}) |",
        f"| GC relocated pages | {m['gc_relocated_pages']} |",
    ]
    if m.get("steady"):
        st = m["steady"]
        lines.append(f"| steady-state DLWA | {st['dlwa']:.4f} from {human_bytes(st['steady_from_host_bytes'])} of host writes |"
                     if st["reached"] else f"| steady-state DLWA | not reached in {st['windows_measured']} windows |")
    if m.get("spare") and m["spare"].get("spare_factor_measured") is not None:
        sp = m["spare"]
        lines.append(f"| spare left to data (measured) | {sp['spare_factor_measured'] * 100:.2f}% of {dev.get('spare_factor', 0) * 100:.2f}% "
                     f"configured; greedy model at it: WAF {sp['model_waf_greedy_measured'] or float('nan'):.3f} |")
    if dev.get("timing"):
        t = m["throughput"]
        lines += [
            f"| simulated time | {m['sim_time_ns'] / 1e9:.3f} s |",
            f"| write throughput | {t['host_write_bytes_per_s'] / 2**20:.1f} MiB/s |",
            f"| read throughput | {t['host_read_bytes_per_s'] / 2**20:.1f} MiB/s |",
            f"| IOPS | {t['iops']:.0f} |",
        ]
    lines.append("")
    lat = m.get("latency_ns", {})
    if any(lat.get(op, {}).get("count") for op in ("read", "write", "trim")):
        lines += ["## Latency", "", "| op | count | p50 | p99 | p99.9 | p99.99 | max | mean |", "|---|---|---|---|---|---|---|---|"]
        for op in ("read", "write", "trim"):
            s = lat.get(op, {})
            if s.get("count"):
                lines.append(f"| {op} | {s['count']} | {_fmt_ns(s['p50'])} | {_fmt_ns(s['p99'])} | {_fmt_ns(s['p999'])} | "
                             f"{_fmt_ns(s['p9999'])} | {_fmt_ns(s['max'])} | {_fmt_ns(s['mean'])} |")
        lines.append("")
        if plot_latency_cdf(m, run_dir / "latency_cdf.png"):
            lines += ["![latency CDF](latency_cdf.png)", ""]
    steady = m["steady"]["dlwa"] if m.get("steady") and m["steady"].get("reached") else None
    if series is not None and series.size > 1 and plot_dlwa(series, run_dir / "dlwa.png", steady):
        lines += ["## Write amplification over time", "",
                  "Above, DLWA over a trailing window of host writes (its size in the legend); below, cumulative.", "",
                  "![DLWA over time](dlwa.png)", ""]
    e = m.get("erase_count", {})
    if e:
        lines += ["## Wear", "", f"Erase counts: min {e['min']}, mean {e['mean']:.2f}, max {e['max']}, stddev {e['stddev']:.2f}; "
                  f"grown bad blocks {m['blocks']['bad_grown']}, factory bad {m['blocks']['bad_factory']}.", ""]
        if plot_erase_histogram(m, run_dir / "erase_counts.png"):
            lines += ["![erase-count histogram](erase_counts.png)", ""]
    busy = m.get("busy_fraction", {})
    if dev.get("timing") and busy.get("die"):
        d = busy["die"]
        lines += [f"Die busy fraction: mean {np.mean(d):.3f}, min {np.min(d):.3f}, max {np.max(d):.3f}; "
                  f"channel busy fraction mean {np.mean(busy['channel']):.3f}.", ""]
    out = run_dir / "report.md"
    out.write_text("\n".join(lines))
    return out
