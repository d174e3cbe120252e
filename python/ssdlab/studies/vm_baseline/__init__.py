"""vm-baseline: the same fio jobs in a guest (``ssdlab vm``) and on the host (fio's nbd engine),
each on a fresh emulated SSD of one config (docs/vm.md).

Source: seed 000, section 1, the platform: storage software designed and validated on emulated
devices that a real OS drives. The seed gives no number, so the report's claims are qualitative,
each decided by a measurement printed beside it: the device sees the same host bytes and DLWA
from the guest as from the host, and the guest's path adds latency of its own.
``ssdlab reproduce vm-baseline [--quick|--full]`` writes reports/vm-baseline/.

Files: ``api.py`` (:func:`host_fio`, the host side of a pair), ``runner.py`` (``PAIR``: one job
and latency mode on the host, then in a guest per disk kind), ``experiment.py`` (the points of
experiments/vm-baseline/experiment.toml), ``report.py`` (the claims, tables and figure). The
study has no commands of its own: the guest is the platform's ``ssdlab vm`` (ssdlab.vm).
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
