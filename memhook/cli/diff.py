"""``memhook diff A B [--json] [--top N]``: what changed between two traces.

A and B are jsonl traces (``memhook trace -f jsonl -o FILE``).  For each
calling library and each call site: allocations, bytes allocated, peak live
bytes and bytes never freed in A and in B, and the change (B - A), the
largest change first (:mod:`memhook.tracing.diff`).  Text (changed rows
only, ``--top N`` per table) or ``--json`` (every row).  Both files stream
through: what is kept is the figures and each trace's live allocations.

Exit status: 0; 2 for a usage error; 65 (sysexits' EX_DATAERR) when an
input is not a trace, or the two come from different memhook versions (the
message says which; ``--mixed-versions`` reads them anyway), or one is cut
short - then the report of what was whole is still written, and the
warning says what was left out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

from .._values.printable import printable
from ..tracing.tracefile import TraceError, TraceFile

__all__ = ["DATA_ERROR", "add_parser", "check_versions", "open_traces", "run", "write_stdout"]

DATA_ERROR = 65
"""The status for input that is not (whole, compatible) traces: EX_DATAERR."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "diff", help="compare two jsonl traces per library and call site",
        description="Compare two traces made with `memhook trace -f jsonl`: per calling "
                    "library and per call site, allocations, bytes, peak live bytes and "
                    "bytes never freed in each, with the change, the largest first.")
    p.add_argument("a", metavar="A", help="the first trace (jsonl)")
    p.add_argument("b", metavar="B", help="the second trace (jsonl)")
    p.add_argument("--json", action="store_true", help="print JSON (every row) instead of text")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="text: show the N largest changes per table (0: all; default 20)")
    p.add_argument("--mixed-versions", action="store_true",
                   help="read traces written by different memhook versions")
    p.set_defaults(func=run)
    return p


def check_versions(files: list[TraceFile]) -> str | None:
    """Why these files must not be read together, or None."""
    by_version: dict[str | None, list[str]] = {}
    for f in files:
        by_version.setdefault(f.header.version, []).append(f.path)
    if len(by_version) <= 1:
        return None
    listed = []
    for version, paths in by_version.items():
        names = ", ".join(printable(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
        shown = f"memhook {printable(version)}" if version else "no header (an older memhook)"
        listed.append(f"{shown}: {len(paths)} file{'s' if len(paths) > 1 else ''} ({names})")
    return (f"the traces come from different memhook versions ({'; '.join(listed)}); their "
            f"figures may not compare: retrace with one version, or pass --mixed-versions")


def open_traces(paths: Iterable[str], files: list[TraceFile], mixed_versions: bool) -> str | None:
    """Each of ``paths`` opened, in order, onto ``files`` (the caller closes
    them, after an error too): why they cannot be read together (one is no
    trace, or their versions differ and ``mixed_versions`` is off), or None."""
    try:
        for path in paths:
            files.append(TraceFile(path))
    except TraceError as exc:
        return str(exc)
    problem = check_versions(files)
    return None if mixed_versions else problem


def _fail(message: str, status: int) -> int:
    print(f"memhook diff: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    if args.top < 0:
        return _fail(f"--top {args.top}: give a count, or 0 for every row", 2)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _run(args: argparse.Namespace) -> int:
    from ..tracing.diff import Profile, diff_rows, format_diff
    from ..tracing.progress import Progress

    files: list[TraceFile] = []
    try:
        problem = open_traces((args.a, args.b), files, args.mixed_versions)
        if problem:
            return _fail(problem, DATA_ERROR)
        progress = Progress(sum(f.size for f in files), "memhook diff")
        profiles = (Profile(), Profile())
        try:
            for f, profile in zip(files, profiles):
                f.progress = progress.advance
                add = profile.add
                for event in f.events():
                    add(event)
                profile.finish()
        except TraceError as exc:
            progress.done()
            return _fail(str(exc), DATA_ERROR)
        progress.done()
    finally:
        for f in files:
            f.close()
    notes = [f.cut for f in files if f.cut]
    if args.json:
        text = json.dumps({
            "a": {"path": args.a, "events": profiles[0].events,
                  "memhook": files[0].header.version},
            "b": {"path": args.b, "events": profiles[1].events,
                  "memhook": files[1].header.version},
            "libraries": [r.as_dict() for r in diff_rows(profiles[0].libraries,
                                                         profiles[1].libraries)],
            "sites": [r.as_dict() for r in diff_rows(profiles[0].sites, profiles[1].sites)],
            "warnings": notes}, indent=1) + "\n"
    else:
        text = format_diff((args.a, args.b), profiles, args.top, notes)
    write_stdout(text)
    for note in notes:
        print(f"memhook diff: warning: {note}", file=sys.stderr)
    return DATA_ERROR if notes else 0


def write_stdout(text: str) -> None:
    """``text`` to stdout; a reader that stopped reading (``| head``:
    EPIPE) chose to, and is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
