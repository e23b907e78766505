"""``memhook report TRACE... [-o report.html]``: traces drawn as one page.

TRACEs are jsonl traces (``memhook trace -f jsonl``): one per rank of a job
(a directory stands for its ``*.jsonl`` files), or the one file of
``memhook merge -f jsonl``.  The page (:mod:`memhook.report`) needs no
network: live device memory over time, stacked by calling library, one
lane per rank and device, with the moment an allocation failed for lack of
memory marked; and the largest call paths (Python, then native frames) as
a flame graph - of the bytes allocated, of what was live at each OOM, and
of what was never freed.  The inputs stream through; each lane's series is
folded to ``--points`` to twice as many intervals, keeping every peak.

The page is written to ``OUT.partial`` and renamed to OUT when whole.

Exit status: 0; 2 for a usage error (no files, an empty directory, an
unwritable OUT); 65 (EX_DATAERR) when an input is not a trace, ranks cannot
be aligned (a file without a clock anchor beside others), the files come
from different memhook versions (``--mixed-versions`` reads them anyway),
or one is cut short - then the page shows what was whole, and says what
was left out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import IO, Any

from .._values.printable import printable
from ..tracing.tracefile import TraceError, TraceFile
from .diff import DATA_ERROR, open_traces, write_stdout
from .merge import UsageError, input_files

__all__ = ["DEFAULT_OUTPUT", "add_parser", "run"]

DEFAULT_OUTPUT = "memhook-report.html"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report", help="draw jsonl traces as one self-contained HTML page",
        description="Draw traces made with `memhook trace -f jsonl` (one per rank, or a "
                    "`memhook merge -f jsonl` file) as one HTML page that needs no network: "
                    "live device memory over time stacked by library, one lane per rank and "
                    "device, OOMs marked, and the largest call paths as a flame graph.")
    p.add_argument("files", nargs="+", metavar="TRACE",
                   help="jsonl traces, or directories of them (their *.jsonl files)")
    p.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="OUT",
                   help=f"the page to write ('-' = stdout; default {DEFAULT_OUTPUT})")
    p.add_argument("--title", default=None, help="the page's title (default: the inputs' names)")
    p.add_argument("--points", type=int, default=None, metavar="N",
                   help="each lane's series is folded to N to 2N intervals, each drawn as "
                        "its highest, lowest and last total, so no peak is lost (default 1000)")
    p.add_argument("--mixed-versions", action="store_true",
                   help="read traces written by different memhook versions")
    p.set_defaults(func=run)
    return p


def _fail(message: str, status: int) -> int:
    print(f"memhook report: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:
        return _fail("interrupted; nothing was written", 130)


def _run(args: argparse.Namespace) -> int:
    from ..report.inputs import plan
    from ..report.model import DEFAULT_POINTS, ReportModel
    from ..tracing.progress import Progress

    points = DEFAULT_POINTS if args.points is None else args.points
    if points < 2:
        return _fail(f"--points {points}: give at least 2", 2)
    try:
        paths = input_files(args.files)
    except UsageError as exc:
        return _fail(str(exc), 2)
    files: list[TraceFile] = []
    try:
        problem = open_traces(paths, files, args.mixed_versions)
        if problem:
            return _fail(problem, DATA_ERROR)
        model = ReportModel(points)
        progress = Progress(sum(f.size for f in files), "memhook report")
        try:
            for f, tracks, to_wall, merged in plan(files):
                f.progress = progress.advance
                model.read(f, tracks, to_wall, merged)
        except TraceError as exc:
            return _fail(f"{exc}; nothing was written", DATA_ERROR)
        finally:
            progress.done()
    finally:
        for f in files:
            f.close()
    title = args.title or "memhook report: " + ", ".join(os.path.basename(p) for p in paths[:4]) \
        + (", ..." if len(paths) > 4 else "")
    try:
        size = _write(args.output, model.page_data(title, paths))
    except OSError as exc:
        return _fail(f"cannot write {printable(args.output)}: {exc.strerror or exc}", 2)
    lanes = len(model.lanes)
    ooms = sum(len(lane.ooms) for lane in model.lanes.values())
    text = "".join(f"memhook report: warning: {n}\n" for n in model.notes)
    where = "the page to stdout" if args.output == "-" else printable(args.output)
    text += (f"memhook report: wrote {where} ({size / (1 << 20):.1f} MiB): "
             f"{model.events:,} events of {len(model.tracks)} "
             f"track{'s' if len(model.tracks) != 1 else ''}, {lanes} "
             f"lane{'s' if lanes != 1 else ''}, {ooms} OOM{'s' if ooms != 1 else ''}\n")
    sys.stderr.write(text)
    return DATA_ERROR if any(f.cut for f in files) else 0


def _write(path: str, data: dict) -> int:
    """The page, to ``path`` through ``path.partial`` (``-``: stdout); its size in bytes."""
    from ..report.page import render_page

    if path == "-":
        counted = _Counting(sys.stdout)
        try:
            render_page(counted, data)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped reading (| head): its choice
            write_stdout("")
        return counted.size
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as out:
            render_page(out, data)
            size = out.tell()
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return size


class _Counting:
    """A text stream's ``write`` that counts the bytes written through it."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.size = out, 0

    def write(self, text: str) -> int:
        self.size += len(text.encode("utf-8"))
        return self.out.write(text)
