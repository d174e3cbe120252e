"""Where each program's time goes, and the fair baselines (issue 43): per program and engine,
the time inside file-system calls against the rest, the bytes attached and copied and the
read/write sizes (FlacFS's counters, crates/flac/src/fs/calls.rs, in process and through the
shim; for ext4 the kernel time of the process from its rusage), the baselines charged the
kernel's per-call costs measured at the start of the step, and ext4 on equal media.

The explanation beside an application claim is chosen by these measured shares: when the
baseline spends little of its time inside file-system calls, no file system can make the
program much faster (the ceiling is the baseline's time over its time outside the calls).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ...units import human_bytes
from ..verdict import Why

LABELS = {"flac": "FlacFS", "pagecache": "page-cache FS", "dax": "DAX FS", "pagecache+kernel": "page-cache FS + kernel costs",
          "dax+kernel": "DAX FS + kernel costs", "flac-pm-off": "FlacFS, PM cost off", "ext4": "ext4 (kernel, loop, cold)",
          "ext4-warm": "ext4 (kernel, loop, warm)"}
SIZE_BUCKETS = ("<4K", "4K-64K", "64K-2M", ">=2M")


def io_seconds(r: Dict[str, Any]) -> Optional[float]:
    """Time inside file-system calls: FlacFS's counters (the library engines); for ext4, whose
    calls no user-space counter sees, the processes' time outside user space (wall minus user
    CPU time, rusage): kernel work, waiting for the loop device and for the CPU, so at least
    the time in file-system calls and a ceiling that is generous to the other engine."""
    if r["engine"].startswith("ext4"):
        if r.get("user_s") is None:
            return None
        return max(0.0, total_seconds(r) - float(r["user_s"]))
    return None if r.get("io_s") is None else float(r["io_s"])


def total_seconds(r: Dict[str, Any]) -> float:
    """The time the I/O share is taken of: all runs of a shim program, the timed part in process."""
    return float(r.get("wall_total_s") or r["seconds"])


def io_share(r: Optional[Dict[str, Any]]) -> Optional[float]:
    if r is None:
        return None
    io, t = io_seconds(r), total_seconds(r)
    return None if io is None or not t else io / t


def ceiling(r: Optional[Dict[str, Any]]) -> Optional[float]:
    """The largest speedup over this run if its file-system calls took no time and the rest
    stayed: its time over its time outside the calls."""
    s = io_share(r)
    return None if s is None or s >= 1 else 1 / (1 - s)


def _mean(xs: Sequence[Optional[float]]) -> Optional[float]:
    v = [float(x) for x in xs if x is not None]
    return float(np.mean(v)) if v and len(v) == len(xs) else None


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0%}"


def app_why(base_rows: Sequence[Optional[Dict[str, Any]]], flac_rows: Sequence[Optional[Dict[str, Any]]], bound: float,
            base_label: str, what: str) -> Optional[Why]:
    """Why FlacFS's speedup over a baseline stays under the document's ``bound``, chosen by the
    measured I/O shares (means over seeds)."""
    cap = _mean([ceiling(r) for r in base_rows])
    b_share = _mean([io_share(r) for r in base_rows])
    f_share = _mean([io_share(r) for r in flac_rows])
    mapped = _mean([None if r is None else r.get("mapped_bytes") for r in flac_rows])
    copied = _mean([None if r is None else r.get("copied_bytes") for r in flac_rows])
    if cap is None or b_share is None:
        return None
    moved = f"FlacFS attached {human_bytes(mapped)}, copied {human_bytes(copied)}" if mapped is not None and copied is not None else ""
    shares = f"{base_label} {b_share:.0%} of its time in file-system calls, FlacFS {_pct(f_share)}"
    if cap < bound:
        return Why(f"even if its file-system calls took no time, {what} on the {base_label} would be at most {cap:.2f}x faster "
                   f"(the rest of its time stays), below the document's {bound}x",
                   f"{shares}; ceiling {cap:.2f}x; {moved}")
    if mapped is not None and copied is not None and mapped + copied and copied > mapped:
        return Why(f"the {base_label}'s calls are most of {what}'s time, but FlacFS copied most of what it moved (pieces under "
                   "the 64 KiB attach threshold, or unaligned), so its calls stay costly", f"{shares}; ceiling {cap:.2f}x; {moved}")
    f_io = _mean([None if r is None else io_seconds(r) for r in flac_rows])
    b_io = _mean([None if r is None else io_seconds(r) for r in base_rows])
    f_pm = _mean([None if r is None else r.get("pm_wait_s") for r in flac_rows])
    pm = "" if f_io is None or f_pm is None else f"; FlacFS {f_io:.3f} s in calls ({f_pm:.3f} s of modelled PM wait)"
    pm += "" if b_io is None else f", the {base_label} {b_io:.3f} s"
    if f_io and f_pm is not None and f_pm >= 0.5 * f_io:
        return Why(f"FlacFS attached most bytes, and most of its own call time is the modelled PM's cost of loading them (its "
                   f"cache starts cold, where the {base_label} pays the same model)", f"{shares}; ceiling {cap:.2f}x; {moved}{pm}")
    if f_io is not None and b_io and f_io >= 0.75 * b_io:
        return Why(f"FlacFS attached most bytes, but attaching the pages (mapping the frames, loading cold ones) cost "
                   f"{'more than' if f_io > b_io else 'nearly as much as'} the {base_label}'s copies: its calls took "
                   f"{f_io / b_io:.0%} of the {base_label}'s call time", f"{shares}; {moved}{pm}")
    return Why(f"the {base_label}'s calls are most of {what}'s time and FlacFS attached most bytes, yet FlacFS's own calls "
               "still take their share", f"{shares}; ceiling {cap:.2f}x; {moved}{pm}")


def _sizes(r: Dict[str, Any], key: str) -> str:
    h = r.get(key) or {}
    n = sum(h.values())
    return "-" if not n else " / ".join(f"{h.get(b, 0) / n:.0%}" for b in SIZE_BUCKETS)


def _mean_row(rows: List[Optional[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """One row of means over seeds (numbers), dictionaries of counts summed."""
    if not rows or any(r is None for r in rows):
        return None
    rs = [r for r in rows if r is not None]
    out: Dict[str, Any] = dict(rs[0])
    for k, v in rs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(np.mean([float(r.get(k) or 0) for r in rs]))
        elif isinstance(v, dict):
            out[k] = {b: sum(int(r.get(k, {}).get(b, 0)) for r in rs) for b in v}
    return out


def where_time_goes(per_seed: Sequence[Sequence[Dict[str, Any]]], programs: Sequence[Dict[str, Any]], engines: Sequence[str],
                    heading: str) -> List[str]:
    """The table of a step: per program and engine, the time (mean over seeds), the share inside
    file-system calls, bytes attached / copied, the read and write size mix and FlacFS's
    speedup over the engine with its ceiling."""
    lines = [heading, "",
             "| program | engine | s | in FS calls | kernel costs charged | modelled PM wait | attached / copied | reads "
             + "/".join(SIZE_BUCKETS) + " | writes (same buckets) | FlacFS speedup | ceiling |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in programs:
        name = p.pop("_name")
        f = _mean_row([next((r for r in rows if r["engine"] == "flac" and all(r.get(k) == v for k, v in p.items())), None)
                       for rows in per_seed])
        for e in engines:
            r = _mean_row([next((r for r in rows if r["engine"] == e and all(r.get(k) == v for k, v in p.items())), None)
                           for rows in per_seed])
            if r is None:
                continue
            share = io_share(r)
            io = io_seconds(r)
            kern = "-" if not r.get("charged_s") else f"{r['charged_s']:.3f} s"
            pmw = "-" if r.get("pm_wait_s") is None or e.startswith("ext4") else f"{r['pm_wait_s']:.3f} s"
            moved = "-" if r.get("mapped_bytes") is None else f"{human_bytes(r['mapped_bytes'])} / {human_bytes(r.get('copied_bytes'))}"
            speed = "-" if f is None or e == "flac" else f"{r['seconds'] / f['seconds']:.2f}x"
            cap = ceiling(r)
            src = " (wall - user)" if e.startswith("ext4") else ""
            lines.append(f"| {name} | {LABELS.get(e, e)} | {r['seconds']:.3f} | "
                         f"{'-' if io is None else f'{io:.3f} s{src} ({_pct(share)})'} | {kern} | {pmw} | {moved} | {_sizes(r, 'read_sizes')} | "
                         f"{_sizes(r, 'write_sizes')} | {speed} | {'-' if cap is None or e == 'flac' else f'{cap:.2f}x'} |")
        p["_name"] = name
    return lines


def kernel_cost_line(costs: Sequence[Dict[str, int]]) -> str:
    if not costs:
        return ""
    keys = list(costs[0])
    return ("Kernel per-call costs measured on this machine's tmpfs at the start of the step (ns; median of 21 batches of "
            "200 calls; per seed: " + "; ".join(", ".join(f"{k[:-3]} {c[k]}" for k in keys) for c in costs) + ").")


def attach_table(alts: Optional[Dict[str, Any]]) -> List[str]:
    """The per-attach cost of each attach path by size (the bench step, one run)."""
    if not alts:
        return []
    f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = ["## Attach paths a user-space FlacFS has (bench, one run; us per attach, median of 21)", "",
             "| size | mmap(MAP_FIXED), one call | + touch | one mmap per 4 KiB page | + touch | mremap DONTUNMAP | + touch | "
             "UFFDIO_MOVE | + touch | memcpy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in alts["rows"]:
        lines.append(f"| {r['bytes'] >> 10} KiB | {f(r['mmap_batch_us'])} | {f(r['mmap_batch_touch_us'])} | {f(r['mmap_per_page_us'])} | "
                     f"{f(r['mmap_per_page_touch_us'])} | {f(r['mremap_us'])} | {f(r['mremap_touch_us'])} | {f(r['uffd_move_us'])} | "
                     f"{f(r['uffd_move_touch_us'])} | {f(r['memcpy_us'])} |")
    lines += ["", f"Kernel {alts['kernel']}: " + ("UFFDIO_MOVE measured; it moves private anonymous pages only (the source loses "
              "them), so it cannot share a file's frames copy-on-write and is not a FlacFS attach path." if alts["uffd_move"] else
              f"UFFDIO_MOVE not measured ({alts['uffd_note']}).") + " mremap with MREMAP_DONTUNMAP moves the page-table "
              "entries of an existing mapping of the frames and keeps that mapping's type (shared, writable), so the buffer "
              "would write the file's frames: not a correct copy-on-write attach without a read-only alias of the frames. "
              "FlacFS attaches with mmap(MAP_FIXED), one call per contiguous run of frames. The frames here are a "
              "memfd's 4 KiB pages (a 2 MiB attach is 512 page-table entries); FLAC's huge-page frames attach 2 MiB as one "
              "entry (the attach table above).", ""]
    return lines
