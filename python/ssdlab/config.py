"""Configs for the CLI, the API, sweeps and experiments, merged and loaded in one place.

A config has three layers, later ones winning key by key: a preset (``preset = "tiny"``;
without one the core's default preset), a file or dict, then per-table overrides. This module
merges the layers and reads files; the core fills every key left out from the preset and
checks the result (ranges, relations, unknown keys, with file:line in errors), so defaults and
valid ranges live in the core alone::

    >>> cfg = resolve(preset="tiny", ftl={"gc_policy": "fifo"})
    >>> cfg["ftl"]["gc_policy"], cfg["geometry"]["channels"]
    ('fifo', 2)

``user_layer`` gives the merged layers before the core fills them (what a sweep varies: an axis
may change the preset underneath); ``resolve`` the complete config.
"""

from __future__ import annotations

import copy
import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from . import _native
from .args import read_text

PathLike = Union[str, "os.PathLike[str]"]
ConfigSource = Union[None, PathLike, Mapping[str, Any]]


@functools.cache
def _default_config() -> dict[str, Any]:
    return _native.config_resolve({})


def sections() -> tuple[str, ...]:
    """The config's tables (``geometry``, ``ftl``, ...), as the core defines them."""
    return tuple(k for k, v in _default_config().items() if isinstance(v, dict))


def top_keys() -> tuple[str, ...]:
    """Keys of a config outside its tables (``preset``, ``seed``, ``storage``, ...)."""
    return tuple(k for k, v in _default_config().items() if not isinstance(v, dict))


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``, tables merged key by key (neither argument is changed)."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def set_dotted(cfg: dict[str, Any], key: str, value: Any) -> None:
    """Set ``cfg["a"]["b"] = value`` for ``key = "a.b"`` (tables created as needed; a table
    value merges into a table already there)."""
    parts = key.split(".")
    cur = cfg
    for p in parts[:-1]:
        if not isinstance(cur.get(p), dict):
            cur[p] = {}  # a non-table in the way is replaced; the core then names the bad key
        cur = cur[p]
    last = parts[-1]
    if isinstance(value, Mapping) and isinstance(cur.get(last), Mapping):
        cur[last] = merge(cur[last], value)
    else:
        cur[last] = copy.deepcopy(value)


def read_toml(path: PathLike, what: str = "config file") -> dict[str, Any]:
    """A TOML file as a dict; a missing file or bad TOML is one clear error naming the file
    (and the line)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such {what}")
    text = read_text(p, f"a TOML {what}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _native.ConfigError(f"{p}: not valid TOML: {e}") from None


def load_file(path: PathLike) -> dict[str, Any]:
    """A config file's own keys (its user layer), checked by the core first so errors name the
    file, line and key."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such config file")
    text = read_text(p, "a TOML device config")
    _native.config_from_toml(text, str(p))
    return tomllib.loads(text)


def check_file(path: PathLike) -> dict[str, Any]:
    """Validate a config file; returns the complete config it gives."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such config file")
    return _native.config_from_toml(read_text(p, "a TOML device config"), str(p))


def user_layer(preset: str | None = None, config: ConfigSource = None, **overrides: Any) -> dict[str, Any]:
    """The merged layers before the core fills them: ``config`` (a file or dict), its preset
    replaced by ``preset`` when given, then ``overrides`` (whole tables merged key by key, or
    top-level keys such as ``seed=7``)."""
    if config is None:
        user: dict[str, Any] = {}
    elif isinstance(config, Mapping):
        user = copy.deepcopy(dict(config))
    else:
        user = load_file(config)
    if preset is not None:
        user["preset"] = preset
    tables, top = sections(), top_keys()
    for name, values in overrides.items():
        if name in tables:
            if not isinstance(values, Mapping):
                raise TypeError(f"config section {name!r} takes a dict of keys, got {type(values).__name__}")
            user = merge(user, {name: values})
        elif name in top:
            user[name] = values
        else:
            raise TypeError(f"unknown config section {name!r}; valid: {', '.join(top + tables)}")
    return user


def resolve(preset: str | None = None, config: ConfigSource = None, origin: str = "<config>",
            **overrides: Any) -> dict[str, Any]:
    """The complete, validated config of ``user_layer(preset, config, **overrides)``."""
    return _native.config_resolve(user_layer(preset, config, **overrides), origin)


def resolve_config(preset: str | None = None, config: ConfigSource = None, **overrides: Any) -> dict[str, Any]:
    """Build a complete, validated config: a preset, then a file or dict, then section overrides.

    >>> cfg = resolve_config("tiny", ftl={"gc_policy": "fifo"})
    >>> cfg["ftl"]["gc_policy"]
    'fifo'
    """
    return resolve(preset, config, **overrides)


def workload_defaults() -> dict[str, Any]:
    """The core's ``[workload]`` defaults: what every key an ``ssdlab.Workload`` leaves unset
    takes."""
    return _native.workload_defaults()


# How many rows `ssdlab run` samples its time series into by default: about SERIES_ROWS rows
# of ~100 bytes (well under 1 MB), finer with `--series-rows` or the [metrics] keys.
SERIES_ROWS = 2000


def planned_write_bytes(cfg: Mapping[str, Any], logical_bytes: int, estimate: bool = True) -> int:
    """The host bytes a run of a complete config ``cfg`` writes at most, from its stop_* volume
    limits; else (``estimate``) an upper estimate from its command limit and the largest write
    a command makes; 0 if not known."""
    w = cfg["workload"]
    limits = [int(w.get("stop_host_write_bytes") or 0), int(float(w.get("stop_device_writes") or 0.0) * logical_bytes)]
    planned = min((b for b in limits if b > 0), default=0)
    if planned == 0 and estimate and w.get("stop_ops"):
        parts = [merge(w, p) for p in w.get("mix") or []] or [w]
        per_op = max(max(p["block_bytes"]) * max(0.0, 1.0 - p["read_fraction"] - p["trim_fraction"]) for p in parts)
        planned = int(w["stop_ops"] * per_op)
    return planned


def series_intervals(cfg: Mapping[str, Any], rows: int = SERIES_ROWS) -> dict[str, int] | None:
    """The ``[metrics]`` sample intervals that give a run of ``cfg`` about ``rows`` time-series
    rows (at most that many, or twice with both a volume and a time limit): every 1/rows of its
    planned host writes, and of its simulated time when it stops on one. None when the run's
    length is not known beforehand (a read-only run stopped by commands): the core's defaults
    then apply. A function of the config alone, so runs stay byte-identical."""
    planned = planned_write_bytes(cfg, int(_native.config_sizing(dict(cfg))["logical_bytes"]))
    sim_ns = int(cfg["workload"].get("stop_sim_ns") or 0) if cfg["timing"]["enabled"] else 0
    if planned == 0 and sim_ns == 0:
        return None
    return {"series_interval_host_bytes": -(-planned // rows) if planned else 0,
            "series_interval_ns": -(-sim_ns // rows) if sim_ns else 0}
