"""memhook_query's contract at its edges (memhook.h): bad arguments get a
negative errno and leave the region alone; the struct's size is the
caller's; a batch strides by it.  With no hooks installed and no driver
loaded nothing vouches: host memory is HOST with origin UNKNOWN - and no
driver gets loaded by asking (in a fresh child, where that premise holds:
an earlier test in the pytest process may have loaded and initialised a
driver, which then answers)."""

from __future__ import annotations

import ctypes
import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from native_cache_testing import _Region, core, query, query_null_out

import memhook

HOST, UNKNOWN = int(memhook.MemoryType.HOST), int(memhook.MemoryType.UNKNOWN)


def test_bad_arguments_get_a_negative_errno() -> None:
    buf = bytearray(64)
    addr = ctypes.addressof((ctypes.c_char * 64).from_buffer(buf))
    assert query_null_out(addr) == -errno.EINVAL
    rc, _ = query(addr, struct_size=ctypes.sizeof(_Region) - 8)
    assert rc == -errno.EINVAL
    rc, _ = query(2**64 - 16, 64)
    assert rc == -errno.EOVERFLOW
    r = _Region(struct_size=0, mem_type=77)
    assert core.memhook_query(addr, 1, ctypes.byref(r)) == -errno.EINVAL
    assert r.mem_type == 77, "a refused call wrote the region"


def test_host_memory_without_hooks_or_driver_is_host_and_unvouched() -> None:
    script = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from native_cache_testing import ORIGIN_UNKNOWN, query
        import memhook

        def drivers():
            with open("/proc/self/maps") as maps:
                return [line for line in maps if "libcuda.so" in line]

        assert not drivers(), "a driver is loaded before the queries"
        assert not memhook.status().mode, "hooks are installed"
        buf = (ctypes.c_char * 4096)()
        addr = ctypes.addressof(buf)
        for cached in (False, True):
            rc, r = query(addr + 100, 0, cached=cached)  # (len 0: the byte at ptr)
            assert rc == 0
            got = (r.mem_type, r.origin, r.alloc_id, r.base, r.size)
            assert got == ({HOST}, ORIGIN_UNKNOWN, 0, addr + 100, 1), (cached, got)
        assert not drivers(), "a query loaded a driver"
        print("ALL OK")
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_larger_struct_is_filled_and_keeps_its_size() -> None:
    class Bigger(ctypes.Structure):
        _fields_ = [("region", _Region), ("future", ctypes.c_uint64 * 4)]

    b = Bigger()
    b.region.struct_size = ctypes.sizeof(Bigger)
    b.future[0] = 0xABCD
    buf = (ctypes.c_char * 64)()
    assert core.memhook_query(ctypes.addressof(buf), 8, ctypes.byref(b.region)) == 0
    assert b.region.struct_size == ctypes.sizeof(Bigger)
    assert b.region.mem_type == HOST
    assert b.future[0] == 0xABCD, "wrote past the fields it knows"


def test_the_batch_strides_by_the_callers_struct_size() -> None:
    class Padded(ctypes.Structure):
        _fields_ = [("region", _Region), ("pad", ctypes.c_uint64 * 2)]

    bufs = [(ctypes.c_char * 32)() for _ in range(5)]
    ptrs = (ctypes.c_void_p * 5)(*[ctypes.addressof(b) for b in bufs])
    out = (Padded * 5)()
    out[0].region.struct_size = ctypes.sizeof(Padded)
    for p in out:
        p.pad[1] = 7
    assert core.memhook_query_batch(ptrs, 5, ctypes.byref(out)) == 0
    for i, p in enumerate(out):
        assert (p.region.struct_size, p.region.mem_type, p.region.base) == \
            (ctypes.sizeof(Padded), HOST, ctypes.addressof(bufs[i]))
        assert p.pad[1] == 7
    arr = np.array([ctypes.addressof(b) for b in bufs], dtype=np.uint64)
    types = np.empty(5, dtype=np.uint8)
    assert core.memhook_query_types(arr.ctypes.data, 5, types.ctypes.data) == 0
    assert types.tolist() == [HOST] * 5
    assert core.memhook_query_types(None, 5, types.ctypes.data) == -errno.EINVAL
