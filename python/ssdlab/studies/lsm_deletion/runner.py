"""lsm-deletion's runner: one measured run of the LSM store on a ZNS device, a point of the sweep
engine. Input: {"device": a ZNS device config, plus the run keys of ``_native.lsm_defaults()``
(lsm, phases, seed, ops_per_s, delete_threshold_fraction, series_points, audit)}; output: the
run's summary as metrics.json and its time series as timeseries.csv."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from ... import _native
from ...config import merge, resolve
from ...runners import PROCESS_BYTES, Resources, Result, Runner, report_progress


def _resolve(user: Dict[str, Any]) -> Dict[str, Any]:
    user = dict(user)
    device = resolve(config=user.pop("device", {"preset": "zns-ssd"}), origin="[device]")
    defaults = _native.lsm_defaults()
    unknown = sorted(set(user) - set(defaults))
    if unknown:
        raise _native.ConfigError(f"lsm run: unknown key {unknown[0]!r}; valid: device, {', '.join(sorted(defaults))}")
    task = {"device": device, **merge(defaults, user)}
    _resources(task)  # checks the run as running it would
    return task


def _split(task: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    spec = dict(task)
    return spec.pop("device"), spec


def _resources(task: Dict[str, Any]) -> Resources:
    device, spec = _split(task)
    return Resources(int(_native.lsm_sizing(device, spec)) + PROCESS_BYTES)


def _run(task: Dict[str, Any]) -> Result:
    device, spec = _split(task)
    summary, series, _wall, interrupted = _native.lsm_run(device, spec, on_progress=report_progress)
    return Result(metrics=summary, files={"timeseries.csv": series}, interrupted=interrupted)


RUN = Runner("ssdlab.studies.lsm_deletion.runner:RUN", _resolve, _resources, _run)
