"""Every dl wrapper reloc puts in the GOT (dlopen, dlclose, dlsym, dlvsym,
dlmopen) leaves dlerror() as the real call left it (DESIGN.md section 3),
on failure and on success, as ctypes sees it.

The same child runs twice: with reloc installed and with no hooks; every
outcome (an error's message, or "ok") must be the same.  Before issue 23 a
dlclose that failed (a handle closed once too often: "shared object not
open") left dlerror() NULL - the wrapper's own dlopen(RTLD_NOLOAD)/dlclose
afterwards cleared it - and CPython's ctypes passed that NULL to
PyErr_SetString: the child died of SIGSEGV.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_CHILD = r"""
import _ctypes, ctypes, json, os, sys
import memhook
mode = sys.argv[1]
if mode != "none":
    memhook.install(mode)
# The simulated driver, loaded RTLD_LOCAL: the dlclose wrapper watches it
# (before and after the real call: mh_reloc_watch_unload), and a hooked
# name is not in the global scope.
cuda = ctypes.CDLL("libcuda.so.1")
libdl = ctypes.CDLL(None)
libdl.dlerror.restype = ctypes.c_char_p
out = {}

def outcome(name, fn):
    libdl.dlerror()  # nothing pending before the call
    try:
        fn()
        got = "ok"
    except (OSError, AttributeError) as exc:
        got = f"{type(exc).__name__}: {exc}"
    after = libdl.dlerror()  # what the call left for a later dlerror()
    out[name] = [got, after.decode() if after is not None else None]

# libm is a dependency of the interpreter: its dlopen takes a reference a
# dlclose gives back, and it stays loaded, so a second dlclose is refused.
handle = _ctypes.dlopen("libm.so.6", os.RTLD_NOW)
outcome("dlclose", lambda: _ctypes.dlclose(handle))
outcome("dlclose again", lambda: _ctypes.dlclose(handle))
outcome("dlopen missing", lambda: _ctypes.dlopen("libmemhook-no-such-library.so.7", os.RTLD_NOW))
outcome("dlopen present", lambda: _ctypes.dlopen("libm.so.6", os.RTLD_NOW | os.RTLD_NOLOAD))
# A name reloc hooks (cuMemAlloc_v2), in a process without a driver: its
# lookup is memhook's (mh_dlsym_hooked); a name it does not hook goes to
# the real dlsym.
outcome("dlsym hooked missing", lambda: ctypes.CDLL(None).cuMemAlloc_v2)
outcome("dlsym hooked missing by handle",
        lambda: ctypes.CDLL("libm.so.6", mode=os.RTLD_NOLOAD).cuMemAlloc_v2)
outcome("dlsym hooked present", lambda: cuda.cuMemFree_v2)
# RTLD_NEXT from _ctypes (memhook answers it with its own walk); no
# runtime is loaded, so no object defines cudaMalloc.
outcome("dlsym hooked RTLD_NEXT missing", lambda: ctypes.CDLL("next", handle=-1).cudaMalloc)
outcome("dlsym plain missing", lambda: ctypes.CDLL(None).memhook_no_such_symbol)
outcome("dlsym plain present", lambda: ctypes.CDLL(None).malloc)
print("DLERR " + json.dumps(out))
"""


def _run(native, mode: str) -> dict[str, list]:
    env = native.env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DLERR ")), None)
    assert proc.returncode == 0 and line is not None, (
        f"mode {mode}: the child exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return json.loads(line[len("DLERR "):])


@pytest.fixture(scope="module")
def without_hooks(native) -> dict[str, list]:
    return _run(native, "none")


@pytest.mark.parametrize("mode", ["reloc", "bistro,reloc"])
def test_dl_wrappers_leave_dlerror_as_the_real_call(native, without_hooks, mode: str) -> None:
    got = _run(native, mode)
    assert got == without_hooks
    again = got["dlclose again"]
    assert again[0].startswith("OSError: ") and "shared object not open" in again[0], again
    assert got["dlclose"] == ["ok", None] and got["dlopen present"] == ["ok", None]
