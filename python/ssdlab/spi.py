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
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

from . import _native

PathLike = Union[str, Path]


def chips() -> List[dict]:
    """The chip presets: name, vendor, size, IDs, typical/max timings and the datasheet used."""
    return _native.spi_chips()


class Flash:
    """An emulated SPI NOR chip.

    ``transfer(bytes)`` is one chip-select frame (full duplex: one byte out per byte in).
    Program, erase and status writes start when the frame ends and keep the chip busy (WIP) for
    the datasheet time of ``timing`` ("typical" or "max") in simulated time, which advances by the
    bytes clocked at ``clock_hz`` and by ``advance(ns)``; nothing sleeps.

    image: a file holding the array (created erased if missing; written through on every program
    and erase); the non-volatile status bits are kept in IMAGE.status. stuck_bits: (address, bit, value) cells that ignore program/erase.
    erase_fail_after: erases of a sector already erased that many times fail silently.
    trace: a JSON-lines file with every frame and its simulated timestamps.
    """

    def __init__(self, chip: str = "W25Q128JV", image: Optional[PathLike] = None, *, timing: str = "typical",
                 clock_hz: int = 8_000_000, stuck_bits: Iterable[Tuple[int, int, int]] = (),
                 erase_fail_after: Optional[int] = None, unique_id: Optional[bytes] = None,
                 trace: Optional[PathLike] = None):
        self.chip = chip
        uid = list(unique_id) if unique_id is not None else None
        self._f = _native.SpiFlash(chip, str(image) if image is not None else None, timing, clock_hz,
                                   [(a, b, bool(v)) for a, b, v in stuck_bits], erase_fail_after, uid,
                                   str(trace) if trace is not None else None)

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

    def serve(self, listen: str = "127.0.0.1:0", on_listening=None) -> dict:
        """Serve flashrom's serprog protocol on ``listen`` until KeyboardInterrupt (or any
        exception a signal handler raises). Returns counts of clients, commands and NAKs."""
        return self._f.serve(listen, on_listening)


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def cmd_spi(args) -> int:
    """`ssdlab spi chips | serve`."""
    if args.spi_action == "chips":
        for c in chips():
            print(f"{c['name']:<12} {c['vendor']:<9} {c['size_bytes'] // 1024:>6} KiB  RDID {c['jedec_id']}  "
                  f"tPP {c['page_program_us'][0]}/{c['page_program_us'][1]} us  tSE {c['sector_erase_ms'][0]}/"
                  f"{c['sector_erase_ms'][1]} ms  ({c['datasheet']})")
        return 0
    if not args.image:
        print("ssdlab spi serve: --image FILE is required", file=sys.stderr)
        return 2
    stuck = []
    for s in args.stuck_bit or []:
        try:
            a, b, v = s.split(":")
            stuck.append((int(a, 0), int(b), int(v)))
        except ValueError:
            raise ValueError(f"--stuck-bit {s!r}: expected ADDR:BIT:VALUE, e.g. 0x1000:3:0") from None
    flash = Flash(args.chip, args.image, timing=args.timing, clock_hz=args.clock_hz, stuck_bits=stuck,
                  erase_fail_after=args.erase_fail_after, trace=args.trace)
    flash.set_wp(args.wp == "high")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)

    def listening(addr):
        print(f"ssdlab spi: {args.chip} on serprog {addr} (image {args.image})", flush=True)

    try:
        summary = flash.serve(args.listen, listening)
    except KeyboardInterrupt:
        summary = None
    finally:
        signal.signal(signal.SIGTERM, previous)
        flash.flush()
    st = flash.stats
    print(f"ssdlab spi: stopped; {st['frames']} frames, {st['programs']} programs, "
          f"{st['sector_erases'] + st['block32_erases'] + st['block64_erases'] + st['chip_erases']} erases, "
          f"{st['ignored_busy']} frames ignored while busy, max sector erase count {max(flash.erase_counts())}"
          + (f"; {summary}" if summary else ""), flush=True)
    return 0


def add_spi_parser(sub) -> None:
    """The `ssdlab spi` subcommand (kept here so cli.py stays small)."""
    p = sub.add_parser("spi", help="SPI NOR flash emulator: serve flashrom's serprog, list chip presets",
                       description="Emulated SPI NOR chips (docs/case-studies/spi-nor.md). Example: ssdlab spi "
                                   "serve --chip W25Q128JV --image flash.bin --listen 127.0.0.1:2222, then "
                                   "flashrom -p serprog:ip=127.0.0.1:2222 -r out.bin")
    p.add_argument("spi_action", choices=["serve", "chips"])
    p.add_argument("--chip", default="W25Q128JV", help="preset (ssdlab spi chips)")
    p.add_argument("--image", help="image file (created erased if missing)")
    p.add_argument("--listen", default="127.0.0.1:2222", help="HOST:PORT (default 127.0.0.1:2222; port 0 = any)")
    p.add_argument("--timing", default="typical", choices=["typical", "max"], help="datasheet column for busy times")
    p.add_argument("--clock-hz", type=int, default=8_000_000, help="SPI clock until the client sets one")
    p.add_argument("--trace", help="write every SPI frame (JSON lines, simulated time) here")
    p.add_argument("--stuck-bit", action="append", metavar="ADDR:BIT:VALUE", help="fault: a stuck cell (repeatable)")
    p.add_argument("--erase-fail-after", type=int, help="fault: erases fail once a sector has this many")
    p.add_argument("--wp", default="high", choices=["high", "low"],
                   help="/WP pin level (low + SRP/SRWD = 1 locks the status registers)")
    p.set_defaults(func=cmd_spi)
