"""The cuGetProcAddress table of the simulated driver (procaddress.c).

(a) every row's introduction version and per-thread flag match the PFN_*
    typedefs of NVIDIA's cudaTypedefs.h (when a CUDA toolkit is installed),
    every variant that header has for a covered entry point has a row, and
    the exported spellings follow the driver's naming;
(b) the built libcuda.so.1 exports exactly the table's symbols, each a
    distinct function, and the compiled table answers exactly as parsed;
(c) every entry point of both halves resolves through cuGetProcAddress_v2
    for CUDA 13.0 with the default and the per-thread flag.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from pathlib import Path

import pytest
from memhook_testing import NativeBuild, cached_native_build

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
PROCADDRESS_C = CSRC / "sim" / "driver" / "procaddress.c"
CUDA_TYPEDEFS = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cudaTypedefs.h"

# What each half of the simulator exports (the lists).
MEMORY_HALF = """
cuMemAlloc cuMemAlloc_v2 cuMemAllocPitch cuMemAllocPitch_v2 cuMemAllocManaged cuMemFree
cuMemFree_v2 cuMemAllocHost cuMemAllocHost_v2 cuMemHostAlloc cuMemFreeHost cuMemHostRegister
cuMemHostRegister_v2 cuMemHostUnregister cuMemHostGetDevicePointer cuMemHostGetDevicePointer_v2
cuMemHostGetFlags cuMemGetAddressRange cuMemGetAddressRange_v2 cuMemGetInfo cuMemGetInfo_v2
cuMemGetAllocationGranularity cuMemCreate cuMemRelease cuMemAddressReserve cuMemAddressFree
cuMemMap cuMemUnmap cuMemSetAccess cuMemGetAccess cuMemGetAllocationPropertiesFromHandle
cuMemRetainAllocationHandle cuMemPoolCreate cuMemPoolDestroy cuDeviceGetDefaultMemPool
cuDeviceGetMemPool cuDeviceSetMemPool cuMemPoolSetAttribute cuMemPoolGetAttribute
cuMemPoolTrimTo cuMemAllocAsync cuMemAllocAsync_ptsz cuMemFreeAsync cuMemFreeAsync_ptsz
cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuIpcGetMemHandle cuIpcOpenMemHandle
cuIpcOpenMemHandle_v2 cuIpcCloseMemHandle cuPointerGetAttribute cuPointerGetAttributes
cuPointerSetAttribute cuMemcpy cuMemcpy_ptds cuMemcpyAsync cuMemcpyAsync_ptsz
cuMemcpyHtoD cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds cuMemcpyDtoH cuMemcpyDtoH_v2
cuMemcpyDtoH_v2_ptds cuMemcpyDtoD cuMemcpyDtoD_v2 cuMemcpyDtoD_v2_ptds cuMemcpyHtoDAsync
cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz cuMemcpyDtoHAsync cuMemcpyDtoHAsync_v2
cuMemcpyDtoHAsync_v2_ptsz cuMemcpyDtoDAsync cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz
cuMemsetD8 cuMemsetD8_v2 cuMemsetD8_v2_ptds cuMemsetD16 cuMemsetD16_v2 cuMemsetD16_v2_ptds
cuMemsetD32 cuMemsetD32_v2 cuMemsetD32_v2_ptds cuMemsetD8Async cuMemsetD8Async_ptsz
cuMemsetD16Async cuMemsetD16Async_ptsz cuMemsetD32Async cuMemsetD32Async_ptsz
""".split()

CONTROL_HALF = """
cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuDeviceGetName cuDeviceGetUuid
cuDeviceGetUuid_v2 cuDeviceTotalMem cuDeviceTotalMem_v2 cuDeviceGetAttribute
cuDeviceGetPCIBusId cuDeviceComputeCapability cuDeviceCanAccessPeer
cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
cuDevicePrimaryCtxReset cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxGetState
cuDevicePrimaryCtxSetFlags cuDevicePrimaryCtxSetFlags_v2 cuCtxCreate cuCtxCreate_v2
cuCtxCreate_v3 cuCtxCreate_v4 cuCtxDestroy cuCtxDestroy_v2 cuCtxGetCurrent cuCtxSetCurrent
cuCtxPushCurrent cuCtxPushCurrent_v2 cuCtxPopCurrent cuCtxPopCurrent_v2 cuCtxGetDevice
cuCtxGetDevice_v2 cuCtxSynchronize cuCtxSynchronize_v2 cuCtxGetFlags cuCtxGetId
cuCtxGetApiVersion cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy
cuStreamDestroy_v2 cuStreamSynchronize cuStreamSynchronize_ptsz cuStreamQuery
cuStreamQuery_ptsz cuStreamGetCtx cuStreamGetCtx_ptsz cuStreamGetCtx_v2
cuStreamGetCtx_v2_ptsz cuStreamGetFlags cuStreamGetFlags_ptsz cuGetErrorName
cuGetErrorString cuModuleLoad cuModuleLoadData cuModuleUnload cuModuleGetGlobal
cuModuleGetGlobal_v2 cuLibraryLoadData cuLibraryLoadFromFile cuLibraryUnload
cuLibraryGetGlobal cuLibraryGetManaged cuLibraryGetModule cuGetProcAddress cuGetProcAddress_v2
""".split()

ROW_RE = re.compile(r'^\s*ROW\("(\w+)",\s*(\w+),\s*(\d+),\s*([01])\),', re.M)
PFN_RE = re.compile(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\b")

PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
LEGACY = 1      # CU_GET_PROC_ADDRESS_LEGACY_STREAM


def base_of(symbol: str) -> str:
    return re.sub(r"_v\d+$", "", re.sub(r"_pt(ds|sz)$", "", symbol))


def table() -> list[tuple[str, str, int, bool]]:
    rows = [(b, s, int(v), pt == "1") for b, s, v, pt in ROW_RE.findall(PROCADDRESS_C.read_text())]
    assert rows, "no ROW(...) lines found in procaddress.c"
    return rows


def test_table_is_the_two_halves():
    rows = table()
    symbols = [s for _, s, _, _ in rows]
    assert len(symbols) == len(set(symbols)), "a symbol has two rows"
    assert sorted(symbols) == sorted(MEMORY_HALF + CONTROL_HALF)
    for base, sym, _, pt in rows:
        assert base_of(sym) == base, sym
        assert pt == sym.endswith(("_ptds", "_ptsz")), sym


def test_rows_match_cuda_typedefs():
    if not CUDA_TYPEDEFS.is_file():
        pytest.skip(f"{CUDA_TYPEDEFS} not present (no CUDA toolkit)")
    pfns: dict[str, set[tuple[int, str]]] = {}
    for base, version, suffix in PFN_RE.findall(CUDA_TYPEDEFS.read_text()):
        pfns.setdefault(base, set()).add((int(version), suffix))
    rows = table()
    by_base: dict[str, list[tuple[str, int, bool]]] = {}
    for base, sym, version, pt in rows:
        by_base.setdefault(base, []).append((sym, version, pt))
        suffix = sym[-5:] if pt else ""
        assert (version, suffix) in pfns.get(base, set()), (
            f"{sym}: no PFN_{base}_v{version}{suffix} in cudaTypedefs.h")
    for base, variants in by_base.items():
        # every variant the header knows for an entry point we cover has a row
        assert {(v, s[-5:] if pt else "") for s, v, pt in variants} == pfns[base], base
        # naming: ABIs in version order are base, base_v2, base_v3...; a
        # per-thread variant is the spelling it shares an ABI with + suffix
        legacy = sorted((v, s) for s, v, pt in variants if not pt)
        for i, (v, s) in enumerate(legacy):
            assert s == (base if i == 0 else f"{base}_v{i + 1}"), (s, v)
        for s, v, pt in variants:
            if pt:
                twin = [ls for lv, ls in legacy if lv <= v][-1]
                assert s == twin + s[-5:], s


@pytest.fixture(scope="module")
def libcuda(native: NativeBuild, build_cache: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's libcuda.so.1, copied aside: this process loads a copy
    of its own, apart from any the session's other tests loaded.  (It is
    loaded into this interpreter, so under a sanitizer session a plain build.)"""
    plain = cached_native_build(build_cache, "") if native.sanitize else native
    path = tmp_path_factory.mktemp("procaddress") / "libcuda.so.1"
    shutil.copyfile(plain.libcuda, path)
    return path


def _exported_functions(path: Path) -> dict[str, int]:
    elffile = pytest.importorskip("elftools.elf.elffile")
    with open(path, "rb") as f:
        elf = elffile.ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        found = {}
        for sym in dynsym.iter_symbols():
            if (sym["st_info"]["type"] == "STT_FUNC"
                    and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                    and sym["st_shndx"] != "SHN_UNDEF"):
                found[sym.name] = sym["st_value"]
        return found


def test_exports_equal_table(libcuda):
    exported = _exported_functions(libcuda)
    extra = sorted(n for n in exported if not n.startswith("cu") and n not in ("_init", "_fini"))
    assert not extra, f"exported non-CUDA functions: {extra}"
    cu = {n: a for n, a in exported.items() if n.startswith("cu")}
    symbols = {s for _, s, _, _ in table()}
    assert set(cu) - symbols == set(), "exported without a row"
    assert symbols - set(cu) == set(), "row without an export"
    # each variant is its own function (memhook maps addresses back with dladdr)
    assert len(set(cu.values())) == len(cu)


def _proc(lib: ctypes.CDLL, name: str, version: int, flags: int) -> tuple[int, int, int | None]:
    fn = lib.cuGetProcAddress_v2
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                   ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    out = ctypes.c_void_p()
    status = ctypes.c_int(-1)
    rc = fn(name.encode(), ctypes.byref(out), version, flags, ctypes.byref(status))
    return rc, status.value, out.value


def test_compiled_table_answers_as_parsed(libcuda):
    lib = ctypes.CDLL(str(libcuda))
    for base, sym, version, pt in table():
        rc, status, addr = _proc(lib, base, version, PER_THREAD if pt else LEGACY)
        want = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value
        assert (rc, status) == (0, 0), (base, version, pt)
        assert addr == want, f"{base}@{version} pt={pt} is not {sym}"
    firsts: dict[str, int] = {}
    for base, _, version, _ in table():
        firsts[base] = min(version, firsts.get(base, version))
    for base, first in firsts.items():
        # with a status pointer the recorded driver succeeds and reports why
        rc, status, addr = _proc(lib, base, first - 1, 0)
        assert (rc, status, addr) == (0, 2, None), base


@pytest.mark.parametrize("flags", [0, PER_THREAD])
def test_every_name_resolves(libcuda, flags):
    lib = ctypes.CDLL(str(libcuda))
    for name in sorted({base_of(s) for s in MEMORY_HALF + CONTROL_HALF}):
        rc, status, addr = _proc(lib, name, 13000, flags)
        assert rc == 0 and status == 0 and addr, (name, flags, rc, status)
    rc, status, addr = _proc(lib, "cuNoSuchThing", 13000, flags)
    assert (rc, status, addr) == (0, 1, None)
