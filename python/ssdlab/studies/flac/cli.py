"""`ssdlab flac mkfs|fsck|ls|run`: FlacFS images from the shell, and unmodified programs on them
through the LD_PRELOAD shim (docs/case-studies/flac.md)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ...args import Parser, size
from ...units import parse_size
from .api import PAGE, FlacFS, shim_env

# The DRAM cache comes in units of 2 MiB (huge pages).
DRAM_UNIT = 2 << 20


def _cmd_mkfs(args: argparse.Namespace) -> int:
    size = parse_size(args.size, "--size")
    image = Path(args.image)
    if image.exists() and image.stat().st_size > 0 and not args.force:
        raise FileExistsError(f"{image} exists (use --force to replace it)")
    if args.force and image.exists():
        image.unlink()
    with FlacFS(image, create=size, dram="8M") as fs:
        st = fs.stats()
    print(f"{image}: FLAC PM image of {size} bytes ({st['files']} file: /)")
    return 0


def _cmd_fsck(args: argparse.Namespace) -> int:
    with FlacFS(args.image, dram=args.dram, pm_cost=False) as fs:
        fs.check()
        dram, pm = fs.frames_in_use()
        st = fs.stats()
    print(f"{args.image}: consistent; {st['files']} files, {pm} PM frames in use ({pm * PAGE / 2**20:.1f} MiB)")
    return 0


def _cmd_ls(args: argparse.Namespace) -> int:
    with FlacFS(args.image, dram=args.dram, pm_cost=False) as fs:
        base = args.path.rstrip("/") or "/"
        for name in fs.listdir(base):
            st = fs.stat(f"{base.rstrip('/')}/{name}", follow=False)
            kind = {0o040000: "d", 0o120000: "l"}.get(st["mode"] & 0o170000, "-")
            print(f"{kind}{st['mode'] & 0o7777:04o} {st['size']:>12} {name}")
    return 0


def _mount_point(text: str) -> str:
    """--mount: an absolute directory other than / (the shim serves paths under it; at / it
    would serve none and the program would run on the real file system)."""
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"{text!r}: give an absolute path, e.g. /flac")
    path = os.path.normpath(text)
    if path == "/" or path.startswith("//"):
        raise argparse.ArgumentTypeError(f"{text!r}: the mount point must be a directory below /, e.g. /flac")
    return path


def _add_run_options(r: argparse.ArgumentParser) -> None:
    r.add_argument("--mount", default="/flac", type=_mount_point,
                   help="where the image appears to the program: an absolute path other than / (default %(default)s)")
    r.add_argument("--engine", default="flac", choices=["flac", "pagecache", "dax"])
    r.add_argument("--create", type=size(minimum=1), help="create the image with this size if missing")
    r.add_argument("--dram", default="256M", type=size(minimum=DRAM_UNIT, multiple=DRAM_UNIT),
                   help="DRAM cache size, a multiple of 2M (default 256M)")
    r.add_argument("--zcopy-min", default="64K", type=size(),
                   help="attach reads of at least this many bytes (default 64K; 0: every read)")
    r.add_argument("--no-pm-cost", action="store_true", help="PM as fast as the DRAM it is emulated in")
    r.add_argument("--stats", help="append a JSON line of statistics to this file at exit")


def _run_options() -> argparse.ArgumentParser:
    """`flac run`'s options alone: what comes between the image and `--` is parsed with it."""
    p = Parser(prog="ssdlab flac run", add_help=False)
    _add_run_options(p)
    return p


def _cmd_run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if "--" in cmd:
        # Options after the image (`flac run IMG --create 1G -- cmd`): argparse leaves
        # everything after the image to the command; the part before `--` is options.
        i = cmd.index("--")
        _run_options().parse_args(cmd[:i], namespace=args)
        cmd = cmd[i + 1:]
    elif cmd and cmd[0].startswith("-"):
        raise ValueError(f"ssdlab flac run: {cmd[0]}: put the command after --, e.g. ssdlab flac run fs.img "
                         f"{' '.join(cmd)} -- ls /flac")
    if not cmd:
        raise ValueError("ssdlab flac run: give a command after --, e.g. ssdlab flac run fs.img -- ls -l /flac")
    if not Path(args.image).exists() and not args.create:
        raise FileNotFoundError(f"{args.image}: no such PM image (ssdlab flac mkfs {args.image} --size 1G, or --create 1G)")
    env = shim_env(args.image, mount=args.mount, engine=args.engine, create=args.create, dram=args.dram,
                   pm_cost=not args.no_pm_cost, zcopy_min=args.zcopy_min, stats=args.stats)
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise FileNotFoundError(f"{cmd[0]}: command not found")
    return subprocess.call(cmd, env=env)


def add_cli(sub: Any) -> None:
    """`ssdlab flac ...` subcommands."""
    p = sub.add_parser("flac", help="FlacFS: zero-copy library file system over DRAM and emulated PM",
                       description="FlacFS images: create, check, list, and run unmodified programs on them "
                                   "(docs/case-studies/flac.md).")
    s = p.add_subparsers(dest="flac_command", required=True)
    m = s.add_parser("mkfs", help="create a PM image")
    m.add_argument("image")
    m.add_argument("--size", required=True, help="image size, e.g. 1G (put it on tmpfs, e.g. /dev/shm, for PM-like persistence)")
    m.add_argument("--force", action="store_true", help="replace an existing image")
    m.set_defaults(func=_cmd_mkfs)
    c = s.add_parser("fsck", help="recover an image and check its consistency")
    c.add_argument("image")
    c.add_argument("--dram", default="8M")
    c.set_defaults(func=_cmd_fsck)
    ls = s.add_parser("ls", help="list a directory of an image")
    ls.add_argument("image")
    ls.add_argument("path", nargs="?", default="/")
    ls.add_argument("--dram", default="8M")
    ls.set_defaults(func=_cmd_ls)
    r = s.add_parser("run", help="run a command with the image mounted at --mount (LD_PRELOAD shim)",
                     usage="ssdlab flac run IMAGE [OPTIONS] -- CMD [ARGS...]",
                     description="Run CMD with FlacFS under --mount: e.g. ssdlab flac run fs.img --create 1G -- tar -C /flac "
                                 "-xf x.tar. Options go before or after IMAGE, the command after --. Paths under the mount "
                                 "are served in the process; descriptors are not inherited across exec.")
    r.add_argument("image")
    _add_run_options(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    r.set_defaults(func=_cmd_run)

