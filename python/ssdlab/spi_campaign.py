"""Power-cut campaigns: littlefs on the emulated SPI NOR chip through a flash driver, a cut at
each of many SPI transactions, remount and check (crates/spi-fw; docs/case-studies/spi-nor.md,
"Firmware in the loop").

>>> from ssdlab.spi_campaign import campaign
>>> r = campaign(None, cuts=20, ops=10)
>>> r["cut_points"] > 0 and not r["violations"]
True
"""

from __future__ import annotations

import json
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

from . import _native
from .args import int_in
from .progress import LogProgress

PathLike = Union[str, Path]


def campaign(config: Optional[PathLike] = None, *, progress: Optional[Callable[[int, int], None]] = None,
             **overrides: Any) -> Dict[str, Any]:
    """Run a campaign with the settings of the TOML file ``config`` (every key optional; see
    experiments/spi-nor/campaign.toml) and ``overrides`` on top; returns the report (a dict)."""
    settings: Dict[str, Any] = {}
    if config is not None:
        path = Path(config)
        try:
            settings = tomllib.loads(path.read_text())
        except OSError as e:
            raise ValueError(f"{config}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{config}: {e}") from None
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return _native.spi_campaign(settings, progress)


def _fmt_s(ns: float) -> str:
    s = ns / 1e9
    return f"{s:.1f} s" if s >= 1 else f"{s * 1e3:.1f} ms"


def markdown(r: Dict[str, Any], replay: str) -> str:
    """The report as a page: what was tried, what broke (with replay commands), wear, time."""
    c = r["config"]
    ints = r["interrupted"]
    sim, wall = r["simulated_ns"], r["wall_s"]
    verdict = ("littlefs kept its promise at every cut point" if not r["violations"] and not r["workload_errors"]
               else f"{len(r['violations'])} cut points broke littlefs's promise, "
                    f"{len(r['workload_errors'])} operations failed without a cut")
    lines = [
        f"# Power-cut campaign: littlefs on {c['chip']} through the {c['driver']} driver",
        "",
        f"**{verdict}.**",
        "",
        "| | |",
        "|---|---|",
        f"| workload | {c['ops']} operations (writes, appends, renames, deletes) on {c['files']} file names, "
        f"littlefs on {c['fs_blocks']} blocks of 4 KiB, seed {c['seed']} |",
        f"| chip | {c['chip']}, timing {c['timing']}, wear-out {c['wear_out']} |",
        f"| SPI transactions in the workload | {r['frames_total']:,} |",
        f"| cut points tried | {r['cut_points']:,} |",
        "| what the cuts interrupted | " + ", ".join(f"{k}: {v}" for k, v in sorted(ints.items())) + " |",
        f"| violations | {len(r['violations'])} |",
        f"| operations that failed without a cut | {len(r['workload_errors'])} |",
        f"| page programs, sector erases | {r['page_programs']:,}, {r['sector_erases']:,} |",
        f"| wear of the file system's sectors | max {r['max_erase_count']} erases, mean {r['mean_erase_count']:.1f} "
        f"(rating {r['endurance_cycles']:,}; {r['sectors_beyond_endurance']} sectors beyond it) |",
        f"| time | {_fmt_s(sim)} of the part's time simulated (the workload once) in {wall:.1f} s of wall time "
        f"for the whole campaign |",
        "",
    ]
    if r["violations"]:
        lines += ["## Violations", "", "| frame | operation | interrupted | what | replay |", "|---|---|---|---|---|"]
        for v in r["violations"][:20]:
            what = v["interrupted"] or "idle chip"
            lines.append(f"| {v['frame']} | {v['op']}: {v['op_desc']} | {what} ({v['fraction']:.0%}) | {v['what']} | "
                         f"`{replay} --only-frame {v['frame']}` |")
        if len(r["violations"]) > 20:
            lines.append(f"\n({len(r['violations']) - 20} more in report.json)")
        lines.append("")
    if r["workload_errors"]:
        lines += ["## Operations that failed without a cut", ""] + [f"- {e}" for e in r["workload_errors"][:20]] + [""]
    return "\n".join(lines)


def cmd_campaign(args) -> int:
    """`ssdlab spi campaign [CONFIG]`: run, print the verdict, write report.json and report.md."""
    overrides = {"cuts": args.cuts, "driver": args.driver, "seed": args.seed, "only_frame": args.only_frame,
                 "ops": args.ops}
    on = LogProgress("spi campaign", {"cuts": 1.0})
    r = campaign(args.config, progress=lambda done, total: on("cuts", done / max(total, 1)), **overrides)
    replay = "ssdlab spi campaign " + " ".join(shlex.quote(a) for a in
                                               ([args.config] if args.config else []) +
                                               [f"--{k.replace('_', '-')}={v}" for k, v in overrides.items()
                                                if v is not None and k != "only_frame"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(r, indent=1) + "\n")
    page = markdown(r, replay)
    (out / "report.md").write_text(page + "\n")
    print(page.split("\n")[2].strip("*"))
    print(f"{r['cut_points']} cut points, {len(r['violations'])} violations, {len(r['workload_errors'])} workload "
          f"errors; report in {out / 'report.md'}", file=sys.stderr)
    return 0 if not r["violations"] and not r["workload_errors"] else 1


def add_arguments(p) -> None:
    """The campaign's options on `ssdlab spi` (used with the `campaign` action)."""
    g = p.add_argument_group("campaign (ssdlab spi campaign [CONFIG])")
    g.add_argument("--out", default="reports/spi-nor/campaign", help="report directory (report.md, report.json)")
    g.add_argument("--cuts", type=int_in(1, 10_000_000), help="cut points to try (default: the config's, else 500)")
    g.add_argument("--driver", choices=["w25q32jv", "minimal", "no-poll"],
                   help="flash driver: the crates.io w25q32jv driver, ssdlab's minimal one, or the minimal one "
                        "without status polling (broken on purpose)")
    g.add_argument("--seed", type=int_in(0, 2**64 - 1), help="workload, cut points and partial states")
    g.add_argument("--ops", type=int_in(1, 1_000_000), help="workload operations")
    g.add_argument("--only-frame", type=int_in(1, 2**64 - 1), metavar="FRAME",
                   help="replay the single cut at this frame (a violation's replay command)")
