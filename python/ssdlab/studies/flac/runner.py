"""The flac study's runner: one point per step of the reproduction, each in a fresh worker with a
work directory of its own (:class:`Workdir`).

The steps: attach vs memcpy and per-page fault costs (bench); the microbenchmark (4 KiB ..
2 MiB I/O, a data set that fits the DRAM cache and one 4x larger); thread scaling; grep, tar
and bigsort in process on FlacFS and both library baselines, the baselines also charged the
kernel's per-call costs measured at the step's start (apps); grep, tar, sort, dd, cp and a
checkpoint loader as unmodified programs through the LD_PRELOAD shim, with FlacFS's PM cost off
and ext4 on a loop device (cold and warm) as kernel references (shim). The apps and shim rows
say where each program's time went (time inside file-system calls, bytes attached and copied,
read/write sizes);
the flush and load ablations; zero-copy checkpoints; the shim's programs on ext4-DAX, FlacFS and
ext4 inside a QEMU guest with an emulated NVDIMM (guest-dax, :mod:`.guest`). The steps measure wall-clock speed, so
each holds every CPU while it runs (the scheduler runs them one at a time) and its figures vary
between runs; the seed of a point fixes its data sets and access orders.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ...runners import PROCESS_BYTES, WORKER_ENV, Resources, Result, Runner, report_progress
from ...units import parse_size
from . import api as flac
from .guest import median_run, run_guest_dax

Log = Callable[[str], None]

ENGINES = ["flac", "pagecache", "dax"]
# The unmodified programs run through the shim (tar: create and extract; load: a checkpoint loader).
SHIM_APPS = ("grep", "tar", "sort", "dd", "cp", "load")
# The baselines run a second time charged the kernel's per-call costs ("<engine>+kernel");
# FlacFS is not charged, the comparison most favourable to it.
KERNEL_COST_ENGINES = ["pagecache", "dax"]
WORDS = ["cache", "page", "frame", "memory", "flush", "write", "read", "remap", "table", "virtual", "space", "buffer",
         "copy", "zero", "load", "dram", "device", "latency", "bandwidth", "commit", "log", "metadata", "file", "system"]
PATTERN = "persistent"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove_stale_workdirs(base: Path) -> int:
    """Remove the work directories (and unmount the huge-page tmpfs mounts) of runs whose
    process is gone: a killed reproduction never reached Workdir.__exit__. Only directories
    with an owner.pid naming a dead process go; returns how many."""
    removed = 0
    for d in base.glob(Workdir.PREFIX + "*"):
        try:
            pid = int((d / Workdir.OWNER).read_text().strip())
        except (OSError, ValueError):
            continue  # no owner recorded (being set up, or not ours): leave it
        if _alive(pid):
            continue
        if os.path.ismount(d):
            subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
        removed += not d.exists()
    return removed


class Workdir:
    """Images, DRAM frames and host files for a run: a tmpfs mounted huge=always when the
    process may mount one (so FLAC's frames are 2 MiB pages), otherwise a directory in
    /dev/shm (4 KiB pages)."""

    MAP_COUNT = Path("/proc/sys/vm/max_map_count")
    MAP_COUNT_WANT = 1048576

    def __init__(self, want_huge: bool, size_bytes: int, log: Log):
        self.want_huge, self.size_bytes, self.log = want_huge, size_bytes, log
        self.huge = False
        self.mounted = False
        self.old_map_count: Optional[int] = None

    PREFIX = "ssdlab-flac-"
    OWNER = "owner.pid"

    @staticmethod
    def base() -> Path:
        """Where work directories go: /dev/shm, else the temporary directory."""
        return Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(tempfile.gettempdir())

    def __enter__(self) -> "Workdir":
        removed = remove_stale_workdirs(self.base())
        if removed:
            self.log(f"  (removed {removed} work directories left by killed runs)")
        self.dir = Path(tempfile.mkdtemp(prefix=self.PREFIX, dir=self.base()))
        if self.want_huge and os.geteuid() == 0:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"huge=always,size={self.size_bytes}", "ssdlab-flac", str(self.dir)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                self.mounted = self.huge = True
            else:
                self.log(f"  (no huge-page tmpfs: {r.stderr.strip() or 'mount failed'}; using 4 KiB pages)")
        # Who owns the directory (inside the mount, if any): a later run removes it if this
        # process is killed before __exit__.
        (self.dir / self.OWNER).write_text(str(os.getpid()))
        # Copy-on-write of scattered pages maps each new frame separately: more memory
        # mappings than the default limit of 65530 (several distributions default to 1048576).
        try:
            cur = int(self.MAP_COUNT.read_text())
            if cur < self.MAP_COUNT_WANT and os.geteuid() == 0:
                self.MAP_COUNT.write_text(str(self.MAP_COUNT_WANT))
                self.old_map_count = cur
                self.log(f"  (vm.max_map_count {cur} -> {self.MAP_COUNT_WANT} for the run)")
        except OSError as e:
            self.log(f"  (vm.max_map_count unchanged: {e})")
        return self

    def __exit__(self, *exc: Any) -> None:
        import gc

        gc.collect()  # file systems still referenced (from a traceback) unmap their images
        if self.old_map_count is not None:
            try:
                self.MAP_COUNT.write_text(str(self.old_map_count))
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.mounted and subprocess.run(["umount", str(self.dir)], capture_output=True).returncode != 0:
            # Still mapped by something in this process: detach it now, freed when unmapped.
            subprocess.run(["umount", "-l", str(self.dir)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name: str) -> str:
        return str(self.dir / name)

    @property
    def dram_dir(self) -> Optional[str]:
        return str(self.dir) if self.huge else None

    def fs(self, engine: str, dram: Any, pm_bytes: Any, name: str = "fs.img", **kw: Any) -> Dict[str, Any]:
        """A fresh image's config: the previous run's image goes first (one image in memory at
        a time, and no engine mounts another's data)."""
        Path(self.path(name)).unlink(missing_ok=True)
        return flac.fs_config(self.path(name), engine=engine, create=pm_bytes, dram=dram, dram_dir=self.dram_dir, **kw)


def _quiet_env() -> Dict[str, str]:
    # The programs a step starts (the shim's, the loader) get the workers' one-BLAS-thread
    # setting too (numpy's BLAS threads spin on a 2-core machine, and nothing here uses them),
    # unless the user set it.
    return {k: os.environ.get(k, v) for k, v in WORKER_ENV.items()}


# -- benches ------------------------------------------------------------------------------------

def run_bench(w: Workdir, m: Dict[str, Any], log: Log) -> Dict[str, Any]:
    cfg = w.fs("flac", "256M", m["pm_bytes"], name="bench.img")["flac"]
    sizes = [int(s) for s in m["io_sizes"]]
    rows = flac.run({"kind": "attach", "flac": cfg, "sizes": sizes, "budget_bytes": 64 << 20})
    faults = flac.run({"kind": "faults", "flac": cfg, "pages": 2048})
    # The attach paths a user-space FlacFS has, per attach and size (crates/flac/src/attach_alt.rs).
    alts = flac.run({"kind": "attach_alternatives", "sizes": sizes, "repeats": 21})
    for r in rows:
        log(f"  attach {r['bytes'] >> 10:>5} KiB: {r['attach_to_buffer_touch_us']:8.1f} us (with touch), memcpy "
            f"{r['memcpy_us']:8.1f} us, copy to PM {r['copy_to_pm_us']:8.1f} us")
    for r in alts["rows"]:
        log(f"  attach paths {r['bytes'] >> 10:>5} KiB: mmap one call {r['mmap_batch_touch_us']:.1f} us, per page "
            f"{r['mmap_per_page_touch_us']:.1f} us, mremap {r['mremap_touch_us'] or 0:.1f} us, UFFDIO_MOVE "
            f"{r['uffd_move_touch_us'] or 0:.1f} us (with touch)")
    return {"attach": rows, "faults": faults, "attach_alternatives": alts}


def run_micro(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> Dict[str, Any]:
    """Rows per (regime, engine, op, I/O size); ``stats``: each file system's counters at the
    end of its run (copy-on-write copies, loads, ...)."""
    rows: List[Dict[str, Any]] = []
    stats: List[Dict[str, Any]] = []
    for k, regime in enumerate(("cached", "larger")):
        r = m[regime]
        cold = regime == "larger"
        for e, engine in enumerate(ENGINES):
            report_progress((k * len(ENGINES) + e) / (2 * len(ENGINES)))
            t0 = time.time()
            pts = []
            sizes = [int(s) for s in m["io_sizes"]] if regime == "cached" else [65536, 2097152]
            # Reads first: writes change which frames back the file (attached buffers), and
            # the reads measure the data set as it was written.
            for op, fresh in (("read", False), ("write", False), ("write", True)):
                for io in sizes:
                    pb = parse_size(m["small_point_bytes"] if io < 65536 else m["point_bytes"])
                    pts.append({"op": op, "io_bytes": io, "threads": 1, "bytes": pb, "repeats": int(m["repeats"]),
                                "cold": cold and op == "read", "fresh_data": fresh})
            res = flac.run({"kind": "micro", "fs": w.fs(engine, r["dram"], m["pm_bytes"]),
                            "setup": {"data_bytes": parse_size(r["data"]), "threads": 1, "seed": seed}, "points": pts})
            stats.append({"regime": regime, "engine": engine, "stats": res["stats"]})
            for p in res["points"]:
                op = "write-new" if p["fresh_data"] else p["op"]
                rows.append({"regime": regime, "engine": engine, "op": op, **{k: p[k] for k in ("io_bytes", "gb_s", "gb_s_with_commit",
                                                                                                 "us_per_io", "mapped_bytes", "copied_bytes")}})
            log(f"  micro {regime:<6} {engine:<9} " + " ".join(
                f"{'n' if p['fresh_data'] else p['op'][0]}{p['io_bytes'] >> 10}K={p['gb_s']:.1f}/{p['gb_s_with_commit']:.1f}"
                for p in res["points"]) + f"  ({time.time() - t0:.0f} s)")
    return {"rows": rows, "stats": stats}


def run_scaling(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> List[Dict[str, Any]]:
    rows = []
    threads = [int(t) for t in m["threads"]]
    r = m["cached"]
    for engine in ENGINES:
        pts = [{"op": op, "io_bytes": 2 << 20, "threads": t, "bytes": parse_size(m["point_bytes"]) // max(threads),
                "repeats": int(m["repeats"])} for op in ("read", "write") for t in threads]
        res = flac.run({"kind": "micro", "fs": w.fs(engine, r["dram"], m["pm_bytes"]),
                        "setup": {"data_bytes": parse_size(r["data"]), "threads": max(threads), "seed": seed}, "points": pts})
        for p in res["points"]:
            rows.append({"engine": engine, "op": p["op"], "threads": p["threads"], "gb_s": p["gb_s"], "gb_s_with_commit": p["gb_s_with_commit"]})
        log(f"  scaling {engine:<9} " + " ".join(f"{p['op'][0]}x{p['threads']}={p['gb_s']:.1f}" for p in res["points"]))
    return rows


# -- applications ---------------------------------------------------------------------------------

def _kernel_costs(w: Workdir, log: Log) -> Dict[str, int]:
    """The kernel's per-call costs on the step's tmpfs, measured now (crates/flac/src/kcost.rs)."""
    kc = flac.kernel_costs(w.dir)
    log("  kernel per-call costs on tmpfs (ns, median of 21 batches): " + ", ".join(f"{k[:-3]} {v}" for k, v in kc.items()))
    return kc


def _program_row(stats: Dict[str, Any]) -> Dict[str, Any]:
    """What one program did from FlacFS's counters: bytes attached and copied, the time inside
    file-system calls, the calls and the read/write sizes."""
    io = stats.get("io", {})
    return {"mapped_bytes": stats.get("mapped_bytes", 0), "copied_bytes": stats.get("copied_bytes", 0),
            "io_s": io.get("call_ns_total", 0) / 1e9, "charged_s": io.get("charged_ns", 0) / 1e9,
            # Time threads waited for the PM cost model beyond their real copies (all threads).
            "pm_wait_s": stats.get("data", {}).get("pm_stall_ns", 0) / 1e9,
            "calls": io.get("calls", {}), "read_sizes": io.get("read_sizes", {}), "write_sizes": io.get("write_sizes", {})}


def run_apps(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> Dict[str, Any]:
    """grep, tar and bigsort in process: FlacFS and both library baselines, then the baselines
    again charged the kernel's per-call costs (measured at the start of the step); each row
    with what the program did (its time inside file-system calls, bytes attached / copied,
    read and write sizes)."""
    kc = _kernel_costs(w, log)
    rows = []
    tree = {"root": "/tree", "files": int(m["tree"]["files"]), "total_bytes": parse_size(m["tree"]["bytes"]),
            "match_fraction": 0.01, "pattern": PATTERN, "seed": seed}
    cases: List[Tuple[str, bool, Dict[str, Any]]] = [("grep", True, {"tree": tree}), ("grep", False, {"tree": tree}), ("tar", True, {"tree": tree}),
             ("bigsort", True, {"ints": int(m["bigsort_ints"]), "run_ints": int(m["run_ints"]), "seed": seed})]
    runs = [(e, False) for e in ENGINES] + [(e, True) for e in KERNEL_COST_ENGINES]
    for k, (app, cold, params) in enumerate(cases):
        for e, (engine, charged) in enumerate(runs):
            report_progress((k * len(runs) + e) / (len(cases) * len(runs)))
            t0 = time.time()
            res = flac.run({"kind": "app", "fs": w.fs(engine, m["app_dram"], m["pm_bytes"], kernel_cost=kc if charged else None),
                            "app": {"app": app, "cold": cold, "chunk_bytes": 2 << 20, **params}})
            label = engine + ("+kernel" if charged else "")
            rows.append({"app": app, "cache": "cold" if cold else "warm", "engine": label, "seconds": res["result"]["seconds"],
                         "bytes_read": res["result"]["bytes_read"], "bytes_written": res["result"]["bytes_written"],
                         **_program_row(res["program"])})
            r = rows[-1]
            log(f"  app {app:<7} {'cold' if cold else 'warm'} {label:<16} {r['seconds']:7.3f} s, in calls {r['io_s']:.3f} s  "
                f"({time.time() - t0:.0f} s)")
    return {"rows": rows, "kernel_cost": kc}


def _host_tree(root: Path, files: int, total: int, seed: int) -> int:
    """Text files under root (as the in-process tree); returns the matching lines."""
    rng = random.Random(seed)
    weights = [np.exp(rng.random() * 10.0) for _ in range(files)]
    s = sum(weights)
    matches = 0
    for i, wgt in enumerate(weights):
        size = max(1, int(wgt / s * total))
        d = root / f"d{i % 8:02d}"
        d.mkdir(parents=True, exist_ok=True)
        lines, n = [], 0
        while n < size:
            k = rng.randrange(6, 14)
            words = [rng.choice(WORDS) for _ in range(k)]
            if rng.random() < 0.01:
                words[rng.randrange(k)] = PATTERN
            line = " ".join(words) + "\n"
            lines.append(line)
            n += len(line)
        text = "".join(lines)[:size]
        matches += sum(1 for ln in text.split("\n") if PATTERN in ln)
        (d / f"f{i:05d}.txt").write_text(text)
    return matches


def _timed(cmd: List[str], env: Dict[str, str], check: Callable[[subprocess.CompletedProcess], None]) -> Tuple[float, float, float]:
    """Run a program: (wall seconds, user CPU seconds, system CPU seconds: its time in the
    kernel), the CPU times from the rusage of the children reaped meanwhile (only this one)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()[:300]}")
    check(r)
    return dt, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


# The loader of a checkpoint, an unmodified Python program: the whole file into one
# page-aligned buffer (anonymous memory), read 2 MiB at a time as a framework's loader does;
# prints a checksum of one word per page (touching every page once).
LOADER = """import mmap, os, sys
path, chunk = sys.argv[1], 2 << 20
size = os.stat(path).st_size
buf = mmap.mmap(-1, max(size, 1))
mv = memoryview(buf)
with open(path, "rb", buffering=0) as f:
    off = 0
    while off < size:
        n = f.readinto(mv[off:off + chunk])
        if not n:
            break
        off += n
words = mv.cast("Q")
print(sum(words[::512]) % (1 << 64), off)
"""


def write_shim_data(root: Path, files: int, tree_bytes: int, sort_ints: int, big_bytes: int, seed: int) -> Tuple[int, str, bytes]:
    """The shim step's data set under `root` (the guest-dax step's too, smaller): a text tree
    (tree/), integers to sort (ints.txt) and a large file (big.bin), all from `seed`. Returns
    the tree's matching lines, the sha256 of the sorted integers as sort writes them, and
    big.bin's bytes (each caller checks its programs' output against its own digest of them)."""
    want = _host_tree(root / "tree", files, tree_bytes, seed)
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 2**31, sort_ints)
    (root / "ints.txt").write_text("\n".join(map(str, ints.tolist())) + "\n")
    sorted_sha = hashlib.sha256(("\n".join(map(str, np.sort(ints).tolist())) + "\n").encode()).hexdigest()
    big = rng.integers(0, 256, big_bytes, dtype=np.uint8).tobytes()
    (root / "big.bin").write_bytes(big)
    return want, sorted_sha, big


def _loader_sum(data: bytes) -> str:
    words = memoryview(data).cast("Q")
    return f"{sum(words[::512]) % (1 << 64)} {len(data)}"


def _suites() -> List[Tuple[str, str, bool]]:
    """The shim's runs: (label, engine, PM cost on). The baselines charged the kernel's
    per-call costs run in process only (the apps step): through the shim those costs came to
    3% of tar's time and under 1% of the other programs' when measured (docs/case-studies/flac.md),
    and the step's time is bounded by `make demo`'s."""
    return [(e, e, True) for e in ENGINES] + [("flac-pm-off", "flac", False)]


def _shim_stats(path: Path) -> Dict[str, Any]:
    """The summed statistics of the processes that appended a line to ``path``."""
    out: Dict[str, Any] = {"mapped_bytes": 0, "copied_bytes": 0, "io_s": 0.0, "charged_s": 0.0, "pm_wait_s": 0.0, "calls": {}, "read_sizes": {},
                           "write_sizes": {}, "processes": 0}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        p = _program_row(json.loads(line))
        out["processes"] += 1
        for k in ("mapped_bytes", "copied_bytes", "io_s", "charged_s", "pm_wait_s"):
            out[k] += p[k]
        for k in ("calls", "read_sizes", "write_sizes"):
            for b, n in p[k].items():
                out[k][b] = out[k].get(b, 0) + n
    return out


def run_shim(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> Dict[str, Any]:
    """grep, tar, sort and large-buffer programs (dd bs=2M, cp, a checkpoint loader) as
    unmodified programs on FlacFS, the library baselines, FlacFS with the PM cost off, and ext4
    (cold, then warm)."""
    host = Path(w.path("host"))
    want, sorted_sha, big = write_shim_data(host, int(m["shim_tree"]["files"]), parse_size(m["shim_tree"]["bytes"]),
                                            int(m["shim_sort_ints"]), parse_size(m["shim_big"]), seed)
    loaded = _loader_sum(big)
    del big
    loader = host / "loader.py"
    loader.write_text(LOADER)
    rows: List[Dict[str, Any]] = []
    statdir = Path(w.path("stats"))
    statdir.mkdir()

    def grep_check(r: subprocess.CompletedProcess) -> None:
        n = sum(int(ln.rsplit(b":", 1)[1]) for ln in r.stdout.splitlines() if b":" in ln)
        if n != want:
            raise RuntimeError(f"grep counted {n} matching lines, the tree has {want}")

    def load_check(r: subprocess.CompletedProcess) -> None:
        if r.stdout.decode().strip() != loaded:
            raise RuntimeError(f"the loader read {r.stdout.decode().strip()!r}, the file is {loaded!r}")

    def ok(_: subprocess.CompletedProcess) -> None:
        pass

    total = len(_suites()) + 2
    done = [0]

    def suite(prefix: str, env_of: Callable[[str], Dict[str, str]], reset: Callable[[], None], label: str) -> None:
        report_progress(done[0] / total)
        done[0] += 1
        runs: Dict[str, List[Tuple[float, float, float]]] = {a: [] for a in SHIM_APPS}

        def run(app: str, cmd: List[str], check: Callable[[subprocess.CompletedProcess], None] = ok) -> Tuple[float, float, float]:
            return _timed(cmd, env_of(app), check)

        def timed(app: str, cmd: List[str], check: Callable[[subprocess.CompletedProcess], None] = ok, reps: int = 3) -> None:
            for _ in range(reps):
                reset()
                runs[app].append(run(app, cmd, check))

        timed("grep", ["grep", "-r", "-c", PATTERN, f"{prefix}/tree"], grep_check)
        for _ in range(2):
            run("", ["rm", "-rf", f"{prefix}/x", f"{prefix}/t.tar"])
            run("", ["mkdir", f"{prefix}/x"])
            reset()
            c = run("tar", ["tar", "-cf", f"{prefix}/t.tar", "-C", prefix, "tree"])
            reset()
            x = run("tar", ["tar", "-xf", f"{prefix}/t.tar", "-C", f"{prefix}/x"])
            runs["tar"].append((c[0] + x[0], c[1] + x[1], c[2] + x[2]))
        run("", ["diff", "-r", f"{prefix}/tree", f"{prefix}/x/tree"])
        timed("sort", ["sort", "-n", "-S", "50%", "-o", f"{prefix}/sorted.txt", f"{prefix}/ints.txt"])
        digest = hashlib.sha256(subprocess.run(["cat", f"{prefix}/sorted.txt"], env=env_of(""), capture_output=True, check=True).stdout).hexdigest()
        if digest != sorted_sha:
            raise RuntimeError(f"{label}: sort's output is not the sorted input")
        timed("dd", ["dd", f"if={prefix}/big.bin", "of=/dev/null", "bs=2M"])
        for _ in range(3):
            run("", ["rm", "-f", f"{prefix}/big.copy"])
            reset()
            runs["cp"].append(run("cp", ["cp", f"{prefix}/big.bin", f"{prefix}/big.copy"]))
        run("", ["cmp", f"{prefix}/big.bin", f"{prefix}/big.copy"])
        timed("load", [sys.executable, "-S", str(loader), f"{prefix}/big.bin"], load_check)
        for app, v in runs.items():
            st = _shim_stats(statdir / f"{label}-{app}.jsonl")
            rows.append({"engine": label, "app": app, "seconds": median_run([x[0] for x in v]), "runs": [x[0] for x in v],
                         "wall_total_s": sum(x[0] for x in v), "user_s": sum(x[1] for x in v), "sys_s": sum(x[2] for x in v), **st})
        log(f"  shim {label:<16} " + " ".join(f"{a}={median_run([x[0] for x in v]):.3f}s" for a, v in runs.items()))

    for label, engine, pm_cost in _suites():
        img = w.path(f"shim-{engine}.img")
        base = {**flac.shim_env(img, mount="/flac", engine=engine, create=m["pm_bytes"], dram=m["shim_dram"], dram_dir=w.dram_dir,
                                pm_cost=pm_cost), **_quiet_env()}
        subprocess.run(["cp", "-r", str(host / "tree"), "/flac/tree"], env=base, check=True, capture_output=True)
        subprocess.run(["cp", str(host / "ints.txt"), str(host / "big.bin"), "/flac/"], env=base, check=True, capture_output=True)

        def env_of(app: str, base: Dict[str, str] = base, label: str = label) -> Dict[str, str]:
            # Each program's processes append their statistics to a file of their own.
            return {**base, "FLACFS_STATS": str(statdir / f"{label}-{app or 'other'}.jsonl")}
        # Every program is a new process: it starts with an empty DRAM cache (data in PM).
        suite("/flac", env_of, lambda: None, label)
        os.unlink(img)
    if m.get("ext4", True):
        _ext4(w, host, suite, log)
    return {"rows": rows}


def _ext4(w: Workdir, host: Path, suite: Callable, log: Log) -> None:
    """The kernel reference: ext4 on a loop device over a file on the same tmpfs; first cold
    (remounted before each run), then warm (its page cache holds the files)."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        log("  ext4: skipped (needs root, mkfs.ext4 and losetup)")
        return
    img, mnt = w.path("ext4.img"), w.path("ext4")
    size = sum(f.stat().st_size for f in host.rglob("*") if f.is_file()) * 4 + (256 << 20)
    Path(mnt).mkdir()
    dev = None
    try:
        subprocess.run(["truncate", "-s", str(size), img], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
        dev = subprocess.run(["losetup", "--find", "--show", img], check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["mount", "-o", "noatime", dev, mnt], check=True, capture_output=True)
        subprocess.run(["cp", "-r", str(host / "tree"), str(host / "ints.txt"), str(host / "big.bin"), mnt], check=True)

        def remount() -> None:
            # A fresh mount: ext4's page cache of the file system is empty (as a new FlacFS
            # process's DRAM cache is).
            subprocess.run(["umount", mnt], check=True)
            subprocess.run(["mount", "-o", "noatime", dev, mnt], check=True)

        env = {**os.environ, **_quiet_env()}
        suite(mnt, lambda _app: env, remount, "ext4")
        # Warm: no remount in between. The cold runs remounted before each program, so the
        # first warm run of grep (the tree) and of sort (the integers) reads its files in; the
        # reported figure, the median of 3 runs, is a warm one (the guest-dax step, which
        # averages all its runs, makes an unrecorded pass first instead).
        suite(mnt, lambda _app: env, lambda: None, "ext4-warm")
    except (subprocess.CalledProcessError, RuntimeError) as e:
        log(f"  ext4: skipped ({e})")
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        if dev:
            subprocess.run(["losetup", "-d", dev], capture_output=True)


# -- ablations and checkpoints ---------------------------------------------------------------------

def run_ablations(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    a = m["ablation_flush"]
    for lockfree in (True, False):
        cfg = w.fs("flac", a["dram"], m["pm_bytes"], lockfree_flush=lockfree, flush_interval_ms=int(a["flush_interval_ms"]))
        r = flac.run({"kind": "micro", "fs": cfg, "setup": {"data_bytes": parse_size(a["data"]), "threads": int(a["threads"]), "seed": seed},
                      "points": [{"op": "write", "io_bytes": int(a["io"]), "threads": int(a["threads"]), "bytes": parse_size(a["bytes"]),
                                  "fresh_data": True, "plain_buffer": True, "repeats": int(m["repeats"])}]})
        out["flush_lockfree" if lockfree else "flush_copying"] = {**r["points"][0], "stats": r["stats"]}
    b = m["ablation_load"]
    for async_load in (True, False):
        cfg = w.fs("flac", b["dram"], m["pm_bytes"], async_load=async_load)
        r = flac.run({"kind": "micro", "fs": cfg, "setup": {"data_bytes": parse_size(b["data"]), "threads": 1, "seed": seed},
                      "points": [{"op": "read", "io_bytes": int(b["io"]), "threads": 1, "bytes": parse_size(b["bytes"]), "cold": True,
                                  "repeats": int(m["repeats"])}]})
        out["load_async" if async_load else "load_sync"] = {**r["points"][0], "stats": r["stats"]}
    log(f"  ablation flush: lock-free {out['flush_lockfree']['gb_s']:.2f} GB/s, copying {out['flush_copying']['gb_s']:.2f} GB/s; "
        f"load: async {out['load_async']['gb_s']:.2f} GB/s, sync {out['load_sync']['gb_s']:.2f} GB/s")
    return out


def _update(arrays: Dict[str, np.ndarray], fraction: float, rng: np.random.Generator) -> None:
    """A training step: write `fraction` of each array's pages (one element per page)."""
    for a in arrays.values():
        flat = a.reshape(-1)
        per = max(1, 4096 // a.itemsize)
        pages = np.arange(0, flat.size, per)
        chosen = pages[rng.random(pages.size) < fraction]
        flat[chosen] += 1


def run_checkpoint(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> List[Dict[str, Any]]:
    c = m["checkpoint"]
    state = parse_size(c["state"])
    tensors, saves, frac = int(c["tensors"]), int(c["saves"]), float(c["update"])
    per = state // tensors // 4
    specs = {f"t{i:03d}": ((per,), "float32") for i in range(tensors)}
    rows = []
    for mode in ("flac-zero-copy", "flac-copy", "tmpfs"):
        rng = np.random.default_rng(seed)
        img = w.path("ckpt.img")
        fs = None
        if mode.startswith("flac"):
            fs = flac.FlacFS(img, create=m["pm_bytes"], dram=max(4 * state, 256 << 20), dram_dir=w.dram_dir)
            arrays = fs.arrays(specs) if mode == "flac-zero-copy" else {n: np.empty(s, d) for n, (s, d) in specs.items()}
        else:
            arrays = {n: np.empty(s, d) for n, (s, d) in specs.items()}
        for a in arrays.values():
            a[:] = rng.random(a.shape, dtype=np.float32)
        save_s, update_s = [], []
        for k in range(saves):
            if k > 0:
                t0 = time.perf_counter()
                _update(arrays, frac, rng)
                update_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            if fs is not None:
                flac.save_checkpoint(fs, f"/ckpt{k}", arrays)
            else:
                d = Path(w.path(f"tmpfs-ckpt{k}"))
                d.mkdir()
                for n, a in arrays.items():
                    a.tofile(d / f"{n}.bin")
            save_s.append(time.perf_counter() - t0)
        row: Dict[str, Any] = {"mode": mode, "state_bytes": state, "saves": saves, "update_fraction": frac, "save_s": save_s, "update_s": update_s,
               "logical_bytes": saves * state}
        if fs is not None:
            dram, pm = fs.frames_in_use()
            data = fs.stats()["data"]
            row.update({"dram_frames_bytes": dram * 4096, "pm_frames_bytes": pm * 4096, "cow_faults": data["cow_faults"],
                        "cow_copies": data["cow_copies"]})
            t0 = time.perf_counter()
            back = flac.load_checkpoint(fs, f"/ckpt{saves - 1}")
            row["load_s"] = time.perf_counter() - t0
            if not all(np.array_equal(back[n], arrays[n]) for n in arrays):
                raise RuntimeError(f"checkpoint {mode}: the loaded state differs from the saved one")
            up = flac.upload_checkpoint(fs, f"/ckpt{saves - 1}", w.path("obs"))
            row["upload_s"] = up["seconds"]
            shutil.rmtree(w.path("obs"), ignore_errors=True)
            fs.check()
            del back
            arrays = {}
            fs.close()
            os.unlink(img)
        else:
            row["pm_frames_bytes"] = sum(f.stat().st_size for f in Path(w.dir).glob("tmpfs-ckpt*/*.bin"))
            for k in range(saves):
                shutil.rmtree(w.path(f"tmpfs-ckpt{k}"))
        rows.append(row)
        log(f"  checkpoint {mode:<15} save {np.median(save_s[1:] or save_s):.3f} s (first {save_s[0]:.3f}), "
            f"update {np.median(update_s) if update_s else 0:.3f} s, space {row['pm_frames_bytes'] / 2**20:.0f} MiB "
            f"for {saves} x {state >> 20} MiB")
    return rows



# -- the runner on the sweep engine ------------------------------------------------------------------
#
# One point per step (and seed: the seed feeds the step's data generators), each run in a fresh
# worker with a work directory of its own.

STEPS: Dict[str, Callable[[Workdir, Dict[str, Any], int, Log], Any]] = {
    "bench": lambda w, m, seed, log: run_bench(w, m, log),
    "micro": run_micro,
    "scaling": run_scaling,
    "apps": run_apps,
    "shim": run_shim,
    "ablations": run_ablations,
    "checkpoint": run_checkpoint,
    # One guest boot for every engine and run; only in modes with a [MODE.guest_dax] table.
    "guest-dax": lambda w, m, seed, log: run_guest_dax(m["guest_dax"], seed, w.dir, log),
}
# The steps run once, not once per seed: the bench measures primitives, with no data set to
# generate; guest-dax boots a guest under TCG (tens of seconds) and makes its data set from the
# mode's first seed, its figures' spread coming from its runs inside the guest.
UNSEEDED = ("bench", "guest-dax")


def _resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    if task.get("step") not in STEPS:
        raise ValueError(f"flac: step must be one of {', '.join(STEPS)}, got {task.get('step')!r}")
    m = task["m"]
    # The guest-dax step's input holds its own table and the work directory's settings only.
    for key in ("pm_bytes",) if task["step"] == "guest-dax" else ("pm_bytes", "app_dram", "shim_dram"):
        parse_size(m[key])
    return task


def _resources(task: Dict[str, Any]) -> Resources:
    m, step = task["m"], task["step"]
    if step == "guest-dax":
        # QEMU: the guest's RAM and its NVDIMM's file (on the work directory's tmpfs), plus
        # QEMU's own (its RSS peaked at 1.4 to 1.9 GiB for 1 GiB + 512 MiB, quick, and at 2.8 GiB for
        # 1 GiB + 1 GiB, full, on 2026-11-29).
        g = m["guest_dax"]
        guest = parse_size(g.get("memory", "1G")) + parse_size(g["pmem"])
        return Resources(memory_bytes=guest + (1 << 30) + PROCESS_BYTES, cpus=os.cpu_count() or 1)
    pm = parse_size(m["pm_bytes"])
    # The PM image is populated up front (one at a time: Workdir.fs removes the previous one)
    # and the DRAM pool is the largest one the step mounts; a GiB for data sets on the host
    # side (trees, sorted integers, ext4's image).
    if step == "checkpoint":
        state, saves = parse_size(m["checkpoint"]["state"]), int(m["checkpoint"]["saves"])
        # The FlacFS modes hold the image, its DRAM pool, the copying mode's own arrays and the
        # uploaded copy of the last save; the tmpfs mode, after that image is gone, its arrays
        # and every save as files.
        data = max(pm + max(4 * state, 256 << 20) + 2 * state, (1 + saves) * state)
    else:
        data = pm + {"bench": 256 << 20, "apps": parse_size(m["app_dram"]), "shim": parse_size(m["shim_dram"]) + 3 * parse_size(m["shim_big"]),
                     "micro": max(parse_size(m["cached"]["dram"]), parse_size(m["larger"]["dram"])),
                     "scaling": parse_size(m["cached"]["dram"]),
                     "ablations": max(parse_size(m["ablation_flush"]["dram"]), parse_size(m["ablation_load"]["dram"]))}[step]
    # Every CPU: the scheduler clamps this to the machine's (or --jobs), so steps run alone.
    return Resources(memory_bytes=data + (1 << 30) + PROCESS_BYTES, cpus=os.cpu_count() or 1)


def _run(task: Dict[str, Any]) -> Result:
    m, step = task["m"], task["step"]
    os.environ.update(_quiet_env())
    lines: List[str] = []
    t0 = time.time()
    with Workdir(bool(m.get("huge_pages", True)), parse_size(m["pm_bytes"]) * 3 + (4 << 30), lines.append) as w:
        lines.insert(0, f"flac {step} ({task['mode']}): images in {w.dir} ({'2 MiB' if w.huge else '4 KiB'} pages)")
        result = STEPS[step](w, m, int(task.get("seed") or 0), lines.append)
        huge = w.huge
    seconds = round(time.time() - t0, 1)
    return Result(metrics={"step": step, "huge_pages": huge, "seconds": seconds, "cpus": os.cpu_count(), "result": result},
                  files={"log.txt": "\n".join(lines) + "\n"})


def _reap() -> None:
    # A step's worker killed (Ctrl-C, out of memory) never reached Workdir.__exit__: its
    # images would hold their memory in /dev/shm until the next flac run.
    remove_stale_workdirs(Workdir.base())


STEP = Runner("ssdlab.studies.flac.runner:STEP", _resolve, _resources, _run, reap=_reap)
