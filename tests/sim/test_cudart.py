"""The simulated CUDA runtime (libcudart.so.13 / libcudart_static.a).

tests/sim/fixtures/test_cudart.c exercises every runtime entry point against the
simulated driver; it is built twice, linked to the shared runtime and to the
static archive.  Other tests check the libraries' symbols, that the runtime
reaches the driver only through dlopen + dlsym("cuGetProcAddress_v2") +
cuGetProcAddress, and (when nvcc is installed) that the registration calls
nvcc's host code makes work against the simulator.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from memhook_testing import NativeBuild, run_checked

HERE = Path(__file__).resolve().parent
C_DIR = HERE / "fixtures"
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"

# A small arena keeps the out-of-memory checks cheap.
ARENA = "256M"

# The runtime entry points the simulator must export (NVIDIA's names).
EXPORTED = {
    "cudaMalloc", "cudaMallocManaged", "cudaMallocPitch", "cudaMallocAsync",
    "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync_ptsz",
    "cudaMallocHost", "cudaHostAlloc", "cudaFree", "cudaFreeAsync", "cudaFreeAsync_ptsz",
    "cudaFreeHost", "cudaGetSymbolAddress", "cudaGetSymbolSize", "cudaHostRegister",
    "cudaHostUnregister", "cudaGetErrorString", "cudaGetErrorName", "cudaGetLastError",
    "cudaPeekAtLastError", "cudaSetDevice", "cudaGetDevice", "cudaGetDeviceCount",
    "cudaDeviceSynchronize", "cudaDeviceReset", "cudaDriverGetVersion",
    "cudaRuntimeGetVersion", "cudaStreamCreate", "cudaStreamCreateWithFlags",
    "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz", "cudaStreamDestroy",
    "cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz",
    "cudaMemset", "cudaMemset_ptds", "cudaMemsetAsync", "cudaMemsetAsync_ptsz",
    "cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds", "cudaMemcpyFromSymbol",
    "cudaMemcpyFromSymbol_ptds", "cudaPointerGetAttributes", "cudaMemGetInfo",
    "cudaDeviceGetDefaultMemPool", "cudaMemPoolCreate", "cudaMemPoolDestroy",
    "__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
    "__cudaRegisterVar", "__cudaRegisterManagedVar", "__cudaRegisterFunction",
    "__cudaInitModule",
}

DRIVER_NAME = re.compile(r"^cu[A-Z]")


def _nm(*args: str) -> list[tuple[str, str, str]]:
    """(value, type, name) rows of `nm`; undefined symbols have value ''."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(["nm", *args], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((parts[0], parts[1], parts[2].split("@")[0]))
        elif len(parts) == 2:
            rows.append(("", parts[0], parts[1].split("@")[0]))
    return rows


@pytest.fixture(scope="module")
def programs(native: NativeBuild, c_test_dir: Path) -> dict[str, Path]:
    """test_cudart.c linked to the shared runtime and to the static one."""
    lib = native.sim_dir
    src = C_DIR / "test_cudart.c"
    return {
        "dynamic": native.compile(src, c_test_dir / "test_cudart_dynamic",
                                  extra=[f"-L{lib}", "-l:libcudart.so.13", f"-Wl,-rpath,{lib}",
                                         "-ldl", "-lpthread"]),
        "static": native.compile(src, c_test_dir / "test_cudart_static",
                                 extra=[str(lib / "libcudart_static.a"), "-ldl", "-lpthread"]),
    }


@pytest.mark.parametrize("link", ["dynamic", "static"])
def test_runtime_program(native: NativeBuild, programs: dict[str, Path], link: str) -> None:
    proc = native.run([str(programs[link])], env=native.env(MEMHOOK_SIM_DEVICE_MEMORY=ARENA))
    assert "test_cudart: 0 failure(s)" in proc.stdout
    mapped = {line.split(":", 1)[1].strip() for line in proc.stdout.splitlines()
              if line.startswith("cudart-mapping:")}
    if link == "dynamic":
        # The simulator's runtime, not one installed on the system.
        assert mapped == {str(native.sim_dir / "libcudart.so.13")}
    else:
        assert mapped == set()


@pytest.mark.parametrize("link", ["dynamic", "static"])
def test_runtime_without_a_usable_driver(native: NativeBuild, programs: dict[str, Path],
                                         tmp_path: Path, link: str) -> None:
    """A libcuda.so.1 without cuGetProcAddress_v2 is an insufficient driver."""
    stub = tmp_path / "stub.c"
    stub.write_text("int cuInit(unsigned int flags) { (void)flags; return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(stub), "-o", str(tmp_path / "libcuda.so.1"),
                    "-Wl,-soname,libcuda.so.1"], check=True)
    env = native.env()
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(tmp_path), env["LD_LIBRARY_PATH"]])
    proc = native.run([str(programs[link]), "nodriver"], env=env)
    assert "nodriver: ok" in proc.stdout


def test_runtime_without_any_driver(native: NativeBuild, programs: dict[str, Path],
                                    tmp_path: Path) -> None:
    """No libcuda.so.1 at all: cudaErrorInsufficientDriver as well."""
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout \
        if shutil.which("ldconfig") else ""
    if "libcuda.so.1" in cache:
        pytest.skip("a system libcuda.so.1 is installed; the loader would find it")
    env = native.env()
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    proc = native.run([str(programs["static"]), "nodriver"], env=env)
    assert "nodriver: ok" in proc.stdout


def test_shared_library_symbols(native: NativeBuild) -> None:
    lib = native.sim_dir / "libcudart.so.13"
    rows = _nm("-D", str(lib))
    defined = {name: value for value, kind, name in rows if kind in "TW" and value}
    undefined = {name for value, kind, name in rows if kind in "Uw"}
    missing = EXPORTED - set(defined)
    assert not missing, f"not exported: {sorted(missing)}"
    # Nothing but the runtime API leaks out of the library.
    extra = {n for n in defined if not (n.startswith("cuda") or n.startswith("__cuda"))}
    assert not extra, f"unexpected exports: {sorted(extra)}"
    # Each entry point is a distinct function (hooks patch them one by one).
    by_address: dict[str, list[str]] = {}
    for name, value in defined.items():
        by_address.setdefault(value, []).append(name)
    shared = [names for names in by_address.values() if len(names) > 1]
    assert not shared, f"entry points sharing an address: {shared}"
    # The driver is never linked: no cu* imports, no DT_NEEDED libcuda.
    assert not {n for n in undefined if DRIVER_NAME.match(n)}
    assert "dlvsym" not in undefined
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout \
        if shutil.which("readelf") else ""
    if dyn:
        assert "Shared library: [libcuda" not in dyn
        assert "Library soname: [libcudart.so.13]" in dyn
        shim = subprocess.run(["readelf", "-d", str(native.sim_dir / "libcudart.so")],
                              capture_output=True, text=True).stdout
        assert "Shared library: [libcudart.so.13]" in shim


def test_static_archive_symbols(native: NativeBuild) -> None:
    """Every global symbol of the archive is API or memhook_cudart_-prefixed,
    so nothing collides with the program it is linked into."""
    rows = _nm("-g", str(native.sim_dir / "libcudart_static.a"))
    defined = {name for value, kind, name in rows if value and kind not in "Uw"}
    undefined = {name for value, kind, name in rows if kind in "Uw"}
    assert EXPORTED <= defined
    # (ASan adds its own __odr_asan.* / __asan_* companions in sanitizer builds.)
    stray = {n for n in defined if not n.startswith(("cuda", "__cuda", "memhook_cudart_",
                                                     "__odr_asan", "__asan_"))}
    assert not stray, f"unprefixed internal symbols: {sorted(stray)}"
    assert not {n for n in undefined if DRIVER_NAME.match(n)}


@pytest.mark.parametrize("link", ["dynamic", "static"])
def test_driver_reached_only_through_get_proc_address(native: NativeBuild,
                                                      programs: dict[str, Path],
                                                      c_test_dir: Path, tmp_path: Path,
                                                      link: str) -> None:
    """With a dlsym spy preloaded, the only cu* name anyone but the driver
    itself looks up is cuGetProcAddress_v2, and the runtime does look it up."""
    if native.sanitize:
        pytest.skip("the dlsym spy cannot be preloaded ahead of the sanitizer runtime")
    spy = c_test_dir / "dlsym_spy.so"
    if not spy.exists():
        subprocess.run(["cc", "-shared", "-fPIC", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        str(C_DIR / "dlsym_spy.c"), "-o", str(spy), "-ldl"], check=True)
    log = tmp_path / "dlsym.log"
    env = native.env(MEMHOOK_SIM_DEVICE_MEMORY=ARENA, MEMHOOK_DLSYM_LOG=str(log),
                     LD_PRELOAD=str(spy))
    native.run([str(programs[link])], env=env)
    lookups = [line.split("\t") for line in log.read_text().splitlines()]
    driver = str(native.libcuda)
    by_others = {name for name, who in lookups if DRIVER_NAME.match(name) and who != driver}
    assert by_others == {"cuGetProcAddress_v2"}
    runtime = str(native.sim_dir / "libcudart.so.13") if link == "dynamic" \
        else str(programs[link])
    assert ["cuGetProcAddress_v2", runtime] in lookups


CXX_PROGRAM = r"""
#include "cudart_sim.h"
#include <cstdio>
#include <cstring>

static char shadow[32];
static char fatbin[8];

int main()
{
    void **h = __cudaRegisterFatBinary(fatbin);
    __cudaRegisterVar(h, shadow, (char *)"v", "v", 0, sizeof(shadow), 0, 0);
    __cudaRegisterFatBinaryEnd(h);
    void *p = nullptr;
    size_t size = 0;
    // NVIDIA's C++ overloads take the symbol itself.
    if (cudaGetSymbolAddress(&p, shadow) != cudaSuccess || p == nullptr) return 1;
    if (cudaGetSymbolSize(&size, shadow) != cudaSuccess || size != sizeof(shadow)) return 2;
    const char msg[] = "hello";
    if (cudaMemcpyToSymbol(shadow, msg, sizeof(msg)) != cudaSuccess) return 3;  // defaults
    char back[8] = {0};
    if (cudaMemcpyFromSymbol(back, shadow, sizeof(msg)) != cudaSuccess) return 4;
    if (std::strcmp(back, "hello") != 0) return 5;
    void *d = nullptr;
    if (cudaMalloc(&d, 64) != cudaSuccess) return 6;
    if (cudaMemsetAsync(d, 0, 64) != cudaSuccess) return 7;       // default stream
    if (cudaMemcpyAsync(back, d, 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 8;
    if (cudaMallocManaged(&d, 64) != cudaSuccess) return 9;       // default flags
    std::puts("cxx ok");
    return 0;
}
"""


def test_header_from_cxx(native: NativeBuild, c_test_dir: Path) -> None:
    """The header works from C++, with NVIDIA's default arguments and symbol
    overloads."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = c_test_dir / "header_cxx.cc"
    src.write_text(CXX_PROGRAM)
    flags = [f for f in native.cflags() if not f.startswith("-std=")]
    exe = c_test_dir / "header_cxx"
    cmd = [cxx, "-std=c++11", *flags, str(src), "-o", str(exe),
           str(native.sim_dir / "libcudart_static.a"), "-ldl", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "cxx ok" in native.run([str(exe)]).stdout


NVCC_SOURCE = r"""
__device__ int x[16];
__constant__ float cf[4];
__managed__ double mv[8];
extern "C" void *host_x(void) { return (void *)&x; }
extern "C" void *host_cf(void) { return (void *)&cf; }
extern "C" double *host_mv(void) { return mv; }   /* initialises the managed runtime */
"""

NVCC_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "cudart_sim.h"
void *host_x(void);
void *host_cf(void);
double *host_mv(void);

int main(void)
{
    void *p = NULL;
    size_t size = 0;
    struct cudaPointerAttributes a;
    if (cudaGetSymbolAddress(&p, host_x()) != cudaSuccess || p == NULL) return 1;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice) return 2;
    if (cudaGetSymbolSize(&size, host_x()) != cudaSuccess || size != 16 * sizeof(int)) return 3;
    if (cudaGetSymbolSize(&size, host_cf()) != cudaSuccess || size != 4 * sizeof(float)) return 4;
    int v[16], w[16];
    for (int i = 0; i < 16; i++) v[i] = i * i;
    if (cudaMemcpyToSymbol(host_x(), v, sizeof(v), 0, cudaMemcpyHostToDevice)) return 5;
    if (cudaMemcpy(w, p, sizeof(w), cudaMemcpyDeviceToHost) || memcmp(v, w, sizeof(v))) return 6;
    double *m = host_mv();
    if (m == NULL) return 7;
    if (cudaPointerGetAttributes(&a, m) != cudaSuccess || a.type != cudaMemoryTypeManaged) return 8;
    m[2] = 1.5;
    void *pm = NULL;
    if (cudaGetSymbolAddress(&pm, m) != cudaSuccess || pm != (void *)m) return 9;
    puts("nvcc ok");
    return 0;
}
"""


def test_nvcc_registration(native: NativeBuild, c_test_dir: Path) -> None:
    """A real nvcc-compiled object registers its variables with the simulated
    runtime, and cudaGetSymbolAddress returns simulated device memory."""
    if not NVCC.exists():
        pytest.skip(f"nvcc not found at {NVCC}")
    cu = c_test_dir / "nvcc_vars.cu"
    cu.write_text(NVCC_SOURCE)
    obj = c_test_dir / "nvcc_vars.o"
    proc = subprocess.run([str(NVCC), "-c", str(cu), "-o", str(obj)], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"nvcc could not compile here:\n{proc.stderr}")
    undefined = {name for value, kind, name in _nm(str(obj)) if kind == "U"}
    assert "__cudaRegisterFatBinary" in undefined and "__cudaRegisterVar" in undefined
    main = c_test_dir / "nvcc_main.c"
    main.write_text(NVCC_MAIN)
    exe = native.compile([main, obj], c_test_dir / "nvcc_vars",
                         extra=[str(native.sim_dir / "libcudart_static.a"), "-ldl",
                                "-lpthread"])
    proc = run_checked([str(exe)], env=native.env())
    assert "nvcc ok" in proc.stdout
