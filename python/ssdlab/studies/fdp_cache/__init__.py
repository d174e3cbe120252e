"""fdp-cache: A CacheLib-style hybrid flash cache on an FDP SSD: device write amplification with and without placement.

Source: seed 001: Towards Efficient Flash Caches with Emerging NVMe FDP SSDs (CacheLib + FDP). ``ssdlab reproduce fdp-cache [--quick|--full]`` writes reports/fdp-cache/;
docs/case-studies/fdp-cache.md is its page.
"""

from ..base import Study

STUDY = Study(
    name="fdp-cache",
    title="A CacheLib-style hybrid flash cache on an FDP SSD: device write amplification with and without placement",
    document="seed 001: Towards Efficient Flash Caches with Emerging NVMe FDP SSDs (CacheLib + FDP)",
    experiment="ssdlab.studies.fdp_cache.experiment:EXPERIMENT",
    cli="ssdlab.studies.fdp_cache.cli:add_cli",
    commands=('cache',),
)
