"""The sizes and exec'd sources of pyframes_program.py, importable by the
tests without loading a driver."""

from __future__ import annotations

SIZES = {
    "ctypes": 0x110000,       # alloc_ctypes, GIL released
    "ctypes_gil": 0x120000,   # alloc_ctypes, GIL held (PyDLL)
    "cudapy": 0x130000,       # alloc_cudapy
    "thread": 0x140000,       # alloc_ctypes on a threading thread
    "c_thread": 0x150000,     # a C thread
    "fork": 0x160000,         # alloc_ctypes in an os.fork child
    "pool": 0x170000,         # alloc_ctypes in a Pool(fork) worker
}

# The exec'd functions: the same filename object and first line every time,
# names and bodies that differ (shape -> name, source; each allocates on its
# last line).  The first two differ only in that line: their code objects
# and line tables have the same sizes, so a dead one's addresses are given
# to the next, and only the line tables' bytes tell them apart.
EXEC_FILE = "<pyframes-exec>"
SHAPES = [
    ("gone", "def gone():\n    return alloc_ctypes({size})\n"),
    ("gone", "def gone():\n\n    return alloc_ctypes({size})\n"),
    ("gone_three", "def gone_three():\n    x = 1\n    return alloc_ctypes({size} + x - 1)\n"),
]
