"""vm-baseline (ssdlab.studies.vm_baseline): the same fio job on the host (fio's nbd engine) and
in a guest (`ssdlab vm`) on fresh emulated SSDs; the platform's claims judged by the one judge.

The reproduction test boots one guest (about a minute); the others build points and reports
from made-up rows and need no QEMU."""

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from clitools import ssdlab, write

from ssdlab import vm
from ssdlab.studies.base import PointResult
from ssdlab.studies.verdict import NOT_REPRODUCED, REPRODUCED, check_saved, load

MiB = 1 << 20
needs_guest = pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or not (vm.guest_dir() / "vmlinuz").exists(),
    reason="no QEMU or guest: run `make setup` (scripts/build-guest.sh)")

# 8 MiB of 4 KiB random writes, one at a time: a fixed amount, so both sides send the device the
# same commands; no randseed of its own, so the experiment's seed is added.
JOB = "[w]\nrw=randwrite\nbs=4k\niodepth=1\nio_size=8m\nrandrepeat=1\n"


def _experiments(tmp_path, seeds="", latency='["none"]', disks='["virtio"]'):
    root = tmp_path / "experiments"
    (root / "vm").mkdir(parents=True)
    write(root / "vm" / "w.fio", JOB)
    (root / "vmb").mkdir()
    write(root / "vmb" / "experiment.toml", f"""kind = "vm-baseline"
seed = 7
[device]
preset = "tiny"
[quick]
{seeds}
jobs = ["w.fio"]
disks = {disks}
latency = {latency}
memory = "512M"
cpus = 2
""")
    return root


@needs_guest
def test_a_raw_disk_job_sends_the_device_the_same_writes_from_guest_and_host(tmp_path):
    # The vm-baseline claim, small: with no file system in between, fio's fixed amount of 4 KiB
    # random writes reaches the device as the same bytes whether fio runs on the host (nbd
    # engine) or in the guest (libaio on a virtio disk).
    env = dict(os.environ, SSDLAB_EXPERIMENTS=str(_experiments(tmp_path)))
    ssdlab("reproduce", "vmb", "--quick", "--jobs", "1", "--out", tmp_path / "reports", env=env, timeout=400)
    out = tmp_path / "reports" / "vmb"
    (row,) = list(csv.DictReader((out / "baseline.csv").open()))
    assert int(row["device_host_write_bytes_host"]) == int(row["device_host_write_bytes_guest"]) == 8 * MiB
    assert int(row["device_host_trim_bytes_guest"]) == 0  # the guest added nothing of its own
    # The seed reached fio on both sides.
    run = out / "runs" / "w-none"
    for side in ("w-none-host", "w-none-guest-virtio"):
        fio = vm.parse_fio((run / side / "fio.json").read_text())
        assert fio is not None and fio["global options"]["randseed"] == "7", side
    # Every verdict is the judge's, the report shows the judge's table, and the headline holds.
    assert check_saved(out / "verdicts.json") == []
    _, judged = load(out / "verdicts.json")
    md = (out / "report.md").read_text()
    from ssdlab.studies.verdict import table

    assert all(line in md.splitlines() for line in table(judged))
    assert [j.verdict for j in judged if j.claim.headline] == [REPRODUCED]


def test_the_seed_reaches_the_device_and_fio(tmp_path, monkeypatch):
    from ssdlab.studies.vm_baseline.experiment import points
    from ssdlab.studies.reproduce import load_spec

    monkeypatch.setenv("SSDLAB_EXPERIMENTS", str(_experiments(tmp_path, seeds="seeds = [5, 6]")))
    pts = points(load_spec("vmb"), "quick")
    assert [(p.name, p.input["config"]["seed"], p.input["job"].splitlines()[:2]) for p in pts] == [
        ("w-none_s5", 5, ["[global]", "randseed=5"]), ("w-none_s6", 6, ["[global]", "randseed=6"])]


def test_a_job_file_randseed_is_set_to_the_seed():
    from ssdlab.studies.vm_baseline.experiment import seeded_job

    text = (Path(__file__).resolve().parents[1] / "experiments" / "vm" / "raw-randrw.fio").read_text()
    assert seeded_job(text, 42) == text and "randseed=43\n" in seeded_job(text, 43)


def _row(job="w", latency="none", host_bytes=8 * MiB, guest_bytes=8 * MiB, dlwa_host=1.5, dlwa_guest=1.5,
         p50_host=20.0, p50_guest=300.0):
    return {"job": job, "latency": latency, "disk": "virtio", "accel": "tcg", "host_iops": 40000.0, "guest_iops": 3000.0,
            "guest_over_host_iops": 0.075, "host_write_p99_us": 50.0, "guest_write_p99_us": 900.0,
            "host_read_p99_us": None, "guest_read_p99_us": None, "host_write_mean_us": 25.0, "guest_write_mean_us": 330.0,
            "device_host_write_bytes_host": host_bytes, "device_host_write_bytes_guest": guest_bytes,
            "device_dlwa_host": dlwa_host, "device_dlwa_guest": dlwa_guest, "device_gc_events_host": 3,
            "device_gc_events_guest": 4, "device_write_p99_us_host": 5.0, "device_write_p99_us_guest": 5.0,
            "boot_to_workload_s": 4.0, "guest_workload_s": 3.0, "qemu_peak_rss_mib": 500.0,
            "server_peak_rss_mib_guest": 50.0, "server_peak_rss_mib_host": 50.0, "iodepth": 1,
            "host_write_p50_us": p50_host, "guest_write_p50_us": p50_guest, "device_write_p50_us_host": 5.0,
            "device_write_p50_us_guest": 5.0, "device_host_trim_bytes_guest": 0}


def _report(tmp_path, monkeypatch, **row):
    """The report of one made-up pair; its judged claims by claim."""
    from ssdlab.studies.reproduce import load_spec
    from ssdlab.studies.vm_baseline.report import write_report

    monkeypatch.setenv("SSDLAB_EXPERIMENTS", str(_experiments(tmp_path)))
    out = tmp_path / "report"
    out.mkdir()
    results = {"w-none": PointResult("w-none", {}, {"rows": [_row(**row)]}, tmp_path)}
    write_report(load_spec("vmb"), "quick", out, results, lambda s: None)
    assert check_saved(out / "verdicts.json") == []
    return {j.claim.what.split(":")[0]: j for j in load(out / "verdicts.json")[1]}


def test_a_guest_that_loses_a_write_fails_the_headline(tmp_path, monkeypatch):
    judged = _report(tmp_path, monkeypatch, guest_bytes=8 * MiB - 4096)
    assert judged["A guest drives the emulated SSD as the host does"].verdict == NOT_REPRODUCED


def test_dlwa_outside_the_tolerance_is_not_reproduced_with_the_gc_events_beside_it(tmp_path, monkeypatch):
    judged = _report(tmp_path, monkeypatch, dlwa_host=1.50, dlwa_guest=1.52)
    j = next(j for w, j in judged.items() if w.startswith("The device's DLWA"))
    assert (j.verdict, j.why is not None and "GC events host 3, guest 4" in j.why.measured) == (NOT_REPRODUCED, True)


def test_the_guest_adds_latency_at_the_median(tmp_path, monkeypatch):
    judged = _report(tmp_path, monkeypatch)
    j = next(j for w, j in judged.items() if w.startswith("A real OS is in the loop"))
    assert (j.verdict, j.measured) == (REPRODUCED, "w/none/virtio: +280 us at the median (guest 300 us, host 20 us)")


def test_the_report_says_one_seed(tmp_path, monkeypatch):
    _report(tmp_path, monkeypatch)
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.splitlines()[2].startswith("Mode `quick`, 1 seed (7; ")
    assert json.loads((tmp_path / "report" / "verdicts.json").read_text())["study"] == "vm-baseline"
