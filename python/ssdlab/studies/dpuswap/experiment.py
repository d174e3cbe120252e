"""dpuswap's points: experiments/dpuswap/experiment.toml expanded, each a run of the runner
:data:`~ssdlab.studies.dpuswap.runner.SWAP` (in-process paging, modelled time) or
:data:`~ssdlab.studies.dpuswap.runner.GUEST` (a guest kernel swapping over NBD, wall clock).

Point sets of a mode (names without the ``_s<seed>`` suffix a mode with several seeds adds):

- ``kv_<backend>_<pct>``, ``sort_<backend>_<pct>``: both workloads on every backend at every
  local-memory fraction (``local`` at 100%);
- ``kv_dpuswap_<pct>_<unit>``, ``fio_<rw>_dpuswap_<unit>``: DPUSwap with each other fetch unit
  of ``fetch_units`` (the first is the main design's; ``block`` is the ablation), every seed;
- ``kv_<backend>_<pct>_fault<us>us``: the host's per-fault swap-path cost swept
  (``fault_overheads_ns``) at the smallest fraction, every backend;
- ``kv_dpuswap_<pct>_cache<share>``: the DPU cache sweep (``cache_sweep``);
- ``kv_dpuswap_<pct>_<codec>``: other codecs at the smallest fraction (``codecs``);
- ``kv_dpuswap_<pct>_lz4at<speed>``: lz4 modelled at another speed each way (``codec_speeds``);
- ``<workload>_<backend>_<pct>_ra1``: swap readahead off (``readahead_off_fractions``);
- ``fio_<rw>_<backend>``: fio-style random reads and writes on the swap device;
- ``guest_<backend>_<pct>``: the guest set-up (``guest``).

The claims' point sets (``kv_<backend>_<pct>`` and ``fio_*``, with every fetch unit) run with
every seed of the mode;
the others make no claim and run with the mode's first seed only (to keep --quick short); the
guest runs once, with the experiment's ``seed`` (a boot and a fio run per backend and fraction).

Every random choice of a point comes from its seed: the workload's generator (key-value
requests and values, sort keys, fio offsets and buffers), the Infiniswap-like slab placement and
the ZNS device; the RMML and the paging runtime have none.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

from ... import _native
from ...config import merge
from ...units import parse_size
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .api import BACKENDS
from .runner import GUEST, SWAP

Plan = List[Tuple[str, Dict[str, Any], Dict[str, Any]]]


def specs(spec: Dict[str, Any], mode: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(common run-spec tables, the mode's table) of an experiment file."""
    m = spec[mode]
    common: Dict[str, Any] = {k: copy.deepcopy(spec.get(k, {})) for k in ("rmml", "paging", "infiniswap")}
    common["rmml"] = merge(common["rmml"], m.get("rmml", {}))
    z = copy.deepcopy(spec.get("znswap", {}))
    z["device"] = merge(z.get("device", {"preset": "zns-ssd"}), m.get("znswap_device", {}))
    z["device"]["seed"] = spec.get("seed", 42)
    common["znswap"] = z
    return common, m


def fractions(m: Dict[str, Any]) -> List[float]:
    """The mode's local-memory fractions, 100% among them."""
    fs = [float(f) for f in m["fractions"]]
    return fs if 1.0 in fs else [1.0, *fs]


def swapped(m: Dict[str, Any]) -> List[float]:
    """The fractions below 100%, largest first."""
    return sorted((f for f in fractions(m) if f < 1.0), reverse=True)


def pct_key(f: float) -> int:
    return int(round(f * 100))


def run_seeds(spec: Dict[str, Any], mode: str) -> List[int]:
    """The seeds every in-process point runs with."""
    return seeds(spec, mode)


def names(base: str, spec: Dict[str, Any], mode: str) -> List[str]:
    """The point names in-process run ``base`` may have, one per seed of the mode, in seed order
    (a set that runs with the first seed only has the first)."""
    all_seeds = run_seeds(spec, mode)
    return [seeded(base, s, all_seeds) for s in all_seeds]


def cache_bytes(ws: Dict[str, Any], wname: str, fraction: float, rmml: Dict[str, Any]) -> int:
    """DPU cache = ``fraction`` of the workload's working set, in whole blocks (at least one)."""
    d = _native.rmml_defaults()
    if wname == "kv":
        k = dict(d["kv"], **ws)
        region = k["records"] * k["record_bytes"]
    elif wname == "sort":
        region = dict(d["sort"], **ws)["elements"] * 8
    else:
        region = ws["span_bytes"]
    block = int(rmml.get("block_bytes", d["rmml"]["block_bytes"]))
    return int(max(1, int(region * fraction) // block) * block)


def fetch_units(m: Dict[str, Any]) -> List[str]:
    """The mode's fetch units, the main design's first (``page`` when the mode names none)."""
    units = [str(u) for u in m.get("fetch_units", ["page"])]
    bad = [u for u in units if u not in ("page", "block")]
    if bad or not units or len(set(units)) != len(units):
        raise ValueError(f"dpuswap: fetch_units = {units}: expected distinct values of \"page\" and \"block\"")
    return units


def fault_overheads(m: Dict[str, Any]) -> List[int]:
    """The host per-fault swap-path costs swept (ns), besides the paging table's own."""
    return [int(x) for x in m.get("fault_overheads_ns", [])]


def cache_sweep(m: Dict[str, Any]) -> List[float]:
    """The DPU cache sizes swept (shares of the working set), the mode's own one among them."""
    sweep = [float(x) for x in m.get("cache_sweep", [])]
    return sorted({*sweep, float(m["dpu_cache_fraction"])}) if sweep else []


def cache_run(f: float, cf: float, m: Dict[str, Any]) -> str:
    """The key-value DPUSwap run at local fraction ``f`` with a DPU cache of ``cf`` of the
    working set (the main run at the mode's own cache size)."""
    return f"kv_dpuswap_{pct_key(f)}" if cf == float(m["dpu_cache_fraction"]) else f"kv_dpuswap_{pct_key(f)}_cache{cf:g}"


def speed_run(f: float, speed: float) -> str:
    """The key-value DPUSwap run at ``f`` with lz4 modelled at ``speed`` bytes/s each way."""
    return f"kv_dpuswap_{pct_key(f)}_lz4at{speed / 1e9:g}GBps"


def _remote(spec: Dict[str, Any]) -> Dict[str, int]:
    nodes = spec.get("nodes", {})
    return {"count": int(nodes.get("count", 2)), "capacity_bytes": parse_size(str(nodes.get("capacity", "2G")), "nodes.capacity")}


def plan(spec: Dict[str, Any], mode: str) -> Plan:
    """Every in-process run of the mode, for every seed: (name, its values, the runner's input)."""
    common, m = specs(spec, mode)
    units = fetch_units(m)
    common["rmml"] = dict(common["rmml"], fetch_unit=units[0])
    fs = fractions(m)
    lo = min(fs)
    remote = _remote(spec)
    all_seeds = run_seeds(spec, mode)
    runs: Plan = []

    def add(name: str, seed: int, backend: str, workload: Dict[str, Any], fraction: float, cache: int,
            paging: Optional[Dict[str, Any]] = None, **rmml: Any) -> None:
        s = dict(copy.deepcopy(common), backend=backend, local_fraction=fraction, workload=copy.deepcopy(workload))
        # The seed reaches every random choice: the workload, Infiniswap's slab placement, the ZNS device.
        next(iter(s["workload"].values()))["seed"] = seed
        s["infiniswap"] = dict(s["infiniswap"], seed=seed)
        s["znswap"]["device"]["seed"] = seed
        s["rmml"] = dict(s["rmml"], cache_bytes=cache, **rmml)
        if paging:
            s["paging"] = dict(s["paging"], **paging)
        values = {"workload": next(iter(workload)), "backend": backend, "local_fraction": fraction, "dpu_cache_bytes": cache,
                  "codec": s["rmml"].get("codec", ""), "readahead_pages": s["paging"].get("readahead_pages", ""), "seed": seed,
                  "fetch_unit": s["rmml"]["fetch_unit"] if backend == "dpuswap" else ""}
        runs.append((seeded(name, seed, all_seeds), values, {"spec": s, "remote_nodes": remote}))

    workloads = {"kv": {"kv": dict(spec.get("kv", {}), **m.get("kv", {}))},
                 "sort": {"sort": dict(spec.get("sort", {}), **m.get("sort", {}))}}
    ra_off = [float(f) for f in m.get("readahead_off_fractions", [])]
    for seed in all_seeds:
        first = seed == all_seeds[0]  # the sets without claims run with the first seed only
        for wname, wl in workloads.items():
            if wname != "kv" and not first:
                continue
            cache = cache_bytes(wl[wname], wname, m["dpu_cache_fraction"], common["rmml"])
            for f in fs:
                for b in (["local"] if f >= 1.0 else BACKENDS):
                    add(f"{wname}_{b}_{pct_key(f)}", seed, b, wl, f, cache)
            if wname == "kv":
                for f in swapped(m):
                    for u in units[1:]:
                        add(f"kv_dpuswap_{pct_key(f)}_{u}", seed, "dpuswap", wl, f, cache, fetch_unit=u)
            if not first:
                continue
            for f in ra_off:
                for b in BACKENDS:
                    add(f"{wname}_{b}_{pct_key(f)}_ra1", seed, b, wl, f, cache, paging={"readahead_pages": 1})
            if wname != "kv":
                continue
            for ns in fault_overheads(m):
                for b in BACKENDS:
                    add(f"kv_{b}_{pct_key(lo)}_fault{ns / 1e3:g}us", seed, b, wl, lo, cache, paging={"fault_overhead_ns": ns})
            # What the result rests on: the DPU cache size (at every swapped fraction), the
            # codec and the codec's speed (at the smallest).
            for f in swapped(m):
                for cf in cache_sweep(m):
                    if cf != float(m["dpu_cache_fraction"]):
                        add(cache_run(f, cf, m), seed, "dpuswap", wl, f, cache_bytes(wl[wname], wname, cf, common["rmml"]))
            for codec in m.get("codecs", []):
                add(f"kv_dpuswap_{pct_key(lo)}_{codec}", seed, "dpuswap", wl, lo, cache, codec=codec)
            for speed in m.get("codec_speeds", []):
                add(speed_run(lo, float(speed)), seed, "dpuswap", wl, lo, cache, lz4_compress_bytes_per_s=float(speed),
                    lz4_decompress_bytes_per_s=float(speed))
        fio = dict(spec.get("fio", {}), **m.get("fio", {}))
        fio_cache = cache_bytes({"span_bytes": fio["span_bytes"]}, "fio", m["dpu_cache_fraction"], common["rmml"])
        for rw in ("randread", "randwrite"):
            for b in BACKENDS:
                add(f"fio_{rw}_{b}", seed, b, {"fio": dict(fio, rw=rw)}, 1.0, fio_cache)
            for u in units[1:]:
                add(f"fio_{rw}_dpuswap_{u}", seed, "dpuswap", {"fio": dict(fio, rw=rw)}, 1.0, fio_cache, fetch_unit=u)
    return runs


def guest_plan(spec: Dict[str, Any], mode: str) -> Plan:
    """The guest runs of the mode's ``guest`` table (none without one): every fraction, every
    backend below 100%; one seed, the experiment's ``seed`` (to keep --quick short)."""
    common, m = specs(spec, mode)
    gt = m.get("guest")
    if not gt:
        return []
    ws = parse_size(str(gt["working_set"]), "guest.working_set")
    kv = spec.get("kv", {})
    seed = int(spec.get("seed", 42))
    base = {"working_set_bytes": ws, "ops": int(gt["ops"]), "memory_bytes": parse_size(str(gt.get("memory", "512M")), "guest.memory"),
            "read_fraction": kv.get("read_fraction", 0.5), "zipf_theta": kv.get("zipf_theta", 0.99),
            "compressibility": kv.get("compressibility", 0.7), "seed": seed, "latency": gt.get("latency", "emulated")}
    block = common["rmml"].get("block_bytes", 1 << 20)
    cache = max(1, int(ws * m["dpu_cache_fraction"]) // block) * block
    units = fetch_units(m)
    runs: Plan = []
    for f in fractions(m):
        for b, unit in ([("local", "")] if f >= 1.0 else [(b, units[0]) for b in BACKENDS] + [("dpuswap", u) for u in units[1:]]):
            g = dict(base, backend=b, local_fraction=f, rmml=dict(common["rmml"], cache_bytes=cache, fetch_unit=unit or units[0]))
            if b == "znswap":
                g["znswap"] = common["znswap"]
            name = f"guest_{b}_{pct_key(f)}" + (f"_{unit}" if unit and unit != units[0] else "")
            runs.append((name, {"workload": "guest", "backend": b, "local_fraction": f, "dpu_cache_bytes": cache,
                                "codec": g["rmml"].get("codec", ""), "seed": seed, "fetch_unit": unit if b == "dpuswap" else ""},
                         {"guest": g, "remote_nodes": _remote(spec)}))
    return runs


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    return ([ExperimentPoint(name, values, SWAP.name, task) for name, values, task in plan(spec, mode)]
            + [ExperimentPoint(name, values, GUEST.name, task) for name, values, task in guest_plan(spec, mode)])


def describe(r: Dict[str, Any]) -> str:
    if r.get("kind") == "guest":
        return (f"guest {r['backend']} {r['local_fraction'] * 100:.0f}%: {r['throughput_iops']:.0f} IOPS, "
                f"{r['swap_ins']} swap-ins, {r['swap_outs']} swap-outs")
    w = r["workload"]
    p = r.get("paging", {})
    tail = f", {p['major_faults']} faults, fault p99 {p['fault_latency_ns'].get('p99', 0) / 1e3:.1f} us" if p.get("major_faults") else ""
    return f"{w['kind']} completion {w['completion_ns'] / 1e9:.3f} s (modelled){tail}"



EXPERIMENT = Experiment(
    points=points, report="ssdlab.studies.dpuswap.report:write_report", describe=describe,
    metrics=("workload.completion_ns", "workload.throughput_ops_per_s", "workload.bandwidth_bytes_per_s", "workload.latency.mean_ns",
             "workload.latency.p99_ns", "paging.major_faults", "paging.minor_faults", "paging.fault_latency_ns.p99", "paging.backend.cache_hit_ratio",
             "paging.backend.compression_ratio", "device.cache_hit_ratio", "wall_s"))
