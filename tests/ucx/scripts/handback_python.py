"""memhook's Python API beside UCX's libucm, as the issue saw it: memhook
installed first, UCX's MEM_TYPE handler registered (ctypes), N pairs,
``memhook.uninstall()``, N more.  Run on the simulator by
test_ucx_python_handback.py:

    python handback_python.py UCXLIB MODE N

Prints one JSON line: what UCX's handler saw in each phase, and the
status() reason of cuMemAlloc_v2 after the uninstall.
"""

from __future__ import annotations

import ctypes
import json
import sys

import memhook

EV_ALLOC, EV_FREE = 1 << 20, 1 << 21
HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def main() -> int:
    lib, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctypes.CDLL(f"{lib}/libucs.so.0", mode=ctypes.RTLD_GLOBAL)
    ucm = ctypes.CDLL(f"{lib}/libucm.so.0", mode=ctypes.RTLD_GLOBAL)
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    seen = {"alloc": 0, "free": 0}

    def on_event(kind: int, _event: int | None, _arg: int | None) -> None:
        seen["alloc"] += bool(kind & EV_ALLOC)
        seen["free"] += bool(kind & EV_FREE)

    handler = HANDLER(on_event)
    ucm.ucm_set_event_handler.restype = ctypes.c_int8  # ucs_status_t: one byte
    ucm.ucm_set_event_handler.argtypes = [ctypes.c_int, ctypes.c_int, HANDLER, ctypes.c_void_p]

    def pairs() -> dict[str, int]:
        seen.update(alloc=0, free=0)
        p = ctypes.c_uint64()
        for i in range(n):
            assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096 * (i + 1))) == 0
            assert cuda.cuMemFree_v2(p) == 0
        return dict(seen)

    memhook.install(mode)
    status = int(ucm.ucm_set_event_handler(EV_ALLOC | EV_FREE, 1000, handler, None))
    out: dict[str, object] = {"status": status, "installed": pairs()}
    memhook.uninstall()
    out["uninstalled"] = pairs()
    out["reason"] = memhook.status().hook("cuMemAlloc_v2").reason
    memhook.uninstall()
    out["again"] = pairs()
    memhook.install(mode)
    out["reinstalled"] = pairs()
    memhook.uninstall()
    out["last"] = pairs()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
