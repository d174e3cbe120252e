"""The flac study's runner: one point per step of the reproduction, each in a fresh worker with a
work directory of its own (:class:`Workdir`).

The steps: attach vs memcpy and per-page fault costs (bench); the microbenchmark (4 KiB ..
2 MiB I/O, a data set that fits the DRAM cache and one 4x larger); thread scaling; grep, tar
and bigsort in process on FlacFS and both library baselines (apps); the same as unmodified
programs through the LD_PRELOAD shim, with ext4 on a loop device as a kernel reference (shim);
the flush and load ablations; zero-copy checkpoints. The steps measure wall-clock speed, so
each holds every CPU while it runs (the scheduler runs them one at a time) and its figures vary
between runs; the seed of a point fixes its data sets and access orders.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ...runners import PROCESS_BYTES, Resources, Result, Runner, report_progress
from ...units import parse_size
from . import api as flac

Log = Callable[[str], None]

ENGINES = ["flac", "pagecache", "dax"]
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
    # numpy's BLAS threads spin on a 2-core machine; nothing here uses them.
    return {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


# -- benches ------------------------------------------------------------------------------------

def run_bench(w: Workdir, m: Dict[str, Any], log: Log) -> Dict[str, Any]:
    cfg = w.fs("flac", "256M", m["pm_bytes"], name="bench.img")["flac"]
    sizes = [int(s) for s in m["io_sizes"]]
    rows = flac.run({"kind": "attach", "flac": cfg, "sizes": sizes, "budget_bytes": 64 << 20})
    faults = flac.run({"kind": "faults", "flac": cfg, "pages": 2048})
    for r in rows:
        log(f"  attach {r['bytes'] >> 10:>5} KiB: {r['attach_to_buffer_touch_us']:8.1f} us (with touch), memcpy "
            f"{r['memcpy_us']:8.1f} us, copy to PM {r['copy_to_pm_us']:8.1f} us")
    return {"attach": rows, "faults": faults}


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

def run_apps(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> List[Dict[str, Any]]:
    rows = []
    tree = {"root": "/tree", "files": int(m["tree"]["files"]), "total_bytes": parse_size(m["tree"]["bytes"]),
            "match_fraction": 0.01, "pattern": PATTERN, "seed": seed}
    cases: List[Tuple[str, bool, Dict[str, Any]]] = [("grep", True, {"tree": tree}), ("grep", False, {"tree": tree}), ("tar", True, {"tree": tree}),
             ("bigsort", True, {"ints": int(m["bigsort_ints"]), "run_ints": int(m["run_ints"]), "seed": seed})]
    for k, (app, cold, params) in enumerate(cases):
        for e, engine in enumerate(ENGINES):
            report_progress((k * len(ENGINES) + e) / (len(cases) * len(ENGINES)))
            t0 = time.time()
            res = flac.run({"kind": "app", "fs": w.fs(engine, m["app_dram"], m["pm_bytes"]),
                            "app": {"app": app, "cold": cold, "chunk_bytes": 2 << 20, **params}})
            st = res["stats"]
            rows.append({"app": app, "cache": "cold" if cold else "warm", "engine": engine, "seconds": res["result"]["seconds"],
                         "bytes_read": res["result"]["bytes_read"], "bytes_written": res["result"]["bytes_written"],
                         "mapped_bytes": st["mapped_bytes"], "copied_bytes": st["copied_bytes"]})
            log(f"  app {app:<7} {'cold' if cold else 'warm'} {engine:<9} {res['result']['seconds']:7.3f} s  ({time.time() - t0:.0f} s)")
    return rows


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


def _timed(cmd: List[str], env: Dict[str, str], check: Callable[[subprocess.CompletedProcess], None]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()[:300]}")
    check(r)
    return dt


def _median(v: List[float]) -> float:
    return sorted(v)[len(v) // 2]


def run_shim(w: Workdir, m: Dict[str, Any], seed: int, log: Log) -> List[Dict[str, Any]]:
    """grep, tar and sort as unmodified programs on FlacFS, the baselines and ext4."""
    host = Path(w.path("host"))
    want = _host_tree(host / "tree", int(m["shim_tree"]["files"]), parse_size(m["shim_tree"]["bytes"]), seed)
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 2**31, int(m["shim_sort_ints"]))
    (host / "ints.txt").write_text("\n".join(map(str, ints.tolist())) + "\n")
    sorted_sha = hashlib.sha256(("\n".join(map(str, np.sort(ints).tolist())) + "\n").encode()).hexdigest()
    reps = 3
    rows = []

    def grep_check(r: subprocess.CompletedProcess) -> None:
        n = sum(int(ln.rsplit(b":", 1)[1]) for ln in r.stdout.splitlines() if b":" in ln)
        if n != want:
            raise RuntimeError(f"grep counted {n} matching lines, the tree has {want}")

    def ok(_: subprocess.CompletedProcess) -> None:
        pass

    suites = [0]  # run so far, of one per engine and ext4

    def suite(prefix: str, env: Dict[str, str], reset: Callable[[], None], label: str) -> None:
        report_progress(suites[0] / (len(ENGINES) + 1))
        suites[0] += 1

        def run(cmd: List[str], check: Callable[[subprocess.CompletedProcess], None] = ok) -> float:
            return _timed(cmd, env, check)
        times: Dict[str, List[float]] = {"grep": [], "tar": [], "sort": []}
        for _ in range(reps):
            reset()
            times["grep"].append(run(["grep", "-r", "-c", PATTERN, f"{prefix}/tree"], grep_check))
        for _ in range(2):
            run(["rm", "-rf", f"{prefix}/x", f"{prefix}/t.tar"])
            run(["mkdir", f"{prefix}/x"])
            reset()
            t = run(["tar", "-cf", f"{prefix}/t.tar", "-C", prefix, "tree"])
            reset()
            times["tar"].append(t + run(["tar", "-xf", f"{prefix}/t.tar", "-C", f"{prefix}/x"]))
        run(["diff", "-r", f"{prefix}/tree", f"{prefix}/x/tree"])
        for _ in range(reps):
            reset()
            times["sort"].append(run(["sort", "-n", "-S", "50%", "-o", f"{prefix}/sorted.txt", f"{prefix}/ints.txt"]))
        digest = hashlib.sha256(subprocess.run(["cat", f"{prefix}/sorted.txt"], env=env, capture_output=True, check=True).stdout).hexdigest()
        if digest != sorted_sha:
            raise RuntimeError(f"{label}: sort's output is not the sorted input")
        for app, v in times.items():
            rows.append({"engine": label, "app": app, "seconds": _median(v), "runs": v})
        log(f"  shim {label:<9} " + " ".join(f"{a}={_median(v):.3f}s" for a, v in times.items()))

    for engine in ENGINES:
        img = w.path(f"shim-{engine}.img")
        stats = w.path(f"shim-{engine}.stats")
        env = {**flac.shim_env(img, mount="/flac", engine=engine, create=m["pm_bytes"], dram=m["shim_dram"],
                               dram_dir=w.dram_dir, stats=stats), **_quiet_env()}
        subprocess.run(["cp", "-r", str(host / "tree"), "/flac/tree"], env=env, check=True, capture_output=True)
        subprocess.run(["cp", str(host / "ints.txt"), "/flac/ints.txt"], env=env, check=True, capture_output=True)
        Path(stats).unlink(missing_ok=True)
        # Every program is a new process: it starts with an empty DRAM cache (data in PM).
        suite("/flac", env, lambda: None, engine)
        lines = [json.loads(x) for x in Path(stats).read_text().splitlines()] if Path(stats).exists() else []
        rows.append({"engine": engine, "app": "stats", "mapped_bytes": sum(x["mapped_bytes"] for x in lines),
                     "copied_bytes": sum(x["copied_bytes"] for x in lines)})
        os.unlink(img)
    if m.get("ext4", True):
        _ext4(w, host, suite, log)
    return rows


def _ext4(w: Workdir, host: Path, suite: Callable, log: Log) -> None:
    """The kernel reference: ext4 on a loop device over a file on the same tmpfs."""
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
        subprocess.run(["cp", "-r", str(host / "tree"), str(host / "ints.txt"), mnt], check=True)

        def remount() -> None:
            # A fresh mount: ext4's page cache of the file system is empty (as a new FlacFS
            # process's DRAM cache is).
            subprocess.run(["umount", mnt], check=True)
            subprocess.run(["mount", "-o", "noatime", dev, mnt], check=True)

        suite(mnt, {**os.environ, **_quiet_env()}, remount, "ext4")
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
}
# The steps without a seed: the bench measures primitives, with no data set to generate.
UNSEEDED = ("bench",)


def _resolve(task: Dict[str, Any]) -> Dict[str, Any]:
    if task.get("step") not in STEPS:
        raise ValueError(f"flac: step must be one of {', '.join(STEPS)}, got {task.get('step')!r}")
    m = task["m"]
    for key in ("pm_bytes", "app_dram", "shim_dram"):
        parse_size(m[key])
    return task


def _resources(task: Dict[str, Any]) -> Resources:
    m, step = task["m"], task["step"]
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
        data = pm + {"bench": 256 << 20, "apps": parse_size(m["app_dram"]), "shim": parse_size(m["shim_dram"]),
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
