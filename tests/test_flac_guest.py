"""flac's guest-dax step (python/ssdlab/studies/flac/guest.py) and the NVDIMM it needs from
`ssdlab.vm`: the guest's runs.txt parsed, the ratios' intervals, the QEMU arguments and job
archive for an NVDIMM, the step's place in the experiment and the report's section, without
QEMU; then one small run of the step in a real guest (about 25 s under TCG), skipped where
QEMU or a guest with the step's tools is missing."""

import math
from pathlib import Path

import pytest

from ssdlab import vm
from ssdlab.studies.flac import guest
from ssdlab.studies.flac.experiment import points
from ssdlab.studies.flac.report import _guest_section

MiB = 1 << 20

RUNS_TXT = """info setup_ns 1272807650
info pmem_mib 502
info mount /dev/pmem0 /mnt/pm ext4 rw,noatime,dax=always 0 0
run ext4-dax grep 0 1000000000 1250000000 0m0.000s 0m0.000s 0m0.120s 0m0.030s
run ext4-dax grep 1 2000000000 2200000000 0m0.120s 0m0.030s 0m0.230s 0m0.070s
run ext4-dax tar-c 0 3000000000 3100000000 0m0.230s 0m0.070s 0m0.250s 0m0.110s
run ext4-dax tar-x 0 3200000000 3350000000 0m0.250s 0m0.110s 0m0.260s 0m0.190s
run flac-pm-off grep 0 4000000000 4500000000 1m0.500s 0m1.000s 1m0.900s 0m1.500s
done
"""


def test_runs_txt_is_parsed_into_runs_with_cpu_times_and_tar_summed():
    p = guest.parse_runs(RUNS_TXT)
    assert p["done"] and p["failure"] is None
    assert p["info"] == {"setup_ns": 1272807650, "pmem_mib": 502, "mount": "/dev/pmem0 /mnt/pm ext4 rw,noatime,dax=always 0 0"}
    by = {(r["engine"], r["app"], r["run"]): r for r in p["runs"]}
    g0 = by[("ext4-dax", "grep", 0)]
    assert g0["seconds"] == pytest.approx(0.25) and g0["user_s"] == pytest.approx(0.12) and g0["sys_s"] == pytest.approx(0.03)
    assert by[("ext4-dax", "grep", 1)]["seconds"] == pytest.approx(0.2)
    # tar is the create and the extract of the same run index, summed (as the host's shim step does).
    tar = by[("ext4-dax", "tar", 0)]
    assert tar["seconds"] == pytest.approx(0.25) and tar["user_s"] == pytest.approx(0.03) and tar["sys_s"] == pytest.approx(0.12)
    # `times` prints minutes and seconds.
    f = by[("flac-pm-off", "grep", 0)]
    assert f["user_s"] == pytest.approx(0.4) and f["sys_s"] == pytest.approx(0.5)
    rows = {(r["engine"], r["app"]): r for r in guest.summary(p["runs"])}
    assert rows[("ext4-dax", "grep")]["runs"] == pytest.approx([0.25, 0.2])
    # The median as the host's shim step takes it: for an even count the upper of the two middle
    # runs (a time one run took).
    assert rows[("ext4-dax", "grep")]["seconds"] == pytest.approx(0.25)
    assert guest.median_run([0.3, 0.1, 0.2]) == 0.2 and guest.median_run([0.4, 0.1, 0.3, 0.2]) == 0.3


def test_runs_txt_failures_and_malformed_lines():
    p = guest.parse_runs("run ext4 grep 0 1 2 0m0.0s 0m0.0s 0m0.0s 0m0.0s\nfail ext4: grep counted 3 matching lines, the tree has 4\n")
    assert p["failure"] == "ext4: grep counted 3 matching lines, the tree has 4" and not p["done"]
    assert guest.parse_runs("")["runs"] == [] and not guest.parse_runs("")["done"]
    with pytest.raises(ValueError, match="10 fields"):
        guest.parse_runs("run ext4 grep 0 1 2\n")
    with pytest.raises(ValueError, match="clock went back"):
        guest.parse_runs("run ext4 grep 0 5 2 0m0.0s 0m0.0s 0m0.0s 0m0.0s\n")
    with pytest.raises(ValueError, match="times"):
        guest.parse_runs("run ext4 grep 0 1 2 0.0 0m0.0s 0m0.0s 0m0.0s\n")


def test_ratio_interval_is_on_log_times():
    r, lo, hi = guest.ratio_interval([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (r, lo, hi) == pytest.approx((2.0, 2.0, 2.0))
    r, lo, hi = guest.ratio_interval([2.0, 2.2, 1.8], [1.0, 1.1, 0.9])
    assert r == pytest.approx(math.exp(math.log(2.0 * 2.2 * 1.8) / 3 - math.log(1.0 * 1.1 * 0.9) / 3))
    assert 0 < lo < r < hi
    # The interval is symmetric on the log scale.
    assert math.log(r / lo) == pytest.approx(math.log(hi / r))
    assert guest.ratio_interval([2.0], [1.0, 1.1]) == (pytest.approx(2.0 / math.sqrt(1.1)), None, None)
    with pytest.raises(ValueError):
        guest.ratio_interval([], [1.0])
    rows = guest.ratios([{"engine": "ext4-dax", "app": "grep", "seconds": 1.0}, {"engine": "flac-pm-off", "app": "grep", "seconds": 0.5}])
    assert [(r["num"], r["den"], r["app"], r["ratio"]) for r in rows] == [("ext4-dax", "flac-pm-off", "grep", pytest.approx(2.0))]


def test_qemu_arguments_and_job_archive_for_an_nvdimm(tmp_path):
    img = tmp_path / "nvdimm"  # a directory: QEMU makes the DIMM's file there and unlinks it
    args = vm._qemu_args("qemu", "tcg", Path("k"), Path("i"), 1024 * MiB, 2, tmp_path / "c", tmp_path / "r", None, "none", 4096,
                         pmem=(img, 512 * MiB))
    assert args[args.index("-machine") + 1] == "q35,nvdimm=on"
    assert args[args.index("-m") + 1] == "1024M,slots=1,maxmem=1536M"
    assert f"memory-backend-file,id=pmem0,share=on,mem-path={img},size={512 * MiB}" in args
    assert "nvdimm,id=nvdimm0,memdev=pmem0" in args
    plain = vm._qemu_args("qemu", "tcg", Path("k"), Path("i"), 1024 * MiB, 2, tmp_path / "c", tmp_path / "r", None, "none", 4096)
    assert plain[plain.index("-machine") + 1] == "q35" and not any("nvdimm" in a for a in plain)
    for bad in (100 * MiB, -128 * MiB):
        with pytest.raises(ValueError, match="multiple of 128 MiB"):
            vm._check_pmem(bad)
    vm._check_pmem(0)
    vm._check_pmem(512 * MiB)
    cpio = vm._job_archive("script", "none", b"echo hi\n", {"SSDLAB_PMEM_BYTES": str(512 * MiB)}, {"data.tar": b"x" * 5})
    assert b"ssdlab/job/files/data.tar\0" in cpio and b"SSDLAB_PMEM_BYTES=536870912\n" in cpio and b"xxxxx" in cpio
    with pytest.raises(ValueError, match="plain file name"):
        vm._job_archive("script", "none", b"", None, {"../x": b""})


def _spec(with_guest):
    m = {"seeds": [42, 43], "huge_pages": True, **{k: 1 for k in ("pm_bytes", "io_sizes", "cached", "larger", "point_bytes", "small_point_bytes",
                                              "threads", "repeats", "tree", "bigsort_ints", "run_ints", "app_dram", "shim_tree",
                                              "shim_sort_ints", "shim_dram", "shim_big", "ablation_flush", "ablation_load",
                                              "checkpoint")}}
    if with_guest:
        m["guest_dax"] = {"runs": 3}
    return {"kind": "flac", "quick": m}


def test_the_guest_step_is_one_point_only_in_modes_with_its_table():
    without = points(_spec(False), "quick")
    assert not any(p.name.startswith("guest-dax") for p in without)
    with_guest = points(_spec(True), "quick")
    g = [p for p in with_guest if p.name.startswith("guest-dax")]
    assert [p.name for p in g] == ["guest-dax"]
    task = g[0].input
    assert task["seed"] == 42 and task["m"]["guest_dax"] == {"runs": 3}
    # Its own input is its table and the work directory's settings: another step's settings
    # changing leave it as it was (`--resume` reuses it).
    assert set(task["m"]) == {"guest_dax", "huge_pages", "pm_bytes"}
    other = _spec(True)
    other["quick"]["shim_big"] = "1M"
    assert next(p.input for p in points(other, "quick") if p.name == "guest-dax") == task
    # The other points' inputs do not change with the guest's table.
    assert [p.input for p in with_guest if p.name != "guest-dax"] == [p.input for p in without]


def test_the_report_section_gives_times_ratios_and_the_caveat():
    runs = guest.parse_runs("".join(
        f"run {e} {a} {i} 0 {int(t * 1e9 * (1 + 0.1 * i))} 0m0.000s 0m0.000s 0m0.010s 0m0.020s\n"
        for e, t in (("ext4-dax", 0.2), ("flac-pm-off", 0.1), ("ext4", 0.4), ("ext4-warm", 0.3))
        for a in ("start", "grep", "tar-c", "tar-x", "sort", "dd", "cp") for i in range(3)) + "done\n")["runs"]
    res = {"runs": runs, "rows": guest.summary(runs), "info": {"pmem_mib": 502}, "data_bytes": 25 * MiB,
           "guest": {"accel": "tcg", "memory_bytes": 1024 * MiB, "pmem_bytes": 512 * MiB, "boot_to_workload_s": 6.0, "workload_s": 30.0}}
    md = "\n".join(_guest_section(res))
    assert guest.caveat("tcg") in md and "Not judged" in md and "TCG" in md
    kvm = "\n".join(_guest_section({**res, "guest": {**res["guest"], "accel": "kvm"}}))
    assert guest.caveat("kvm") in kvm and "under KVM" in kvm and "TCG" not in kvm.replace(guest.caveat("kvm"), "")
    assert "| grep | 0.220 | 0.110 | 0.440 | 0.330 |" in md
    # Every engine's runs spread alike (+10% per run), so each ratio is exact and the interval
    # (independent samples on both sides) spans it.
    row = next(ln for ln in md.splitlines() if ln.startswith("| grep | 2.00x ("))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert [c.split()[0] for c in cells] == ["2.00x", "4.00x", "3.00x", "2.00x"]
    for c in cells:
        interval, medians = c.split("(")[1].rstrip(")").split("; medians ")
        lo, hi = (float(x) for x in interval.rstrip("x").split("-"))
        assert lo < float(c.split("x")[0]) < hi
        # The ratio of the medians printed beside it: the same here (every run scaled alike).
        assert medians == c.split()[0]
    assert _guest_section(None) == []
    assert "Not run on this machine: no qemu-system-x86_64" in "\n".join(_guest_section({"skipped": "no qemu-system-x86_64"}))


@pytest.mark.skipif(guest.unavailable() is not None, reason=f"guest-dax cannot run here: {guest.unavailable()}")
def test_the_step_runs_every_engine_in_one_guest(tmp_path):
    """A small data set, two runs of each program: every engine ran every program, the guest
    checked every program's output (grep's count, sort's order, tar's and cp's copies), ext4 was
    mounted with DAX on the NVDIMM, and the runs took time."""
    g = {"tree": {"files": 8, "bytes": "1M"}, "sort_ints": 5000, "big": "4M", "runs": 2, "memory": "1G", "pmem": "256M",
         "flac_pm": "64M", "flac_dram": "32M"}
    lines = []
    r = guest.run_guest_dax(g, 42, tmp_path, lines.append)
    assert "skipped" not in r
    assert r["info"]["mount"].split()[3].split(",")[-1] == "dax=always"
    got = {(x["engine"], x["app"]): len(x["runs"]) for x in r["rows"]}
    for e in guest.GUEST_ENGINES:
        for a in ("start", *guest.GUEST_APPS):
            assert got.get((e, a)) == 2, (e, a)
    assert all(x["seconds"] > 0 for x in r["runs"])
    assert r["info"]["flac_image_bytes"] == 64 * MiB
    # FlacFS's statistics: one process per recorded run (not the untimed helpers'), and the
    # large reads of dd and cp attached.
    fs = r["flac_stats"]
    assert {a: fs[a]["processes"] for a in ("grep", "sort", "dd", "cp", "tar-c", "tar-x")} == dict.fromkeys(
        ("grep", "sort", "dd", "cp", "tar-c", "tar-x"), 2)
    assert fs["dd"]["mapped_bytes"] == 2 * 4 * MiB and fs["tar"]["processes"] == 4
    # Nothing of the NVDIMM is left: its directory (where QEMU made and unlinked its file) is gone.
    assert not list(tmp_path.glob("ssdlab-pmem-*"))
    assert 0 < fs["grep"]["io_s"] < fs["grep"]["mounted_s"]
    assert any("guest-dax" in ln for ln in lines)
