"""flac's guest-dax step: the shim step's unmodified programs on ext4-DAX, inside a QEMU guest
whose emulated NVDIMM is /dev/pmem0 (issue 43: the document's ext4-DAX baseline).

One guest boot runs grep, tar (create, then extract), sort, `dd bs=2M` and `cp` on the same
small data set on four engines: ext4 mounted -o dax on the NVDIMM (remounted before each run);
FlacFS through the LD_PRELOAD shim with its PM image a file on that DAX mount (so FlacFS's "PM"
is the same emulated NVDIMM; the image is allocated and zeroed before use, as the host's image
on tmpfs is populated when created), the PM cost model off (the medium is the guest's own) and
its DRAM frames on a huge-page tmpfs (as on the host); and ext4 without DAX on the same device,
cold (remounted before each run) and warm (its page cache holding the files). Every run is a new process, timed by the guest's monotonic clock
(/proc/timer_list, read by the shell without a fork) around it. The guest runs under TCG here
(KVM does not work on this machine, docs/vm.md), where every memory access is emulated: the
ratios say which engine does less work per byte inside the same guest, not the speed on real PM.

The checkpoint loader of the shim step is left out: it is a Python program, and the guest has
no Python (its tools unpack into RAM at every boot).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...units import parse_size

# The programs the guest times, as the host's shim step names them (tar = create + extract),
# and "start": GNU true, the floor every run pays (fork, exec, the dynamic loader; with the
# shim, loading it: FlacFS itself mounts on a program's first call under its mount).
GUEST_APPS = ("grep", "tar", "sort", "dd", "cp")
GUEST_ENGINES = ("ext4-dax", "flac-pm-off", "ext4", "ext4-warm")
LABELS = {"ext4-dax": "ext4-DAX", "flac-pm-off": "FlacFS (PM cost off)", "ext4": "ext4 (cold)", "ext4-warm": "ext4 (warm)"}
# The ratios the report prints: (numerator engine, denominator engine); a ratio above 1 means
# the denominator's engine took less time.
GUEST_PAIRS = (("ext4-dax", "flac-pm-off"), ("ext4", "flac-pm-off"), ("ext4-warm", "flac-pm-off"), ("ext4", "ext4-dax"))
# Where the guest mounts the NVDIMM's ext4 (the script's $MNT).
GUEST_MNT = "/mnt/pm"
def caveat(accel: Optional[str]) -> str:
    """What the guest's ratios can stand for, by the accelerator the guest ran under."""
    if accel == "kvm":
        return ("The guest runs under KVM, its memory at the host's speed, but its NVDIMM is a file in the host's DRAM, "
                "not persistent memory: these ratios say which engine does less work per byte inside the same guest, "
                "not how fast each would be on real persistent memory.")
    return ("The guest runs under TCG (QEMU's binary translator; KVM does not work on this machine), where every memory "
            "access is emulated: these ratios say which engine does less work per byte inside the same guest, not how "
            "fast each would be on real persistent memory.")

GUEST_SCRIPT = r"""
# flac guest-dax (python/ssdlab/studies/flac/guest.py). From the host: FLAC_RUNS, FLAC_PATTERN,
# FLAC_WANT_GREP (matching lines), FLAC_WANT_SORT and FLAC_WANT_BIG (sha256 of the sorted
# integers and of big.bin), FLACFS_* (the shim's configuration, all but LD_PRELOAD);
# /ssdlab/job/files/data.tar (tree/, ints.txt, big.bin).
G=/usr/lib/ssdlab/gnu
SHIM=/usr/lib/ssdlab/libflacfs.so
DATA=/ssdlab/job/files/data.tar
MNT=/mnt/pm
OUT=$SSDLAB_OUT/runs.txt
: > "$OUT"
fail() { echo "guest-dax: $*"; echo "fail $*" >> "$OUT"; exit 1; }
[ -n "$SSDLAB_PMEM" ] || fail "no NVDIMM (SSDLAB_PMEM is empty)"
for t in grep tar sort dd cp rm mkdir sha256sum true; do [ -x $G/$t ] || fail "the guest has no GNU $t ($G/$t): rebuild it (scripts/build-guest.sh)"; done
# The monotonic clock in ns, read without a fork (the third line of /proc/timer_list).
clock() { { read -r _; read -r _; read -r _ _ NOW _; } < /proc/timer_list; }
info() { echo "info $*" >> "$OUT"; }

# The children's user and system CPU time so far (`times`' second line), into CU and CS. The
# builtin writes to a file: in a command substitution it would run in a forked subshell, which
# has no children of its own.
cpu() { times > /tmp/times.txt; { read -r _ _; read -r CU CS; } < /tmp/times.txt; }
# timed APP CMD...: one run, a new process; LD_PRELOAD is $PRE (the shim, or empty).
timed() {
    app=$1; shift
    # FlacFS's recorded runs append their statistics (time inside file-system calls, bytes
    # attached and copied) to a file per program, as the host's shim step does.
    if [ -n "$PRE" ] && [ "$REC" = 1 ]; then export FLACFS_STATS="$SSDLAB_OUT/stats-$app.jsonl"; else unset FLACFS_STATS; fi
    cpu; cu0=$CU; cs0=$CS
    clock; t0=$NOW
    LD_PRELOAD=$PRE "$@" > /tmp/out.txt 2> /tmp/err.txt
    rc=$?
    clock; t1=$NOW
    unset FLACFS_STATS
    cpu
    [ $rc = 0 ] || fail "$E $app: $* exited with $rc: $(head -c 300 /tmp/err.txt | tr '\n' ' ')"
    [ "$REC" = 1 ] && echo "run $E $app $i $t0 $t1 $cu0 $cs0 $CU $CS" >> "$OUT"
    return 0
}
quiet() { LD_PRELOAD=$PRE "$@" > /tmp/out.txt 2> /tmp/err.txt || fail "$E: $* failed: $(head -c 300 /tmp/err.txt | tr '\n' ' ')"; }
sha() { LD_PRELOAD=$PRE $G/sha256sum "$1" | cut -d' ' -f1; }

mount_pm() { mount -o "$1,noatime" "$SSDLAB_PMEM" "$MNT" || fail "mount -o $1 $SSDLAB_PMEM failed: $(dmesg | tail -3 | tr '\n' ' ')"; }
remount() { sync; umount "$MNT" || fail "umount $MNT failed"; mount_pm "$OPTS"; }
none() { :; }

# suite ENGINE PREFIX RESET RUNS: every program RUNS times, RESET before each timed run; the runs
# are recorded when REC is 1.
suite() {
    E=$1; P=$2; RESET=$3; N=$4
    i=0
    while [ $i -lt "$N" ]; do $RESET; timed start $G/true; i=$((i + 1)); done
    i=0
    while [ $i -lt "$N" ]; do
        $RESET; timed grep $G/grep -r -c "$FLAC_PATTERN" "$P/tree"
        n=$(awk -F: '{s += $NF} END {print s + 0}' /tmp/out.txt)
        [ "$n" = "$FLAC_WANT_GREP" ] || fail "$E: grep counted $n matching lines, the tree has $FLAC_WANT_GREP"
        i=$((i + 1))
    done
    i=0
    while [ $i -lt "$N" ]; do
        quiet $G/rm -rf "$P/x" "$P/t.tar"
        quiet $G/mkdir "$P/x"
        $RESET; timed tar-c $G/tar -cf "$P/t.tar" -C "$P" tree
        $RESET; timed tar-x $G/tar -xf "$P/t.tar" -C "$P/x"
        i=$((i + 1))
    done
    # GNU tar's compare: every member of the archive against the extracted tree.
    quiet $G/tar -df "$P/t.tar" -C "$P/x"
    i=0
    while [ $i -lt "$N" ]; do $RESET; timed sort $G/sort -n -S 50% -o "$P/sorted.txt" "$P/ints.txt"; i=$((i + 1)); done
    [ "$(sha "$P/sorted.txt")" = "$FLAC_WANT_SORT" ] || fail "$E: sort's output is not the sorted input"
    i=0
    while [ $i -lt "$N" ]; do $RESET; timed dd $G/dd if="$P/big.bin" of=/dev/null bs=2M; i=$((i + 1)); done
    i=0
    while [ $i -lt "$N" ]; do
        quiet $G/rm -f "$P/big.copy"
        $RESET; timed cp $G/cp "$P/big.bin" "$P/big.copy"
        i=$((i + 1))
    done
    [ "$(sha "$P/big.copy")" = "$FLAC_WANT_BIG" ] || fail "$E: cp's copy differs from big.bin"
    quiet $G/rm -rf "$P/x" "$P/t.tar" "$P/sorted.txt" "$P/big.copy"
}

E=setup; PRE=""
clock; t0=$NOW
# stride and stripe width of 2 MiB: ext4 then allocates large files in 2 MiB-aligned extents,
# which DAX maps with 2 MiB page-table entries (FlacFS's image) where it can.
/usr/sbin/mkfs.ext4 -q -F -b 4096 -E stride=512,stripe_width=512 "$SSDLAB_PMEM" > /tmp/out.txt 2>&1 || fail "mkfs.ext4 $SSDLAB_PMEM: $(cat /tmp/out.txt)"
mkdir -p "$MNT"
OPTS=dax=always; mount_pm $OPTS
grep -q "$MNT .*dax=always" /proc/mounts || fail "ext4 on $SSDLAB_PMEM is not mounted with dax=always: $(grep "$MNT" /proc/mounts)"
quiet $G/tar -xf "$DATA" -C "$MNT"
sync
clock; info setup_ns $((NOW - t0))
info pmem_mib $(($(cat /sys/block/pmem0/size) / 2048))
info mount "$(grep " $MNT " /proc/mounts)"

# Under TCG the first run of any code translates it (QEMU caches the translation by physical
# page, so later processes running the same code reuse it): each engine whose code paths are
# new (ext4-DAX: the programs and DAX; FlacFS: the shim; ext4: the page cache) runs every
# program once, unrecorded, before its recorded runs, so that no engine pays for translating
# code the next one reuses.
# ext4-DAX: reads and writes go straight between the program's buffers and the NVDIMM.
REC=0 suite ext4-dax "$MNT" remount 1
REC=1 suite ext4-dax "$MNT" remount "$FLAC_RUNS"

# FlacFS through the shim, its PM image a file on the DAX mount, its DRAM frames on a tmpfs
# mounted huge=always where the guest's kernel allows it (as the host's Workdir gives them 2 MiB
# pages). The first program under the mount creates the image (FLACFS_CREATE: a superblock page,
# the rest a hole). The hole is then written with zeros, which it already reads as: on the host
# FlacFS populates a new image on tmpfs for the same reason (PM is all there from the start),
# and here a first store into a hole would allocate and clear ext4 blocks inside whichever
# timed I/O made it. Then the data set is copied in (untimed).
E=flac-pm-off; PRE=$SHIM
clock; t0=$NOW
mkdir -p /mnt/dram
if mount -t tmpfs -o huge=always,size=$((FLACFS_DRAM * 2)) flac-dram /mnt/dram 2> /tmp/err.txt; then
    export FLACFS_DRAM_DIR=/mnt/dram
    info flac_dram_dir "huge=always tmpfs ($(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null))"
else
    info flac_dram_dir "memfd (no huge-page tmpfs: $(tr '\n' ' ' < /tmp/err.txt))"
fi
quiet $G/mkdir -p "$FLACFS_MOUNT"
[ -f "$FLACFS_IMAGE" ] || fail "the shim did not create $FLACFS_IMAGE: $(head -c 300 /tmp/err.txt)"
PRE=""
quiet $G/dd if=/dev/zero of="$FLACFS_IMAGE" bs=4096 seek=1 count=511 conv=notrunc
quiet $G/dd if=/dev/zero of="$FLACFS_IMAGE" bs=2M seek=1 count=$((FLACFS_CREATE / 2097152 - 1)) conv=notrunc
PRE=$SHIM
[ "$(stat -c %s "$FLACFS_IMAGE")" = "$FLACFS_CREATE" ] || fail "zero-filling $FLACFS_IMAGE changed its size"
info flac_image_blocks "$(stat -c %b "$FLACFS_IMAGE")"
clock; info flac_image_ns $((NOW - t0)); t0=$NOW
quiet $G/cp -r "$MNT/tree" "$FLACFS_MOUNT/tree"
quiet $G/cp "$MNT/ints.txt" "$MNT/big.bin" "$FLACFS_MOUNT/"
clock; info flac_copy_in_ns $((NOW - t0))
REC=0 suite flac-pm-off "$FLACFS_MOUNT" none 1
REC=1 suite flac-pm-off "$FLACFS_MOUNT" none "$FLAC_RUNS"
PRE=""
info flac_image_bytes "$(stat -c %s "$FLACFS_IMAGE")"
rm -f "$FLACFS_IMAGE"
umount /mnt/dram 2>/dev/null

# ext4 without DAX on the same device: the page cache between the programs and the NVDIMM;
# cold (remounted before each run), then warm: an unrecorded pass first reads every file into
# the cache (the cold runs' remounts dropped what the programs before them read).
sync; umount "$MNT" || fail "umount $MNT failed"
OPTS=dax=never; mount_pm $OPTS
grep -q "$MNT .*dax=never" /proc/mounts || fail "ext4 on $SSDLAB_PMEM is not mounted with dax=never: $(grep "$MNT" /proc/mounts)"
REC=0 suite ext4 "$MNT" remount 1
REC=1 suite ext4 "$MNT" remount "$FLAC_RUNS"
REC=0 suite ext4-warm "$MNT" none 1
REC=1 suite ext4-warm "$MNT" none "$FLAC_RUNS"
sync; umount "$MNT"
echo "done" >> "$OUT"
echo "guest-dax: done"
"""


# -- the data set and the guest run ----------------------------------------------------------------

def _data_tar(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for p in sorted(root.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(root)), recursive=False)
    return buf.getvalue()


def data_set(g: Mapping[str, Any], seed: int) -> Tuple[bytes, Dict[str, str]]:
    """The guest's data set, made as the shim step makes its own (the same generators, smaller):
    a tar of tree/, ints.txt and big.bin, and what the guest checks against (matching lines,
    the sha256 of the sorted integers and of big.bin)."""
    from .runner import PATTERN, write_shim_data

    with tempfile.TemporaryDirectory(prefix="ssdlab-flac-guest-") as tmp:
        root = Path(tmp)
        want, sorted_sha, big = write_shim_data(root, int(g["tree"]["files"]), parse_size(g["tree"]["bytes"]), int(g["sort_ints"]),
                                                parse_size(g["big"]), seed)
        big_sha = hashlib.sha256(big).hexdigest()
        del big
        data = _data_tar(root)
    return data, {"FLAC_WANT_GREP": str(want), "FLAC_WANT_SORT": sorted_sha, "FLAC_WANT_BIG": big_sha, "FLAC_PATTERN": PATTERN}


def unavailable() -> Optional[str]:
    """Why the guest cannot run here (no QEMU, no guest, a guest without the step's tools), or None."""
    from ... import vm

    if shutil.which("qemu-system-x86_64") is None:
        return "no qemu-system-x86_64 (make setup installs it)"
    d = vm.guest_dir()
    if not (d / "vmlinuz").exists() or not (d / "initramfs.cpio").exists():
        return f"no guest in {d} (make setup, or bash scripts/build-guest.sh)"
    inputs = (d / "inputs.txt").read_text() if (d / "inputs.txt").exists() else ""
    shim = [ln.split() for ln in inputs.splitlines() if ln.startswith("file ") and "libflacfs.so" in ln]
    if not shim:
        return f"the guest in {d} has no FlacFS shim or GNU tools (build the shim, then bash scripts/build-guest.sh)"
    # The guest holds a copy of the shim made when it was built: a shim rebuilt since would
    # time an older FlacFS in the guest than on the host.
    path, size, mtime = shim[0][1], shim[0][2], shim[0][3]
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is None or (str(st.st_size), str(int(st.st_mtime))) != (size, mtime):
        return f"the guest's FlacFS shim is not {path} as it is now (rebuilt since): bash scripts/build-guest.sh"
    return None


def run_guest_dax(g: Mapping[str, Any], seed: int, work: Path, log: Any) -> Dict[str, Any]:
    """Boot one guest and run every engine (see the module's docstring). Returns the runs (one
    row per engine, program and run: seconds, the children's user and system CPU seconds), the
    per-(engine, program) medians, the guest's set-up figures and the boot's times; or
    ``{"skipped": why}`` when this machine cannot run the guest."""
    from ... import vm
    from . import api as flac

    why = unavailable()
    if why:
        log(f"  guest-dax: skipped ({why})")
        return {"skipped": why}
    if parse_size(g["flac_pm"]) % (2 << 20):
        raise ValueError(f"guest_dax.flac_pm {g['flac_pm']}: expected a multiple of 2 MiB (the guest zero-fills it 2 MiB at a time)")
    data, want = data_set(g, seed)
    shim_env = flac.shim_env(f"{GUEST_MNT}/flac.pm", mount="/flac", engine="flac", create=g["flac_pm"], dram=g["flac_dram"],
                             pm_cost=False, base={})
    env = {k: v for k, v in shim_env.items() if k.startswith("FLACFS_")}
    env.update(want, FLAC_RUNS=str(int(g["runs"])))
    script = work / "guest-dax.sh"
    # The workload sees only what it exports itself (the guest's /init keeps its job variables).
    script.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items())) + GUEST_SCRIPT)
    out = work / "guest"
    info = vm.run_guest(script=script, net=False, memory=parse_size(g.get("memory", "1G")), cpus=int(g.get("cpus", 2)),
                        out=out, accel=str(g.get("accel", "auto")), boot_timeout_s=float(g.get("boot_timeout_s", 90)),
                        timeout_s=float(g.get("timeout_s", 900)), check=False, log=lambda s: log("  " + s),
                        pmem_bytes=parse_size(g["pmem"]), pmem_dir=work, job_files={"data.tar": data})
    runs_path = out / "guest" / "runs.txt"
    text = runs_path.read_text() if runs_path.exists() else ""
    parsed = parse_runs(text)
    if info["status"] != 0 or parsed["failure"] or not parsed["done"]:
        why = parsed["failure"] or vm.GUEST_STATUSES.get(info["status"], f"exit status {info['status']}")
        raise RuntimeError(f"flac guest-dax: the guest run failed: {why}\n{vm.log_tail(out / 'output.txt', 15)}\n"
                           + vm.guest_logs(out / "console.log", out / "qemu.log", 15))
    rows = parsed["runs"]
    flac_stats = program_stats(out / "guest")
    log("  guest-dax " + "; ".join(
        f"{LABELS[e]}: " + " ".join(f"{a}={median_run([r['seconds'] for r in rows if r['engine'] == e and r['app'] == a]):.3f}s"
                                    for a in ("start", *GUEST_APPS))
        for e in GUEST_ENGINES))
    return {"runs": rows, "rows": summary(rows), "flac_stats": flac_stats, "info": parsed["info"], "data_bytes": len(data),
            "guest": {k: info.get(k) for k in ("accel", "accel_why", "boot_to_workload_s", "workload_s", "wall_s",
                                               "qemu_peak_rss_bytes", "memory_bytes", "pmem_bytes")}}



# -- parsing and statistics --------------------------------------------------------------------------

_TIMES = re.compile(r"^(\d+)m([\d.]+)s$")


def _times_s(text: str) -> float:
    """A duration as the shell's `times` prints it ("1m2.345s")."""
    m = _TIMES.match(text)
    if not m:
        raise ValueError(f"not a `times` duration: {text!r}")
    return int(m.group(1)) * 60 + float(m.group(2))


def parse_runs(text: str) -> Dict[str, Any]:
    """The guest's runs.txt: ``run ENGINE APP I T0 T1 CU0 CS0 CU1 CS1`` (the clock in ns and the
    children's user and system CPU time from the shell's `times`, before and after),
    ``info KEY VALUE``, ``fail WHY`` and ``done``. Returns {"runs": one row per run (tar-c and tar-x also summed into a
    "tar" row per run index), "info", "failure" (or None), "done"}."""
    runs: List[Dict[str, Any]] = []
    info: Dict[str, Any] = {}
    failure: Optional[str] = None
    done = False
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "run":
            if len(f) != 10:
                raise ValueError(f"runs.txt: a run line has 10 fields, got {len(f)}: {line!r}")
            engine, app, i, t0, t1 = f[1], f[2], int(f[3]), int(f[4]), int(f[5])
            cu0, cs0, cu1, cs1 = (_times_s(x) for x in f[6:10])
            if t1 < t0:
                raise ValueError(f"runs.txt: the clock went back in {line!r}")
            runs.append({"engine": engine, "app": app, "run": i, "seconds": (t1 - t0) / 1e9,
                         "user_s": round(cu1 - cu0, 6), "sys_s": round(cs1 - cs0, 6)})
        elif f[0] == "info" and len(f) >= 2:
            value = line.split(None, 2)[2] if len(f) > 2 else ""
            info[f[1]] = int(value) if re.fullmatch(r"-?\d+", value) else value
        elif f[0] == "fail":
            failure = line.split(None, 1)[1] if len(f) > 1 else "(no reason given)"
        elif f[0] == "done":
            done = True
    by = {(r["engine"], r["app"], r["run"]): r for r in runs}
    for (engine, app, i), c in list(by.items()):
        x = by.get((engine, "tar-x", i))
        if app == "tar-c" and x is not None:
            runs.append({"engine": engine, "app": "tar", "run": i, **{k: round(c[k] + x[k], 9) for k in ("seconds", "user_s", "sys_s")}})
    return {"runs": runs, "info": info, "failure": failure, "done": done}


def program_stats(d: Path) -> Dict[str, Dict[str, Any]]:
    """FlacFS's statistics of its recorded runs in the guest, per program (stats-APP.jsonl, one
    line per process; tar's create and extract summed): bytes attached and copied, seconds
    inside file-system calls, seconds from FlacFS's mount in the process to its exit
    (``mounted_s``: the rest of a run is the process's start, the mount and the exit), processes."""
    from .runner import _shim_stats

    out: Dict[str, Dict[str, Any]] = {}
    for app in (*GUEST_APPS, "tar-c", "tar-x"):
        p = d / f"stats-{app}.jsonl"
        if p.exists():
            st = _shim_stats(p)
            out[app] = {k: st[k] for k in ("mapped_bytes", "copied_bytes", "io_s", "processes")}
            out[app]["mounted_s"] = sum(float(json.loads(ln).get("wall_s", 0.0)) for ln in p.read_text().splitlines() if ln.strip())
    if "tar-c" in out and "tar-x" in out:
        out["tar"] = {k: out["tar-c"][k] + out["tar-x"][k] for k in out["tar-c"]}
    return out


def median_run(v: Sequence[float]) -> float:
    """The median of a program's run times as the flac study reports it, here and in the shim
    step: the middle run, the upper of the two middle ones for an even count (always a time one
    run took, not an average of two); NaN for none."""
    return float(sorted(v)[len(v) // 2]) if len(v) else math.nan


def summary(runs: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """One row per (engine, program): the median and mean seconds over its runs, the runs, and
    the children's CPU seconds (user, system) summed over them."""
    rows = []
    for e in GUEST_ENGINES:
        for a in ("start", *GUEST_APPS, "tar-c", "tar-x"):
            v = [r for r in runs if r["engine"] == e and r["app"] == a]
            if not v:
                continue
            s = [float(r["seconds"]) for r in v]
            rows.append({"engine": e, "app": a, "seconds": median_run(s), "mean_s": float(np.mean(s)), "runs": s,
                         "user_s": sum(r["user_s"] for r in v), "sys_s": sum(r["sys_s"] for r in v)})
    return rows


def ratio_interval(num: Sequence[float], den: Sequence[float], level: float = 0.95) -> Tuple[float, Optional[float], Optional[float]]:
    """The ratio of the geometric means of two engines' run times (``num`` over ``den``), with
    a Welch t interval on the log scale (the runs of the two engines are independent samples;
    the interval never crosses 0). One run on either side: no interval."""
    a, b = np.log(np.asarray(num, float)), np.log(np.asarray(den, float))
    if len(a) == 0 or len(b) == 0:
        raise ValueError("a ratio needs runs on both sides")
    d = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return math.exp(d), None, None
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(d), math.exp(d), math.exp(d)
    from scipy.stats import t

    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(t.ppf(0.5 + level / 2, df)) * se
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def ratios(runs: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """GUEST_PAIRS for every program: time of the first engine over the second's, with its
    interval (see :func:`ratio_interval`)."""
    out = []
    for num, den in GUEST_PAIRS:
        for app in GUEST_APPS:
            a = [float(r["seconds"]) for r in runs if r["engine"] == num and r["app"] == app]
            b = [float(r["seconds"]) for r in runs if r["engine"] == den and r["app"] == app]
            if not a or not b:
                continue
            r, lo, hi = ratio_interval(a, b)
            out.append({"num": num, "den": den, "app": app, "ratio": r, "lo": lo, "hi": hi, "n_num": len(a), "n_den": len(b)})
    return out
