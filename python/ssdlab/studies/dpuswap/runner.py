"""dpuswap's runners, the points of the sweep engine:

- :data:`SWAP`: one in-process run (:func:`ssdlab.studies.dpuswap.api.run`) with its remote
  memory nodes as separate processes; input {"spec": a run spec, "remote_nodes": {"count",
  "capacity_bytes"}}, output the run's summary as metrics.json;
- :data:`GUEST`: one guest kernel swapping onto a backend over NBD
  (:func:`ssdlab.studies.dpuswap.api.guest_run`); input {"guest": ..., "remote_nodes": ...}.
"""

from __future__ import annotations

import copy
from typing import Any, Dict

from ... import _native
from ...config import merge
from ...runners import PROCESS_BYTES, Resources, Result, Runner
from .api import BACKENDS, Nodes, guest_run, run

SPEC_KEYS = ("backend", "local_fraction", "workload", "paging", "rmml", "infiniswap", "znswap", "nodes", "local_nodes", "local_node_bytes")


def _swap_resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    """The complete input of a run: every table filled from the defaults, the ZNS device
    resolved by the core; bad keys are refused here, before anything runs."""
    from ...config import resolve

    task = copy.deepcopy(dict(task))
    unknown = sorted(set(task) - {"spec", "remote_nodes"})
    if unknown or "spec" not in task:
        raise _native.ConfigError(f"dpuswap run: expected keys spec and remote_nodes, got {sorted(task)}")
    s = dict(task["spec"])
    bad = sorted(set(s) - set(SPEC_KEYS))
    if bad:
        raise _native.ConfigError(f"dpuswap spec: unknown key {bad[0]!r}; valid: {', '.join(SPEC_KEYS)}")
    if s.get("backend") not in (*BACKENDS, "local"):
        raise _native.ConfigError(f"dpuswap spec: backend = {s.get('backend')!r}: expected one of {', '.join((*BACKENDS, 'local'))}")
    d = _native.rmml_defaults()
    for t in ("rmml", "paging", "infiniswap"):
        s[t] = merge(d[t], s.get(t, {}))
    w = s.get("workload")
    if not isinstance(w, dict) or len(w) != 1 or next(iter(w)) not in ("kv", "sort", "fio"):
        raise _native.ConfigError("dpuswap spec: workload: expected one table of kv, sort or fio")
    kind = next(iter(w))
    s["workload"] = {kind: merge(d[kind], w[kind])}
    if "znswap" in s:
        z = dict(s["znswap"])
        z["device"] = resolve(config=z.get("device", {"preset": "zns-ssd"}), origin="znswap.device")
        z.setdefault("capacity_bytes", 0)
        s["znswap"] = z
    remote = dict(task.get("remote_nodes", {"count": 0, "capacity_bytes": 0}))
    return {"spec": s, "remote_nodes": {"count": int(remote.get("count", 0)), "capacity_bytes": int(remote.get("capacity_bytes", 0))}}


def working_set_bytes(s: Dict[str, Any]) -> int:
    """The working set of a resolved spec's workload."""
    kind, w = next(iter(s["workload"].items()))
    if kind == "kv":
        return int(w["records"] * w["record_bytes"])
    if kind == "sort":
        return int(w["elements"] * 8)
    return int(w["span_bytes"])


def _swap_resources(task: Dict[str, Any]) -> Resources:
    """The paged region (or the fio span's buffers), the DPU cache, what the remote nodes hold
    (the working set at most, before compression, with the regions' slack), the ZNS device's
    model, and the node processes themselves."""
    s = task["spec"]
    ws = working_set_bytes(s)
    mem = ws + s["rmml"]["cache_bytes"] + PROCESS_BYTES
    if s["backend"] in ("dpuswap", "infiniswap"):
        mem += int(ws * (1 + s["rmml"]["region_slack"])) + task["remote_nodes"]["count"] * PROCESS_BYTES
    if s["backend"] == "znswap" and "znswap" in s:
        z = _native.config_sizing(s["znswap"]["device"])
        mem += int(z["memory_bytes"] + z["data_bytes_max"])
    return Resources(memory_bytes=mem)


def _swap_run(task: Dict[str, Any]) -> Result:
    s = copy.deepcopy(task["spec"])
    r = task["remote_nodes"]
    if s["backend"] in ("dpuswap", "infiniswap") and r["count"] > 0 and not s.get("nodes"):
        with Nodes(r["count"], r["capacity_bytes"]) as nodes:
            s["nodes"] = nodes.addrs
            res = run(s)
        res["remote_nodes"] = {"count": r["count"], "process": True}
    else:
        res = run(s)
    return Result(metrics=res)


SWAP = Runner("ssdlab.studies.dpuswap.runner:SWAP", _swap_resolve, _swap_resources, _swap_run)


GUEST_KEYS = ("backend", "local_fraction", "working_set_bytes", "ops", "memory_bytes", "read_fraction", "zipf_theta",
              "compressibility", "seed", "rmml", "znswap", "disk_bytes", "latency")


def guest_resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    """A guest run's complete input (the RMML table filled from the defaults); bad keys are
    refused."""
    task = copy.deepcopy(dict(task))
    g = dict(task.get("guest", {}))
    bad = sorted(set(g) - set(GUEST_KEYS))
    if bad or set(task) - {"guest", "remote_nodes"}:
        raise _native.ConfigError(f"dpuswap guest run: unknown key {(bad or sorted(set(task) - {'guest', 'remote_nodes'}))[0]!r}; "
                                  f"valid: {', '.join(GUEST_KEYS)}")
    if g.get("backend") not in (*BACKENDS, "local"):
        raise _native.ConfigError(f"dpuswap guest run: backend = {g.get('backend')!r}")
    if not 0 < float(g.get("local_fraction", 0)) <= 1:
        raise _native.ConfigError(f"dpuswap guest run: local_fraction = {g.get('local_fraction')!r}: expected 0 < f <= 1")
    g["rmml"] = merge(_native.rmml_defaults()["rmml"], g.get("rmml", {}))
    return {"guest": g, "remote_nodes": task.get("remote_nodes", {"count": 0, "capacity_bytes": 0})}


def _guest_resources(task: Dict[str, Any]) -> Resources:
    """The guest's RAM (QEMU), the server with its DPU cache, the nodes holding the swapped
    working set, the ZNS model; two CPUs (QEMU's vCPU threads keep both busy)."""
    g = task["guest"]
    mem = g["memory_bytes"] + g["rmml"]["cache_bytes"] + 2 * g["working_set_bytes"] + 3 * PROCESS_BYTES
    if g["backend"] == "znswap":
        z = _native.config_sizing(g["znswap"]["device"]) if "znswap" in g else {"memory_bytes": 1 << 30, "data_bytes_max": 0}
        mem += int(z["memory_bytes"] + z["data_bytes_max"])
    return Resources(memory_bytes=mem, cpus=2)


def _guest_run(task: Dict[str, Any]) -> Result:
    g, r = task["guest"], task["remote_nodes"]
    if g["backend"] in ("dpuswap", "infiniswap") and r.get("count", 0) > 0:
        with Nodes(int(r["count"]), int(r["capacity_bytes"])) as nodes:
            res = guest_run(g, nodes.addrs)
    else:
        res = guest_run(g)
    return Result(metrics=res)


GUEST = Runner("ssdlab.studies.dpuswap.runner:GUEST", guest_resolve, _guest_resources, _guest_run)
