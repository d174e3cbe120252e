"""vm-baseline's report: the guest's and the host's view of the same fio jobs side by side, and
the platform's claim (seed 000: storage software validated on emulated devices that a real OS
drives) judged by ``ssdlab.studies.verdict`` as qualitative claims, each decided by the
measurement printed beside it (the seed gives no number for them)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ...units import human_bytes
from ..base import PointResult, seeds
from ..verdict import Claim, Verdicts, Why, legend
from .experiment import device, points

# Tolerances of the claims, chosen before the first run of this report (the reasons are printed
# in it, see TOLERANCES): the device's host write bytes exactly, its DLWA within 0.01.
DLWA_TOLERANCE = 0.01
# A point over this many seconds keeps --quick at one seed (experiments/vm-baseline/experiment.toml).
SEED_BUDGET_S = 60.0
# The device's write latency counts as grown on one side when its p99 is this many times the
# other side's.
GROWN = 2.0

TOLERANCES = (
    "Tolerances, chosen before the first run of this report: the device's host write bytes must be equal to the byte "
    "(the jobs write fixed amounts, not for a time, and no file system is between fio and the disk, so a byte more or "
    f"less is a command lost or added on the way); its DLWA within {DLWA_TOLERANCE} (absolute) of the host's (the "
    "tolerance tests/test_vm.py has used for the same comparison: served devices follow the wall clock, so garbage "
    "collection on idle dies runs at different moments from the two sides and served runs are not byte-identical).")

DOCUMENT = "storage software designed and validated on emulated devices that a real OS drives"
SOURCE = "seed 000, section 1"
DOC_TEXT = "a real OS drives the emulated device (no number given)"

CLAIM_BYTES = Claim("A guest drives the emulated SSD as the host does: the device sees the same host writes from the guest "
                    "as from fio on the host", None, "qualitative", doc_text=DOC_TEXT, source=SOURCE, headline=True)
CLAIM_DLWA = Claim(f"The device's DLWA is the same from the guest as from the host (within {DLWA_TOLERANCE})", None,
                   "qualitative", doc_text=DOC_TEXT, source=SOURCE)
CLAIM_LATENCY = Claim("A real OS is in the loop: the guest's kernel and QEMU add latency to each write (median write "
                      "latency at queue depth 1, guest above host)", None, "qualitative", doc_text=DOC_TEXT, source=SOURCE)


def _mean(xs: Iterable[Optional[float]]) -> Optional[float]:
    v = [float(x) for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _groups(rows: List[Dict[str, Any]]) -> Dict[Tuple[str, str, str], List[Dict[str, Any]]]:
    """Rows by (job, latency, disk), seeds together, in row order."""
    g: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = {}
    for r in rows:
        g.setdefault((r["job"], r["latency"], r["disk"]), []).append(r)
    return g


def _seeds_text(rs: List[Dict[str, Any]]) -> str:
    return "" if len(rs) == 1 else f", mean of {len(rs)} seeds"


def _fmt_us(us: Any) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} us"


def _wall_s(r: PointResult) -> Optional[float]:
    try:
        return float(json.loads((r.dir / "run-info.json").read_text())["wall_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _judge_bytes(v: Verdicts, rows: List[Dict[str, Any]]) -> None:
    same = [r for r in rows if r["device_host_write_bytes_host"] == r["device_host_write_bytes_guest"]]
    amounts: Dict[str, int] = {}
    for r in same:
        amounts.setdefault(r["job"], r["device_host_write_bytes_host"])
    text = f"host writes equal to the byte in {len(same)} of {len(rows)} pairs"
    if amounts:
        text += " (" + ", ".join(f"{j}: {human_bytes(b)}" for j, b in amounts.items()) + ")"
    differ = [r for r in rows if r not in same]
    if differ:
        text += "; differ: " + ", ".join(
            f"{r['job']}/{r['latency']}/{r['disk']}/seed {r['seed']}: host {r['device_host_write_bytes_host']} B, guest "
            f"{r['device_host_write_bytes_guest']} B" for r in differ)
    trims = sum(r.get("device_host_trim_bytes_guest", 0) for r in rows)
    text += f"; trims from the guest {human_bytes(trims)}"
    v.add_qualitative(CLAIM_BYTES, not differ, text)


def _judge_dlwa(v: Verdicts, rows: List[Dict[str, Any]]) -> None:
    diffs = [abs(r["device_dlwa_guest"] - r["device_dlwa_host"]) for r in rows]
    worst = max(range(len(rows)), key=lambda i: diffs[i])
    text = (f"largest difference {diffs[worst]:.4f} over {len(rows)} pairs; "
            + ", ".join(f"{j}/{lat}/{d}: host {_mean(r['device_dlwa_host'] for r in rs):.4f}, guest "
                        f"{_mean(r['device_dlwa_guest'] for r in rs):.4f}{_seeds_text(rs)}"
                        for (j, lat, d), rs in _groups(rows).items()))
    why = None
    w = rows[worst]
    if diffs[worst] > 0:
        pair = f"{w['job']}/{w['latency']}/{w['disk']}/seed {w['seed']}"
        gc = f"GC events host {w['device_gc_events_host']}, guest {w['device_gc_events_guest']}"
        if w["device_gc_events_host"] != w["device_gc_events_guest"]:
            why = Why("The device collected garbage a different number of times for the two sides, which send at different "
                      "rates (idle dies collect by the wall clock)",
                      f"{pair}: {gc}; IOPS host {w['host_iops']:.0f}, guest {w['guest_iops']:.0f}")
        else:
            why = Why("The same number of GC events moved different amounts of valid data from the two sides",
                      f"{pair}: {gc}; DLWA host {w['device_dlwa_host']:.4f}, guest {w['device_dlwa_guest']:.4f}")
    v.add_qualitative(CLAIM_DLWA, diffs[worst] <= DLWA_TOLERANCE, text, why)


def _judge_latency(v: Verdicts, rows: List[Dict[str, Any]]) -> None:
    qd1 = [r for r in rows if r.get("iodepth") == 1 and r.get("host_write_p50_us") is not None
           and r.get("guest_write_p50_us") is not None]
    if not qd1:
        v.add_qualitative(CLAIM_LATENCY, None, "no job at queue depth 1 in this mode")
        return
    parts = []
    for (j, lat, d), rs in _groups(qd1).items():
        g, h = _mean(r["guest_write_p50_us"] for r in rs), _mean(r["host_write_p50_us"] for r in rs)
        assert g is not None and h is not None
        parts.append(f"{j}/{lat}/{d}: {g - h:+.0f} us at the median (guest {g:.0f} us, host {h:.0f} us{_seeds_text(rs)})")
    holds = all(r["guest_write_p50_us"] > r["host_write_p50_us"] for r in qd1)
    v.add_qualitative(CLAIM_LATENCY, holds, "; ".join(parts))


def _explanations(rows: List[Dict[str, Any]]) -> List[str]:
    """The report's explanations of the differences, each chosen by the measurement beside it."""
    out: List[str] = []
    g = _groups(rows)
    for (j, lat, d), rs in g.items():
        if lat != "none" or (j, "emulated", d) not in g:
            continue
        em = g[(j, "emulated", d)]
        r_none, r_em = _mean(r["guest_over_host_iops"] for r in rs), _mean(r["guest_over_host_iops"] for r in em)
        assert r_none is not None and r_em is not None
        measured = f"{j}, {d}: guest / host IOPS {r_none:.3f} with none, {r_em:.3f} with emulated"
        if r_em > r_none:
            out.append(Why("With `emulated` both sides wait for the emulated SSD's completion times, so what the guest adds "
                           "is a smaller share of each I/O and its IOPS come closer to the host's", measured).render())
        else:
            out.append(Why("Waiting for the emulated SSD on both sides did not bring the guest's IOPS closer to the host's",
                           measured).render())
    for (j, lat, d), rs in g.items():
        if lat != "none":
            continue
        h, gu = _mean(r["device_write_p99_us_host"] for r in rs), _mean(r["device_write_p99_us_guest"] for r in rs)
        if h is None or gu is None:
            continue
        measured = (f"{j}, {d}, latency none: device write p99 host {_fmt_us(h)}, guest {_fmt_us(gu)}; IOPS host "
                    f"{_mean(r['host_iops'] for r in rs):.0f}, guest {_mean(r['guest_iops'] for r in rs):.0f}")
        if h > GROWN * gu:
            out.append(Why("With `none` the host's fio sends faster than the emulated device completes, so the device's "
                           "simulated queue, and with it the device's write latency, grow on the host's side", measured).render())
        elif gu > GROWN * h:
            out.append(Why("The device's write latency is higher from the guest's side", measured).render())
        else:
            out.append(Why(f"The device's write latency is within {GROWN:g}x from both sides", measured).render())
    return out


def _seed_why(n_seeds: int, walls: List[float]) -> Optional[Why]:
    if not walls:
        return None
    measured = f"point wall time {min(walls):.0f} to {max(walls):.0f} s"
    if n_seeds == 1 and max(walls) > SEED_BUDGET_S:
        return Why(f"One seed: the longest point (a host run and a guest boot per disk) took over {SEED_BUDGET_S:.0f} s, so "
                   "every value is one run, with no interval", measured)
    if n_seeds == 1:
        return Why(f"One seed although a point took under {SEED_BUDGET_S:.0f} s here", measured)
    return Why(f"{n_seeds} seeds: every value is one run per seed", measured)


def _plot(rows: List[Dict[str, Any]], path: Path, many_seeds: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5 if len(rows) <= 6 else 0.9 * len(rows) + 1, 3.5))
    labels = [f"{r['job']}\n{r['latency']}, {r['disk']}" + (f"\nseed {r['seed']}" if many_seeds else "") for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["host_iops"] for r in rows], width=0.4, label="host: fio nbd engine")
    ax.bar([i + 0.2 for i in x], [r["guest_iops"] for r in rows], width=0.4, label="guest: fio libaio in ssdlab vm")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("IOPS")
    ax.set_yscale("log")
    ax.set_title("Same fio job, same device config: host vs guest")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(spec: Dict[str, Any], mode: str, out: Path, results: Dict[str, PointResult],
                 log: Callable[[str], None]) -> Path:
    all_seeds = seeds(spec, mode)
    cfg = device(spec, mode, all_seeds[0])
    rows: List[Dict[str, Any]] = []
    walls: List[float] = []
    for p in points(spec, mode):
        res = results[p.name]
        for row in res.metrics["rows"]:
            rows.append({"job": row["job"], "latency": row["latency"], "disk": row["disk"], "seed": p.values["seed"], **row})
        wall = _wall_s(res)
        if wall is not None:
            walls.append(wall)
    with open(out / "baseline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    many = len(all_seeds) > 1
    _plot(rows, out / "iops.png", many)

    verdicts = Verdicts("vm-baseline", mode)
    _judge_bytes(verdicts, rows)
    _judge_dlwa(verdicts, rows)
    _judge_latency(verdicts, rows)

    g = cfg["geometry"]
    accel = sorted({r["accel"] for r in rows})
    seed_why = _seed_why(len(all_seeds), walls)
    lines = [
        "# vm-baseline: the same fio jobs on the host and in a guest", "",
        f"Mode `{mode}`, {len(all_seeds)} seed{'s' if many else ''} ({', '.join(map(str, all_seeds))}; the seed is the "
        "device's and fio's `randseed`)" + (f". {seed_why.render()}" if seed_why else "") + ".", "",
        f"Device: preset `{cfg['preset']}`, {g['channels']}x{g['dies_per_channel']} dies, "
        f"{g['blocks_per_plane']} blocks per plane, spare factor {cfg['ftl']['spare_factor']}, timing "
        f"{'on' if cfg['timing']['enabled'] else 'off'}; a fresh empty device for every run. Host: fio's nbd engine "
        "straight to `ssdlab serve`. Guest: `ssdlab vm` (fio with libaio and O_DIRECT on the raw disk; "
        f"accelerator {', '.join(accel)}, docs/vm.md says how it is chosen). Jobs: experiments/vm/.", "",
        "## Against the document", "",
        f"The document (seed 000, section 1) is about {DOCUMENT}; it gives no number, so each claim is qualitative, decided "
        "by the measurement beside it. A pair is one job with one server latency mode and one disk kind, run on the host "
        "and in the guest.", "",
        TOLERANCES, "",
        *verdicts.table(), "", legend(), "",
        "## Every pair", "",
        "| job | latency | disk |" + (" seed |" if many else "") + " host IOPS | guest IOPS | guest / host | write p50 host / guest | "
        "write p99 host / guest | read p99 host / guest | device host writes host / guest | guest - host bytes | "
        "device DLWA host / guest | GC events host / guest | device write p99 host / guest |",
        "|---|---|---|" + ("---|" if many else "") + "---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['job']} | {r['latency']} | {r['disk']} |" + (f" {r['seed']} |" if many else "")
            + f" {r['host_iops']:.0f} | {r['guest_iops']:.0f} | {r['guest_over_host_iops']:.3f} | "
            f"{_fmt_us(r.get('host_write_p50_us'))} / {_fmt_us(r.get('guest_write_p50_us'))} | "
            f"{_fmt_us(r['host_write_p99_us'])} / {_fmt_us(r['guest_write_p99_us'])} | "
            f"{_fmt_us(r['host_read_p99_us'])} / {_fmt_us(r['guest_read_p99_us'])} | "
            f"{r['device_host_write_bytes_host'] / 2**20:.1f} / {r['device_host_write_bytes_guest'] / 2**20:.1f} MiB | "
            f"{r['device_host_write_bytes_guest'] - r['device_host_write_bytes_host']:+d} | "
            f"{r['device_dlwa_host']:.4f} / {r['device_dlwa_guest']:.4f} | "
            f"{r['device_gc_events_host']} / {r['device_gc_events_guest']} | "
            f"{_fmt_us(r['device_write_p99_us_host'])} / {_fmt_us(r['device_write_p99_us_guest'])} |")
    lines += ["", "![IOPS, host vs guest](iops.png)", "",
              "| job | latency | disk |" + (" seed |" if many else "") + " boot to workload | guest workload | QEMU peak RSS | "
              "server peak RSS (guest run / host run) |",
              "|---|---|---|" + ("---|" if many else "") + "---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['job']} | {r['latency']} | {r['disk']} |" + (f" {r['seed']} |" if many else "")
                     + f" {r['boot_to_workload_s']:.2f} s | {r['guest_workload_s'] or 0:.1f} s | "
                     f"{r['qemu_peak_rss_mib']:.0f} MiB | {r['server_peak_rss_mib_guest']:.0f} / "
                     f"{r['server_peak_rss_mib_host']:.0f} MiB |")
    lines += [
        "", "## What the columns say", "",
        "The host run is the NBD path alone; the guest run adds a kernel's block layer, QEMU's device model and QEMU's "
        f"NBD client (accelerator {', '.join(accel)}). Two server latency modes: `none` replies as soon as the work is "
        "done, so fio measures the plumbing; `emulated` replies at the device's completion time (as FEMU does), so fio's "
        "latencies include the device's.", "",
        *[f"- {e}" for e in _explanations(rows)], "",
        "Raw runs (fio.json, metrics.json, console and server logs) are in `runs/`; the table is `baseline.csv`, the "
        "judged claims `verdicts.json`.",
    ]
    verdicts.save(out)
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md
