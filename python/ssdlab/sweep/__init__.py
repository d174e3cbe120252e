"""Parameter sweeps: run a grid of points on a local process pool or a Ray cluster.

A sweep is a base plus axes. The base is a config (every point runs it as `ssdlab run` would)
or an experiment (``experiment = NAME``: the points of ``ssdlab reproduce NAME``, each with the
runner it names, see ``ssdlab.runners``). Every point of the grid is resolved into its complete
input; the SHA-256 of its canonical JSON names the point's directory, so a point that already
has its ``metrics.json`` is never run twice, whichever sweep or reproduction asked for it::

    OUT/sweep.json                      what was swept (base, axes, metrics, points)
    OUT/points/<hash>/config.json       the point's complete input (a device config, or runner + task)
    OUT/points/<hash>/metrics.json      its measurements (+ the runner's files), or error.txt
    OUT/points/<hash>/run-info.json     wall time, peak memory and its estimate
    OUT/results.csv                     one row per point: its values, status, hash, metrics
    OUT/results.parquet                 the same, when pyarrow is importable
    OUT/plots/<metric>.png              one default plot per chosen metric

Each point's peak memory and CPUs are estimated before anything runs; the local pool starts a
point only when it fits beside the running ones, Ray gets them as task resources. Workers only
simulate: they get a point's input and return its results; this process writes every file, so
a worker killed by Ctrl-C (or a lost Ray node) can never leave a half-written point. The file
format is documented in docs/sweeps.md.

The package, by role (this module re-exports the public names; ``ssdlab.sweep(...)`` at the
top level is the function ``sweep``)::

    spec.py     Spec, SweepError; reading and checking sweep files (load_sweep), an
                experiment's points as a sweep (experiment_spec)
    points.py   Point; expanding a Spec into its points (expand), their hashes
                (canonical_json, config_hash)
    store.py    the sweep directory: point directories written atomically, done detection
                (resume), sweep.json
    tables.py   results.csv / results.parquet, SweepTable
    plots.py    plots/<metric>.png
    local.py    the local backend: a process per point from a fork server, worker main,
                process groups
    ray.py      the Ray backend, local_ray_env
    run.py      run_sweep, the dispatch loop and its progress lines, sweep() (the Python API)
"""

from .local import run_point
from .points import HASH_CHARS, Point, canonical_json, config_hash, expand
from .ray import local_ray_env
from .run import run_sweep, sweep
from .spec import DEFAULT_METRICS, MAX_POINTS, SWEEP_KEYS, Spec, SweepError, experiment_spec, load_sweep
from .tables import SweepTable

__all__ = [
    "DEFAULT_METRICS", "HASH_CHARS", "MAX_POINTS", "SWEEP_KEYS", "Point", "Spec", "SweepError", "SweepTable",
    "canonical_json", "config_hash", "expand", "experiment_spec", "load_sweep", "local_ray_env", "run_point",
    "run_sweep", "sweep",
]
