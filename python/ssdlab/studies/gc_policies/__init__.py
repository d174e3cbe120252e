"""gc-policies: device write amplification against spare factor for every GC policy, beside
Desnoyers' analytic models (*Analytic Modeling of SSD Write Performance*, SYSTOR 2012).

``ssdlab reproduce gc-policies [--quick|--full]`` writes reports/gc-policies/; docs/gc-models.md
has the models. The experiment runs the core's device runner (``ssdlab.runners:DEVICE``), so
the study has no runner or commands of its own.
"""

from ..base import Study

STUDY = Study(
    name="gc-policies",
    title="DLWA against spare factor for every GC policy, beside Desnoyers' analytic models (docs/gc-models.md)",
    document="Desnoyers, Analytic Modeling of SSD Write Performance (SYSTOR 2012); docs/gc-models.md",
    experiment="ssdlab.studies.gc_policies.experiment:EXPERIMENT",
)
