"""The `ssdlab` command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

from . import _native
from ._native import SsdlabError
from .args import Parser, int_in, number
from .serving import add_force_argument
from .config import SERIES_ROWS
from .runners import CHECKPOINT_EVERY_S, parse_bytes

EPILOG = """examples:
  ssdlab config show default > my.toml      # a complete, commented config
  ssdlab run my.toml --out runs/my          # metrics.json + timeseries.csv + report.md
  ssdlab replay trace.csv --format msr --device my.toml --out runs/trace
  ssdlab report runs/my                     # re-render report.md and plots
  ssdlab reproduce gc-policies --quick      # reports/gc-policies/
  ssdlab sweep experiments/sweeps/op-x-gc.toml --out runs/op-x-gc   # a grid on all cores
  ssdlab serve my.toml --image disk.img     # an NBD disk: qemu-io -f raw nbd://127.0.0.1:10809/ssdlab
  ssdlab stats 127.0.0.1:10809              # its live DLWA, latency, requests
  ssdlab vm my.toml --fio job.fio --out runs/vm   # a Linux guest on the emulated SSD (docs/vm.md)
"""


def _progress_wanted(args) -> bool:
    return not args.quiet and sys.stderr.isatty()


def _finish_run(rep, out: Path, started: float, quiet: bool) -> int:
    from .report import render

    rep.save(out)
    md = render(out)
    wall = time.time() - started
    (out / "run-info.json").write_text(json.dumps({"wall_seconds": round(wall, 3)}, indent=2) + "\n")
    if not quiet:
        m = rep.metrics
        print(f"DLWA {m['dlwa']:.4f}  host writes {m['host_write_bytes'] / 2**30:.2f} GiB  GC events {m['gc_events']}  "
              f"({wall:.1f} s wall)")
        w = m["latency_ns"]["write"]
        if w.get("count"):
            print(f"write latency p50 {w['p50'] / 1e3:.1f} us  p99 {w['p99'] / 1e3:.1f} us  p99.9 {w['p999'] / 1e3:.1f} us")
        print(f"wrote {out / 'metrics.json'}, {md}")
    if rep.interrupted:
        print("interrupted: partial metrics written", file=sys.stderr)
        return 130
    return 0


def _warn_reserve(cfg: dict) -> None:
    """Say so when the FTL's reserve eats more than a third of the configured spare."""
    size = _native.config_sizing(cfg)
    reserve, spare, e = size["reserve_steady_blocks"], size["spare_blocks"], size["effective"]
    if reserve is not None and spare and e is not None and size["spare_factor"] is not None and reserve > spare / 3:
        print(f"ssdlab: warning: the FTL holds back about {reserve:.0f} of the {spare:.0f} spare blocks (open blocks of "
              f"every write stream on every die, GC watermarks): the effective spare is {e['spare_factor'] * 100:.2f}% of "
              f"{size['spare_factor'] * 100:.2f}% configured (`ssdlab config check` has the details)", file=sys.stderr)


def _run_layer(path: str, rows: Optional[int]) -> dict:
    """The config `ssdlab run FILE` runs: the file, with time-series intervals that give about
    `rows` rows (--series-rows), or config.SERIES_ROWS rows when the file's [metrics] intervals
    are the core's defaults (left out, or as `ssdlab config show` writes them)."""
    from .config import SERIES_ROWS, load_file, merge, resolve, series_intervals

    user = load_file(path)
    cfg = resolve(config=user, origin=path)
    if rows is None and cfg["metrics"] != resolve()["metrics"]:
        return user  # intervals of the file's own choosing
    intervals = series_intervals(cfg, rows or SERIES_ROWS)
    if intervals is None:
        if rows is not None:
            print(f"ssdlab run: warning: --series-rows {rows}: {path}: the run's length is not known before it runs (no "
                  "volume, write or time limit); the [metrics] intervals apply", file=sys.stderr)
        return user
    return merge(user, {"metrics": intervals})


def _log_progress(cfg: dict):
    """A progress printer for a run whose stderr is not a terminal (ssdlab.progress): its
    phases weighed in device writes, and the rate in host bytes when the run's volume is known."""
    from .config import planned_write_bytes
    from .progress import LogProgress
    from .runners import _device_phases

    logical = int(_native.config_sizing(cfg)["logical_bytes"])
    phases = _device_phases(cfg)
    planned = planned_write_bytes(cfg, logical, estimate=False)
    if planned:
        phases["run"] = planned / logical
    return LogProgress("ssdlab run", phases, bytes_per_unit=float(logical) if planned else None)


def cmd_run(args) -> int:
    from .device import Device

    started = time.time()
    dev = Device(config=_run_layer(args.config, args.series_rows))
    if not args.quiet:
        _warn_reserve(dev.config)
    logged = _log_progress(dev.config) if not args.quiet and not sys.stderr.isatty() else None
    rep = dev.run(progress=_progress_wanted(args), on_progress=logged)
    return _finish_run(rep, Path(args.out), started, args.quiet)


def cmd_replay(args) -> int:
    from .device import Device

    started = time.time()
    dev = Device(config=args.device) if args.device else Device(args.preset)
    if args.precondition:
        dev.precondition(progress=_progress_wanted(args))
    qd = None if args.timestamps else args.queue_depth
    if Path(args.trace).is_dir():
        raise ValueError(f"{args.trace}: is a directory; expected a {args.format} trace file")
    rep = dev.replay(args.trace, args.format, queue_depth=qd, max_ops=args.max_ops, progress=_progress_wanted(args),
                     blkparse_action=args.blkparse_action)
    t = rep.metrics.get("trace", {})
    if t.get("skipped_lines") and not args.quiet:
        nums = ", ".join(map(str, t["skipped_line_numbers"]))
        more = ", ..." if t["skipped_lines"] > len(t["skipped_line_numbers"]) else ""
        print(f"ssdlab replay: {args.trace}: {t['records']} records replayed, {t['skipped_lines']} lines skipped "
              f"(lines {nums}{more}): not {args.format} requests", file=sys.stderr)
    return _finish_run(rep, Path(args.out), started, args.quiet)


def cmd_report(args) -> int:
    from .report import render

    md = render(Path(args.dir))
    print(md)
    return 0


# Logical sectors up to which `config check` runs its pilot unless told not to (a 32 GiB device
# of 4 KiB sectors takes about 9 s; the pilot's time grows with the capacity).
PILOT_SECTORS_AUTO = 16 << 20


def _pilot(args, cfg: dict, size: _native.Sizing) -> None:
    """Measure the reserve the FTL holds by running it: the config's device with timing off and
    no data kept, filled sequentially, then 2 device writes of uniform random 4 KiB overwrites
    (the steady state), then 0.5 more measured. The reserve moves with the GC's pacing (free
    blocks float above or below the watermark, write streams' ways open and close), which the
    estimate from the settings does not follow; Desnoyers' models at the measured reserve are
    what a run of uniform overwrites gives."""
    sectors = size["logical_bytes"] // cfg["geometry"]["sector_bytes"]
    avail = size.get("available_memory_bytes")
    run = args.pilot if args.pilot is not None else sectors <= PILOT_SECTORS_AUTO
    if not run or (avail is not None and size["memory_bytes"] > avail):
        if args.pilot is None:
            print("  (a device this large is not measured by default: --pilot runs the FTL to measure its reserve)")
        return
    import time

    from .device import Device
    from .workload import Workload

    t0 = time.monotonic()
    sys.stdout.flush()
    print("  measuring the reserve: the FTL on 2.5 device writes of uniform 4 KiB overwrites, timing off ...",
          file=sys.stderr, flush=True)
    dev = Device(config=cfg, storage="metadata", timing={"enabled": False},
                 precondition={"sequential_fill": True, "random_device_writes": 2.0})
    dev.precondition()
    bs = cfg["geometry"]["sector_bytes"]
    rep = dev.run(Workload(pattern="uniform", read_fraction=0.0, trim_fraction=0.0, block_bytes=bs, span=1.0, offset=0.0,
                           placement=-1, stop_device_writes=0.5))
    sp = rep["spare"]
    if sp.get("reserved_blocks_mean") is None:
        return
    print(f"  FTL reserve measured: {sp['reserved_blocks_mean']:.1f} blocks (pilot run, {time.monotonic() - t0:.0f} s); "
          f"effective spare {sp['spare_factor_measured'] * 100:.2f}%")
    if sp.get("model_waf_greedy_measured") is not None:
        print(f"  uniform random overwrites at the measured spare: WAF about {sp['model_waf_greedy_measured']:.2f} greedy, "
              f"{sp['model_waf_fifo_measured']:.2f} FIFO (Desnoyers' models); the pilot's own DLWA "
              f"{rep['dlwa']:.2f} over its 0.5 device writes")


def cmd_config(args) -> int:
    if args.action == "show":
        sys.stdout.write(_native.config_show(args.preset))
    elif args.action == "keys":
        sys.stdout.write(_native.config_markdown())
    elif args.action == "check":
        from .config import check_file

        cfg = check_file(args.file)
        size = _native.config_sizing(cfg)
        gib = 2**30
        print(f"{args.file}: ok: {size['logical_bytes'] / gib:.2f} GiB logical of {size['physical_bytes'] / gib:.2f} GiB "
              f"raw ({size['good_blocks']} good blocks)")
        e = size["effective"]
        if size["reserve_steady_blocks"] is not None and e is not None and size["spare_factor"] is not None:
            print(f"  FTL reserve: about {size['reserve_steady_blocks']:.0f} of {size['spare_blocks']:.0f} spare blocks held back "
                  "in steady state (GC watermark, open blocks of every write stream, victims in progress); "
                  f"effective spare {e['spare_factor'] * 100:.2f}% (configured {size['spare_factor'] * 100:.2f}%)")
            if e["waf_greedy"] is not None:
                print(f"  uniform random overwrites at that spare: WAF about {e['waf_greedy']:.2f} greedy, "
                      f"{e['waf_fifo']:.2f} FIFO (Desnoyers' models)")
            _pilot(args, cfg, size)
        avail = size.get("available_memory_bytes")
        data = size["data_bytes_max"]
        print(f"  memory: about {size['memory_bytes'] / gib:.2f} GiB"
              + (f", up to {(size['memory_bytes'] + data) / gib:.2f} GiB once every sector holds data" if data else "")
              + (f" ({avail / gib:.1f} GiB available)" if avail is not None else ""))
        if avail is not None and size["memory_bytes"] > avail:
            print(f"ssdlab: error: {args.file}: needs more memory than is available; runs refuse it unless forced "
                  "(--force, or SSDLAB_IGNORE_MEMORY_ESTIMATE=1)", file=sys.stderr)
            return 1
        if avail is not None and size["memory_bytes"] + data > avail:
            print(f"ssdlab: warning: {args.file}: its contents would not fit in memory once the host has written "
                  f"{(avail - size['memory_bytes']) / gib:.1f} GiB of non-zero data", file=sys.stderr)
    elif args.action == "presets":
        from .preset_table import presets_table

        print("\n".join(presets_table()))
    return 0


def _stopped_by_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_reproduce(args) -> int:
    from .studies.reproduce import ReproductionError, headline, listing, reproduce, write_headline

    if args.list:
        print("\n".join(listing()))
        return 0
    if args.headline:
        if args.name:
            print("ssdlab reproduce: --headline reads every report under --out; it takes no NAME", file=sys.stderr)
            return 2
        if args.write:
            missing = write_headline(Path(args.out), [Path(f) for f in args.write])
            print(f"wrote the headline table of {args.out} into {', '.join(args.write)}")
        else:
            lines, missing = headline(Path(args.out))
            print("\n".join(lines))
        if missing:
            print(f"ssdlab reproduce: no verdicts.json under {args.out} for: {', '.join(missing)} (not reproduced there)",
                  file=sys.stderr)
        return 0
    if args.write:
        print("ssdlab reproduce: --write goes with --headline", file=sys.stderr)
        return 2
    if not args.name:
        print("ssdlab reproduce: name an experiment (--list shows them)", file=sys.stderr)
        return 2
    mode = "full" if args.full else "quick"
    started = time.time()
    memory = parse_bytes(args.memory) if args.memory else None
    try:
        md = reproduce(args.name, mode, Path(args.out), log=(lambda s: None) if args.quiet else print, resume=args.resume,
                       backend="ray" if args.ray else "local", jobs=args.jobs, ray_address=args.ray, memory_bytes=memory,
                       checkpoint_every_s=args.checkpoint_every * 60)
    except ReproductionError as e:
        print(f"ssdlab: {e}", file=sys.stderr)
        return 1
    print(f"{md} ({time.time() - started:.0f} s)")
    return 0


def cmd_sweep(args) -> int:
    from .sweep import load_sweep, run_sweep

    spec = load_sweep(args.sweep)
    out = Path(args.out)
    backend = "ray" if args.ray else "local"
    say = (lambda s: None) if args.quiet else print
    _, summary = run_sweep(spec, out, backend=backend, jobs=args.jobs, ray_address=args.ray,
                           progress=not args.quiet and sys.stderr.isatty(), log=say,
                           memory_bytes=parse_bytes(args.memory) if args.memory else None,
                           checkpoint_every_s=args.checkpoint_every * 60)
    say(f"{summary['points']} points: {summary['ran']} run, {summary['skipped']} skipped (done before), "
        f"{summary['failed']} failed, {summary['not_run']} not run  ({summary['wall_seconds']:.1f} s wall, "
        f"{backend})")
    say(f"wrote {', '.join(summary['tables'])}; {len(summary['plots'])} plots in {out / 'plots'}")
    for w in summary["warnings"]:
        print(f"ssdlab: warning: {w}", file=sys.stderr)
    shown = 10  # the rest are in results.csv
    for f in summary["failures"][:shown]:
        print(f"ssdlab: failed: {f['error'].splitlines()[0]}  [{f['error_file']}]", file=sys.stderr)
    if len(summary["failures"]) > shown:
        print(f"ssdlab: ... and {len(summary['failures']) - shown} more failed points (see {out / 'results.csv'})",
              file=sys.stderr)
    if summary["interrupted"]:
        print(f"ssdlab: interrupted: finished points kept, {summary['not_run']} not run; the same command "
              "resumes", file=sys.stderr)
        return 130
    if summary["failed"]:
        print(f"ssdlab: {summary['failed']} of {summary['points']} points failed", file=sys.stderr)
        return 1
    return 0


def _add_pool_options(p: argparse.ArgumentParser) -> None:
    """Where the points of a sweep or reproduction run (docs/sweeps.md)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--jobs", "-j", type=int_in(1, 4096), help="local worker processes (default: all cores)")
    g.add_argument("--ray", metavar="ADDRESS|auto",
                   help="run on Ray: auto starts a local Ray on 127.0.0.1, host:port joins a cluster")
    p.add_argument("--memory", metavar="SIZE",
                   help="memory the points running at once may use together, e.g. 16G (local pool; default: what "
                        "is available when it starts; each point's peak is estimated before it runs)")
    p.add_argument("--force", action="store_true",
                   help="run a point even if its memory estimate exceeds what is available")
    p.add_argument("--checkpoint-every", metavar="MIN", type=number(0.0, 1e6, "a number of minutes"),
                   default=CHECKPOINT_EVERY_S / 60,
                   help="long points that can save their state (fdp-cache runs) do so this often, in "
                        "OUT/checkpoints/; one killed or interrupted goes on from its latest save when the "
                        "same command runs again (reproduce: with --resume); 0: never; local pool only "
                        "(default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ssdlab", description="A fast, deterministic flash-storage emulation lab.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ssdlab {_native.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a TOML config (precondition + workload) and write its metrics")
    r.add_argument("config", help="config file (see `ssdlab config show`)")
    r.add_argument("--out", required=True, help="output directory")
    add_force_argument(r)
    r.add_argument("--series-rows", type=int_in(2, 1 << 40), metavar="N",
                   help=f"sample timeseries.csv into about N rows over the run (default {SERIES_ROWS}, unless the config's "
                        "[metrics] table sets intervals other than the defaults; this option overrides those)")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (no summary, no progress bar or progress lines)")
    r.set_defaults(func=cmd_run)

    rp = sub.add_parser("replay", help="replay a block trace on a device")
    rp.add_argument("trace")
    rp.add_argument("--format", required=True, choices=_native.trace_formats())
    rp.add_argument("--device", help="device config file (default: --preset)")
    rp.add_argument("--preset", default="default")
    rp.add_argument("--out", required=True)
    rp.add_argument("--timestamps", action="store_true", help="honour the trace's arrival times (open loop)")
    rp.add_argument("--queue-depth", type=int_in(1, 1 << 20), default=32, help="closed-loop depth when timestamps are ignored")
    rp.add_argument("--precondition", action="store_true", help="run the device's [precondition] first")
    rp.add_argument("--max-ops", type=int_in(0, 1 << 62), default=0, help="stop after this many records (0: all)")
    rp.add_argument("--blkparse-action", default="Q", help="blkparse event to replay (default Q)")
    add_force_argument(rp)
    rp.add_argument("-q", "--quiet", action="store_true")
    rp.set_defaults(func=cmd_replay)

    rep = sub.add_parser("report", help="render report.md and plots for a run directory")
    rep.add_argument("dir")
    rep.set_defaults(func=cmd_report)

    c = sub.add_parser("config", help="show presets, keys, or check a config file",
                       description="Configs are TOML files: a preset, then the keys a file sets (docs/CONFIG.md).",
                       epilog="examples:\n"
                              "  ssdlab config presets                   # the devices to start from\n"
                              "  ssdlab config show fdp-ssd > my.toml    # a complete config to edit\n"
                              "  ssdlab config check my.toml             # is it valid, its sizes, reserve, memory",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ca = c.add_subparsers(dest="action", required=True)
    cs = ca.add_parser("show", help="print a preset as a complete config, every key set and commented (TOML)",
                       description="Print PRESET as a complete config file: every key with its value and a comment "
                                   "(unit, meaning). Redirect it to a file and edit it: `ssdlab config show default "
                                   "> my.toml`.")
    cs.add_argument("preset", nargs="?", default="default", help="a preset (`ssdlab config presets`; default: default)")
    ca.add_parser("keys", help="print every config key: unit, default, valid range, meaning (Markdown; docs/CONFIG.md)",
                  description="Print the table of every config key (its unit, default, valid range and meaning) "
                              "as Markdown: docs/CONFIG.md is this output.")
    ck = ca.add_parser("check", help="validate a config file; print its capacity, the FTL's reserve, expected WAF, memory",
                       description="Validate FILE as `ssdlab run` would (errors name the file, line and key) and print "
                                   "its logical and raw capacity, the spare blocks the FTL holds back (estimated from "
                                   "the settings, then measured by a pilot run of the FTL, --pilot), the write "
                                   "amplification models predict at the spare left, and the memory a run needs. "
                                   "Exits 1 when the run would not fit in memory.")
    ck.add_argument("file", help="a TOML config file")
    ck.add_argument("--pilot", action=argparse.BooleanOptionalAction, default=None,
                    help="measure the FTL's reserve by running the device (timing off) and give the models at it; "
                         f"default: on for devices up to {PILOT_SECTORS_AUTO >> 20} Mi logical sectors")
    ca.add_parser("presets", help="list the presets: personality, capacity, geometry, what each models and its source",
                  description="List the device presets as a table: name, personality, logical and raw capacity, "
                              "geometry (channels x dies x planes x blocks x pages of page size), what each models and "
                              "where its numbers come from. `ssdlab config show NAME` prints one in full.")
    c.set_defaults(func=cmd_config)

    x = sub.add_parser("reproduce", help="run an experiment and write reports/NAME/")
    x.add_argument("name", nargs="?")
    g = x.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="minutes on a laptop (default)")
    g.add_argument("--full", action="store_true", help="the full-scale version")
    x.add_argument("--out", default="reports")
    x.add_argument("--list", action="store_true", help="list the experiments: runs / seeds of --quick and --full (QUICK, FULL), what each reproduces")
    x.add_argument("--headline", action="store_true",
                   help="print the headline claims of every report under --out (their verdicts.json) as one table")
    x.add_argument("--write", nargs="+", metavar="FILE",
                   help="with --headline: put the table between the headline markers of these files (README.md, "
                        "docs/case-studies/README.md)")
    x.add_argument("--resume", action="store_true",
                   help="reuse points already in OUT/NAME/points/ whose input is unchanged (an interrupted or partly "
                        "failed reproduction goes on where it stopped; results also depend on the ssdlab build, so do "
                        "not resume across code changes)")
    _add_pool_options(x)
    x.add_argument("-q", "--quiet", action="store_true")
    x.set_defaults(func=cmd_reproduce)

    sw = sub.add_parser("sweep", help="run a parameter sweep (grid/zip of config keys) on a pool or Ray",
                        description="Run every point of a sweep file (docs/sweeps.md) and collect "
                                    "OUT/results.csv and OUT/plots/. Re-running skips finished points.")
    sw.add_argument("sweep", help="sweep file (TOML: base or preset, [grid], [zip], metrics)")
    sw.add_argument("--out", required=True, help="output directory (points/, results.csv, plots/)")
    _add_pool_options(sw)
    sw.add_argument("-q", "--quiet", action="store_true")
    sw.set_defaults(func=cmd_sweep)

    # Every other command registers itself the same way, with an add_cli(sub): the platform's
    # front-ends (NBD, SPI NOR, guest VMs), then each study's own commands (the registry).
    from . import nbd, nvme, spi, vm
    from .studies import all_studies

    for add_cli in (nbd.add_cli, nvme.add_cli, spi.add_cli, vm.add_cli, *(s.add_cli for s in all_studies())):
        add_cli(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    # A line at a time even into a file or pipe: a long run's progress lines (`ssdlab sweep ...
    # > log`, nohup) are there as they are printed, not hours later when a block fills.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    if getattr(args, "force", False):
        os.environ["SSDLAB_IGNORE_MEMORY_ESTIMATE"] = "1"
    if args.func in (cmd_sweep, cmd_reproduce):
        # `kill`, `timeout` or a job scheduler stopping a sweep: as a Ctrl-C, so its workers
        # stop (they lead process groups of their own) and finished points are kept.
        signal.signal(signal.SIGTERM, _stopped_by_sigterm)
    try:
        return args.func(args)
    except SsdlabError as e:
        print(f"ssdlab: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`ssdlab ... | head`): stop quietly, as Unix tools do, and keep
        # the interpreter's final flush of stdout from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"ssdlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ssdlab: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: still one line for the user, the traceback on request
        if os.environ.get("SSDLAB_TRACEBACK"):
            raise
        print(f"ssdlab: internal error: {type(e).__name__}: {e} (SSDLAB_TRACEBACK=1 shows where)", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
