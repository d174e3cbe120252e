"""flac: FLAC: zero-copy single-level storage over DRAM and emulated persistent memory.

Source: seed 004, slides on single-level storage and zero-copy shared memory presenting FLAC
(FAST'24). ``ssdlab reproduce flac [--quick|--full]`` writes reports/flac/; docs/case-studies/flac.md
is its page. Files by role: ``api.py`` (FlacFS, FlacFile, fs_config, zero-copy checkpoints, the
LD_PRELOAD shim's environment), ``runner.py`` (the reproduction's steps and their work
directories), ``experiment.py`` (one point per step and seed), ``report.py`` (the slides' claims
judged by ``ssdlab.studies.verdict``, tables), ``figures.py`` (its figures), ``cli.py`` (``ssdlab flac mkfs|fsck|ls|run``).
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
