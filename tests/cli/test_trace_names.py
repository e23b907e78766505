"""A traced program's names reach the terminal escaped: a program whose
file name and arguments hold ESC, BEL and newlines (one argument a whole
forged event line), calling CUDA from a library whose file name holds them
too.  In -f text (events and summary) and on stderr no control byte is
written and no line is forged; in jsonl the names stay exact.

Before: the bytes went out raw - a terminal's title was set and its
screen cleared, and the newline in the argument wrote a line of its own,
one that readers of -f text took for an event."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cli_testing import memhook, read_jsonl, summary_section

PROGRAM = "\x1b]0;owned\x07prog\n"
LIBRARY = "\x1b[2J\x07lib\n.so"
FORGED = "\n  0.000001 [1/1] alloc cuMemAlloc_v2  0xdeadbeef      1 GiB  CUDA  forged"
EVENT = re.compile(r"^\s*\d+\.\d{6} \[\d+/\d+\] (alloc|free )")


def _shown(name: str) -> str:
    """As memhook prints it (memhook._values.printable)."""
    return (name.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\n", "\\n"))


def _evil(programs, tmp_path: Path) -> list[str]:
    """CMD: the program and the library under their evil names, relative to
    tmp_path (short, so the summary's clipped command shows them)."""
    shutil.copy(programs.module_caller, tmp_path / PROGRAM)
    shutil.copy(programs.module_lib, tmp_path / LIBRARY)
    return [f"./{PROGRAM}", "dlopen", f"./{LIBRARY}", "5", FORGED]


def _no_controls(text: str) -> None:
    bad = sorted({hex(ord(c)) for c in text
                  if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F})
    assert not bad, (bad, text)


def test_names_with_control_bytes_in_text_and_summary(programs, tmp_path: Path) -> None:
    proc = memhook("trace", "--", *_evil(programs, tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _no_controls(proc.stdout)
    _no_controls(proc.stderr)
    lines = proc.stdout.splitlines()
    events = [line for line in lines if EVENT.match(line)]
    assert len(events) == 10, proc.stdout  # none forged
    assert all(line.endswith(f"from {_shown(LIBRARY)}") for line in events), events
    started = [line for line in lines if " process started " in line]
    assert len(started) == 1, proc.stdout
    assert started[0].endswith(f"./{_shown(PROGRAM)} dlopen ./{_shown(LIBRARY)} 5 "
                               f"{_shown(FORGED)}"), started
    # The summary (the end of the text stream): the process and the library.
    procs = summary_section(proc.stdout, "processes:")
    assert len(procs) == 1 and f": ./{_shown(PROGRAM)} dlopen ./{_shown(LIBRARY)} 5 " in \
        procs[0], procs
    by_lib = summary_section(proc.stdout, "peak live bytes by calling library (at the peak of "
                                          "all; each one's own):")
    assert len(by_lib) == 1 and by_lib[0].startswith(_shown(LIBRARY) + " "), by_lib


def test_names_stay_exact_in_jsonl(programs, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--", *_evil(programs, tmp_path),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _no_controls(proc.stderr)  # the summary, on the terminal
    events = read_jsonl(out)
    assert len(events) == 10
    assert {e["caller"]["object"] for e in events} == {f"./{LIBRARY}"}, events[0]  # as dlopened
