"""The shape of the Python API: personality commands on sub-objects, the old names as warning
aliases, workload defaults from the core, and configs merged in one place."""

import warnings

import pytest

import ssdlab
from ssdlab import Device, Mix, Workload, config

SECTOR = 4096


def test_sub_objects_of_another_personality_name_the_device_personality():
    conv, zns, oc = Device("tiny"), Device("tiny", personality="zns"), Device("tiny", personality="ocssd")
    assert (conv.personality, zns.personality, oc.personality) == ("conventional", "zns", "ocssd")
    with pytest.raises(ssdlab.NvmeError, match=r'not a ZNS device: this device\'s personality is "conventional"'):
        _ = conv.zns
    with pytest.raises(ssdlab.NvmeError, match=r'not an open-channel device: this device\'s personality is "zns"'):
        _ = zns.ocssd
    with pytest.raises(ssdlab.NvmeError, match=r'no FDP: this device\'s personality is "ocssd"'):
        _ = oc.fdp
    assert isinstance(conv.fdp, ssdlab.Fdp) and isinstance(zns.zns, ssdlab.Zns) and isinstance(oc.ocssd, ssdlab.Ocssd)
    assert "disabled" in repr(conv.fdp) and "zones" in repr(zns.zns) and "groups" in repr(oc.ocssd)


def test_sub_object_commands_reach_the_same_device():
    dev = Device("tiny", personality="zns", storage="data", timing={"enabled": False})
    z = dev.zns
    zs = z.info()["zone_size"]
    before = dev.now_ns
    assert z.append(zs, b"q" * SECTOR) == zs
    assert dev.read(zs * SECTOR, SECTOR) == b"q" * SECTOR
    assert dev.counters["host_write_bytes"] == SECTOR
    assert dev.now_ns >= before
    with pytest.raises(ValueError, match='unknown zone filter "bogus"; valid: all, empty'):
        z.report(0, "bogus")
    with pytest.raises(ValueError, match="unknown zone state"):
        z.inject_state(1, "melted")
    z.inject_state(1, "offline")
    assert z.report(zs, max_zones=1)[0]["state"] == "offline"


def test_old_method_names_warn_and_still_work():
    f = Device("tiny", timing={"enabled": False}, fdp={"enabled": True, "handles": 4})
    z = Device("tiny", personality="zns", storage="data", timing={"enabled": False})
    o = Device("tiny", personality="ocssd", storage="data")
    calls = [
        (lambda: f.placement_id(0, 2), lambda: f.fdp.placement_id(0, 2)),
        (lambda: f.placement_id(reclaim_group=0, handle=3), lambda: f.fdp.placement_id(reclaim_group=0, handle=3)),
        (lambda: f.fdp_log("ruh_status"), lambda: f.fdp.ruh_status()),
        (lambda: f.fdp_log("configurations"), lambda: f.fdp.configurations()),
        (lambda: z.zone_info(), lambda: z.zns.info()),
        (lambda: z.zone_report(0, "all", 2), lambda: z.zns.report(0, "all", 2)),
        (lambda: o.oc_geometry(), lambda: o.ocssd.geometry()),
        (lambda: o.oc_lba(1, 1, 2, 3), lambda: o.ocssd.lba(1, 1, 2, 3)),
        (lambda: o.oc_chunk_info(0, 1), lambda: o.ocssd.chunk_info(0, 1)),
        (lambda: o.oc_wear(), lambda: o.ocssd.wear()),
    ]
    for old, new in calls:
        with pytest.warns(DeprecationWarning, match=r"deprecated .*use dev\.(fdp|zns|ocssd)"):
            got = old()
        assert got == new()
    with pytest.warns(DeprecationWarning, match="zns.append"):
        assert z.zone_append(0, b"a" * SECTOR) == 0
    with pytest.warns(DeprecationWarning, match="zns.action"):
        z.zone_action(0, "finish")
    assert z.zns.report(0, max_zones=1)[0]["state"] == "full"
    a = o.ocssd.lba(0, 0, 0)
    ws = o.ocssd.geometry()["ws_min"]
    with pytest.warns(DeprecationWarning, match="ocssd.vector_write"):
        o.oc_vector_write([a + i for i in range(ws)], b"v" * SECTOR * ws)
    with pytest.warns(DeprecationWarning, match="ocssd.vector_read"):
        assert o.oc_vector_read([a]) == b"v" * SECTOR
    pid = f.fdp.placement_id(0, 3)
    f.write(0, b"p" * SECTOR, placement=pid)
    with pytest.warns(DeprecationWarning, match="fdp.ruh_update"):
        f.ruh_update(placement_ids=iter([pid]))
    assert f.fdp.events()[-1]["pid"] == pid
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="unknown FDP log 'nope'"):
        f.fdp_log("nope")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names do not warn
        f.fdp.ruh_update([f.fdp.placement_id(0, 1)])
        z.zns.info()


def test_workload_sends_only_what_is_set_and_the_core_fills_the_rest():
    assert Workload().to_dict() == {}
    assert Workload(block_bytes=8192).to_dict() == {"block_bytes": [8192], "block_weights": [1.0]}
    assert repr(Workload(pattern="zipf", stop_ops=5)) == "Workload(pattern='zipf', stop_ops=5)"
    defaults = Workload.defaults()
    assert defaults == config.workload_defaults() and defaults["pattern"] == "uniform"
    # No stop condition given: the core's default one ends the run.
    dev = Device("tiny", timing={"enabled": False})
    rep = dev.run(Workload())
    planned = defaults["stop_device_writes"] * dev.logical_bytes
    assert planned > 0 and abs(rep.host_write_bytes - planned) <= SECTOR
    # A stop condition given replaces the default one instead of racing it.
    rep = Device("tiny", timing={"enabled": False}).run(Workload(stop_ops=1000))
    assert rep.host_write_cmds == 1000
    rep = Device("tiny", timing={"enabled": False}).run(Workload(stop_device_writes=3.0))
    assert abs(rep.host_write_bytes - 3.0 * dev.logical_bytes) <= SECTOR
    # A Mix without stop conditions stops where a Workload does.
    mix = Mix([(Workload(pattern="sequential", span=0.5), 1), (Workload(offset=0.5, span=0.5), 1)])
    rep = Device("tiny", timing={"enabled": False}).run(mix)
    assert abs(rep.host_write_bytes - planned) <= SECTOR
    with pytest.raises(ssdlab.ConfigError, match="workload.*pattern"):
        dev.run(Workload(pattern="spiral", stop_ops=10))
    with pytest.raises(ssdlab.ConfigError, match="workload.stop_sim_ns: needs timing"):
        dev.run(Workload(stop_sim_ns=1000))
    with pytest.raises(TypeError, match="takes a Workload or a Mix"):
        dev.run({"pattern": "uniform"})


def test_configs_merge_in_one_place(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('preset = "tiny"\nseed = 3\n[ftl]\ngc_policy = "fifo"\nspare_factor = 0.2\n')
    user = config.user_layer(config=f, ftl={"spare_factor": 0.25}, seed=4)
    assert user == {"preset": "tiny", "seed": 4, "ftl": {"gc_policy": "fifo", "spare_factor": 0.25}}
    cfg = config.resolve(config=f, ftl={"spare_factor": 0.25})
    assert (cfg["ftl"]["gc_policy"], cfg["ftl"]["spare_factor"], cfg["seed"]) == ("fifo", 0.25, 3)
    assert cfg == ssdlab.resolve_config(config=f, ftl={"spare_factor": 0.25}) == Device(config=f, ftl={"spare_factor": 0.25}).config
    assert config.resolve(preset="default", config=f)["preset"] == "default"
    assert {"geometry", "ftl", "fdp", "zns", "workload"} <= set(config.sections())
    assert {"preset", "seed", "storage", "personality"} <= set(config.top_keys())
    base = {"ftl": {"gc_policy": "fifo"}}
    assert config.merge(base, {"ftl": {"spare_factor": 0.3}}) == {"ftl": {"gc_policy": "fifo", "spare_factor": 0.3}}
    assert base == {"ftl": {"gc_policy": "fifo"}}, "merge must not change its inputs"
    d = {}
    config.set_dotted(d, "ftl.spare_factor", 0.1)
    assert d == {"ftl": {"spare_factor": 0.1}}
    with pytest.raises(FileNotFoundError, match="nope.toml: no such config file"):
        config.resolve(config=tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[ftl\n")
    with pytest.raises(ssdlab.ConfigError, match="bad.toml"):
        config.resolve(config=bad)
    with pytest.raises(ssdlab.ConfigError, match="bad.toml: not valid TOML"):
        config.read_toml(bad)
    with pytest.raises(TypeError, match="takes a dict"):
        config.user_layer(ftl=0.1)


def test_values_python_cannot_turn_into_config_values_are_config_errors():
    with pytest.raises(ssdlab.ConfigError):
        Device("tiny", ftl={"spare_factor": object()})
    with pytest.raises(ssdlab.ConfigError):
        Device("tiny", seed=2**70)
    with pytest.raises(ssdlab.ConfigError, match="expected a table"):
        ssdlab._native.config_resolve([1, 2])


def test_results_cross_as_python_objects():
    dev = Device("tiny", timing={"enabled": False})
    cfg, counters = dev.config, dev.counters
    assert isinstance(cfg, dict) and isinstance(cfg["geometry"]["channels"], int)
    assert isinstance(cfg["ftl"]["spare_factor"], float) and isinstance(cfg["timing"]["enabled"], bool)
    assert all(isinstance(v, int) for v in counters.values())
    rep = dev.run(Workload(stop_ops=200))
    assert isinstance(rep.metrics, dict) and isinstance(rep.metrics["latency_ns"], dict)
