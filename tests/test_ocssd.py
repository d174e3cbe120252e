"""Open-channel from Python: geometry, vector commands, chunk rules, copies."""

import pytest

import ssdlab
from ssdlab import Device

SECTOR = 4096


def test_vector_commands_and_chunk_rules():
    dev = Device("tiny", personality="ocssd", storage="data", geometry={"planes_per_die": 2, "blocks_per_plane": 16, "pages_per_block": 8})
    g = dev.ocssd.geometry()
    assert (g["num_grp"], g["num_pu"], g["num_chk"], g["clba"], g["ws_min"]) == (2, 2, 16, 64, 8)
    a = dev.ocssd.lba(0, 1, 3)
    data = bytes(range(256)) * 16 * 8
    dev.ocssd.vector_write([a + i for i in range(8)], data)
    assert dev.ocssd.vector_read([a + i for i in range(8)]) == data
    info = dev.ocssd.chunk_info(0, 1)[3]
    assert info["state"] == "open" and info["wp"] == a + 8
    with pytest.raises(ssdlab.NvmeError, match="Out of Order Write"):
        dev.ocssd.vector_write([a + 9 + i for i in range(8)], bytes(8 * SECTOR))
    with pytest.raises(ssdlab.NvmeError, match="Invalid Field"):
        dev.ocssd.vector_write([a + 8 + i for i in range(4)], bytes(4 * SECTOR))
    with pytest.raises(ssdlab.NvmeError, match="Invalid Reset"):
        dev.ocssd.vector_reset([dev.ocssd.lba(1, 1, 0)])
    b = dev.ocssd.lba(1, 0, 5)
    dev.ocssd.copy_chunk(a, b)
    assert dev.ocssd.vector_read([b + i for i in range(8)]) == data
    dev.ocssd.vector_reset([a])
    assert dev.ocssd.wear() == {"per_group": [1, 0], "per_pu": [0, 1, 0, 0]}
    with pytest.raises(ssdlab.NvmeError, match="not an open-channel device"):
        Device("tiny").ocssd.geometry()


def test_ordinary_workloads_run_from_toml_through_the_chunk_log(tmp_path):
    import json

    from clitools import ssdlab as cli, write

    cfg = write(tmp_path / "oc.toml", 'preset = "tiny"\npersonality = "ocssd"\n[workload]\nstop_device_writes = 1.5\n')
    cli("run", cfg, "--out", tmp_path / "out")
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["dlwa"] == 1.0 and m["gc_relocated_sectors"] == 0
    assert m["nand_erase_count"] > 0  # chunks were reset for reuse
