"""`ssdlab nvme serve` / `ssdlab nvme stats`: the NVMe/TCP target from the command line. The
protocol itself is tested in crates/nvmet (a host written from the specifications); Linux's own
NVMe/TCP host drives it in a guest (tests/test_vm.py's NVMe/TCP tests)."""

import json

from clitools import SSDLAB, Server, free_port, ssdlab, write


def test_serve_stats_and_the_metrics_at_shutdown(tmp_path):
    cfg = write(tmp_path / "d.toml", 'preset = "tiny"\n[timing]\nenabled = false\n')
    port = free_port()
    srv = Server(SSDLAB + ["nvme", "serve", str(cfg), "--listen", f"127.0.0.1:{port}", "--metrics-out",
                           str(tmp_path / "m")], port, tmp_path / "nvme.log")
    try:
        p = ssdlab("nvme", "stats", f"127.0.0.1:{port}", "--json")
        m = json.loads(p.stdout)
        assert m["nvme"]["subsystem_nqn"] == "nqn.2026-11.dev.ssdlab:ssd" and m["nvme"]["controllers"] == 1
        assert ssdlab("nvme", "stats", f"127.0.0.1:{port}").stdout.startswith("DLWA ")
        wrong = ssdlab("nvme", "stats", f"127.0.0.1:{port}", "--nqn", "nqn.2026-11.example:other", check=False)
        assert wrong.returncode != 0 and "Connect refused" in wrong.stderr, wrong.stderr
    finally:
        assert srv.stop() == 0, srv.log.read_text()[-2000:]
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["nvme"]["counters"]["controllers_created"] == 2  # the wrong NQN made none


def test_bad_options_are_refused_in_one_line(tmp_path):
    cfg = write(tmp_path / "d.toml", 'preset = "tiny"\n')
    for extra, want in ((["--nqn", "not-an-nqn"], "qualified name"),
                        (["--listen", f"0.0.0.0:{free_port()}"], "--allow-remote"),
                        (["--image", str(tmp_path)], "is a directory")):
        p = ssdlab("nvme", "serve", cfg, *extra, check=False)
        assert p.returncode != 0 and want in p.stderr, (extra, p.stderr)
        assert "Traceback" not in p.stderr
    ocssd = write(tmp_path / "o.toml", 'preset = "tiny"\npersonality = "ocssd"\n')
    p = ssdlab("nvme", "serve", ocssd, check=False)
    assert p.returncode != 0 and "conventional, FDP and ZNS" in p.stderr, p.stderr


# --- Linux's own NVMe/TCP host in a guest ---------------------------------------------------

import shutil  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from ssdlab import vm  # noqa: E402
from test_vm import EXT4_VERIFY  # noqa: E402

MiB = 1 << 20
NQN = "nqn.2026-11.dev.ssdlab:ssd"
guest = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or not (vm.guest_dir() / "vmlinuz").exists(),
                           reason="no QEMU or guest: run `make setup` (scripts/build-guest.sh)")


def serve(tmp: Path, config: str, *extra: str, port: int = 0) -> Server:
    cfg = write(tmp / f"target-{time.monotonic_ns()}.toml", config)
    port = port or free_port()
    return Server(SSDLAB + ["nvme", "serve", str(cfg), "--listen", f"127.0.0.1:{port}", *extra], port,
                  tmp / f"target-{port}-{time.monotonic_ns()}.log")


def stop_clean(srv: Server) -> None:
    """Stop the target: it exits cleanly and Linux's host never made it drop a connection for a
    protocol error (the host then reconnects and its file system sees I/O errors)."""
    assert srv.stop() == 0, srv.log.read_text()[-2000:]
    drops = [line for line in srv.log.read_text().splitlines() if ": dropped: " in line]
    assert not drops, drops[:5]


def boot(tmp: Path, port: int, script: str, name: str = "guest", **kw):
    out = tmp / name
    info = vm.run_guest(script=write(tmp / f"{name}.sh", script), nvme_tcp=f"127.0.0.1:{port}/{NQN}", out=out,
                        memory="512M", cpus=2, timeout_s=240, log=lambda s: None, **kw)
    return info, out


@guest
def test_linux_formats_ext4_and_verifies_files_on_a_conventional_namespace(tmp_path):
    srv = serve(tmp_path, 'preset = "tiny"\n', "--metrics-out", str(tmp_path / "m"))
    try:
        # test_vm.py's ext4 + fio verify script, with the controller's Identify data kept too.
        script = EXT4_VERIFY.replace("set -e\n", 'set -e\nnvme id-ctrl /dev/nvme0 > "$SSDLAB_OUT/id-ctrl.txt"\n', 1)
        info, out = boot(tmp_path, srv.port, script)
    finally:
        stop_clean(srv)
    assert info["status"] == 0
    console = (out / "console.log").read_text(errors="replace")
    assert "nvme nvme0: creating 2 I/O queues." in console and "ssdlab-guest: nvme-tcp: disconnected" in console
    idc = (out / "guest" / "id-ctrl.txt").read_text()
    assert "ssdlab emulated SSD" in idc and NQN in idc
    job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == 16 * MiB and job["read"]["io_bytes"] == 16 * MiB
    assert (out / "guest" / "fsck.txt").read_text() == "checked\n"  # e2fsck -fn found it clean
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["host_write_bytes"] >= 16 * MiB and m["host_trim_bytes"] > 0  # mkfs discards the disk
    assert m["nvme"]["counters"]["errors"] == 0


@guest
def test_a_zns_device_is_a_host_managed_zoned_disk_in_linux(tmp_path):
    """The kernel's zoned block layer takes the namespace (host-managed, the configured zones),
    fio's zonemode=zbd writes and verifies through it, nvme-cli's zns commands agree, and a
    zone reset shows up as erases in ssdlab's metrics."""
    srv = serve(tmp_path, 'preset = "tiny"\npersonality = "zns"\n', "--metrics-out", str(tmp_path / "m"))
    try:
        info, out = boot(tmp_path, srv.port, """set -e
d=${SSDLAB_DISK#/dev/}
cat /sys/block/$d/queue/zoned /sys/block/$d/queue/nr_zones > "$SSDLAB_OUT/zoned.txt"
nvme zns report-zones /dev/$d -d 2 > "$SSDLAB_OUT/report-zones.txt"
echo mq-deadline > /sys/block/$d/queue/scheduler   # zoned writes in order (fio's zbd mode needs it)
fio --name=zbd --filename="$SSDLAB_DISK" --zonemode=zbd --direct=1 --ioengine=libaio --iodepth=4 --rw=write \\
    --bs=64k --size=32m --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=json --output="$SSDLAB_OUT/fio.json"
blkzone report "$SSDLAB_DISK" > "$SSDLAB_OUT/written.txt"
blkzone reset "$SSDLAB_DISK"
blkzone report "$SSDLAB_DISK" > "$SSDLAB_OUT/reset.txt"
""")
    finally:
        stop_clean(srv)
    assert info["status"] == 0
    g = out / "guest"
    assert (g / "zoned.txt").read_text().split() == ["host-managed", "64"]
    assert "nr_zones: 64" in (g / "report-zones.txt").read_text()
    job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == 32 * MiB and job["read"]["io_bytes"] == 32 * MiB
    written = (g / "written.txt").read_text().splitlines()
    assert len(written) == 64 and sum("zcond:14(fu)" in z for z in written) == 8  # 32 MiB = 8 zones of 4 MiB
    assert all("zcond: 1(em)" in z for z in (g / "reset.txt").read_text().splitlines())
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["host_write_bytes"] == 32 * MiB and m["nand_erase_count"] >= 8


@guest
def test_kill_9_of_the_target_mid_writes_loses_nothing_the_guest_saw_completed(tmp_path):
    """fio writes 24 MiB with checksums on the namespace; the target (on --image) is killed
    with SIGKILL in the middle and started again on the same port; Linux's host reconnects and
    goes on, and fio's verify pass reads every block back intact."""
    image = tmp_path / "disk.img"
    cfg = 'preset = "tiny"\n[timing]\nenabled = false\n'
    srv = serve(tmp_path, cfg, "--image", str(image))
    port = srv.port
    restarted = {}

    def kill_and_restart(_info):
        # Once fio has started writing: kill -9, wait, start again on the same port.
        deadline = time.time() + 120
        while time.time() < deadline:
            console = tmp_path / "guest" / "console.log"
            if console.exists() and "fio-writing" in console.read_text(errors="replace"):
                break
            time.sleep(0.2)
        time.sleep(2.0)
        srv.proc.kill()
        srv.stop()
        time.sleep(1.0)
        restarted["srv"] = serve(tmp_path, cfg, "--image", str(image), port=port)

    t = threading.Thread(target=kill_and_restart, args=(None,), daemon=True)
    t.start()
    try:
        # The guest kernel (6.1) sends a request on the dead connection from the submitting
        # process's context without MSG_NOSIGNAL ("failed to send request -32" on the console),
        # so fio itself can get SIGPIPE and die; fio ignores it here and the host reconnects.
        info, out = boot(tmp_path, port, """set -e
trap '' PIPE
echo fio-writing > /dev/console
fio --name=w --filename="$SSDLAB_DISK" --size=24m --bs=64k --rw=write --ioengine=libaio --iodepth=8 --direct=1 \\
    --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=json --output="$SSDLAB_OUT/fio.json"
""")
        # The restarted target came back from its image's journal.
        m = json.loads(ssdlab("nvme", "stats", f"127.0.0.1:{port}", "--json").stdout)
    finally:
        t.join(150)
        if "srv" in restarted:
            assert restarted["srv"].stop() == 0
    assert info["status"] == 0
    assert m["recovery"]["journal_records_replayed"] > 0, m["recovery"]
    console = (out / "console.log").read_text(errors="replace")
    assert "Reconnecting in" in console and "Successfully reconnected" in console, console[-3000:]
    job = json.loads((out / "fio.json").read_text())["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == 24 * MiB and job["read"]["io_bytes"] == 24 * MiB


@guest
def test_nvme_cli_sees_fdp_handles_and_writes_land_in_their_reclaim_units(tmp_path):
    """nvme-cli's fdp commands (configs, status, stats, update, events) on an FDP device, and
    writes tagged with two placement identifiers (`nvme write -T 2 -S PID`) land in the two
    handles' reclaim units, per nvme-cli's status and ssdlab's per-handle metrics."""
    srv = serve(tmp_path, 'preset = "tiny"\n[ftl]\nspare_factor = 0.2\n[fdp]\nenabled = true\nhandles = 2\n',
                "--metrics-out", str(tmp_path / "m"))
    try:
        info, out = boot(tmp_path, srv.port, """set -e
nvme fdp configs /dev/nvme0 -e 1 > "$SSDLAB_OUT/configs.txt"
dd if=/dev/urandom of=/tmp/d bs=64k count=1 2>/dev/null
nvme write "$SSDLAB_DISK" -s 0 -c 15 -z 65536 -d /tmp/d -T 2 -S 0
nvme write "$SSDLAB_DISK" -s 16 -c 15 -z 65536 -d /tmp/d -T 2 -S 1
nvme fdp status "$SSDLAB_DISK" > "$SSDLAB_OUT/status.txt"
nvme fdp stats /dev/nvme0 -e 1 > "$SSDLAB_OUT/stats.txt"
nvme fdp update "$SSDLAB_DISK" -p 1
nvme fdp events /dev/nvme0 -e 1 > "$SSDLAB_OUT/events.txt"
""")
    finally:
        stop_clean(srv)
    assert info["status"] == 0
    g = out / "guest"
    configs = (g / "configs.txt").read_text()
    assert "Number of Reclaim Unit Handles: 2" in configs and "Reclaim Unit Nominal Size: 4194304" in configs
    assert (g / "status.txt").read_text().count("Reclaim Unit Available Media Writes (RUAMW): 1008") == 2
    assert "Host Bytes with Metadata Written (HBMW): 131072" in (g / "stats.txt").read_text()
    events = (g / "events.txt").read_text()
    assert "Reclaim Unit Not Fully Written" in events and "Placement Identifier (PID): 0x1" in events
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert [h["host_write_bytes"] for h in m["fdp"]["handles"]] == [65536, 65536]


@guest
def test_a_zoned_btrfs_formats_takes_a_tree_remounts_and_checks_clean_on_a_zns_namespace(tmp_path):
    """A zoned file system on the zoned namespace: mkfs.btrfs -O zoned, a copy of a file tree,
    unmount, mount again, the same checksums, `btrfs check` clean; btrfs's zones show in the
    device's report."""
    srv = serve(tmp_path, 'preset = "tiny"\npersonality = "zns"\n', "--metrics-out", str(tmp_path / "m"))
    try:
        info, out = boot(tmp_path, srv.port, """set -e
modprobe btrfs
mkfs.btrfs -q -f -O zoned -d single -m single "$SSDLAB_DISK"
mkdir -p /mnt/z
mount -t btrfs "$SSDLAB_DISK" /mnt/z
mkdir -p /mnt/z/tree/gen && cp -a /lib/modules /usr/sbin /mnt/z/tree/
for i in $(seq 1 300); do head -c $((i * 997)) /dev/urandom > /mnt/z/tree/gen/f$i; done
sums() { (cd /mnt/z/tree && find . -type f -exec md5sum {} + | sort); }
sums > "$SSDLAB_OUT/before.txt"
umount /mnt/z
mount -t btrfs "$SSDLAB_DISK" /mnt/z
sums > "$SSDLAB_OUT/after.txt"
umount /mnt/z
btrfs check "$SSDLAB_DISK" > "$SSDLAB_OUT/check.txt" 2>&1
blkzone report "$SSDLAB_DISK" > "$SSDLAB_OUT/zones.txt"
""")
    finally:
        stop_clean(srv)
    assert info["status"] == 0, (out / "output.txt").read_text()[-2000:]
    g = out / "guest"
    before = (g / "before.txt").read_text()
    assert before.count("\n") > 300 and before == (g / "after.txt").read_text()
    assert "no error found" in (g / "check.txt").read_text()
    zones = (g / "zones.txt").read_text().splitlines()
    assert sum("zcond: 1(em)" not in z for z in zones) >= 3  # superblock log, metadata and data zones
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["host_write_bytes"] > 8 * MiB
