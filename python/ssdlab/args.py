"""Argument types for the `ssdlab` command line: every option is checked before use and a bad
value gives one line naming the option and what was expected (argparse adds the option name)."""

from __future__ import annotations

import argparse


def int_in(lo: int, hi: int):
    """An argparse type: an integer in lo..hi, with a one-line error otherwise."""
    def parse(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is outside {lo}..{hi}")
        return v
    parse.__name__ = "integer"
    return parse


def seconds(positive: bool):
    """An argparse type: seconds (> 0, or >= 0 when not ``positive``)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not (v > 0 if positive else v >= 0) or v > 1e9:
            raise argparse.ArgumentTypeError(f"{text} seconds: must be {'more than 0' if positive else '0 or more'}")
        return v
    parse.__name__ = "seconds"
    return parse


def number(lo: float, hi: float, what: str = "a number"):
    """An argparse type: a float in lo..hi."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text} is outside {lo:g}..{hi:g}")
        return v
    parse.__name__ = what
    return parse


def size(minimum: int = 0, multiple: int = 1):
    """An argparse type: a byte size ("64K", "2G") of at least ``minimum``, a multiple of
    ``multiple``."""
    from .units import human_bytes, parse_size

    def parse(text: str) -> int:
        try:
            v = parse_size(text, repr(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4096, 64K, 256M or 2G") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {human_bytes(minimum) if minimum > 1 else minimum}")
        if v % multiple:
            raise argparse.ArgumentTypeError(f"{text}: must be a multiple of {human_bytes(multiple)}")
        return v
    parse.__name__ = "size"
    return parse


class Parser(argparse.ArgumentParser):
    """argparse, with a one-line error instead of the usage text: `ssdlab serve: error: argument
    --max-connections: 0 is outside 1..65536 (ssdlab serve --help shows the options)`."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help shows the options)\n")


def read_text(path, expected: str) -> str:
    """A text file's contents, or a one-line error naming the file and what was expected."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{p}: is a directory; expected {expected}")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file; expected {expected}") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot be read ({e.strerror or e}); expected {expected}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not a UTF-8 text file (byte {e.start} is {data[e.start]:#04x}); expected {expected}") from None
