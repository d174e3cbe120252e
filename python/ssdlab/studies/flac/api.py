"""FlacFS from Python: the library file system of the flac study and its zero-copy checkpoints.

FLAC (FAST'24, "Optimizing File Systems on Heterogeneous Memory by Integrating DRAM Cache
with Virtual Memory Management") gives a file system one virtual space over DRAM and PM and
moves data by remapping pages instead of copying them. ``FlacFS`` is the library file system
on it (crate ssdlab-flac); ``engine="pagecache"`` and ``engine="dax"`` are the copying
baselines on the same emulated PM.

>>> import tempfile, os
>>> from ssdlab.studies.flac import api as flac
>>> with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
...     with flac.FlacFS(os.path.join(d, "pm.img"), create="64M", dram="16M") as fs:
...         state = fs.arrays({"w": ((256, 1024), "float32")})
...         state["w"][:] = 1.5
...         stats = flac.save_checkpoint(fs, "/ckpt", state)   # pages shared, not copied
...         state["w"][0, 0] = 0.0                              # the checkpoint keeps 1.5
...         back = flac.load_checkpoint(fs, "/ckpt")
...         float(back["w"][0, 0]), stats["mapped_bytes"] == state["w"].nbytes
(1.5, True)

Unmodified programs use FlacFS through the LD_PRELOAD shim: ``ssdlab flac run IMAGE -- cat
/flac/file`` (see :func:`shim_env`; the commands are in ``ssdlab.studies.flac.cli``).
"""

from __future__ import annotations

import ctypes
import json
import os
import time
import weakref
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ... import _native
from ...units import parse_size

PAGE = 4096
Pathish = Union[str, bytes, os.PathLike]


def _path(p: Pathish) -> bytes:
    b = os.fsencode(p)
    if not b.startswith(b"/"):
        raise ValueError(f"FlacFS paths are absolute (from the file system's root): {os.fsdecode(b)!r}")
    return b


def fs_config(image: Pathish, *, engine: str = "flac", create: Union[None, int, str] = None, dram: Union[int, str] = "256M",
              dram_dir: Optional[Pathish] = None, pm_cost: bool = True, async_load: bool = True,
              zcopy_min: Union[int, str] = "64K", lockfree_flush: bool = True, flush_interval_ms: int = 200,
              mount: str = "/", lock_wait_ms: int = 0, space: Union[None, int, str] = None,
              kernel_cost: Optional[Mapping[str, int]] = None) -> Dict[str, Any]:
    """The JSON config of a library file system (see crates/flac/src/fs/mod.rs FsConfig).
    ``kernel_cost``: per-call costs in ns charged on every call (``kernel_costs()`` measures
    them), as a kernel file system pays its crossings and VFS work."""
    if engine not in ("flac", "pagecache", "dax"):
        raise ValueError(f"engine must be 'flac', 'pagecache' or 'dax', got {engine!r}")
    cfg = json.loads(_native.flac_defaults())
    cfg["engine"] = engine
    f = cfg["flac"]
    f["pm_path"] = os.fsdecode(image)
    if create is not None:
        f["format"] = {"pm_bytes": parse_size(create, "create"), "space_bytes": parse_size(space or 0, "space"),
                       "log_bytes": 4 << 20, "kv_bytes": 16 << 20}
    f["dram_bytes"] = parse_size(dram, "dram")
    f["dram_dir"] = os.fsdecode(dram_dir) if dram_dir else None
    if not pm_cost:
        f["cost"]["enabled"] = False
    f["async_load"] = bool(async_load)
    f["lock_wait_ms"] = int(lock_wait_ms)
    cfg["zcopy_min_bytes"] = parse_size(zcopy_min, "zcopy_min")
    cfg["lockfree_flush"] = bool(lockfree_flush)
    cfg["flush_interval_ms"] = int(flush_interval_ms)
    cfg["mount"] = mount
    if kernel_cost:
        cfg["kernel_cost"] = dict(kernel_cost)
    return cfg


def kernel_costs(directory: Pathish = "/dev/shm", repeats: int = 21) -> Dict[str, int]:
    """Per-call costs (ns) of read, write, open, close, stat and lseek on the file system of
    ``directory`` (a tmpfs: the kernel's page cache with no device), each the median of
    ``repeats`` batches (crates/flac/src/kcost.rs)."""
    return run({"kind": "kernel_costs", "dir": os.fsdecode(directory), "repeats": int(repeats)})


class FlacFS:
    """A library file system on a PM image: FlacFS (``engine="flac"``) or a baseline.

    ``create``: make the image with this size if it does not exist. ``dram``: FLAC's DRAM
    (the page cache for ``pagecache``). ``pm_cost``: model PM's latency and bandwidth (on by
    default; see docs/case-studies/flac.md). One process opens an image at a time.
    """

    def __init__(self, image: Pathish, **kw: Any):
        self.image = Path(os.fsdecode(image))
        if kw.get("create") is None and not self.image.exists():
            raise FileNotFoundError(f"{self.image}: no such PM image (pass create='1G' to make one)")
        self.config = fs_config(image, **kw)
        self._fs: Any = _native.FlacFs(json.dumps(self.config))
        self._bufs: List[Tuple[int, int, Any]] = []

    @property
    def engine(self) -> str:
        return self._fs.engine

    # -- files --------------------------------------------------------------------------------
    def open(self, path: Pathish, mode: str = "r", perm: int = 0o644) -> "FlacFile":
        flags = _open_flags(mode)
        return FlacFile(self, self._fs.open(_path(path), flags, perm), mode)

    def read_bytes(self, path: Pathish) -> bytes:
        with self.open(path, "r") as f:
            return f.read()

    def write_bytes(self, path: Pathish, data: bytes) -> None:
        with self.open(path, "w") as f:
            f.write(data)

    def mkdir(self, path: Pathish, mode: int = 0o755) -> None:
        self._fs.mkdir(_path(path), mode)

    def makedirs(self, path: Pathish, exist_ok: bool = True) -> None:
        p = b""
        for part in [c for c in _path(path).split(b"/") if c]:
            p += b"/" + part
            try:
                self._fs.mkdir(p, 0o755)
            except FileExistsError:
                if not exist_ok and p == _path(path):
                    raise

    def listdir(self, path: Pathish = "/") -> List[str]:
        return [os.fsdecode(n) for n, _, _ in self._fs.listdir(_path(path))]

    def stat(self, path: Pathish, follow: bool = True) -> Dict[str, int]:
        return self._fs.stat(_path(path), follow)

    def exists(self, path: Pathish) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def remove(self, path: Pathish) -> None:
        self._fs.remove(_path(path), False)

    def rmdir(self, path: Pathish) -> None:
        self._fs.remove(_path(path), True)

    def rename(self, src: Pathish, dst: Pathish) -> None:
        self._fs.rename(_path(src), _path(dst))

    # -- FLAC memory --------------------------------------------------------------------------
    def buffer(self, nbytes: int):
        """A FLAC buffer (FlacFS only): memory that attaches to and from files without copying."""
        b = self._fs.alloc(nbytes)
        # Weak references: a buffer lives as long as the arrays on it, not as the file system.
        self._bufs = [(a, n, r) for a, n, r in self._bufs if r() is not None]
        self._bufs.append((b.addr, len(b), weakref.ref(b)))
        return b

    def arrays(self, specs: Mapping[str, Tuple[Sequence[int], Any]]) -> Dict[str, np.ndarray]:
        """numpy arrays on FLAC memory, each starting on a page boundary of one buffer (a
        model's state): they save to FlacFS by attaching their pages (:func:`save_checkpoint`)."""
        layout = []
        total = 0
        for name, (shape, dtype) in specs.items():
            dt = np.dtype(dtype)
            n = int(np.prod(shape)) * dt.itemsize
            layout.append((name, tuple(shape), dt, total, n))
            total += max(n, 1) + (-max(n, 1)) % PAGE
        buf = self.buffer(max(total, PAGE))
        return {name: _array_at(buf, off, shape, dt) for name, shape, dt, off, _ in layout}

    def is_flac_memory(self, addr: int, nbytes: int) -> bool:
        """Whether ``addr..addr+nbytes`` lies in one FLAC buffer of this file system."""
        return any(a <= addr and addr + nbytes <= a + n and r() is not None for a, n, r in self._bufs)

    # -- whole file system ---------------------------------------------------------------------
    def sync(self) -> None:
        """Commit all dirty data and metadata (one atomic transaction)."""
        self._fs.sync()

    def drop_caches(self) -> None:
        """Commit, then drop clean cached data (the next reads come from PM)."""
        self._fs.drop_caches()

    def stats(self) -> Dict[str, Any]:
        return json.loads(self._fs.stats())

    def frames_in_use(self) -> Tuple[int, int]:
        """(DRAM frames, PM frames) in use; a page shared by several files counts once."""
        return self._fs.frames_in_use()

    def check(self) -> None:
        """Raise OSError if reference counts or page tables are inconsistent."""
        self._fs.check()

    def close(self) -> None:
        """Commit everything and release the image (numpy arrays on FLAC memory keep FLAC's
        memory, and the image, until they are freed)."""
        if self._fs is not None:
            self._fs.unmount()
            self._fs = None

    def __enter__(self) -> "FlacFS":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _open_flags(mode: str) -> int:
    m = mode.replace("b", "")
    table = {"r": os.O_RDONLY, "r+": os.O_RDWR, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
             "w+": os.O_RDWR | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
             "x+": os.O_RDWR | os.O_CREAT | os.O_EXCL}
    if m not in table:
        raise ValueError(f"open mode must be one of {', '.join(table)}, got {mode!r}")
    return table[m]


def _array_at(buf: Any, off: int, shape: Tuple[int, ...], dt: np.dtype) -> np.ndarray:
    n = int(np.prod(shape)) * dt.itemsize
    mem: Any = (ctypes.c_ubyte * max(n, 1)).from_address(buf.addr + off)
    mem._flac_owner = buf  # the buffer lives as long as any array on it
    return np.frombuffer(mem, dtype=dt, count=int(np.prod(shape))).reshape(shape)


class FlacFile:
    """An open file of a :class:`FlacFS` (binary, with a position)."""

    def __init__(self, fs: FlacFS, handle: int, mode: str):
        self.fs, self.mode, self.pos = fs, mode, 0
        self.handle: Optional[int] = handle
        if "a" in mode:
            self.pos = self.size()

    def size(self) -> int:
        return self.fs._fs.fstat(self.handle)["size"]

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = max(self.size() - self.pos, 0)
        data = self.fs._fs.pread(self.handle, n, self.pos)
        self.pos += len(data)
        return data

    def write(self, data: bytes) -> int:
        if "a" in self.mode:
            self.pos = self.size()
        n = self.fs._fs.pwrite(self.handle, bytes(data), self.pos)
        self.pos += n
        return n

    def readinto(self, target: Union[np.ndarray, Any], offset: Optional[int] = None) -> Tuple[int, int, int]:
        """Read into a numpy array or FLAC buffer (attached without copying when it is FLAC
        memory and page-aligned). Returns (bytes read, bytes mapped, bytes copied)."""
        addr, n = _memory(target)
        off = self.pos if offset is None else offset
        r = self.fs._fs.read_into(self.handle, addr, n, off)
        if offset is None:
            self.pos += r[0]
        return r

    def write_from(self, source: Union[np.ndarray, Any], offset: Optional[int] = None) -> Tuple[int, int]:
        """Write a numpy array's or FLAC buffer's bytes (attached when FLAC memory).
        Returns (bytes mapped, bytes copied)."""
        addr, n = _memory(source)
        off = self.pos if offset is None else offset
        r = self.fs._fs.write_from(self.handle, addr, n, off)
        if offset is None:
            self.pos += n
        return r

    def seek(self, off: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size()}[whence]
        if base + off < 0:
            raise ValueError("seek to a negative offset")
        self.pos = base + off
        return self.pos

    def tell(self) -> int:
        return self.pos

    def truncate(self, size: Optional[int] = None) -> None:
        self.fs._fs.truncate(self.handle, self.pos if size is None else size)

    def close(self) -> None:
        if self.handle is not None:
            self.fs._fs.close(self.handle)
            self.handle = None

    def __enter__(self) -> "FlacFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _memory(obj: Any) -> Tuple[int, int]:
    """(address, length) of a contiguous numpy array or a FLAC buffer."""
    if isinstance(obj, np.ndarray):
        if not obj.flags["C_CONTIGUOUS"]:
            raise ValueError("zero-copy I/O needs a C-contiguous array")
        return obj.ctypes.data, obj.nbytes
    if hasattr(obj, "addr"):
        return obj.addr, len(obj)
    raise TypeError(f"expected a numpy array or a FLAC buffer, got {type(obj).__name__}")


# -- checkpoints --------------------------------------------------------------------------------

def save_checkpoint(fs: FlacFS, path: Pathish, arrays: Mapping[str, np.ndarray]) -> Dict[str, Any]:
    """Save named arrays to ``path`` (data, page-aligned per array) and ``path.json`` (the
    manifest), then commit. Arrays on FLAC memory (:meth:`FlacFS.arrays`) are attached: the
    checkpoint shares their pages with the live state (copy-on-write). Returns timing and
    how many bytes were mapped vs copied."""
    t0 = time.perf_counter()
    entries, off = [], 0
    mapped = copied = 0
    parent = os.path.dirname(os.fsdecode(path))
    if parent not in ("", "/"):
        fs.makedirs(parent)
    with fs.open(path, "w") as f:
        for name, a in arrays.items():
            a = a if a.flags["C_CONTIGUOUS"] else np.ascontiguousarray(a)
            entries.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": off, "nbytes": a.nbytes})
            if a.nbytes:
                m, c = f.write_from(a, offset=off)
                mapped, copied = mapped + m, copied + c
            off += a.nbytes + (-a.nbytes) % PAGE
    fs.write_bytes(os.fsdecode(path) + ".json", json.dumps({"arrays": entries}).encode())
    fs.sync()
    return {"seconds": time.perf_counter() - t0, "bytes": sum(e["nbytes"] for e in entries), "mapped_bytes": mapped, "copied_bytes": copied}


def load_checkpoint(fs: FlacFS, path: Pathish) -> Dict[str, np.ndarray]:
    """Load a checkpoint saved by :func:`save_checkpoint` (into FLAC memory on FlacFS, by
    attaching the file's pages; into ordinary arrays on the baselines)."""
    try:
        manifest = json.loads(fs.read_bytes(os.fsdecode(path) + ".json"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{os.fsdecode(path)}: no checkpoint (missing {os.fsdecode(path)}.json)") from None
    specs = {e["name"]: (tuple(e["shape"]), np.dtype(e["dtype"])) for e in manifest["arrays"]}
    out = fs.arrays(specs) if fs.engine == "flac" else {n: np.empty(s, d) for n, (s, d) in specs.items()}
    with fs.open(path, "r") as f:
        for e in manifest["arrays"]:
            if e["nbytes"]:
                n, _, _ = f.readinto(out[e["name"]], offset=e["offset"])
                if n != e["nbytes"]:
                    raise OSError(f"{os.fsdecode(path)}: array {e['name']!r} is truncated ({n} of {e['nbytes']} bytes)")
    return out


def upload_checkpoint(fs: FlacFS, path: Pathish, dest_dir: Pathish) -> Dict[str, Any]:
    """Copy a checkpoint to an object store simulated by local files (one object per
    array in ``dest_dir``). Returns seconds and bytes."""
    t0 = time.perf_counter()
    dest = Path(os.fsdecode(dest_dir))
    dest.mkdir(parents=True, exist_ok=True)
    arrays = load_checkpoint(fs, path)
    total = 0
    for name, a in arrays.items():
        with open(dest / f"{name}.bin", "wb") as out:
            out.write(a.data.cast("B"))
        total += a.nbytes
    (dest / "manifest.json").write_bytes(fs.read_bytes(os.fsdecode(path) + ".json"))
    return {"seconds": time.perf_counter() - t0, "bytes": total}


# -- the runner and the shim ---------------------------------------------------------------------

def run(spec: Mapping[str, Any]) -> Any:
    """Run a microbenchmark, application or bench spec in Rust (ssdlab_flac::run)."""
    return json.loads(_native.flac_run(json.dumps(spec)))


def shim_path() -> Path:
    """The LD_PRELOAD shim (target/release/libflacfs.so of the checkout, or SSDLAB_FLAC_SHIM)."""
    env = os.environ.get("SSDLAB_FLAC_SHIM")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"SSDLAB_FLAC_SHIM={env}: no such file")
        return p
    here = Path(__file__).resolve()
    for root in [Path.cwd(), *here.parents]:
        for profile in ("release", "debug"):
            p = root / "target" / profile / "libflacfs.so"
            if p.is_file():
                return p
    raise FileNotFoundError("the FlacFS shim is not built: run `cargo build --release -p ssdlab-flac-shim` "
                            "(make setup does) or set SSDLAB_FLAC_SHIM")


def shim_env(image: Pathish, *, mount: str = "/flac", engine: str = "flac", create: Union[None, int, str] = None,
             dram: Union[int, str] = "256M", dram_dir: Optional[Pathish] = None, pm_cost: bool = True,
             zcopy_min: Union[int, str] = "64K", async_load: bool = True, lockfree_flush: bool = True,
             stats: Optional[Pathish] = None, wait_ms: int = 30000, base: Optional[Mapping[str, str]] = None,
             kernel_cost: Optional[Mapping[str, int]] = None) -> Dict[str, str]:
    """Environment for running an unmodified program on FlacFS through the LD_PRELOAD shim."""
    env = dict(os.environ if base is None else base)
    if engine not in ("flac", "pagecache", "dax"):
        raise ValueError(f"engine must be 'flac', 'pagecache' or 'dax', got {engine!r}")
    env.update({
        "LD_PRELOAD": str(shim_path()), "FLACFS_IMAGE": os.fsdecode(image), "FLACFS_MOUNT": mount,
        "FLACFS_ENGINE": engine, "FLACFS_DRAM": str(parse_size(dram, "dram")),
        "FLACFS_PM_COST": "on" if pm_cost else "off", "FLACFS_ZCOPY_MIN": str(parse_size(zcopy_min, "zcopy_min")),
        "FLACFS_ASYNC_LOAD": "on" if async_load else "off", "FLACFS_LOCKFREE_FLUSH": "on" if lockfree_flush else "off",
        "FLACFS_WAIT_MS": str(wait_ms),
    })
    if create is not None:
        env["FLACFS_CREATE"] = str(parse_size(create, "create"))
    if dram_dir:
        env["FLACFS_DRAM_DIR"] = os.fsdecode(dram_dir)
    if stats:
        env["FLACFS_STATS"] = os.fsdecode(stats)
    if kernel_cost:
        env["FLACFS_KERNEL_COST"] = json.dumps(dict(kernel_cost))
    else:
        env.pop("FLACFS_KERNEL_COST", None)
    return env
