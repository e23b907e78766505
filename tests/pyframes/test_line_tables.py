"""The collector computes a frame's line from its code record's line table
(memhook/tracing/pyframes.py: line_for) as the traced interpreter would: for
every code object of a few sources and every instruction offset, each
CPython 3.9-3.13 on this machine says the same line (its own
PyCode_Addr2Line, the function a frame's line comes from).

line_for(minor, table, first, lasti) is LineIndex(minor, table, first).line(lasti),
and a LineIndex is the table decoded once (the collector keeps one per code
record): the offsets of one table are asked of one LineIndex here, and
line_for is checked to agree with it, so the table is not decoded again
for every offset."""

from __future__ import annotations

import json
import subprocess

import pytest
from pyframes_testing import SCRIPTS, interpreters

from memhook.tracing.pyframes import LineIndex, line_for


@pytest.mark.parametrize("python", interpreters())
def test_lines_are_the_interpreters_own(python: str) -> None:
    dump = json.loads(subprocess.run([python, str(SCRIPTS / "dump_lines.py")],
                                     capture_output=True, text=True, timeout=300,
                                     check=True).stdout)
    minor = dump["minor"]
    checked = 0
    for code in dump["codes"]:
        table = bytes.fromhex(code["table"])
        index = LineIndex(minor, table, code["first"])
        lastis = range(-1, len(code["lines"]) - 1)
        ours = [index.line(lasti) for lasti in lastis]
        assert ours == code["lines"], (minor, code["name"], code["first"])
        assert [line_for(minor, table, code["first"], lasti) for lasti in lastis[::17]] == \
            ours[::17], (minor, code["name"], code["first"])
        checked += len(ours)
    assert checked > 5_000, checked
    # A table cut anywhere (a hostile or broken record) still gives a line
    # number or 0, never an exception.
    for c in dump["codes"][:50]:
        table = bytes.fromhex(c["table"])
        for cut in range(len(table)):
            index = LineIndex(minor, table[:cut], c["first"])
            for lasti in (0, 5, 10**6):
                assert index.line(lasti) >= 0
