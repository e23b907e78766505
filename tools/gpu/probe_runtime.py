"""Record how a real CUDA runtime (libcudart.so.13) behaves at its edges.

    python3 tools/gpu/probe_runtime.py OUT.json      # MEMHOOK_PROBE_LIBCUDART=path to pick one

Companion of probe_driver.py: ctypes only, a JSON document of facts that
tests/sim/test_sim_fidelity.py replays against the simulated runtime.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

__all__ = ["probe"]

c_int, c_uint, c_size_t, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p
ERROR_CODES = list(range(0, 1000))


class PointerAttributes(ctypes.Structure):
    # CUDA 13 cudaPointerAttributes, plus slack in case the real one is larger
    _fields_ = [
        ("type", c_int),
        ("device", c_int),
        ("devicePointer", c_void_p),
        ("hostPointer", c_void_p),
        ("reserved", ctypes.c_long * 16),
    ]


def _attrs(rt: ctypes.CDLL, ptr: int, base: int | None = None) -> dict[str, Any]:
    a = PointerAttributes()
    a.type, a.device = 0x55, 0x55
    res = rt.cudaPointerGetAttributes(ctypes.byref(a), c_void_p(ptr))

    def rel(p: int | None) -> str | None:
        """How an alias relates to the queried pointer (values differ per run)."""
        if p is None:
            return None
        return "same" if p == ptr else ("zero" if p == 0 else "other")

    return {
        "result": res,
        "type": a.type,
        "device": a.device,
        "devicePointer": rel(a.devicePointer or 0),
        "hostPointer": rel(a.hostPointer or 0),
        "last_error_after": rt.cudaGetLastError(),
    }


def probe(path: str) -> dict[str, Any]:
    rt = ctypes.CDLL(path)
    for name in ("cudaGetErrorString", "cudaGetErrorName"):
        getattr(rt, name).restype = ctypes.c_char_p
    f: dict[str, Any] = {}
    v = c_int()
    rt.cudaRuntimeGetVersion(ctypes.byref(v))
    f["runtime_version"] = v.value
    f["strings"] = {}
    for code in ERROR_CODES:
        name = rt.cudaGetErrorName(c_int(code))
        text = rt.cudaGetErrorString(c_int(code))
        if name and not name.startswith(b"unrecognized"):
            f["strings"][str(code)] = [name.decode(), text.decode() if text else None]
    f["name_unknown"] = (rt.cudaGetErrorName(c_int(12345)) or b"").decode()
    f["string_unknown"] = (rt.cudaGetErrorString(c_int(12345)) or b"").decode()

    p = c_void_p(0x1234)
    f["cudaMalloc_0"] = [rt.cudaMalloc(ctypes.byref(p), c_size_t(0)), p.value]
    f["cudaMalloc_null_out"] = rt.cudaMalloc(None, c_size_t(16))
    f["last_error_sticky"] = [
        rt.cudaPeekAtLastError(),
        rt.cudaGetLastError(),
        rt.cudaGetLastError(),
    ]
    f["cudaMalloc_huge"] = [
        rt.cudaMalloc(ctypes.byref(p), c_size_t(1 << 50)),
        rt.cudaGetLastError(),
    ]
    f["cudaFree_null"] = rt.cudaFree(None)
    host = ctypes.create_string_buffer(1 << 16)
    haddr = ctypes.addressof(host)
    f["cudaFree_host_pointer"] = [rt.cudaFree(c_void_p(haddr)), rt.cudaGetLastError()]
    f["cudaFreeHost_null"] = rt.cudaFreeHost(None)
    f["cudaMallocHost_0"] = rt.cudaMallocHost(ctypes.byref(p), c_size_t(0))
    f["cudaHostAlloc_badflags"] = [
        rt.cudaHostAlloc(ctypes.byref(p), c_size_t(4096), c_uint(0x100)),
        rt.cudaGetLastError(),
    ]
    f["cudaMallocManaged_0"] = [
        rt.cudaMallocManaged(ctypes.byref(p), c_size_t(0), c_uint(1)),
        rt.cudaGetLastError(),
    ]
    f["cudaMallocManaged_badflags"] = [
        rt.cudaMallocManaged(ctypes.byref(p), c_size_t(64), c_uint(0)),
        rt.cudaGetLastError(),
    ]
    pitch = c_size_t()
    f["cudaMallocPitch"] = [
        rt.cudaMallocPitch(ctypes.byref(p), ctypes.byref(pitch), c_size_t(1000), c_size_t(10)),
        pitch.value,
    ]
    rt.cudaFree(p)
    f["cudaHostUnregister_unknown"] = [
        rt.cudaHostUnregister(c_void_p(haddr)),
        rt.cudaGetLastError(),
    ]
    f["cudaSetDevice_99"] = [rt.cudaSetDevice(c_int(99)), rt.cudaGetLastError()]
    f["cudaGetSymbolAddress_unknown"] = [
        rt.cudaGetSymbolAddress(ctypes.byref(p), c_void_p(haddr)),
        rt.cudaGetLastError(),
    ]

    kinds: dict[str, Any] = {}
    kinds["unregistered_host"] = _attrs(rt, haddr)
    kinds["null"] = _attrs(rt, 0)
    rt.cudaMalloc(ctypes.byref(p), c_size_t(1000))
    kinds["device"] = _attrs(rt, p.value)
    rt.cudaFree(p)
    kinds["freed_device"] = _attrs(rt, p.value)
    rt.cudaMallocManaged(ctypes.byref(p), c_size_t(1000), c_uint(1))
    kinds["managed"] = _attrs(rt, p.value)
    rt.cudaFree(p)
    rt.cudaMallocHost(ctypes.byref(p), c_size_t(1000))
    kinds["host"] = _attrs(rt, p.value)
    rt.cudaFreeHost(p)
    f["cudaHostRegister"] = rt.cudaHostRegister(c_void_p(haddr), c_size_t(8192), c_uint(0))
    f["cudaHostRegister_again"] = [
        rt.cudaHostRegister(c_void_p(haddr), c_size_t(8192), c_uint(0)),
        rt.cudaGetLastError(),
    ]
    kinds["registered"] = _attrs(rt, haddr)
    rt.cudaHostUnregister(c_void_p(haddr))
    stream = c_void_p()
    rt.cudaStreamCreate(ctypes.byref(stream))
    f["cudaMallocAsync_0"] = rt.cudaMallocAsync(ctypes.byref(p), c_size_t(0), stream)
    rt.cudaMallocAsync(ctypes.byref(p), c_size_t(1000), stream)
    kinds["async"] = _attrs(rt, p.value)
    rt.cudaFreeAsync(p, stream)
    rt.cudaStreamSynchronize(stream)
    rt.cudaStreamDestroy(stream)
    f["kinds"] = kinds

    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        q = c_void_p()
        os.write(
            wfd,
            json.dumps(
                {
                    "cudaMalloc": rt.cudaMalloc(ctypes.byref(q), c_size_t(64)),
                    "cudaGetLastError": rt.cudaGetLastError(),
                }
            ).encode(),
        )
        os._exit(0)
    os.close(wfd)
    data = b""
    while chunk := os.read(rfd, 4096):
        data += chunk
    os.waitpid(pid, 0)
    f["after_fork"] = json.loads(data or b"{}")
    return f


def _default_path() -> str:
    import glob
    import site

    for base in site.getsitepackages() + ["/usr/local/cuda/lib64"]:
        for hit in sorted(glob.glob(os.path.join(base, "**", "libcudart.so.13*"), recursive=True)):
            return hit
    return "libcudart.so.13"


def main(argv: list[str]) -> int:
    path = os.environ.get("MEMHOOK_PROBE_LIBCUDART") or _default_path()
    facts = probe(path)
    facts["library"] = os.path.basename(path)
    text = json.dumps(facts, indent=1, sort_keys=True)
    if len(argv) > 1 and argv[1] != "-":
        with open(argv[1], "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
