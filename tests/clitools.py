"""Running the `ssdlab` command from tests (shared by the CLI, server and sweep tests)."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ssdlab.serving import free_port  # noqa: F401 (the tests take it from here)

SSDLAB = [str(Path(sys.executable).parent / "ssdlab")]


def ssdlab(*args, cwd=None, env=None, check=True, timeout=300):
    """Run `ssdlab ARGS`; with check, fail the test with its output if it exits non-zero."""
    p = subprocess.run(SSDLAB + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"ssdlab {' '.join(map(str, args))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


# A small FDP device (4 handles) without timing, as TOML: the FDP tests' common device.
TINY_FDP_TOML = """preset = "tiny"
[timing]
enabled = false
[geometry]
blocks_per_plane = 256
pages_per_block = 32
[ftl]
spare_factor = 0.12
[fdp]
enabled = true
handles = 4
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def wait_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"server did not listen on {port}:\n{log.read_text()}")


class Server:
    """A server process on a free port, logging to a file; stopped with SIGTERM."""

    def __init__(self, argv, port: int, log: Path):
        self.port, self.log = port, log
        self.logf = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT)
        wait_port(port, self.proc, log)

    def stop(self, sig=signal.SIGTERM) -> int:
        return stop_process(self.proc, self.logf, sig)


def stop_process(proc: subprocess.Popen, logf, sig=signal.SIGTERM) -> int:
    """Stop a server with `sig` (killed if it has not exited within 30 s), close its log file,
    and return its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    logf.close()
    return proc.returncode
