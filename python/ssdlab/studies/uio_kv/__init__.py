"""uio-kv: UIO: a converged storage + network key-value device with NVMe-style queues.

Source: seed 002: design and implementation of a converged I/O simulator for storage networks
(UIO). ``ssdlab reproduce uio-kv [--quick|--full]`` writes reports/uio-kv/;
docs/case-studies/uio-kv.md is its page. Files by role: ``api.py`` (latency plans, wall-clock
latency, device processes, hosts), ``runner.py`` (RUN), ``experiment.py`` (the points: wall
clock, simulated with NAND timing off and on, per seed), ``report.py`` (claims, tables, figure),
``cli.py`` (``ssdlab uio``).
"""

from ..base import Study

STUDY = Study(
    name="uio-kv",
    title="UIO: a converged storage + network key-value device with NVMe-style queues",
    document="seed 002: design and implementation of a converged I/O simulator for storage networks (UIO)",
    experiment="ssdlab.studies.uio_kv.experiment:EXPERIMENT",
    cli="ssdlab.studies.uio_kv.cli:add_cli",
    commands=('uio',),
)
