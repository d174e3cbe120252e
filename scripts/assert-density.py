#!/usr/bin/env python3
"""Assertion density of ssdlab's Rust crates: assertions per non-test function.

Counts, per crate and per file, the non-test functions (functions with a body,
outside `#[cfg(test)]` items, `#[test]` functions and the tests/, benches/ and
examples/ folders), how many of them are non-trivial (more than 5 non-blank
lines of body), and the assertion macros in them: assert!, assert_eq!,
assert_ne!, debug_assert!, debug_assert_eq!, debug_assert_ne! and unreachable!.
Strings and comments are skipped, so a macro named in a doc comment is not
counted.

Run from the repository root (standard library only):

    python3 scripts/assert-density.py                  # crates/core, crates/server
    python3 scripts/assert-density.py crates/ftl-x     # any crate folders
    python3 scripts/assert-density.py --files          # per file as well
    python3 scripts/assert-density.py --base main      # before (at a git
                                                       # revision) and after

Density is assertions per non-trivial function; the issue that asked for
assertions measured assertions per function, printed too.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CRATES = ["crates/core", "crates/server"]
SKIP_DIRS = {"tests", "benches", "examples", "target"}
TRIVIAL_BODY_LINES = 5
ASSERT_RE = re.compile(
    r"\b(?:debug_)?assert(?:_eq|_ne)?!|\bunreachable!",
)
FN_RE = re.compile(r"\bfn\s+[A-Za-z_][A-Za-z0-9_]*")
TEST_ATTR_RE = re.compile(r"#\[\s*(?:cfg\s*\(\s*test\s*\)|test|tokio::test[^\]]*)\s*\]")


@dataclass
class Counts:
    """Functions, non-trivial functions and assertions in one file or crate."""

    functions: int = 0
    nontrivial: int = 0
    asserts: int = 0

    def add(self, other: Counts) -> None:
        self.functions += other.functions
        self.nontrivial += other.nontrivial
        self.asserts += other.asserts

    def row(self, name: str) -> str:
        per_fn = self.asserts / self.functions if self.functions else 0.0
        per_nt = self.asserts / self.nontrivial if self.nontrivial else 0.0
        return f"{name:<48} {self.functions:>5} {self.nontrivial:>5} {self.asserts:>6} {per_fn:>7.2f} {per_nt:>7.2f}"


HEADER = f"{'':<48} {'fns':>5} {'>5ln':>5} {'asserts':>6} {'per fn':>7} {'per nt':>7}"


def blank_literals(src: str) -> str:
    """Replace comments, strings and char literals by spaces (newlines kept)."""
    out = list(src)
    i, n = 0, len(src)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(src, i)) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            m = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'").match(src, i)
            if m:
                blank(i, m.end())
                i = m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def matching_brace(text: str, open_at: int) -> int:
    """Index of the brace closing the one at `open_at` (literals already blanked)."""
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def item_end(text: str, start: int) -> int:
    """End of the item starting at `start`: its braced body, or its `;`."""
    depth = 0
    for j in range(start, len(text)):
        ch = text[j]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return j
        elif depth == 0 and ch == "{":
            return matching_brace(text, j)
    return len(text) - 1


def test_spans(text: str) -> list[tuple[int, int]]:
    """Spans of items marked #[cfg(test)], #[test] or #[tokio::test]."""
    spans = []
    for m in TEST_ATTR_RE.finditer(text):
        if any(a <= m.start() <= b for a, b in spans):
            continue
        j = m.end()
        # Skip further attributes between the test attribute and its item.
        while True:
            k = len(text[j:]) - len(text[j:].lstrip())
            j += k
            if text.startswith("#[", j):
                j = matching_bracket(text, j + 1) + 1
            else:
                break
        spans.append((m.start(), item_end(text, j)))
    return spans


def matching_bracket(text: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "[":
            depth += 1
        elif text[j] == "]":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def count_source(src: str) -> Counts:
    """Counts for one Rust file's text."""
    text = blank_literals(src)
    skip = test_spans(text)

    def in_tests(pos: int) -> bool:
        return any(a <= pos <= b for a, b in skip)

    bodies = []  # (open, close) of each non-test function body
    for m in FN_RE.finditer(text):
        if in_tests(m.start()):
            continue
        end = item_end(text, m.end())
        if text[end] == ";":
            continue  # a declaration without body (trait method, extern fn)
        depth, open_at = 0, m.end()
        # The body opens at the first depth-0 brace after the signature.
        for j in range(m.end(), end + 1):
            if text[j] in "([":
                depth += 1
            elif text[j] in ")]":
                depth -= 1
            elif depth == 0 and text[j] == "{":
                open_at = j
                break
        bodies.append((open_at, end))
    counts = Counts(functions=len(bodies))
    for open_at, close in bodies:
        body = text[open_at + 1 : close]
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if len(lines) > TRIVIAL_BODY_LINES:
            counts.nontrivial += 1
    # Each assertion counts once, for whichever function holds it.
    for m in ASSERT_RE.finditer(text):
        if not in_tests(m.start()) and any(a < m.start() < b for a, b in bodies):
            counts.asserts += 1
    return counts


def rust_files(root: Path, crate: str) -> list[str]:
    base = root / crate
    return sorted(str(p.relative_to(root)) for p in base.rglob("*.rs") if not SKIP_DIRS.intersection(p.relative_to(base).parts[:-1]))


def git_files(root: Path, rev: str, crate: str) -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "--", crate],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    out = {}
    for name in names:
        rel = Path(name).relative_to(crate)
        if not name.endswith(".rs") or SKIP_DIRS.intersection(rel.parts[:-1]):
            continue
        out[name] = subprocess.run(
            ["git", "show", f"{rev}:{name}"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return out


def report(title: str, sources: dict[str, dict[str, str]], per_file: bool) -> None:
    print(f"== {title}")
    print(HEADER)
    total = Counts()
    for crate, files in sources.items():
        crate_counts = Counts()
        for name, src in sorted(files.items()):
            c = count_source(src)
            crate_counts.add(c)
            if per_file:
                print(c.row("  " + name))
        print(crate_counts.row(crate))
        total.add(crate_counts)
    print(total.row("total"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("crates", nargs="*", default=DEFAULT_CRATES)
    ap.add_argument("--files", action="store_true", help="print each file too")
    ap.add_argument("--base", help="git revision to print as 'before'")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    if args.base:
        before = {c: git_files(root, args.base, c) for c in args.crates}
        report(f"before ({args.base})", before, args.files)
    after = {c: {f: (root / f).read_text() for f in rust_files(root, c)} for c in args.crates}
    report("after (working tree)" if args.base else "working tree", after, args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
