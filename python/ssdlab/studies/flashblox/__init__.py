"""flashblox: FlashBlox: virtual SSDs with channel, die and soft-plane isolation, and wear-levelling by swaps.

Source: seed 003: FlashBlox (FAST'17). ``ssdlab reproduce flashblox [--quick|--full]`` writes reports/flashblox/;
docs/case-studies/flashblox.md is its page.
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
