"""What the bench scripts share: a free port on loopback, and waiting for a server to listen."""

import socket
import time

from ssdlab.serving import free_port  # noqa: F401 (the bench scripts take it from here)


def wait_port(port: int, proc, timeout: float = 60) -> None:
    """Wait until something listens on `port`; exit if `proc` (the server) ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")
