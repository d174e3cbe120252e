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
