"""`ssdlab vm`: a Linux guest under QEMU whose disk is an emulated SSD served by `ssdlab serve`.

One run: start `ssdlab serve` for the device, boot the guest built by scripts/build-guest.sh
(KVM when a probe boot shows it works, TCG otherwise) with the device attached through QEMU's
NBD block driver as an NVMe namespace or a virtio-blk disk, run a fio job or a shell script in
the guest, power it off, stop the server, and write the guest's results beside the device's
metrics.json and a report. See docs/vm.md.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .config import PathLike, resolve_config
from .device import Report
from .serving import free_port
from .units import parse_size

DISKS = ("nvme", "virtio")
# What boot() attaches: an NBD export as a QEMU NVMe or virtio-blk disk, a namespace the guest
# reaches over NVMe/TCP on QEMU's user network, or no disk.
GUEST_DISKS = (*DISKS, "nvme-tcp", "none")
# QEMU's user network: the guest is GUEST_IP, the host's loopback is HOST_FROM_GUEST.
HOST_FROM_GUEST = "10.0.2.2"
GUEST_IP = "10.0.2.15"
# The guest's own statuses (scripts/guest-init.sh), beside a workload's exit status.
GUEST_STATUSES = {250: "the guest's NVDIMM did not become an fsdax /dev/pmem0", 251: "the guest's network did not come up", 252: "the guest's NVMe/TCP connect failed",
                  253: "unknown guest mode", 254: "the guest's disk did not appear"}
ACCELS = ("auto", "kvm", "tcg")
GUEST_MARK = "ssdlab-guest: "
RESULTS_BEGIN = "SSDLAB-RESULTS-BEGIN"
RESULTS_END = "SSDLAB-RESULTS-END"
EXPORT = "ssdlab"
# Guest results are a tar of /ssdlab/out; more than this is a runaway script, not results.
RESULTS_MAX_BYTES = 256 << 20
LOG_TAIL_LINES = 25
PROBE_TIMEOUT_S = 20.0
GRACE_AFTER_SERVER_DEATH_S = 5.0
# The guest's initramfs (its tools) unpacks into RAM: at 320 MiB the unpacking fails ("write
# error") and the kernel panics; 352 MiB boots. The floor keeps a margin.
MIN_MEMORY_BYTES = 384 << 20
# An emulated NVDIMM (boot()'s pmem_bytes) is hot-pluggable memory to the guest: Linux maps it
# in memory sections of 128 MiB on x86-64, so its size is a whole number of them.
PMEM_ALIGN = 128 << 20


class VmError(RuntimeError):
    """A guest run that could not be done or did not finish; the message says why, with the
    tail of the QEMU log where it helps."""


class VmReport(Report):
    """The device's measurements (the ``metrics.json`` schema of every ssdlab run, from the
    server) plus what the guest saw: ``guest`` (boot and workload times, memory, accelerator,
    exit status), ``fio`` (fio's JSON output, for fio jobs) and ``output`` (the workload's
    console output)."""

    def __init__(self, metrics: Dict[str, Any], series_csv: str, guest: Dict[str, Any],
                 fio: Optional[Dict[str, Any]], output: str, out_dir: Path):
        super().__init__(metrics, series_csv)
        self.guest = guest
        self.fio = fio
        self.output = output
        self.out_dir = out_dir

    def __repr__(self) -> str:
        return (f"VmReport(dlwa={self.metrics.get('dlwa')}, host_write_bytes={self.metrics.get('host_write_bytes')}, "
                f"boot_s={self.guest.get('boot_to_workload_s')}, status={self.guest.get('status')}, out={self.out_dir})")


# --- the guest's files ------------------------------------------------------------------------

def guest_dir() -> Path:
    """Where scripts/build-guest.sh left the guest: $SSDLAB_GUEST_DIR, else target/guest of the
    checkout this package runs from."""
    env = os.environ.get("SSDLAB_GUEST_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for p in [*here.parents, Path.cwd()]:
        if (p / "scripts" / "build-guest.sh").exists():
            return p / "target" / "guest"
    return Path.cwd() / "target" / "guest"


def _guest_files() -> Tuple[Path, Path]:
    d = guest_dir()
    kernel, initramfs = d / "vmlinuz", d / "initramfs.cpio"
    if not kernel.exists() or not initramfs.exists():
        raise VmError(f"no guest in {d} (vmlinuz and initramfs.cpio): run `make setup` or `bash scripts/build-guest.sh`")
    return kernel, initramfs


def _qemu() -> str:
    q = shutil.which("qemu-system-x86_64")
    if q is None:
        raise VmError("qemu-system-x86_64 is missing: run `make setup` (Debian package qemu-system-x86)")
    return q


def _cpio_newc(files: List[Tuple[str, bytes, int]]) -> bytes:
    """A newc cpio archive of (path, contents, mode); directories have mode 0o040755 and no
    contents. The kernel unpacks it over the guest's base initramfs."""
    out = io.BytesIO()
    for ino, (name, data, mode) in enumerate([*files, ("TRAILER!!!", b"", 0)], start=1):
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0]
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + nb)
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))
    return out.getvalue()


def _job_archive(mode: str, disk: str, payload: Optional[bytes], env: Optional[Mapping[str, str]] = None,
                 job_files: Optional[Mapping[str, bytes]] = None) -> bytes:
    """The job's cpio archive: /ssdlab/job/env (SSDLAB_MODE, SSDLAB_DISK_KIND and ``env``, read
    by the guest's /init with `.`), the workload and ``job_files`` (name: contents, into
    /ssdlab/job/files/)."""
    lines = {"SSDLAB_MODE": mode, "SSDLAB_DISK_KIND": disk, **(env or {})}
    env_text = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in lines.items()).encode()
    files = [("ssdlab", b"", 0o040755), ("ssdlab/job", b"", 0o040755), ("ssdlab/job/env", env_text, 0o100644)]
    if mode == "fio":
        files.append(("ssdlab/job/job.fio", payload or b"", 0o100644))
    elif mode == "script":
        files.append(("ssdlab/job/run.sh", payload or b"", 0o100755))
    if job_files:
        files.append(("ssdlab/job/files", b"", 0o040755))
        for name, data in job_files.items():
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"job file {name!r}: expected a plain file name")
            files.append((f"ssdlab/job/files/{name}", data, 0o100644))
    return _cpio_newc(files)


def _write_initrd(base: Path, job: bytes, dest: Path) -> None:
    with open(dest, "wb") as f, open(base, "rb") as b:
        shutil.copyfileobj(b, f, 1 << 20)
        f.write(b"\0" * (-f.tell() % 4))  # the kernel wants each archive 4-byte aligned
        f.write(job)


# --- TOML for the server's config --------------------------------------------------------------

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"cannot write {v!r} as TOML")


def config_toml(config: Mapping[str, Any]) -> str:
    """A resolved config as TOML that `ssdlab serve` reads back to the same config."""
    top = [f"{k} = {_toml_value(v)}" for k, v in config.items() if not isinstance(v, Mapping)]
    tables = [f"\n[{k}]\n" + "\n".join(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())
              for k, v in config.items() if isinstance(v, Mapping)]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


# --- processes ---------------------------------------------------------------------------------

def _reap(proc: subprocess.Popen, timeout_s: Optional[float] = None) -> Tuple[int, int]:
    """Wait for a child; returns (exit code, peak resident memory in bytes) from wait4."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline else 0)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss * 1024
        if deadline and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
        time.sleep(0.02)


def stop_process(proc: Optional[subprocess.Popen], sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> Tuple[Optional[int], int]:
    """Stop a child by PID (signal, then SIGKILL after the timeout); (exit code, peak RSS)."""
    if proc is None:
        return None, 0
    if proc.returncode is not None:
        return proc.returncode, 0
    try:
        proc.send_signal(sig)
        return _reap(proc, timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return _reap(proc)
    except ChildProcessError:  # already reaped elsewhere
        return proc.returncode, 0


def exit_text(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").replace("\r", "")
    except OSError:
        return "  (no log)"
    rows = [r for r in text.splitlines() if r.strip()][-lines:]
    return "\n".join("  | " + r for r in rows) if rows else "  (empty)"


def guest_logs(console: Path, qemu_log: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The end of the guest's console, then QEMU's own messages when it printed any."""
    text = f"the end of the guest's console ({console}):\n{log_tail(console, lines)}"
    if qemu_log.exists() and qemu_log.read_text(errors="replace").strip():
        text += f"\nQEMU's messages ({qemu_log}):\n{log_tail(qemu_log, 10)}"
    return text


def _qemu_args(qemu: str, accel: str, kernel: Path, initrd: Path, memory_bytes: int, cpus: int, console: Path,
               results: Path, drive: Optional[str], disk: str, block_bytes: int, net: bool = False,
               forwards: Sequence[Tuple[int, int]] = (), pmem: Optional[Tuple[Path, int]] = None) -> List[str]:
    if accel == "kvm":
        cpu = ["-accel", "kvm", "-cpu", "host"]
    else:
        cpu = ["-accel", "tcg,thread=multi", "-cpu", "max"]
    machine, mem = "q35", f"{memory_bytes >> 20}M"
    if pmem is not None:
        # An NVDIMM is a DIMM: the machine needs a slot for it and room above the RAM.
        machine += ",nvdimm=on"
        mem += f",slots=1,maxmem={(memory_bytes + pmem[1]) >> 20}M"
    args = [qemu, "-machine", machine, *cpu, "-m", mem, "-smp", str(cpus),
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-kernel", str(kernel), "-initrd", str(initrd),
            # panic=-1 reboots at once on a panic, and -no-reboot turns that into QEMU's exit. Kernel
            # messages stay on: they are what the error shows when a guest does not come up.
            "-append", "console=ttyS0 panic=-1",
            "-chardev", f"file,id=console,path={console}", "-serial", "chardev:console",
            "-chardev", f"file,id=results,path={results}", "-serial", "chardev:results"]
    if drive:
        # Discards reach the server as NBD trims (mkfs and fstrim tell the FTL what is free);
        # the guest's sector size is the device's, so no write covers part of a sector.
        args += ["-drive", f"file={drive},if=none,id=ssd,format=raw,cache=none,discard=unmap,detect-zeroes=off"]
        bs = f"logical_block_size={block_bytes},physical_block_size={block_bytes}"
        if disk == "nvme":
            args += ["-device", f"nvme,serial=ssdlab0,drive=ssd,{bs}"]
        else:
            args += ["-device", f"virtio-blk-pci,drive=ssd,{bs}"]
    if net or forwards:
        # QEMU's user network (slirp): no privileges; the guest reaches the host's loopback at
        # HOST_FROM_GUEST, and only the forwarded ports (host loopback -> guest) reach the guest.
        fwd = "".join(f",hostfwd=tcp:127.0.0.1:{h}-:{g}" for h, g in forwards)
        args += ["-netdev", f"user,id=n0{fwd}", "-device", "virtio-net-pci,netdev=n0"]
    if pmem is not None:
        # The NVDIMM's contents are a host file (shared: the guest's stores land in it, as a
        # DIMM's do in its media), which QEMU makes in the directory pmem[0] names and unlinks
        # (run_guest's caller gives a directory of its own). No label area: the guest sees one label-less region, which
        # scripts/guest-init.sh turns into an fsdax namespace, /dev/pmem0.
        args += ["-object", f"memory-backend-file,id=pmem0,share=on,mem-path={pmem[0]},size={pmem[1]}",
                 "-device", "nvdimm,id=nvdimm0,memdev=pmem0"]
    return args


def _results(path: Path) -> Tuple[Optional[int], Dict[str, bytes], str]:
    """Parse what the guest sent on its second serial port: (exit status or None when the end
    marker never came, files by name, the status line)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None, {}, ""
    text = raw.decode("ascii", errors="replace").replace("\r", "")
    if RESULTS_BEGIN not in text or RESULTS_END not in text:
        return None, {}, ""
    body = text.split(RESULTS_BEGIN, 1)[1]
    payload, end = body.split(RESULTS_END, 1)
    end_line = end.strip().splitlines()[0] if end.strip() else ""
    m = re.search(r"status=(\d+)", end_line)
    status = int(m.group(1)) if m else None
    files: Dict[str, bytes] = {}
    data = base64.b64decode("".join(payload.split()))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                name = member.name.lstrip("./")
                if f is not None and "/" not in name and name not in ("", "..", "."):
                    files[name] = f.read()
    return status, files, end_line


# --- the accelerator ---------------------------------------------------------------------------

def _probe_key(qemu: str, kernel: Path) -> Dict[str, Any]:
    st = kernel.stat()
    version = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {"qemu": version, "host_kernel": os.uname().release, "kernel": [st.st_size, int(st.st_mtime)]}


def choose_accel(accel: str = "auto", log: Callable[[str], None] = print) -> Tuple[str, str]:
    """(accelerator, why). ``auto`` uses KVM only when a short probe boot on it reached the
    guest's userspace (a /dev/kvm that exists may still fail: see docs/vm.md); the probe's
    verdict is cached beside the guest, keyed by QEMU, host kernel and guest kernel."""
    if accel not in ACCELS:
        raise ValueError(f"--accel {accel!r}: expected one of {', '.join(ACCELS)}")
    if accel != "auto":
        return accel, "asked for"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "no usable /dev/kvm"
    qemu = _qemu()
    kernel, initramfs = _guest_files()
    cache = guest_dir() / "kvm-probe.json"
    key = _probe_key(qemu, kernel)
    try:
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return ("kvm" if cached["works"] else "tcg"), f"KVM probe (cached): {cached['why']}"
    except (OSError, ValueError, KeyError):
        pass
    log("probing KVM with a short boot ...")
    works, why = _probe_kvm(qemu, kernel, initramfs)
    try:
        cache.write_text(json.dumps({"key": key, "works": works, "why": why}, indent=2) + "\n")
    except OSError:
        pass
    return ("kvm" if works else "tcg"), f"KVM probe: {why}"


def _probe_kvm(qemu: str, kernel: Path, initramfs: Path) -> Tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="ssdlab-kvm-probe-") as tmp:
        t = Path(tmp)
        initrd, console, results, log = t / "initrd", t / "console.log", t / "results", t / "qemu.log"
        _write_initrd(initramfs, _job_archive("probe", "nvme", None), initrd)
        args = _qemu_args(qemu, "kvm", kernel, initrd, 256 << 20, 1, console, results, None, "nvme", 4096)
        with open(log, "wb") as lf:
            proc = subprocess.Popen(args, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                _reap(proc, PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                stop_process(proc, signal.SIGKILL)
                return False, f"no guest userspace within {PROBE_TIMEOUT_S:.0f} s on KVM; using TCG"
        status, _, _ = _results(results)
        if status == 0:
            return True, "a guest booted on KVM"
        first = next((r for r in log.read_text(errors="replace").splitlines() if r.strip()), "")
        return False, f"the guest did not boot on KVM ({exit_text(proc.returncode)}{': ' + first[:120] if first else ''}); using TCG"


# --- one run -----------------------------------------------------------------------------------

def _say(log: Callable[[str], None], text: str) -> None:
    log(f"ssdlab vm: {text}")


def run(config: Union[PathLike, Mapping[str, Any]], *, image: Optional[PathLike] = None, script: Optional[PathLike] = None,
        fio: Optional[PathLike] = None, memory: Union[str, int] = "1G", cpus: int = 2, disk: str = "nvme",
        out: PathLike = "runs/vm", accel: str = "auto", boot_timeout_s: float = 60.0, timeout_s: float = 3600.0,
        serve_args: Tuple[str, ...] = (), check: bool = True, log: Callable[[str], None] = print,
        on_workload: Optional[Callable[[Dict[str, Any]], None]] = None, net: bool = False,
        forwards: Sequence[Tuple[int, int]] = (), pmem_bytes: int = 0) -> VmReport:
    """Boot a guest on an emulated SSD, run a workload in it, and measure both sides.

    Args:
        config: the device (a TOML file or a config dict; conventional or FDP personality).
        image: a raw image file for the device's contents (kept with its device state, see
            docs/nbd.md); default: in memory, an empty SSD every run.
        script: a shell script run in the guest (busybox sh; $SSDLAB_DISK is the disk,
            files left in $SSDLAB_OUT come back into ``out/guest/``). Or ``fio``: a fio job file
            run on the disk (the disk, libaio and O_DIRECT are its defaults). Neither: fio with
            experiments/vm/raw-randrw.fio.
        memory, cpus: the guest's RAM ("1G", bytes) and virtual CPUs.
        disk: "nvme" (a QEMU NVMe namespace, /dev/nvme0n1) or "virtio" (virtio-blk, /dev/vda).
        out: the run directory (created): metrics.json and timeseries.csv (device),
            fio.json or output.txt (guest), console.log, qemu.log, server.log, vm.json, report.md.
        accel: "auto" (KVM when a probe boot works on it, else TCG), "kvm" or "tcg".
        boot_timeout_s: the guest must reach its workload within this, or the run ends with
            an error and the QEMU log's tail. ``timeout_s`` bounds the whole run.
        serve_args: more `ssdlab serve` options, e.g. ("--latency", "emulated").
        check: raise :class:`VmError` when the workload exits non-zero (after writing ``out``).
        on_workload: called with the run's state when the guest starts its workload (its
            ``server`` and ``qemu`` are the Popen objects; for tests and tools).
        net: a virtio-net NIC on QEMU's user network (the guest is GUEST_IP, the host's
            loopback HOST_FROM_GUEST), e.g. for NVMe/TCP beside the NBD disk; ``forwards``:
            (host port, guest port) pairs forwarded from the host's loopback into the guest.
        pmem_bytes: an emulated NVDIMM beside the disk, /dev/pmem0 (fsdax) in the guest.

    Returns a :class:`VmReport` (a :class:`ssdlab.Report` with ``guest``, ``fio``, ``output``).
    """
    if disk not in DISKS:
        raise ValueError(f"--disk {disk!r}: expected one of {', '.join(DISKS)}")
    if script is not None and fio is not None:
        raise ValueError("give a guest script (--run) or a fio job (--fio), not both")
    memory_bytes = parse_size(memory, "memory")
    _check_memory(memory_bytes)
    if not 1 <= cpus <= 64:
        raise ValueError(f"--cpus {cpus}: expected 1 to 64")
    if not (boot_timeout_s > 0 and timeout_s > 0):
        raise ValueError(f"--boot-timeout {boot_timeout_s:g} / --timeout {timeout_s:g}: expected seconds above 0")
    if script is None and fio is None:
        fio = _default_job()
    work = script if script is not None else fio
    assert work is not None
    work_file = Path(work)
    if not work_file.is_file():
        raise FileNotFoundError(f"{'--run' if script is not None else '--fio'} {work_file}: no such file")
    mode = "script" if script is not None else "fio"
    cfg = resolve_config(config=config)
    if cfg.get("personality", "conventional") != "conventional":
        raise ValueError(f"{config}: `ssdlab vm` serves conventional and FDP devices (the personality is {cfg['personality']!r})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "device.toml"
    cfg_path.write_text(config_toml(cfg))

    def serve_cmd(addr: str) -> List[str]:
        cmd = [sys.executable, "-m", "ssdlab.cli", "serve", str(cfg_path), "--listen", addr, "--metrics-out", str(out),
               *serve_args]
        return cmd + (["--image", str(Path(image).resolve())] if image is not None else [])

    block_bytes = min(max(cfg["geometry"]["sector_bytes"], 512), 4096)
    info, status, files = boot(serve_cmd, EXPORT, block_bytes, mode, work_file, memory=memory_bytes, cpus=cpus, disk=disk,
                               out=out, accel=accel, boot_timeout_s=boot_timeout_s, timeout_s=timeout_s, log=log,
                               on_workload=on_workload, info={"config": str(config) if not isinstance(config, Mapping) else "(dict)",
                                                              "image": str(image) if image else None},
                               server_what=f"ssdlab serve{f' (image {image})' if image else ' (contents in memory)'}", net=net,
                               forwards=forwards, pmem_bytes=pmem_bytes)
    output, fio_json = _save_results(out, files)
    metrics_path = out / "metrics.json"
    if not metrics_path.exists():
        raise VmError(f"ssdlab serve wrote no metrics.json into {out}; its log:\n{log_tail(out / 'server.log')}")
    metrics = json.loads(metrics_path.read_text())
    series = (out / "timeseries.csv").read_text() if (out / "timeseries.csv").exists() else "host_write_bytes\n0\n"
    (out / "vm.json").write_text(json.dumps(info, indent=2) + "\n")
    rep = VmReport(metrics, series, info, fio_json, output, out)
    md = render(out)
    _say(log, f"guest workload {'finished' if status == 0 else f'FAILED (exit status {status})'} in "
              f"{info.get('workload_s', 0):.1f} s (boot to workload {info.get('boot_to_workload_s', 0):.1f} s); "
              f"device DLWA {metrics['dlwa']:.3f}, host writes {metrics['host_write_bytes'] / 2**20:.1f} MiB; wrote {md}")
    if check and status in GUEST_STATUSES:
        raise VmError(f"{GUEST_STATUSES[status]} (guest status {status}); " + guest_logs(out / "console.log", out / "qemu.log"))
    if check and status != 0:
        raise VmError(f"the guest workload exited with status {status}; its output is in {out / 'output.txt'}:\n"
                      f"{log_tail(out / 'output.txt', 10)}")
    return rep


def guest_address(addr: str) -> Tuple[str, int]:
    """The (address, port) the guest uses for the host's ``HOST:PORT``: the host's loopback is
    HOST_FROM_GUEST on QEMU's user network; other addresses are reached as they are."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"{addr!r}: expected HOST:PORT")
    if host in ("localhost", "::1") or host.startswith("127."):
        host = HOST_FROM_GUEST
    return host, int(port)


def boot(serve_cmd: Optional[Callable[[str], List[str]]], export: str, block_bytes: int, mode: str, work_file: Path, *,
         memory: int, cpus: int, disk: str, out: Path, accel: str = "auto", boot_timeout_s: float = 60.0,
         timeout_s: float = 3600.0, log: Callable[[str], None] = print, on_workload=None,
         info: Optional[Dict[str, Any]] = None, server_what: str = "ssdlab serve", net: bool = False,
         target: Optional[str] = None, forwards: Sequence[Tuple[int, int]] = (), pmem_bytes: int = 0,
         pmem_dir: Optional[PathLike] = None, job_files: Optional[Mapping[str, bytes]] = None) -> Tuple[Dict[str, Any], int, Dict[str, bytes]]:
    """Start a server (``serve_cmd(HOST:PORT)``, which must log "listening on" and write its
    metrics into ``out`` at exit), boot the guest with ``disk`` on it, run the workload (``mode``
    "script" or "fio", from ``work_file``), power off and stop the server. Returns (what
    happened: times, accelerator, exits; the workload's exit status, or one of GUEST_STATUSES;
    the files it left in $SSDLAB_OUT). Any run of a guest on an ssdlab server goes through here.

    ``disk`` "nvme" or "virtio": the server speaks NBD and QEMU attaches its export ``export``.
    "nvme-tcp": the server is an NVMe/TCP target; the guest gets a NIC on QEMU's user network
    and connects to subsystem NQN ``export`` at the server's port (scripts/guest-nvme-tcp.sh);
    with ``serve_cmd`` None it connects to ``target`` (HOST:PORT), a target already listening.
    "none": no disk ($SSDLAB_DISK is empty) and no server (``serve_cmd`` None).
    ``net``: a virtio-net NIC on QEMU's user network (always on for "nvme-tcp"); the guest is
    GUEST_IP and reaches the host's loopback at HOST_FROM_GUEST. ``forwards``: (host port, guest
    port) pairs, TCP connections to the host's 127.0.0.1:host port forwarded to the guest's
    port (implies ``net``), e.g. to serve a target from inside the guest.
    ``pmem_bytes``: an emulated NVDIMM of that size (a multiple of PMEM_ALIGN), which the guest
    sees as an fsdax namespace, /dev/pmem0 in $SSDLAB_PMEM (ext4 and XFS mount it with -o dax);
    its contents are a file in ``pmem_dir`` (default /dev/shm, memory like the DIMM's), new and
    zero every boot and removed after it. ``job_files``: files (name: contents) the guest finds in /ssdlab/job/files/,
    e.g. a data set (they unpack into the guest's RAM with its tools)."""
    _check_memory(memory)
    _check_pmem(pmem_bytes)
    if disk not in GUEST_DISKS:
        raise ValueError(f"disk {disk!r}: expected one of {', '.join(GUEST_DISKS)}")
    if serve_cmd is None and disk not in ("nvme-tcp", "none"):
        raise ValueError(f"a {disk} disk needs its server (serve_cmd)")
    if serve_cmd is not None and disk == "none":
        raise ValueError("a guest without a disk has no server (serve_cmd is None)")
    if disk == "nvme-tcp" and serve_cmd is None and target is None:
        raise ValueError("an nvme-tcp disk without a server needs the target's HOST:PORT")
    if mode == "fio" and disk == "none":
        raise ValueError("a fio job needs a disk")
    for h, g in forwards:
        if not (0 < int(h) < 65536 and 0 < int(g) < 65536):
            raise ValueError(f"forward {h}:{g}: expected two TCP ports")
    net = net or disk == "nvme-tcp" or bool(forwards)
    payload = work_file.read_bytes()
    if pmem_bytes:
        pmem_dir = Path(pmem_dir) if pmem_dir is not None else Path("/dev/shm") if os.path.isdir("/dev/shm") else out
        pmem_dir.mkdir(parents=True, exist_ok=True)
    qemu = _qemu()
    kernel, initramfs = _guest_files()
    accel_used, accel_why = choose_accel(accel, log=lambda s: _say(log, s))
    out.mkdir(parents=True, exist_ok=True)
    # console.log too: the watcher reads it from the start, and a previous run's "workload start" line
    # would end the boot at once.
    for stale in ("metrics.json", "timeseries.csv", "fio.json", "output.txt", "report.md", "vm.json", "console.log"):
        (out / stale).unlink(missing_ok=True)
    if (out / "guest").exists():
        shutil.rmtree(out / "guest")
    (out / f"workload{'.sh' if mode == 'script' else '.fio'}").write_bytes(payload)
    addr: Optional[str] = f"127.0.0.1:{free_port()}" if serve_cmd is not None else target
    env: Dict[str, str] = {"SSDLAB_NET": "1"} if net else {}
    if pmem_bytes:
        env["SSDLAB_PMEM_BYTES"] = str(pmem_bytes)
    if disk == "nvme-tcp":
        assert addr is not None
        traddr, trsvcid = guest_address(addr)
        env["SSDLAB_NVME_TCP"] = f"{traddr} {trsvcid} {export}"
    console, server_log, qemu_log = out / "console.log", out / "server.log", out / "qemu.log"
    info = dict(info or {}, workload=str(work_file), mode=mode, disk=disk, memory_bytes=memory, cpus=cpus, accel=accel_used,
                accel_why=accel_why, address=addr, export=export, net=net)
    if forwards:
        info["forwards"] = [f"127.0.0.1:{h} -> {GUEST_IP}:{g}" for h, g in forwards]
    if "SSDLAB_NVME_TCP" in env:
        info["nvme_tcp"] = env["SSDLAB_NVME_TCP"]
    if pmem_bytes:
        info["pmem_bytes"] = pmem_bytes
    server = qemu_proc = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".vm-", dir=out) as tmp, \
            (tempfile.TemporaryDirectory(prefix="ssdlab-pmem-", dir=pmem_dir) if pmem_bytes else contextlib.nullcontext(None)) as pmem_tmp, \
            open(server_log, "wb") as slog, open(qemu_log, "wb") as qlog:
        results = Path(tmp) / "results"
        # The NVDIMM's memory-backend-file is given the directory: QEMU then makes its file there
        # and unlinks it at once, so a QEMU killed with the run leaves only an empty directory
        # behind, not the DIMM's bytes in /dev/shm.
        pmem = (Path(pmem_tmp), pmem_bytes) if pmem_tmp is not None else None
        try:
            if serve_cmd is not None:
                assert addr is not None
                _say(log, f"starting {server_what} on {addr}")
                server = subprocess.Popen(serve_cmd(addr), stdout=slog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                wait_server(server, addr, server_log)
                info["server_ready_s"] = round(time.monotonic() - started, 3)
            initrd = Path(tmp) / "initrd"
            _write_initrd(initramfs, _job_archive(mode, disk, payload, env, job_files), initrd)
            drive = f"nbd://{addr}/{export}" if disk in DISKS else None
            args = _qemu_args(qemu, accel_used, kernel, initrd, memory, cpus, console, results, drive, disk, block_bytes, net,
                              forwards, pmem)
            info["qemu_command"] = args
            what = ("no disk" if disk == "none" else f"{disk} disk") + (f" ({env['SSDLAB_NVME_TCP']})" if disk == "nvme-tcp" else "") + (", network" if net else "")
            what += f", {pmem_bytes >> 20} MiB NVDIMM" if pmem_bytes else ""
            _say(log, f"booting the guest ({accel_used}: {accel_why}; {what}, {memory >> 20} MiB, {cpus} CPUs)")
            t_qemu = time.monotonic()
            qemu_proc = subprocess.Popen(args, stdout=qlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            # Live device figures come from an NBD server's stats; other servers are left alone.
            state = {"server": server, "qemu": qemu_proc, "address": addr if disk in DISKS else None, "out": out,
                     "console": console, "results": results}
            _watch(state, info, log, console, qemu_log, t_qemu, boot_timeout_s, timeout_s, on_workload)
            info["qemu_exit"] = qemu_proc.returncode
            info["qemu_peak_rss_bytes"] = info.pop("_qemu_rss", 0)
        except BaseException:
            stop_process(qemu_proc, signal.SIGKILL)
            stop_process(server, signal.SIGTERM)
            raise
        code, server_rss = stop_process(server, signal.SIGTERM, timeout_s=120)
        info["server_exit"] = code
        info["server_peak_rss_bytes"] = server_rss
        status, files, _ = _results(results)
    if server is not None and code != 0:
        raise VmError(f"{server_what.split(' (')[0]} ended with {exit_text(code)} after the guest powered off; its log "
                      f"({server_log}):\n{log_tail(server_log)}")
    if status is None:
        raise VmError(f"the guest powered off without sending its results (QEMU {exit_text(info['qemu_exit'])}); "
                      + guest_logs(console, qemu_log))
    info["status"] = status
    info["wall_s"] = round(time.monotonic() - started, 3)
    return info, status, files


def parse_nvme_tcp(spec: str) -> Tuple[str, str]:
    """``HOST:PORT/NQN`` (an NVMe/TCP target on the host and its subsystem NQN) as
    (HOST:PORT, NQN)."""
    addr, sep, nqn = spec.partition("/")
    if not sep or not nqn or " " in nqn:
        raise ValueError(f"--nvme-tcp {spec!r}: expected HOST:PORT/NQN (e.g. 127.0.0.1:4420/nqn.2014-08.io.ssdlab:ssd0)")
    try:
        guest_address(addr)
    except ValueError:
        raise ValueError(f"--nvme-tcp {spec!r}: expected HOST:PORT/NQN") from None
    return addr, nqn


def run_guest(*, script: Optional[PathLike] = None, fio: Optional[PathLike] = None, nvme_tcp: Optional[str] = None,
              net: bool = True, forwards: Sequence[Tuple[int, int]] = (), memory: Union[str, int] = "1G", cpus: int = 2, out: PathLike = "runs/vm-guest",
              accel: str = "auto", boot_timeout_s: float = 60.0, timeout_s: float = 3600.0, check: bool = True,
              log: Callable[[str], None] = print, on_workload: Optional[Callable[[Dict[str, Any]], None]] = None,
              pmem_bytes: int = 0, pmem_dir: Optional[PathLike] = None,
              job_files: Optional[Mapping[str, bytes]] = None) -> Dict[str, Any]:
    """Boot the guest without an ssdlab server: its disk is the namespace of an NVMe/TCP target
    already listening on the host (``nvme_tcp`` = "HOST:PORT/NQN", e.g. `ssdlab nvme serve`'s
    or another target's), or it has no disk (``nvme_tcp`` None: the script brings its own,
    e.g. the kernel's nvmet inside the guest). ``net``: a NIC on QEMU's user network (the host's
    loopback is HOST_FROM_GUEST; always on with ``nvme_tcp``). ``forwards``: (host port, guest
    port) pairs forwarded from the host's loopback into the guest (see :func:`boot`).
    ``pmem_bytes``: an emulated NVDIMM, /dev/pmem0 (fsdax) in the guest; ``job_files``: files
    for the workload in /ssdlab/job/files/ (see :func:`boot`).

    Writes output.txt, fio.json, guest/ (the other files of $SSDLAB_OUT), console.log, qemu.log
    and vm.json into ``out``; returns vm.json's contents (``status``: the workload's exit status
    or one of GUEST_STATUSES) with ``output``, the workload's console output. ``check``: raise
    :class:`VmError` when the status is not 0 (after writing ``out``)."""
    if script is not None and fio is not None:
        raise ValueError("give a guest script (--run) or a fio job (--fio), not both")
    if script is None and fio is None:
        if nvme_tcp is None:
            raise ValueError("a guest without a disk needs a script (--run)")
        fio = _default_job()
    work_file = Path(script if script is not None else fio)  # type: ignore[arg-type]
    if not work_file.is_file():
        raise FileNotFoundError(f"{'--run' if script is not None else '--fio'} {work_file}: no such file")
    if not 1 <= cpus <= 64:
        raise ValueError(f"--cpus {cpus}: expected 1 to 64")
    mode = "script" if script is not None else "fio"
    target, nqn = parse_nvme_tcp(nvme_tcp) if nvme_tcp is not None else (None, "")
    out = Path(out)
    info, status, files = boot(None, nqn, 4096, mode, work_file, memory=parse_size(memory, "memory"), cpus=cpus,
                               disk="nvme-tcp" if nvme_tcp else "none", out=out, accel=accel, boot_timeout_s=boot_timeout_s,
                               timeout_s=timeout_s, log=log, on_workload=on_workload, net=net, target=target, forwards=forwards,
                               pmem_bytes=pmem_bytes, pmem_dir=pmem_dir, job_files=job_files)
    (out / "server.log").unlink(missing_ok=True)  # there was no server
    output, _ = _save_results(out, files)
    (out / "vm.json").write_text(json.dumps(info, indent=2) + "\n")
    why = GUEST_STATUSES.get(status, f"exit status {status}")
    _say(log, f"guest workload {'finished' if status == 0 else f'FAILED ({why})'} in {info.get('workload_s') or 0:.1f} s "
              f"(boot to workload {info.get('boot_to_workload_s', 0):.1f} s); results in {out}")
    if check and status != 0:
        raise VmError(f"the guest workload ended with status {status} ({why}); its output is in {out / 'output.txt'}:\n"
                      f"{log_tail(out / 'output.txt', 10)}\n" + guest_logs(out / "console.log", out / "qemu.log", 10))
    return dict(info, output=output)


def _save_results(out: Path, files: Dict[str, bytes]) -> Tuple[str, Optional[Dict[str, Any]]]:
    """Write the guest's files into ``out``: output.txt, fio.json (parsed), the rest into
    ``out/guest/``. Returns (the workload's output, fio's JSON or None)."""
    output = files.pop("output.txt", b"").decode(errors="replace")
    (out / "output.txt").write_text(output)
    fio_json = None
    if "fio.json" in files:
        raw = files.pop("fio.json").decode(errors="replace")
        fio_json = parse_fio(raw)
        (out / "fio.json").write_text(json.dumps(fio_json, indent=2) + "\n" if fio_json else raw)
    if files:
        (out / "guest").mkdir(exist_ok=True)
        for name, data in files.items():
            (out / "guest" / name).write_bytes(data)
    return output, fio_json


def _check_pmem(pmem_bytes: int) -> None:
    if pmem_bytes < 0 or pmem_bytes % PMEM_ALIGN:
        raise ValueError(f"NVDIMM of {pmem_bytes} bytes: expected a multiple of {PMEM_ALIGN >> 20} MiB (the guest maps it "
                         "in memory sections of that size)")


def _check_memory(memory_bytes: int) -> None:
    if memory_bytes < MIN_MEMORY_BYTES:
        raise ValueError(f"--memory {memory_bytes >> 20}M: the guest needs at least {MIN_MEMORY_BYTES >> 20}M "
                         "(its tools unpack into RAM)")


def _default_job() -> Path:
    from .studies.reproduce import experiments_root

    return experiments_root() / "vm" / "raw-randrw.fio"


def wait_server(server: subprocess.Popen, addr: str, log_path: Path, timeout_s: float = 120.0) -> None:
    """Until the server answers on its address (it may first replay a journal)."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise VmError(f"ssdlab serve exited ({exit_text(server.returncode)}) before it was ready; its log ({log_path}):\n"
                          f"{log_tail(log_path)}")
        if "listening on" in log_path.read_text(errors="replace"):
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                pass
        time.sleep(0.05)
    raise VmError(f"ssdlab serve was not ready within {timeout_s:.0f} s; its log ({log_path}):\n{log_tail(log_path)}")


def _watch(state: Dict[str, Any], info: Dict[str, Any], log: Callable[[str], None], console: Path, qemu_log: Path,
           t_qemu: float, boot_timeout_s: float, timeout_s: float, on_workload) -> None:
    """Follow the guest from boot to power-off: the boot deadline, the server's health,
    progress lines, the overall deadline. Fills ``info`` with the times."""
    server, qemu_proc = state["server"], state["qemu"]
    booted = False
    last_progress = time.monotonic()
    server_dead_at = None
    pending = ""
    con = None
    try:
        while True:
            now = time.monotonic()
            try:
                pid, status, usage = os.wait4(qemu_proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == qemu_proc.pid:
                qemu_proc.returncode = os.waitstatus_to_exitcode(status)
                info["_qemu_rss"] = usage.ru_maxrss * 1024
            if con is None and console.exists():
                con = open(console, errors="replace")  # noqa: SIM115 -- read as it grows, closed in finally
            # Only what QEMU appended since the last look (a chatty workload's console grows).
            pending += con.read() if con else ""
            lines = pending.split("\n")
            pending = lines.pop()
            for line in lines:
                if GUEST_MARK not in line:
                    continue
                msg = line.split(GUEST_MARK, 1)[1].strip()
                if "workload start" in msg and not booted:
                    booted = True
                    info["boot_to_workload_s"] = round(now - t_qemu, 3)
                    m = re.search(r"uptime ([\d.]+) s", msg)
                    info["guest_uptime_at_workload_s"] = float(m.group(1)) if m else None
                    info["_t_workload"] = now
                    _say(log, f"guest up in {now - t_qemu:.1f} s; workload running")
                    if on_workload:
                        on_workload(state)
                elif "workload done" in msg and "_t_workload" in info:
                    info["workload_s"] = round(now - info["_t_workload"], 3)
            if qemu_proc.returncode is not None:
                break
            if not booted and now - t_qemu > boot_timeout_s:
                stop_process(qemu_proc, signal.SIGKILL)
                raise VmError(f"the guest did not reach its workload within {boot_timeout_s:.0f} s ({info['accel']}); "
                              + guest_logs(console, qemu_log))
            if server is not None and server.poll() is not None and server_dead_at is None:
                server_dead_at = now
                _say(log, f"{info.get('server_name', 'ssdlab serve')} died ({exit_text(server.returncode)}); stopping the guest")
            if server_dead_at is not None and now - server_dead_at > GRACE_AFTER_SERVER_DEATH_S:
                stop_process(qemu_proc, signal.SIGKILL)
                break
            if now - t_qemu > timeout_s:
                stop_process(qemu_proc, signal.SIGKILL)
                raise VmError(f"the guest run took longer than {timeout_s:.0f} s and was stopped; " + guest_logs(console, qemu_log))
            if booted and now - last_progress >= 10.0 and server_dead_at is None:
                last_progress = now
                live = _live(state["address"]) if state["address"] else ""
                _say(log, f"workload running for {now - info['_t_workload']:.0f} s{live}")
            time.sleep(0.05)
    finally:
        if con is not None:
            con.close()
    info.pop("_t_workload", None)
    if "workload_s" not in info and booted:
        info["workload_s"] = None
    if server_dead_at is not None:
        image = info.get("image")
        raise VmError(f"{info.get('server_name', 'ssdlab serve (the emulated SSD)')} died during the guest run "
                      f"({exit_text(server.returncode)}); the guest "
                      f"was stopped; "
                      + (f"Everything the server acknowledged is in {image} and its journal: `ssdlab serve CONFIG --image {image}` "
                         "recovers it; " if image else "its contents were in memory and are gone; ")
                      + guest_logs(console, qemu_log, 12))
    # A guest that gave up before its workload (no network, no disk) sent a status of its own.
    if not booted and _results(state["results"])[0] is None:
        raise VmError(f"QEMU exited ({exit_text(qemu_proc.returncode)}) before the guest reached its workload; "
                      + guest_logs(console, qemu_log))


def _live(addr: str) -> str:
    from .nbd import stats

    try:
        m = stats(addr)
    except Exception:  # the progress line is best effort; the run's checks come later
        return ""
    if "dlwa" not in m:  # another disk than the emulated SSD (`ssdlab rmml serve`)
        return f"; disk: {m.get('nbd', {}).get('requests', 0)} requests"
    return f"; device: host writes {m['host_write_bytes'] / 2**20:.0f} MiB, DLWA {m['dlwa']:.3f}, GC events {m['gc_events']}"


def parse_fio(text: str) -> Optional[Dict[str, Any]]:
    """fio's JSON output (fio may print notes before the JSON object)."""
    i = text.find("{")
    if i < 0:
        return None
    try:
        return json.loads(text[i:])
    except ValueError:
        return None


# --- reports -----------------------------------------------------------------------------------

def fio_summary(fio_json: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per fio job and direction that did I/O: IOPS, MiB/s, completion latency (ns)."""
    rows = []
    for job in fio_json.get("jobs", []):
        for op in ("read", "write"):
            d = job.get(op, {})
            if not d.get("total_ios"):
                continue
            clat = d.get("clat_ns", {})
            pct = clat.get("percentile", {})
            rows.append({"job": job.get("jobname"), "op": op, "ios": d["total_ios"], "iops": d.get("iops", 0.0),
                         "mib_per_s": d.get("bw_bytes", 0) / 2**20, "clat_ns_mean": clat.get("mean"),
                         "clat_ns_p50": pct.get("50.000000"), "clat_ns_p99": pct.get("99.000000"),
                         "clat_ns_p999": pct.get("99.900000"), "errors": job.get("error", 0)})
    return rows


def render(out: PathLike) -> Path:
    """report.md of a vm run directory: the guest's view beside the device's."""
    from .report import _fmt_ns, render as render_device

    out = Path(out)
    info = json.loads((out / "vm.json").read_text())
    device_md = render_device(out).read_text()
    m = json.loads((out / "metrics.json").read_text())
    lines = [f"# ssdlab vm: {out.name}", "",
             f"Guest: {info['disk']} disk, {info['memory_bytes'] >> 20} MiB, {info['cpus']} CPUs, {info['accel']} "
             f"({info['accel_why']}); workload `{info['workload']}` ({info['mode']}), exit status {info.get('status')}.", "",
             "| measure | value |", "|---|---|",
             f"| QEMU start to guest workload | {info.get('boot_to_workload_s', 0):.2f} s (guest uptime {info.get('guest_uptime_at_workload_s')} s) |",
             f"| workload | {info.get('workload_s') or 0:.2f} s |",
             f"| whole run (server start to stop) | {info.get('wall_s', 0):.2f} s |",
             f"| QEMU peak RSS | {info.get('qemu_peak_rss_bytes', 0) / 2**20:.0f} MiB |",
             f"| ssdlab serve peak RSS | {info.get('server_peak_rss_bytes', 0) / 2**20:.0f} MiB |", ""]
    fio_path = out / "fio.json"
    if fio_path.exists():
        fj = parse_fio(fio_path.read_text())
        if fj:
            lines += ["## Guest (fio)", "", "| job | op | I/Os | IOPS | MiB/s | clat mean | p50 | p99 | p99.9 |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for r in fio_summary(fj):
                lines.append(f"| {r['job']} | {r['op']} | {r['ios']} | {r['iops']:.0f} | {r['mib_per_s']:.1f} | "
                             f"{_fmt_ns(r['clat_ns_mean'])} | {_fmt_ns(r['clat_ns_p50'])} | {_fmt_ns(r['clat_ns_p99'])} | "
                             f"{_fmt_ns(r['clat_ns_p999'])} |")
            lines.append("")
    else:
        text = (out / "output.txt").read_text(errors="replace") if (out / "output.txt").exists() else ""
        rows = text.splitlines()[-20:]
        lines += ["## Guest (script output, last lines)", "", "```", *rows, "```", ""]
    w = m["latency_ns"].get("write", {})
    lines += ["## Device", "",
              f"The device saw {m['host_write_bytes'] / 2**20:.1f} MiB of host writes, {m['host_read_bytes'] / 2**20:.1f} MiB "
              f"of reads and {m['host_trim_bytes'] / 2**20:.1f} MiB of trims; DLWA {m['dlwa']:.4f}, {m['gc_events']} GC events; "
              + (f"device write latency p50 {_fmt_ns(w.get('p50'))}, p99 {_fmt_ns(w.get('p99'))}." if w.get("count") else "no writes."),
              ""]
    # The device part is the standard run report, one heading level down.
    body = device_md.split("\n", 1)[1] if device_md.startswith("# ") else device_md
    lines.append(body.replace("\n## ", "\n### "))
    md = out / "report.md"
    md.write_text("\n".join(lines))
    return md


# --- command line ------------------------------------------------------------------------------

def _cmd_guest(args, say: Callable[[str], None]) -> int:
    """`ssdlab vm --nvme-tcp HOST:PORT/NQN` (the guest on a target already listening) or
    `ssdlab vm --run SCRIPT` without CONFIG (no disk; the network with --net)."""
    try:
        g = run_guest(script=args.run, fio=args.fio, nvme_tcp=args.nvme_tcp, net=args.net or args.nvme_tcp is not None,
                      forwards=args.forward or (),
                      memory=parse_size(args.memory, "--memory"),
                      cpus=args.cpus, out=args.out, accel=args.accel, boot_timeout_s=args.boot_timeout, timeout_s=args.timeout,
                      check=False, log=say, pmem_bytes=parse_size(args.pmem, "--pmem"))
    except VmError as e:
        print(f"ssdlab vm: error: {e}", file=sys.stderr)
        return 1
    fio_path = Path(args.out) / "fio.json"
    fj = parse_fio(fio_path.read_text()) if fio_path.exists() else None
    for r in fio_summary(fj or {}):
        print(f"guest {r['job']} {r['op']}: {r['iops']:.0f} IOPS, {r['mib_per_s']:.1f} MiB/s, "
              f"clat p99 {(r['clat_ns_p99'] or 0) / 1e3:.0f} us")
    print(f"guest ({g.get('nvme_tcp') or 'no disk'}): status {g['status']}; boot to workload {g.get('boot_to_workload_s') or 0:.1f} s "
          f"({g['accel']}); results in {args.out}")
    if g["status"] != 0:
        why = GUEST_STATUSES.get(g["status"], f"the guest workload exited with status {g['status']}")
        print(f"ssdlab vm: error: {why} (see {Path(args.out) / 'console.log'} and {Path(args.out) / 'output.txt'})",
              file=sys.stderr)
        return 1
    return 0


def cmd_vm(args) -> int:
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr))
    if args.nvme_tcp is not None or args.config is None:
        if args.nvme_tcp is not None and (args.config is not None or args.image is not None or args.serve_arg):
            raise ValueError("--nvme-tcp: the guest's disk is the target's; give no CONFIG, --image or --serve-arg")
        if args.nvme_tcp is None and (args.run is None or args.image is not None or args.serve_arg):
            raise ValueError("without CONFIG the guest has no disk: give a --run script (and no --image or --serve-arg), "
                             "or CONFIG, or --nvme-tcp HOST:PORT/NQN")
        return _cmd_guest(args, say)
    try:
        rep = run(args.config, image=args.image, script=args.run, fio=args.fio, memory=parse_size(args.memory, "--memory"),
                  cpus=args.cpus, disk=args.disk, out=args.out, accel=args.accel, boot_timeout_s=args.boot_timeout,
                  timeout_s=args.timeout, serve_args=tuple(args.serve_arg or ()), check=False, log=say, net=args.net,
                  forwards=args.forward or (), pmem_bytes=parse_size(args.pmem, "--pmem"))
    except VmError as e:
        print(f"ssdlab vm: error: {e}", file=sys.stderr)
        return 1
    g = rep.guest
    if rep.fio:
        for r in fio_summary(rep.fio):
            print(f"guest {r['job']} {r['op']}: {r['iops']:.0f} IOPS, {r['mib_per_s']:.1f} MiB/s, "
                  f"clat p99 {(r['clat_ns_p99'] or 0) / 1e3:.0f} us")
    print(f"device: DLWA {rep.dlwa:.4f}, host writes {rep.host_write_bytes / 2**20:.1f} MiB, GC events {rep.gc_events}; "
          f"boot to workload {g.get('boot_to_workload_s', 0):.1f} s ({g['accel']}); report {Path(args.out) / 'report.md'}")
    if g["status"] in GUEST_STATUSES:
        print(f"ssdlab vm: error: {GUEST_STATUSES[g['status']]} (see {Path(args.out) / 'console.log'})", file=sys.stderr)
        return 1
    if g["status"] != 0:
        print(f"ssdlab vm: error: the guest workload exited with status {g['status']} (see {Path(args.out) / 'output.txt'})",
              file=sys.stderr)
        return 1
    return 0


def _port_pair(text: str) -> Tuple[int, int]:
    import argparse

    h, sep, g = text.partition(":")
    if not (sep and h.isdigit() and g.isdigit() and 0 < int(h) < 65536 and 0 < int(g) < 65536):
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOSTPORT:GUESTPORT")
    return int(h), int(g)


def add_cli(sub) -> None:
    v = sub.add_parser("vm", help="boot a Linux guest on an emulated SSD and run fio or a script in it",
                       description="Serve CONFIG's device with `ssdlab serve`, boot the guest built by `make setup` under "
                                   "QEMU with the device as its disk, run a fio job or a shell script in it, and write the "
                                   "guest's results beside the device's metrics to --out. See docs/vm.md.")
    v.add_argument("config", nargs="?", help="device config (conventional or FDP personality); none with --nvme-tcp, "
                                             "and none for a --run script on a guest without a disk")
    v.add_argument("--image", help="raw image file for the device's contents (persists with its device state; "
                                   "default: in memory, an empty SSD)")
    g = v.add_mutually_exclusive_group()
    g.add_argument("--run", metavar="SCRIPT", help="shell script to run in the guest ($SSDLAB_DISK is the disk; files "
                                                   "written to $SSDLAB_OUT come back into OUT/guest/)")
    g.add_argument("--fio", metavar="JOB", help="fio job file to run on the guest's disk (default: "
                                                "experiments/vm/raw-randrw.fio)")
    v.add_argument("--memory", default="1G", help="guest RAM (default %(default)s)")
    v.add_argument("--cpus", type=int, default=2, help="guest virtual CPUs (default %(default)s)")
    v.add_argument("--disk", choices=DISKS, default="nvme", help="how the guest sees the SSD (default %(default)s)")
    v.add_argument("--net", action="store_true",
                   help=f"give the guest a virtio-net NIC on QEMU's user network ({GUEST_IP}; the host's loopback is "
                        f"{HOST_FROM_GUEST})")
    v.add_argument("--forward", metavar="HOSTPORT:GUESTPORT", type=_port_pair, action="append",
                   help="forward TCP connections to the host's 127.0.0.1:HOSTPORT to the guest's GUESTPORT (implies --net; "
                        "repeatable)")
    v.add_argument("--nvme-tcp", metavar="HOST:PORT/NQN",
                   help="instead of serving CONFIG: the guest's disk is the first namespace of subsystem NQN of an NVMe/TCP target "
                        "already listening on the host at HOST:PORT (the guest connects with nvme-cli; no device metrics)")
    v.add_argument("--pmem", metavar="SIZE", default="0",
                   help="an emulated NVDIMM of SIZE (a multiple of 128M), an fsdax /dev/pmem0 in the guest ($SSDLAB_PMEM; "
                        "ext4 mounts it -o dax); its contents live in /dev/shm for the run")
    v.add_argument("--out", default="runs/vm", help="run directory (default %(default)s)")
    v.add_argument("--accel", choices=ACCELS, default="auto",
                   help="auto: KVM if a probe boot works on it, else TCG (default %(default)s)")
    v.add_argument("--boot-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="the guest must start its workload within this (default %(default)s)")
    v.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS", help="bound on the whole run (default %(default)s)")
    v.add_argument("--serve-arg", action="append", metavar="ARG",
                   help="extra `ssdlab serve` argument, repeatable (e.g. --serve-arg=--latency --serve-arg=emulated)")
    v.add_argument("-q", "--quiet", action="store_true")
    v.set_defaults(func=cmd_vm)
