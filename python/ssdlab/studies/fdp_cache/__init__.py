"""fdp-cache: a CacheLib-style hybrid flash cache (DRAM tier, small-object and large-object
caches) on an emulated FDP SSD, with and without placing the SOC and LOC on their own reclaim
unit handles.

Source: seed 001, *Towards Efficient Flash Caches with Emerging NVMe FDP SSDs* (sections 6.2-6.3,
Theorems 1-3). ``ssdlab reproduce fdp-cache [--quick|--full]`` writes reports/fdp-cache/;
docs/case-studies/fdp-cache.md is its page. Files by role: ``api`` (run_cache, load_cache_spec,
serve: the memcached front-end), ``runner`` (CACHE, one cache run on the sweep engine),
``experiment`` (the points of experiments/fdp-cache/experiment.toml), ``report`` and
``figures`` (claims judged by ssdlab.studies.verdict, tables, PNGs), ``cli`` (`ssdlab cache`).
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
