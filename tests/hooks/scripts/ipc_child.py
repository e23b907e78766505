"""The importing side of the IPC cases (started by driver_api.py, which
exported the allocations):

    python ipc_child.py MODE '[["<handle hex>", size], ...]'

For cuIpcOpenMemHandle and cuIpcOpenMemHandle_v2: open every handle (one
ALLOC each, sized like the exporter's allocation, CUDA, memory_type CUDA),
close them in opening order and in reverse (one FREE each, memory_type HOST
after), close NULL (no event), open a junk handle (one failed ALLOC).
"""

from __future__ import annotations

import json
import sys

from hkchild import (
    Cases,
    CUipcMemHandle,
    Recorder,
    byref,
    c_uint64,
    check_install,
    install,
    load_driver,
    mode_arg,
    primary_context,
    run_api_rounds,
    run_failure,
    run_null_free,
)

from memhook import MemoryType


def main() -> int:
    mode = mode_arg()
    exported = {size: bytes.fromhex(hexed) for hexed, size in json.loads(sys.argv[2])}
    cases = Cases()
    with cases.case("ipc child install"):
        check_install(cases, mode, install(mode))
    rec = Recorder()
    cu = load_driver()
    primary_context(cu)
    for name in ("cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"):
        def open_handle(size, name=name):
            h = CUipcMemHandle.from_buffer_copy(exported[size])
            p = c_uint64()
            assert getattr(cu, name)(byref(p), h, 1) == 0
            return p.value, size

        def close(p):
            assert cu.cuIpcCloseMemHandle(p) == 0

        with cases.case(name):
            run_api_rounds(cases, rec, alloc=open_handle, free=close, alloc_name=name,
                           free_name="cuIpcCloseMemHandle", ev_type=MemoryType.CUDA,
                           query_type=MemoryType.CUDA, device=0, sizes=tuple(exported))
            run_null_free(cases, rec, call=lambda: cu.cuIpcCloseMemHandle(0),
                          what="cuIpcCloseMemHandle(0)")
            junk = CUipcMemHandle.from_buffer_copy(b"\x11" * 64)
            run_failure(cases, rec,
                        call=lambda n=name, h=junk: getattr(cu, n)(byref(c_uint64()), h, 1),
                        name=name, size=None, what=f"{name}(junk handle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
