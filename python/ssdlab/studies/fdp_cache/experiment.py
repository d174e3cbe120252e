"""fdp-cache's points: experiments/fdp-cache/experiment.toml's mode expanded into cache runs
on the runner :data:`~ssdlab.studies.fdp_cache.runner.CACHE`.

Point sets of a mode (each a kvcache run with a 4% SOC unless said):

- the utilisation sweep (``utilizations``), FDP and non-FDP: Fig. 5 and Fig. 6 of the document;
  its runs at the document's two utilisations (50% and 100%, :data:`CLAIM_UTILIZATIONS`) run once
  per seed of the mode (``seeds``), every other point once, with the mode's first seed;
- the SOC-size sweep (``soc_fractions`` at ``soc_sweep_utilization``), FDP, against Theorem 1;
- the variants (``variants`` at ``variant_utilization``): other workload presets, FDP and not;
- the offered-load sweep (``load_rates`` at ``soc_sweep_utilization``), FDP and not;
- the spare sensitivity (``spare_sensitivity``): the same runs at other device spares, all else
  (the cache's key count and DRAM bytes included) as at the mode's spare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ... import _native
from ...config import merge, resolve
from ..base import Experiment, ExperimentPoint, seeded, seeds
from .api import mean_value_bytes
from .runner import CACHE

# The document's two utilisations (sections 6.2-6.3): their FDP and non-FDP runs carry the
# headline claims and run once per seed of the mode.
CLAIM_UTILIZATIONS = (0.5, 1.0)


def pct_name(x: float) -> str:
    """0.5 -> "50", 0.145 -> "14p5" (for point names)."""
    return f"{x * 100:g}".replace(".", "p")


def util_key(u: float, fdp: bool, soc: float = 0.04, workload: str = "kvcache") -> str:
    """A run's name before its seed: ``kvcache_u100_soc4_fdp``."""
    return f"{workload}_u{int(round(u * 100))}_soc{int(round(soc * 100))}_{'fdp' if fdp else 'nofdp'}"


def load_key(u: float, rate: float, fdp: bool) -> str:
    return f"{util_key(u, fdp)}_r{int(rate)}"


def spare_key(u: float, sf: float, fdp: bool) -> str:
    return f"{util_key(u, fdp)}_spare{pct_name(sf)}"


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
    first_seed = all_seeds[0]
    dev_common = merge(dict(spec.get("device", {})), {k: m[k] for k in ("geometry", "fdp") if k in m})
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

    def add(base: str, util: float, soc: float, fdp: bool, wl: str, dw: float, rate: float = 0, per_seed: bool = False,
            device_over: Optional[Dict[str, Any]] = None, extra: Optional[Dict[str, Any]] = None) -> None:
        if p.has(base):
            return
        w = _native.cache_workload(wl)
        mean_item = mean_value_bytes(w) + (w["key_bytes_min"] + w["key_bytes_max"]) / 2
        run_seeds: Sequence[int] = all_seeds if per_seed else [first_seed]
        for seed in run_seeds:
            wk = dict(w, keys=max(1000, int(working_set * util * logical / mean_item)), rate_rps=rate or m["rate_rps"],
                      seed=seed)
            cache = dict(c, utilization=util, soc_fraction=soc, dram_bytes=int(dram_fraction * util * logical), seed=seed)
            dev = merge(dev_common, {"seed": seed, "fdp": {"enabled": fdp}, **(device_over or {})})
            values = {"workload": wl, "utilization": util, "soc_fraction": soc, "fdp": fdp, "rate_rps": wk["rate_rps"],
                      "seed": seed, **(extra or {})}
            run = {"cache": cache, "workload": wk, "stop_device_writes": dw, "warmup_fraction": 0.5, "prefill_loc": True,
                   "series_points": 80, **stop}
            name = seeded(base, seed, all_seeds) if per_seed else base
            p.runs.append(Run(name, base, seed, dev, run, values))

    dw = m["device_writes"]
    for u in m["utilizations"]:
        for fdp in (True, False):
            add(util_key(u, fdp), u, 0.04, fdp, "kvcache", dw, per_seed=any(_same(u, x) for x in CLAIM_UTILIZATIONS))
    su = m["soc_sweep_utilization"]
    for s in m["soc_fractions"]:
        add(util_key(su, True, s), su, s, True, "kvcache", dw)
    vu = m["variant_utilization"]
    for wl in m["variants"]:
        for fdp in (True, False):
            add(util_key(vu, fdp, workload=wl), vu, 0.04, fdp, wl, m["variant_device_writes"])
    su_swept = any(_same(u, su) for u in m["utilizations"])
    for r in sorted(set(m.get("load_rates", [])) | ({m["rate_rps"]} if m.get("load_rates") else set())):
        # The base rate's runs come from the utilisation sweep when it has this utilisation.
        if r != m["rate_rps"] or not su_swept:
            for fdp in (True, False):
                add(load_key(su, r, fdp), su, 0.04, fdp, "kvcache", dw, r)
    sens = m.get("spare_sensitivity")
    if sens:
        su_sp = sens.get("utilization", 1.0)
        for sf in sens["spare_factors"]:
            for fdp in (True, False):
                add(spare_key(su_sp, sf, fdp), su_sp, 0.04, fdp, "kvcache", dw, device_over={"ftl": {"spare_factor": sf}},
                    extra={"spare_factor": sf})
    return p


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
