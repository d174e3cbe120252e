"""fdp-cache's points: experiments/fdp-cache/experiment.toml's mode expanded into cache runs
on the runner :data:`~ssdlab.studies.fdp_cache.runner.CACHE`.

Point sets of a mode (each a kvcache run with a 4% SOC unless said; every run once per seed of
the mode, ``seeds``):

- the utilisation sweep (``utilizations``), FDP and non-FDP: Fig. 5 and Fig. 6 of the document;
- the curve's shape (``shape``): the non-FDP sweep at each of the device's spares
  (``spare_factors``), at each placement of GC writes (``gc_streams``, the FTL's
  ``ftl.gc_streams``) crossed with the spares of ``gc_spare_factors``, and at the mode's spare
  and GC with other workloads' SOC/LOC byte splits (``workloads``);
- the LOC's region eviction (``loc_eviction``): other policies at some utilisations, FDP and not;
- the SOC-size sweep (``soc_fractions`` at ``soc_sweep_utilization``), FDP, against Theorem 1;
- the variants (``variants`` at ``variant_utilization``): other workload presets, FDP and not;
- the offered-load sweep (``load_rates`` at ``soc_sweep_utilization``), FDP and not;
- the spare sensitivity (``spare_sensitivity``): the same runs at other device spares, FDP and
  not, all else (the cache's key count and DRAM bytes included) as at the mode's spare.

Runs are named by what differs from the mode's defaults (:func:`run_key`), so a point two sets
share (the shape's non-FDP run at another spare and the spare sensitivity's) runs once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ... import _native
from ...config import merge, resolve
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .api import mean_item_bytes
from .runner import CACHE

# The FTL's default placement of GC writes (`ftl.gc_streams`): host and GC writes apart.
GC_DEFAULT = "separate"


def pct_name(x: float) -> str:
    """0.5 -> "50", 0.145 -> "14p5" (for point names)."""
    return f"{x * 100:g}".replace(".", "p")


def util_key(u: float, fdp: bool, soc: float = 0.04, workload: str = "kvcache") -> str:
    """A run's name before its seed: ``kvcache_u100_soc4_fdp``."""
    return f"{workload}_u{int(round(u * 100))}_soc{int(round(soc * 100))}_{'fdp' if fdp else 'nofdp'}"


def load_key(u: float, rate: float, fdp: bool) -> str:
    return f"{util_key(u, fdp)}_r{int(rate)}"


def run_key(u: float, fdp: bool, soc: float = 0.04, workload: str = "kvcache", spare: Optional[float] = None,
            gc: Optional[str] = None, eviction: Optional[str] = None) -> str:
    """A run's name before its seed, by what differs from the mode's defaults (None: the
    default): ``kvcache_u70_soc4_nofdp_spare7_gc-by-age``."""
    k = util_key(u, fdp, soc, workload)
    if spare is not None:
        k += f"_spare{pct_name(spare)}"
    if gc is not None and gc != GC_DEFAULT:
        k += f"_gc-{gc}"
    if eviction is not None:
        k += f"_{eviction}"
    return k


def shape_combos(shape: Dict[str, Any], default_spare: float) -> List[Tuple[float, str]]:
    """The (spare, GC placement) combinations of the ``shape`` point set: every spare of
    ``spare_factors`` with the default GC placement, and every placement of ``gc_streams`` with
    every spare of ``gc_spare_factors`` (default: all of ``spare_factors``)."""
    spares = shape.get("spare_factors", [default_spare])
    out = [(sf, GC_DEFAULT) for sf in spares]
    for g in shape.get("gc_streams", [GC_DEFAULT]):
        for sf in shape.get("gc_spare_factors", spares):
            if (sf, g) not in out:
                out.append((sf, g))
    return out


def spare_key(u: float, sf: float, fdp: bool) -> str:
    return run_key(u, fdp, spare=sf)


@dataclass
class Run:
    """One point: ``base`` is its name without the seed; ``name`` the point's name."""

    name: str
    base: str
    seed: int
    device: Dict[str, Any]
    spec: Dict[str, Any]
    values: Dict[str, Any]


@dataclass
class Plan:
    """Every run of a mode, the device's size and the seeds."""

    info: Dict[str, Any]
    seeds: List[int]
    runs: List[Run] = field(default_factory=list)

    def names(self, base: str) -> List[str]:
        """The points of run ``base``, one per seed it runs with (in seed order)."""
        return [r.name for r in self.runs if r.base == base]

    def first(self, base: str) -> Optional[str]:
        """The point of run ``base`` with the first seed (None: no such run)."""
        names = self.names(base)
        return names[0] if names else None

    def has(self, base: str) -> bool:
        return any(r.base == base for r in self.runs)


def _same(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def plan(spec: Dict[str, Any], mode: str) -> Plan:
    """Every run of ``mode``: names, device configs, run specs, values."""
    m = spec[mode]
    all_seeds = seeds(spec, mode)
    dev_common = merge(dict(spec.get("device", {})), {k: m[k] for k in ("geometry", "fdp", "ftl") if k in m})
    cfg = resolve(config=dev_common)
    g = cfg["geometry"]
    raw = g["channels"] * g["dies_per_channel"] * g["planes_per_die"] * g["blocks_per_plane"] * g["pages_per_block"] * g["page_bytes"]
    logical = raw * (1 - cfg["ftl"]["spare_factor"])
    c = dict(spec.get("cache", {}), **m.get("cache", {}))
    dram_fraction = c.pop("dram_fraction", 0.045)
    working_set = c.pop("working_set", 2.0)
    c["region_bytes"] = m["region_bytes"]
    c["loc_write_bytes"] = m["loc_write_bytes"]

    # Stop once DLWA settles (the mode's `steady` table), the device writes capping the run.
    st = m.get("steady")
    stop = ({"stop": "steady", "steady_start_device_writes": st.get("start_device_writes", 1.0),
             "steady_window_device_writes": st["window_device_writes"], "steady_tolerance": st["tolerance"],
             "steady_windows": st["windows"]} if st else {})
    p = Plan({"raw_bytes": raw, "logical_bytes": logical, "spare_factor": cfg["ftl"]["spare_factor"],
              "device": dev_common}, all_seeds)

    def add(base: str, util: float, soc: float, fdp: bool, wl: str, dw: float, rate: float = 0,
            device_over: Optional[Dict[str, Any]] = None, cache_over: Optional[Dict[str, Any]] = None,
            extra: Optional[Dict[str, Any]] = None, workload_over: Optional[Dict[str, Any]] = None,
            run_over: Optional[Dict[str, Any]] = None) -> None:
        if p.has(base):
            return
        w = _native.cache_workload(wl)
        mean_item = mean_item_bytes(w)
        for seed in all_seeds:
            wk = dict(w, keys=max(1000, int(working_set * util * logical / mean_item)), rate_rps=rate or m["rate_rps"],
                      seed=seed, **(workload_over or {}))
            cache = dict(c, utilization=util, soc_fraction=soc, dram_bytes=int(dram_fraction * util * logical), seed=seed)
            cache.update(cache_over or {})
            dev = merge(dev_common, {"seed": seed, "fdp": {"enabled": fdp}, **(device_over or {})})
            values = {"workload": wl, "utilization": util, "soc_fraction": soc, "fdp": fdp, "rate_rps": wk["rate_rps"],
                      "seed": seed, **(extra or {})}
            run = {"cache": cache, "workload": wk, "stop_device_writes": dw, "warmup_fraction": 0.5, "prefill_loc": True,
                   "series_points": 80, **stop, **(run_over or {})}
            p.runs.append(Run(seeded(base, seed, all_seeds), base, seed, dev, run, values))

    def add_shaped(u: float, fdp: bool, wl: str = "kvcache", spare: Optional[float] = None, gc: Optional[str] = None,
                   eviction: Optional[str] = None, dw: Optional[float] = None) -> None:
        """A kvcache-like run (SOC 4%) at the mode's defaults but for the arguments given."""
        spare = None if spare is None or _same(spare, p.info["spare_factor"]) else spare
        gc = None if gc == GC_DEFAULT else gc
        eviction = None if eviction == c.get("region_eviction") else eviction
        ftl: Dict[str, Any] = {}
        if spare is not None:
            ftl["spare_factor"] = spare
        if gc is not None:
            ftl["gc_streams"] = gc
        extra: Dict[str, Any] = {"spare_factor": spare if spare is not None else p.info["spare_factor"],
                                 "gc_streams": gc or GC_DEFAULT, "region_eviction": eviction or c.get("region_eviction")}
        add(run_key(u, fdp, workload=wl, spare=spare, gc=gc, eviction=eviction), u, 0.04, fdp, wl,
            dw if dw is not None else m["device_writes"], device_over={"ftl": ftl} if ftl else None,
            cache_over={"region_eviction": eviction} if eviction else None, extra=extra)

    dw = m["device_writes"]
    for u in m["utilizations"]:
        for fdp in (True, False):
            add_shaped(u, fdp)
    shape = m.get("shape")
    if shape:
        for sf, g in shape_combos(shape, p.info["spare_factor"]):
            for u in m["utilizations"]:
                add_shaped(u, False, spare=sf, gc=g)
        for wl in shape.get("workloads", []):
            for u in m["utilizations"]:
                add_shaped(u, False, wl)
    ev = m.get("loc_eviction")
    if ev:
        for pol in ev["policies"]:
            for u in ev["utilizations"]:
                for fdp in (True, False):
                    add_shaped(u, fdp, eviction=pol)
    su = m["soc_sweep_utilization"]
    for s in m["soc_fractions"]:
        add(util_key(su, True, s), su, s, True, "kvcache", dw)
    vu = m["variant_utilization"]
    for wl in m["variants"]:
        for fdp in (True, False):
            add(util_key(vu, fdp, workload=wl), vu, 0.04, fdp, wl, m["variant_device_writes"])
    tw = m.get("twitter")
    if tw:
        for ttl in tw["ttl"]:
            for fdp in (True, False):
                t = twitter_scaled(tw, logical)
                add(twitter_key(tw, fdp, ttl), tw["utilization"], 0.04, fdp, "twitter-cluster12", m["variant_device_writes"],
                    t["rate_rps"], cache_over={"dram_bytes": t["dram_bytes"]},
                    workload_over={} if ttl == "kept" else {"ttl_s": 0},
                    # With the TTLs kept the flash writes may never reach the device-write cap.
                    run_over={"stop_requests": tw["max_requests"]} if ttl == "kept" else None,
                    extra={"ttl": ttl, "span_s": t["span_s"]})
    su_swept = any(_same(u, su) for u in m["utilizations"])
    for r in sorted(set(m.get("load_rates", [])) | ({m["rate_rps"]} if m.get("load_rates") else set())):
        # The base rate's runs come from the utilisation sweep when it has this utilisation.
        if r != m["rate_rps"] or not su_swept:
            for fdp in (True, False):
                add(load_key(su, r, fdp), su, 0.04, fdp, "kvcache", dw, r)
    sens = m.get("spare_sensitivity")
    if sens:
        for sf in sens["spare_factors"]:
            for fdp in (True, False):
                add_shaped(sens.get("utilization", 1.0), fdp, spare=sf)
    return p


def twitter_key(tw: Dict[str, Any], fdp: bool, ttl: str) -> str:
    return util_key(tw["utilization"], fdp, workload="twitter-cluster12") + "_scaled" + ("" if ttl == "kept" else "_nottl")


def twitter_scaled(tw: Dict[str, Any], logical: float) -> Dict[str, float]:
    """Twitter cluster12 scaled to this device (the experiment's ``twitter`` table): the flash
    cache holds the same span of the trace as the document's (§6.1: ~930 GB of flash, ~16 GB of
    DRAM), the trace's own time kept (TTL, re-access delays), so the request rate scales with
    the cache: rate = the trace's rate x this flash cache / the document's. Returns the rate,
    the DRAM tier's bytes and the span of the trace the flash cache holds (s)."""
    flash = tw["utilization"] * logical
    share = flash / tw["paper_flash_bytes"]
    w = _native.cache_workload("twitter-cluster12")
    item = mean_item_bytes(w)
    rate = tw["trace_rps"] * share
    return {"rate_rps": rate, "dram_bytes": int(tw["paper_dram_bytes"] * share),
            "span_s": flash / (rate * w["set_fraction"] * item)}


def load_base(spec: Dict[str, Any], mode: str, rate: float, fdp: bool) -> str:
    """The run measuring offered load ``rate`` at the SOC sweep's utilisation."""
    m = spec[mode]
    su = m["soc_sweep_utilization"]
    if rate == m["rate_rps"] and any(_same(u, su) for u in m["utilizations"]):
        return util_key(su, fdp)
    return load_key(su, rate, fdp)


def load_rates(spec: Dict[str, Any], mode: str) -> List[float]:
    m = spec[mode]
    return sorted(set(m.get("load_rates", [])) | ({m["rate_rps"]} if m.get("load_rates") else set()))


def points(spec: Dict[str, Any], mode: str) -> List[ExperimentPoint]:
    return [ExperimentPoint(r.name, r.values, CACHE.name, {"device": r.device, **r.spec}) for r in plan(spec, mode).runs]


def memory_table(mode: str = "full") -> List[str]:
    """Each point's memory as the scheduler estimates it before starting the point
    (``_native.cache_sizing``), in GiB: total, DRAM tier, SOC bucket index, LOC index, the
    device's maps. The docs page's figures come from ``print("\\n".join(memory_table("full")))``."""
    from ...config import merge as _merge
    from ..reproduce import load_spec

    lines = ["point  total  dram_tier  soc_index  loc_index  device (GiB)"]
    for r in plan(load_spec("fdp-cache"), mode).runs:
        z = _native.cache_sizing(r.device, _merge(_native.cache_defaults(), r.spec))
        lines.append(f"{r.name}  " + "  ".join(f"{b / 2**30:.1f}" for b in (
            z["memory_bytes"], z["dram_tier_bytes"], z["soc_index_bytes"], z["loc_index_bytes"], z["device"]["memory_bytes"])))
    return lines


def describe(m: Dict[str, Any]) -> str:
    st = m.get("steady")
    how = ("" if st is None else ", steady from {:.1f}".format(m["window_from_device_writes"]) if st["reached"]
           else ", not settled")
    return (f"DLWA {m['dlwa']:.3f} (whole run {m['dlwa_cumulative']:.3f}; {m['device_writes']:.1f} device writes{how}; "
            f"{m['requests'] / 1e6:.1f} M requests)")



EXPERIMENT = Experiment(
    points=points, report="ssdlab.studies.fdp_cache.report:write_report", describe=describe,
    metrics=("dlwa", "dlwa_cumulative", "steady.reached", "window_from_device_writes", "device_writes", "requests",
             "soc_dlwa", "loc_dlwa", "theorem1.dlwa_fifo", "alwa", "dram_hit_ratio", "nvm_hit_ratio",
             "latency_ns.read.p99", "latency_ns.write.p99", "throughput_rps_simulated"))
