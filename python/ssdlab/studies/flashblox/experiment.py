"""flashblox's points: the document's experiments on the open-channel device, every random
choice (device, tenants' generators, the MSR trace generator) from the point's seed.

- motivation: four fio-like jobs on 1, 2, 2, 3 dedicated channels vs soft-planes of 8
  channels with token buckets of those weights;
- KV isolation: 2 and 4 KV instances (YCSB mixes; the LevelDB-like store) on channel, die,
  soft-plane or no isolation, each at every thread count of a sweep (the report takes each
  configuration at its knee), with ablations (reads first with suspend; a strict limiter);
- search + batch: a Poisson 8 KiB reader beside a 1 MiB sequential batch job, channel
  isolated, not isolated, and soft-plane isolated with the batch job's weight swept down;
- lifetime: one channel hammered, no swaps / fixed rotation / adaptive swaps (both pairings) /
  the analysis's rotation every T* and 2 T* (deterministic: no random choice, so these run
  once whatever the mode's seeds), and tenants replaying seeded MSR-format traces;
- migration: a channel swap under a running KV, and on an idle device;
- layer_cost: the layer's simulator wall clock per sector against the raw device.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from ..base import Experiment, ExperimentPoint, seeded, seeds
from .api import WEEK_NS, WEEKS_PER_YEAR, device_config, swap_plan
from .runner import VSSD, trace_name

LEVELS = ("channel", "die", "soft-plane", "none")
KV_RECORD_BYTES = 16 + 24 + 1024  # header, key text, value (apps/kv.rs)

Run = Tuple[str, str, Dict[str, Any], Dict[str, Any]]  # (name, kind run|lifetime, device config, spec)


def disk_tenant(name: str, level: str, placement: Dict[str, Any], read_fraction: float, io_bytes: int, threads: int = 8,
                pattern: str = "uniform", weight: float = 0.0, rate_ops: float = 0.0, tput_level: int = 0,
                capacity: int = 1, disk_fraction: float = 0.75) -> Dict[str, Any]:
    return {"name": name, "level": level, "tput_level": tput_level, "capacity_bytes": int(capacity), "placement": placement,
            "weight": weight, "threads": threads, "rate_ops": rate_ops,
            "app": {"kind": "disk", "disk_fraction": disk_fraction,
                    "io": {"pattern": pattern, "read_fraction": read_fraction, "block_bytes": [io_bytes], "block_weights": [1.0]}}}


def kv_tenant(name: str, level: str, placement: Dict[str, Any], mix: str, k: Dict[str, Any], tput_level: int,
              threads: int, weight: float = 0.0) -> Dict[str, Any]:
    """A YCSB tenant; ``k``: records, age_writes, the store ("log" or "leveldb") and the
    LevelDB-like store's settings (``leveldb``)."""
    return {"name": name, "level": level, "tput_level": tput_level, "capacity_bytes": 1, "placement": placement, "weight": weight,
            "threads": threads, "age_writes": k["age_writes"],
            "app": {"kind": "ycsb", "store": k.get("store", "log"), "leveldb": k.get("leveldb", {}),
                    "ycsb": {"mix": mix, "records": k["records"]}}}


def kv_run_name(n: int, mix: str, level: str, threads: int, variant: str = "") -> str:
    """A KV isolation run: ``n`` instances of ``mix`` at ``level``, ``threads`` each, and the
    ablation it belongs to (``""``: the experiment's own device and limiter)."""
    return f"kv{n}_{mix}_{level}_t{threads}" + (f"_{variant}" if variant else "")


def kv_ablations(k: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The KV ablations (name -> what they change): reads given priority over queued programs
    and erases with program/erase suspend, and the software limiter strict (no lending)."""
    out: Dict[str, Dict[str, Any]] = {}
    if k.get("ablate_priority"):
        out["prio"] = {"timing": {"read_priority": True, "suspend": True}}
    if k.get("ablate_strict"):
        out["strict"] = {"limiter_borrow": False}
    return out


def capacity_per(dev: Dict[str, Any], level: str) -> int:
    """Bytes of one unit of `level` on `dev` (as the layer computes it: 1% reserve, 4 soft-planes)."""
    g = dev["geometry"]
    chunk = g["planes_per_die"] * g["pages_per_block"] * g["page_bytes"]
    chunks = g["blocks_per_plane"]
    ldie = chunks - max(1, math.ceil(chunks * 0.01))
    per = {"channel": ldie * g["dies_per_channel"], "die": ldie, "soft-plane": ldie // 4, "none": ldie // 4}[level]
    return int(per * chunk)


def kv_records(dev: Dict[str, Any], utilization: float) -> int:
    """Records of 1 KiB values filling `utilization` of a channel vSSD."""
    return int(utilization * capacity_per(dev, "channel") / KV_RECORD_BYTES)


def m_bytes_per_week(ldev: Dict[str, Any], lt: Dict[str, Any]) -> float:
    """M: the bytes a week at which a perfectly levelled device lasts ``ideal_years``."""
    g = ldev["geometry"]
    chunks = g["channels"] * g["dies_per_channel"] * g["blocks_per_plane"]
    chunk = g["planes_per_die"] * g["pages_per_block"] * g["page_bytes"]
    return float(chunks * lt["pe_limit"] * chunk / (lt["ideal_years"] * WEEKS_PER_YEAR))


def info(spec: Dict[str, Any], mode: str) -> Dict[str, Any]:
    """The mode's devices and the swap analysis its lifetime points use."""
    m = spec[mode]
    dev = device_config(m["device"], **m.get("device_overrides", {}))
    ldev = device_config(m["lifetime_device"], **({"geometry": m["lifetime_geometry"]} if "lifetime_geometry" in m else {}))
    ldev["media"]["pe_limit"] = m["lifetime"]["pe_limit"]
    lt = m["lifetime"]
    plan = swap_plan(dev["geometry"]["channels"], lt["ideal_years"], lt["a"], lt["d"])
    return {"device": dev, "lifetime_device": ldev, "plan": plan, "m_bytes_per_week": m_bytes_per_week(ldev, lt),
            "t_star_weeks": plan["period_days"] / 7}


def timed_runs(spec: Dict[str, Any], mode: str, seed: int) -> List[Run]:
    """The timed runs of one seed (unseeded names): motivation, KV isolation, search + batch,
    migration. The seed is the device's and the run's (each tenant's generator derives its own
    from it)."""
    m = spec[mode]
    dev = dict(info(spec, mode)["device"], seed=seed)
    base = {"warmup_ms": m["warmup_ms"], "duration_ms": m["duration_ms"], "seed": seed}
    runs: List[Run] = []
    # Motivation: 1, 2, 2, 3 channels vs shares of 8 channels.
    mo = m["motivation"]
    shares = [(1, 1.0), (2, 0.0), (2, 1.0), (3, 0.0)]
    hw, sw, c0 = [], [], 0
    chans8 = list(range(8))
    for i, (n, rf) in enumerate(shares):
        cap = n * capacity_per(dev, "channel")
        hw.append(disk_tenant(f"w{i + 1}", "channel", {"channels": list(range(c0, c0 + n))}, rf, mo["io_bytes"], mo["threads"],
                              capacity=cap, disk_fraction=mo["disk_fraction"]))
        sw.append(disk_tenant(f"w{i + 1}", "soft-plane", {"channels": chans8, "spread": True}, rf, mo["io_bytes"], mo["threads"],
                              weight=n / 8, capacity=n * 16 * capacity_per(dev, "soft-plane"), disk_fraction=mo["disk_fraction"]))
        c0 += n
    runs.append(("motivation_hardware", "run", dev, dict(base, tenants=hw)))
    runs.append(("motivation_software", "run", dev, dict(base, tenants=sw)))
    # KV isolation: 2 and 4 instances on 1 channel / 4 dies / 16 soft-planes each, at every
    # thread count of the sweep (the report takes each configuration at its knee); the
    # ablations on the first mix.
    k = dict(m["kv"], records=kv_records(dev, m["kv"]["utilization"]))

    def kv_run(n: int, mix: str, level: str, threads: int, variant: str = "", change: Optional[Dict[str, Any]] = None) -> Run:
        change = change or {}
        chans = list(range(n))
        ts = []
        for i in range(n):
            if level == "channel":
                ts.append(kv_tenant(f"kv{i}", level, {"channels": [i]}, mix, k, 0, threads))
            elif level == "die":
                ts.append(kv_tenant(f"kv{i}", level, {"channels": chans, "spread": True}, mix, k, 2, threads))
            else:
                ts.append(kv_tenant(f"kv{i}", level, {"channels": chans, "spread": True}, mix, k, 4, threads,
                                    weight=1.0 / n if level == "soft-plane" else 0.0))
        d = dict(dev, timing=dict(dev["timing"], **change["timing"])) if "timing" in change else dev
        sp = dict(base, tenants=ts, **{key: v for key, v in change.items() if key != "timing"})
        return (kv_run_name(n, mix, level, threads, variant), "run", d, sp)
    for n, mixes in ((2, k["mixes"]), (4, k["mixes_four"])):
        for mix in mixes:
            for level in LEVELS:
                runs += [kv_run(n, mix, level, th) for th in k["threads"]]
    for variant, change in kv_ablations(k).items():
        levels = ["soft-plane"] if variant == "strict" else LEVELS
        runs += [kv_run(2, k["mixes"][0], level, th, variant, change) for level in levels for th in k["threads"]]
    # Web search + MapReduce-like colocation.
    s = m["search"]
    half = dev["geometry"]["channels"] // 2
    allc = list(range(dev["geometry"]["channels"]))
    sp_cap = half * 16 * capacity_per(dev, "soft-plane")

    def pair(level: str, mr_weight: float = 0.0) -> List[Dict[str, Any]]:
        if level == "channel":
            return [disk_tenant("search", "channel", {"channels": allc[:half]}, 1.0, s["io_bytes"], rate_ops=s["rate_ops"],
                                capacity=half * capacity_per(dev, "channel")),
                    disk_tenant("mapreduce", "channel", {"channels": allc[half:]}, 0.5, s["mr_io_bytes"], s["mr_threads"],
                                pattern="sequential", capacity=half * capacity_per(dev, "channel"))]
        w = mr_weight if level == "soft-plane" else 0.0
        return [disk_tenant("search", level, {"channels": allc, "spread": True}, 1.0, s["io_bytes"], rate_ops=s["rate_ops"],
                            weight=(1 - w) if w else 0.0, capacity=sp_cap),
                disk_tenant("mapreduce", level, {"channels": allc, "spread": True}, 0.5, s["mr_io_bytes"], s["mr_threads"],
                            pattern="sequential", weight=w, capacity=sp_cap)]
    runs.append(("search_channel", "run", dev, dict(base, tenants=pair("channel"))))
    runs.append(("search_none", "run", dev, dict(base, tenants=pair("none"))))
    for w in s["mr_weights"]:
        # Hard caps: the batch job may not borrow the reader's unused share.
        runs.append((f"search_software_{w}", "run", dev, dict(base, tenants=pair("soft-plane", w), limiter_borrow=False)))
    # Migration: a channel swap under a running KV, and on an idle device.
    mg = m["migration"]
    kvm = dict(k, store="log", records=kv_records(dev, mg["utilization"]))
    mig_base = dict(base, duration_ms=mg["duration_ms"], series_ms=mg["series_ms"])
    tenants_mig = [kv_tenant("kv", "channel", {"channels": [0]}, "A", kvm, 0, mg["threads"]),
                   disk_tenant("reader", "channel", {"channels": [1]}, 1.0, 8192, rate_ops=1000, capacity=capacity_per(dev, "channel"))]
    runs.append(("migration_none", "run", dev, dict(mig_base, tenants=tenants_mig)))
    runs.append(("migration_swap", "run", dev, dict(mig_base, tenants=tenants_mig, swap={"at_ms": mg["at_ms"], "channels": [0, 5]})))
    idle = [dict(kv_tenant("kv", "channel", {"channels": [0]}, "C", kvm, 0, 1), rate_ops=1.0)]
    runs.append(("migration_idle", "run", dev, dict(mig_base, tenants=idle, swap={"at_ms": mg["at_ms"], "channels": [0, 5]})))
    return runs


def lifetime_runs(spec: Dict[str, Any], mode: str) -> List[Run]:
    """The lifetime studies of one hammered channel. They make no random choice (block-level
    writes at fixed rates on a device without bad blocks), so they run once, with the
    experiment's seed."""
    m = spec[mode]
    inf = info(spec, mode)
    ldev, plan = inf["lifetime_device"], inf["plan"]
    seed = int(spec.get("seed", 42))
    lt = m["lifetime"]
    tenants = [{"name": f"c{c}", "level": "channel", "placement": {"channels": [c]}, "write_share": 1.0 if c == 0 else 0.0,
                "fill": lt["fill"]} for c in range(ldev["geometry"]["channels"])]
    weeks = lt["ideal_years"] * WEEKS_PER_YEAR
    t_star = plan["period_days"] / 7
    runs: List[Run] = []

    def life(name: str, wear: Dict[str, Any], max_weeks: float = 1.5 * weeks, ideal_years: float = lt["ideal_years"]) -> None:
        runs.append((name, "lifetime", ldev, {"flashblox": {"wear": wear}, "tenants": tenants, "ideal_years": ideal_years,
                                              "max_weeks": max_weeks, "sample_weeks": 0.25, "seed": seed}))
    life("life_none", {"policy": "none"})
    for wk in lt["fixed_weeks"]:
        life(f"life_fixed_{wk}w", {"policy": "fixed", "pair": "max-rate-min-wear", "period_ns": int(wk * WEEK_NS)})
    g = int(inf["m_bytes_per_week"] * t_star)
    life("life_adaptive_doc", {"policy": "adaptive", "pair": "max-wear-min-rate", "threshold_bytes": g})
    life("life_adaptive_rot", {"policy": "adaptive", "pair": "max-rate-min-wear", "threshold_bytes": g})
    life("life_fixed_doc_tstar", {"policy": "fixed", "pair": "max-wear-min-rate", "period_ns": int(t_star * WEEK_NS)})
    # The analysis checked: rotation every T* (the period the formula asks for) and every 2 T*,
    # over the service life L, at half the write rate (so no block wears out within L and the
    # P/E limit does not cap the most-worn channel; the imbalance depends on rounds, not rate).
    for nm, per in (("life_rot_tstar", t_star), ("life_rot_2tstar", 2 * t_star)):
        life(nm, {"policy": "fixed", "pair": "max-rate-min-wear", "period_ns": int(per * WEEK_NS)}, max_weeks=weeks,
             ideal_years=2 * lt["ideal_years"])
    return runs


def trace_points(spec: Dict[str, Any], mode: str, seed: int, all_seeds: List[int]) -> List[ExperimentPoint]:
    """Trace-driven lifetime: tenants replaying MSR-format traces the worker writes from ``seed``."""
    m = spec[mode]
    inf = info(spec, mode)
    lt = m["lifetime"]
    ldev = dict(inf["lifetime_device"], seed=seed)
    gen = {"count": lt["trace_tenants"], "seed": seed, "disk_bytes": int(capacity_per(ldev, "channel") * 0.8)}
    # Scale trace time so the fastest tenant writes M / 8 a week (its trace: 0.7 x rate x 64 KiB a
    # second): its disk's cleaning multiplies that several times over.
    fastest = 0.7 * 20 * 2 ** (lt["trace_tenants"] - 1) * 65536
    weeks_per_s = fastest / (inf["m_bytes_per_week"] / 8)
    tt: List[Dict[str, Any]] = [{"name": f"trace{i}", "level": "channel", "placement": {"channels": [i]},
                                 "trace": {"path": trace_name(i), "format": "msr", "weeks_per_trace_second": weeks_per_s,
                                           "disk_fraction": 0.7}}
                                for i in range(lt["trace_tenants"])]
    tt += [{"name": f"c{c}", "level": "channel", "placement": {"channels": [c]}, "fill": lt["fill"]}
           for c in range(lt["trace_tenants"], ldev["geometry"]["channels"])]
    pts = []
    for name, wear in (("trace_none", {"policy": "none"}),
                       ("trace_adaptive", {"policy": "adaptive", "pair": "max-rate-min-wear",
                                           "threshold_bytes": int(inf["m_bytes_per_week"] * inf["t_star_weeks"])})):
        sp = {"flashblox": {"wear": wear}, "tenants": tt, "ideal_years": lt["ideal_years"], "max_weeks": lt["trace_weeks"],
              "sample_weeks": 1.0, "seed": seed}
        pts.append(ExperimentPoint(seeded(name, seed, all_seeds), {"run": name, "kind": "lifetime", "seed": seed}, VSSD.name,
                                   {"kind": "lifetime", "device": ldev, "spec": sp, "msr_traces": gen}))
    return pts


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    all_seeds = seeds(spec, mode)
    m = spec[mode]
    pts = []
    for seed in all_seeds:
        pts += [ExperimentPoint(seeded(name, seed, all_seeds), {"run": name, "kind": kind, "seed": seed}, VSSD.name,
                                {"kind": kind, "device": dev, "spec": sp})
                for name, kind, dev, sp in timed_runs(spec, mode, seed)]
    seed0 = int(spec.get("seed", 42))
    pts += [ExperimentPoint(name, {"run": name, "kind": kind, "seed": seed0}, VSSD.name, {"kind": kind, "device": dev, "spec": sp})
            for name, kind, dev, sp in lifetime_runs(spec, mode)]
    for seed in all_seeds:
        pts += trace_points(spec, mode, seed, all_seeds)
    # The layer's simulator cost (wall clock, so it varies with the machine's load), once per
    # seed: it makes no random choice, the seeds repeat the measurement (the seed, in the device
    # config, only makes the points distinct). A pass over the quick
    # device takes ~15 ms, so the best of 40 (about a second a side) is needed for a ratio that
    # holds within a point or two between runs (best of 5 moved by 8 points).
    for seed in all_seeds:
        pts.append(ExperimentPoint(seeded("layer_cost", seed, all_seeds), {"run": "layer_cost", "kind": "cost", "seed": seed},
                                   VSSD.name, {"kind": "cost", "device": dict(device_config(m["device"]), seed=seed),
                                               "rounds": 40}))
    return pts


def describe(m: Dict[str, Any]) -> str:
    if "ratio" in m:
        return f"layer cost {(m['ratio'] - 1) * 100:+.1f}%"
    if "summary" in m:
        s = m["summary"]
        bound = "" if s["dead"] else ">= "
        return f"{s['lifetime_weeks']:.1f} weeks ({bound}{s['lifetime_fraction'] * 100:.1f}% of ideal), {s['swaps']} swaps"
    return ", ".join(f"{t['name']} {t['ops_per_s']:.0f} ops/s" for t in m.get("tenants", []))



EXPERIMENT = Experiment(points=points, report="ssdlab.studies.flashblox.report:write_report", describe=describe,
                        metrics=("summary.lifetime_weeks", "summary.lifetime_fraction", "summary.swaps", "ratio"))
