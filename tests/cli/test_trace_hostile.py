"""Nothing the collector reads can crash or hang it (issue 24): a HELLO
with a read-only area, an area whose header lies (an offset past its end,
16M segments), an area cut short after the HELLO, a HELLO that claims
another process's pid, two processes that are each pid 1 of their own PID
namespace, an object whose section headers lie, a library rebuilt in place
while the collector knew the old one, a FIFO where a module was, and
--python areas whose code records lie past the end or whose Python and
code records lie (issue 28's records under issue 24's rules).

In each, the traced program finishes with its own exit status, every
event that could be kept is kept, and the summary says what was refused or
lost, and why.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from cli_testing import (DEGRADED, HERE, memhook, parse_collector_line, read_jsonl,
                         warnings_of)

FORGE = HERE / "scripts" / "forge.py"


def _pids(stdout: str) -> dict[str, int]:
    pids: dict[str, int] = {}
    for line in stdout.splitlines():
        if line.startswith("pids: "):
            pids.update((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line))
    return pids


@pytest.mark.parametrize("kind, message", [
    ("readonly", "its trace area's descriptor is not open for reading and writing"),
    ("bad-offset", "trace area's state (32 bytes at offset 139264) is not inside its "
                   "139264 bytes"),
    ("huge", "trace area of 275548999680 bytes is larger than any the traced side makes"),
    ("shrink", "its trace area shrank from 139264 to 4096 bytes (the program cut its memfd); "
               "256 of its events were read, the rest of its trace area is lost"),
    ("forged-pid", "it claims pid {storm}, but its sender is pid {me}"),
    ("file", "its trace area is not a memfd (the collector writes into the memory of a "
             "trace area, never into a file)"),
    ("py-offset", "trace area's code records (8192 bytes at offset 155648) is not inside its "
                  "155648 bytes"),
])
def test_a_hostile_hello_costs_only_itself(programs, tmp_path: Path, kind: str,
                                           message: str) -> None:
    """Before: readonly and bad-offset ended the collector (PermissionError,
    ValueError) and CMD was SIGKILLed with 0 events kept; shrink killed the
    collector with SIGBUS; huge took 1,347 MiB; forged-pid closed the
    sibling's area as exec'd, losing its second half (1,000 events); file
    made the collector write into (and punch holes in) a regular file."""
    out = tmp_path / "trace.jsonl"
    area_file = tmp_path / "area-in-a-file"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, str(FORGE), kind, str(programs.event_storm), "2000",
                   str(area_file))
    pids = _pids(proc.stdout)
    if kind == "file":  # never written into (before: its segment given back, punched out)
        data = area_file.read_bytes()
        assert struct.unpack_from("<Q", data, 192) == (0,)  # done_total
        assert b"\xee" * 64 in data
    assert set(pids) == {"me", "storm"}, (proc.stdout, proc.stderr)
    assert proc.returncode == DEGRADED, proc.stderr
    counts = collections.Counter(e["pid"] for e in read_jsonl(out))
    assert counts[pids["storm"]] == 2000, (counts, proc.stderr)
    if kind == "shrink":  # what the forged area held before it was cut is kept
        assert counts[pids["me"]] == 256, counts
    else:
        assert pids["me"] not in counts, counts
    said = [w for w in warnings_of(proc.stderr) if w.startswith(f"pid {pids['me']} ")]
    assert len(said) == 1, proc.stderr
    assert message.format(**pids) in said[0], said[0]
    if kind == "huge":  # a refusal, not 16M segments' bookkeeping (before: +1,3xx MiB)
        plain = memhook("trace", "-f", "jsonl", "-o", os.devnull, "--",
                        str(programs.event_storm), "2000")
        # (ru_maxrss counts the pages this test process had when it forked
        # the tracer: compare with a plain trace forked from here just now.)
        rss, rss_plain = (parse_collector_line(p.stderr)[2] for p in (proc, plain))
        assert rss - rss_plain < 64, (rss, rss_plain)


def test_python_records_that_lie_cost_only_their_names(programs, tmp_path: Path) -> None:
    """A --python area (its header true) whose Python and code records
    lie: a record of 65535 frames, references past their sections, code
    records claiming a GiB of name or of line table, a length past the
    section, a bad character width, an unfinished record.  Read with
    bounded preads (issue 24's rule, where issue 28 first read a mapping):
    every event is kept, each lie names ``?`` (never another function),
    the true record is named, the area is not refused and nothing is
    said about it (its header is true: only names are lost)."""
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--", sys.executable, str(FORGE),
                   "py-records", str(programs.event_storm), "2000")
    pids = _pids(proc.stdout)
    assert set(pids) == {"me", "storm"}, (proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    events = read_jsonl(out)
    counts = collections.Counter(e["pid"] for e in events)
    assert counts == {pids["storm"]: 2000, pids["me"]: 256}, (counts, proc.stderr)
    forged = [e["python"] for e in events if e["pid"] == pids["me"]]
    unknown = {"file": "?", "line": 0, "function": "?"}
    true = [{"file": "/srv/true.py", "line": 10, "function": "truth"}]
    lies, many, past_end, lost = ([unknown] * 7, [{"file": "?", "line": 0, "function": "?"}] * 32,
                                  [], [])
    for i, python in enumerate(forged):
        assert python == [true, lies, many, past_end, lost, lost][i % 6], (i, python)
    assert not [w for w in warnings_of(proc.stderr) if w.startswith(f"pid {pids['me']} ")], \
        proc.stderr


def _symtab_lies(src: Path, dst: Path) -> None:
    """A copy of ``src`` whose .symtab sh_offset is near 2**64 (the loader
    never reads section headers; the collector does)."""
    data = bytearray(src.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        at = shoff + i * shentsize
        if struct.unpack_from("<I", data, at + 4)[0] == 2:  # SHT_SYMTAB
            struct.pack_into("<Q", data, at + 24, 0xFFFF_FFFF_FFFF_0000)
            break
    else:
        raise AssertionError(f"{src} has no .symtab")
    dst.write_bytes(bytes(data))


def _callers(out: Path) -> collections.Counter:
    return collections.Counter((e["caller"]["object"], e["caller"]["symbol"])
                               for e in read_jsonl(out))


def test_an_object_whose_section_headers_lie(programs, tmp_path: Path) -> None:
    """Before: OverflowError in the symbol reader ended the collector; 0 of
    the events kept.  Now the lying .symtab is passed over for .dynsym."""
    lib = tmp_path / "libcorrupt.so"
    _symtab_lies(programs.module_lib, lib)
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--",
                   str(programs.module_caller), "dlopen", str(lib), "5")
    assert proc.returncode == 0, proc.stderr
    assert "module_caller: done" in proc.stdout
    assert _callers(out) == {(str(lib), "lib_record"): 10}, proc.stderr


def test_a_library_rebuilt_in_place(programs, tmp_path: Path) -> None:
    """The program loads a library, the collector names its callers, then
    the program unloads it, copies a shorter build over it in place and
    loads it again.  Before: the collector's cached mapping of the old file
    was read past the new end - SIGBUS, the trace gone with it."""
    lib = tmp_path / "librebuilt.so"
    shutil.copy(programs.module_lib_big, lib)
    assert programs.module_lib.stat().st_size * 8 < lib.stat().st_size
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--",
                   str(programs.module_caller), "rebuild", str(lib), "10",
                   str(programs.module_lib))
    assert proc.returncode == 0, proc.stderr
    callers = _callers(out)
    assert sum(callers.values()) == 40, (callers, proc.stderr)
    assert {obj for obj, _ in callers} == {str(lib)}
    # The second load is named from the new file (read again, not the old
    # view): lib_record, where the small build has it.
    second = read_jsonl(out)[20:]
    assert {e["caller"]["symbol"] for e in second} == {"lib_record"}, callers


def test_a_fifo_where_a_module_was(programs, tmp_path: Path) -> None:
    """The program renames its own executable and leaves a FIFO at the old
    path, then allocates from main.  Before: the collector opened the FIFO
    to read symbols and blocked for good (this test's timeout)."""
    exe = tmp_path / "caller"
    shutil.copy(programs.module_caller, exe)
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--", str(exe), "fifo", "50",
                   timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert exe.is_fifo() and Path(f"{exe}.moved").exists()
    callers = _callers(out)
    assert callers == {(str(exe), ""): 100}, callers  # named by file, no symbols read


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-fp", "true"], capture_output=True, timeout=60,
                           check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -fp (root or user namespaces)")
def test_two_programs_each_pid_1_of_its_own_namespace(programs, tmp_path: Path) -> None:
    """`unshare -fp` twice at once, as containers run: both processes say
    HELLO as pid 1.  Before: the second HELLO finished the first as exec'd
    and its events were lost, with no warning."""
    out = tmp_path / "trace.jsonl"
    storm = programs.event_storm
    proc = memhook("trace", "-f", "jsonl", "-o", str(out), "--", "sh", "-c",
                   f"unshare -fp {storm} 3000 300 & unshare -fp {storm} 5000 300; wait")
    assert proc.returncode == 0, proc.stderr
    counts = collections.Counter(e["pid"] for e in read_jsonl(out))
    assert sorted(counts.values()) == [3000, 5000], (counts, proc.stderr)
    assert 1 not in counts  # events show the kernel's pid, not the namespace's
    procs = [line for line in proc.stderr.splitlines() if "pid 1 in its PID namespace" in line]
    assert {int(line.split()[1]) for line in procs} == set(counts), proc.stderr
    assert [w for w in warnings_of(proc.stderr) if "no CUDA driver" not in w] == []


# ------------------------------------------- the symbol reader on its own


def _symbols_within(path: Path, seconds: float = 30) -> object:
    """elf_symbols(path) in a thread: it must return, whatever path is."""
    import threading

    from memhook._objects.symbolize import elf_symbols

    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(elf_symbols(str(path))), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"reading {path} blocked"
    return got[0]


@pytest.mark.parametrize("damage", ["truncated", "shoff", "shnum", "strtab"])
def test_the_symbol_reader_takes_a_damaged_file(programs, tmp_path: Path, damage: str) -> None:
    data = bytearray(programs.module_lib.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    if damage == "truncated":
        data = data[:len(data) // 3]
    elif damage == "shoff":
        struct.pack_into("<Q", data, 0x28, 0x7FFF_FFFF_FFFF_FFF0)
    elif damage == "shnum":
        struct.pack_into("<H", data, 0x3C, 0xFFFF)
    else:  # every section's offset far out: the string tables too
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        for i in range(shnum):
            struct.pack_into("<Q", data, shoff + i * shentsize + 24, 1 << 62)
    path = tmp_path / "damaged.so"
    path.write_bytes(bytes(data))
    syms = _symbols_within(path)
    assert len(syms) == 0  # type: ignore[arg-type]


def test_the_symbol_reader_never_opens_what_is_not_a_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        assert len(_symbols_within(path)) == 0  # type: ignore[arg-type]


def test_the_symbol_reader_reads_a_file_changed_in_place_again(programs,
                                                              tmp_path: Path) -> None:
    """A view of the old file is not used to name the new one: its names
    read as unknown, and the new file is read afresh."""
    from memhook._objects.symbolize import elf_symbols

    lib = tmp_path / "lib.so"
    shutil.copy(programs.module_lib_big, lib)
    old = elf_symbols(str(lib))
    hit = old.lookup(0x1110)
    assert hit is not None and hit[0] == "lib_record"
    lib.write_bytes(programs.module_lib.read_bytes())  # in place: truncate, write
    stale = old.lookup(0x1110)  # before: a read of the old view past the new end, SIGBUS
    assert stale is not None and stale[0] == ""
    new = elf_symbols(str(lib))
    assert new is not old and new.lookup(0x1110) == hit
