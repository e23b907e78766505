"""``memhook.Event.caller`` in the process itself: resolved on demand from
this process's mappings and the object's ELF symbols."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import ctypes, json, sys
import memhook, memhook.sim
memhook.sim.activate()
if sys.argv[3] == "before":
    lib = ctypes.CDLL(sys.argv[1])
memhook.install(sys.argv[2])
if sys.argv[3] == "after":
    lib = ctypes.CDLL(sys.argv[1])
lib.a_runtime_alloc.restype = ctypes.c_void_p
lib.a_driver_alloc.restype = ctypes.c_ulonglong
seen = []
memhook.subscribe(seen.append)
p = lib.a_runtime_alloc(ctypes.c_size_t(4096))
d = lib.a_driver_alloc(ctypes.c_size_t(8192))
lib.a_runtime_free(ctypes.c_void_p(p))
memhook.flush()
out = []
for e in seen:
    c = e.caller
    out.append([e.kind.name, e.size, c.object, c.symbol, c.offset, c.address == e.caller_address,
                c.library, c.short])
print(json.dumps(out))
"""


# The library (and the libcudart it needs) loaded before install, or after
# it: then reloc's dlopen interposition tells the hooks where libcudart's
# text is.  (bistro alone has no such interposition and learns of objects
# loaded later only at the next install: README, "Who allocated it".)
@pytest.mark.parametrize(("mode", "load"), [("bistro", "before"), ("reloc", "before"),
                                            ("bistro,reloc", "before"), ("reloc", "after"),
                                            ("bistro,reloc", "after")])
def test_event_caller_names_the_library_and_symbol(attrib_programs, native, mode, load) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(attrib_programs.lib_a), mode, load],
                          capture_output=True, text=True, timeout=120, env=native.env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    lib = str(attrib_programs.lib_a)
    assert [(k, size, os.path.realpath(obj), sym, same) for k, size, obj, sym, _, same, _, _
            in got] == [("ALLOC", 4096, lib, "a_runtime_alloc", True),
                        ("ALLOC", 8192, lib, "a_driver_alloc", True),
                        ("FREE", 4096, lib, "a_runtime_free", True)]
    for _, _, _, sym, offset, _, library, short in got:
        assert library == "libattrib_a.so" and short == f"libattrib_a.so!{sym}+{offset:#x}"
        assert 0 < offset < 256


def test_an_event_without_caller_has_none() -> None:
    from memhook import Event, EventKind, MemoryType

    e = Event(EventKind.ALLOC, "cuMemAlloc_v2", 0x1000, 1, MemoryType.CUDA, 0, 1, 1, 0, 0)
    assert e.caller is None and e.caller_address == 0
