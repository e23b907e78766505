"""Record how a real CUDA driver behaves, so the simulator can be held to it.

Run on a machine with an NVIDIA GPU (the team's H200 through the device tool):

    python3 tools/gpu/probe_driver.py OUT.json

It talks to libcuda.so.1 through ctypes only (no toolkit, no cuda-python) and
writes a JSON document of facts: error codes for edge cases, the width in
bytes of every pointer attribute, pointer attributes and address ranges for
each kind of allocation, cuGetProcAddress choices, behaviour after fork, the
error strings, and every device attribute.  tests/data/ keeps the recorded
copy; tests/sim/test_sim_fidelity.py replays the same probe on the simulator
and compares.  The probe is also importable: ``probe(libcuda_path)`` returns
the dict.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
from typing import Any

__all__ = ["probe"]

c_int, c_uint, c_size_t, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p
c_ull = ctypes.c_ulonglong
CUdeviceptr = c_ull

# Values from cuda.h (CUDA 13).
ATTR = {
    "CONTEXT": 1,
    "MEMORY_TYPE": 2,
    "DEVICE_POINTER": 3,
    "HOST_POINTER": 4,
    "SYNC_MEMOPS": 6,
    "BUFFER_ID": 7,
    "IS_MANAGED": 8,
    "DEVICE_ORDINAL": 9,
    "IS_LEGACY_CUDA_IPC_CAPABLE": 10,
    "RANGE_START_ADDR": 11,
    "RANGE_SIZE": 12,
    "MAPPED": 13,
    "ALLOWED_HANDLE_TYPES": 14,
    "IS_GPU_DIRECT_RDMA_CAPABLE": 15,
    "ACCESS_FLAGS": 16,
    "MEMPOOL_HANDLE": 17,
    "MAPPING_SIZE": 18,
    "MAPPING_BASE_ADDR": 19,
    "MEMORY_BLOCK_ID": 20,
    "IS_HW_DECOMPRESS_CAPABLE": 21,
}
ERROR_CODES = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    34,
    36,
    46,
    100,
    101,
    102,
    200,
    201,
    202,
    205,
    206,
    207,
    208,
    209,
    210,
    211,
    212,
    213,
    214,
    215,
    216,
    217,
    218,
    219,
    220,
    221,
    222,
    223,
    224,
    225,
    226,
    300,
    301,
    302,
    303,
    304,
    400,
    401,
    402,
    500,
    600,
    700,
    701,
    702,
    703,
    704,
    705,
    708,
    709,
    710,
    711,
    712,
    713,
    714,
    715,
    716,
    717,
    718,
    719,
    720,
    721,
    800,
    801,
    802,
    803,
    804,
    805,
    806,
    807,
    808,
    809,
    810,
    811,
    812,
    900,
    901,
    902,
    903,
    904,
    905,
    906,
    907,
    908,
    909,
    910,
    911,
    912,
    913,
    914,
    915,
    916,
    999,
]


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", c_int),
        ("requestedHandleTypes", c_int),
        ("location", CUmemLocation),
        ("win32HandleMetaData", c_void_p),
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", c_int)]


class CUmemPoolProps(ctypes.Structure):
    _fields_ = [
        ("allocType", c_int),
        ("handleTypes", c_int),
        ("location", CUmemLocation),
        ("win32SecurityAttributes", c_void_p),
        ("maxSize", c_size_t),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 54),
    ]


class Driver:
    """Thin ctypes access: every call returns the raw CUresult as an int."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        self.libdl = ctypes.CDLL(None)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.lib, name)
        fn.restype = c_int
        return fn

    def symbol_name(self, address: int) -> str | None:
        class DlInfo(ctypes.Structure):
            _fields_ = [
                ("dli_fname", ctypes.c_char_p),
                ("dli_fbase", c_void_p),
                ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", c_void_p),
            ]

        info = DlInfo()
        dladdr = self.libdl.dladdr
        dladdr.argtypes = [c_void_p, ctypes.POINTER(DlInfo)]
        if not address or not dladdr(c_void_p(address), ctypes.byref(info)) or not info.dli_sname:
            return None
        return info.dli_sname.decode()


def _attr_width(drv: Driver, attr: int, ptr: int) -> dict[str, Any]:
    """Call cuPointerGetAttribute into a 0xAA-filled buffer; report the result,
    how many leading bytes changed, and the value read at that width."""
    buf = (ctypes.c_ubyte * 16)(*([0xAA] * 16))
    res = drv.cuPointerGetAttribute(buf, c_int(attr), CUdeviceptr(ptr))
    raw = bytes(buf)
    changed = max((i + 1 for i in range(16) if raw[i] != 0xAA), default=0)
    return {"result": res, "bytes_changed": changed, "raw": raw[:8].hex()}


def _attrs(drv: Driver, ptr: int) -> dict[str, Any]:
    out = {}
    for name, code in ATTR.items():
        r = _attr_width(drv, code, ptr)
        value: Any = None
        if r["result"] == 0:
            raw = bytes.fromhex(r["raw"])
            width = (
                8
                if name
                in (
                    "CONTEXT",
                    "DEVICE_POINTER",
                    "HOST_POINTER",
                    "BUFFER_ID",
                    "RANGE_START_ADDR",
                    "RANGE_SIZE",
                    "MEMPOOL_HANDLE",
                    "MAPPING_SIZE",
                    "MAPPING_BASE_ADDR",
                    "MEMORY_BLOCK_ID",
                )
                else 4
            )
            value = int.from_bytes(raw[:width], "little")
        out[name] = {"result": r["result"], "value": value, "bytes_changed": r["bytes_changed"]}
    return out


def _range(drv: Driver, ptr: int) -> dict[str, Any]:
    base, size = CUdeviceptr(), c_size_t()
    res = drv.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), CUdeviceptr(ptr))
    return {
        "result": res,
        "base_offset": (ptr - base.value) if res == 0 else None,
        "size": size.value if res == 0 else None,
    }


def _describe(drv: Driver, ptr: int, requested: int) -> dict[str, Any]:
    attrs = _attrs(drv, ptr)
    rng = _range(drv, ptr)
    start = attrs["RANGE_START_ADDR"]["value"]
    return {
        "requested": requested,
        "range": rng,
        "interior_range": _range(drv, ptr + 8),
        "attributes": {
            k: v
            for k, v in attrs.items()
            if k
            not in (
                "CONTEXT",
                "DEVICE_POINTER",
                "HOST_POINTER",
                "BUFFER_ID",
                "MEMPOOL_HANDLE",
                "MEMORY_BLOCK_ID",
                "RANGE_START_ADDR",
                "MAPPING_BASE_ADDR",
            )
        },
        "range_start_offset": (ptr - start) if start is not None else None,
        "mapping_base_offset": (ptr - attrs["MAPPING_BASE_ADDR"]["value"])
        if attrs["MAPPING_BASE_ADDR"]["value"] is not None
        else None,
        "has_context": bool(attrs["CONTEXT"]["value"]),
        "device_pointer_equal": attrs["DEVICE_POINTER"]["value"] == ptr,
        "host_pointer_equal": attrs["HOST_POINTER"]["value"] == ptr,
        "has_mempool": bool(attrs["MEMPOOL_HANDLE"]["value"]),
    }


def _proc(drv: Driver, name: str, version: int, flags: int) -> dict[str, Any]:
    pfn, status = c_void_p(), c_int(-1)
    res = drv.cuGetProcAddress_v2(
        name.encode(), ctypes.byref(pfn), c_int(version), c_ull(flags), ctypes.byref(status)
    )
    return {"result": res, "status": status.value, "symbol": drv.symbol_name(pfn.value or 0)}


def _after_fork(drv: Driver) -> dict[str, Any]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report cuInit and cuMemAlloc results, then leave
        os.close(rfd)
        init = drv.cuInit(c_uint(0))
        ptr = CUdeviceptr()
        alloc = drv.cuMemAlloc_v2(ctypes.byref(ptr), c_size_t(4096))
        count = c_int(-1)
        dcount = drv.cuDeviceGetCount(ctypes.byref(count))
        os.write(
            wfd,
            json.dumps(
                {"cuInit": init, "cuMemAlloc_v2": alloc, "cuDeviceGetCount": dcount}
            ).encode(),
        )
        os._exit(0)
    os.close(wfd)
    data = b""
    while chunk := os.read(rfd, 4096):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def _legacy_v1(drv: Driver) -> dict[str, Any]:
    """The 32-bit (pre-3.2) entry points, with a current context."""
    out: dict[str, Any] = {}
    u = c_uint()
    d = CUdeviceptr()
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(4096))
    out["cuMemAllocPitch"] = drv.cuMemAllocPitch(
        ctypes.byref(u), ctypes.byref(c_uint()), c_uint(1000), c_uint(10), c_uint(4)
    )
    out["cuMemGetAddressRange"] = drv.cuMemGetAddressRange(
        ctypes.byref(c_uint()), ctypes.byref(c_uint()), c_uint(d.value & 0xFFFFFFFF)
    )
    out["cuMemGetInfo"] = drv.cuMemGetInfo(ctypes.byref(c_uint()), ctypes.byref(c_uint()))
    out["cuDeviceTotalMem"] = drv.cuDeviceTotalMem(ctypes.byref(c_uint()), c_int(0))
    h = c_void_p()
    out["cuMemAllocHost"] = drv.cuMemAllocHost(ctypes.byref(h), c_uint(4096))
    if out["cuMemAllocHost"] == 0:
        out["cuMemHostGetDevicePointer"] = drv.cuMemHostGetDevicePointer(
            ctypes.byref(c_uint()), h, c_uint(0)
        )
        drv.cuMemFreeHost(h)
    buf = ctypes.create_string_buffer(64)
    out["cuMemcpyHtoD"] = drv.cuMemcpyHtoD(c_uint(d.value & 0xFFFFFFFF), buf, c_uint(64))
    out["cuMemsetD8"] = drv.cuMemsetD8(c_uint(d.value & 0xFFFFFFFF), ctypes.c_ubyte(1), c_uint(64))
    out["cuMemFree"] = drv.cuMemFree(c_uint(d.value & 0xFFFFFFFF))
    drv.cuMemFree_v2(d)
    # other v2-era edge cases
    stream = c_void_p()
    drv.cuStreamCreate(ctypes.byref(stream), c_uint(0))
    out["cuMemAllocAsync_size0"] = drv.cuMemAllocAsync(ctypes.byref(d), c_size_t(0), stream)
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(4096))
    out["cuMemFreeAsync_of_cuMemAlloc"] = drv.cuMemFreeAsync(d, stream)
    drv.cuStreamSynchronize(stream)
    out["range_after_freeasync_of_cuMemAlloc"] = _range(drv, d.value)["result"]
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(4096))
    out["range_null_outs"] = drv.cuMemGetAddressRange_v2(None, None, d)
    out["cuMemFreeHost_null"] = drv.cuMemFreeHost(None)
    out["cuMemFree_v2_of_freed_async"] = drv.cuMemFree_v2(d)
    out["cuStreamDestroy"] = drv.cuStreamDestroy_v2(stream)
    return out


# The same three globals, as the real driver takes them (PTX, JIT-compiled)
# and as memhook's simulator takes them (its text image, csrc/sim/driver/module.c).
PTX_IMAGE = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .global .align 8 .b8 gbuf[1000];
.visible .global .align 4 .u32 gval;
.visible .global .attribute(.managed) .align 8 .b8 gmanaged[64];
\0"""
SIM_IMAGE = b"MEMHOOK-SIM-MODULE 1\nglobal gbuf 1000\nglobal gval 4\nmanaged gmanaged 64\n\0"


def _globals(drv: Driver, device_name: str) -> dict[str, Any]:
    """Module and library globals: what the driver says of them."""
    image = SIM_IMAGE if "memhook simulator" in device_name else PTX_IMAGE
    out: dict[str, Any] = {}
    mod = c_void_p()
    out["cuModuleLoadData"] = drv.cuModuleLoadData(ctypes.byref(mod), image)
    if out["cuModuleLoadData"] != 0:
        return out
    d, size = CUdeviceptr(), c_size_t()
    for name in ("gbuf", "gval", "gmanaged"):
        r = drv.cuModuleGetGlobal_v2(ctypes.byref(d), ctypes.byref(size), mod, name.encode())
        out[f"module_{name}"] = {"result": r, "bytes": size.value}
        if r == 0:
            out[f"module_{name}"]["describe"] = _describe(drv, d.value, size.value)
            if name == "gbuf":
                gbuf = d.value
    out["module_missing"] = drv.cuModuleGetGlobal_v2(
        ctypes.byref(d), ctypes.byref(size), mod, b"nope"
    )
    out["cuMemFree_of_global"] = drv.cuMemFree_v2(CUdeviceptr(gbuf))
    out["cuModuleUnload"] = drv.cuModuleUnload(mod)
    out["range_after_unload"] = _range(drv, gbuf)["result"]
    out["attr_after_unload"] = _attr_width(drv, ATTR["MEMORY_TYPE"], gbuf)["result"]
    lib = c_void_p()
    out["cuLibraryLoadData"] = drv.cuLibraryLoadData(
        ctypes.byref(lib), image, None, None, c_uint(0), None, None, c_uint(0)
    )
    if out["cuLibraryLoadData"] == 0:
        r = drv.cuLibraryGetGlobal(ctypes.byref(d), ctypes.byref(size), lib, b"gbuf")
        out["library_gbuf"] = {"result": r, "bytes": size.value}
        if r == 0:
            out["library_gbuf"]["describe"] = _describe(drv, d.value, size.value)
        r = drv.cuLibraryGetManaged(ctypes.byref(d), ctypes.byref(size), lib, b"gmanaged")
        out["library_gmanaged"] = {"result": r, "bytes": size.value}
        if r == 0:
            out["library_gmanaged"]["describe"] = _describe(drv, d.value, size.value)
        out["cuLibraryUnload"] = drv.cuLibraryUnload(lib)
    return out


def probe(path: str = "libcuda.so.1") -> dict[str, Any]:
    drv = Driver(path)
    facts: dict[str, Any] = {}
    ver = c_int()
    facts["cuDriverGetVersion_before_init"] = drv.cuDriverGetVersion(ctypes.byref(ver))
    facts["driver_version"] = ver.value
    p = CUdeviceptr()
    facts["cuMemAlloc_before_init"] = drv.cuMemAlloc_v2(ctypes.byref(p), c_size_t(16))
    count = c_int()
    facts["cuDeviceGetCount_before_init"] = drv.cuDeviceGetCount(ctypes.byref(count))
    facts["cuInit_flags_1"] = drv.cuInit(c_uint(1))
    facts["cuInit"] = drv.cuInit(c_uint(0))
    drv.cuDeviceGetCount(ctypes.byref(count))
    facts["device_count_positive"] = count.value > 0
    dev = c_int()
    facts["cuDeviceGet_out_of_range"] = drv.cuDeviceGet(ctypes.byref(dev), c_int(count.value + 5))
    drv.cuDeviceGet(ctypes.byref(dev), c_int(0))
    name = ctypes.create_string_buffer(128)
    drv.cuDeviceGetName(name, c_int(128), dev)
    facts["device_name"] = name.value.decode()
    cur = c_void_p()
    facts["cuCtxGetCurrent_none"] = [drv.cuCtxGetCurrent(ctypes.byref(cur)), cur.value]
    facts["cuMemAlloc_no_context"] = drv.cuMemAlloc_v2(ctypes.byref(p), c_size_t(16))
    facts["cuMemAllocHost_no_context"] = drv.cuMemAllocHost_v2(
        ctypes.byref(c_void_p()), c_size_t(16)
    )
    ctx = c_void_p()
    drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    drv.cuCtxSetCurrent(ctx)

    facts["errors"] = {}
    for code in ERROR_CODES:
        s_name, s_text = ctypes.c_char_p(), ctypes.c_char_p()
        r1 = drv.cuGetErrorName(c_int(code), ctypes.byref(s_name))
        r2 = drv.cuGetErrorString(c_int(code), ctypes.byref(s_text))
        facts["errors"][str(code)] = [
            r1,
            s_name.value.decode() if s_name.value else None,
            r2,
            s_text.value.decode() if s_text.value else None,
        ]
    facts["cuGetErrorName_unknown"] = drv.cuGetErrorName(
        c_int(12345), ctypes.byref(ctypes.c_char_p())
    )

    attrs = {}
    for attr in range(1, 160):
        v = c_int()
        r = drv.cuDeviceGetAttribute(ctypes.byref(v), c_int(attr), dev)
        attrs[str(attr)] = [r, v.value]
    facts["device_attributes"] = attrs
    total = c_size_t()
    drv.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
    facts["device_total_mem"] = total.value

    # --- edge cases of allocation entry points ---
    e: dict[str, Any] = {}
    e["cuMemAlloc_size0"] = drv.cuMemAlloc_v2(ctypes.byref(p), c_size_t(0))
    e["cuMemAlloc_null_out"] = drv.cuMemAlloc_v2(None, c_size_t(16))
    e["cuMemAlloc_huge"] = drv.cuMemAlloc_v2(ctypes.byref(p), c_size_t(1 << 50))
    e["cuMemFree_0"] = drv.cuMemFree_v2(CUdeviceptr(0))
    host_buf = ctypes.create_string_buffer(1 << 16)
    host_addr = ctypes.addressof(host_buf)
    e["cuMemFree_host_pointer"] = drv.cuMemFree_v2(CUdeviceptr(host_addr))
    d = CUdeviceptr()
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(1000))
    e["cuMemFree_interior"] = drv.cuMemFree_v2(CUdeviceptr(d.value + 16))
    e["cuMemFreeHost_device_pointer"] = drv.cuMemFreeHost(c_void_p(d.value))
    e["device_alignment_256"] = d.value % 256 == 0
    e["device_alignment_4096"] = d.value % 4096 == 0
    e["device_alignment_2M"] = d.value % (2 << 20) == 0
    e["cuMemFree"] = drv.cuMemFree_v2(d)
    e["cuMemFree_twice"] = drv.cuMemFree_v2(d)
    e["attr_after_free"] = _attr_width(drv, ATTR["MEMORY_TYPE"], d.value)["result"]
    e["range_after_free"] = _range(drv, d.value)["result"]
    e["attr_on_malloc_host"] = _attr_width(drv, ATTR["MEMORY_TYPE"], host_addr)["result"]
    e["range_on_malloc_host"] = _range(drv, host_addr)["result"]
    e["attr_on_zero"] = _attr_width(drv, ATTR["MEMORY_TYPE"], 0)["result"]
    # cuPointerGetAttributes on an unknown pointer
    n = 3
    kinds = (c_int * n)(ATTR["MEMORY_TYPE"], ATTR["DEVICE_ORDINAL"], ATTR["IS_MANAGED"])
    vals = [(ctypes.c_ubyte * 8)(*([0xAA] * 8)) for _ in range(n)]
    ptrs = (c_void_p * n)(*[ctypes.addressof(v) for v in vals])
    r = drv.cuPointerGetAttributes(c_uint(n), kinds, ptrs, CUdeviceptr(host_addr))
    e["getattributes_unknown"] = {"result": r, "raw": [bytes(v).hex() for v in vals]}
    pitch = c_size_t()
    e["pitch_elem3"] = drv.cuMemAllocPitch_v2(
        ctypes.byref(p), ctypes.byref(pitch), c_size_t(1000), c_size_t(10), c_uint(3)
    )
    e["managed_flags0"] = drv.cuMemAllocManaged(ctypes.byref(p), c_size_t(4096), c_uint(0))
    e["managed_size0"] = drv.cuMemAllocManaged(ctypes.byref(p), c_size_t(0), c_uint(1))
    e["hostalloc_badflags"] = drv.cuMemHostAlloc(
        ctypes.byref(c_void_p()), c_size_t(4096), c_uint(0x100)
    )
    e["hostunregister_unknown"] = drv.cuMemHostUnregister(c_void_p(host_addr))
    e["hostregister"] = drv.cuMemHostRegister_v2(c_void_p(host_addr), c_size_t(8192), c_uint(0))
    e["hostregister_again"] = drv.cuMemHostRegister_v2(
        c_void_p(host_addr), c_size_t(8192), c_uint(0)
    )
    e["hostregister_overlap"] = drv.cuMemHostRegister_v2(
        c_void_p(host_addr + 4096), c_size_t(8192), c_uint(0)
    )
    facts["edge"] = e

    # --- every kind of allocation: attributes and ranges ---
    kinds_out: dict[str, Any] = {}
    d = CUdeviceptr()
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(1000))
    kinds_out["device_1000"] = _describe(drv, d.value, 1000)
    drv.cuMemFree_v2(d)
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(3 << 20))
    kinds_out["device_3MiB"] = _describe(drv, d.value, 3 << 20)
    drv.cuMemFree_v2(d)
    drv.cuMemAllocPitch_v2(
        ctypes.byref(d), ctypes.byref(pitch), c_size_t(1000), c_size_t(10), c_uint(4)
    )
    kinds_out["pitch_1000x10"] = _describe(drv, d.value, 10000)
    kinds_out["pitch_1000x10"]["pitch"] = pitch.value
    for elem in (8, 16):
        pp = CUdeviceptr()
        drv.cuMemAllocPitch_v2(
            ctypes.byref(pp), ctypes.byref(pitch), c_size_t(1000), c_size_t(10), c_uint(elem)
        )
        kinds_out["pitch_1000x10"][f"pitch_elem{elem}"] = pitch.value
        drv.cuMemFree_v2(pp)
    drv.cuMemFree_v2(d)
    drv.cuMemAllocManaged(ctypes.byref(d), c_size_t(5000), c_uint(1))
    kinds_out["managed_5000"] = _describe(drv, d.value, 5000)
    drv.cuMemFree_v2(d)
    h = c_void_p()
    drv.cuMemAllocHost_v2(ctypes.byref(h), c_size_t(5000))
    kinds_out["host_5000"] = _describe(drv, h.value, 5000)
    e2 = {"cuMemFree_on_host": drv.cuMemFree_v2(CUdeviceptr(h.value))}
    drv.cuMemFreeHost(h)
    drv.cuMemHostAlloc(ctypes.byref(h), c_size_t(5000), c_uint(2))
    kinds_out["hostalloc_devicemap_5000"] = _describe(drv, h.value, 5000)
    drv.cuMemFreeHost(h)
    kinds_out["registered_8192"] = _describe(drv, host_addr, 8192)
    e2["hostunregister"] = drv.cuMemHostUnregister(c_void_p(host_addr))
    stream = c_void_p()
    drv.cuStreamCreate(ctypes.byref(stream), c_uint(0))
    drv.cuMemAllocAsync(ctypes.byref(d), c_size_t(5000), stream)
    kinds_out["async_5000"] = _describe(drv, d.value, 5000)
    drv.cuMemFreeAsync(d, stream)
    drv.cuStreamSynchronize(stream)
    e2["async_range_after_free"] = _range(drv, d.value)["result"]
    props = CUmemPoolProps()
    props.allocType, props.location.type, props.location.id = 1, 2, 0  # PINNED, HOST
    pool = c_void_p()
    e2["pool_create_host"] = drv.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(props))
    if e2["pool_create_host"] == 0:
        r = drv.cuMemAllocFromPoolAsync(ctypes.byref(d), c_size_t(5000), pool, stream)
        e2["host_pool_alloc"] = r
        if r == 0:
            kinds_out["host_pool_5000"] = _describe(drv, d.value, 5000)
            drv.cuMemFreeAsync(d, stream)
            drv.cuStreamSynchronize(stream)
        drv.cuMemPoolDestroy(pool)
    # VMM
    prop = CUmemAllocationProp()
    prop.type, prop.location.type, prop.location.id = 1, 1, 0
    gran_min, gran_rec = c_size_t(), c_size_t()
    drv.cuMemGetAllocationGranularity(ctypes.byref(gran_min), ctypes.byref(prop), c_int(0))
    drv.cuMemGetAllocationGranularity(ctypes.byref(gran_rec), ctypes.byref(prop), c_int(1))
    facts["granularity"] = [gran_min.value, gran_rec.value]
    g = gran_min.value
    handle = c_ull()
    e2["cuMemCreate_unaligned"] = drv.cuMemCreate(
        ctypes.byref(handle), c_size_t(g + 1), ctypes.byref(prop), c_ull(0)
    )
    e2["cuMemCreate"] = drv.cuMemCreate(
        ctypes.byref(handle), c_size_t(2 * g), ctypes.byref(prop), c_ull(0)
    )
    va = CUdeviceptr()
    e2["cuMemAddressReserve"] = drv.cuMemAddressReserve(
        ctypes.byref(va), c_size_t(4 * g), c_size_t(0), CUdeviceptr(0), c_ull(0)
    )
    e2["range_reserved_unmapped"] = _range(drv, va.value)["result"]
    e2["attr_reserved_unmapped"] = _attr_width(drv, ATTR["MEMORY_TYPE"], va.value)["result"]
    e2["cuMemMap"] = drv.cuMemMap(
        CUdeviceptr(va.value + g), c_size_t(2 * g), c_size_t(0), handle, c_ull(0)
    )
    desc = CUmemAccessDesc()
    desc.location.type, desc.location.id, desc.flags = 1, 0, 3
    kinds_out["vmm_before_access"] = _describe(drv, va.value + g, 2 * g)
    e2["cuMemSetAccess"] = drv.cuMemSetAccess(
        CUdeviceptr(va.value + g), c_size_t(2 * g), ctypes.byref(desc), c_size_t(1)
    )
    kinds_out["vmm_mapped"] = _describe(drv, va.value + g, 2 * g)
    kinds_out["vmm_mapped_second_half"] = _describe(drv, va.value + 2 * g, 2 * g)
    e2["cuMemRelease_while_mapped"] = drv.cuMemRelease(handle)
    e2["cuMemUnmap"] = drv.cuMemUnmap(CUdeviceptr(va.value + g), c_size_t(2 * g))
    e2["range_after_unmap"] = _range(drv, va.value + g)["result"]
    e2["cuMemAddressFree"] = drv.cuMemAddressFree(va, c_size_t(4 * g))
    # IPC within one process
    drv.cuMemAlloc_v2(ctypes.byref(d), c_size_t(1 << 20))
    ipc = (ctypes.c_char * 64)()
    e2["cuIpcGetMemHandle"] = drv.cuIpcGetMemHandle(ipc, d)
    opened = CUdeviceptr()
    e2["cuIpcOpenMemHandle_same_process"] = drv.cuIpcOpenMemHandle_v2(
        ctypes.byref(opened), ipc, c_uint(1)
    )
    drv.cuMemFree_v2(d)
    # v1 (32-bit) entry point
    p32 = c_uint()
    e2["cuMemAlloc_v1"] = drv.cuMemAlloc(ctypes.byref(p32), c_uint(4096))
    e2["cuMemAlloc_v1_pointer_nonzero"] = p32.value != 0
    if e2["cuMemAlloc_v1"] == 0:
        e2["cuMemFree_v1"] = drv.cuMemFree(c_uint(p32.value))
    facts["edge2"] = e2
    facts["kinds"] = kinds_out
    facts["globals"] = _globals(drv, facts["device_name"])

    # --- cuGetProcAddress ---
    pa = {}
    for name, version, flags in [
        ("cuMemAlloc", 13000, 0),
        ("cuMemAlloc", 3020, 0),
        ("cuMemAlloc", 3010, 0),
        ("cuMemAlloc", 2000, 0),
        ("cuMemAlloc", 1000, 0),
        ("cuMemAlloc_v2", 13000, 0),
        ("cuMemAllocAsync", 13000, 2),
        ("cuMemAllocAsync", 13000, 1),
        ("cuMemAllocAsync", 11010, 0),
        ("cuMemcpy", 13000, 2),
        ("cuMemcpyHtoD", 13000, 2),
        ("cuStreamSynchronize", 13000, 2),
        ("cuCtxCreate", 13000, 0),
        ("cuCtxCreate", 12050, 0),
        ("cuCtxCreate", 11040, 0),
        ("cuGetProcAddress", 13000, 0),
        ("cuGetProcAddress", 11030, 0),
        ("cuMemFree", 13000, 0),
        ("cuIpcOpenMemHandle", 13000, 0),
        ("cuIpcOpenMemHandle", 10000, 0),
        ("cuMemHostRegister", 13000, 0),
        ("cuMemHostRegister", 6000, 0),
        ("cuNoSuchFunction", 13000, 0),
        ("cuMemAlloc", 13000, 4),
        ("cuMemAlloc", 13000, 3),
        ("cuMemAlloc", 99000, 0),
        ("cuInit", 13000, 0),
        ("cuMemAllocManaged", 13000, 2),
    ]:
        pa[f"{name}@{version}/{flags}"] = _proc(drv, name, version, flags)
    facts["proc_address"] = pa
    # v1 cuGetProcAddress (no status out-parameter) and v2 with a NULL status
    v1 = {}
    for name, version in [
        ("cuMemAlloc", 13000),
        ("cuNoSuchFunction", 13000),
        ("cuMemAlloc", 1000),
        ("cuMemAllocAsync", 11010),
    ]:
        pfn = c_void_p()
        v1[f"{name}@{version}"] = [
            drv.cuGetProcAddress(name.encode(), ctypes.byref(pfn), c_int(version), c_ull(0)),
            drv.symbol_name(pfn.value or 0),
        ]
        pfn = c_void_p()
        v1[f"{name}@{version}/v2-null-status"] = [
            drv.cuGetProcAddress_v2(
                name.encode(), ctypes.byref(pfn), c_int(version), c_ull(0), None
            ),
            drv.symbol_name(pfn.value or 0),
        ]
    facts["proc_address_v1"] = v1
    facts["legacy_v1"] = _legacy_v1(drv)
    drv.cuCtxSetCurrent(c_void_p(0))
    facts["after_fork"] = _after_fork(drv)
    return facts


def main(argv: list[str]) -> int:
    out = argv[1] if len(argv) > 1 else "-"
    lib = os.environ.get("MEMHOOK_PROBE_LIBCUDA", "libcuda.so.1")
    facts = probe(lib)
    text = json.dumps(facts, indent=1, sort_keys=True)
    if out == "-":
        print(text)
    else:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
