"""`ssdlab vm`: a Linux guest (built by scripts/build-guest.sh) on the emulated SSD. The guest
makes file systems, writes and verifies files with fio, and powers off; the device's metrics
must show its writes. A kill -9 of the server mid-run is reported and the image survives."""

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from clitools import ssdlab, write

from ssdlab import vm

MiB = 1 << 20
pytestmark = pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or not (vm.guest_dir() / "vmlinuz").exists(),
    reason="no QEMU or guest: run `make setup` (scripts/build-guest.sh)")

# The tiny preset (217 MiB logical), timing on: small enough that mkfs and fio take seconds.
TINY = 'preset = "tiny"\n'

EXT4_VERIFY = """set -e
mkfs.ext4 -q -F "$SSDLAB_DISK"
mkdir -p /mnt/fs
mount -t ext4 "$SSDLAB_DISK" /mnt/fs
fio --name=verify --directory=/mnt/fs --nrfiles=2 --size=16m --bs=4k --rw=randwrite --ioengine=libaio \\
    --iodepth=8 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=1 \\
    --output-format=json --output="$SSDLAB_OUT/fio.json"
umount /mnt/fs
e2fsck -fn "$SSDLAB_DISK"
echo checked > "$SSDLAB_OUT/fsck.txt"
"""


def _nothing_running_from(path):
    """No process (QEMU, ssdlab serve) whose command line names a file under ``path``."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            assert str(path) not in cmd, f"still running: {cmd}"


def _pids_gone(*pids):
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"process {pid} is still running")


def test_guest_makes_ext4_verifies_files_with_fio_and_powers_off(tmp_path):
    cfg = write(tmp_path / "ssd.toml", TINY)
    script = write(tmp_path / "ext4.sh", EXT4_VERIFY)
    out = tmp_path / "run"
    p = ssdlab("vm", cfg, "--run", script, "--out", out, "--memory", "512M", "--cpus", "2", "--timeout", "240", timeout=300)
    assert "device: DLWA" in p.stdout and "boot to workload" in p.stdout
    info = json.loads((out / "vm.json").read_text())
    assert info["status"] == 0 and info["qemu_exit"] == 0 and info["server_exit"] == 0
    assert 0 < info["boot_to_workload_s"] < 60
    assert info["qemu_peak_rss_bytes"] > 64 * MiB and info["server_peak_rss_bytes"] > MiB
    # fio wrote 16 MiB (two files of 8 MiB) on ext4 and read every block back with its checksum.
    job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert job["error"] == 0
    assert job["write"]["io_bytes"] == 16 * MiB and job["read"]["io_bytes"] == 16 * MiB
    assert (out / "guest" / "fsck.txt").read_text() == "checked\n"  # e2fsck -fn found it clean
    # The device saw the guest: mkfs's discard of the whole disk, the file data and the metadata.
    m = json.loads((out / "metrics.json").read_text())
    assert m["host_write_bytes"] >= 16 * MiB and m["host_read_bytes"] >= 16 * MiB
    assert m["host_trim_bytes"] >= 200 * MiB
    assert m["nand_write_bytes"] >= m["host_write_bytes"] * 0.9  # the rest may still sit in the write buffer
    console = (out / "console.log").read_text()
    assert "ssdlab-guest: powering off" in console and "Kernel panic" not in console
    report = (out / "report.md").read_text()
    assert "## Guest (fio)" in report and "DLWA" in report and "QEMU peak RSS" in report
    _nothing_running_from(tmp_path)


def test_kill_9_of_the_server_is_reported_and_the_image_survives(tmp_path):
    cfg = write(tmp_path / "ssd.toml", TINY)
    image = tmp_path / "disk.img"
    # Phase 1: a file whose hash the guest prints once it is on the device (sync), then writes
    # until the server dies under it.
    first = write(tmp_path / "first.sh", """set -e
mkfs.ext4 -q -F "$SSDLAB_DISK"
mkdir -p /mnt/fs
mount -t ext4 "$SSDLAB_DISK" /mnt/fs
dd if=/dev/urandom of=/mnt/fs/keep.bin bs=1M count=8 2>/dev/null
sync
echo "keep-sha $(sha256sum /mnt/fs/keep.bin | cut -d' ' -f1)"
echo synced-for-test
fio --name=busy --directory=/mnt/fs --size=64m --bs=4k --rw=randwrite --ioengine=libaio --iodepth=8 \\
    --direct=1 --time_based --runtime=600 >/dev/null 2>&1
""")
    out1 = tmp_path / "run1"
    killed = {}

    def on_workload(state):
        def killer():
            deadline = time.time() + 120
            while time.time() < deadline:
                if "synced-for-test" in state["console"].read_text(errors="replace"):
                    time.sleep(1.0)  # the busy fio is writing now
                    killed["pid"] = state["server"].pid
                    killed["qemu"] = state["qemu"].pid
                    os.kill(state["server"].pid, signal.SIGKILL)
                    return
                time.sleep(0.1)
        threading.Thread(target=killer, daemon=True).start()

    with pytest.raises(vm.VmError) as e:
        vm.run(cfg, image=image, script=first, out=out1, memory="512M", on_workload=on_workload, timeout_s=300,
               log=lambda s: None)
    msg = str(e.value)
    assert "ssdlab serve (the emulated SSD) died during the guest run (killed by SIGKILL)" in msg, msg
    assert str(image) in msg and "recovers it" in msg
    assert killed, "the test never killed the server"
    _pids_gone(killed["pid"], killed["qemu"])
    _nothing_running_from(tmp_path)
    console = (out1 / "console.log").read_text(errors="replace")
    sha = next(line.split()[1] for line in console.splitlines() if line.startswith("keep-sha "))

    # Phase 2: a new server on the same image recovers the device state (journal replay) and a
    # new guest finds the synced file intact and the file system consistent.
    second = write(tmp_path / "second.sh", f"""set -e
mkdir -p /mnt/fs
mount -t ext4 "$SSDLAB_DISK" /mnt/fs
test "$(sha256sum /mnt/fs/keep.bin | cut -d' ' -f1)" = "{sha}"
echo file-intact
umount /mnt/fs
e2fsck -fn "$SSDLAB_DISK"
""")
    out2 = tmp_path / "run2"
    rep = vm.run(cfg, image=image, script=second, out=out2, memory="512M", log=lambda s: None)
    assert rep.guest["status"] == 0 and "file-intact" in rep.output
    assert "journal records replayed" in (out2 / "server.log").read_text()
    # The device remembers the first run's writes (mkfs, the file, the busy fio's acknowledged writes).
    assert rep.metrics["device_lifetime"]["host_write_bytes"] >= 8 * MiB + rep.metrics["host_write_bytes"]


def _broken_guest(tmp_path, monkeypatch, init_text):
    """A guest directory with the real kernel and an initramfs whose /init is ``init_text``
    (None: no /init at all, so the kernel panics)."""
    kernel, base = vm._guest_files()
    d = tmp_path / "guest"
    d.mkdir()
    (d / "vmlinuz").symlink_to(kernel)
    if init_text is None:
        (d / "initramfs.cpio").write_bytes(vm._cpio_newc([("empty", b"", 0o040755)]))
    else:
        extra = vm._cpio_newc([("init", init_text.encode(), 0o100755)])
        vm._write_initrd(base, extra, d / "initramfs.cpio")
    monkeypatch.setenv("SSDLAB_GUEST_DIR", str(d))


def test_a_guest_that_hangs_before_its_workload_is_stopped_with_the_console_tail(tmp_path, monkeypatch):
    _broken_guest(tmp_path, monkeypatch, "#!/bin/busybox sh\necho init-hangs-here > /dev/ttyS0\nexec sleep 600\n")
    cfg = write(tmp_path / "ssd.toml", TINY)
    script = write(tmp_path / "true.sh", "true\n")
    pids = {}
    with pytest.raises(vm.VmError) as e:
        vm.run(cfg, script=script, out=tmp_path / "run", accel="tcg", boot_timeout_s=8.0, log=lambda s: None,
               on_workload=lambda st: pids.update(st))
    msg = str(e.value)
    assert msg.startswith("the guest did not reach its workload within 8 s (tcg)") and "\n  | " in msg, msg
    assert not pids  # it never got there
    _nothing_running_from(tmp_path)
    # The CLI says the same: one line, then the tail.
    p = ssdlab("vm", cfg, "--run", script, "--out", tmp_path / "run-cli", "--accel", "tcg", "--boot-timeout", "8", "-q",
               check=False, env={**os.environ, "SSDLAB_GUEST_DIR": str(tmp_path / "guest")})
    assert p.returncode == 1 and p.stderr.startswith("ssdlab vm: error: the guest did not reach its workload")
    assert "Traceback" not in p.stderr
    _nothing_running_from(tmp_path)


def test_a_guest_kernel_that_panics_is_reported_with_the_panic(tmp_path, monkeypatch):
    _broken_guest(tmp_path, monkeypatch, None)
    cfg = write(tmp_path / "ssd.toml", TINY)
    with pytest.raises(vm.VmError) as e:
        vm.run(cfg, script=write(tmp_path / "true.sh", "true\n"), out=tmp_path / "run", accel="tcg", log=lambda s: None)
    msg = str(e.value)
    assert msg.startswith("QEMU exited (exit status 0) before the guest reached its workload") and "Kernel panic" in msg, msg
    _nothing_running_from(tmp_path)


def test_a_missing_guest_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SSDLAB_GUEST_DIR", str(tmp_path / "nothing"))
    with pytest.raises(vm.VmError, match="run `make setup` or `bash scripts/build-guest.sh`"):
        vm.run(write(tmp_path / "ssd.toml", TINY), script=write(tmp_path / "t.sh", "true\n"), out=tmp_path / "run")


@pytest.mark.parametrize("args, expected", [
    (["--run", "missing.sh"], "--run missing.sh: no such file"),
    (["--memory", "64M"], "--memory 64M: the guest needs at least 384M"),
    (["--cpus", "0"], "--cpus 0: expected 1 to 64"),
    (["--memory", "lots"], "--memory: expected a size"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, expected):
    cfg = write(tmp_path / "ssd.toml", TINY)
    p = ssdlab("vm", cfg, *args, "--out", tmp_path / "run", check=False, cwd=tmp_path)
    assert p.returncode == 2 and expected in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_zns_devices_are_refused(tmp_path):
    cfg = write(tmp_path / "zns.toml", 'preset = "tiny"\npersonality = "zns"\n')
    p = ssdlab("vm", cfg, "--out", tmp_path / "run", check=False)
    assert p.returncode == 2 and "serves conventional and FDP devices" in p.stderr



REFERENCE = Path(__file__).parent / "data" / "nvmet-reference"


def test_guest_network_and_nvme_tcp_host_against_the_kernels_own_target(tmp_path):
    """The guest's NIC on QEMU's user network and its NVMe/TCP host, end to end without ssdlab's
    target: the guest runs the kernel's nvmet on a null_blk namespace, connects to it over
    127.0.0.1 with nvme-cli (the helper /init uses for --nvme-tcp), reads its Identify data (and
    a zoned namespace's), verifies 8 MiB with fio, and sends a line to a listener on the host's
    loopback (10.0.2.2)."""
    import socket

    token = f"t{os.getpid()}-{int(time.time())}"
    got = []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(150)
        port = srv.getsockname()[1]

        def accept():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                got.append(data.decode(errors="replace"))

        listener = threading.Thread(target=accept, daemon=True)
        listener.start()
        script = write(tmp_path / "nvmet.sh", f"HOST_PORT={port}\nTOKEN={token}\n" + (REFERENCE / "capture.sh").read_text())
        out = tmp_path / "run"
        g = vm.run_guest(script=script, net=True, out=out, memory="768M", cpus=2, timeout_s=240, log=lambda s: None)
        listener.join(5)
    assert g["status"] == 0 and g["disk"] == "none" and g["net"] is True, g
    assert got == [f"hello-from-guest {token}\n"]  # the guest reached the host's loopback
    guest = out / "guest"
    assert "connected: controller /dev/nvme0, namespace /dev/nvme0n1" in g["output"], g["output"]
    # Identify Controller and Namespace: 4096-byte structures, in text, JSON and binary.
    ctrl, ns = (guest / "id-ctrl.bin").read_bytes(), (guest / "id-ns.bin").read_bytes()
    assert len(ctrl) == 4096 and len(ns) == 4096
    id_ctrl = json.loads((guest / "id-ctrl.json").read_text())
    assert id_ctrl["mn"].strip() == "Linux" and id_ctrl["subnqn"] == "nqn.2014-08.io.ssdlab:nvmet-reference"
    assert ctrl[24:64].decode().strip() == "Linux"  # MN, bytes 24-63
    assert ctrl[768:768 + 37].decode() == "nqn.2014-08.io.ssdlab:nvmet-reference"  # SUBNQN, bytes 768-1023
    id_ns = json.loads((guest / "id-ns.json").read_text())
    assert id_ns["nsze"] == 64 * MiB // 4096 and id_ns["lbafs"][id_ns["flbas"] & 0xF]["ds"] == 12  # 4 KiB blocks
    assert int.from_bytes(ns[0:8], "little") == id_ns["nsze"]  # NSZE, bytes 0-7
    assert "nvme0n1" in (guest / "nvme-list.txt").read_text()
    assert "nqn.2014-08.io.ssdlab:nvmet-reference" in (guest / "discover.txt").read_text()
    assert 'new ctrl: NQN "nqn.2014-08.io.ssdlab:nvmet-reference", addr 127.0.0.1:4420' in (guest / "dmesg-connect.txt").read_text()
    job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == 8 * MiB and job["read"]["io_bytes"] == 8 * MiB
    console = (out / "console.log").read_text(errors="replace")
    assert "ssdlab-guest: network: eth0 10.0.2.15/24 up" in console and "Kernel panic" not in console
    assert 'Removing ctrl: NQN "nqn.2014-08.io.ssdlab:nvmet-reference"' in (guest / "dmesg-disconnect.txt").read_text()
    assert "nqn.2014-08.org.nvmexpress.discovery" in (guest / "dmesg-discover.txt").read_text()
    # The zoned namespace: nvmet's ZNS over TCP (8 MiB zones of 4 KiB blocks, command set 2).
    assert "connected: controller /dev/nvme1, zoned namespace /dev/nvme1n1" in g["output"], g["output"]
    zns_ns = json.loads((guest / "zns-id-ns.json").read_text())
    assert zns_ns["lbafe"][0]["zsze"] == 8 * MiB // 4096
    assert int.from_bytes((guest / "zns-id-ns.bin").read_bytes()[2816:2824], "little") == 8 * MiB // 4096  # LBAFE0.ZSZE
    assert "csi     : 0x2" in (guest / "zns-ns-descs.txt").read_text()
    assert json.loads((guest / "zns-report-zones.json").read_text())["nr_zones"] == 8
    # The files kept in tests/data/nvmet-reference/ are this script's on this kernel (all but the
    # serial number, which nvmet draws at random).
    if (guest / "kernel.txt").read_text() == (REFERENCE / "kernel.txt").read_text():
        kept = json.loads((REFERENCE / "id-ctrl.json").read_text())
        assert {**kept, "sn": ""} == {**id_ctrl, "sn": ""}
        for name in ("id-ns.bin", "zns-id-ctrl.bin", "zns-id-ns.bin", "zns-nvm-id-ns.bin"):
            assert (guest / name).read_bytes() == (REFERENCE / name).read_bytes(), name
    _nothing_running_from(tmp_path)


def test_guest_disk_over_nvme_tcp_from_a_target_on_the_hosts_loopback(tmp_path):
    """`ssdlab vm --nvme-tcp` end to end: a first guest serves the kernel's nvmet on the host's
    loopback (a forwarded port, tests/data/nvmet-reference/serve.sh); a second guest boots with
    its disk from it (/init connects to 10.0.2.2, fio verifies 4 MiB on the namespace, /init
    disconnects before power-off) and the target sees its host come and leave."""
    from ssdlab.serving import free_port

    port = free_port()
    nqn = "nqn.2014-08.io.ssdlab:nvmet-reference"
    serve = write(tmp_path / "serve.sh", "WAIT_S=150\n" + (REFERENCE / "serve.sh").read_text())
    target_out = tmp_path / "target"
    target = {}

    def run_target():
        try:
            target["info"] = vm.run_guest(script=serve, forwards=[(port, 4420)], out=target_out, memory="512M", cpus=1,
                                          timeout_s=200, log=lambda s: None)
        except Exception as e:  # reported by the assertions below
            target["error"] = e

    t = threading.Thread(target=run_target, daemon=True)
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline and "nvmet-reference: ready" not in _read(target_out / "console.log"):
        assert t.is_alive(), target
        time.sleep(0.2)
    assert "nvmet-reference: ready" in _read(target_out / "console.log"), target
    job = write(tmp_path / "verify.fio", "[verify]\nsize=4m\nbs=4k\nrw=randwrite\niodepth=4\nverify=crc32c\ndo_verify=1\n"
                                         "verify_fatal=1\n")
    out = tmp_path / "host"
    g = vm.run_guest(fio=job, nvme_tcp=f"127.0.0.1:{port}/{nqn}", out=out, memory="512M", cpus=1, timeout_s=200,
                     log=lambda s: None)
    t.join(60)
    assert g["status"] == 0 and g["disk"] == "nvme-tcp" and g["nvme_tcp"] == f"10.0.2.2 {port} {nqn}", g
    fio_job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert fio_job["error"] == 0 and fio_job["write"]["io_bytes"] == 4 * MiB and fio_job["read"]["io_bytes"] == 4 * MiB
    console = (out / "console.log").read_text(errors="replace")
    assert f"nvme-tcp: connecting to {nqn} at 10.0.2.2:{port}" in console
    assert "ssdlab-guest: disk /dev/nvme0n1 ready (131072 sectors)" in console
    assert console.index("nvme-tcp: disconnected") < console.index("ssdlab-guest: powering off")
    assert "error" not in target, target
    assert target["info"]["status"] == 0 and "nvmet-reference: the host came and left" in target["info"]["output"]
    assert "creating nvm controller 1 for subsystem " + nqn in (target_out / "guest" / "dmesg-nvmet.txt").read_text()
    _nothing_running_from(tmp_path)


def _read(path):
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_an_nvme_tcp_target_that_is_not_there_is_a_guest_status_with_the_reason(tmp_path):
    from ssdlab.serving import free_port

    port = free_port()  # nothing listens there
    out = tmp_path / "run"
    p = ssdlab("vm", "--nvme-tcp", f"127.0.0.1:{port}/nqn.2014-08.io.ssdlab:absent", "--run", write(tmp_path / "t.sh", "true\n"),
               "--out", out, "--memory", "512M", "--cpus", "1", "-q", check=False)
    assert p.returncode == 1 and "ssdlab vm: error: the guest's NVMe/TCP connect failed" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert json.loads((out / "vm.json").read_text())["status"] == 252
    console = (out / "console.log").read_text(errors="replace")
    assert f"nvme-tcp: connect failed: nvme_tcp_connect: nvme connect -t tcp -a 10.0.2.2 -s {port}" in console
    assert "connection refused" in console.lower()
    assert "connect -t tcp" in (out / "guest" / "nvme-connect-error.txt").read_text()
    _nothing_running_from(tmp_path)
