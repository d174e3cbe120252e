"""The flac case study from Python and from unmodified programs:

- attach + copy-on-write: data moved without copying between numpy arrays on FLAC memory and
  FlacFS files, and a write on either side never changes the other;
- recovery after kill -9 during a commit (at every stage of pflush_commit, and at random
  times): metadata and data agree and everything committed is there;
- FlacFS through the LD_PRELOAD shim: a conformance run of coreutils, tar and grep, compared
  operation by operation with the same run on the kernel's tmpfs;
- zero-copy checkpoints: the round trip, and repeated saves sharing pages;
- the `ssdlab flac` commands and their errors.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from clitools import ssdlab
from ssdlab.studies.flac import api as flac

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (tmpfs) for PM images")


def fsopen(image, **kw):
    kw.setdefault("create", "96M")
    kw.setdefault("dram", "32M")
    kw.setdefault("pm_cost", False)
    return flac.FlacFS(image, **kw)


# -- attach and copy-on-write ---------------------------------------------------------------------

def test_write_after_attach_never_changes_the_source(shm):
    with fsopen(shm / "a.img") as fs:
        state = fs.arrays({"w": ((64, 4096), "uint8")})
        w = state["w"]
        w[:] = np.arange(w.size, dtype=np.uint64).reshape(w.shape).astype(np.uint8)
        saved = w.copy()
        with fs.open("/f", "w") as f:
            mapped, copied = f.write_from(w)
        assert (mapped, copied) == (w.nbytes, 0), "a page-aligned FLAC array is attached, not copied"
        # The application writes its array after the attach: the file keeps what was written.
        w[3, 100] ^= 0xFF
        w[-1, :] = 7
        assert fs.read_bytes("/f") == saved.tobytes()
        assert fs.stats()["data"]["cow_faults"] >= 2
        # The file is rewritten in place: the array keeps its own bytes.
        mine = w.copy()
        with fs.open("/f", "r+") as f:
            f.seek(4096 * 5 + 11)
            f.write(b"overwritten")
        assert np.array_equal(w, mine)

        # Reading attaches the file's pages into FLAC memory; either side's writes stay on it.
        dst = fs.arrays({"r": ((64, 4096), "uint8")})["r"]
        with fs.open("/f") as f:
            n, mapped, copied = f.readinto(dst)
        assert (n, mapped) == (dst.nbytes, dst.nbytes)
        file_now = fs.read_bytes("/f")
        assert dst.tobytes() == file_now
        dst[0, 0] ^= 1
        assert fs.read_bytes("/f") == file_now
        with fs.open("/f", "r+") as f:
            f.write(b"\x00" * 4096)
        assert dst[1:].tobytes() == file_now[4096:]
        # Into ordinary numpy memory: private mappings (the kernel copies on write).
        plain = np.zeros((64, 4096), np.uint8)
        if plain.ctypes.data % 4096 == 0:
            with fs.open("/f") as f:
                f.readinto(plain)
            plain[:] = 1
        assert fs.read_bytes("/f")[4096:] == file_now[4096:]
        fs.check()


def test_baselines_copy_and_agree(shm):
    data = os.urandom(300_000)
    for engine in ("pagecache", "dax"):
        with fsopen(shm / f"{engine}.img", engine=engine) as fs:
            assert fs.engine == engine
            fs.makedirs("/d/e")
            fs.write_bytes("/d/e/x", data)
            arr = np.frombuffer(data, np.uint8).copy()
            with fs.open("/y", "w") as f:
                mapped, copied = f.write_from(arr)
            assert (mapped, copied) == (0, len(data)), "the baselines copy"
            assert fs.read_bytes("/d/e/x") == data == fs.read_bytes("/y")
            with pytest.raises(ValueError, match="FlacFS only"):
                fs.buffer(4096)
        with fsopen(shm / f"{engine}.img", engine=engine, create=None) as fs:
            assert fs.read_bytes("/d/e/x") == data


def test_errors_are_oserrors_with_errno(shm):
    with fsopen(shm / "e.img") as fs:
        with pytest.raises(FileNotFoundError):
            fs.open("/missing")
        fs.mkdir("/d")
        with pytest.raises(FileExistsError):
            fs.mkdir("/d")
        fs.write_bytes("/d/f", b"x")
        with pytest.raises(OSError) as e:
            fs.rmdir("/d")
        assert e.value.errno == 39  # ENOTEMPTY
        with pytest.raises(NotADirectoryError):
            fs.open("/d/f/g", "w")
        with pytest.raises(ValueError, match="absolute"):
            fs.open("relative")
        with pytest.raises(ValueError, match="open mode"):
            fs.open("/d/f", "rw")
    with pytest.raises(FileNotFoundError, match="create="):
        flac.FlacFS(shm / "none.img")
    with pytest.raises(ValueError, match="dram"):
        flac.FlacFS(shm / "x.img", create="64M", dram="lots")


# -- recovery after kill -9 ------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, hashlib
    from ssdlab.studies.flac import api as flac
    def data(g, i):
        seed = hashlib.sha256(f"{g}/{i}".encode()).digest()
        return (seed * (40_000 + 3_000 * i))[: 123_456 + 50_000 * i]
    fs = flac.FlacFS(sys.argv[1], create="96M", dram="32M", pm_cost=False, flush_interval_ms=0, lock_wait_ms=LOCK_WAIT_MS)
    print("opened", flush=True)
    g = int(fs.read_bytes("/gen")) if fs.exists("/gen") else 0
    while True:
        g += 1
        for i in range(3):
            fs.write_bytes(f"/dir{i}/f", data(g, i)) if fs.exists(f"/dir{i}") else (fs.mkdir(f"/dir{i}"), fs.write_bytes(f"/dir{i}/f", data(g, i)))
        fs.write_bytes("/gen", str(g).encode())
        fs.sync()
        print("committed", g, flush=True)
""")

# A restarted program waits this long for the image, as a supervisor's restart would: the
# image is released when the killed process's last reference to it goes, which the kernel may
# finish after reporting the process dead. The open's error names the holder if it never goes.
LOCK_WAIT_MS = 10_000
CHILD = CHILD.replace("LOCK_WAIT_MS", str(LOCK_WAIT_MS))


def child_data(g, i):
    seed = hashlib.sha256(f"{g}/{i}".encode()).digest()
    return (seed * (40_000 + 3_000 * i))[: 123_456 + 50_000 * i]


def run_child(image, crash_at=None, kill_after=None):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("FLAC_CRASH_AT", None)
    if crash_at:
        env["FLAC_CRASH_AT"] = crash_at
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(image)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = b""
    if kill_after is not None:
        # Random kills count from the open: a busy machine may take longer than the delay
        # just to start Python, which would kill the child before it made the image.
        first = p.stdout.readline()
        time.sleep(kill_after)
        p.send_signal(signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    out = first + out
    assert p.returncode == -signal.SIGKILL, f"the child should die by SIGKILL: {p.returncode}\n{err.decode()}"
    gens = [int(m) for m in re.findall(rb"committed (\d+)", out)]
    return gens[-1] if gens else 0


def check_recovered(image, reported):
    with fsopen(image, create=None, lock_wait_ms=LOCK_WAIT_MS) as fs:
        fs.check()
        g = int(fs.read_bytes("/gen")) if fs.exists("/gen") else 0
        assert g in (reported, reported + 1), f"recovered generation {g}, the child reported {reported} committed"
        for i in range(3):
            if g == 0:
                assert not fs.exists(f"/dir{i}/f") or fs.read_bytes(f"/dir{i}/f") == b""
            else:
                assert fs.read_bytes(f"/dir{i}/f") == child_data(g, i), f"file {i} is not generation {g}'s"
        return g


@pytest.mark.parametrize("point", ["flush.after_copy", "log.before_header", "commit.after_log", "commit.mid_apply", "commit.after_apply"])
def test_kill_during_commit_keeps_metadata_and_data_consistent(shm, point):
    img = shm / "crash.img"
    # An image with generation 1 committed (the first run also commits the new file system).
    assert check_recovered(img, run_child(img, crash_at="commit.after_apply:2")) == 1
    # Generation 2 commits, generation 3 dies at `point`.
    last = run_child(img, crash_at=f"{point}:2")
    assert last == 2, "dies in the second commit of the run"
    g = check_recovered(img, last)
    assert g == (3 if point.startswith("commit.") else 2), "committed: kept; not committed: lost"
    # The recovered image goes on: two more commits on top of it.
    last = run_child(img, crash_at="commit.after_apply:2")
    assert check_recovered(img, last) == g + 2


def test_kill_at_random_times(shm):
    img = shm / "random.img"
    prev = 0
    for delay in (0.6, 0.9, 1.3):
        last = run_child(img, kill_after=delay)
        g = check_recovered(img, max(last, prev))
        assert g >= prev
        prev = g


# -- unmodified programs through the shim ------------------------------------------------------------

@pytest.fixture(scope="module")
def shim_built():
    try:
        return flac.shim_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


# A conformance run: every step runs as its own process, once on FlacFS through the shim and
# once on a directory of the kernel's tmpfs; outputs, errors and exit codes must match. {P} is
# the file system's directory, {H} a host directory with input files.
STEPS = [
    "mkdir {P}/d",
    "mkdir {P}/d",
    "mkdir -p {P}/d/e/f",
    "sh -c 'echo hello world | tee {P}/d/a.txt'",
    "cat {P}/d/a.txt",
    "cat {P}/d/missing",
    "cp {H}/big.bin {P}/d/big.bin",
    "cmp {H}/big.bin {P}/d/big.bin",
    "md5sum {P}/d/big.bin",
    "sha256sum {P}/d/a.txt",
    "wc -c {P}/d/big.bin",
    "head -c 100 {P}/d/big.bin",
    "tail -c 4097 {P}/d/big.bin",
    "dd if={P}/d/big.bin of={P}/d/dd.bin bs=65536 skip=1 count=3 status=none",
    "cmp {P}/d/dd.bin {H}/big.bin -i 0:65536 -n 196608",
    "cp {H}/lines.txt {P}/d/lines.txt",
    "grep -c persistent {P}/d/lines.txt",
    "grep -n 'memory persistent' {P}/d/lines.txt",
    "grep -r -l persistent {P}/d | sort",
    "sort -n -o {P}/d/sorted.txt {P}/d/lines.txt",
    "md5sum {P}/d/sorted.txt",
    "sort -r {P}/d/lines.txt",
    "split -l 100 {P}/d/lines.txt {P}/d/e/part_",
    "ls {P}/d/e",
    "cat {P}/d/e/part_aa {P}/d/e/part_ab {P}/d/e/part_ac {P}/d/e/part_ad {P}/d/e/part_ae",
    "ln -s a.txt {P}/d/link",
    "readlink {P}/d/link",
    "cat {P}/d/link",
    "ln {P}/d/a.txt {P}/d/hard",
    "stat -c '%n %s %h %F %a' {P}/d/a.txt {P}/d/hard {P}/d/link",
    "stat -c '%n %h %F %a' {P}/d/e",
    "stat -L -c '%n %s %F' {P}/d/link",
    "mv {P}/d/hard {P}/d/e/moved",
    "ls {P}/d {P}/d/e",
    "chmod 600 {P}/d/e/moved",
    "stat -c '%a %h' {P}/d/e/moved",
    "touch -d '2001-02-03 04:05:06' {P}/d/a.txt",
    "stat -c '%Y %X' {P}/d/a.txt",
    "truncate -s 5 {P}/d/a.txt",
    "cat {P}/d/a.txt",
    "truncate -s 10000 {P}/d/a.txt",
    "md5sum {P}/d/a.txt",
    "find {P}/d -name 'part_*' -type f | sort",
    "du -s --apparent-size -B1 {P}/d/big.bin",
    "tar -cf {P}/t.tar -C {P} d",
    "tar -tf {P}/t.tar | sort",
    "mkdir {P}/x",
    "tar -xf {P}/t.tar -C {P}/x",
    "diff -r {P}/d {P}/x/d",
    "tar -cf - -C {P} d | tar -tf - | sort",
    "rmdir {P}/d",
    "rm {P}/d/e",
    "rm -r {P}/x",
    "ls -a {P}",
    "cat {P}/x/d/a.txt",
    "rm -rf {P}/d/e",
    "ls {P}/d",
]


@pytest.fixture(scope="module")
def host_inputs(tmp_path_factory):
    h = tmp_path_factory.mktemp("host")
    rng = np.random.default_rng(7)
    (h / "big.bin").write_bytes(rng.integers(0, 256, 1_234_567, dtype=np.uint8).tobytes())
    words = ["cache", "memory", "persistent", "page", "frame", "remap", "zero", "copy"]
    lines = [f"{rng.integers(0, 10**6)} " + " ".join(rng.choice(words, 5)) for _ in range(450)]
    (h / "lines.txt").write_text("\n".join(lines) + "\n")
    return h


def run_steps(prefix, host, env):
    out = []
    for step in STEPS:
        cmd = step.format(P=prefix, H=host)
        p = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, timeout=60)
        text = (p.stdout + b"\n--stderr--\n" + p.stderr).decode(errors="replace").replace(prefix, "{P}").replace(str(host), "{H}")
        out.append((step, p.returncode, text))
    return out


def test_coreutils_tar_grep_through_the_shim_match_the_kernel(shim_built, shm, host_inputs):
    ref_dir = shm / "ref"
    ref_dir.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLACFS_") and k != "LD_PRELOAD"}
    base.update({"LC_ALL": "C", "TZ": "UTC", "OPENBLAS_NUM_THREADS": "1"})
    expected = run_steps(str(ref_dir), host_inputs, {**base, "HOME": str(shm)})
    env = {**flac.shim_env(shm / "fs.img", mount="/flacfs-test", create="192M", dram="32M", pm_cost=False, base=base), "HOME": str(shm)}
    got = run_steps("/flacfs-test", host_inputs, env)
    for (step, rc_want, want), (_, rc_got, text) in zip(expected, got, strict=True):
        assert (rc_got, text) == (rc_want, want), f"step {step!r} differs on FlacFS"
    # The image holds what the programs left, checkable after they are gone.
    with fsopen(shm / "fs.img", create=None) as fs:
        fs.check()
        assert sorted(fs.listdir("/")) == ["d", "t.tar"]
        assert fs.read_bytes("/d/big.bin") == (host_inputs / "big.bin").read_bytes()


def test_shim_engines_zero_copy_and_stats(shim_built, shm, host_inputs):
    big = (host_inputs / "big.bin").read_bytes()
    for engine in ("flac", "pagecache", "dax"):
        stats = shm / f"{engine}.stats"
        env = flac.shim_env(shm / f"{engine}.img", mount="/flacfs-test", engine=engine, create="128M", dram="32M", stats=stats, zcopy_min="64K")
        subprocess.run(["cp", str(host_inputs / "big.bin"), "/flacfs-test/b"], env=env, check=True)
        # cat reads in 128 KiB page-aligned buffers: FlacFS attaches, the baselines copy.
        p = subprocess.run(["cat", "/flacfs-test/b"], env=env, capture_output=True, check=True)
        assert p.stdout == big
        lines = stats.read_text().splitlines()
        assert len(lines) == 2
        import json
        cat = json.loads(lines[-1])
        assert cat["engine"] == engine and cat["read_bytes"] == len(big)
        if engine == "flac":
            assert cat["mapped_bytes"] > 0
        else:
            assert cat["mapped_bytes"] == 0


def test_shim_errors_and_inactive_paths(shim_built, shm):
    env = flac.shim_env(shm / "s.img", mount="/flacfs-test", create="64M", dram="16M")
    # Host paths are untouched; a command on FlacFS sees its errors as the kernel's.
    p = subprocess.run(["cat", "/flacfs-test/nope"], env=env, capture_output=True, text=True)
    assert p.returncode == 1 and "No such file or directory" in p.stderr
    p = subprocess.run(["ls", str(shm)], env=env, capture_output=True, text=True, check=True)
    assert "s.img" in p.stdout
    # A bad setting is one clear line.
    bad = {**env, "FLACFS_ENGINE": "zfs"}
    p = subprocess.run(["ls", "/flacfs-test"], env=bad, capture_output=True, text=True)
    assert p.returncode != 0 and "FLACFS_ENGINE" in p.stderr
    # Without FLACFS_IMAGE the shim passes everything through.
    off = {k: v for k, v in env.items() if not k.startswith("FLACFS_")}
    p = subprocess.run(["ls", "/flacfs-test"], env=off, capture_output=True, text=True)
    assert p.returncode != 0 and "No such file" in p.stderr


# -- checkpoints -----------------------------------------------------------------------------------------

def test_checkpoint_round_trip_shares_pages(shm):
    rng = np.random.default_rng(1)
    with fsopen(shm / "ck.img", create="256M", dram="64M") as fs:
        state = fs.arrays({"w1": ((512, 256), "float32"), "w2": ((1000,), "int64"), "empty": ((0,), "float32")})
        for a in state.values():
            a[...] = rng.random(a.shape) * 100
        first = {k: v.copy() for k, v in state.items()}
        s = flac.save_checkpoint(fs, "/ckpt/0", state)
        # Whole pages are attached (from 64 KiB, the zero-copy threshold); the rest is copied.
        whole = [a.nbytes // 4096 * 4096 for a in state.values()]
        assert s["mapped_bytes"] == sum(w for w in whole if w >= 65536) == 512 * 1024
        assert s["mapped_bytes"] + s["copied_bytes"] == sum(a.nbytes for a in state.values())
        dram0, pm0 = fs.frames_in_use()
        # Training: a quarter of w1's pages change (its first 128 rows, 4 rows a page); save
        # again: the unchanged pages are shared.
        state["w1"][:128] += 1
        flac.save_checkpoint(fs, "/ckpt/1", state)
        dram1, pm1 = fs.frames_in_use()
        nbytes = sum(a.nbytes for a in state.values())
        assert (pm1 - pm0) * 4096 < 0.6 * nbytes, "the second checkpoint shares its unchanged pages"
        back0 = flac.load_checkpoint(fs, "/ckpt/0")
        back1 = flac.load_checkpoint(fs, "/ckpt/1")
        for k in state:
            assert np.array_equal(back0[k], first[k]), k
            assert np.array_equal(back1[k], state[k]), k
        # Restored arrays are writable and independent of the checkpoint.
        back1["w1"][:] = 0
        assert np.array_equal(flac.load_checkpoint(fs, "/ckpt/1")["w1"], state["w1"])
        up = flac.upload_checkpoint(fs, "/ckpt/1", shm / "obs")
        assert up["bytes"] == nbytes
        assert np.array_equal(np.fromfile(shm / "obs" / "w1.bin", np.float32).reshape(512, 256), state["w1"])
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            flac.load_checkpoint(fs, "/ckpt/9")
        fs.check()
    # Arrays on FLAC memory keep the image open; with them gone it can be mounted again.
    del state, back0, back1, a
    import gc
    gc.collect()
    # And after a remount (the checkpoint is in PM).
    with fsopen(shm / "ck.img", create=None) as fs:
        back = flac.load_checkpoint(fs, "/ckpt/0")
        assert np.array_equal(back["w2"], first["w2"])


# -- the commands ---------------------------------------------------------------------------------------

def test_cli_mkfs_fsck_ls_run(shim_built, shm):
    img = shm / "cli.img"
    assert "FLAC PM image" in ssdlab("flac", "mkfs", img, "--size", "64M").stdout
    p = ssdlab("flac", "mkfs", img, "--size", "64M", check=False)
    assert p.returncode == 2 and "exists" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "ssdlab.cli", "flac", "run", str(img), "--", "sh", "-c",
                        "mkdir /flac/d && echo hi | tee /flac/d/f > /dev/null && cat /flac/d/f"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "hi\n", p.stderr
    assert "0644" in ssdlab("flac", "ls", img, "/d").stdout
    assert "consistent" in ssdlab("flac", "fsck", img).stdout
    for args, msg in ((["flac", "run", shm / "none.img", "--", "ls"], "no such PM image"),
                      (["flac", "run", img, "--", "no-such-command"], "command not found"),
                      (["flac", "run", img], "give a command"),
                      (["flac", "mkfs", shm / "y.img", "--size", "big"], "--size"),
                      (["flac", "fsck", shm / "none.img"], "no such PM image")):
        p = ssdlab(*args, check=False)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    junk = shm / "junk.img"
    junk.write_bytes(b"x" * 8192)
    p = ssdlab("flac", "fsck", junk, check=False)
    assert p.returncode == 2 and "not a FLAC PM image" in p.stderr
    # The README's form: options after the image, the command after --.
    new = shm / "new.img"
    # (The shell itself opens no file under /flac: an image is opened by one process at a time.)
    p = ssdlab("flac", "run", new, "--create", "64M", "--dram", "8M", "--", "sh", "-c", "echo hi | tee /flac/f > /dev/null && cat /flac/f")
    assert p.stdout == "hi\n" and "hi" in ssdlab("flac", "run", new, "--", "cat", "/flac/f").stdout


@pytest.mark.parametrize("option, message", [
    (["--create", "-5"], "argument --create: '-5' is not a size"),
    (["--dram", "0"], "argument --dram: 0: must be at least 2.0 MiB"),
    (["--dram", "3M"], "argument --dram: 3M: must be a multiple of 2.0 MiB"),
    (["--zcopy-min", "-1"], "argument --zcopy-min: '-1' is not a size"),
    (["--mount", "/"], "argument --mount: '/': the mount point must be a directory below /"),
    (["--mount", "flac"], "argument --mount: 'flac': give an absolute path"),
], ids=["create", "dram-0", "dram-odd", "zcopy-min", "mount-root", "mount-relative"])
def test_cli_run_refuses_bad_options_before_running_anything(shm, option, message):
    """Before or after the image: one line, exit 2, and the command is not run (at --mount /
    it used to run on the real file system)."""
    marker = shm / "ran"
    for argv in (["flac", "run", *option, shm / "x.img", "--", "touch", marker],
                 ["flac", "run", shm / "x.img", *option, "--", "touch", marker]):
        p = ssdlab(*argv, check=False)
        assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert not marker.exists()
    p = ssdlab("flac", "run", shm / "x.img", "--create", "64M", "touch", marker, check=False)
    assert p.returncode == 2 and "put the command after --" in p.stderr and not marker.exists(), p.stderr


# -- the reproduction ------------------------------------------------------------------------------------

TINY = """
[quick]
huge_pages = false
pm_bytes = "384M"
io_sizes = [65536, 2097152]
cached = { data = "32M", dram = "64M" }
larger = { data = "128M", dram = "64M" }
point_bytes = "16M"
small_point_bytes = "4M"
threads = [1, 2]
repeats = 1
tree = { files = 16, bytes = "4M" }
bigsort_ints = 262144
run_ints = 65536
app_dram = "64M"
shim_tree = { files = 8, bytes = "1M" }
shim_sort_ints = 20000
shim_dram = "32M"
shim_big = "4M"
ext4 = false
ablation_flush = { io = 65536, data = "16M", dram = "64M", threads = 2, bytes = "8M", flush_interval_ms = 2 }
ablation_load = { io = 2097152, data = "128M", dram = "64M", bytes = "16M" }
checkpoint = { state = "16M", tensors = 4, saves = 2, update = 0.25 }
"""


@pytest.fixture(scope="module")
def tiny_report(shim_built, tmp_path_factory):
    """`ssdlab reproduce flac --quick` on the sweep engine at a tiny scale (one seed: every step
    a point); its output folder."""
    tmp = tmp_path_factory.mktemp("flac-reproduce")
    root = Path(__file__).resolve().parents[1]
    head = (root / "experiments" / "flac" / "experiment.toml").read_text().split("[quick]")[0]
    exp = tmp / "experiments" / "flac"
    exp.mkdir(parents=True)
    (exp / "experiment.toml").write_text(head + TINY)
    env = {**os.environ, "SSDLAB_EXPERIMENTS": str(tmp / "experiments")}
    p = subprocess.run([sys.executable, "-m", "ssdlab.cli", "reproduce", "flac", "--quick", "--out", str(tmp / "reports")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return tmp / "reports" / "flac"


def test_reproduce_writes_the_claims_figures_and_csvs(tiny_report):
    """The report's claims table names the document's claims; figures and tables are written."""
    out = tiny_report
    md = (out / "report.md").read_text()
    for claim in ("2 MiB reads, FlacFS vs page-cache FS", "2 MiB reads, FlacFS vs DAX FS",
                  "applications in process, smallest speedup of FlacFS vs DAX FS", "background flushing's loss",
                  "loading on a miss", "grep (cold cache, in process), FlacFS vs DAX FS",
                  "tar (unmodified, via the shim), FlacFS vs page-cache FS", "checkpoint space shared (natural dedup)"):
        assert claim in md, claim
    assert "1 seed (42)" in md
    for f in ("micro.png", "scaling.png", "apps.png", "checkpoint.png", "micro.csv", "apps.csv", "shim.csv", "ablations.csv",
              "results.csv"):
        assert (out / f).stat().st_size > 0, f
    ck = {r["mode"]: r for r in json.loads((out / "results.json").read_text())["steps"]["checkpoint"]["42"]}
    # Two saves of 16 MiB with a quarter of the pages changed: some pages shared, where the
    # tmpfs files hold two full copies (the fault-around window copies pages near a changed
    # one too, so fewer are shared than changed).
    assert ck["flac-zero-copy"]["pm_frames_bytes"] < ck["tmpfs"]["pm_frames_bytes"] == ck["tmpfs"]["logical_bytes"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        ["bench", "micro", "scaling", "apps", "shim", "ablations", "checkpoint"])


def test_the_verdicts_are_the_judges_and_the_report_shows_them(tiny_report):
    from ssdlab.studies.verdict import check_saved, load, table

    doc, judged = load(tiny_report / "verdicts.json")
    assert check_saved(tiny_report / "verdicts.json") == []
    md = (tiny_report / "report.md").read_text()
    assert all(line in md.splitlines() for line in table(judged))
    assert (doc["study"], doc["mode"]) == ("flac", "quick")
    assert sorted(j.claim.what for j in judged if j.claim.headline) == [
        "2 MiB reads, FlacFS vs DAX FS", "2 MiB reads, FlacFS vs page-cache FS",
        "applications in process, smallest speedup of FlacFS vs DAX FS",
        "applications in process, smallest speedup of FlacFS vs page-cache FS"]
    # No explanation the runs do not measure.
    assert "spends most of its time computing" not in md


def test_the_report_takes_one_sample_per_seed(tiny_report, tmp_path):
    """The report of a mode with two seeds (here the tiny run's points, each standing for both
    seeds) judges every measured claim on two samples, with an interval."""
    from ssdlab.studies.base import PointResult
    from ssdlab.studies.flac.report import write_report
    from ssdlab.config import read_toml
    from ssdlab.studies.verdict import check_saved, load

    spec = read_toml(tiny_report.parent.parent / "experiments" / "flac" / "experiment.toml", "experiment file")
    spec["quick"]["seeds"] = [42, 43]
    results = {}
    for run in (tiny_report / "runs").iterdir():
        metrics = json.loads((run / "metrics.json").read_text())
        names = [run.name] if run.name == "bench" else [f"{run.name}_s42", f"{run.name}_s43"]
        for n in names:
            results[n] = PointResult(n, {}, metrics, run)
    write_report(spec, "quick", tmp_path, results, lambda s: None)
    assert check_saved(tmp_path / "verdicts.json") == []
    _, judged = load(tmp_path / "verdicts.json")
    measured = [j for j in judged if j.ours is not None]
    assert measured and all(j.ours.n == 2 and j.ours.lo is not None for j in measured)
    assert "2 seeds (42, 43)" in (tmp_path / "report.md").read_text()


def test_sequential_writes_many_times_the_dram_cache(shm):
    """A file grown 2 MiB at a time to 16x FlacFS's DRAM (8 MiB), with the background flusher
    on: every write succeeds (writers commit and evict as they go) and the bytes read back."""
    chunk = bytes(range(256)) * (8 << 10)  # 2 MiB
    with fsopen(shm / "big.img", create="256M", dram="8M", pm_cost=True) as fs:
        with fs.open("/big", "w") as f:
            for i in range(64):
                f.write(chunk[i:] + chunk[:i])
        with fs.open("/big") as f:
            for i in range(64):
                assert f.read(len(chunk)) == chunk[i:] + chunk[:i], i


@pytest.mark.parametrize("lockfree", [True, False], ids=["lock-free-flush", "copying-flush"])
def test_a_files_last_writes_survive_a_remount_with_the_flusher_beside_the_writers(shm, lockfree):
    """64 MiB files written in tar-sized (10 KiB) pieces on FlacFS by two threads, while the
    background flusher syncs beside them (each write above the background dirty ratio kicks
    it), then read after a remount. The sync used to mark an inode committed after encoding
    it, so writes that slipped in between were never committed: a file came back 20-80 KiB
    short (tar archives cut short through the shim), in 8 of 10 tries with one writer; without
    the fix this test failed in each of two runs. (A first fix also cleared the mark of inodes
    already queued for the next sync, which queued them twice and deadlocked the copying flush
    in the reproduction's ablation step, one run in two; this test did not catch that one.)"""
    import threading

    data = [np.random.default_rng(k).integers(0, 256, 6564 * 10240, dtype=np.uint8).tobytes() for k in (3, 4)]
    for trial in range(2):
        img = shm / f"t{trial}.img"
        errors = []
        with fsopen(img, create="3G", dram="256M", pm_cost=True, dram_dir=shm, lockfree_flush=lockfree) as fs:
            def write(k, errors=errors):
                try:
                    with fs.open(f"/t{k}", "w") as f:
                        for off in range(0, len(data[k]), 10240):
                            f.write(data[k][off:off + 10240])
                except Exception as e:  # reported below
                    errors.append(e)
            threads = [threading.Thread(target=write, args=(k,), daemon=True) for k in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not any(t.is_alive() for t in threads), f"try {trial}: the writers hang (deadlock with the flusher)"
            assert not errors, errors
        with fsopen(img, create=None, dram="256M", dram_dir=shm) as fs:
            for k in (0, 1):
                got = fs.read_bytes(f"/t{k}")
                assert len(got) == len(data[k]), f"try {trial}, file {k}: {len(data[k]) - len(got)} bytes lost"
                assert got == data[k], f"try {trial}, file {k}"
        img.unlink()


def test_work_directories_of_killed_runs_are_removed(tmp_path):
    from ssdlab.studies.flac.runner import Workdir, remove_stale_workdirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{Workdir.PREFIX}stale"
    stale.mkdir()
    (stale / Workdir.OWNER).write_text(str(dead.pid))
    (stale / "fs.img").write_bytes(b"x" * 4096)
    live = tmp_path / f"{Workdir.PREFIX}live"
    live.mkdir()
    (live / Workdir.OWNER).write_text(str(os.getpid()))
    unknown = tmp_path / f"{Workdir.PREFIX}unknown"
    unknown.mkdir()
    assert remove_stale_workdirs(tmp_path) == 1
    assert not stale.exists() and live.exists() and unknown.exists()


def test_the_checkpoint_memory_estimate_covers_its_copying_modes():
    # The scheduler starts a step only if its estimate fits in memory: the checkpoint step's
    # tmpfs mode holds the live state and every save as files, which on a small PM image is
    # more than the FlacFS modes' image and DRAM pool.
    from ssdlab.studies.flac.runner import _resources
    from ssdlab.studies.reproduce import load_spec

    m = dict(load_spec("flac")["quick"], pm_bytes="1G", checkpoint={"state": "1G", "tensors": 4, "saves": 8, "update": 0.25})
    need = _resources({"step": "checkpoint", "m": m}).memory_bytes
    assert need >= (1 + 8) * (1 << 30)
    # With a large image, the image, the pool and the copying mode's arrays are what counts.
    m["pm_bytes"], m["checkpoint"]["saves"] = "16G", 2
    assert _resources({"step": "checkpoint", "m": m}).memory_bytes >= (16 + 4 + 2) * (1 << 30)


def test_random_writes_truncates_renames_and_deletes_beside_a_busy_flusher_match_a_model():
    """scripts/flac-stress.py, short: three threads write, truncate, rename and delete files of
    their own while the flusher syncs every millisecond with an 8 MiB DRAM cache, both flush
    modes, every file checked against a model before and after a remount. It found a truncate
    racing the lock-free flush (the cut-off bytes came back when the file grew), about one
    run in two at six rounds."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "flac-stress.py"
    r = subprocess.run([sys.executable, str(script), "--rounds", "3", "--threads", "3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 differences" in r.stdout
