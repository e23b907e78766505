"""memhook/_objects/procmaps.py, the Python side's one reader of /proc/PID/maps
(tests/core/test_procfs.py checks it reads a file as the core's reader
does): the record of a line, lines it skips, where an object's offset 0
maps, the files a process maps, and a process that is gone."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import memhook
from memhook._objects.procmaps import (
    ExecutableMapping,
    Mapping,
    executable_mappings,
    file_paths,
    parse_maps,
    read_maps,
    read_maps_text,
)

TEXT = """\
55d0c0000000-55d0c0001000 r--p 00000000 fe:00 123   /usr/bin/python3.11
55d0c0001000-55d0c0005000 r-xp 00001000 fe:00 123   /usr/bin/python3.11
7f0000000000-7f0000100000 ---p 00000000 00:00 0
7f0000100000-7f0000200000 rw-s 00000000 00:01 2091  /memfd:memhook-sim-gpu (deleted)
7f0000600000-7f0000601000 r-xp 0001b000 fe:00 77    /usr/lib/lib with spaces.so
zzzz-7f0000701000 r-xp 00000000 fe:00 77 /bad/start
7f0000702000-7f0000701000 r-xp 00000000 fe:00 77 /bad/backwards
7f0000703000-7f0000704000 r-xp 0000zz00 fe:00 77 /bad/offset
7f0000800000-7f0000801000 r-xp 00000000 00:00 0     [vdso]
a short line
"""


def test_a_line_reads_into_its_record_and_bad_lines_are_skipped() -> None:
    assert parse_maps(TEXT) == [
        Mapping(0x55D0C0000000, 0x55D0C0001000, "r--p", 0, "/usr/bin/python3.11"),
        Mapping(0x55D0C0001000, 0x55D0C0005000, "r-xp", 0x1000, "/usr/bin/python3.11"),
        Mapping(0x7F0000000000, 0x7F0000100000, "---p", 0, ""),
        Mapping(0x7F0000100000, 0x7F0000200000, "rw-s", 0,
                "/memfd:memhook-sim-gpu (deleted)"),
        Mapping(0x7F0000600000, 0x7F0000601000, "r-xp", 0x1B000, "/usr/lib/lib with spaces.so"),
        Mapping(0x7F0000800000, 0x7F0000801000, "r-xp", 0, "[vdso]"),
    ]
    kinds = [(m.executable, m.is_file) for m in parse_maps(TEXT)]
    assert kinds == [(False, True), (True, True), (False, False), (False, True), (True, True),
                     (True, False)]
    assert parse_maps("") == []


def test_every_executable_objects_base_is_its_elf_header() -> None:
    """The base of an executable file mapping is where the file's offset 0
    maps: for each ELF file this process runs code of (Python, libc, the
    core), the bytes there are the file's own first bytes."""
    found = executable_mappings()
    assert all(isinstance(e, ExecutableMapping) and e.start < e.end for e in found)
    elf = []
    for e in found:
        try:
            with open(e.path, "rb") as f:
                head = f.read(16)
        except OSError:
            continue
        if head[:4] == b"\x7fELF":
            elf.append(e.path)
            assert ctypes.string_at(e.base, 16) == head, e
    assert os.path.realpath(memhook.library_path()) in {os.path.realpath(p) for p in elf}
    assert len(set(elf)) >= 3, found


def test_file_paths_names_each_mapped_file_once_in_order() -> None:
    maps = read_maps()
    paths = file_paths()
    assert paths == list(dict.fromkeys(m.path for m in maps if m.path.startswith("/")))
    assert len(paths) == len(set(paths)) > 3
    assert os.path.realpath(memhook.library_path()) in {os.path.realpath(p) for p in paths}


def test_a_process_that_is_gone_has_no_mappings() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert read_maps(child.pid) == []
    assert executable_mappings(child.pid) == []
    assert file_paths(child.pid) == []
    try:
        read_maps_text(child.pid)
    except OSError:
        pass
    else:  # (the pid reused within the test: vanishingly unlikely)
        raise AssertionError(f"read /proc/{child.pid}/maps of a reaped child")
