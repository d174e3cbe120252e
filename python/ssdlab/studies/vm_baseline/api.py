"""vm-baseline's tool without a runner: :func:`host_fio`, a fio job through fio's nbd engine
against a fresh ``ssdlab serve`` (the host side of every pair; the guest side is
:func:`ssdlab.vm.run`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

from ...nbd import stats
from ...serving import free_port
from ...vm import EXPORT, VmError, exit_text, parse_fio, stop_process, log_tail, wait_server, config_toml


def host_fio(config: Dict[str, Any], job: Path, out: Path, latency: str = "none") -> Dict[str, Any]:
    """Run fio job ``job`` with the nbd engine against a fresh `ssdlab serve --latency LATENCY`
    of ``config``;
    writes fio.json, metrics.json, timeseries.csv and server.log into ``out``. Returns
    {"fio": fio's JSON, "metrics": the device's, "server_peak_rss_bytes", "wall_s"}."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "device.toml"
    cfg_path.write_text(config_toml(config))
    addr = f"127.0.0.1:{free_port()}"
    server_log = out / "server.log"
    started = time.monotonic()
    with open(server_log, "wb") as slog:
        server = subprocess.Popen([sys.executable, "-m", "ssdlab.cli", "serve", str(cfg_path), "--listen", addr,
                                   "--metrics-out", str(out), "--latency", latency], stdout=slog, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        try:
            wait_server(server, addr, server_log)
            size = stats(addr)["device"]["logical_bytes"]
            # Before the job file, these are defaults the job may override (as in the guest).
            p = subprocess.run(["fio", "--output-format=json", "--ioengine=nbd", f"--uri=nbd://{addr}/{EXPORT}",
                                f"--size={size}", str(job)], capture_output=True, text=True)
        except BaseException:
            stop_process(server)
            raise
        code, rss = stop_process(server, signal.SIGTERM, timeout_s=120)
    (out / "fio.json").write_text(p.stdout)
    if p.returncode != 0:
        raise VmError(f"host fio {job.name} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    if code != 0:
        raise VmError(f"ssdlab serve ended with {exit_text(code)}; its log:\n{log_tail(server_log)}")
    fio = parse_fio(p.stdout)
    if fio is None:
        raise VmError(f"host fio {job.name} printed no JSON (see {out / 'fio.json'})")
    return {"fio": fio, "metrics": json.loads((out / "metrics.json").read_text()), "server_peak_rss_bytes": rss,
            "wall_s": round(time.monotonic() - started, 3)}
