"""What the bench scripts share: a free port on loopback, waiting for a server to listen, and a
redis-benchmark SET/GET run."""

import csv
import io
import socket
import subprocess
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


def redis_benchmark(port: int, requests: int, keyspace: int, clients: int = 50, pipeline: int = 16,
                    timeout: float = 600) -> dict:
    """redis-benchmark's SET and GET (64-byte values, random keys over `keyspace`) against the
    server on `port`: requests per second by test name ("SET", "GET")."""
    p = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(requests), "-r", str(keyspace),
                        "-d", "64", "-c", str(clients), "-P", str(pipeline), "--csv"],
                       capture_output=True, text=True, check=True, timeout=timeout)
    return {r["test"]: float(r["rps"]) for r in csv.DictReader(io.StringIO(p.stdout))}
