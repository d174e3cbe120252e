"""uio-kv from Python: a latency plan run in simulated time, the same put/get sweep in wall-clock
time through processes, a system of device processes, and a host attached to one of them.

- :func:`latency`: run a latency plan (:func:`defaults` lists its keys) and return its report;
- :func:`wall_latency`: the plan's put/get sweep through a UIO system and a traditional one of
  device processes (and host daemons), in wall-clock time;
- :class:`Devices`: N device processes (``ssdlab uio device``) on loopback, each with its NET
  port and the Unix socket its host attaches on;
- :data:`Host`: a host attached to a device process; :func:`console` runs put/get lines on one.

The Rust side (crates/uio) holds the device: its NVMe-style queue interface, DMA's records, the
UTL on open-channel flash, GME routing, and the UIO and traditional data paths between devices
with each leg's modelled cost. See docs/case-studies/uio-kv.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Dict, Iterable, List, Optional, Tuple

from ... import _native
from ...config import merge
from ...serving import address_in_use, free_port


def defaults() -> Dict[str, Any]:
    """Every key of a latency plan with its default."""
    return _native.uio_defaults()


def latency(plan: Dict[str, Any], progress: bool = False) -> Dict[str, Any]:
    """Run a latency plan: rows (timing, value size, op, locality, path -> mean/p50/p99 ns),
    fits (a, b per timing setting) and mixes (N devices: measured vs modelled ratio)."""
    return _native.uio_latency(merge(defaults(), plan), progress)


def pairs(rows: List[Dict[str, Any]], stat: str = "mean_ns") -> Dict[Tuple[str, bool], List[Tuple[int, float, float]]]:
    """(op, remote) -> [(value bytes, uio ns, traditional ns)] by value size (``stat`` of each
    row: "mean_ns" or "p50_ns")."""
    by: Dict[Tuple[str, bool], Dict[int, Dict[str, float]]] = {}
    for r in rows:
        by.setdefault((r["op"], r["remote"]), {}).setdefault(r["value_bytes"], {})[r["path"]] = r[stat]
    return {k: [(vb, d["uio"], d["traditional"]) for vb, d in sorted(v.items())] for k, v in by.items()}


class Devices:
    """``count`` UIO devices, each a separate ``ssdlab uio device`` process on loopback with its
    NET port and its host socket (``sockets[i]``) in ``dir`` (a temporary one by default); a
    context manager (stops them on exit). Their logs are ``dir/deviceI.log``.

    >>> with Devices(2) as d:
    ...     subprocess.run(["ssdlab", "uio", "kv-serve", "--attach", d.sockets[0], ...])
    """

    def __init__(self, count: int, device: str = "quick", dir: Optional[str] = None,
                 host: str = "127.0.0.1", traditional: bool = False, data: Optional[str] = None):
        """``data``: keep device I's flash in ``data/deviceI`` (``--data``): a device stopped or killed
        and started again (:meth:`start_one`) recovers what it acknowledged. ``traditional``: the baseline system: devices in traditional mode (hosts name remote
        keys' devices, local keys bypass GME) and a host daemon per device (``ssdlab uio
        host``, its address in ``daemons[i]``) to which the device relays its peers' requests,
        to be submitted back through the host's queues."""
        if count < 1:
            raise ValueError("devices: count must be at least 1")
        self.count, self.device, self.host, self.traditional = count, device, host, traditional
        self.data = None if data is None else Path(data)
        self._tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        if dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ssdlab-uio-")
            dir = self._tmp.name
        self.dir = Path(dir)
        self.net = [f"{host}:{free_port(host)}" for _ in range(count)]
        self.sockets = [str(self.dir / f"device{i}.sock") for i in range(count)]
        self.daemons = [f"{host}:{free_port(host)}" for _ in range(count)] if traditional else []
        self.procs: List[Optional[subprocess.Popen[str]]] = [None] * count
        self.daemon_procs: List[subprocess.Popen[str]] = []

    def start(self) -> "Devices":
        """Start every device (and host daemon). A port taken by another process between
        choosing it and binding it starts the whole system again on fresh ports (up to three
        times): every device is told its peers' addresses at start."""
        for attempt in range(3):
            try:
                for i in range(self.count):
                    self.start_one(i)
                for i, addr in enumerate(self.daemons):
                    self._start_daemon(i, addr)
                return self
            except OSError as e:
                if attempt == 2 or not address_in_use(e):
                    self.stop()
                    raise
                self._stop_processes()
                self.net = [f"{self.host}:{free_port(self.host)}" for _ in range(self.count)]
                self.daemons = [f"{self.host}:{free_port(self.host)}" for _ in self.daemons]
            except BaseException:
                self.stop()
                raise
        return self

    def start_one(self, i: int) -> None:
        """Start device ``i`` (again, after :meth:`stop_one` or :meth:`kill_one`: its flash starts empty,
        or with ``data`` as it was)."""
        cmd = [sys.executable, "-m", "ssdlab.cli", "uio", "device", "--id", str(i), "--net", ",".join(self.net),
               "--socket", self.sockets[i], "--device", self.device] + (["--relay", self.daemons[i]] if self.traditional else [])
        if self.data is not None:
            cmd += ["--data", str(self.data / f"device{i}")]
        with open(self.dir / f"device{i}.log", "a") as log:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
        self.procs[i] = p
        line = p.stdout.readline().strip() if p.stdout else ""
        if not line.startswith(f"uio device {i}:"):
            p.wait(timeout=10)
            raise OSError(f"uio device {i} did not start: {(self.dir / f'device{i}.log').read_text().strip() or 'no ready line'}")

    def _start_daemon(self, i: int, addr: str) -> None:
        cmd = [sys.executable, "-m", "ssdlab.cli", "uio", "host", "--attach", self.sockets[i], "--net", addr]
        with open(self.dir / f"host{i}.log", "a") as log:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
        self.daemon_procs.append(p)
        line = p.stdout.readline().strip() if p.stdout else ""
        if not line.startswith("uio host:"):
            p.wait(timeout=10)
            raise OSError(f"uio host {i} did not start: {(self.dir / f'host{i}.log').read_text().strip() or 'no ready line'}")

    def stop_one(self, i: int) -> Dict[str, Any]:
        """Stop device ``i`` (SIGTERM); returns its counters."""
        p = self.procs[i]
        self.procs[i] = None
        if p is None:
            return {}
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        lines = [x for x in (out or "").splitlines() if x.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    def kill_one(self, i: int) -> None:
        """Kill device ``i`` (SIGKILL: no shutdown of any kind)."""
        p = self.procs[i]
        self.procs[i] = None
        if p is not None:
            p.kill()
            p.communicate()

    def stop(self) -> List[Dict[str, Any]]:
        """Stop every process and remove the temporary directory; returns the devices' counters."""
        stats = self._stop_processes()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return stats

    def _stop_processes(self) -> List[Dict[str, Any]]:
        for p in self.daemon_procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        self.daemon_procs.clear()
        return [self.stop_one(i) for i in range(self.count)]

    def __enter__(self) -> "Devices":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


Host = _native.UioHost
"""A host attached to a device process (``Host(socket)``): ``put(key, value)``, ``get(key)``."""

CONSOLE_HELP = """commands: put KEY VALUE | get KEY | help | quit   (KEY and VALUE are words; VALUE may hold spaces)"""


def console(attach: str, lines: Iterable[str], out: IO[str] = sys.stdout) -> int:
    """Read commands from ``lines`` and run them on the device at ``attach`` as its host; prints
    each answer. Returns the number of failed commands."""
    h = Host(attach)
    failed = 0
    for raw in lines:
        parts = raw.strip().split(maxsplit=2)
        if not parts:
            continue
        cmd = parts[0].lower()
        try:
            if cmd in ("quit", "exit"):
                break
            if cmd == "help":
                print(CONSOLE_HELP, file=out)
            elif cmd == "put" and len(parts) == 3:
                h.put(parts[1].encode(), parts[2].encode())
                print("OK", file=out)
            elif cmd == "get" and len(parts) == 2:
                v = h.get(parts[1].encode())
                print("(nil)" if v is None else v.decode(errors="backslashreplace"), file=out)
            else:
                failed += 1
                print(f"error: {raw.strip()!r}: {CONSOLE_HELP}", file=out)
        except _native.DeviceError as e:
            failed += 1
            print(f"error: {e}", file=out)
        out.flush()
    return failed


def cores() -> int:
    """The cores this process may run on (what the wall-clock run's processes share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def wall_latency(plan: Dict[str, Any]) -> Dict[str, Any]:
    """Wall-clock latency through processes: a UIO system and a traditional one (devices in
    traditional mode with host daemons) of ``plan["devices"]`` devices each, started and
    stopped here. Besides the rows: ``sim_rows`` (the same commands' simulated latency as the
    devices accounted it, from their completions: hardware links, NAND timing off), ``fits`` (a
    and b from medians), ``cores`` (the cores the
    processes shared) and ``processes`` (how many ran: the measuring host, every device and
    every host daemon)."""
    p = _native.uio_resolve(merge(defaults(), plan))
    n = p["devices"]
    with Devices(n, device=p["device"]) as u, Devices(n, device=p["device"], traditional=True) as t:
        r = _native.uio_wall_latency(p, u.sockets[0], t.sockets[0])
        r["processes"] = 1 + len(u.procs) + len(t.procs) + len(t.daemon_procs)
    r["cores"] = cores()
    r["plan"] = p
    r["mixes"] = []
    r["clock"] = "wall"
    # a and b from medians, as the wall-clock section reads them.
    ratios = {remote: [ui / tr for (_, rem), pts in pairs(r["rows"], "p50_ns").items() if rem == remote for _, ui, tr in pts]
              for remote in (True, False)}
    r["fits"] = [[False, 1 - sum(ratios[True]) / len(ratios[True]), sum(ratios[False]) / len(ratios[False]) - 1]]
    return r
