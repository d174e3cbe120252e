"""FDP from Python: placement on writes, logs, handle types, and the segregation result."""

import pytest

import ssdlab
from ssdlab import Device, Mix, Workload

SECTOR = 4096


def fdp_device(**fdp):
    return Device("tiny", storage="data", timing={"enabled": False},
                  geometry={"blocks_per_plane": 256, "pages_per_block": 32}, ftl={"spare_factor": 0.12},
                  fdp={"enabled": True, "handles": 4, **fdp})


def test_placed_writes_read_back_and_show_in_ruh_status():
    dev = fdp_device()
    pid = dev.fdp.placement_id(0, 3)
    dev.write(0, b"a" * SECTOR * 4, placement=pid)
    dev.write(8 * SECTOR, b"b" * SECTOR)  # default handle
    assert dev.read(0, SECTOR * 4) == b"a" * SECTOR * 4
    status = dev.fdp.ruh_status()
    ru = dev.fdp.configurations()["configurations"][0]["runs"] // SECTOR
    by_handle = {s["handle"]: s["ruamw"] for s in status}
    assert by_handle[3] == ru - 4 and by_handle[0] == ru - 1 and by_handle[1] == ru
    assert dev.fdp.usage() == ["host-specified", "unused", "unused", "host-specified"]
    dev.fdp.ruh_update([pid])
    assert dev.fdp.events()[-1]["kind"] == "ru-not-fully-written"
    stats = dev.fdp.statistics()
    assert stats["hbmw"] == 5 * SECTOR
    assert stats["mbmw"] == 4 * SECTOR, "the default handle's sector is still in the write buffer"
    dev.flush()
    stats = dev.fdp.statistics()
    assert stats["mbmw"] == 8 * SECTOR, "flush pads and programs the buffered page"


def test_invalid_placement_is_an_nvme_error_naming_the_status():
    dev = fdp_device()
    with pytest.raises(ssdlab.NvmeError, match="Invalid Field in Command"):
        dev.write(0, b"x" * SECTOR, placement=77)
    plain = Device("tiny")
    with pytest.raises(ssdlab.NvmeError, match="FDP Disabled"):
        plain.fdp.statistics()


def test_fdp_segregation_beats_the_same_device_without_fdp():
    mix = Mix([(Workload(pattern="sequential", span=0.5, block_bytes=131072, placement=0), 1),
               (Workload(pattern="uniform", offset=0.5, span=0.4, placement=1), 16)], stop_device_writes=1.5, queue_depth=1)
    results = {}
    for enabled in (True, False):
        dev = Device("tiny", timing={"enabled": False}, geometry={"blocks_per_plane": 256, "pages_per_block": 32},
                     ftl={"spare_factor": 0.12}, fdp={"enabled": enabled, "handles": 4})
        dev.run(mix)
        results[enabled] = dev.run(mix)
    on, off = results[True], results[False]
    seq = next(h for h in on["fdp"]["handles"] if h["handle"] == 0)
    assert seq["dlwa"] < 1.1
    assert off.dlwa > on.dlwa * 1.1
    assert "fdp" not in off.metrics


def test_fdp_preset_is_the_papers_shape():
    cfg = ssdlab.resolve_config("fdp-ssd")
    assert cfg["fdp"]["enabled"] and cfg["fdp"]["handles"] == 8 and cfg["fdp"]["reclaim_groups"] == 1
    assert cfg["fdp"]["handle_types"] == ["initially-isolated"]


def test_fdp_preset_offers_configurations_chosen_at_format_time():
    dev = Device("fdp-ssd", fdp={"configuration": 2})
    log = dev.fdp.configurations()
    assert log["number_of_configurations"] == 3 and log["configuration_in_use"] == 2
    assert [(c["nrg"], c["nruh"], c["ruh_descriptors"][0]["type"]) for c in log["configurations"]] == [
        (1, 8, "initially-isolated"), (1, 8, "persistently-isolated"), (4, 8, "initially-isolated")]
    # Four reclaim groups: placement identifiers carry the group in their top bits.
    assert len(dev.fdp.ruh_status()) == 32
    assert dev.fdp.placement_id(3, 0) != dev.fdp.placement_id(0, 0)
    with pytest.raises(ssdlab.ConfigError, match="fdp.configuration"):
        Device("fdp-ssd", fdp={"configuration": 5})


from clitools import TINY_FDP_TOML  # noqa: E402

MIX_RUN = TINY_FDP_TOML + """[precondition]
sequential_fill = false
random_device_writes = 0.0
[workload]
queue_depth = 1
stop_device_writes = 2.0
mix = [
  { weight = 1, pattern = "sequential", span = 0.5, block_bytes = [131072], placement = 0 },
  { weight = 32, pattern = "uniform", offset = 0.5, span = 0.4, placement = 1 },
]
"""


def test_a_toml_mix_runs_from_the_cli_with_per_handle_figures(tmp_path):
    import json

    from clitools import ssdlab as cli, write

    cfg = write(tmp_path / "mix.toml", MIX_RUN)
    cli("run", cfg, "--out", tmp_path / "out")
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    h = {x["handle"]: x for x in m["fdp"]["handles"]}
    # Equal bytes through both handles (weights 1 : 32 with 128 KiB : 4 KiB writes); the
    # sequential handle's data never needs relocating.
    assert 0.9 < h[0]["host_write_bytes"] / h[1]["host_write_bytes"] < 1.1
    assert h[0]["dlwa"] < 1.05 < h[1]["dlwa"]
    bad = write(tmp_path / "bad.toml", MIX_RUN.replace("offset = 0.5, span = 0.4", "offset = 0.8, span = 0.4"))
    p = cli("config", "check", bad, check=False)
    assert p.returncode == 2 and "workload.mix[1].span" in p.stderr and "Traceback" not in p.stderr
