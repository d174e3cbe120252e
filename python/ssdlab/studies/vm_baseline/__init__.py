"""vm-baseline: The same fio jobs in a guest (ssdlab vm) and on the host, on fresh emulated SSDs (docs/vm.md).

Source: seed 000, the platform: software validated on emulated devices that a real OS drives. ``ssdlab reproduce vm-baseline [--quick|--full]`` writes reports/vm-baseline/;
docs/vm.md says what it measures.
"""

from ..base import Study

STUDY = Study(
    name="vm-baseline",
    title="The same fio jobs in a guest (ssdlab vm) and on the host, on fresh emulated SSDs (docs/vm.md)",
    document="seed 000, the platform: software validated on emulated devices that a real OS drives",
    experiment="ssdlab.studies.vm_baseline.experiment:EXPERIMENT",
    cli=None,
    commands=(),
)
