"""The collector reads processes whose descriptors are numbered above 1024.

A collector reading many processes at once holds a memfd and a pidfd for
each, and a connection (and its peer's pidfd) for each fork child not yet
said HELLO: its descriptors pass select()'s FD_SETSIZE (1024).  Before,
looking whether a process had ended used select() and failed there
("filedescriptor out of range in select()"), losing that process's trace
area; a tracer started with 1100 descriptors already open shows it with
one process.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cli_testing import read_jsonl, warnings_of

_OPEN = 1100


def test_a_process_read_through_a_descriptor_above_1024(programs, tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < _OPEN + 256:
        pytest.fail(f"RLIMIT_NOFILE's hard limit {hard} is below {_OPEN + 256}: the test needs it")
    out = tmp_path / "trace.jsonl"
    # The tracer inherits _OPEN descriptors, so the ones it opens are numbered above them.
    script = (f"import os, resource, subprocess, sys\n"
              f"resource.setrlimit(resource.RLIMIT_NOFILE, ({_OPEN + 256}, "
              f"resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
              f"fds = [os.open(os.devnull, os.O_RDONLY) for _ in range({_OPEN})]\n"
              f"sys.exit(subprocess.run([sys.executable, '-m', 'memhook', 'trace', '--sim', "
              f"'-f', 'jsonl', '-o', {str(out)!r}, '--', {str(programs.pairs)!r}, '5'], "
              f"pass_fds=fds).returncode)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert warnings_of(proc.stderr) == [], proc.stderr
    assert len(read_jsonl(out)) == 10, proc.stderr
