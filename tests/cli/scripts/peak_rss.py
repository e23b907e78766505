"""``python peak_rss.py ARGS...``: ``memhook ARGS...`` in this process, then
its true peak RSS on stderr (``real peak RSS: N kB``, the kernel's VmHWM,
read as the interpreter exits), for tests that check the figure the
summary gives of itself."""

from __future__ import annotations

import atexit
import runpy
import sys


def _peak() -> None:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write(f"real peak RSS: {line.split()[1]} kB\n")


atexit.register(_peak)
sys.argv = ["memhook", *sys.argv[1:]]
runpy.run_module("memhook", run_name="__main__", alter_sys=True)
