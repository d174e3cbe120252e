"""The test session runs in a temp directory of its own (TMPDIR points there, so subprocesses,
Ray and the Rust code use it too) and fails if a test leaves anything in it: tests must clean
up after themselves. pytest's own tmp_path directories live there as well and go with it."""

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

_saved: dict = {}


@pytest.fixture
def shm():
    """A fresh directory on tmpfs (/dev/shm, or SSDLAB_TEST_SHM) for FLAC's PM images, removed
    afterwards."""
    d = Path(os.environ.get("SSDLAB_TEST_SHM", "/dev/shm")) / f"ssdlab-flac-test-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _worker() -> str:
    """The pytest-xdist worker this process is ("gw0", ...), or "" for the controller or a
    plain run."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: uses machine-wide resources (/dev/shm work directories, mounts, every "
                                       "process); `make test` runs these after the parallel part, one at a time")
    # Short: Ray's socket paths under this directory must fit in 107 bytes. An xdist worker
    # inherits the controller's TMPDIR: its directory goes beside the controller's, not in it.
    if _worker():
        base = Path(f"{os.environ['TMPDIR']}-{_worker()}")
        base.mkdir()
    else:
        base = Path(tempfile.mkdtemp(prefix="sl-"))
    _saved.update(base=base, tmpdir=os.environ.get("TMPDIR"), tempdir=tempfile.tempdir)
    os.environ["TMPDIR"] = str(base)
    tempfile.tempdir = str(base)


_BUILTIN_FIXTURES = {"tmp_path_factory", "tmpdir_factory", "worker_id", "testrun_uid", "monkeypatch", "cache",
                     "pytestconfig", "record_testsuite_property"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`make test` spreads tests over its workers with `--dist loadgroup`: a test goes to either
    worker on its own, except that tests of a file sharing a module-scoped fixture (a
    reproduction run once, a server started once) stay together on one worker, so the fixture is
    built once; tests sharing none of them may go elsewhere. Runs before xdist's own hook, which
    reads the groups (every worker collects and orders the tests the same way)."""
    parent: dict = {}

    def find(k):
        while parent.setdefault(k, k) != k:
            k = parent[k]
        return k

    shared_of = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group"):
            continue
        f = item.nodeid.split("::")[0]
        shared = [(f, name) for name, defs in info.name2fixturedefs.items()
                  if name not in _BUILTIN_FIXTURES and defs and defs[-1].scope in ("module", "package", "session")]
        for a in shared[1:]:
            parent[find(a)] = find(shared[0])
        if shared:
            shared_of[item] = shared[0]
    for item, key in shared_of.items():
        f, name = find(key)
        item.add_marker(pytest.mark.xdist_group(f"{f}::{name}"))
    # Those groups (whole reproductions, most of them) are the longest units of work: they go
    # first, so that one of them is not what the other worker waits for at the end. Within a
    # group, and among the rest, the order stays the files' own.
    items.sort(key=lambda item: item not in shared_of)


def _release_multiprocessing_tempdir(base: Path) -> None:
    """A process pool (sweeps, fdp-cache) leaves multiprocessing's own temp directory (pymp-*,
    the forkserver's socket) until the interpreter exits; remove it now, the way multiprocessing
    itself would at exit (its finalizer, which then does not run again)."""
    import multiprocessing.util as mu

    d = mu.process.current_process()._config.get("tempdir")
    if not d or Path(d).parent != base:
        return
    for f in list(getattr(mu, "_finalizer_registry", {}).values()):
        if getattr(f, "_callback", None) is getattr(mu, "_remove_temp_dir", None):
            f()


def _leftovers(base: Path) -> list:
    return sorted(p.name for p in base.iterdir() if not p.name.startswith("pytest-of-"))


# Tests that need a real client or reference server (memcached, qemu-io, nbdinfo, QEMU, ...) skip
# when it is missing, saying "run scripts/setup.sh". Under `make test` (SSDLAB_REQUIRE_TOOLS=1)
# such a skip fails the session: setup installs every tool, so a skip there means a failed
# install hiding tests, not a machine without the tool.
_tool_skips: list = []


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if "setup" in reason and ("missing" in reason or "no QEMU" in reason):
            _tool_skips.append(f"{report.nodeid}: {reason}")


def _fail_on_tool_skips(session) -> None:
    if not _tool_skips or os.environ.get("SSDLAB_REQUIRE_TOOLS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(_tool_skips)} tests skipped for a missing tool (SSDLAB_REQUIRE_TOOLS=1 makes that a failure):",
             *_tool_skips[:10]]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _fail_on_tool_skips(session)
    base = _saved["base"]
    _release_multiprocessing_tempdir(base)
    left = _leftovers(base)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = f"tests left files in the temp directory ({base}): {', '.join(left)}"
        if reporter is not None:
            reporter.write_line(msg, red=True)
        else:
            print(msg)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not _worker():
        # Workers remove their directories when their tests passed and left nothing.
        kept = sorted(base.parent.glob(f"{base.name}-gw*"))
        if kept and session.exitstatus == 0:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            msg = "test workers left files in their temp directories: " + ", ".join(
                f"{k} ({', '.join(_leftovers(k)) or 'failed tests'})" for k in kept)
            if reporter is not None:
                reporter.write_line(msg, red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.exitstatus == 0:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"test temp files kept in {base}")


def pytest_unconfigure(config):
    if _saved.get("tmpdir") is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _saved["tmpdir"]
    tempfile.tempdir = _saved.get("tempdir")
