"""lsm-deletion: An LSM store on a ZNS SSD: timely, physically enforced deletion (baseline, FADE, zone-aware).

Source: seed 000, section 2 (Lethe-FADE: Sarkar et al., SIGMOD'20; zone-aware deletion: Nie et
al., FGCS 164, 2025). ``ssdlab reproduce lsm-deletion [--quick|--full]`` writes
reports/lsm-deletion/; docs/case-studies/lsm-deletion.md is its page.

Files by role: ``api.py`` (:class:`~.api.Store`, :func:`~.api.run_lsm`, :func:`~.api.generate`,
:func:`~.api.serve`: the store from Python), ``runner.py`` (``RUN``: one measured run, a point
of the sweep engine), ``experiment.py`` (the points: delete share x policy x seed),
``report.py`` (the claims, judged by ``ssdlab.studies.verdict``, and the tables),
``figures.py`` (the seed's figures), ``cli.py`` (``ssdlab kv run|serve|generate``).
"""

from ..base import Study

STUDY = Study(
    name="lsm-deletion",
    title="An LSM store on a ZNS SSD: timely, physically enforced deletion (baseline, FADE, zone-aware)",
    document="seed 000, section 2 (Lethe-FADE: Sarkar et al., SIGMOD'20; zone-aware deletion: Nie et al., FGCS 164, 2025)",
    experiment="ssdlab.studies.lsm_deletion.experiment:EXPERIMENT",
    cli="ssdlab.studies.lsm_deletion.cli:add_cli",
    commands=('kv',),
)
