"""dpuswap: DPUSwap: compressed remote-memory swap managed on a DPU, against Infiniswap- and ZNSwap-like swap.

Source: seed 000, section 3 (DPUSwap). ``ssdlab reproduce dpuswap [--quick|--full]`` writes reports/dpuswap/;
docs/case-studies/dpuswap.md is its page.
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
