"""The type stubs editors read (python/ssdlab/_native.pyi, with py.typed) match the compiled
module: every class, function, method and property with its parameters (mypy's stubtest),
and user code written against them type-checks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ssdlab

pytest.importorskip("mypy", reason="mypy missing: run scripts/setup.sh (make setup)")

PACKAGE = Path(ssdlab.__file__).parent
# No .mypy_cache in the repo or the temp directory.
ENV = {**os.environ, "MYPY_CACHE_DIR": os.devnull}


def test_stubs_match_the_native_module(tmp_path):
    assert (PACKAGE / "_native.pyi").is_file() and (PACKAGE / "py.typed").is_file()
    ini = tmp_path / "mypy.ini"
    ini.write_text(f"[mypy]\ncache_dir = {os.devnull}\n")  # stubtest ignores MYPY_CACHE_DIR
    p = subprocess.run([sys.executable, "-m", "mypy.stubtest", "ssdlab._native", "--mypy-config-file", str(ini)],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


USER_CODE = '''
import ssdlab

dev = ssdlab.Device("tiny", personality="zns")
zones: int = dev.zns.info()["zones"]
lba: int = dev.zns.append(0, b"x" * 4096)
state: str = dev.zns.report(0, max_zones=1)[0]["state"]
oc = ssdlab.Device("tiny", personality="ocssd").ocssd
per_pu: list[int] = oc.wear()["per_pu"]
pid: int = ssdlab.Device("fdp-ssd").fdp.placement_id(0, 1)
hbmw: int = ssdlab.Device("fdp-ssd").fdp.statistics()["hbmw"]
rep = dev.run(ssdlab.Workload(stop_ops=10))
dlwa = rep.metrics["dlwa"]
'''

BAD_CODE = '''
import ssdlab

dev = ssdlab.Device("tiny", personality="zns")
dev.zns.append("zone one", b"x")
dev.zns.info()["zonez"]
'''


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    # A module of its own per run (never a cached result of the other code), with a cache the
    # test's runs share in its temp directory: the second run reads the standard library's
    # types from it instead of analysing them again.
    f = tmp_path / f"user{len(list(tmp_path.glob('user*.py')))}.py"
    f.write_text(code)
    env = {**ENV, "MYPY_CACHE_DIR": str(tmp_path / ".mypy_cache")}
    return subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--follow-imports=silent", str(f)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


def test_user_code_type_checks_against_the_stubs(tmp_path):
    ok = _mypy(tmp_path, USER_CODE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _mypy(tmp_path, BAD_CODE)
    assert bad.returncode == 1, bad.stdout
    assert 'incompatible type "str"; expected "int"' in bad.stdout, bad.stdout
    assert '"zonez"' in bad.stdout, bad.stdout
