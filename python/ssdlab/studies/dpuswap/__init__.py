"""dpuswap: DPUSwap: compressed remote-memory swap managed on a DPU, against Infiniswap- and ZNSwap-like swap.

Source: seed 000, section 3 (DPUSwap). ``ssdlab reproduce dpuswap [--quick|--full]`` writes reports/dpuswap/;
docs/case-studies/dpuswap.md is its page. The Rust side is crates/rmml. Files by role:

- ``api.py``: :func:`run` (one run under the paging runtime), :func:`serve` (a backend as an NBD
  disk), :class:`Nodes` (remote memory nodes as processes), :func:`guest_run` (a guest kernel
  swapping onto a backend);
- ``runner.py``: the sweep engine's runners ``SWAP`` (in-process) and ``GUEST``;
- ``experiment.py``: ``EXPERIMENT``, experiments/dpuswap/experiment.toml expanded into points;
- ``claims.py``: the document's claims judged by ``ssdlab.studies.verdict``, each with its
  measured explanation; ``report.py``: the report and its data tables; ``figures.py``: its figures;
- ``cli.py``: ``ssdlab rmml node|run|serve|guest``.
"""

from ..base import Study

STUDY = Study(
    name="dpuswap",
    title="DPUSwap: compressed remote-memory swap managed on a DPU, against Infiniswap- and ZNSwap-like swap",
    document="seed 000, section 3 (DPUSwap)",
    experiment="ssdlab.studies.dpuswap.experiment:EXPERIMENT",
    cli="ssdlab.studies.dpuswap.cli:add_cli",
    commands=('rmml',),
)
