"""Shared helpers of the hook-API tests (tests/hooks/test_api_*.py), imported
as ``from hooks_api_testing import ...``.

In-process tests feed events through ``memhook_events_record`` (the path a
hook takes) at addresses in a window no real allocation uses, and clean that
window out of the process cache afterwards.  Tests that install hooks run a
script in a child process on the simulator (installing hooks in the pytest
process would leak into every later test).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memhook
from memhook._binding.core import ffi, lib
from memhook._queries import query as _query
from memhook.cache import process_cache

__all__ = [
    "CONTEXT_NAMES",
    "DRIVER_API_NAMES",
    "DRIVER_CALLS",
    "DRIVER_NAMES",
    "POINTER_ATTRIBUTE_NAMES",
    "RUNTIME_NAMES",
    "TABLE",
    "WINDOW",
    "WINDOW_SIZE",
    "clean_events",
    "forget_taught_types",
    "normaliser_calls",
    "record",
    "run_sim_script",
]

DRIVER_NAMES = (
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocPitch", "cuMemAllocPitch_v2", "cuMemAllocManaged",
    "cuMemFree", "cuMemFree_v2", "cuMemAllocHost", "cuMemAllocHost_v2", "cuMemHostAlloc",
    "cuMemFreeHost", "cuMemMap", "cuMemUnmap", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
    "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz", "cuModuleGetGlobal", "cuModuleGetGlobal_v2",
    "cuLibraryGetGlobal", "cuLibraryGetManaged", "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle", "cuMemHostRegister", "cuMemHostRegister_v2", "cuMemHostUnregister",
)
RUNTIME_NAMES = (
    "cudaMalloc", "cudaMallocManaged", "cudaMallocPitch", "cudaMallocAsync",
    "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync_ptsz",
    "cudaMallocHost", "cudaHostAlloc", "cudaFree", "cudaFreeAsync", "cudaFreeAsync_ptsz",
    "cudaFreeHost", "cudaGetSymbolAddress", "cudaHostRegister", "cudaHostUnregister",
)
CONTEXT_NAMES = (
    "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2", "cuCtxDestroy", "cuCtxDestroy_v2",
)
"""The context teardowns (driver functions: FREE markers), appended last."""
POINTER_ATTRIBUTE_NAMES = ("cuPointerGetAttribute", "cuPointerGetAttributes",
                           "cudaPointerGetAttributes")
"""The pointer-attribute calls (kind NONE: no event), appended after them."""
TABLE = DRIVER_NAMES + RUNTIME_NAMES + CONTEXT_NAMES + POINTER_ATTRIBUTE_NAMES
"""The hook table of DESIGN.md section 3, in table order."""
DRIVER_NAMES += CONTEXT_NAMES
DRIVER_API_NAMES = DRIVER_NAMES + POINTER_ATTRIBUTE_NAMES[:2]
"""Every driver function of the table (DRIVER_NAMES: those that record events)."""

WINDOW = 0x7E00_0000_0000
"""Start of the address window the in-process tests record events in."""
WINDOW_SIZE = 1 << 40

ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
FREE = int(lib.MEMHOOK_EVENT_FREE)


def record(kind: int, function: str, address: int, size: int,
           mem_type: memhook.MemoryType = memhook.MemoryType.CUDA, device: int = 0,
           result: int = 0) -> int:
    """Record one event as a hook would; returns the seq the drain will give
    it.  (The drain numbers events in the order it hands them out; in these
    single-producer tests that is the order of recording, so the next seq is
    the number of events recorded before - the queue's `produced`.)"""
    index = int(lib.memhook_hook_index(function.encode()))
    assert index >= 0, f"{function} is not in the hook table"
    stats = ffi.new("memhook_queue_stats *")
    lib.memhook_queue_stats_get(stats)
    seq = int(stats.produced)
    assert lib.memhook_events_record(kind, index, address, size, int(mem_type), device,
                                     result) == 0
    return seq


@pytest.fixture
def clean_events() -> Iterator[None]:
    """Drain what is pending before the test, and after it drain again,
    close its subscriptions and forget the test window in the cache."""
    memhook.flush()
    before = set(memhook.events.subscriptions())
    try:
        yield
    finally:
        for sub in memhook.events.subscriptions():
            if sub not in before:
                sub.close()
        memhook.flush()
        process_cache().remove(WINDOW, WINDOW_SIZE)


@pytest.fixture
def normaliser_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The objects Python's normaliser was asked about (C calls it for what
    it does not read itself)."""
    calls: list[Any] = []
    real = _query.byte_range

    def counting(obj: Any, size: Any = 1) -> tuple[int, int]:
        calls.append(obj)
        return real(obj, size)

    monkeypatch.setattr(_query, "byte_range", counting)
    return calls


@pytest.fixture
def forget_taught_types() -> Iterator[None]:
    """C forgets the types a test taught it: each test makes new ones, and
    the table of learned types is bounded for the whole process."""
    kinds, declined, refused = set(_query._kinds), set(_query._declined), set(_query._refused)
    misread = set(_query._misread)
    yield
    for cls in set(_query._kinds) - kinds:
        del _query._kinds[cls]
    for cls in set(_query._declined) - declined:
        del _query._declined[cls]
    _query._refused.intersection_update(refused)
    _query._misread.intersection_update(misread)


DRIVER_CALLS = """\
def ok(rc):
    assert rc == 0, rc
def driver():
    return ctypes.CDLL("libcuda.so.1")
def init():
    d = driver()
    ok(d.cuInit(0))
    dev = ctypes.c_int()
    ok(d.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    ok(d.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ok(d.cuCtxSetCurrent(ctx))
def alloc(size):
    p = ctypes.c_ulonglong()
    ok(driver().cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)))
    return p.value
def free(p):
    ok(driver().cuMemFree_v2(ctypes.c_ulonglong(p)))
"""
"""Child-script code for run_sim_script's setup: ok(rc), init() (device 0's
primary context, current), alloc(size) and free(p) through symbols looked up
afresh each call (ctypes keeps what it looked up once, and reloc answers
lookups made while it is installed)."""


def run_sim_script(native: object, tmp_path: Path, body: str, *, setup: str = "",
                   env: dict[str, str] | None = None, timeout: float = 180) -> str:
    """Run ``setup`` then ``body`` (Python, each dedented) in a child on the
    simulator, with ``import memhook`` done, the simulator active
    (``memhook.sim.activate()``) and ``cu`` its ctypes handle.  The script
    must print "ALL OK" last.  Returns its stdout."""
    prologue = textwrap.dedent("""\
        import ctypes, os, sys
        import memhook
        import memhook.sim
        cu = memhook.sim.activate()
        """)
    script = tmp_path / "script.py"
    script.write_text(prologue + textwrap.dedent(setup) + textwrap.dedent(body))
    child_env = native.env() if env is None else env  # type: ignore[attr-defined]
    proc = subprocess.run([sys.executable, str(script)], env=child_env, capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc.stdout
