"""ZNS from Python: zone commands, NVMe errors by name, and a zoned-log run at DLWA 1."""

import pytest

import ssdlab
from ssdlab import Device, Workload

SECTOR = 4096


def zns_device(**zns):
    return Device("tiny", personality="zns", storage="data", timing={"enabled": False},
                  geometry={"blocks_per_plane": 16, "pages_per_block": 8},
                  zns={"zone_width": 2, "zone_capacity": 0.75, "max_open": 2, "max_active": 3, **zns})


def test_append_report_and_reset():
    dev = zns_device()
    info = dev.zns.info()
    assert info == {"zones": 32, "zone_size": 64, "zone_capacity": 48, "max_open": 2, "max_active": 3,
                    "conventional_zones": 0}
    zs = info["zone_size"]
    assert dev.zns.append(zs, b"a" * SECTOR * 2) == zs
    assert dev.zns.append(zs, b"b" * SECTOR) == zs + 2
    assert dev.read(zs * SECTOR, 3 * SECTOR) == b"a" * 2 * SECTOR + b"b" * SECTOR
    rep = dev.zns.report(zs, "implicitly-open")
    assert rep[0]["wp"] == zs + 3 and rep[0]["state"] == "implicitly-open"
    dev.zns.action(zs, "reset")
    assert dev.zns.report(zs, max_zones=1)[0]["state"] == "empty"
    assert dev.read(zs * SECTOR, SECTOR) == bytes(SECTOR)


def test_errors_carry_the_nvme_status_name():
    dev = zns_device()
    with pytest.raises(ssdlab.NvmeError, match="Zone Invalid Write"):
        dev.write(5 * SECTOR, b"x" * SECTOR)
    dev.zns.action(0, "finish")
    with pytest.raises(ssdlab.NvmeError, match="Zone Is Full"):
        dev.zns.append(0, b"x" * SECTOR)
    with pytest.raises(ssdlab.NvmeError, match="Invalid Zone State Transition"):
        dev.zns.action(0, "open")
    dev.zns.action(64, "open")
    dev.zns.action(128, "open")
    with pytest.raises(ssdlab.NvmeError, match="Too Many Open Zones"):
        dev.zns.append(192, b"x" * SECTOR)
    with pytest.raises(ValueError, match="unknown zone action"):
        dev.zns.action(0, "explode")
    with pytest.raises(ssdlab.NvmeError, match="not a ZNS device"):
        Device("tiny").zns.info()


def test_zoned_log_run_has_no_device_write_amplification():
    dev = Device("zns-ssd", geometry={"blocks_per_plane": 32}, timing={"enabled": False})
    rep = dev.run(Workload(block_bytes=131072, stop_device_writes=2.5))
    assert rep.dlwa == 1.0
    assert rep["gc_events"] == 0
    assert rep["zns"]["zone_resets_total"] > 0


def test_conventional_zones_take_random_writes_beside_sequential_zones():
    dev = zns_device(conventional_zones=2)
    info = dev.zns.info()
    assert info["conventional_zones"] == 2 and info["zones"] == 30  # 2 spare zones stay hidden
    conv = [z for z in dev.zns.report(filter="not-write-pointer")]
    assert [(z["index"], z["zone_type"]) for z in conv] == [(0, "conventional"), (1, "conventional")]
    # Overwrite conventional sectors in any order, many times: the last write wins.
    for rnd in range(12):
        for lba in (5, 100, 3, 64, 127):
            dev.write(lba * SECTOR, bytes([rnd, lba]) * (SECTOR // 2))
    for lba in (5, 100, 3, 64, 127):
        assert dev.read(lba * SECTOR, SECTOR) == bytes([11, lba]) * (SECTOR // 2)
    with pytest.raises(ssdlab.NvmeError, match="Invalid Field"):
        dev.zns.action(0, "reset")
    with pytest.raises(ssdlab.NvmeError, match="Zone Invalid Write"):
        dev.write((128 + 1) * SECTOR, b"x" * SECTOR)  # sequential zone 2, not at its write pointer
    m = dev.run(Workload(pattern="uniform", span=128 / (30 * 64), stop_ops=3000, queue_depth=1))
    assert m.metrics["zns"]["conventional"]["gc_segments_collected"] > 0
    assert m.dlwa > 1.0  # random overwrites on flash cost relocations, unlike the zones
    dev.check_invariants()
