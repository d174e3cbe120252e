"""flac: FLAC: zero-copy single-level storage over DRAM and emulated persistent memory.

Source: seed 004: FLAC, single-level storage with zero-copy shared memory. ``ssdlab reproduce flac [--quick|--full]`` writes reports/flac/;
docs/case-studies/flac.md is its page.
"""

from ..base import Study

STUDY = Study(
    name="flac",
    title="FLAC: zero-copy single-level storage over DRAM and emulated persistent memory",
    document="seed 004: FLAC, single-level storage with zero-copy shared memory",
    experiment="ssdlab.studies.flac.experiment:EXPERIMENT",
    cli="ssdlab.studies.flac.cli:add_cli",
    commands=('flac',),
)
