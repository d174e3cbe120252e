"""flashblox: FlashBlox: virtual SSDs with channel, die and soft-plane isolation, and wear-levelling by swaps.

Source: seed 003: FlashBlox (FAST'17). ``ssdlab reproduce flashblox [--quick|--full]`` writes
reports/flashblox/; docs/case-studies/flashblox.md is its page. Files by role: ``api.py`` (the
vSSD layer from Python: FlashBlox, VirtualSSD, run, lifetime, swap_plan, layer_cost,
device_config), ``runner.py`` (the sweep engine's runner VSSD), ``experiment.py`` (the points),
``report.py`` (claims judged by ssdlab.studies.verdict, tables) with ``figures.py``, ``cli.py``
(``ssdlab vssd``).
"""

from ..base import Study

STUDY = Study(
    name="flashblox",
    title="FlashBlox: virtual SSDs with channel, die and soft-plane isolation, and wear-levelling by swaps",
    document="seed 003: FlashBlox (FAST'17)",
    experiment="ssdlab.studies.flashblox.experiment:EXPERIMENT",
    cli="ssdlab.studies.flashblox.cli:add_cli",
    commands=('vssd',),
)
