"""Progress lines for logs: when a command's output is not a terminal (a file, a pipe, a job
scheduler's log), a long run prints one line to stderr every ``SSDLAB_PROGRESS_EVERY`` seconds
(10 by default) instead of a progress bar::

    ssdlab run: 42.0% (run 13.0%), 1.21 GiB/s of host writes, 0:00:35 elapsed, ETA 0:00:48

The core calls the printer with (phase, fraction of that phase) as the run goes; the phases'
weights (in device writes) turn that into one fraction of the whole run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Optional

from .units import human_bytes

# Seconds between two lines; the environment variable sets another (tests use a short one).
PROGRESS_EVERY_S = 10.0
PROGRESS_EVERY_ENV = "SSDLAB_PROGRESS_EVERY"


def progress_every_s() -> float:
    """The interval between progress lines: ``$SSDLAB_PROGRESS_EVERY`` seconds if set to a
    number above 0, else 10."""
    text = os.environ.get(PROGRESS_EVERY_ENV, "")
    try:
        v = float(text)
    except ValueError:
        return PROGRESS_EVERY_S
    return v if 0 < v < 1e9 else PROGRESS_EVERY_S


def clock(seconds: float) -> str:
    """75.4 -> "0:01:15"."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def progress_line(label: str, done: float, elapsed_s: float, phase: Optional[str] = None,
                  phase_done: Optional[float] = None, bytes_done: Optional[float] = None) -> str:
    """One progress line: percent done (and of the phase running), rate, time elapsed and the
    time left at the rate so far."""
    done = min(max(done, 0.0), 1.0)
    parts = [f"{label}: {done * 100:.1f}%" + (f" ({phase} {phase_done * 100:.1f}%)" if phase and phase_done is not None else "")]
    if bytes_done is not None and elapsed_s > 0:
        parts.append(f"{human_bytes(bytes_done / elapsed_s)}/s of host writes")
    parts.append(f"{clock(elapsed_s)} elapsed")
    parts.append(f"ETA {clock(elapsed_s * (1 - done) / done)}" if done > 0 else "ETA -")
    return ", ".join(parts)


class LogProgress:
    """An ``on_progress(phase, fraction)`` callback that writes a progress line to ``stream``
    at most every ``every_s`` seconds (the first after ``every_s``).

    ``phases`` maps each phase to its weight (device writes, as ``ssdlab.runners`` counts them);
    ``bytes_per_unit`` (the logical capacity) turns the weights into host bytes for the rate.
    """

    def __init__(self, label: str, phases: Mapping[str, float], bytes_per_unit: Optional[float] = None,
                 every_s: Optional[float] = None, stream: Optional[IO[str]] = None,
                 now: Callable[[], float] = time.monotonic):
        self.label = label
        self.phases = dict(phases)
        self.total = sum(self.phases.values()) or 1.0
        self.start: dict[str, float] = {}
        acc = 0.0
        for name, weight in self.phases.items():
            self.start[name], acc = acc, acc + weight
        self.bytes_per_unit = bytes_per_unit
        self.every_s = progress_every_s() if every_s is None else every_s
        self.stream = stream
        self.now = now
        self.started = now()
        self.next_at = self.started + self.every_s
        self.lines = 0

    def __call__(self, phase: str, fraction: float) -> None:
        t = self.now()
        if t < self.next_at or phase not in self.phases:
            return
        while self.next_at <= t:
            self.next_at += self.every_s
        units = self.start[phase] + fraction * self.phases[phase]
        line = progress_line(self.label, units / self.total, t - self.started, phase, fraction,
                             None if self.bytes_per_unit is None else units * self.bytes_per_unit)
        print(line, file=self.stream or sys.stderr, flush=True)
        self.lines += 1
