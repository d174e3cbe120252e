"""dpuswap's claims: the document's numbers (seed 000, section 3), the runs per seed and
averaged (:class:`Runs`), the modelled parts of a DPUSwap miss, and every claim judged by
``ssdlab.studies.verdict`` with its explanation chosen by a measured quantity (:func:`judge_in_process`
for the in-process runs, :func:`judge_guest` for the guest runs)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...units import pct, ratio
from ..verdict import Claim, Verdicts, Why
from .api import BACKENDS, LABELS
from .experiment import fetch_units, names, run_seeds, swapped
from .experiment import pct_key as pc

SOURCE = "seed 000, §3"
OTHERS = ("infiniswap", "znswap")

# "增加/提升 X倍" is read as +X*100% throughout (X times more); the looser reading, X times as
# much, is stated beside each such claim. Why this reading: the document's own figures agree with
# it where two of them can be set side by side: at 50% local memory its -69.9% throughput is a
# completion time 3.3 times the local one (+232%; "增加2.1倍" read so is +210%, the looser reading
# only +110%), and DPUSwap's "提升1.1倍" throughput over ZNSwap at 50% matches its -52.1%
# completion time (1 / 0.479 = 2.09x, +109%) only as +110%.
READING = ("\"增加/提升 X倍\" (increased X times) is read as +X*100% (the value becomes 1+X times), the looser reading "
           "(X times the value) stated beside it: the document's own figures agree with the first where two can be set side "
           "by side (at 50% local memory its -69.9% throughput is a 3.3x completion time, against \"增加2.1倍\" = 3.1x; its "
           "\"提升1.1倍\" throughput over ZNSwap matches its -52.1% completion time, 2.09x, only as +110%).")


def _times(x: float) -> str:
    return f"\"{x:g}倍\" read as {x * 100:+.0f}% ({1 + x:g}x); the looser reading is {x:g}x ({(x - 1) * 100:+.0f}%)"


# The motivation: existing disaggregated-memory swap (the Infiniswap-like baseline) against
# everything local: (what, change, doc_text).
MOTIVATION: Dict[float, List[Tuple[str, float, str]]] = {
    0.75: [("throughput", -0.467, ""), ("completion time", 0.599, ""), ("mean latency", 0.566, ""),
           ("p99 latency", 3.6, _times(3.6))],
    0.5: [("throughput", -0.699, ""), ("completion time", 2.1, _times(2.1)), ("mean latency", 2.1, _times(2.1)),
          ("p99 latency", 6.5, _times(6.5))],
}
# DPUSwap's throughput gain over each baseline.
THROUGHPUT: Dict[float, Dict[str, Tuple[float, str]]] = {
    0.75: {"infiniswap": (0.26, ""), "znswap": (0.533, "")},
    0.5: {"infiniswap": (0.555, ""), "znswap": (1.1, _times(1.1))},
}
# DPUSwap's change of completion time, mean and p99 latency against each baseline.
REDUCTION: Dict[float, Dict[str, Tuple[float, float, float]]] = {
    0.75: {"infiniswap": (-0.10, -0.20, -0.334), "znswap": (-0.341, -0.319, -0.476)},
    0.5: {"infiniswap": (-0.331, -0.388, -0.318), "znswap": (-0.521, -0.514, -0.494)},
}
FIO: Dict[str, Dict[str, Tuple[float, str]]] = {
    "randread": {"znswap": (0.817, ""), "infiniswap": (0.179, "")},
    "randwrite": {"znswap": (1.28, _times(1.28)), "infiniswap": (0.204, "")},
}
LATENCY = ("completion", "mean", "p99")


# ---- the runs, per seed and averaged ----

def row(name: str, r: Dict[str, Any]) -> Dict[str, Any]:
    """One in-process run's figures (runs.csv's row)."""
    w = r["workload"]
    p = r.get("paging", {})
    b = p.get("backend", r.get("device", {}))
    lat = w.get("latency", {})
    # Faults that read their page from the device (a read-ahead page found in memory is a minor fault).
    fl = p.get("major_fault_latency_ns") or p.get("fault_latency_ns", {})
    fw = p.get("fault_latency_wall_ns", {})
    return {
        "run": name, "backend": r["backend"], "workload": w["kind"], "local_fraction": r.get("local_fraction", ""),
        "ops": w.get("ops", 0), "completion_s": w["completion_ns"] / 1e9, "fault_share": w.get("fault_ns", 0) / max(w["completion_ns"], 1),
        "throughput": w.get("throughput_ops_per_s") or w.get("throughput_elements_per_s") or w.get("bandwidth_bytes_per_s"),
        "latency_mean_us": lat.get("mean_ns", 0) / 1e3, "latency_p99_us": lat.get("p99_ns", 0) / 1e3,
        "faults": p.get("major_faults", 0), "minor_faults": p.get("minor_faults", 0),
        "read_ahead": p.get("readahead_pages", 0), "read_ahead_unused": p.get("readahead_unused", 0),
        "fault_mean_us": fl.get("mean", 0) / 1e3, "fault_p50_us": fl.get("p50", 0) / 1e3, "fault_p99_us": fl.get("p99", 0) / 1e3,
        "fault_wall_p50_us": fw.get("p50", 0) / 1e3, "fault_wall_p99_us": fw.get("p99", 0) / 1e3,
        "cache_hit_ratio": b.get("cache_hit_ratio", ""), "compression_ratio": b.get("compression_ratio", ""),
        "remote_bytes": b.get("remote_region_bytes", ""), "fetches": b.get("fetches", ""), "fetch_bytes": b.get("fetch_bytes", ""),
        "dpu_core_busy_ns": b.get("dpu_core_busy_ns", ""), "writes": b.get("writes", ""),
        "read_modify_writes": b.get("read_modify_writes", ""), "write_backs": b.get("write_backs", ""),
        "compactions": b.get("compactions", ""), "wall_s": r.get("wall_s", 0),
        "fetch_unit": b.get("fetch_unit", ""), "unit_bytes": b.get("unit_bytes", ""),
        "miss_p50_us": _us(b.get("miss_latency_ns"), "p50"), "miss_p99_us": _us(b.get("miss_latency_ns"), "p99"),
        "miss_wait_p50_us": _us(b.get("miss_queue_wait_ns"), "p50"), "miss_wait_p99_us": _us(b.get("miss_queue_wait_ns"), "p99"),
        "miss_wait_rdma_us": _per_miss(b, "miss_wait_rdma_ns"), "miss_wait_cores_us": _per_miss(b, "miss_wait_cores_ns"),
    }


def _per_miss(b: Dict[str, Any], key: str) -> Any:
    """A summed wait of a backend's misses, per miss in us ("" without misses)."""
    n = (b.get("miss_latency_ns") or {}).get("count")
    return b[key] / n / 1e3 if n and key in b else ""


def _us(h: Optional[Dict[str, Any]], q: str) -> Any:
    """A percentile of a backend's histogram in us ("" when the backend has none)."""
    return h[q] / 1e3 if h and h.get("count") else ""


def _mean(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    out = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and all(isinstance(r[k], (int, float)) for r in rows):
            out[k] = math.fsum(r[k] for r in rows) / len(rows)
    out["seeds"] = len(rows)
    return out


class Runs:
    """The in-process runs by name without the seed: ``seeds(base)`` per seed it ran with,
    ``mean(base)`` averaged over them, ``first(base)`` the first seed's (what the sets run with
    one seed are compared with)."""

    def __init__(self, spec: Dict[str, Any], mode: str, rows: Dict[str, Dict[str, Any]]):
        self.spec, self.mode, self.rows = spec, mode, rows
        self.first_seed = run_seeds(spec, mode)[0]

    def seeds(self, base: str) -> List[Dict[str, Any]]:
        got = [self.rows[n] for n in names(base, self.spec, self.mode) if n in self.rows]
        if not got:
            raise KeyError(f"no run {base!r}")
        return got

    def mean(self, base: str) -> Dict[str, Any]:
        return _mean(self.seeds(base))

    def first(self, base: str) -> Dict[str, Any]:
        return self.seeds(base)[0]

    def kv(self, b: str, f: float) -> Dict[str, Any]:
        return self.mean(f"kv_{b}_{pc(f)}")


def num(x: Any, fmt: str = ".3f") -> str:
    return f"{x:{fmt}}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def us(x: float) -> str:
    return f"{x:.1f} us" if x < 100 else f"{x:.0f} us"


# ---- what explains a DPUSwap miss: its modelled parts, from the run's counters and its config ----

def miss_parts(r: Dict[str, Any], rmml: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """The modelled cost of one DPU-cache miss without queueing (us): the request over PCIe, the
    RDMA fetch of the mean compressed record the run fetched, decompressing one unit (a page, or
    a whole block with ``fetch_unit = "block"``) at the codec's configured speed, the page back
    over PCIe. None without fetches. The run measures the rest: its misses' median and p99 on
    the DPU and the part of them spent queued (``miss_p50_us``, ``miss_wait_p50_us``...)."""
    if not isinstance(r.get("fetches"), (int, float)) or not r["fetches"]:
        return None
    unit = r["unit_bytes"] if isinstance(r.get("unit_bytes"), (int, float)) and r["unit_bytes"] else rmml["block_bytes"]
    rec = r["fetch_bytes"] / r["fetches"]
    pcie, rdma = rmml["pcie"], rmml["rdma"]
    dec_speed = rmml[f"{rmml['codec']}_decompress_bytes_per_s"]
    parts = {"request": (pcie["latency_ns"] + rmml["dpu_request_ns"]) / 1e3,
             "fetch": (rdma["latency_ns"] + rec / rdma["bytes_per_s"] * 1e9) / 1e3,
             "decompress": unit / dec_speed * 1e6,
             "reply": (pcie["latency_ns"] + 4096 / pcie["bytes_per_s"] * 1e9) / 1e3,
             "record_kib": rec / 1024}
    parts["total"] = parts["request"] + parts["fetch"] + parts["decompress"] + parts["reply"]
    return parts


def core_busy(r: Dict[str, Any], rmml: Dict[str, Any]) -> Optional[float]:
    """The share of the run's modelled time the DPU cores were busy (compressing write-backs and
    compactions, decompressing fetches)."""
    if not isinstance(r.get("dpu_core_busy_ns"), (int, float)):
        return None
    return r["dpu_core_busy_ns"] / (rmml["dpu_cores"] * r["completion_s"] * 1e9)


def _miss_text(dp: Dict[str, Any], rmml: Dict[str, Any]) -> Tuple[str, str]:
    """(sentence, measured) on what a DPUSwap miss costs and whether its median read fault is
    one unqueued miss or more."""
    m = miss_parts(dp, rmml)
    if m is None:
        return "", ""
    whole = "the whole block" if dp.get("fetch_unit") == "block" else "its unit"
    big = f"decompressing {whole}" if m["decompress"] >= m["fetch"] else "the RDMA fetch"
    share = max(m["decompress"], m["fetch"]) / m["total"]
    text = f"a miss costs {us(m['total'])} without queueing, " + (f"most of it {big}" if share > 0.5 else f"its largest part {big}")
    wait = dp.get("miss_wait_p50_us")
    if isinstance(wait, (int, float)) and isinstance(dp.get("miss_p50_us"), (int, float)):
        where = ("the RDMA lane (compactions' region reads and writes, write-backs)"
                 if dp.get("miss_wait_rdma_us", 0) >= dp.get("miss_wait_cores_us", 0) else "the DPU cores (write-backs' compression)")
        if wait > 0.25 * dp["miss_p50_us"] or dp.get("miss_wait_p99_us", 0) > 0.5 * dp.get("miss_p99_us", 0):
            text += (f"; misses queue for {where}: the median miss waits {us(wait)}, the p99 {us(dp['miss_wait_p99_us'])} "
                     f"of its {us(dp['miss_p99_us'])}")
        else:
            text += "; its misses seldom wait for the RDMA lane or the DPU cores"
    busy = core_busy(dp, rmml)
    measured = (f"miss = fetch {us(m['fetch'])} ({m['record_kib']:.1f} KiB record) + decompress {us(m['decompress'])} + PCIe "
                f"{us(m['request'] + m['reply'])}; measured miss on the DPU p50 / p99 {us(dp.get('miss_p50_us') or 0)} / "
                f"{us(dp.get('miss_p99_us') or 0)}, of which queued {us(dp.get('miss_wait_p50_us') or 0)} / "
                f"{us(dp.get('miss_wait_p99_us') or 0)} (mean per miss: RDMA lane {us(dp.get('miss_wait_rdma_us') or 0)}, DPU cores "
                f"{us(dp.get('miss_wait_cores_us') or 0)}); DPUSwap read fault p50 {us(dp['fault_p50_us'])}"
                + (f"; DPU cores busy {busy * 100:.0f}% of the run" if busy is not None else ""))
    return text, measured


# ---- the claims ----

def _why_motivation(i: Dict[str, Any], doc: float) -> Why:
    """The loss of remote swap against all-local is the share of the run spent in faults."""
    share = i["fault_share"]
    need = -doc  # a throughput loss of x needs faults to take x of the run (same computation)
    text = ("Infiniswap-like loses what its faults add to the run's computation; they take "
            + ("a smaller" if share < need else "a larger") + f" share of its run than the document's {doc * 100:+.1f}% implies")
    return Why(text, f"faults {share * 100:.1f}% of Infiniswap-like's modelled time ({i['faults']:.0f} read faults, mean "
                     f"{us(i['fault_mean_us'])}, over {i['ops']:.0f} operations); the document's loss needs {need * 100:.1f}%")


def _why_motivation_p99(i: Dict[str, Any], loc: Dict[str, Any]) -> Why:
    per_op = i["faults"] / max(i["ops"], 1)
    if per_op > 0.01:
        text = "More than 1% of the operations fault, so the p99 operation waits for a device read"
    else:
        text = "Under 1% of the operations fault, so the p99 operation is mostly computation"
    return Why(text, f"{per_op * 100:.1f}% of operations fault; Infiniswap-like read fault p99 {us(i['fault_p99_us'])}; "
                     f"all-local p99 {us(loc['latency_p99_us'])}")


def _why_vs(dp: Dict[str, Any], o: Dict[str, Any], b: str, rmml: Dict[str, Any], what: str = "mean") -> Why:
    """Why DPUSwap is ahead of or behind baseline ``b``: the faults are the same on every backend,
    so it is their cost (mean, or p99 for a tail claim)."""
    key = "fault_p99_us" if what == "p99" else "fault_mean_us"
    word = "tail (p99)" if what == "p99" else "mean"
    h = dp["cache_hit_ratio"]
    if dp[key] < o[key]:
        if isinstance(h, float) and h > 0.5:
            text = f"DPUSwap's {word} read fault is cheaper than {LABELS[b]}'s: most of its reads hit the DPU cache and cross PCIe only"
        else:
            text = f"DPUSwap's {word} read fault is cheaper than {LABELS[b]}'s"
        measured = f"read fault {word} {us(dp[key])} vs {us(o[key])}; DPU-cache hit ratio {num(h)}"
    else:
        miss, mmeas = _miss_text(dp, rmml)
        share = f"{(1 - h) * 100:.0f}% of its reads miss the DPU cache" if isinstance(h, float) else "its reads miss the DPU cache"
        text = (f"DPUSwap's {word} read fault costs more than {LABELS[b]}'s: {share}, and "
                + (miss or "a miss fetches the block over RDMA"))
        measured = f"read fault {word} {us(dp[key])} vs {us(o[key])}; DPU-cache hit ratio {num(h)}" + (f"; {mmeas}" if mmeas else "")
    return Why(text, measured)


def _why_gain_growth(runs: Runs, b: str, hi: float, lo: float, rmml: Dict[str, Any]) -> Why:
    d_hi, d_lo = runs.kv("dpuswap", hi), runs.kv("dpuswap", lo)
    o_hi, o_lo = runs.kv(b, hi), runs.kv(b, lo)
    grow_dp = d_lo["fault_mean_us"] / max(d_hi["fault_mean_us"], 1e-9)
    grow_o = o_lo["fault_mean_us"] / max(o_hi["fault_mean_us"], 1e-9)
    if grow_dp > grow_o:
        text = (f"With less local memory DPUSwap's reads miss its cache more often, so its mean read fault grows faster than "
                f"{LABELS[b]}'s")
    else:
        text = f"With less local memory DPUSwap's mean read fault grows no faster than {LABELS[b]}'s"
    return Why(text, f"DPU-cache hit ratio {num(d_hi['cache_hit_ratio'])} -> {num(d_lo['cache_hit_ratio'])}; mean read fault "
                     f"DPUSwap {us(d_hi['fault_mean_us'])} -> {us(d_lo['fault_mean_us'])} (x{grow_dp:.2f}), {LABELS[b]} "
                     f"{us(o_hi['fault_mean_us'])} -> {us(o_lo['fault_mean_us'])} (x{grow_o:.2f})")


def _why_fio(runs: Runs, dp_base: str, rw: str, b: str, rmml: Dict[str, Any], span: int) -> Why:
    dp, o = runs.mean(dp_base), runs.mean(f"fio_{rw}_{b}")
    lat = f"mean {us(dp['latency_mean_us'])} vs {us(o['latency_mean_us'])} for {LABELS[b]}"
    cache = rmml_cache_bytes(runs, dp_base)
    if dp["latency_mean_us"] < o["latency_mean_us"]:
        return Why(f"DPUSwap's 4 KiB {'reads' if rw == 'randread' else 'writes'} cost less on average than {LABELS[b]}'s",
                   f"{lat}; DPU-cache hit ratio {num(dp['cache_hit_ratio'])}")
    if rw == "randread":
        mp = miss_parts(dp, rmml)
        miss = (f"a miss costs {us(mp['total'])} without queueing (fetch {us(mp['fetch'])} of a {mp['record_kib']:.1f} KiB record, "
                f"decompress {us(mp['decompress'])}); measured miss on the DPU p50 / p99 {us(dp.get('miss_p50_us') or 0)} / "
                f"{us(dp.get('miss_p99_us') or 0)}") if mp else "no read fetched from remote memory"
        return Why(f"DPUSwap's 4 KiB reads cost more on average than {LABELS[b]}'s: the span is {span / cache:.0f}x the DPU cache, "
                   f"so {(1 - dp['cache_hit_ratio']) * 100:.0f}% of the uniform reads miss it",
                   f"{lat}; DPU-cache hit ratio {num(dp['cache_hit_ratio'])}; {miss}")
    rmw = dp["read_modify_writes"] / max(dp["writes"], 1)
    if rmw > 0.05:
        text = (f"DPUSwap's 4 KiB writes cost more on average than {LABELS[b]}'s: {rmw * 100:.0f}% of them found their unit "
                "outside the DPU cache with other live pages and read-modify-wrote it (fetch, decompress, merge)")
    else:
        text = (f"DPUSwap's 4 KiB writes cost more on average than {LABELS[b]}'s although few read-modify-write: each pays the "
                "DPU's request handling and its eviction's write-back (compression, RDMA) queues behind the others")
    return Why(text, f"{lat}; {dp['read_modify_writes']:.0f} read-modify-writes of {dp['writes']:.0f} writes; {dp['write_backs']:.0f} units "
                     f"compressed and written back, {dp['compactions']:.0f} group compactions")


def rmml_cache_bytes(runs: Runs, base: str) -> int:
    return int(runs.mean(base).get("dpu_cache_bytes") or 1)


def judge_in_process(runs: Runs, m: Dict[str, Any], rmml: Dict[str, Any], span: int, mode: str) -> Verdicts:
    """Every claim of the document against the in-process runs, per seed."""
    v = Verdicts("dpuswap", mode)
    swap = swapped(m)
    loc_s = runs.seeds("kv_local_100")
    for f in swap:
        if f not in MOTIVATION:
            continue
        i_s = runs.seeds(f"kv_infiniswap_{pc(f)}")
        i, loc = runs.kv("infiniswap", f), runs.kv("local", 1.0)
        why = _why_motivation(i, MOTIVATION[f][0][1])
        for what, doc, text in MOTIVATION[f]:
            key = {"throughput": "throughput", "completion time": "completion_s", "mean latency": "latency_mean_us",
                   "p99 latency": "latency_p99_us"}[what]
            samples = [ratio(x[key], y[key]) - 1 for x, y in zip(i_s, loc_s, strict=True)]
            v.add(Claim(f"Motivation, {pc(f)}% local: remote swap (Infiniswap-like) vs all local, {what}", doc, "change",
                        doc_text=text, source=SOURCE),
                  samples, why=_why_motivation_p99(i, loc) if what == "p99 latency" else why,
                  measured=f"{i[key]:.4g} vs {loc[key]:.4g}")
    for f in swap:
        if f not in THROUGHPUT:
            continue
        dp_s, dp = runs.seeds(f"kv_dpuswap_{pc(f)}"), runs.kv("dpuswap", f)
        for b in OTHERS:
            o_s, o = runs.seeds(f"kv_{b}_{pc(f)}"), runs.kv(b, f)
            doc, text = THROUGHPUT[f][b]
            v.add(Claim(f"Throughput, {pc(f)}% local: DPUSwap vs {LABELS[b]}", doc, "change", doc_text=text, source=SOURCE,
                        headline=(b == "infiniswap")),
                  [ratio(x["throughput"], y["throughput"]) - 1 for x, y in zip(dp_s, o_s, strict=True)],
                  why=_why_vs(dp, o, b, rmml), measured=f"{dp['throughput']:.0f} vs {o['throughput']:.0f} ops/s")
    for f in swap:
        if f not in REDUCTION:
            continue
        dp_s, dp = runs.seeds(f"kv_dpuswap_{pc(f)}"), runs.kv("dpuswap", f)
        for b in OTHERS:
            o_s, o = runs.seeds(f"kv_{b}_{pc(f)}"), runs.kv(b, f)
            for what, doc in zip(LATENCY, REDUCTION[f][b], strict=True):
                key = {"completion": "completion_s", "mean": "latency_mean_us", "p99": "latency_p99_us"}[what]
                unit = " s" if what == "completion" else " us"
                v.add(Claim(f"{'Completion time' if what == 'completion' else what.capitalize() + ' latency'}, {pc(f)}% local: "
                            f"DPUSwap vs {LABELS[b]}", doc, "change", source=SOURCE),
                      [ratio(x[key], y[key]) - 1 for x, y in zip(dp_s, o_s, strict=True)],
                      why=_why_vs(dp, o, b, rmml, "p99" if what == "p99" else "mean"),
                      measured=f"{dp[key]:.4g} vs {o[key]:.4g}{unit}")
    for rw, docs in FIO.items():
        for b, (doc, text) in docs.items():
            dp_s, o_s = runs.seeds(f"fio_{rw}_dpuswap"), runs.seeds(f"fio_{rw}_{b}")
            dp, o = runs.mean(f"fio_{rw}_dpuswap"), runs.mean(f"fio_{rw}_{b}")
            v.add(Claim(f"fio random {'read' if rw == 'randread' else 'write'} bandwidth: DPUSwap vs {LABELS[b]}", doc, "change",
                        doc_text=text, source=SOURCE, headline=(rw == "randread" and b == "infiniswap")),
                  [ratio(x["throughput"], y["throughput"]) - 1 for x, y in zip(dp_s, o_s, strict=True)],
                  why=_why_fio(runs, f"fio_{rw}_dpuswap", rw, b, rmml, span),
                  measured=f"{dp['throughput'] / 1e6:.1f} vs {o['throughput'] / 1e6:.1f} MB/s")
    # The other fetch units (the block ablation), every seed, on the throughput claims.
    for u in fetch_units(m)[1:]:
        for f in swap:
            if f not in THROUGHPUT:
                continue
            base = f"kv_dpuswap_{pc(f)}_{u}"
            dp_s, dp = runs.seeds(base), runs.mean(base)
            for b in OTHERS:
                o_s, o = runs.seeds(f"kv_{b}_{pc(f)}"), runs.kv(b, f)
                doc, text = THROUGHPUT[f][b]
                v.add(Claim(f"Throughput, {pc(f)}% local: DPUSwap ({u} fetch unit, ablation) vs {LABELS[b]}", doc, "change",
                            doc_text=text, source=SOURCE),
                      [ratio(x["throughput"], y["throughput"]) - 1 for x, y in zip(dp_s, o_s, strict=True)],
                      why=_why_vs(dp, o, b, rmml), measured=f"{dp['throughput']:.0f} vs {o['throughput']:.0f} ops/s")
        for rw, docs in FIO.items():
            base = f"fio_{rw}_dpuswap_{u}"
            for b, (doc, text) in docs.items():
                dp_s, o_s = runs.seeds(base), runs.seeds(f"fio_{rw}_{b}")
                dp, o = runs.mean(base), runs.mean(f"fio_{rw}_{b}")
                v.add(Claim(f"fio random {'read' if rw == 'randread' else 'write'} bandwidth: DPUSwap ({u} fetch unit, ablation) "
                            f"vs {LABELS[b]}", doc, "change", doc_text=text, source=SOURCE),
                      [ratio(x["throughput"], y["throughput"]) - 1 for x, y in zip(dp_s, o_s, strict=True)],
                      why=_why_fio(runs, base, rw, b, rmml, span),
                      measured=f"{dp['throughput'] / 1e6:.1f} vs {o['throughput'] / 1e6:.1f} MB/s")
    # Qualitative: the gains grow with less local memory; ZNSwap-like last.
    if len(swap) >= 2:
        hi, lo = swap[0], swap[-1]
        for b in OTHERS:
            g = {f: [ratio(x["throughput"], y["throughput"]) - 1 for x, y in
                     zip(runs.seeds(f"kv_dpuswap_{pc(f)}"), runs.seeds(f"kv_{b}_{pc(f)}"), strict=True)] for f in (hi, lo)}
            holds = all(a > c for a, c in zip(g[lo], g[hi], strict=True))
            mean = {f: math.fsum(g[f]) / len(g[f]) for f in g}
            v.add_qualitative(Claim(f"DPUSwap's throughput gain over {LABELS[b]} larger at {pc(lo)}% than at {pc(hi)}% local",
                                    None, "qualitative", doc_text=f"{THROUGHPUT[hi][b][0] * 100:+.1f}% -> {THROUGHPUT[lo][b][0] * 100:+.1f}%",
                                    source=SOURCE),
                              holds, f"{pct(mean[hi])} -> {pct(mean[lo])} (larger in {sum(a > c for a, c in zip(g[lo], g[hi], strict=True))} "
                                     f"of {len(g[lo])} seeds)",
                              why=_why_gain_growth(runs, b, hi, lo, rmml))
    for f in swap:
        t = {b: runs.kv(b, f)["throughput"] for b in BACKENDS}
        last = min(t, key=lambda b: t[b])
        fm = {b: runs.kv(b, f)["fault_mean_us"] for b in BACKENDS}
        nf = {b: runs.kv(b, f)["faults"] + runs.kv(b, f)["minor_faults"] for b in BACKENDS}
        dear = max(fm, key=lambda b: fm[b])
        same = max(nf.values()) - min(nf.values()) <= 0.01 * max(max(nf.values()), 1)
        v.add_qualitative(Claim(f"ZNSwap-like last in throughput at {pc(f)}% local", None, "qualitative",
                                doc_text="DPUSwap > Infiniswap > ZNSwap (its gains over ZNSwap are the larger)", source=SOURCE),
                          last == "znswap", ", ".join(f"{LABELS[b]} {t[b]:.0f}" for b in BACKENDS) + " ops/s",
                          why=Why(f"{LABELS[dear]} has the dearest read faults"
                                  + (", and every backend takes the same faults (within 1%)" if same else
                                     "; the backends take different numbers of faults"),
                                  "mean read fault " + ", ".join(f"{LABELS[b]} {us(fm[b])}" for b in BACKENDS)
                                  + "; faults " + ", ".join(f"{LABELS[b]} {nf[b]:.0f}" for b in BACKENDS)))
    return v


def judge_guest(guest: Dict[str, Dict[str, Any]], swap: List[float], mode: str, ops: int) -> Verdicts:
    """The document's numbers against the guest runs (one seed; None: the mode has none)."""
    v = Verdicts("dpuswap", mode)
    have = bool(guest)

    def g(b: str, f: float) -> Dict[str, Any]:
        return guest[f"guest_{b}_{pc(f)}"]

    def disk(r: Dict[str, Any]) -> str:
        lat = r["disk"]["latency_ns"].get("read", {})
        return f"disk read mean {us(lat.get('mean', 0) / 1e3)}, p99 {us(lat.get('p99', 0) / 1e3)}"

    keys = {"throughput": "throughput_iops", "mean latency": "clat_mean_ns", "p99 latency": "clat_p99_ns"}
    for f in swap:
        if f not in MOTIVATION:
            continue
        for what, doc, text in MOTIVATION[f]:
            if what not in keys:
                continue
            c = Claim(f"Guest, {pc(f)}% local: Infiniswap-like vs all local, {what}", doc, "change", doc_text=text, source=SOURCE)
            if not have:
                v.add(c, None)
                continue
            i, loc = g("infiniswap", f), g("local", 1.0)
            per_op = i["swap_ins"] / max(int(ops), 1)
            v.add(c, [ratio(i[keys[what]], loc[keys[what]]) - 1],
                  why=Why(("Many" if per_op > 0.1 else "Few") + " of the guest's operations swap in, each a disk read on top of the "
                          "kernel's swap path", f"{i['swap_ins']} swap-ins over {int(ops)} operations ({per_op:.2f} each); {disk(i)}"),
                  measured=f"{i[keys[what]]:.4g} vs {loc[keys[what]]:.4g}")
    for f in swap:
        if f not in THROUGHPUT:
            continue
        for b in OTHERS:
            doc, text = THROUGHPUT[f][b]
            c = Claim(f"Guest, throughput, {pc(f)}% local: DPUSwap vs {LABELS[b]}", doc, "change", doc_text=text, source=SOURCE)
            cs = [(Claim(f"Guest, {w} latency, {pc(f)}% local: DPUSwap vs {LABELS[b]}", d, "change", source=SOURCE), k)
                  for w, d, k in (("mean", REDUCTION[f][b][1], "clat_mean_ns"), ("p99", REDUCTION[f][b][2], "clat_p99_ns"))]
            if not have:
                v.add(c, None)
                for cl, _ in cs:
                    v.add(cl, None)
                continue
            dp, o = g("dpuswap", f), g(b, f)
            dl, ol = dp["disk"]["latency_ns"].get("read", {}), o["disk"]["latency_ns"].get("read", {})
            hit = dp["disk"]["device"].get("cache_hit_ratio")
            cheaper = dl.get("mean", 0) < ol.get("mean", 0)
            measured = (f"DPUSwap {disk(dp)} (DPU-cache hit ratio {num(hit)}), {dp['swap_ins']} swap-ins; {LABELS[b]} {disk(o)}, "
                        f"{o['swap_ins']} swap-ins")
            for cl, k, ahead in [(c, "throughput_iops", dp["throughput_iops"] > o["throughput_iops"]),
                                 *[(cl, k, dp[k] < o[k]) for cl, k in cs]]:
                if ahead == cheaper:
                    why = Why(f"DPUSwap's disk reads cost {'less' if cheaper else 'more'} on average than {LABELS[b]}'s (modelled; "
                              "the disk replies at that time)", measured)
                else:
                    why = Why(f"DPUSwap is {'ahead' if ahead else 'behind'} although its disk reads cost {'less' if cheaper else 'more'} "
                              f"on average than {LABELS[b]}'s: the difference is in the guest's wall-clock path (the kernel's swap "
                              "path, QEMU, NBD on loopback), which one seed does not separate from noise", measured)
                if k == "throughput_iops":
                    v.add(cl, [ratio(dp[k], o[k]) - 1], why=why, measured=f"{dp[k]:.0f} vs {o[k]:.0f} IOPS")
                else:
                    v.add(cl, [ratio(dp[k], o[k]) - 1], why=why, measured=f"{dp[k] / 1e3:.4g} vs {o[k] / 1e3:.4g} us")
    return v
