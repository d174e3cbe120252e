"""SPI NOR flash emulator: a datasheet-timed chip for firmware tests, and a serprog server for
flashrom (docs/case-studies/spi-nor.md).

>>> from ssdlab.spi import Flash
>>> f = Flash(chip="W25Q16JV")
>>> f.transfer(b"\\x9f\\x00\\x00\\x00")[1:].hex()
'ef4015'
>>> _ = f.transfer(b"\\x06"); _ = f.transfer(b"\\x20\\x00\\x00\\x00")   # WREN, sector erase
>>> f.busy, f.read_status() & 1                                          # WIP for tSE (simulated)
(True, 1)
>>> f.wait_ready() > 0 and not f.busy
True
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

from . import _native
from .args import int_in
from .serving import add_listener_arguments, listener_options, write_metrics

PathLike = Union[str, Path]


def chips() -> List[dict]:
    """The chip presets: name, vendor, size, IDs, typical/max timings and the datasheet used."""
    return _native.spi_chips()


class Flash:
    """An emulated SPI NOR chip.

    ``transfer(bytes)`` is one chip-select frame (full duplex: one byte out per byte in).
    Program, erase and status writes start when the frame ends and keep the chip busy (WIP) in
    simulated time, which advances by the bytes clocked at ``clock_hz`` and by ``advance(ns)``;
    nothing sleeps. ``timing``: "datasheet" (= "typical", the default), "max" (the datasheet's
    maximum column), "instant" (no busy time: fast firmware loops) or "scale=X" (X times the
    typical column). ``stats`` counts the datasheet busy time in every mode.

    image: a file holding the array (created erased if missing; written through on every program
    and erase); the non-volatile status bits are kept in IMAGE.status. stuck_bits: (address, bit, value) cells that ignore program/erase.
    erase_fail_after: erases of a sector already erased that many times fail silently.
    trace: a JSON-lines file with every frame and its simulated timestamps.
    """

    def __init__(self, chip: str = "W25Q128JV", image: Optional[PathLike] = None, *, timing: str = "datasheet",
                 clock_hz: int = 8_000_000, stuck_bits: Iterable[Tuple[int, int, int]] = (),
                 erase_fail_after: Optional[int] = None, unique_id: Optional[bytes] = None,
                 trace: Optional[PathLike] = None, power_seed: int = 0, wear_out: str = "counted",
                 endurance_cycles: Optional[int] = None):
        self.chip = chip
        uid = list(unique_id) if unique_id is not None else None
        self._f = _native.SpiFlash(chip, str(image) if image is not None else None, timing, clock_hz,
                                   [(a, b, bool(v)) for a, b, v in stuck_bits], erase_fail_after, uid,
                                   str(trace) if trace is not None else None, power_seed, wear_out, endurance_cycles)

    # Power (docs/case-studies/spi-nor.md, "Power cuts"): a cut stops whatever program, erase or
    # status write runs and leaves the partial state the model describes (seeded by
    # ``power_seed``); without power frames are not seen and MISO reads FFh.

    def power_cut(self, *, frame: Optional[int] = None, at_ns: Optional[int] = None) -> None:
        """Cut power now, or plan it: as the ``frame``-th frame from now begins (1 = the next),
        or when simulated time reaches ``at_ns``."""
        if frame is None and at_ns is None:
            self._f.power_cut()
        else:
            self._f.schedule_power_cut(frame, at_ns)

    def cancel_power_cut(self) -> None:
        self._f.cancel_power_cut()

    def power_up(self) -> None:
        """Power back: status registers from their non-volatile copy, WEL and WIP clear; the chip
        ignores commands for tVSL and write commands until tPUW (advance() past them)."""
        self._f.power_up()

    @property
    def powered(self) -> bool:
        return self._f.powered

    @property
    def frames_begun(self) -> int:
        """Chip-select frames begun so far (what ``power_cut(frame=N)`` counts from)."""
        return self._f.frames_begun

    def last_power_cut(self) -> Optional[dict]:
        """What the last cut interrupted: t_ns, frame, interrupted ("program", "erase", "status
        write" or ""), range, fraction of its busy time done, bits short of the finished state."""
        return self._f.last_power_cut()

    def transfer(self, data: bytes) -> bytes:
        """One chip-select frame: clock ``data`` in, return what the chip drove out."""
        return self._f.transfer(bytes(data))

    def advance(self, ns: int) -> None:
        """Let ``ns`` nanoseconds of simulated time pass (a host delay between frames)."""
        self._f.advance(int(ns))

    @property
    def now_ns(self) -> int:
        return self._f.now_ns

    @property
    def busy(self) -> bool:
        return self._f.busy

    @property
    def busy_until_ns(self) -> int:
        return self._f.busy_until_ns

    @property
    def clock_hz(self) -> int:
        return self._f.clock_hz

    @clock_hz.setter
    def clock_hz(self, hz: int) -> None:
        self._f.clock_hz = hz

    def set_wp(self, high: bool) -> None:
        """Drive the /WP pin (low + SRP/SRWD = 1 locks the status register)."""
        self._f.set_wp(bool(high))

    def read_status(self) -> int:
        """RDSR (05h) as a frame."""
        return self.transfer(b"\x05\x00")[1]

    def wait_ready(self, poll_ns: int = 10_000, max_polls: int = 10_000_000) -> int:
        """Poll RDSR with ``poll_ns`` host delays until WIP clears, like firmware; returns the
        number of polls."""
        for n in range(1, max_polls + 1):
            if not self.read_status() & 1:
                return n
            self.advance(poll_ns)
        raise TimeoutError(f"WIP still set after {max_polls} polls")

    def read(self, addr: int, length: int) -> bytes:
        """READ (03h) as a frame."""
        return self.transfer(bytes([0x03, (addr >> 16) & 0xFF, (addr >> 8) & 0xFF, addr & 0xFF]) + bytes(length))[4:]

    def erase_counts(self) -> List[int]:
        """Erases per 4 KiB sector."""
        return self._f.erase_counts()

    def sectors_beyond_endurance(self) -> int:
        return self._f.sectors_beyond_endurance()

    @property
    def stats(self) -> dict:
        return self._f.stats()

    @property
    def registers(self) -> Tuple[int, int, int]:
        """SR1, SR2, SR3 (Winbond) or SR, CR, 0 (Macronix), without WIP."""
        return self._f.registers()

    @property
    def protected_range(self) -> Tuple[int, int]:
        """[start, end) byte range the block-protect bits protect."""
        return self._f.protected_range()

    def contents(self) -> bytes:
        """The whole array (a debugger's view; takes no simulated time)."""
        return self._f.contents()

    def flush(self) -> None:
        """Flush the trace and sync the image file."""
        self._f.flush()

    def serve(self, listen: str = "127.0.0.1:0", on_listening=None, *, allow_remote: bool = False,
              evict_idle_after_s: float = 5.0, idle_timeout_s: float = 0.0, quiet: bool = False,
              evict_idle_s: Optional[float] = None) -> dict:
        """Serve flashrom's serprog protocol on ``listen`` until Ctrl-C (KeyboardInterrupt from
        a signal handler: a clean stop that returns the counts; any other exception a handler
        raises goes to the caller). One client has the chip at a time; another is
        refused at once, unless the first has been idle for ``evict_idle_after_s`` (then it takes
        over; 0: never; ``evict_idle_s`` is its old name, still accepted). ``idle_timeout_s`` > 0 closes idle clients even when nobody waits. A non-loopback
        ``listen`` needs ``allow_remote`` (serprog has no authentication). Returns counts of
        clients, commands, NAKs, refused, evicted and abandoned clients (those that hung up
        before they were served)."""
        if evict_idle_s is not None:
            evict_idle_after_s = evict_idle_s
        return self._f.serve(listen, on_listening, allow_remote, evict_idle_after_s, idle_timeout_s, quiet)


def parse_stuck_bit(text: str, size_bytes: int) -> Tuple[int, int, int]:
    """ADDR:BIT:VALUE (ADDR decimal or 0x hex, inside the chip; BIT 0..7; VALUE 0 or 1)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--stuck-bit {text!r}: expected ADDR:BIT:VALUE, e.g. 0x1000:3:0")
    names = ("address", "bit", "value")
    try:
        a, b, v = (int(p, 0) for p in parts)
    except ValueError:
        bad = next(n for n, p in zip(names, parts, strict=True) if not _is_int(p))
        raise ValueError(f"--stuck-bit {text!r}: the {bad} is not an integer (expected ADDR:BIT:VALUE, "
                         "e.g. 0x1000:3:0)") from None
    if not 0 <= a < size_bytes:
        raise ValueError(f"--stuck-bit {text!r}: address {a:#x} is outside the chip (0..{size_bytes - 1:#x})")
    if not 0 <= b <= 7:
        raise ValueError(f"--stuck-bit {text!r}: bit {b} is not a bit number (0..7)")
    if v not in (0, 1):
        raise ValueError(f"--stuck-bit {text!r}: value {v} must be 0 or 1")
    return a, b, v


def _is_int(text: str) -> bool:
    try:
        int(text, 0)
        return True
    except ValueError:
        return False


def _timing(text: str) -> str:
    """argparse type of --timing: datasheet, typical, max, instant or scale=X."""
    import argparse

    if text in ("datasheet", "typical", "typ", "max", "instant"):
        return text
    if text.startswith("scale="):
        try:
            x = float(text[len("scale="):])
        except ValueError:
            x = -1.0
        if 0 <= x <= 1000:
            return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected datasheet, max, instant or scale=X (0 <= X <= 1000)")


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def cmd_spi(args) -> int:
    """`ssdlab spi chips | serve | campaign`."""
    if args.spi_action == "campaign":
        from .spi_campaign import cmd_campaign
        return cmd_campaign(args)
    if args.config is not None:
        raise ValueError(f"ssdlab spi {args.spi_action}: unexpected argument {args.config!r} (only campaign takes a "
                         "config file)")
    if args.spi_action == "chips":
        for c in chips():
            print(f"{c['name']:<12} {c['vendor']:<9} {c['size_bytes'] // 1024:>6} KiB  RDID {c['jedec_id']}  "
                  f"tPP {c['page_program_us'][0]}/{c['page_program_us'][1]} us  tSE {c['sector_erase_ms'][0]}/"
                  f"{c['sector_erase_ms'][1]} ms  ({c['datasheet']})")
        return 0
    if not args.image:
        raise ValueError("ssdlab spi serve: --image FILE is required (created erased if missing)")
    chip = next((c for c in chips() if c["name"].upper() == args.chip.upper()), None)
    if chip is None:
        raise ValueError(f"--chip {args.chip}: unknown chip; valid: {', '.join(c['name'] for c in chips())}")
    if Path(args.image).is_dir():
        raise ValueError(f"--image {args.image}: is a directory; give an image file (created erased if missing)")
    stuck = [parse_stuck_bit(s, chip["size_bytes"]) for s in args.stuck_bit or []]
    flash = Flash(args.chip, args.image, timing=args.timing, clock_hz=args.clock_hz, stuck_bits=stuck,
                  erase_fail_after=args.erase_fail_after, trace=args.trace)
    flash.set_wp(args.wp == "high")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)

    def listening(addr):
        if not args.quiet:
            print(f"ssdlab spi: {args.chip} on serprog {addr} (image {args.image})", flush=True)

    try:
        summary = flash.serve(on_listening=listening, **listener_options(args))
    except KeyboardInterrupt:
        summary = None
    finally:
        signal.signal(signal.SIGTERM, previous)
        flash.flush()
    st = flash.stats
    write_metrics(args.metrics_out, {"chip": args.chip, "image": args.image, "stats": st, "clients": summary,
                                     "max_sector_erase_count": max(flash.erase_counts())})
    if args.quiet:
        return 0
    print(f"ssdlab spi: stopped; {st['frames']} frames, {st['programs']} programs, "
          f"{st['sector_erases'] + st['block32_erases'] + st['block64_erases'] + st['chip_erases']} erases, "
          f"{st['ignored_busy']} frames ignored while busy, max sector erase count {max(flash.erase_counts())}"
          + (f"; {summary['clients']} clients served, {summary['refused']} refused, {summary['evicted']} "
             f"evicted, {summary['timeouts']} timed out" if summary else ""), flush=True)
    return 0


def add_cli(sub) -> None:
    """The `ssdlab spi` subcommand (kept here so cli.py stays small)."""
    p = sub.add_parser("spi", help="SPI NOR flash emulator: serve flashrom's serprog, list chip presets, power-cut "
                                   "campaigns",
                       description="Emulated SPI NOR chips (docs/case-studies/spi-nor.md). Example: ssdlab spi "
                                   "serve --chip W25Q128JV --image flash.bin --listen 127.0.0.1:2222, then "
                                   "flashrom -p serprog:ip=127.0.0.1:2222 -r out.bin")
    p.add_argument("spi_action", choices=["serve", "chips", "campaign"],
                   help="serve: serprog for flashrom; chips: the presets; campaign: littlefs power-cut campaign")
    p.add_argument("config", nargs="?", help="campaign: settings (TOML; experiments/spi-nor/campaign.toml)")
    p.add_argument("--chip", default="W25Q128JV", help="preset (ssdlab spi chips)")
    p.add_argument("--image", help="image file (created erased if missing)")
    p.add_argument("--timing", default="datasheet", type=_timing, metavar="datasheet|max|instant|scale=X",
                   help="busy times: datasheet (typical column, default), max (maximum column), instant (none: fast "
                        "firmware loops) or scale=X (X times the typical column); statistics count datasheet time")
    p.add_argument("--clock-hz", type=int_in(1, 1_000_000_000), default=8_000_000,
                   help="SPI clock until the client sets one (1..1e9)")
    # 5 s, not the 1 s of the other servers: flashrom may sleep on its side between commands.
    add_listener_arguments(p, "127.0.0.1:2222", what="serve", max_connections=None, evict_idle_after=5.0,
                           remote="serprog has no authentication or encryption, anyone who reaches the port can "
                                  "rewrite the image",
                           metrics_out="metrics.json (the chip's counters and the clients served)")
    p.add_argument("--trace", help="write every SPI frame (JSON lines, simulated time) here")
    p.add_argument("--stuck-bit", action="append", metavar="ADDR:BIT:VALUE", help="fault: a stuck cell (repeatable)")
    p.add_argument("--erase-fail-after", type=int_in(0, 2**32 - 1),
                   help="fault: erases fail once a sector has this many (0..4294967295)")
    p.add_argument("--wp", default="high", choices=["high", "low"],
                   help="/WP pin level (low + SRP/SRWD = 1 locks the status registers)")
    from .spi_campaign import add_arguments
    add_arguments(p)
    p.set_defaults(func=cmd_spi)
