"""lsm-deletion: An LSM store on a ZNS SSD: timely, physically enforced deletion (baseline, FADE, zone-aware).

Source: seed 000, section 2 (Lethe-FADE: Sarkar et al., SIGMOD'20; zone-aware deletion: Nie et al., FGCS 164, 2025). ``ssdlab reproduce lsm-deletion [--quick|--full]`` writes reports/lsm-deletion/;
docs/case-studies/lsm-deletion.md is its page.
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
