"""The Ray backend: a Ray task per point, on a private Ray on this machine (``auto``) or on a
running cluster (an address)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..runners import Resources, available_memory_bytes, run_task, worker_env
from .spec import SweepError


def _is_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("auto", "localhost", "::1") or host.startswith("127.")


def _ray_token_available() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").is_file())


def local_ray_env(token: bool = True) -> Dict[str, str]:
    """Environment for a Ray that must talk to nothing but this machine (``--ray auto``, and
    what to give ``ray start`` for a cluster on 127.0.0.1; the tests use it).

    - No usage statistics; and the "usage disabled" notice a `ray start` cluster still sends
      goes to a closed loopback port.
    - RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray's single-node mode. Otherwise, on Linux, Ray
      replaces 127.0.0.1 by the machine's routable address.
    - Ray's head process probes cloud metadata servers (169.254.169.254 and a DNS name) even
      with usage statistics off; its HTTP goes through a proxy on a closed loopback port
      instead. Ray's own gRPC ignores proxies, and loopback is exempt anyway.
    - Token authentication, as Ray chooses by default for a new cluster, but said explicitly
      (no warning; and needed to join a cluster by address).
    """
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens, connections are refused
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": dead + "/",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[k] = dead
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost,::1"
    if token:
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "token")
    return env


class _RayBackend:
    """Ray tasks: ``auto`` starts a local Ray; an address joins a running cluster.

    Usage statistics are always off and no dashboard is started. A local Ray (``auto``, or an
    address on 127.0.0.0/8) talks only on the loopback interface (see ``local_ray_env``)."""

    name = "ray"

    def __init__(self, address: str, jobs: Optional[int]):
        import logging

        self._loopback = _is_loopback(address)
        if self._loopback:
            env = local_ray_env(token=address == "auto" or _ray_token_available())
        else:
            env = {"RAY_USAGE_STATS_ENABLED": "0"}
        # Set for this process and the Ray processes it starts; restored by close().
        self._env_saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            import ray
            import ray._private.ray_constants as ray_constants
        except ImportError:
            self._restore_env()
            raise SweepError("the Ray backend needs Ray: pip install 'ssdlab[ray]'") from None
        self._ray = ray
        # Read once at import: set it too in case Ray was imported before this point.
        self._cluster_flag = ray_constants.ENABLE_RAY_CLUSTER
        if self._loopback:
            ray_constants.ENABLE_RAY_CLUSTER = False
        # The workers' environment (runners.WORKER_ENV: one BLAS thread per point).
        common: Dict[str, Any] = dict(logging_level=logging.WARNING, log_to_driver=False,
                                      runtime_env={"env_vars": worker_env()})
        # A local Ray keeps its sessions (logs, sockets, spilled objects) in a directory of its
        # own that close() removes; by default they would pile up in $TMPDIR/ray.
        self._temp_dir: Optional[str] = None
        try:
            if address == "auto":
                import tempfile

                self._temp_dir = tempfile.mkdtemp(prefix="ssdlab-ray-")  # short: socket paths fit 107 bytes
                # The point's estimates are its memory resources: offer Ray what is available
                # (its default keeps 30% for an object store that points do not use).
                avail = available_memory_bytes()
                mem: Dict[str, Any] = dict(_memory=int(avail * 0.95), object_store_memory=256 << 20) if avail else {}
                ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
                         num_cpus=jobs or os.cpu_count(), _temp_dir=self._temp_dir, **mem, **common)
            else:
                extra: Dict[str, Any] = {"_node_ip_address": "127.0.0.1"} if self._loopback else {}
                ray.init(address=address, **common, **extra)
        except (ConnectionError, ValueError, RuntimeError) as e:
            self.close()
            raise SweepError(f"cannot {'start a local Ray' if address == 'auto' else 'join the Ray cluster at ' + address}: "
                             f"{e}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = max(1, cpus)
        # What the largest node offers: a point needing more could never be scheduled.
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        self.node_memory_bytes = int(max((n.get("memory", 0) for n in nodes), default=0)) or None
        self.node_cpus = int(max((n.get("CPU", 0) for n in nodes), default=0)) or self.capacity
        # No retries: a point whose worker dies is recorded as failed, as with the local pool.
        # A fresh worker per point: its memory is returned and its peak is the point's own.
        self._task = ray.remote(num_cpus=1, max_retries=0, max_calls=1)(run_task)

    def _restore_env(self) -> None:
        for k, v in self._env_saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def submit(self, runner: str, task_json: str, res: Resources, checkpoint: Optional[Tuple[str, float]] = None):
        # No checkpoints on Ray: a task may run on any node, and its save would stay on that one.
        return self._task.options(num_cpus=res.cpus, memory=res.memory_bytes).remote(runner, task_json)

    def wait(self, handles: List[Any], timeout: float) -> List[Tuple[Any, Dict[str, Any]]]:
        ray = self._ray
        ready, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out = []
        for ref in ready:
            try:
                out.append((ref, ray.get(ref)))
            except ray.exceptions.RayError as e:
                out.append((ref, {"error": f"{type(e).__name__}: {e}"}))
        return out

    def abort(self, handles: List[Any]) -> None:
        for ref in handles:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # already finished or its worker is gone
                pass
        self.close()

    def close(self) -> None:
        if self._ray.is_initialized():
            self._ray.shutdown()
        import ray._private.ray_constants as ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = self._cluster_flag
        self._restore_env()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
