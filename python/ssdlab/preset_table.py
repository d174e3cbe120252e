"""The device presets as `ssdlab config presets` lists them: sizes and geometry from each
preset's resolved config (the core's), what each models and where its numbers come from (as
crates/core/src/media/presets.rs cites them)."""

from __future__ import annotations

from typing import Dict, List, Tuple

from . import _native
from .units import human_bytes

# name -> (what it models, where its numbers come from). A preset the core adds without a line
# here still shows, with "-"; tests/test_first_contact.py asks for a line for every preset.
NOTES: Dict[str, Tuple[str, str]] = {
    "default": ("Micron's 16 KiB-page MLC part as a 32 GiB drive of 8 dies, 7% spare",
                "Micron MT29F128G08CBECB datasheet (ONFI 3.2)"),
    "tiny": ("a small device for unit and property tests, 15% spare", "ssdlab's own"),
    "micron-mlc-16k": ("the same Micron MLC part at its datasheet size: 32 dies of 2 x 1048 blocks",
                       "Micron MT29F128G08CBECB datasheet (ONFI 3.2)"),
    "femu-bbssd": ("FEMU's black-box SSD: 64 LUNs, 4 KiB pages, read 40 us, program 200 us, erase 2 ms",
                   "FEMU's defaults (femu.c, bbssd/ftl.h)"),
    "mqsim-default": ("MQSim's shipped SSD: 128 dies, 8 KiB pages, program/erase suspend, 10,000 P/E cycles",
                      "MQSim's ssdconfig.xml"),
    "samsung-970pro": ("NVMeVirt's Samsung 970 PRO: 16 dies, 32 KiB pages, read 36 us, program 185 us",
                       "NVMeVirt's ssd_config.h (erase: the Micron datasheet)"),
    "fdp-ssd": ("an NVMe FDP SSD: 8 initially isolated handles, ~6 GiB reclaim units, 2 more configurations",
                "\"Towards Efficient Flash Caches with Emerging NVMe FDP SSDs\", scaled from 1.88 TB"),
    "zns-ssd": ("a ZNS SSD like WD's ZN540: TLC timings, zones over 32 dies, 14 open zones, capacity ~53% of a zone",
                "NVMeVirt's ssd_config.h (ZN540 model)"),
    "bench-256g": ("the benchmark device of docs/PERFORMANCE.md: 256 GiB raw, 7% spare, timing off",
                   "ssdlab's own"),
}

HEADER = ("NAME", "PERSONALITY", "LOGICAL", "RAW", "GEOMETRY", "MODELS", "SOURCE")


def geometry(cfg: dict) -> str:
    """"4x2x2x256x512, 16K": channels x dies per channel x planes x blocks per plane x pages
    per block, then the page size."""
    g = cfg["geometry"]
    page = human_bytes(g["page_bytes"]).replace(".0 KiB", "K").replace(" ", "")
    return "x".join(str(g[k]) for k in ("channels", "dies_per_channel", "planes_per_die", "blocks_per_plane",
                                        "pages_per_block")) + f", {page}"


def preset_rows() -> List[Tuple[str, ...]]:
    """One row per preset, in the core's order: the columns of HEADER."""
    rows: List[Tuple[str, ...]] = []
    for name in _native.preset_names():
        cfg = _native.config_resolve({"preset": name})
        size = _native.config_sizing(cfg)
        models, source = NOTES.get(name, ("-", "-"))
        rows.append((name, cfg["personality"], human_bytes(size["logical_bytes"]), human_bytes(size["physical_bytes"]),
                     geometry(cfg), models, source))
    return rows


def presets_table() -> List[str]:
    """`ssdlab config presets`: the table's lines, then what its columns mean."""
    rows: List[Tuple[str, ...]] = [HEADER, *preset_rows()]
    w = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
    lines = ["  ".join(f"{c:<{w[i]}}" if i < len(w) else c for i, c in enumerate(r)).rstrip() for r in rows]
    return lines + ["", "LOGICAL: host-visible capacity; RAW: all flash, spare included. GEOMETRY: channels x dies per "
                        "channel x planes x blocks per plane x pages per block, page size. `ssdlab config show NAME` "
                        "prints a preset as a complete config."]
