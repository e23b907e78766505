"""At install, the VA ranges CUDA had reserved already are marked UNKNOWN
(memhook._queries.preexisting): which mappings count, that regions the hooks
recorded keep their types, and the real thing on the simulator."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest
from hooks_api_testing import DRIVER_CALLS, run_sim_script

from memhook import MemoryType, MemtypeCache, Region
from memhook._queries.preexisting import (
    SIM_MEMFD_PREFIX,
    cuda_reserved_ranges,
    driver_initialised,
    mark_preexisting,
)
from memhook._objects.procmaps import parse_maps

M = MemoryType

MAPS = """\
55d0c0000000-55d0c0001000 r--p 00000000 fe:00 123   /usr/bin/python3.11
7f0000000000-7f0000100000 ---p 00000000 00:00 0
7f0000100000-7f0000200000 rw-s 00000000 00:01 2091  /memfd:memhook-sim-gpu (deleted)
7f0000200000-7f0000300000 ---p 00000000 00:00 0
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
7f0000500000-7f0000501000 ---p 00000000 00:00 0
7f0000600000-7f0000601000 ---p 0001b000 fe:00 77    /usr/lib/libfoo.so
7f0000700000-7f0000800000 rw-s 00000000 00:05 9     /dev/nvidiactl
7f0000800000-7f0000900000 rw-s 00000000 00:05 10    /dev/nvidia-uvm
7f0000a00000-7f0000b00000 rw-s 00000000 00:05 11    /dev/nvidia0
7f0000c00000-7f0000d00000 r--p 00000000 00:00 0
7f0000d00000-7f0000e00000 ---p 00000000 00:00 0     [anon:guard]
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0     [stack]
7f0000f00000-7f0000f01000 ---s 00000000 00:00 0
garbage line
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
"""


def test_parse_maps() -> None:
    maps = parse_maps(MAPS)
    assert len(maps) == 15  # the garbage line is skipped
    first = maps[0]
    assert (first.start, first.end, first.perms, first.path) == \
        (0x55D0C0000000, 0x55D0C0001000, "r--p", "/usr/bin/python3.11")
    assert maps[2].path == "/memfd:memhook-sim-gpu (deleted)"
    assert maps[2].path.startswith(SIM_MEMFD_PREFIX)


def test_which_mappings_are_cuda_reserved() -> None:
    """Anonymous no-access mappings, /dev/nvidia* and the simulator's memfd;
    touching ones merged.  Not: file mappings (even no-access gaps of
    libraries), named anonymous ones, readable anonymous ones."""
    assert cuda_reserved_ranges(MAPS) == [
        (0x7F0000000000, 0x7F0000300000),   # ---p + sim memfd + ---p, merged
        (0x7F0000500000, 0x7F0000501000),
        (0x7F0000700000, 0x7F0000900000),   # nvidiactl + nvidia-uvm
        (0x7F0000A00000, 0x7F0000B00000),   # nvidia0
        (0x7F0000F00000, 0x7F0000F01000),   # ---s
    ]
    assert cuda_reserved_ranges("") == []


def test_marks_only_what_the_cache_does_not_know() -> None:
    cache = MemtypeCache()
    cache.update(0x7F0000080000, 0x100000, M.CUDA, 0)     # straddles the first range's middle
    cache.update(0x7F0000280000, 0x10000, M.CUDA_HOST, -1)
    cache.update(0x7F0000700000, 0x1000, M.CUDA_MANAGED, 1)
    marked = mark_preexisting(cache, MAPS)
    assert marked == [
        (0x7F0000000000, 0x7F0000080000),
        (0x7F0000180000, 0x7F0000280000),
        (0x7F0000290000, 0x7F0000300000),
        (0x7F0000500000, 0x7F0000501000),
        (0x7F0000701000, 0x7F0000900000),
        (0x7F0000A00000, 0x7F0000B00000),
        (0x7F0000F00000, 0x7F0000F01000),
    ]
    assert cache.lookup(0x7F0000080000) == Region(0x7F0000080000, 0x100000, M.CUDA, 0)
    assert cache.lookup(0x7F0000280000) == Region(0x7F0000280000, 0x10000, M.CUDA_HOST, -1)
    assert cache.lookup(0x7F0000700000) == Region(0x7F0000700000, 0x1000, M.CUDA_MANAGED, 1)
    for start, end in marked:
        assert cache.lookup(start, end - start).mem_type is M.UNKNOWN
    assert cache.lookup(0x7F0000400000) is None      # rw-p anonymous
    assert cache.lookup(0x7F0000600000) is None      # a library's gap
    assert cache.lookup(0x7F0000D00000) is None      # named
    # Again: everything is known now, nothing more is marked.
    assert mark_preexisting(cache, MAPS) == []


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def test_a_real_no_access_mapping_is_marked() -> None:
    libc = _libc()
    size = 64 * mmap.PAGESIZE
    anonymous_private = mmap.MAP_ANONYMOUS | mmap.MAP_PRIVATE
    reserved = libc.mmap(None, size, 0, anonymous_private, -1, 0)  # PROT_NONE
    readable = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, anonymous_private, -1, 0)
    assert reserved not in (None, 2**64 - 1) and readable not in (None, 2**64 - 1)
    try:
        cache = MemtypeCache()
        mark_preexisting(cache)
        r = cache.lookup(reserved, size)
        assert r is not None and r.mem_type is M.UNKNOWN, r
        assert cache.lookup(readable, size) is None
    finally:
        libc.munmap(reserved, size)
        libc.munmap(readable, size)


def test_no_driver_in_this_process_means_not_initialised() -> None:
    with open("/proc/self/maps") as maps:
        if "libcuda.so" in maps.read():
            pytest.skip("some other test loaded a driver into this process")
    assert driver_initialised() is False


SETUP = DRIVER_CALLS + """
from memhook import MemoryType as M
from memhook.cache import process_cache
import mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
def reserve(size):  # an anonymous PROT_NONE mapping, as the driver makes
    p = libc.mmap(None, size, 0, 0x22, -1, 0)
    assert p not in (None, ctypes.c_void_p(-1).value)
    return p
"""


def test_install_marks_allocations_made_before_it(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_sim_script(native, tmp_path, setup=SETUP, body="""
        init()
        before = [alloc(1 << 20), alloc(4096)]   # the simulator's, before the hooks
        hole = reserve(1 << 21)
        memhook.install("reloc")
        cache = process_cache()
        for p in before:
            r = cache.lookup(p)
            assert r is not None and r.mem_type is M.UNKNOWN, (hex(p), r)
        r = cache.lookup(hole, 1 << 21)
        assert r is not None and r.mem_type is M.UNKNOWN, r
        # The driver resolves them.
        assert [memhook.memory_type(p) for p in before] == [M.CUDA, M.CUDA]
        assert before[1] in memhook.lookup(before[1])
        # What the hooks recorded keeps its type when a later install marks again.
        mine = alloc(1 << 16)
        memhook.flush()
        recorded = cache.lookup(mine, 1 << 16)
        assert recorded.mem_type is M.CUDA and recorded.device == 0, recorded
        memhook.install("bistro,reloc")
        assert cache.lookup(mine, 1 << 16) == recorded
        print("ALL OK")
        """)


def test_nothing_is_marked_without_an_initialised_driver(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A driver never initialised handed nothing out: the no-access mappings
    of the process are not CUDA's, and stay unmarked."""
    run_sim_script(native, tmp_path, setup=SETUP, body="""
        hole = reserve(1 << 21)
        from memhook._queries.preexisting import driver_initialised
        assert not driver_initialised()
        memhook.install()
        assert process_cache().lookup(hole, 1 << 21) is None
        assert len(process_cache()) == 0
        init()
        assert driver_initialised()
        print("ALL OK")
        """)
