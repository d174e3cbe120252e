"""The local backend: a process per point on this machine, forked from a fork server that
imported the whole package first; each worker leads a process group of its own, which
whatever its point starts joins, so stopping a worker stops all of it."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pkgutil
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .. import runners as _runners
from ..runners import DEVICE, Resources, get_runner, run_task, worker_env


def run_point(config_json: str) -> Dict[str, Any]:
    """Simulate one device config (precondition + its configured workload) in this process;
    returns the measurements or the error, never raises for a failing point."""
    return run_task(DEVICE.name, config_json)


# How often a worker tells the parent how far its point is.
PROGRESS_SEND_S = 5.0


def _worker_main(runner: str, task_json: str, conn: Any, checkpoint: Optional[Tuple[str, float]] = None) -> None:
    # The parent owns Ctrl-C: it stops the workers itself and keeps finished points.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A process group of its own, which the processes the point starts (remote memory nodes,
    # servers, QEMU) join: whatever stops this worker stops them too (`_after_worker`).
    os.setpgid(0, 0)

    # Stopped by the pool (SIGTERM): unwind, so the point's `with` blocks stop what it started
    # and remove its temporary files (a core run sees it at its next progress check; the pool
    # kills a worker that has not gone within 10 s, and `_after_worker` tidies after it then).
    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    sent = [float("-inf")]  # the first report goes at once

    def progress(fraction: float) -> None:
        if time.monotonic() - sent[0] >= PROGRESS_SEND_S:
            sent[0] = time.monotonic()
            with contextlib.suppress(OSError):
                conn.send({"progress": float(fraction)})

    _runners._progress_sink = progress
    _runners._checkpoint = checkpoint
    result = run_task(runner, task_json)
    try:
        conn.send(result)
        conn.close()
    except OSError:
        pass  # the parent stopped listening (interrupted): nobody waits for this point


def _exit_text(code: Optional[int]) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def _package_modules() -> List[str]:
    """Every module of the ssdlab package, for the fork server to import before it forks any
    worker: the points of a sweep then all run the code it started with, even when the
    installed files change under a run of hours (an upgrade, or a checkout in an editable
    install; a worker importing a runner's module afresh would mix old and new code)."""
    import ssdlab

    return ["ssdlab._native"] + [m.name for m in pkgutil.walk_packages(ssdlab.__path__, "ssdlab.")
                                 if not m.name.rpartition(".")[2].startswith("_")]


@contextlib.contextmanager
def _worker_environment() -> Iterator[None]:
    """This process's environment with the workers' additions (runners.WORKER_ENV) while a
    process that workers inherit it from starts: the fork server (its preload imports numpy, so
    the setting must be there before) or, without one, a spawned worker."""
    extra = worker_env()
    os.environ.update(extra)
    try:
        yield
    finally:
        for k in extra:
            os.environ.pop(k, None)


def _start_forkserver_deaf_to_ctrl_c() -> None:
    """Start the fork server with SIGINT ignored: an ignored signal stays ignored across exec,
    and workers forked from the server keep its disposition, so a Ctrl-C that reaches the whole
    process group cannot interrupt a worker that is still starting (the parent owns Ctrl-C: it
    stops the workers itself). A Ctrl-C in the few milliseconds the server takes to start is
    lost; one already running (started by an earlier sweep in this process) is kept as it is."""
    if threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import forkserver

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _worker_environment():
            forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _end_group(pgid: int, grace_s: float = 5.0) -> None:
    """Stop what is left of a worker's process group (the worker is its leader, `pgid` its
    pid): SIGTERM, then SIGKILL for anything still there after `grace_s`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return  # nothing left
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _after_worker(pid: Optional[int], runner: str) -> None:
    """After a worker died or was stopped mid-point: stop what is left of its process group
    (`pid`: the worker's, None if it never started), then run its runner's tidying, if it has
    any (a failure there must not hide the point's own outcome)."""
    if pid is not None:
        _end_group(pid)
    try:
        reap = get_runner(runner).reap
        if reap is not None:
            reap()
    except Exception as e:
        print(f"ssdlab: tidying after {runner} failed: {e}", file=sys.stderr)


class _LocalBackend:
    """A process per point (forkserver, so no worker inherits the parent's threads; each
    point's peak memory is its own process's, and a worker that dies takes only its point)."""

    name = "local"

    def __init__(self, jobs: int):
        methods = multiprocessing.get_all_start_methods()
        self._ctx: ForkServerContext | SpawnContext = (
            multiprocessing.get_context("forkserver") if "forkserver" in methods else multiprocessing.get_context("spawn"))
        if "forkserver" in methods:
            self._ctx.set_forkserver_preload(_package_modules())
            _start_forkserver_deaf_to_ctrl_c()
        self.capacity = jobs
        self._procs: Dict[Connection, Tuple[BaseProcess, str]] = {}  # the result pipe's end -> (process, runner)
        self.progress: Dict[Connection, float] = {}  # the result pipe's end -> fraction its point reported
        self.first_progress: Dict[Connection, float] = {}  # ... and the first it reported (a resumed point's start)

    def submit(self, runner: str, task_json: str, res: Resources, checkpoint: Optional[Tuple[str, float]] = None) -> Connection:
        recv, send = self._ctx.Pipe(duplex=False)
        p = self._ctx.Process(target=_worker_main, args=(runner, task_json, send, checkpoint), daemon=True)
        with _worker_environment():  # a fork server not yet running starts here (off the main thread)
            p.start()
        send.close()
        self._procs[recv] = (p, runner)
        return recv

    def wait(self, handles: List[Connection], timeout: float) -> List[Tuple[Connection, Dict[str, Any]]]:
        out = []
        # wait() returns what it was given (our pipes' ends), in the order they became ready.
        for conn in [c for c in multiprocessing.connection.wait(handles, timeout=timeout) if isinstance(c, Connection)]:
            result: Optional[Dict[str, Any]]
            try:
                result = conn.recv()
            except (EOFError, OSError):
                result = None
            if result is not None and set(result) == {"progress"}:
                self.progress[conn] = result["progress"]  # still running
                self.first_progress.setdefault(conn, result["progress"])
                continue
            p, runner = self._procs.pop(conn)
            self.progress.pop(conn, None)
            self.first_progress.pop(conn, None)
            if result is None:
                p.join(timeout=10)
                result = {"error": f"the worker process died ({_exit_text(p.exitcode)}); re-run to retry"}
                _after_worker(p.pid, runner)
            conn.close()
            p.join(timeout=10)
            out.append((conn, result))
        return out

    def abort(self, handles: List[Connection]) -> None:
        for conn in handles:
            p, runner = self._procs.pop(conn, (None, ""))
            if p is not None:
                p.terminate()
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
                _after_worker(p.pid, runner)
            conn.close()

    def close(self) -> None:
        self.abort(list(self._procs))
