"""The numbers do not depend on how they cross into Python: metrics.json, timeseries.csv and
the inspection results (counters, FDP logs, zone reports, chunk info) of fixed runs on every
personality keep these SHA-256 digests, pinned when configs and metrics crossed the binding as
JSON text. A change to the core that changes numbers (or adds config keys, which metrics.json
repeats) changes them too: check that it should, then print the new digests with
`SSDLAB_PRINT_DIGESTS=1 .venv/bin/python -m pytest -q tests/test_digests.py -s`."""

import hashlib
import json
import os
from pathlib import Path


from ssdlab import Device, Mix, Workload

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
    "configured": "10530120ff08cc179e74912143f385ccaeb13217edaf1d671e888d379779753d",
    "configured.series": "ebc8e09e31495a72e05dc3193b85e17e425a9667242afc10ecc2c2d88874ab27",
    "conventional": "1147de235aa9c3e941d905b61a6ae8da15a488dff50b7d2eebfe9794c6f365a2",
    "conventional.counters": "6520e5d36df88f73862e907eec0b51c30df9d44b1dc55f1a22f25060b5262e56",
    "conventional.series": "252311bd75c35ac84823612858fa417633d5d404186396e6e9e34325b3cee126",
    "fdp.configurations": "2f15b76c8aa0cfd33615b8a25b03dd7b1d4561add40fa0ead09a59f63881b996",
    "fdp.events": "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
    "fdp.mix": "fb05ab24807fac662652707b3d40e81b24d4f7a624290efafe1d88594c00ccae",
    "fdp.mix.series": "3aa3492065fbb4c197af16412e31a6835ffcf3d9af23d86273c32cbb4401eaa2",
    "fdp.ruh_status": "7f1fab99171e3bfebd874954ee4f9eb3a3c77e28684fe51af8547f22e89011e8",
    "fdp.statistics": "0ed3902c57d5b156c6bb789f36ff5f662501626fa97e8457fa7c1d799493c30c",
    "fdp.usage": "126a153cf04c87178ce9fe7bbb43ce590b969e541bc3fa6a4c948da0b6404cbe",
    "ocssd": "5a1581af9baf987f3ff9bfc6015b3e9bf74f1f153ee2062c0d625125bad7e1bd",
    "ocssd.chunks": "513115c49620ef70a62a956457813b0fbf284386211db9f6940617564c2fb409",
    "ocssd.geometry": "4ff1c2be07e809c1f4ce67cf147dfd4e2937b790ae283354798539001f461405",
    "ocssd.series": "9c1df5c3d25e78e9b2f21503db36900d6183e3e7a9dd33942a9a916f2d368fc8",
    "ocssd.wear": "ea92f89ada3c270b433d73e3af8ebe40f5da8bfc8c2258963d93919fc1837a61",
    "replay": "188b92b4c86c88b8bf8f28e6fe52a44861dfb9901781f0627419acd62129ecc7",
    "replay.series": "b25807349da5db3c75138a3636870c0a281f46584cb98bd65866cd2de2847617",
    "zns": "225a5adccaa9e1666841e88860b28a33bf4946e313ec116c610b06997c2378a2",
    "zns.info": "d6b14fb1451467b3fd77fcfc1ad78dbd56042e3291624ce2f38a7e37c8c947b8",
    "zns.report": "4850e67bdff57fbcd3027c289b2eae20a3b907a9242bb43e6eb1961cb4658c76",
    "zns.series": "b4365d7533aad129b2c3c78fa32c338d110aa0ff3b2afd1f4e0e8bace60674f0",
}


def digests(tmp: Path) -> dict:
    out = {}

    def report(name, rep):
        d = rep.save(tmp / name)
        out[name] = hashlib.sha256((d / "metrics.json").read_bytes()).hexdigest()
        out[name + ".series"] = hashlib.sha256((d / "timeseries.csv").read_bytes()).hexdigest()

    def obj(name, value):
        out[name] = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()

    dev = Device("tiny", seed=5, precondition={"random_device_writes": 0.3})
    dev.precondition()
    report("conventional", dev.run(Workload(pattern="zipf", read_fraction=0.3, block_bytes=[4096, 16384],
                                            block_weights=[3, 1], stop_device_writes=0.5)))
    obj("conventional.counters", dev.counters)
    report("configured", Device("tiny", seed=9, precondition={"random_device_writes": 0.2},
                                workload={"stop_device_writes": 0.3, "pattern": "hotcold"}).run())

    f = Device("tiny", timing={"enabled": False}, geometry={"blocks_per_plane": 128, "pages_per_block": 32},
               ftl={"spare_factor": 0.12}, fdp={"enabled": True, "handles": 4})
    mix = Mix([(Workload(pattern="sequential", span=0.5, block_bytes=131072, placement=0), 1),
               (Workload(pattern="uniform", offset=0.5, span=0.4, placement=1), 16)], stop_device_writes=1.0, queue_depth=2)
    report("fdp.mix", f.run(mix))
    for log in ("configurations", "usage", "statistics", "events", "ruh_status"):
        obj("fdp." + log, getattr(f.fdp, log)())

    z = Device("zns-ssd", geometry={"blocks_per_plane": 16}, seed=3)
    report("zns", z.run(Workload(block_bytes=131072, stop_device_writes=1.0)))
    obj("zns.report", z.zns.report())
    obj("zns.info", z.zns.info())

    o = Device("tiny", personality="ocssd", seed=4)
    report("ocssd", o.run(Workload(stop_device_writes=1.0, queue_depth=4)))
    obj("ocssd.chunks", o.ocssd.chunk_info())
    obj("ocssd.geometry", o.ocssd.geometry())
    obj("ocssd.wear", o.ocssd.wear())

    report("replay", Device("tiny").replay(ROOT / "tests/data/traces/sample.msr.csv", "msr"))
    return out


def test_numbers_are_byte_identical_across_the_binding(tmp_path):
    got = digests(tmp_path)
    if os.environ.get("SSDLAB_PRINT_DIGESTS"):
        print(json.dumps(got, indent=4, sort_keys=True))
    assert set(got) == set(PINNED)
    differ = sorted(k for k in got if got[k] != PINNED[k])
    assert not differ, f"these results changed: {differ}"


