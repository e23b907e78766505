"""Child of tests/hooks/test_pointer_attributes.py: install(pointer_attributes=...)
on the simulator, status(), answers and uninstall.  Prints one JSON line."""

from __future__ import annotations

import ctypes
import json
import sys

import memhook
import memhook.sim
from memhook._binding.core import lib

ROWS = ("cuPointerGetAttribute", "cuPointerGetAttributes", "cudaPointerGetAttributes")
mode = sys.argv[1]
cu = memhook.sim.activate()
entry = ctypes.cast(cu.cuPointerGetAttribute, ctypes.c_void_p).value
original = ctypes.string_at(entry, 16)
out: dict = {}


def rows(report: memhook.HookReport) -> dict:
    return {n: [str(report.hook(n).mechanism), report.hook(n).reason] for n in ROWS}


def memory_type(ptr: int) -> tuple[int, int, int]:
    """(rc, value, answered by memhook)"""
    value = ctypes.c_uint(0xAAAAAAAA)
    before = lib.memhook_testing_pointer_attributes_answered()
    # looked up now: reloc does not see a pointer resolved before it
    # (ctypes keeps what its first dlsym found)
    rc = ctypes.CDLL(cu._name).cuPointerGetAttribute(ctypes.byref(value), 2, ctypes.c_uint64(ptr))
    return rc, value.value, lib.memhook_testing_pointer_attributes_answered() - before


ctx, dptr = ctypes.c_void_p(), ctypes.c_uint64()
report = memhook.install(mode)
out["default"] = [report.pointer_attributes, rows(report), [h.name for h in report.uncovered]]
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(5000)) == 0
host = ctypes.create_string_buffer(64)
out["off_answers"] = [memory_type(dptr.value), memory_type(ctypes.addressof(host))]
report = memhook.install(mode, pointer_attributes=True)
out["on"] = [report.pointer_attributes, rows(report), [h.name for h in report.uncovered]]
out["on_answers"] = [memory_type(dptr.value), memory_type(ctypes.addressof(host))]
out["on_str"] = "pointer attributes answered" in str(report)
out["patched_on"] = ctypes.string_at(entry, 16) != original
# Off again with the hooks kept: bistro's patch of the entry comes out; reloc's
# slots stay routed, and the wrapper passes every call to the driver.
report = memhook.install(mode, pointer_attributes=False)
out["off_again"] = [report.pointer_attributes, rows(report), ctypes.string_at(entry, 16) == original,
                    memory_type(dptr.value)]
report = memhook.install(mode, pointer_attributes=True)
for bad in (1, "yes"):
    try:
        memhook.install(mode, pointer_attributes=bad)  # type: ignore[arg-type]
        out[f"bad_{bad}"] = "accepted"
    except TypeError as exc:
        out[f"bad_{bad}"] = str(exc)
out["after_bad"] = memhook.status().pointer_attributes
memhook.uninstall()
report = memhook.status()
out["uninstalled"] = [report.pointer_attributes, rows(report)]
out["restored"] = ctypes.string_at(entry, 16) == original
out["after_uninstall_answers"] = [memory_type(dptr.value), memory_type(ctypes.addressof(host))]
report = memhook.install(mode)  # None: the environment
out["env"] = report.pointer_attributes
memhook.uninstall()
print(json.dumps(out))
